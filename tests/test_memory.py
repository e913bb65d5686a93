"""`analyzer.memory.release_freed`: freed C heap handed back to the system, a no-op where there is none."""

from __future__ import annotations

import ctypes
import os
import sys

import pytest

from analyzer import memory

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc only"
)


def _resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@glibc
def test_freed_heap_below_live_blocks_goes_back() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size = 64 * 1024  # below glibc's mmap threshold: served from the heap, not mapped on its own
    blocks = [libc.malloc(size) for _ in range(1600)]  # 100 MB
    for block in blocks:
        ctypes.memset(block, 1, size)  # touched: resident
    keep = libc.malloc(size)  # a live block above them: glibc's own trimming of the top cannot return them
    for block in blocks:
        libc.free(block)
    before = _resident_mb()
    assert memory.release_freed()
    assert before - _resident_mb() > 50
    libc.free(keep)


def test_a_no_op_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    memory._malloc_trim.cache_clear()
    monkeypatch.setattr(sys, "platform", "darwin")
    try:
        assert memory.release_freed() is False
    finally:
        memory._malloc_trim.cache_clear()
