"""Text from captures and file names made safe to write to a terminal (`visible`).

Kept apart from `analyzer.report` so that the CLI's error path and `analyzer.verify` can use it
without importing polars.
"""

from __future__ import annotations

import re
from typing import Final

_INVISIBLE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
"""What a terminal or an editor acts on instead of showing: C0 and C1 controls (ESC and CSI start
escape sequences), DEL, bidi controls and line separators (they reorder or break what follows), and
lone surrogates (UTF-8 cannot hold them)."""
_NAMED_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    c = m[0]
    return _NAMED_ESCAPES.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def visible(text: str) -> str:
    r"""`text` with every character a terminal would act on written as an escape: `\x1b`, `\n`,
    `\u202e`, `\udcff`. Everything else (other scripts, emoji) is kept as it is."""
    return _INVISIBLE.sub(_escape, text)


_JSON_INVISIBLE: Final = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
"""What JSON writers leave raw (they escape only C0 controls) that a terminal still acts on: DEL, C1
controls (U+009B is CSI), bidi controls and line separators."""


def json_visible(text: str) -> str:
    r"""JSON text with every character `_JSON_INVISIBLE` matches written as its `\uXXXX` escape: the
    same document for a JSON reader (such characters only stand inside strings), inert on a terminal."""
    return _JSON_INVISIBLE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)
