"""Retention in a capture directory several recorders share (addon/retention.py).

Operators point every recorder at one `--out` directory (each stdio spawn a host makes, a proxy
beside them), each with its own keeper: sweeps run in several processes at once, and one recorder's
keeper compresses parts while another's sweeps. These tests drive those overlaps with real processes
(released together through a pipe, or holding a part's lock) or, where an interleaving must be
exact, by stepping in at the one point where another keeper acts; nothing waits on a clock.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from addon import format as fmt
from addon import retention as ret
from addon.retention import PART_NAME, capture_parts, compress_part, sweep
from addon.writer import CaptureWriter
from analyzer.pipeline import analyze
from analyzer.report import report_dict
from analyzer.verify import verify
from tests.conftest import ROOT
from tests.test_retention import frame, old_part
from tests.test_retention_e2e import REMOVED, Tee, parts_of, records_of

SWEEPER = """
import sys
from pathlib import Path
from addon.retention import sweep
print("ready", flush=True)
sys.stdin.readline()  # every sweeper starts at once
print(len(sweep(Path(sys.argv[1]), keep_bytes=int(sys.argv[2]), keep_days=None)), flush=True)
"""

LOCKER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)  # as another recorder's keeper holds a part it compresses
print("locked", flush=True)
sys.stdin.read()
"""


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the code under test, not an installed copy
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip


def test_sweeps_of_several_recorders_at_once_remove_only_what_the_bound_asks(tmp_path: Path) -> None:
    """Each sweep counted the parts it listed; a part another recorder's sweep removed meanwhile (or
    held locked to remove it) still counted in its total, so it went on removing younger parts: 16
    tees started together over a full directory removed every stale part, a third more than the bound
    asked for."""
    size, count, keep = 100, 3000, 100 * 1000
    for n in range(count):  # one-part captures, as a host's short-lived spawns leave them
        old_part(tmp_path, 0, size, age_days=10 - n / count, stem=f"20200101T000000.000000Z_old_{n}_aaaaaa")
    sweepers = [_python(SWEEPER, str(tmp_path), str(keep)) for _ in range(8)]
    for p in sweepers:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    for p in sweepers:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    removed = [int(p.communicate()[0]) for p in sweepers]
    assert all(p.returncode == 0 for p in sweepers)
    total = sum(size for _, _, size, _ in capture_parts(tmp_path))
    assert sum(removed) == count - keep // size  # each part once, and not one more than needed
    assert total == keep


def test_a_part_gone_since_the_listing_no_longer_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A part compressed or removed by another recorder between a sweep's listing and its turn is not
    in the directory any more: counted still, it made the sweep remove a part too many."""
    parts = [old_part(tmp_path, n, 1000, age_days=10 - n) for n in range(6)]
    listing = capture_parts

    def listed_then_one_removed(directory: Path) -> list[tuple[float, str, int, Path]]:
        found = listing(directory)
        parts[0].unlink()  # another recorder's retention, right after this listing
        return found

    monkeypatch.setattr(ret, "capture_parts", listed_then_one_removed)
    removed = sweep(tmp_path, keep_bytes=3000, keep_days=None)
    assert [r.path for r in removed] == parts[1:3]
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in parts[3:]]


def _rotated_capture(directory: Path, parts: int) -> list[Path]:
    """A real writer's capture of `parts` closed parts."""
    w = CaptureWriter(directory, transport=fmt.STDIO, server="srv", rotate_bytes=1500)
    i = 0
    while len(w.paths) < parts:
        w.write(frame(i, size=100))
        w.flush()  # `paths` is up to date
        i += 1
    w.close()
    assert len(w.paths) == parts
    return w.paths


def test_a_sweep_leaves_no_hole_behind_a_part_another_recorder_holds(tmp_path: Path) -> None:
    """A part whose lock another process holds (its keeper compressing it) was skipped, and the sweep
    went on to the capture's younger closed parts: the capture lost its middle, and `verify` reported
    the missing part as tampering although retention alone had been at work."""
    paths = _rotated_capture(tmp_path, 5)
    locker = _python(LOCKER, str(paths[1]))
    try:
        assert locker.stdout is not None and locker.stdout.readline() == "locked\n"
        removed = sweep(tmp_path, keep_bytes=1, keep_days=None)
    finally:
        locker.communicate("")
    assert [r.path for r in removed] == paths[:1]  # the capture's later parts wait for the held one
    result = verify([tmp_path])
    assert not result.tampered, [f.message for f in result.findings]


def test_a_part_removed_while_its_lock_was_awaited_is_not_compressed_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compressor opens a part, then waits for its lock. Another recorder's keeper held it to
    remove the part (a sweep) or to compress it itself (its tidying at start): the lock then came
    free on a file no longer in the directory, which was compressed back under the part's name (a part
    retention removed came back) and reported as a failure ("cannot compress …: No such file")."""
    (path,) = _rotated_capture(tmp_path, 1)
    holder = os.open(path, os.O_RDONLY)  # another keeper's hold: flock locks are per open file
    ret.fcntl.flock(holder, ret.fcntl.LOCK_EX)
    waiting, go = threading.Event(), threading.Event()

    def pause(seconds: float) -> None:  # the compressor, with the part open, waits for its lock
        waiting.set()
        go.wait()

    monkeypatch.setattr(ret, "time", SimpleNamespace(sleep=pause, time=time.time))
    outcome: list[object] = []

    def compress() -> None:
        try:
            outcome.append(compress_part(path))
        except OSError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=compress)
    worker.start()
    waiting.wait()
    path.unlink()  # the other keeper's sweep removes the part, then lets go of it
    os.close(holder)
    go.set()
    worker.join()
    assert outcome == [None]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
def test_real_tees_of_one_server_share_a_directory_with_compression_and_a_bound(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """What a host does: every spawn of one server recorded by its own tee into one `--out` directory,
    started together, each rotating, compressing and bounding the directory. Every byte is relayed,
    the only thing the tees report is what retention removed, each capture keeps its newest parts
    without a hole (so `verify` finds nothing), and `analyze` counts every record left exactly once."""
    caps = tmp_path / "caps"
    options = ("--server", "weather", "--rotate-size", "4k", "--compress", "--keep-bytes", "60k")
    tees = [Tee(caps, clean_env, *options) for _ in range(6)]
    sent = [b""] * len(tees)

    def relay(n: int, tee: Tee) -> None:
        data = b""
        for batch in range(15):
            lines = b"".join(
                b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"tee":%d,"pad":"%s"}}\n'
                % (batch * 10 + i, n, b"x" * 150)
                for i in range(10)
            )
            tee.send(lines)
            data += lines
        sent[n] = data

    threads = [threading.Thread(target=relay, args=(n, tee)) for n, tee in enumerate(tees)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n, tee in enumerate(tees):
        status, err = tee.finish()
        assert status == 0 and bytes(tee.received) == sent[n]
        assert [line for line in err.splitlines() if not REMOVED.match(line)] == []

    result = verify([caps])
    assert not result.tampered and not result.errors, [f"{f.where}: {f.message}" for f in result.findings]
    assert any("absent (removed by retention" in note for note in result.notes), "the bound had to remove parts"
    for tee in tees:  # a capture closed early may be gone whole: the oldest parts of the directory
        numbers = [int(p.name.split(".")[-3]) for p in parts_of(caps, tee.popen.pid)]
        if numbers:
            assert numbers == list(range(numbers[0], numbers[-1] + 1))  # its newest parts, without a hole

    records = records_of(sorted(p for p in caps.iterdir() if PART_NAME.fullmatch(p.name)))
    kinds = [r[fmt.F_TYPE] for r in records]
    report = report_dict(analyze([str(caps)]))
    assert report["inputs"]["records"] == len(kinds) - kinds.count(fmt.PART_END)
    assert report["totals"]["messages"] == kinds.count(fmt.FRAME) + kinds.count(fmt.LIFECYCLE)
