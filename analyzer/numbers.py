"""How large a number erascope takes from its user: command-line values and rule options alike.

Kept apart (no imports) so that the command line checks its numbers without loading the rules.
"""

from __future__ import annotations

import math
from typing import Final

LARGEST: Final = 1e9
"""No duration, interval or threshold needs more (as seconds, 31 years); larger ones, and `inf` or
`nan`, overflow the timers, epoch times and polars microsecond windows they become."""

IN_RANGE: Final = "a finite number of at most 1e9"
"""What a refusal says the value should have been."""


def in_range(value: float) -> bool:
    """Whether `value` is finite and within ±`LARGEST`."""
    return math.isfinite(value) and abs(value) <= LARGEST
