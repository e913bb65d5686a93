"""Handing memory the process has freed back to the system.

glibc returns freed memory to the system only from the top of a heap: what is freed below live
blocks, and in the arenas other threads created, stays mapped. Two places free a great deal of it
and then allocate elsewhere, so `malloc_trim` hands it back (bench/README.md has the figures):
- the analysis, once loading is done (100,000 per-file `FileFacts` and the reading threads'
  buffers), whose later stages allocate through polars' jemalloc (`analyzer.ALLOCATOR_CONF`);
- the recorders' writer, encoding a long payload piece by piece (`addon.writer._TRIM_BYTES`)."""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    # glibc only: musl, macOS and Windows have no `malloc_trim` (and no use for it)
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_freed() -> bool:
    """Return the C heap's free pages to the system (glibc `malloc_trim(0)`); a no-op elsewhere.

    Changes nothing the process can observe but its resident memory. True when memory was released."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
