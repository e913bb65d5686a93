"""What the analyzer's NDJSON reader (simd-json, in polars) reads of JSON text where Python's parsers
read otherwise: the analyzer tells the lines its reader refuses from the ones it reads (`analyzer.load`)
and reads a payload's lone surrogate escapes as their text (`analyzer.messages`), and the live counters
(`addon.metrics`) read a message as the analyzer later reads it.

A module of its own: the addon cannot import the analyzer (polars in mitmproxy).
"""

from __future__ import annotations

import re
from typing import Any, Final

MAX_DEPTH: Final = 1024
"""The deepest nesting the reader reads (simd-json: an object at 1024 levels is read, at 1025 refused)."""
ESCAPE: Final = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)")
"""A backslash escape of JSON text; group 1 is a `\\u` escape's code."""
HIGH_SURROGATE: Final = re.compile(r"\\u[dD][89abAB]")
"""A high surrogate's escape, or the same text after an escaped backslash (`surrogates_read` tells
them apart)."""


def refuse_constant(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity: the reader refuses them


def finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(text)  # the reader refuses a number beyond a double's range
    return value


def surrogates_read(text: str) -> bool:
    """Whether the reader reads the `\\u` escapes of `text` (valid JSON): a high surrogate followed by
    another escape must be followed by a low one; a low one must follow a high one. A high one followed
    by anything else is read (as the reader reads it, not as a character)."""
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
