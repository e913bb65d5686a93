"""The capture writer: naming, modes, rotation, ordering, failure counting and reporting."""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from addon import format as fmt
from addon import writer as writer_mod
from addon.writer import CaptureWriter, default_capture_dir, slug
from tests.peers.capture_tools import read_records


def make(out: Path, **kw: Any) -> tuple[CaptureWriter, list[str]]:
    messages: list[str] = []
    kw.setdefault("on_error", messages.append)
    w = CaptureWriter(out, transport=fmt.STDIO, server="srv", **kw)
    return w, messages


def frame(i: int, size: int = 10) -> dict[str, Any]:
    return {fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c1", fmt.F_DIR: fmt.C2S, "i": i, **fmt.payload_fields(b"x" * size)}


def test_put_queues_a_stamped_record_as_it_is_and_counts_it_lost_once_closed(tmp_path: Path) -> None:
    w, messages = make(tmp_path)
    stamped = {**frame(1), fmt.F_TS: 1.5, fmt.F_MONO: 2.5, fmt.F_SERVER: "other"}
    w.put(stamped)
    w.write(frame(2))
    w.close()
    w.put({**frame(3), fmt.F_TS: 1.5, fmt.F_MONO: 2.5, fmt.F_SERVER: "srv"})
    records = [r for r in read_records(w.paths[0]) if r[fmt.F_TYPE] == fmt.FRAME]
    assert [r["i"] for r in records] == [1, 2] and [r[fmt.F_SEQ] for r in records] == [1, 2]
    assert (records[0][fmt.F_TS], records[0][fmt.F_MONO], records[0][fmt.F_SERVER]) == (1.5, 2.5, "other")
    assert records[1][fmt.F_SERVER] == "srv"
    assert w.lost == 1 and messages == []


def test_header_first_and_fields(tmp_path: Path) -> None:
    w, messages = make(tmp_path, header_extra={"argv": ["srv", "--x"], "redaction": {"mode": "default"}})
    w.write(frame(1))
    w.close()
    (path,) = w.paths
    records = read_records(path)
    header = records[0]
    assert header[fmt.F_TYPE] == fmt.HEADER
    assert header["format"] == fmt.FORMAT_ID
    assert header["transport"] == fmt.STDIO and header[fmt.F_SERVER] == "srv"
    assert header["part"] == 0 and header["previous"] is None
    assert header["recorder_pid"] == os.getpid()
    assert header["argv"] == ["srv", "--x"] and header["redaction"] == {"mode": "default"}
    assert header[fmt.F_SEQ] == 0
    assert records[1][fmt.F_SEQ] == 1
    assert {fmt.F_TS, fmt.F_MONO, fmt.F_SERVER} <= records[1].keys()
    assert messages == []
    assert w.written == 2 and w.lost == 0


def test_modes_and_name(tmp_path: Path) -> None:
    out = tmp_path / "new" / "captures"
    w, _ = make(out)
    w.write(frame(1))
    w.close()
    (path,) = w.paths
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert re.fullmatch(rf"\d{{8}}T\d{{6}}\.\d{{6}}Z_srv_{os.getpid()}_[0-9a-f]{{6}}\.000\.jsonl", path.name)


def test_names_never_collide_and_sort_by_time(tmp_path: Path) -> None:
    writers = [make(tmp_path)[0] for _ in range(20)]
    for w in writers:
        w.write(frame(1))
        w.close()
    names = [w.paths[0].name for w in writers]
    assert len(set(names)) == 20
    # Same-process writers started in this order: their names sort in the same order (time first).
    assert [n[:23] for n in names] == sorted(n[:23] for n in names)


def test_rotation_keeps_seq_across_parts_and_links_parts(tmp_path: Path) -> None:
    w, messages = make(tmp_path, rotate_bytes=2000)
    for i in range(100):
        w.write(frame(i, size=50))
    w.close()
    assert len(w.paths) > 3
    seqs: list[int] = []
    for n, path in enumerate(w.paths):
        assert path.name.endswith(f".{n:03d}.jsonl")
        records = read_records(path)
        assert records[0][fmt.F_TYPE] == fmt.HEADER
        assert records[0]["part"] == n
        assert records[0]["previous"] == (w.paths[n - 1].name if n else None)
        assert path.stat().st_size <= 2000 or len(records) == 3  # one oversized record still gets a part
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert records[-1][fmt.F_TYPE] == fmt.PART_END
        assert records[-1][fmt.F_REASON] == (fmt.END_ROTATED if n < len(w.paths) - 1 else fmt.END_CLOSED)
        assert records[-1].get(fmt.F_NEXT) == (w.paths[n + 1].name if n < len(w.paths) - 1 else None)
        seqs += [r[fmt.F_SEQ] for r in records[1:-1]]
    assert seqs == list(range(1, 101))
    assert [r["i"] for r in read_records(w.paths) if r[fmt.F_TYPE] == fmt.FRAME] == list(range(100))
    assert messages == [] and w.lost == 0


def test_a_record_bigger_than_a_part_is_written_whole(tmp_path: Path) -> None:
    w, _ = make(tmp_path, rotate_bytes=1000)
    w.write(frame(0, size=10))
    w.write(frame(1, size=50_000))
    w.write(frame(2, size=10))
    w.close()
    records = read_records(w.paths)
    assert [r["len"] for r in records if r[fmt.F_TYPE] == fmt.FRAME] == [10, 50_000, 10]


def test_lines_are_in_seq_order_with_concurrent_writers(tmp_path: Path) -> None:
    w, _ = make(tmp_path)

    def burst(t: int) -> None:
        for i in range(500):
            w.write({fmt.F_TYPE: fmt.FRAME, "t": t, "i": i})

    threads = [threading.Thread(target=burst, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    records = read_records(w.paths)[1:-1]
    assert [r[fmt.F_SEQ] for r in records] == list(range(1, 2001))
    for t in range(4):
        assert [r["i"] for r in records if r["t"] == t] == list(range(500))


def test_unwritable_directory_counts_and_reports_once(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    w, messages = make(blocker / "captures")
    for i in range(7):
        w.write(frame(i))
    assert w.flush(10)
    assert w.lost == 7
    assert len(messages) == 1
    assert "cannot write capture" in messages[0] and str(blocker / "captures") in messages[0]
    w.close()
    assert len(messages) == 2
    assert "7 record(s) lost" in messages[1]
    assert w.paths == [] and w.written == 0


def test_capture_error_record_after_recovery(tmp_path: Path) -> None:
    out = tmp_path / "captures"
    out.write_text("in the way")  # the directory cannot be created yet
    w, messages = make(out)
    for i in range(3):
        w.write(frame(i))
    assert w.flush(10)
    assert w.lost == 3
    out.unlink()
    w.write(frame(3))
    w.write(frame(4))
    w.close()
    records = read_records(w.paths)
    assert [r[fmt.F_TYPE] for r in records] == [fmt.HEADER, fmt.CAPTURE_ERROR, fmt.FRAME, fmt.FRAME, fmt.PART_END]
    err = records[1]
    assert err["lost"] == 3 and err[fmt.F_SEQ] == 0 and "Errno" in err["error"]
    # Lost records leave a visible gap in seq.
    assert [r[fmt.F_SEQ] for r in records[2:4]] == [4, 5]
    assert len(messages) == 2 and "3 record(s) lost" in messages[1]


def test_removed_directory_is_a_reported_loss_and_a_new_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes into a removed (unlinked) part succeed; the writer must notice that they go nowhere."""
    monkeypatch.setattr(writer_mod, "_PART_CHECK_INTERVAL", 0.0)  # checked before every batch
    out = tmp_path / "captures"
    w, messages = make(out)
    for i in range(4):
        w.write(frame(i))
    assert w.flush(10)
    removed = w.paths[0]
    shutil.rmtree(out)
    w.write(frame(4))
    assert w.flush(10)
    assert w.lost == 4 and w.write_errors == 1
    assert len(messages) == 1 and f"{removed.name} was removed" in messages[0] and "4 record(s)" in messages[0]
    w.close()
    (part,) = out.iterdir()
    records = read_records(part)
    assert [r[fmt.F_TYPE] for r in records] == [fmt.HEADER, fmt.CAPTURE_ERROR, fmt.FRAME, fmt.PART_END]
    assert records[0]["previous"] == removed.name and records[1]["lost"] == 4 and records[2][fmt.F_SEQ] == 5
    assert "4 record(s) lost" in messages[-1]


def test_directory_removed_while_idle_is_reported_at_close(tmp_path: Path) -> None:
    out = tmp_path / "captures"
    w, messages = make(out)
    for i in range(3):
        w.write(frame(i))
    assert w.flush(10)
    shutil.rmtree(out)
    w.close()
    assert w.lost == 3 and any("3 record(s) in it lost" in m for m in messages)
    (part,) = out.iterdir()  # where the capture says what became of it
    assert [r[fmt.F_TYPE] for r in read_records(part)] == [fmt.HEADER, fmt.CAPTURE_ERROR, fmt.PART_END]


def test_failing_header_leaves_no_empty_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk (ENOSPC on every write) must not create one empty file per lost record."""
    real_write = os.write
    full = threading.Event()
    full.set()

    def write(fd: int, data: bytes) -> int:
        if full.is_set():
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(writer_mod.os, "write", write)
    w, messages = make(tmp_path)
    for i in range(5):
        w.write(frame(i))
    assert w.flush(10)
    assert list(tmp_path.iterdir()) == []
    assert w.lost == 5 and len(messages) == 1 and "No space left" in messages[0]
    full.clear()
    w.write(frame(5))
    w.close()
    (path,) = list(tmp_path.iterdir())
    assert path.name.endswith(".000.jsonl")
    records = read_records(path)
    assert [r[fmt.F_TYPE] for r in records] == [fmt.HEADER, fmt.CAPTURE_ERROR, fmt.FRAME, fmt.PART_END]
    assert records[1]["lost"] == 5 and records[0]["previous"] is None


def test_failure_mid_part_then_recovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write
    full = threading.Event()

    def write(fd: int, data: bytes) -> int:
        if full.is_set():
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(writer_mod.os, "write", write)
    monkeypatch.setattr(writer_mod.os, "writev", lambda fd, pieces: write(fd, b"".join(pieces)))  # batches
    w, messages = make(tmp_path)
    w.write(frame(0))
    assert w.flush(10)
    full.set()
    w.write(frame(1))
    w.write(frame(2))
    assert w.flush(10)
    full.clear()
    w.write(frame(3))
    w.close()
    records = read_records(w.paths)
    assert [r[fmt.F_TYPE] for r in records] == [fmt.HEADER, fmt.FRAME, fmt.CAPTURE_ERROR, fmt.FRAME, fmt.PART_END]
    assert records[2]["lost"] == 2
    assert [r["i"] for r in records if r[fmt.F_TYPE] == fmt.FRAME] == [0, 3]
    assert w.lost == 2 and w.written == 4
    assert len(messages) == 2


def test_short_write_is_a_loss_not_a_silent_tear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write
    calls = {"n": 0}

    def write(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] == 2:  # the first record after the header
            return real_write(fd, data[: len(data) // 2])
        if calls["n"] == 3:  # a real disk full after a short write: the next call fails
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(writer_mod.os, "write", write)
    monkeypatch.setattr(writer_mod.os, "writev", lambda fd, pieces: write(fd, b"".join(pieces)))  # batches
    w, messages = make(tmp_path)
    w.write(frame(0))
    assert w.flush(10)  # frame 0 alone in its write (queued together, both would share one)
    w.write(frame(1))
    w.close()
    assert "short write" in messages[0]
    # The next write completes the torn line first: frame 0 is whole after all (lost no more), and
    # the capture-error record that says a write failed is intact (it was glued to the torn half).
    records = read_records(w.paths)
    assert [r[fmt.F_TYPE] for r in records] == [fmt.HEADER, fmt.FRAME, fmt.CAPTURE_ERROR, fmt.FRAME, fmt.PART_END]
    assert [r["i"] for r in records if r[fmt.F_TYPE] == fmt.FRAME] == [0, 1]
    assert records[2]["lost"] == 0 and w.lost == 0 and w.written == 4  # the part-end is not counted


def test_unencodable_record_is_counted(tmp_path: Path) -> None:
    w, messages = make(tmp_path)
    w.write({fmt.F_TYPE: fmt.FRAME, "bad": object()})
    w.write(frame(1))
    w.close()
    assert w.lost == 1
    assert "not encodable" in messages[0]
    types = [r[fmt.F_TYPE] for r in read_records(w.paths)]
    assert types == [fmt.HEADER, fmt.CAPTURE_ERROR, fmt.FRAME, fmt.PART_END]


def test_write_after_close_is_counted(tmp_path: Path) -> None:
    w, _ = make(tmp_path)
    w.close()
    w.write(frame(1))
    assert w.lost == 1
    w.close()  # idempotent


def test_context_manager_and_flush(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path, transport=fmt.HTTP, server="https://x/mcp") as w:
        w.write(frame(1))
        assert w.flush(10)
        assert w.written == 2
    assert "_https-x-mcp_" in w.paths[0].name


def test_default_dir_and_slug(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ERASCOPE_CAPTURE_DIR", str(tmp_path / "a"))
    assert default_capture_dir() == tmp_path / "a"
    monkeypatch.delenv("ERASCOPE_CAPTURE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_capture_dir() == tmp_path / "state" / "erascope" / "captures"
    assert slug("python -m weather/../x") == "python--m-weather-..-x"
    assert slug("///") == "server"
    assert len(slug("a" * 100)) == 40
