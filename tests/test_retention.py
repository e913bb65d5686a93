"""Retention of capture parts (addon/retention.py and the writer's rotation): age rotation, zstd
compression of closed parts, removal of the oldest closed parts, never of an open one.

In-process tests with the real writer and real files; the end-to-end test with real recorder
processes is tests/test_retention_e2e.py.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from addon import format as fmt
from addon import retention as ret
from addon.errors import ErascopeError
from addon.retention import PartKeeper, Retention, compress_part, open_locked, parse_duration, parse_size, sweep
from addon.writer import CaptureWriter
from analyzer.load import capture_id, find_inputs
from analyzer.pipeline import analyze
from analyzer.report import report_dict
from tests.peers.capture_tools import read_records

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

DAY = 86400.0


def frame(i: int, size: int = 50) -> dict[str, Any]:
    return {fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c1", fmt.F_DIR: fmt.C2S, "i": i, **fmt.payload_fields(b"x" * size)}


OLD_STEM = "20200101T000000.000000Z_old_1_aaaaaa"


def old_part(directory: Path, n: int, size: int, age_days: float, stem: str = OLD_STEM) -> Path:
    """A closed capture part (named as the writer names them) last written `age_days` ago."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stem}.{n:03d}.jsonl"
    path.write_bytes(b"x" * size)
    when = time.time() - age_days * DAY
    os.utime(path, (when, when))
    return path


# --- option values -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"), [("4096", 4096), ("512k", 512 << 10), ("256m", 256 << 20), ("10g", 10 << 30), ("1.5k", 1536)]
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text, "--keep-bytes") == size


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("6h", 21600.0), ("7d", 7 * DAY)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "--rotate-age") == seconds


@pytest.mark.parametrize("bad", ["", "0", "-1h", "10 parsecs", "1e9", "h"])
def test_bad_values_name_the_option(bad: str) -> None:
    with pytest.raises(ErascopeError, match="--rotate-age must be a positive duration"):
        parse_duration(bad, "--rotate-age")
    with pytest.raises(ErascopeError, match="--keep-bytes must be a positive size"):
        parse_size(bad, "--keep-bytes")


# --- locks: how an open part is told from a closed one -------------------------------------------------


def test_an_open_part_is_locked_from_its_first_visible_moment(tmp_path: Path) -> None:
    path = tmp_path / "p.000.jsonl"
    fd = open_locked(path)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [p.name for p in tmp_path.iterdir()] == [path.name]  # the hidden name is gone
        other = os.open(path, os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(other)
        with pytest.raises(FileExistsError):
            open_locked(path)  # never clobbers
    finally:
        os.close(fd)
    again = os.open(path, os.O_RDONLY)
    fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)  # closed: free
    os.close(again)


# --- compression ------------------------------------------------------------------------------------


def test_compress_part_keeps_content_mode_and_mtime(tmp_path: Path) -> None:
    path = old_part(tmp_path, 0, 0, age_days=3)
    data = b"".join(orjson.dumps(frame(i)) + b"\n" for i in range(500))
    path.write_bytes(data)
    os.utime(path, (1_600_000_000, 1_600_000_000))
    packed = compress_part(path)
    assert packed == path.with_name(path.name + ".zst")
    assert not path.exists()
    assert zstd.decompress(packed.read_bytes()) == data
    assert packed.stat().st_size < len(data) / 5
    assert stat.S_IMODE(packed.stat().st_mode) == 0o600
    assert packed.stat().st_mtime == 1_600_000_000
    assert sorted(p.name for p in tmp_path.iterdir()) == [packed.name]


@pytest.mark.parametrize("planted", ["symlink", "stale"])
def test_compression_writes_a_new_file_never_one_planted_under_its_temporary_name(
    tmp_path: Path, planted: str
) -> None:
    """The compressed part is written under `.<name>.zst.partial`, a predictable name: a symbolic link
    planted there (by anyone who can write the capture folder) made the keeper truncate and overwrite
    the file it points to, and the link became the compressed part."""
    path = old_part(tmp_path / "caps", 0, 0, age_days=1)
    path.write_bytes(b"{}\n" * 100)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"important\n")
    partial = path.with_name(f".{path.name}.zst.partial")
    if planted == "symlink":
        partial.symlink_to(victim)
    else:  # left by a keeper killed while compressing: replaced, as before
        partial.write_bytes(b"half")
    packed = compress_part(path)
    assert packed is not None and not packed.is_symlink()
    assert zstd.decompress(packed.read_bytes()) == b"{}\n" * 100
    assert victim.read_bytes() == b"important\n"
    assert sorted(p.name for p in packed.parent.iterdir()) == [packed.name]


def test_an_open_part_is_not_compressed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ret, "_LOCK_RETRIES", 1)
    path = tmp_path / "20260101T000000.000000Z_s_1_abcdef.000.jsonl"
    fd = open_locked(path)
    try:
        os.write(fd, b"{}\n")
        assert compress_part(path) is None
        assert path.read_bytes() == b"{}\n"
        assert [p.name for p in tmp_path.iterdir()] == [path.name]
    finally:
        os.close(fd)


def test_a_failed_compression_keeps_the_plain_part_and_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fake in addition to the real path above: the compressor failing half-way (as a full disk would).
    class Failing:
        def __init__(self, *args: object, **kw: object) -> None:
            pass

        def __enter__(self) -> Failing:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def write(self, data: bytes) -> int:
            raise OSError(28, "No space left on device")

    path = old_part(tmp_path, 0, 2000, age_days=1)
    monkeypatch.setattr(ret.zstd, "ZstdFile", Failing)
    warnings: list[str] = []
    keeper = PartKeeper(tmp_path, Retention(compress=True), log=warnings.append, warn=warnings.append)
    keeper.closed(path)
    assert keeper.close(30)
    assert path.read_bytes() == b"x" * 2000
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no partial output left
    assert keeper.counters.compress_failures == 1 and keeper.counters.compressed == 0
    (message,) = warnings
    assert f"cannot compress {path}" in message and "No space left" in message and "plain part is kept" in message


# --- sweeping -----------------------------------------------------------------------------------------


def test_sweep_removes_oldest_closed_parts_until_within_bytes(tmp_path: Path) -> None:
    parts = [old_part(tmp_path, n, 1000, age_days=10 - n) for n in range(6)]
    (tmp_path / "notes.txt").write_bytes(b"y" * 5000)  # not a capture part: neither counted nor removed
    (tmp_path / "mine.jsonl").write_bytes(b"y" * 5000)  # a capture, but not named by a recorder
    removed = sweep(tmp_path, keep_bytes=3500, keep_days=None)
    assert [r.path for r in removed] == parts[:3]
    assert {r.reason for r in removed} == {"keep-bytes"}
    kept = sorted([p.name for p in parts[3:]] + ["notes.txt", "mine.jsonl"])
    assert sorted(p.name for p in tmp_path.iterdir()) == kept


def test_sweep_takes_parts_written_in_the_same_instant_in_their_order(tmp_path: Path) -> None:
    """On a file system with coarse times (FAT, some network shares) parts rotated within one tick have
    the same mtime: they were then taken by name, and `.1000` sorts before `.999`, so a sweep removed
    a middle part of the capture (which `verify` then reports missing, as tampering)."""
    parts = [old_part(tmp_path, n, 1000, age_days=1) for n in (998, 999, 1000, 1001)]
    for part in parts:
        os.utime(part, (1_700_000_000, 1_700_000_000))
    removed = sweep(tmp_path, keep_bytes=2000, keep_days=None)
    assert [r.path for r in removed] == parts[:2]


def test_sweep_never_removes_an_open_part_even_the_oldest(tmp_path: Path) -> None:
    opened = tmp_path / "20190101T000000.000000Z_live_2_bbbbbb.000.jsonl"
    fd = open_locked(opened)
    try:
        os.write(fd, b"z" * 1000)
        os.utime(opened, (time.time() - 30 * DAY,) * 2)  # the oldest file of all
        parts = [old_part(tmp_path, n, 1000, age_days=10 - n) for n in range(3)]
        removed = sweep(tmp_path, keep_bytes=1500, keep_days=1)
        assert [r.path for r in removed] == parts  # every closed part; the open one counts but stays
        assert opened.exists()
    finally:
        os.close(fd)


def test_sweep_by_age_keeps_younger_parts(tmp_path: Path) -> None:
    parts = [old_part(tmp_path, n, 100, age_days=age) for n, age in enumerate([20, 8, 6, 0.1])]
    removed = sweep(tmp_path, keep_bytes=None, keep_days=7)
    assert [r.path for r in removed] == parts[:2]
    assert {r.reason for r in removed} == {"keep-days"}
    assert "retention (keep-days) removed" in removed[0].describe()


# --- the writer: age rotation, compression and retention as it writes ---------------------------------


def test_age_rotation_also_while_idle(tmp_path: Path) -> None:
    w = CaptureWriter(tmp_path, transport=fmt.STDIO, server="srv", rotate_age=0.3)
    w.write(frame(1))
    deadline = time.monotonic() + 30
    while len(w.paths) < 2 and time.monotonic() < deadline:  # no more records: the thread wakes by itself
        time.sleep(0.05)
    assert len(w.paths) == 2
    time.sleep(0.6)
    assert len(w.paths) == 2  # a part holding only its header is not rotated again
    w.write(frame(2))
    w.close()
    first, second = ([r for r in read_records(p) if r[fmt.F_TYPE] != fmt.PART_END] for p in w.paths)
    assert [r.get("i") for r in first] == [None, 1]
    assert [r.get("i") for r in second] == [None, 2]
    assert second[0]["previous"] == w.paths[0].name and second[0]["part"] == 1


def test_writer_compresses_closed_parts_and_counts(tmp_path: Path) -> None:
    messages: list[str] = []
    w = CaptureWriter(
        tmp_path, transport=fmt.STDIO, server="srv", rotate_bytes=1500, retention=Retention(compress=True),
        on_error=messages.append,
    )  # fmt: skip
    for i in range(60):
        w.write(frame(i))
    w.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names and all(n.endswith(".jsonl.zst") for n in names)  # the last part too, once closed
    assert [p.name for p in w.paths] == names  # the writer names its parts as they are now
    assert w.keeper is not None and w.keeper.counters.compressed == len(names)
    plain = [zstd.decompress(p.read_bytes()) for p in w.paths]
    records = [orjson.loads(line) for data in plain for line in data.splitlines()]
    assert [r["i"] for r in records if r[fmt.F_TYPE] == fmt.FRAME] == list(range(60))
    assert w.bytes_written == sum(len(data) for data in plain)
    assert messages == []


def test_a_recorder_with_compression_finishes_what_a_killed_one_left(tmp_path: Path) -> None:
    """A keeper killed mid-compression leaves the closed plain part and its hidden `.partial` output:
    no later keeper looked at them again (only the parts its own writer closes), so the part stayed
    uncompressed and the partial file took disk space no bound counts. A part another recorder still
    writes (locked) is left alone."""
    left = old_part(tmp_path, 0, 5000, age_days=1)
    partial = tmp_path / f".{left.name}.zst{ret.PARTIAL_SUFFIX}"
    partial.write_bytes(b"half a zstd frame")
    orphan = tmp_path / f".{OLD_STEM}.007.jsonl.zst{ret.PARTIAL_SUFFIX}"  # its part is gone
    orphan.write_bytes(b"x")
    other = tmp_path / "20260101T000000.000000Z_live_2_bbbbbb.000.jsonl"
    fd = open_locked(other)
    try:
        os.write(fd, b"{}\n")
        w = CaptureWriter(tmp_path, transport=fmt.STDIO, server="srv", retention=Retention(compress=True))
        w.write(frame(0))
        assert w.keeper is not None and w.keeper.flush(30)
        names = {p.name for p in tmp_path.iterdir()}
        assert f"{left.name}.zst" in names and left.name not in names
        assert zstd.decompress((tmp_path / f"{left.name}.zst").read_bytes()) == b"x" * 5000
        assert partial.name not in names and orphan.name not in names
        assert other.name in names  # open: neither compressed nor touched
        w.close()
    finally:
        os.close(fd)


def test_previous_names_the_plain_part_even_when_it_is_compressed_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FORMAT.md: a header's `previous` names the previous part as written (plain). The keeper's
    thread may compress (and rename, in `w.paths`) a part the moment it is handed over; a keeper that
    does so before `closed` even returns is that race at its worst, made deterministic."""
    monkeypatch.setattr(PartKeeper, "closed", PartKeeper._compress)
    compressing = Retention(compress=True)
    w = CaptureWriter(tmp_path, transport=fmt.STDIO, server="srv", rotate_bytes=1500, retention=compressing)
    for i in range(60):
        w.write(frame(i))
    w.close()
    assert len(w.paths) > 2 and all(p.name.endswith(".jsonl.zst") for p in w.paths)
    headers = [orjson.loads(zstd.decompress(p.read_bytes()).split(b"\n", 1)[0]) for p in w.paths]
    assert [h["previous"] for h in headers] == [None] + [p.name.removesuffix(".zst") for p in w.paths[:-1]]


def test_writer_sweeps_old_parts_and_reports_them(tmp_path: Path) -> None:
    stale = [old_part(tmp_path, n, 4000, age_days=5 - n) for n in range(3)]
    removals: list[str] = []
    w = CaptureWriter(
        tmp_path, transport=fmt.STDIO, server="srv", rotate_bytes=2000,
        retention=Retention(keep_bytes=6000), on_retention=removals.append,
    )  # fmt: skip
    for i in range(100):
        w.write(frame(i))
    w.close()
    assert not any(p.exists() for p in stale)
    assert [line.split(" removed ")[1].split(" (")[0] for line in removals[:3]] == [str(p) for p in stale]
    total = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert total <= 6000
    assert w.paths[-1].exists()  # the newest part survives
    assert w.keeper is not None and w.keeper.counters.removed == len(removals)


# --- the analyzer reads what retention leaves --------------------------------------------------------------

CORPUS = Path(__file__).resolve().parent.parent / "captures" / "corpus"


def _rotated_corpus(out: Path, scenario: str, retention: Retention | None = None) -> list[Path]:
    """A corpus capture's records written again by the real writer, in parts of about 4 kB."""
    (source,) = sorted((CORPUS / scenario).glob("*.jsonl"))
    w = CaptureWriter(out, transport=fmt.HTTP, server="srv", rotate_bytes=4000, retention=retention)
    for line in source.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec[fmt.F_TYPE] != fmt.HEADER:
            rec.pop(fmt.F_SEQ, None)
            w.write(rec)
    w.close()
    return sorted(out.iterdir())


def _same_report(got_dir: Path, want_dir: Path) -> None:
    got = report_dict(analyze([str(got_dir)]))
    want = report_dict(analyze([str(want_dir)]))
    text = orjson.dumps(got).decode().replace(".jsonl.zst", ".jsonl").replace(str(got_dir), str(want_dir))
    assert orjson.loads(text) == want
    assert want["servers"], "the capture must say something for the comparison to mean anything"


def test_analyze_reads_compressed_parts_as_the_plain_ones(tmp_path: Path) -> None:
    """A capture whose closed parts the recorder compressed reports as the same capture plain."""
    packed_dir = tmp_path / "packed"
    packed = _rotated_corpus(packed_dir, "probe-storm-http", Retention(compress=True))
    assert len(packed) > 3 and all(p.name.endswith(".jsonl.zst") for p in packed)
    assert find_inputs([str(packed_dir)]) == [str(p) for p in packed]  # directory discovery finds them
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    for p in packed:
        (plain_dir / p.name.removesuffix(".zst")).write_bytes(zstd.decompress(p.read_bytes()))
    _same_report(packed_dir, plain_dir)


def test_mixed_plain_and_compressed_parts_are_one_capture(tmp_path: Path) -> None:
    """While a recorder runs, its closed parts are compressed and its open part is plain: still one capture."""
    plain = _rotated_corpus(tmp_path / "plain", "upgrade-http")
    mixed_dir = tmp_path / "mixed"
    shutil.copytree(tmp_path / "plain", mixed_dir)
    for p in sorted(mixed_dir.iterdir())[:-1]:
        assert compress_part(p) is not None
    mixed = sorted(mixed_dir.iterdir())
    assert len(plain) > 2 and [p.name.endswith(".zst") for p in mixed] == [True] * (len(mixed) - 1) + [False]
    assert len({capture_id(str(p)) for p in mixed}) == 1
    _same_report(mixed_dir, tmp_path / "plain")


# --- the switches --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rotate-age", "0"], "--rotate-age must be a positive duration"),
        (["--rotate-size", "big"], "--rotate-size must be a positive size"),
        (["--keep-bytes", "-5"], "--keep-bytes must be a positive size"),
        (["--keep-days", "0"], "--keep-days must be positive"),
        (["--probe-timeout", "0"], "--probe-timeout must be a positive number of seconds"),
        (["--probe-timeout", "-1"], "--probe-timeout must be a positive number of seconds"),
    ],
)
def test_record_stdio_refuses_bad_retention_values_before_spawning(
    tmp_path: Path, args: list[str], message: str
) -> None:
    from typer.testing import CliRunner

    from analyzer.cli import app

    marker = tmp_path / "spawned"
    result = CliRunner().invoke(
        app, ["record", "stdio", "--out", str(tmp_path / "caps"), *args, "--", "touch", str(marker)]
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not marker.exists() and not (tmp_path / "caps").exists()


def test_record_http_refuses_bad_metrics_and_retention_values(clean_env: dict[str, str]) -> None:
    import subprocess

    erascope = Path(sys.executable).parent / "erascope"
    base = [str(erascope), "record", "http", "--upstream", "http://127.0.0.1:1/mcp", "--listen", "127.0.0.1:0"]
    for extra, message in [
        (["--metrics", "nowhere"], "--metrics must be HOST:PORT"),
        (["--rotate-age", "soon"], "--rotate-age must be a positive duration"),
        (["--keep-bytes", "0"], "--keep-bytes must be a positive size"),
        (["--keep-days", "-1"], "--keep-days must be a positive number of days"),
        (["--probe-timeout", "0"], "--probe-timeout must be a positive number of seconds"),
        (["--probe-timeout", "-1"], "--probe-timeout must be a positive number of seconds"),
    ]:
        bad = subprocess.run([*base, *extra], capture_output=True, text=True, env=clean_env, timeout=60)
        assert bad.returncode == 2 and message in bad.stderr, (extra, bad.stderr)


def test_addon_options_set_rotation_and_retention(tmp_path: Path) -> None:
    from mitmproxy import exceptions
    from mitmproxy.test import taddons

    from addon.http_recorder import HttpRecorder

    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(
            addon, erascope_dir=str(tmp_path), erascope_rotate_size="1m", erascope_rotate_age="2h",
            erascope_compress=True, erascope_keep_bytes="3g", erascope_keep_days="0.5",
        )  # fmt: skip
        assert (addon.rotate_bytes, addon.rotate_age) == (1 << 20, 7200.0)
        assert addon.retention == Retention(compress=True, keep_bytes=3 << 30, keep_days=0.5)
        bad_values = [("erascope_keep_days", "soon"), ("erascope_rotate_size", "0"), ("erascope_rotate_age", "-1")]
        for option, bad in bad_values:
            with pytest.raises(exceptions.OptionsError, match=option):
                tctx.configure(addon, **{option: bad})
        tctx.configure(addon, erascope_keep_days="", erascope_keep_bytes="", erascope_compress=False)
        assert not addon.retention.active


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_compression_takes_only_a_regular_file_under_a_parts_name(tmp_path: Path, kind: str) -> None:
    """A part swapped for a FIFO between a sweep's scan and the keeper's open blocked the keeper's
    thread for good (no more compression or retention); a link there had its target compressed into
    the capture folder and the link removed."""
    import threading

    part = tmp_path / "cap.003.jsonl"
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not the recorder's\n" * 100)
    if kind == "fifo":
        os.mkfifo(part)
    else:
        part.symlink_to(outside)
    done: list[Path | None] = []
    worker = threading.Thread(target=lambda: done.append(compress_part(part, retries=0)), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive() and kind == "fifo":
        os.close(os.open(part, os.O_WRONLY | os.O_NONBLOCK))  # let the blocked open go, for the test's end
        worker.join(10)
    assert done == [None]
    assert os.path.lexists(part) and not (tmp_path / "cap.003.jsonl.zst").exists()
    assert outside.read_bytes() == b"not the recorder's\n" * 100


def test_an_opening_part_whose_hidden_file_was_taken_for_stale_starts_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recorder stopped (SIGSTOP, a suspended machine) between creating its hidden file and locking it
    for longer than `OPENING_STALE` has its file removed by another recorder, which took it for a killed
    one's. The part is then opened anew under the same name, not failed (a record lost)."""
    path = tmp_path / f"{OLD_STEM}.000.jsonl"
    real_flock = fcntl.flock
    removed: list[str] = []

    def flock(fd: int, operation: int) -> None:
        if not removed:  # as the other recorder did while this one was stopped
            (hidden,) = tmp_path.glob(f".*{ret.OPENING_SUFFIX}")
            hidden.unlink()
            removed.append(hidden.name)
        real_flock(fd, operation)

    monkeypatch.setattr(ret, "fcntl", SimpleNamespace(flock=flock, LOCK_EX=fcntl.LOCK_EX, LOCK_NB=fcntl.LOCK_NB))
    fd = open_locked(path)
    monkeypatch.undo()
    try:
        assert removed == [f".{path.name}{ret.OPENING_SUFFIX}"]
        assert [p.name for p in tmp_path.iterdir()] == [path.name]
        os.write(fd, b"{}\n")
        other = os.open(path, os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # locked, as any open part
        os.close(other)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"{}\n"


def test_the_documented_age_of_a_stale_opening_file_is_the_one_in_use() -> None:
    root = Path(__file__).resolve().parent.parent
    for doc in (root / "captures" / "FORMAT.md", root / "README.md"):
        text = " ".join(doc.read_text().split())
        assert f"{ret.OPENING_STALE:g} seconds old" in text, doc.name
