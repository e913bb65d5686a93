"""Offline side: loading captures, classification rules, reports and the command line."""

import os
import sys

ALLOCATOR_CONF = "background_thread:true,max_background_threads:1,dirty_decay_ms:100,muzzy_decay_ms:0"
"""jemalloc settings for polars, applied when this package is imported before polars.

Polars allocates through jemalloc and configures it on import from `_RJEM_MALLOC_CONF`, appending
the value found there to its own (`dirty_decay_ms:500,muzzy_decay_ms:1000`; polars issue 18088).
Without a background thread, freed pages are returned only when the allocator is busy in the same
arena, so an analysis, which frees most of what it allocates as it goes, held about 1.5× its live
memory as heap. A background thread returning freed pages after 100 ms keeps the heap near what is
live, at no measured cost in time (bench/README.md). A `_RJEM_MALLOC_CONF` already in the
environment wins.
"""

if "polars" not in sys.modules:
    os.environ.setdefault("_RJEM_MALLOC_CONF", ALLOCATOR_CONF)
