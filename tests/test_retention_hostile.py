"""Retention in a capture directory that does not behave (addon/retention.py): clocks stepped back or
ahead between rotations, parts that cannot be removed, times no calendar holds.

A sweep must still take a capture's oldest parts first (never leave a hole in its middle, which
`verify` reports as a part missing), say what it could not remove, and log every part it did remove.
Parts that cannot be removed are made so for real (`chattr +i`, where the file system and the
privileges allow it; else those tests are skipped); a time out of the calendar's range, which ext4
cannot store, is handed to the keeper through its listing. A directory whose lock another process
keeps (a recorder stopped mid-sweep, a script's `flock`) must not stop the keeper. And rotation in a
directory where no new part can be made: the open part takes the records meanwhile, and the writer
does not spin.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from addon import format as fmt
from addon import retention as ret
from addon import writer as writer_module
from addon.retention import PartKeeper, Removed, Retention, compress_part, sweep
from addon.writer import CaptureWriter
from analyzer.pipeline import analyze
from analyzer.report import report_dict
from analyzer.verify import verify
from tests.peers.capture_tools import read_records
from tests.test_retention import _rotated_corpus, frame, old_part
from tests.test_retention_e2e import REMOVED, Tee, compressed, records_of, stale_parts

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

DAY = 86400.0


def _at(path: Path, when: float) -> Path:
    os.utime(path, (when, when))
    return path


def _chattr(flag: str, path: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


@pytest.fixture
def immutable() -> Iterator[Callable[[Path], None]]:
    """Makes a file immutable (`chattr +i`: not even root removes or renames it), or skips the test;
    mutable again at the end, so the test's directory can be removed."""
    made: list[Path] = []

    def make(path: Path) -> None:
        if not _chattr("+i", path):
            pytest.skip("chattr +i is not available here")
        made.append(path)

    yield make
    for path in made:
        _chattr("-i", path)


# --- clocks -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bound", ["keep-bytes", "keep-days"])
def test_a_capture_whose_clock_stepped_back_loses_its_oldest_parts_not_its_middle(tmp_path: Path, bound: str) -> None:
    """The clock was stepped back (NTP correcting a clock that ran ahead) between two rotations: part 1
    was last written "before" part 0. Taken by their times alone, part 1 went first, and the capture
    kept parts 0 and 2 around a hole."""
    now = time.time()
    parts = [old_part(tmp_path, n, 1000, age_days=0) for n in range(3)]
    for part, age in zip(parts, (5, 10, 4), strict=True):
        _at(part, now - age * DAY)
    if bound == "keep-bytes":
        removed = sweep(tmp_path, keep_bytes=2500, keep_days=None, now=now)
        assert [r.path for r in removed] == parts[:1]
    else:
        removed = sweep(tmp_path, keep_bytes=None, keep_days=7, now=now)
        assert [r.path for r in removed] == parts[:2]
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in parts[len(removed) :]]


def test_a_part_dated_in_the_future_goes_with_the_later_parts_of_its_capture(tmp_path: Path) -> None:
    """A clock that ran a month ahead while part 0 was written, then was corrected: part 0 never came of
    age for `--keep-days` while its capture's later parts went, leaving the capture's first part alone
    with a hole after it. Part 0 was written before part 1, so it is at least as old."""
    now = time.time()
    parts = [old_part(tmp_path, n, 100, age_days=0) for n in range(3)]
    for part, age in zip(parts, (-30, 10, 1), strict=True):
        _at(part, now - age * DAY)
    removed = sweep(tmp_path, keep_bytes=None, keep_days=7, now=now)
    assert [r.path for r in removed] == parts[:2]
    assert {r.reason for r in removed} == {"keep-days"}
    assert [p.name for p in tmp_path.iterdir()] == [parts[2].name]


def test_the_last_part_of_a_capture_dated_in_the_future_ages_out_under_keep_days(tmp_path: Path) -> None:
    """A clock a month ahead while a capture's last part was written, then corrected: no later part bounds
    that part's time, so `--keep-days 7` kept it 37 days (a clock years ahead: years). Dated in the
    future, it ages from when its file last changed in the directory, now: it goes 7 days on, and its
    time stays as written."""
    now = time.time()
    parts = [old_part(tmp_path, n, 100, age_days=0) for n in range(2)]
    _at(parts[0], now - 10 * DAY)
    _at(parts[1], now + 30 * DAY)
    removed = sweep(tmp_path, keep_bytes=None, keep_days=7, now=now)
    assert [r.path for r in removed] == parts[:1]
    assert sweep(tmp_path, keep_bytes=None, keep_days=7, now=now + 6 * DAY) == []
    assert parts[1].stat().st_mtime == pytest.approx(now + 30 * DAY)
    removed = sweep(tmp_path, keep_bytes=None, keep_days=7, now=now + 8 * DAY)
    assert [(r.path, r.reason) for r in removed] == [(parts[1], "keep-days")]
    assert not any(tmp_path.iterdir())


def test_a_sweep_by_a_clock_running_behind_leaves_the_parts_their_own_times(tmp_path: Path) -> None:
    """The sweep's clock a year behind (a machine started without its clock, before NTP): every part is
    dated in its future. Had the sweep dated them at its own clock, they would be a year old once the
    clock is right, and a part written yesterday would go at once."""
    now = time.time()
    part = _at(old_part(tmp_path, 0, 100, age_days=0), now - DAY)
    times = (part.stat().st_atime_ns, part.stat().st_mtime_ns)
    assert sweep(tmp_path, keep_bytes=None, keep_days=7, now=now - 365 * DAY) == []
    assert (part.stat().st_atime_ns, part.stat().st_mtime_ns) == times  # the part's own times stay
    assert sweep(tmp_path, keep_bytes=None, keep_days=7, now=now) == []
    assert part.exists()


def test_a_removal_dated_out_of_the_calendar_is_logged_with_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part last written before year 1 (a file system with 64-bit times, tmpfs or XFS, and a clock or
    a copy that set it so): describing its removal raised, the keeper reported "retention failed", and
    the parts that sweep removed after it were neither logged nor counted."""
    for mtime in (-1e11, 1e15):
        assert "removed" in Removed(tmp_path / "x.000.jsonl", 1, mtime, "keep-days").describe()
    parts = [old_part(tmp_path, n, 100, age_days=3) for n in range(2)]
    listing = ret.capture_parts

    def far_past(directory: Path, now: float) -> list[tuple[float, str, int, Path]]:
        first, *rest = listing(directory, now)
        return [(-1e11, *first[1:]), *rest]

    monkeypatch.setattr(ret, "capture_parts", far_past)
    lines: list[str] = []
    keeper = PartKeeper(tmp_path, Retention(keep_days=1), log=lines.append)
    keeper.sweep_soon()
    assert keeper.close(30)
    assert [m.group(2) for line in lines if (m := REMOVED.search(line))] == [str(p) for p in parts]
    assert len(lines) == 2
    assert (keeper.counters.removed, keeper.counters.removed_bytes) == (2, 200)


# --- parts that cannot be removed ----------------------------------------------------------------------


def test_a_part_that_cannot_be_removed_is_reported_and_holds_its_capture(
    tmp_path: Path, immutable: Callable[[Path], None]
) -> None:
    """A sweep that failed to remove a part (EPERM, EACCES, a read-only mount) said nothing, so the
    directory stayed over its bound without a word, and went on to the capture's next part: the
    capture lost its middle. Other captures' parts still go to meet the bound."""
    parts = [old_part(tmp_path, n, 1000, age_days=10 - n) for n in range(3)]
    others = [old_part(tmp_path, n, 1000, age_days=5 - n, stem="20200102T000000.000000Z_b_2_bbbbbb") for n in range(2)]
    immutable(parts[0])
    logs: list[str] = []
    warnings: list[str] = []
    keeper = PartKeeper(tmp_path, Retention(keep_bytes=2500), log=logs.append, warn=warnings.append)
    keeper.sweep_soon()
    assert keeper.flush(30)
    keeper.sweep_soon()  # reported once, not in every round
    assert keeper.close(30)
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in parts]
    assert [m.group(2) for line in logs if (m := REMOVED.search(line))] == [str(p) for p in others]
    (warning,) = warnings
    assert f"cannot remove {parts[0]}" in warning and "Operation not permitted" in warning


def test_a_real_tee_reports_a_part_it_cannot_remove(
    tmp_path: Path, clean_env: dict[str, str], immutable: Callable[[Path], None]
) -> None:
    out = tmp_path / "caps"
    stale = stale_parts(out, 3, 3000)
    immutable(stale[0])
    tee = Tee(out, clean_env, "--keep-bytes", "4k")
    tee.send(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    code, err = tee.finish()
    assert code == 0, err
    assert f"cannot remove {stale[0]}" in err and err.count("cannot remove") == 1, err
    assert all(p.exists() for p in stale)  # the capture keeps its parts in order, none after a hole
    assert not [m.group(2) for m in REMOVED.finditer(err) if "_earlier_" in m.group(2)], err


def test_a_compressed_part_whose_plain_file_cannot_be_removed_stays_plain_alone(
    tmp_path: Path, immutable: Callable[[Path], None]
) -> None:
    """The plain part could not be removed once compressed: both copies stayed, counted twice toward
    `--keep-bytes`, while the warning said the plain part was kept."""
    path = old_part(tmp_path, 0, 0, age_days=1)
    path.write_bytes(b"{}\n" * 100)
    immutable(path)
    with pytest.raises(PermissionError):
        compress_part(path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    assert path.read_bytes() == b"{}\n" * 100


def _frames(first: int, count: int) -> bytes:
    return b"".join(orjson.dumps(frame(i)) + b"\n" for i in range(first, count + first))


@pytest.mark.parametrize("when", ["before", "while-compressing"])
def test_compression_never_replaces_another_file_under_the_compressed_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """A file already named `x.000.jsonl.zst` that holds something else (an older copy put back by hand,
    a copy another tool made) was replaced by the part's compressed copy: its records were lost. Both
    files stay as they are, and the warning names the one in the way."""
    path = old_part(tmp_path, 0, 0, age_days=1)
    path.write_bytes(_frames(0, 100))
    target = compressed(path)
    other = zstd.compress(_frames(100, 40))
    if when == "before":
        target.write_bytes(other)
    else:  # put there by another process while the keeper writes its copy

        class Racing(zstd.ZstdFile):
            def write(self, data: bytes) -> int:  # type: ignore[override]
                if not target.exists():
                    target.write_bytes(other)
                return super().write(data)

        monkeypatch.setattr(ret.zstd, "ZstdFile", Racing)
    warnings: list[str] = []
    keeper = PartKeeper(tmp_path, Retention(compress=True), log=warnings.append, warn=warnings.append)
    keeper.closed(path)
    assert keeper.close(30)
    assert path.read_bytes() == _frames(0, 100)
    assert target.read_bytes() == other
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, target.name]  # no partial output left
    assert (keeper.counters.compressed, keeper.counters.compress_failures) == (0, 1)
    (message,) = warnings
    assert f"cannot compress {path}" in message and str(target) in message and "plain part is kept" in message


def test_a_compression_cut_after_its_copy_was_in_place_is_finished_once(tmp_path: Path) -> None:
    """A keeper killed between putting `x.000.jsonl.zst` in place and removing the plain part left the
    part twice. The analyzer reads one of the two (copies of a part are read once); the next compression
    takes the copy in place as its own and removes the plain part."""
    plain = _rotated_corpus(tmp_path / "plain", "upgrade-http")
    both = tmp_path / "both"
    shutil.copytree(tmp_path / "plain", both)
    first = both / plain[0].name
    compressed(first).write_bytes(zstd.compress(first.read_bytes()))
    got = report_dict(analyze([str(both)]))
    want = report_dict(analyze([str(tmp_path / "plain")]))
    assert [d["file"] for d in got["inputs"]["duplicates"]] == [str(compressed(first))]
    assert got["inputs"]["records"] == want["inputs"]["records"] > 0
    del got["inputs"], want["inputs"]
    assert orjson.loads(orjson.dumps(got).decode().replace(str(both), str(tmp_path / "plain"))) == want
    assert compress_part(first) == compressed(first)
    assert sorted(p.name for p in both.iterdir()) == sorted([compressed(first).name, *(p.name for p in plain[1:])])
    assert zstd.decompress(compressed(first).read_bytes()) == plain[0].read_bytes()


# --- rotation that cannot start a new part ----------------------------------------------------------------


def test_records_go_on_into_the_open_part_while_a_new_one_cannot_be_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, immutable: Callable[[Path], None]
) -> None:
    """A new part could not be created (the directory not writable, out of inodes, a proxy out of file
    descriptors): every record past the rotation size was lost, although the open part took them."""
    monkeypatch.setattr(writer_module, "_ROTATE_RETRY", 0.0, raising=False)  # tried again with every record
    messages: list[str] = []
    w = CaptureWriter(tmp_path, transport=fmt.STDIO, server="srv", rotate_bytes=3000, on_error=messages.append)
    w.write(frame(0))
    assert w.flush(30)
    immutable(tmp_path)
    for i in range(1, 60):
        w.write(frame(i))
    assert w.flush(30)
    assert (w.lost, len(w.paths)) == (0, 1)
    assert w.paths[0].stat().st_size > 3000  # past the rotation size, which is the lesser harm
    _chattr("-i", tmp_path)
    for i in range(60, 120):
        w.write(frame(i))
    w.close()
    assert w.lost == 0 and len(w.paths) > 2
    records = read_records(w.paths)
    assert [r["i"] for r in records if r[fmt.F_TYPE] == fmt.FRAME] == list(range(120))
    result = verify([str(p) for p in w.paths])
    assert not result.tampered and not result.errors and not result.notes
    (message,) = messages
    assert "cannot start a new capture part" in message and "Operation not permitted" in message


def test_an_age_rotation_that_cannot_start_a_new_part_is_not_tried_without_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, immutable: Callable[[Path], None]
) -> None:
    """The idle writer thread tried again at once, for as long as it failed: a core spun at 100%, with
    nothing reported."""
    attempts: list[Path] = []
    real = writer_module.open_locked

    def counted(path: Path) -> int:
        attempts.append(path)
        return real(path)

    monkeypatch.setattr(writer_module, "open_locked", counted)
    messages: list[str] = []
    w = CaptureWriter(tmp_path, transport=fmt.STDIO, server="srv", rotate_age=0.05, on_error=messages.append)
    w.write(frame(0))
    assert w.flush(30)
    immutable(tmp_path)
    time.sleep(1.5)
    w.write(frame(1))
    assert w.flush(30)
    failed = len(attempts) - 1
    _chattr("-i", tmp_path)
    w.close()
    assert 1 <= failed <= 5, failed  # one a second: about two
    assert w.lost == 0
    assert [r["i"] for r in read_records(w.paths) if r[fmt.F_TYPE] == fmt.FRAME] == [0, 1]
    assert len(messages) == 1 and "cannot start a new capture part" in messages[0]


def _sent_recorded(out: Path, count: int) -> None:
    """Wait (up to 30 s) until the capture in `out` holds `count` lines sent to the server."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = 0
        for part in out.glob("*.jsonl"):  # not the hidden file of a part being opened, gone in an instant
            for line in part.read_bytes().split(b"\n")[:-1]:  # whole lines: the writer may be mid-line
                record = orjson.loads(line)
                seen += record[fmt.F_TYPE] == fmt.FRAME and record[fmt.F_DIR] == fmt.C2S
        if seen >= count:
            return
        time.sleep(0.05)


def test_a_real_tee_whose_directory_turns_unwritable_loses_no_record(
    tmp_path: Path, clean_env: dict[str, str], immutable: Callable[[Path], None]
) -> None:
    out = tmp_path / "caps"
    tee = Tee(out, clean_env, "--rotate-size", "4k")
    lines = [b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"pad":"%s"}}\n' % (i, b"p" * 200) for i in range(60)]
    tee.send(b"".join(lines[:5]))
    immutable(out)
    tee.send(b"".join(lines[5:40]))
    _sent_recorded(out, 40)  # relayed first, recorded after: made writable only once the writer wrote them
    _chattr("-i", out)
    tee.send(b"".join(lines[40:]))
    code, err = tee.finish()
    assert code == 0 and bytes(tee.received) == b"".join(lines)
    assert "lost" not in err and "cannot start a new capture part" in err, err
    parts = sorted(out.iterdir())
    sent = [r for r in records_of(parts) if r[fmt.F_TYPE] == fmt.FRAME and r[fmt.F_DIR] == fmt.C2S]
    assert len(sent) == 60


# --- a directory whose lock another process keeps ---------------------------------------------------------

HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX)  # as a recorder stopped in the middle of a sweep, or a script's flock
print("locked", flush=True)
sys.stdin.read()
"""


def _hold_directory(directory: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def test_a_directory_locked_for_good_stops_neither_compression_nor_the_keeper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep waited for the directory's lock without end: the keeper compressed nothing more, swept
    nothing, and a recorder's exit waited for it."""
    monkeypatch.setattr(ret, "_SWEEP_WAIT", 0.2, raising=False)
    stale = old_part(tmp_path, 0, 5000, age_days=3)
    closed = old_part(tmp_path, 0, 3000, age_days=0, stem="20260101T000000.000000Z_new_2_bbbbbb")
    warnings: list[str] = []
    holder = _hold_directory(tmp_path)
    try:
        keeper = PartKeeper(tmp_path, Retention(compress=True, keep_bytes=1000), log=warnings.append)
        keeper.closed(closed)
        keeper.sweep_soon()
        done = keeper.flush(20)
        assert keeper.close(20)
    finally:
        holder.communicate("")
    assert done
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([stale.name, f"{closed.name}.zst"])
    assert len(warnings) == 1 and f"skipped a sweep of {tmp_path}" in warnings[0], warnings


def test_a_real_tee_in_a_directory_locked_for_good_relays_records_and_says_so(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    out = tmp_path / "caps"
    stale = stale_parts(out, 2, 3000)
    holder = _hold_directory(out)
    try:
        tee = Tee(out, clean_env, "--keep-bytes", "1k", "--compress")
        tee.send(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
        code, err = tee.finish()
    finally:
        holder.communicate("")
    assert code == 0, err
    assert f"retention skipped a sweep of {out}" in err and "retention failed" not in err, err
    assert all(compressed(p).exists() for p in stale)  # nothing removed, all compressed
    (own,) = [p for p in out.iterdir() if "_cat_" in p.name]
    assert own.name.endswith(".jsonl.zst")  # compressed all the same
    assert [r[fmt.F_TYPE] for r in records_of([own])][-1] == fmt.PART_END


def test_the_documented_waits_are_the_ones_in_use() -> None:
    text = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    assert f"turn does not come within {ret._SWEEP_WAIT:g} seconds" in text
    assert writer_module._ROTATE_RETRY == 1.0 and "a new part is tried again every second" in text
