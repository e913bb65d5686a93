"""Offline side: loading captures, classification rules, reports and the command line."""

import os
import sys

ALLOCATOR_CONF = (
    "background_thread:true,max_background_threads:1,"
    f"narenas:{os.cpu_count() or 1},dirty_decay_ms:1000,muzzy_decay_ms:0"
)
"""jemalloc settings for polars, applied when this package is imported before polars.

Polars allocates through jemalloc and configures it on import from `_RJEM_MALLOC_CONF`, appending
the value found there to its own (`dirty_decay_ms:500,muzzy_decay_ms:1000`; polars issue 18088).
Without a background thread, freed pages are returned only when the allocator is busy in the same
arena, so an analysis, which frees most of what it allocates as it goes, held far more heap than it
had live. One background thread returns freed pages, and one arena per core (instead of jemalloc's
four) keeps fewer half-empty pages around: peak heap for analyzing 1 GB 406–427 MB against 524–550
MB with polars' settings, in the same time (bench/README.md, 2026-11-30). Pages are returned over
1 s: a page handed back is faulted in again by the kernel when the allocator reuses it, and reading
JSONL frees and allocates the same few hundred MB over and over, so sooner costs system time; later
costs heap. Analyzing 2 GB, one run each (bench/README.md, 2026-12-02 06:20): 300 ms 317 MB peak
heap, 9.8 s of system time, 1.26 M page faults; 1 s 317 MB, 7.5 s, 0.85 M; 3 s 393 MB, 5.3 s,
0.53 M; 10 s 415 MB. 1 s was the longest that cost no heap. A
`_RJEM_MALLOC_CONF` already in the environment wins: set it, even empty, to keep polars' own.
"""

if "polars" not in sys.modules:
    os.environ.setdefault("_RJEM_MALLOC_CONF", ALLOCATOR_CONF)
