"""Text from captures and file names made safe to write to a terminal (`visible`).

Kept apart from `analyzer.report` so that the CLI's error path and `analyzer.verify` can use it
without importing polars.
"""

from __future__ import annotations

import re
from typing import Final

from addon.characters import HIDDEN_CHARS, JOINER_CHARS, SELECTOR_CHARS

_INVISIBLE: Final = re.compile(f"[{HIDDEN_CHARS}{JOINER_CHARS}{SELECTOR_CHARS}]")
_SELECTOR: Final = re.compile(f"[{SELECTOR_CHARS}]")
_NO_BASE: Final = re.compile(f"[\\x00-\\x7f\\s{HIDDEN_CHARS}{JOINER_CHARS}{SELECTOR_CHARS}]")
"""What a selector or a joiner does not apply to: ASCII (a keycap aside), spaces, and the invisible."""
_TAG_FLAG: Final = re.compile("\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f")
"""A subdivision flag (black flag U+1F3F4, tag characters naming the region, CANCEL TAG U+E007F): the
only place tags are kept."""
_CONTROLS: Final = re.compile("[\x00-\x1f\x7f]")
"""What `_INVISIBLE` finds in ASCII text (most of what a report shows), found faster."""
_NAMED_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _base(c: str) -> bool:
    """`c` is a character a selector or a joiner acts on: drawn, and not ASCII."""
    return bool(c) and not _NO_BASE.match(c)


def _joins(text: str, i: int, flags: set[int]) -> bool:
    """The selector, joiner or tag at `text[i]` is part of what a reader sees: a selector right after a
    character it applies to (or in a keycap, `1` U+FE0F U+20E3), a joiner between two such characters
    (after a selector too: heart U+FE0F ZWJ fire), a tag inside a subdivision flag (`flags`, its positions)."""
    c, before = text[i], text[i - 1] if i else ""
    if c in JOINER_CHARS:
        joined = _base(before) or (i > 1 and _SELECTOR.match(before) is not None and _base(text[i - 2]))
        return joined and _base(text[i + 1 : i + 2])
    if _SELECTOR.match(c):
        keycap = c == "\ufe0f" and before != "" and before in "0123456789#*" and text[i + 1 : i + 2] == "\u20e3"
        return _base(before) or keycap
    return i in flags


def _escape(c: str) -> str:
    """`c` as Python writes it in a string: `\\x1b`, `\\u200b`, `\\U000e0041` (never `\\ue0041`, which reads
    as U+E004 and a `1`)."""
    o = ord(c)
    return _NAMED_ESCAPES.get(c) or (f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")


def visible(text: str) -> str:
    r"""`text` with every character a terminal would act on, or that is drawn as nothing, written as an
    escape: `\x1b`, `\n`, `\u202e`, `\u200b`, `\U000e0041`, `\udcff`. Everything else (other scripts,
    emoji) is kept as it is, with the joiners and selectors that make their letters and emoji."""
    if text.isascii():
        return _CONTROLS.sub(lambda m: _escape(m[0]), text)
    if not _INVISIBLE.search(text):
        return text
    flags = set()
    if "\U0001f3f4" in text:
        flags = {i for m in _TAG_FLAG.finditer(text) for i in range(m.start() + 1, m.end())}
    return _INVISIBLE.sub(lambda m: m[0] if _joins(text, m.start(), flags) else _escape(m[0]), text)


_JSON_INVISIBLE: Final = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
"""What JSON writers leave raw (they escape only C0 controls) that a terminal still acts on: DEL, C1
controls (U+009B is CSI), bidi controls and line separators."""


def json_visible(text: str) -> str:
    r"""JSON text with every character `_JSON_INVISIBLE` matches written as its `\uXXXX` escape: the
    same document for a JSON reader (such characters only stand inside strings), inert on a terminal."""
    return _JSON_INVISIBLE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)
