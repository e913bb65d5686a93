"""Characters text shows as escapes instead of as they are: the reports (`analyzer.terminal.visible`)
and the metrics' server labels (`addon.metrics.server_label`) write these alike.

A module of its own, importing nothing: the CLI's error path shows names with them, and `--help`
must not pay for the capture format's JSON library.
"""

from __future__ import annotations

from typing import Final

HIDDEN_CHARS: Final = (
    "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
    "\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180e\u200b\u2060-\u2065\u206a-\u206f\u3164\ufeff\uffa0\ufff0-\ufffb"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e00ff\U000e01f0-\U000e0fff"
)
"""What a terminal or an editor acts on instead of showing: C0 and C1 controls (ESC and CSI start
escape sequences), DEL, bidi controls and line separators (they reorder or break what follows), lone
surrogates (UTF-8 cannot hold them); and what is drawn as nothing (Unicode's default ignorable code
points), so that two strings never read the same and no text hides in one: the zero-width space,
word joiner, byte order mark, soft hyphen, Hangul fillers, invisible operators, interlinear
annotation marks and tag characters (`ASCII smuggling`: a sentence spelled in U+E0020..U+E007E).

A regular expression's character class, with `JOINER_CHARS` and `SELECTOR_CHARS`: what the reports
(`analyzer.terminal.visible`) and the metrics' server labels (`addon.metrics.server_label`) write as
escapes."""
JOINER_CHARS: Final = "\u200c\u200d"
"""ZWNJ and ZWJ: they join emoji (man ZWJ woman ZWJ girl is one family) and shape the letters of many
scripts (Persian, Devanagari), and join nothing else."""
SELECTOR_CHARS: Final = "\u180b-\u180d\u180f\ufe00-\ufe0f\U000e0100-\U000e01ef"
"""Variation selectors: they pick the drawing of the character before them (U+26A0 U+FE0F is the
emoji warning sign), and hide bytes when they follow anything else or one another."""
