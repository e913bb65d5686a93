"""Retention in a capture directory several recorders share (addon/retention.py).

Operators point every recorder at one `--out` directory (each stdio spawn a host makes, a proxy
beside them), each with its own keeper: sweeps run in several processes at once, and one recorder's
keeper compresses parts while another's sweeps. These tests drive those overlaps with real processes
(released together through a pipe, or holding a part's lock) or, where an interleaving must be
exact, by stepping in at the one point where another keeper acts; nothing waits on a clock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from addon import format as fmt
from addon import retention as ret
from addon.retention import PART_NAME, Retention, capture_parts, compress_part, sweep
from addon.writer import CaptureWriter
from analyzer.pipeline import analyze
from analyzer.report import report_dict
from analyzer.verify import verify
from tests.conftest import ROOT
from tests.test_http_e2e import MODERN_HEADERS, Proc, record_http, start_server
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

    def listed_then_one_removed(directory: Path, now: float) -> list[tuple[float, str, int, Path]]:
        found = listing(directory, now)
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


def test_a_writer_names_the_parts_another_recorders_keeper_compressed_as_they_are(tmp_path: Path) -> None:
    """A writer learns its parts' new names from its own keeper only: a part another recorder's keeper
    compressed (its tidying at start takes every closed plain part) kept its plain name in `paths`,
    a file no longer there. A part a sweep removed keeps the name it was written under."""
    w = CaptureWriter(tmp_path, transport=fmt.STDIO, server="srv", rotate_bytes=1500)
    i = 0
    while len(w.paths) < 4:
        w.write(frame(i, size=100))
        w.flush()  # `paths` is up to date
        i += 1
    closed = w.paths[:3]  # the fourth is open
    assert compress_part(closed[0]) is not None and compress_part(closed[2]) is not None  # the other keeper
    closed[1].unlink()  # a sweep
    w.close()
    assert w.paths == [
        closed[0].with_name(closed[0].name + ".zst"), closed[1], closed[2].with_name(closed[2].name + ".zst"),
        w.paths[3],
    ]  # fmt: skip
    assert w.paths[3].name.endswith(".003.jsonl") and w.paths[3].exists()


@pytest.mark.e2e
def test_record_http_names_its_parts_as_another_recorders_keeper_left_them(
    procs: list[Proc], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """`record http` without `--compress` shares its directory with a tee that has it: the tee's keeper
    compresses, at its start, the closed plain parts it finds there, the proxy's too. The proxy's
    closing lines left those parts out ("wrote" only what still had its plain name), as if retention
    had removed them, although they were there, compressed."""
    import httpx2

    port = start_server(procs, clean_env)
    caps = tmp_path / "caps"
    proxy, url = record_http(procs, f"http://127.0.0.1:{port}/mcp", caps, clean_env, "--rotate-size", "4k")
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {**MODERN_HEADERS, "mcp-method": "server/discover"}
    with httpx2.Client(timeout=30) as http:
        # a third part is open once the second is: the first is closed by then, for any keeper to take
        for i in range(500):
            probe = {"jsonrpc": "2.0", "id": i, "method": "server/discover", "params": {"_meta": meta}}
            assert http.post(url, content=orjson.dumps(probe), headers=headers).status_code == 200
            if len(parts_of(caps, proxy.popen.pid)) >= 3:
                break
        else:
            raise AssertionError("the proxy never rotated")
    tee = Tee(caps, clean_env, "--server", "other", "--compress")
    status, err = tee.finish()  # its keeper is done with what it tidied once it exits
    assert status == 0, err
    assert proxy.stop(signal.SIGINT) == 0
    mine = parts_of(caps, proxy.popen.pid)
    assert mine[0].name.endswith(".jsonl.zst"), mine  # the other recorder's keeper compressed it
    wrote = [line for line in proxy.lines if line.startswith("erascope: wrote ")]
    assert wrote == [f"erascope: wrote {p}" for p in mine], proxy.lines


OPENER = """
import fcntl, os, sys
from pathlib import Path
from addon import format as fmt
from addon.writer import CaptureWriter

def stopped_at(name, real):
    def step(*args, **kwargs):  # the writer opening its part stops here (the first time), until told to go on
        if not stopped:
            stopped.append(name)
            print(name, flush=True)
            sys.stdin.readline()
        return real(*args, **kwargs)
    return step

stopped = []

if sys.argv[2] == "flock":  # the hidden file created, not yet locked
    fcntl.flock = stopped_at("flock", fcntl.flock)
elif sys.argv[2] == "link":  # the hidden file created and locked, not yet linked to the part's name
    os.link = stopped_at("link", os.link)
else:  # the part linked to its name, its hidden name not yet removed
    os.unlink = stopped_at("unlink", os.unlink)
w = CaptureWriter(Path(sys.argv[1]), transport=fmt.STDIO, server="opener")
w.write({fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c1", fmt.F_DIR: fmt.C2S, **fmt.payload_fields(b"{}")})
w.close()
print("closed", w.written, flush=True)
"""


def _opening(directory: Path, step: str) -> tuple[subprocess.Popen[str], Path]:
    """A real recorder stopped while it opens its first part (at `step`, see OPENER), and its hidden file."""
    opener = _python(OPENER, str(directory), step)
    assert opener.stdout is not None and opener.stdout.readline() == f"{step}\n"
    (hidden,) = directory.glob(f".*{ret.OPENING_SUFFIX}")
    assert PART_NAME.fullmatch(hidden.name[1 : -len(ret.OPENING_SUFFIX)]) and f"_{opener.pid}_" in hidden.name
    return opener, hidden


LONG_AGO = 3600.0
"""Seconds: far longer than a recorder takes from creating its hidden file to linking it."""


def _age(path: Path, seconds: float) -> None:
    when = time.time() - seconds
    os.utime(path, (when, when))


@pytest.mark.parametrize("step", ["flock", "link", "unlink"])
def test_the_hidden_file_of_a_recorder_killed_opening_a_part_is_removed_by_a_later_one(
    tmp_path: Path, step: str
) -> None:
    """A recorder killed between creating its part's hidden `.….opening` file and removing that name
    left the empty file behind for good: no recorder, keeper or sweep ever looked at it again. A later
    recorder opening its first part removes it, once no one holds its lock and it is older than a
    recorder ever takes to lock and link it (`retention.OPENING_STALE`). Killed after the link, the
    recorder left its empty part too, under its name: that stays, as any part a recorder left."""
    opener, hidden = _opening(tmp_path, step)
    opener.kill()  # SIGKILL: no cleanup runs
    opener.communicate()
    left = [p.name for p in parts_of(tmp_path, opener.pid)]
    assert hidden.exists() and left == ([hidden.name[1 : -len(ret.OPENING_SUFFIX)]] if step == "unlink" else [])
    _age(hidden, LONG_AGO)
    later = CaptureWriter(tmp_path, transport=fmt.STDIO, server="later")
    later.write(frame(0))
    later.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*left, *(p.name for p in later.paths)])


def test_a_keeper_removes_the_hidden_file_of_a_recorder_killed_while_it_runs(tmp_path: Path) -> None:
    """A recorder that runs for weeks sees other recorders come and go in its directory: the hidden file
    of one killed while opening a part goes in its keeper's next round, not only at a later start."""
    w = CaptureWriter(
        tmp_path, transport=fmt.STDIO, server="srv", rotate_bytes=1500, retention=Retention(keep_bytes=1 << 30)
    )
    w.write(frame(0, size=100))
    w.flush()
    assert w.keeper is not None and w.keeper.flush(30)
    opener, hidden = _opening(tmp_path, "link")
    opener.kill()
    opener.communicate()
    _age(hidden, LONG_AGO)
    parts = len(w.paths)
    i = 1
    while len(w.paths) == parts:  # a rotation: the keeper's round
        w.write(frame(i, size=100))
        w.flush()
        i += 1
    assert w.keeper.flush(30)
    assert not hidden.exists()
    w.close()


@pytest.mark.parametrize("step", ["link", "flock"])
def test_a_live_recorders_hidden_file_is_never_removed(tmp_path: Path, step: str) -> None:
    """The criterion must never take the file of a recorder still opening its part: at `link` it holds
    the file's lock (made old here, it is still left alone); at `flock` the file is unlocked for the
    moment between two system calls, and young."""
    opener, hidden = _opening(tmp_path, step)
    try:
        if step == "link":
            _age(hidden, LONG_AGO)
        later = CaptureWriter(tmp_path, transport=fmt.STDIO, server="later", retention=Retention(keep_bytes=1 << 30))
        later.write(frame(0))
        later.close()
        assert hidden.exists()
    finally:
        out, _ = opener.communicate("go\n")
    assert opener.returncode == 0 and out == "closed 2\n"  # its header and its record
    (part,) = parts_of(tmp_path, opener.pid)
    assert part.name.endswith(".000.jsonl") and not hidden.exists()
