"""Command-line values coerced without pydantic, with typer's results and typer's error messages.

typer 0.29 coerces every parameter's value, given or default, through a pydantic `TypeAdapter`
(`typer._adapters`). Importing pydantic and building the adapters costs each `erascope` run about
as many instructions as importing polars (issue 20: import only what a command uses). The values
the commands take are plain — text, flags, numbers, paths, choices, lists of them — and typer's own
pydantic-free helpers (`coerce_cli_choice`, `coerce_cli_path`) do the checks that matter for
them. A value this module does not take as plain (another type, a number written another way, a
value out of range, a bad choice) goes to typer's own coercion, which then imports pydantic and
gives typer's result or typer's error message: the fast path only ever returns what typer would.
Two departures: a float that is not finite or beyond ±1e9 (`analyzer.numbers`) is refused with a
`BadParameter`, where typer takes `nan`, `inf` and `1e300`; and so is an empty path, which typer takes
as `Path("")`, the current directory (`addon.errors.EMPTY_PATH`).

The coupling is to typer's parameter internals (`RuntimeParam`, `get_runtime_param`), pinned by
the project's `typer>=0.29,<0.30`; `tests/test_cli_values.py` checks each kind against typer's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Final, get_args, get_origin

from typer._click import Context
from typer._click.exceptions import BadParameter
from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
from typer._param_types import coerce_cli_choice, coerce_cli_path, routes_to_path
from typer.core import TyperArgument, TyperOption

from addon.errors import EMPTY_PATH
from analyzer.numbers import IN_RANGE, in_range

_INT: Final = re.compile(r"-?[0-9]+")
"""Integers written so that `int()` and pydantic read them alike (no sign `+`, `_`, blanks)."""
_FLOAT: Final = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
"""Decimals written so that `float()` and pydantic read them alike (no exponents, `inf`, `_`)."""

Leaf = Callable[[Any, Any, Context], Any]
"""Coerces one value (param, ctx given for typer's helpers); raises `_NotPlain` to defer to typer."""


class _NotPlain(Exception):
    """The value is not one this module coerces: typer's own coercion takes it."""


def _text(value: Any, _param: Any, _ctx: Context) -> Any:
    if isinstance(value, str):
        return value
    raise _NotPlain


def _flag(value: Any, _param: Any, _ctx: Context) -> Any:
    if isinstance(value, bool):
        return value
    raise _NotPlain  # a flag's value given as text: typer's own reads it


def _number(kind: type[Any], pattern: re.Pattern[str], low: float | None, high: float | None) -> Leaf:
    def coerce(value: Any, _param: Any, _ctx: Context) -> Any:
        # under 100 digits: int() refuses long ones
        written = isinstance(value, str) and pattern.fullmatch(value) is not None and len(value) < 100
        given = type(value) is int or (kind is float and type(value) is float)
        if not (written or given):
            raise _NotPlain
        number = kind(value)
        if (low is not None and number < low) or (high is not None and number > high):
            raise _NotPlain  # typer's message names the bound
        return number

    return coerce


def _choice(descriptor: TypeDescriptor, annotation: Any) -> Leaf:
    choices, case_sensitive = tuple(annotation), descriptor.case_sensitive

    def coerce(value: Any, _param: Any, ctx: Context) -> Any:
        try:
            return coerce_cli_choice(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)
        except ValueError:
            raise _NotPlain from None

    return coerce


def _path(descriptor: TypeDescriptor, annotation: Any) -> Leaf:
    info = descriptor.parameter_info
    path_type = info.path_type or annotation

    def coerce(value: Any, param: Any, ctx: Context) -> Any:
        if not isinstance(value, (str, Path)):
            raise _NotPlain
        if value == "":
            raise BadParameter(EMPTY_PATH, ctx=ctx, param=param)
        try:
            return coerce_cli_path(path_type(value), info, path_type=path_type, param=param, ctx=ctx)
        except Exception:
            raise _NotPlain from None  # the message names the value as typed: typer's own gives it

    return coerce


def _leaf(descriptor: TypeDescriptor, annotation: Any) -> Leaf | None:
    """The plain coercion of one value of `annotation`, or None when typer's own is needed."""
    info = descriptor.parameter_info
    if info.parser is not None or info.clamp:
        return None
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _choice(descriptor, annotation)
    if annotation is str:
        return _text
    if annotation is bool:
        return _flag
    if annotation is int or annotation is float:
        return _number(annotation, _INT if annotation is int else _FLOAT, info.min, info.max)
    path_type = info.path_type or annotation
    if isinstance(path_type, type) and issubclass(path_type, Path) and routes_to_path(annotation, info):
        return _path(descriptor, annotation)
    return None


@dataclass(frozen=True)
class _PlainParam(RuntimeParam):
    """A parameter's coercion: plain values here, the rest by typer's (built when first needed)."""

    descriptor: TypeDescriptor
    leaf: Leaf
    many: bool
    bounded: bool = False
    """A float: typer's own also takes `nan`, `inf` and `1e300`, which no option of erascope can use."""

    def _coerce_value(self, value: Any, param: Any, ctx: Context) -> Any:
        coerced = self._coerce(value, param, ctx)
        if self.bounded:
            for number in coerced if self.many else (coerced,):
                if not in_range(number):
                    raise BadParameter(f"{number!r} is not {IN_RANGE}.", ctx=ctx, param=param)
        return coerced

    def _coerce(self, value: Any, param: Any, ctx: Context) -> Any:
        try:
            if not self.many:
                return self.leaf(value, param, ctx)
            if isinstance(value, (list, tuple)):
                return [self.leaf(item, param, ctx) for item in value]
        except _NotPlain:
            pass
        return build_runtime_param(self.descriptor)._coerce_value(value, param=param, ctx=ctx)


def runtime_param(descriptor: TypeDescriptor) -> RuntimeParam:
    """The coercion of a parameter of this type: plain where it can be, typer's otherwise."""
    if descriptor.file_annotation is None:
        annotation, many = descriptor.annotation, get_origin(descriptor.annotation) is list
        if many:
            annotation = get_args(annotation)[0]
        if get_origin(annotation) is None and (leaf := _leaf(descriptor, annotation)) is not None:
            return _PlainParam(
                parameter_info=descriptor.parameter_info,
                annotation=descriptor.annotation,
                descriptor=descriptor,
                leaf=leaf,
                many=many,
                bounded=annotation is float,
            )
    return build_runtime_param(descriptor)


def _get_runtime_param(self: Any) -> RuntimeParam:
    # typer's `_TyperParameter.get_runtime_param`, with `runtime_param` for typer's `build_runtime_param`
    if self._runtime_param is None:
        self._runtime_param = runtime_param(self.type_descriptor)
    return self._runtime_param


class PlainOption(TyperOption):
    """A typer option whose plain values skip pydantic."""

    get_runtime_param = _get_runtime_param


class PlainArgument(TyperArgument):
    """A typer argument whose plain values skip pydantic."""

    get_runtime_param = _get_runtime_param


def plain_values(params: list[Any]) -> list[Any]:
    """A command's parameters (from `get_params`), typer's option and argument classes made the
    plain-values ones in place; subclasses of those are left as they are."""
    for param in params:
        if type(param) is TyperOption:
            param.__class__ = PlainOption
        elif type(param) is TyperArgument:
            param.__class__ = PlainArgument
    return params
