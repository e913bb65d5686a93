"""Offline side: loading captures, classification rules, reports and the command line."""

import os
import sys

ALLOCATOR_CONF = (
    "background_thread:true,max_background_threads:1,"
    f"narenas:{os.cpu_count() or 1},dirty_decay_ms:100,muzzy_decay_ms:0"
)
"""jemalloc settings for polars, applied when this package is imported before polars.

Polars allocates through jemalloc and configures it on import from `_RJEM_MALLOC_CONF`, appending
the value found there to its own (`dirty_decay_ms:500,muzzy_decay_ms:1000`; polars issue 18088).
Without a background thread, freed pages are returned only when the allocator is busy in the same
arena, so an analysis, which frees most of what it allocates as it goes, held far more heap than it
had live. One background thread returns freed pages, and one arena per core (instead of jemalloc's
four) keeps fewer half-empty pages around: peak heap for analyzing 1 GB 406–427 MB against 524–550
MB with polars' settings, in the same time (bench/README.md, 2026-11-30). Pages are returned over
100 ms: a page handed back is faulted in again by the kernel when the allocator reuses it, and
reading JSONL frees and allocates the same few hundred MB over and over, so sooner costs system
time; later costs heap, and the faster the machine, the more of what a stage freed is still held
at the next one's peak. Analyzing 2 GB with bad lines on a quiet machine (bench/README.md,
2026-12-02 12:30): 1 s peaked at 290-320 MB of heap (above the 300 MB bound in half the runs),
300 ms at 275-293 MB, 100 ms at 265-276 MB, for 6-9 % more CPU than 1 s (system time about twice)
and about 4 % more wall time over 1 GB. A
`_RJEM_MALLOC_CONF` already in the environment wins: set it, even empty, to keep polars' own.
"""

if "polars" not in sys.modules:
    os.environ.setdefault("_RJEM_MALLOC_CONF", ALLOCATOR_CONF)
