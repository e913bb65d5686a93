"""Strings made safe throughout a value before it is written: lone surrogates (file names and payloads
read with surrogate escapes) that JSON and UTF-8 cannot hold, or what a terminal would act on."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from enum import Enum
from typing import Any, Final

import polars as pl

_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def valid_unicode(text: str) -> str:
    """`text` with lone surrogates (which UTF-8 cannot hold) replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def scrubbed(value: Any, fix: Callable[[str], str]) -> Any:
    """`value` with `fix` applied to every string inside it (dataclasses, lists, tuples, dicts, frames)."""
    if isinstance(value, Enum):
        return value
    if isinstance(value, str):
        return fix(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: scrubbed(getattr(value, f.name), fix) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(scrubbed(v, fix) for v in value))
    if isinstance(value, list | tuple):
        return type(value)(scrubbed(v, fix) for v in value)
    if isinstance(value, dict):
        return {scrubbed(k, fix): scrubbed(v, fix) for k, v in value.items()}
    if isinstance(value, pl.DataFrame):
        return pl.DataFrame([_series(s, fix) for s in value.get_columns()])
    return value


def _series(s: pl.Series, fix: Callable[[str], str]) -> pl.Series:
    dtype = s.dtype
    inner = dtype.inner if isinstance(dtype, pl.List) else None
    if dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum):
        return pl.Series(s.name, [scrubbed(v, fix) for v in s.to_list()], dtype=pl.String)
    if inner is not None and (inner in (pl.String, pl.Categorical) or isinstance(inner, pl.Enum)):
        return pl.Series(s.name, [scrubbed(v, fix) for v in s.to_list()], dtype=pl.List(pl.String))
    return s
