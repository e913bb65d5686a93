"""What the analyzer's NDJSON reader (simd-json, in polars) reads of JSON text where Python's parsers
read otherwise: the analyzer tells the lines its reader refuses from the ones it reads (`analyzer.load`)
and reads a payload's lone surrogate escapes as their text (`analyzer.messages`), and the live counters
(`addon.metrics`) read a message as the analyzer later reads it.

A module of its own: the addon cannot import the analyzer (polars in mitmproxy).
"""

from __future__ import annotations

import json
import re
import sys
from decimal import Decimal
from typing import Any, Final

import orjson

MAX_DEPTH: Final = 1024
"""The deepest nesting the reader reads (simd-json: an object at 1024 levels is read, at 1025 refused)."""
ESCAPE: Final = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)")
"""A backslash escape of JSON text; group 1 is a `\\u` escape's code."""
SURROGATE: Final = re.compile(r"\\u[dD][89a-fA-F]")
"""A surrogate's escape, high or low, or the same text after an escaped backslash."""
NUMBER_TEXT: Final = r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
"""A number's JSON text (leading zeros allowed): how the analyzer and the live counters tell an id or a
string error code that reads as a number (`"-32022"`), one pattern so that they tell it alike."""
BEYOND_DOUBLE: Final = re.compile(r"[0-9]{309}|[0-9][eE]\+?[0-9]{3}")
"""Where JSON text may hold a number beyond a double's range (`1e400`, 309 digits and more), which
orjson and the reader refuse (a few texts that hold none match too, such as `"e100"` in a string)."""


INT_DIGITS: Final = 4300
"""Digits an integer written otherwise is spelled out to at most: an id `1e999999999` must not become a
gigabyte of zeros, and no integer id has more (the standard library's `json` refuses it by default,
`sys.get_int_max_str_digits`)."""


def exact_number_text(value: Decimal) -> str | None:
    """The number `value` as an id's key text, one text for each value however it was written: its
    digits without trailing zeros and its exponent, an integral one as its digits (up to `INT_DIGITS`),
    as orjson writes an int; None for NaN or infinity, which JSON does not write. How the live counters
    key every number id, and the analyzer one beyond a double's range (`1e400` and `10e399` one id)."""
    sign, digits, exponent = value.as_tuple()
    written = "".join(map(str, digits)).rstrip("0")
    if not written:
        return "0"
    if not isinstance(exponent, int):
        return None
    exponent += len(digits) - len(written)
    minus = "-" if sign else ""
    if 0 <= exponent <= INT_DIGITS - len(written):
        return f"{minus}{written}{'0' * exponent}"
    return f"{minus}{written}e{exponent}"


def refuse_constant(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity: the reader refuses them


def finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(text)  # the reader refuses a number beyond a double's range
    return value


def surrogates_read(text: str) -> bool:
    """Whether the NDJSON reader itself reads the `\\u` escapes of `text` (valid JSON): a high surrogate
    followed by another escape must be followed by a low one; a low one must follow a high one. A high
    one followed by anything else is read (as U+0000). The analyzer writes every lone one as its text
    before the reader reads a line (`analyzer.messages.lone_surrogates_as_text`), so that it reads them
    all; this tells what the reader refuses of a text as it stands."""
    escapes = list(ESCAPE.finditer(text))
    paired = False
    for n, m in enumerate(escapes):
        if paired:
            paired = False
            continue
        if m.group(1) is None:
            continue
        code = int(m.group(1), 16)
        if 0xDC00 <= code < 0xE000:
            return False
        if 0xD800 <= code < 0xDC00 and n + 1 < len(escapes):
            after = escapes[n + 1]
            if after.start() == m.end() and after.group(1) is not None:
                if not 0xDC00 <= int(after.group(1), 16) < 0xE000:
                    return False
                paired = True
    return True


def loads(text: str | bytes, *, message: bool = False) -> Any:
    """`text` as orjson reads it or, when it holds a lone surrogate's escape (`"c\\ud800"`, a low one
    alone as `"c\\udc00"`, a high one before another escape as `"c\\ud800\\u0041"`: valid JSON which
    orjson refuses, and the analyzer reads as the escape's text), as the standard library reads it: each
    such escape a surrogate of its own. Raises `ValueError` for what orjson refuses otherwise, as the
    reader does (a constant, a number beyond a double, nesting too deep). Rare, and off the common
    path: the standard library reads only a text orjson refused.

    `message`: `text` is a message's payload, whose numbers beyond a double (`1e400`, 400 digits) the
    analyzer reads (`analyzer.messages`, as the SDKs do): read, as an `int` when written as one, else
    as an infinite float."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            decoded = text.decode("utf-8") if isinstance(text, bytes) else text  # a BOM stays, and is refused
        except UnicodeDecodeError:
            raise ValueError("not UTF-8") from None
        beyond = message and BEYOND_DOUBLE.search(decoded) is not None
        if not beyond and not SURROGATE.search(decoded):
            raise
    try:
        if beyond:
            return json.loads(decoded, parse_constant=refuse_constant, parse_int=_long_int)
        return json.loads(decoded, parse_constant=refuse_constant, parse_float=finite, parse_int=_int)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _long_int(text: str) -> int | float:
    # an integer of more digits than `int` reads from text by default (4300) as the infinity it is to a double
    return int(text) if len(text) <= sys.get_int_max_str_digits() else float(text)


def _int(text: str) -> int:
    finite(text)  # as the reader, which reads an integer as a double past 64 bits
    return int(text)
