"""Memory the analysis holds: `addon.memory.release_freed` (freed C heap handed back to the system, a
no-op where there is none), and what reading many files leaves behind."""

from __future__ import annotations

import ctypes
import os
import sys
import uuid
from pathlib import Path

import pytest

from addon import memory
from analyzer.archive import SOURCES_DIR, is_source_entry
from analyzer.load import extract_files, find_inputs

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


SPAWN_CAPTURE = (
    "captures/corpus/banner-then-crash-stdio/"
    "20261130T012953.932967Z_banner-then-crash-stdio-server_25100_599ea2.000.jsonl"
)


def test_reading_captures_interns_none_of_their_names(tmp_path: Path) -> None:
    """Python 3.12 keeps every interned string for good, and `pathlib` interns each part of a path it
    parses: 100,000 capture files whose names were parsed so kept 18 MB of names, scattered over
    the Python heap among what reading freed (110 MB of it held, bench/README.md). Reading files must
    leave none of their names interned."""
    data = (Path(__file__).parent.parent / SPAWN_CAPTURE).read_bytes()
    directory = os.path.join(str(tmp_path), "caps")
    os.mkdir(directory)
    # names built and written as plain strings: a `Path` made of one would intern it here already
    names = [f"20261130T0129{i:02d}.000000Z_spawn-{uuid.uuid4().hex}_{i}_abcdef.000.jsonl" for i in range(3)]
    for name in names:
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)
    facts = extract_files(find_inputs([directory]))
    assert len(facts) == 3 and facts[0].records > 0  # the copies are read as duplicates of the first
    for name in names:
        fresh = "".join([name[:10], name[10:]])  # an equal string that is not `name` itself
        assert fresh is not name
        assert sys.intern(fresh) is fresh, f"{name} was interned while reading"


@pytest.mark.parametrize(
    "path",
    [
        "a/_sources/x.jsonl.json",
        "/_sources/x.json",
        "_sources/x.json",
        "a/_sources//x.json",
        "a/_sources/./x.json",
        "a/_sources/x.json/",
        "a/_sources/.json",
        "a/_sources/..json",
        "a/_sources/x.json.",
        "a/_sources/x.JSON",
        "a/sources/x.json",
        "x.json",
        "a/_sources/../x.json",
        "a/b/x.jsonl",
    ],
)
def test_source_entries_told_as_pathlib_tells_them(path: str) -> None:
    p = Path(path)
    assert is_source_entry(path) == (p.suffix == ".json" and p.parent.name == SOURCES_DIR)


def _heap_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads RssAnon from /proc")
def test_the_double_answer_check_holds_little_beside_the_answers() -> None:
    """Whether a request was answered twice is checked over every answer, in the middle of the
    analysis. Seq numbers rarely fit 32 bits (a record's seq times the batch member slots), and a
    struct of (capture, seq) was encoded row by row for that: +149 MB of heap for 613 k answers,
    the 2 GB analysis' peak (bench/README.md, 2026-12-02 07:50)."""
    import threading
    import time

    import polars as pl

    from analyzer.rules.context import _answered_twice

    rows = 600_000
    names = [f"/captures/host-{i:03d}/20261130T012953.932967Z_some-server_{i}_599ea2.000.jsonl" for i in range(80)]
    answers = pl.DataFrame(
        {
            "capture": pl.Series([names[i % 80] for i in range(rows)]).cast(pl.Categorical()),
            "seq": pl.int_range(rows, eager=True).cast(pl.Int64()) * 4096 + (1 << 33),
        }
    )
    peak = base = _heap_mb()
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _heap_mb())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        assert not _answered_twice(answers)
    finally:
        done.set()
        sampler.join()
    size = answers.estimated_size() / 2**20  # 7 MB
    assert peak - base < 8 * size, f"{peak - base:.0f} MB of heap over {size:.0f} MB of answers"


def test_the_double_answer_check_beyond_32_bits() -> None:
    """Exact on seq numbers that do not fit 32 bits: equal seqs of two captures are no double
    answer, a seq missing twice in one capture is one."""
    import polars as pl

    from analyzer.rules.context import _answered_twice

    def frame(captures: list[str], seqs: list[int | None]) -> pl.DataFrame:
        return pl.DataFrame(
            {"capture": pl.Series(captures).cast(pl.Categorical()), "seq": pl.Series(seqs, dtype=pl.Int64())}
        )

    big = 1 << 40
    assert not _answered_twice(frame(["a", "b", "a"], [big, big, -big]))
    assert _answered_twice(frame(["a", "b", "a"], [big, 1, big]))
    assert not _answered_twice(frame(["a", "b", "a"], [None, None, big]))
    assert _answered_twice(frame(["a", "b", "a"], [None, big, None]))
