"""The writer thread writes what it drained from its queue in one system call, sealed and verifiable,
and counts exactly the records a failed or short batch write did not write."""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon import chain
from addon import format as fmt
from addon import writer as writer_mod
from addon.writer import CaptureWriter
from analyzer.verify import Status, verify
from tests.peers.capture_tools import read_records

KEY = b"0123456789abcdef-batch"


def frame(i: int, size: int = 40) -> dict[str, Any]:
    return {fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c1", fmt.F_DIR: fmt.C2S, "i": i, **fmt.payload_fields(b"x" * size)}


class Syscalls:
    """Wraps `os.write`/`os.writev` to count the calls (and to fail or cut them when asked)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[int] = []
        """Bytes offered by each call."""
        self.fail = False
        self.cut: float | None = None
        """When set, the next call writes only this fraction of what it was given."""
        self.short: int | None = None
        """When set, the next call writes all but this many bytes of what it was given; the call after
        it finds the disk full (as a real one answers a write after a short one), later ones do not."""
        self.cap: int | None = None
        """When set, every call writes at most this many bytes, as the kernel caps one call (0x7ffff000
        bytes on Linux) without an error."""
        self.delay = 0.0
        """Seconds each call takes (a slow disk)."""
        self._full_once = False
        real_write, real_writev = os.write, os.writev

        def write(fd: int, data: bytes | memoryview) -> int:
            return self._do(fd, [data], lambda fd, pieces: real_write(fd, pieces[0]), real_write)

        def writev(fd: int, pieces: Sequence[bytes | memoryview]) -> int:
            return self._do(fd, list(pieces), real_writev, real_write)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "writev", writev)

    def _do(self, fd: int, pieces: list[Any], real: Any, real_write: Any) -> int:
        size = sum(len(p) for p in pieces)
        self.calls.append(size)
        time.sleep(self.delay)
        if self.fail or self._full_once:
            self._full_once = False
            raise OSError(errno.ENOSPC, "No space left on device")
        if self.cut is not None or self.short is not None:
            keep = int(size * self.cut) if self.cut is not None else size - (self.short or 0)
            self.cut = self.short = None
            self._full_once = True
            return real_write(fd, b"".join(bytes(p) for p in pieces)[:keep])
        if self.cap is not None and size > self.cap:
            return real_write(fd, b"".join(bytes(p) for p in pieces)[: self.cap])
        return real(fd, pieces)


def held_writer(out: Path, **kw: Any) -> tuple[CaptureWriter, threading.Event, list[str]]:
    """A writer whose thread stops inside the observer of its first batch (its first record) until the
    event is set, so that the records queued meanwhile are all waiting when it comes back for more."""
    release = threading.Event()
    held = threading.Event()

    def observer(records: list[dict[str, Any]]) -> None:
        if not held.is_set():
            held.set()
            assert release.wait(10)

    messages: list[str] = []
    w = CaptureWriter(out, transport=fmt.STDIO, server="srv", observer=observer, on_error=messages.append, **kw)
    w.write(frame(0))
    assert held.wait(10)
    return w, release, messages


@pytest.mark.parametrize("key", [None, KEY])
def test_queued_records_are_written_in_one_system_call_and_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: bytes | None
) -> None:
    calls = Syscalls(monkeypatch)
    w, release, messages = held_writer(tmp_path, chain_key=key)
    for i in range(1, 11):
        w.write(frame(i, size=40 if i != 10 else 200_000))  # a big record (written from its pieces) ends a batch
    before = len(calls.calls)
    release.set()
    assert w.flush(10)
    assert len(calls.calls) - before == 1, calls.calls[before:]
    w.close()
    assert messages == [] and w.lost == 0 and w.written == 12
    records = read_records(w.paths)
    assert [r.get("i") for r in records if r[fmt.F_TYPE] == fmt.FRAME] == list(range(11))
    assert [r[fmt.F_SEQ] for r in records if r[fmt.F_TYPE] == fmt.FRAME] == list(range(1, 12))
    result = verify(w.paths, key=key)
    assert [f.status for f in result.files] == [Status.VERIFIED] and result.findings == []


def test_a_failed_batch_write_counts_every_record_of_the_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Syscalls(monkeypatch)
    w, release, messages = held_writer(tmp_path)
    for i in range(1, 6):
        w.write(frame(i))
    calls.fail = True
    release.set()
    assert w.flush(10)
    assert w.lost == 5 and w.written == 2  # the header and frame 0
    calls.fail = False
    w.write(frame(6))
    w.close()
    records = read_records(w.paths)
    assert [r[fmt.F_TYPE] for r in records] == [fmt.HEADER, fmt.FRAME, fmt.CAPTURE_ERROR, fmt.FRAME, fmt.PART_END]
    assert records[2]["lost"] == 5 and [records[1]["i"], records[3]["i"]] == [0, 6]
    assert records[3][fmt.F_SEQ] == 7  # the lost records' numbers stay a visible gap
    assert len(messages) == 2 and "5 record(s) lost" in messages[1]
    assert [f.status for f in verify(w.paths).files] == [Status.VERIFIED]


def test_a_short_batch_write_keeps_the_whole_lines_and_counts_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Syscalls(monkeypatch)
    w, release, messages = held_writer(tmp_path, chain_key=KEY)
    for i in range(1, 9):
        w.write(frame(i))
    calls.cut = 0.55  # eight lines of one length: the cut is inside the fifth
    release.set()
    assert w.flush(10)
    assert "short write" in messages[0]
    w.write(frame(9))  # the disk has room again
    w.close()
    # The line the short write tore is completed before anything else is written: every line
    # parses (before, the torn half was glued to the capture-error record, which was lost with it).
    parsed = [orjson.loads(line) for line in w.paths[0].read_bytes().split(b"\n")[:-1]]
    whole = [p["i"] for p in parsed if p[fmt.F_TYPE] == fmt.FRAME]
    kept = len(whole) - 2  # frame 0 and frame 9 aside: four whole, the torn fifth completed
    assert kept == 5 and whole == [*range(kept + 1), 9]
    assert w.lost == 8 - kept and w.written == 2 + kept + 2  # + the capture-error record and frame 9
    (error,) = [p for p in parsed if p[fmt.F_TYPE] == fmt.CAPTURE_ERROR]
    assert error["lost"] == 8 - kept
    assert parsed[-1][fmt.F_TYPE] == fmt.PART_END
    result = verify(w.paths, key=KEY)
    assert [f.status for f in result.files] == [Status.VERIFIED] and result.findings == []


def test_a_short_write_that_leaves_only_a_newline_out_wrote_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full disk after all but a line's newline: a reader reads that last line whole, so it is
    # written, not lost (it was both: the stdio tee's disk-full test counted 806 records of 805).
    calls = Syscalls(monkeypatch)
    w, release, messages = held_writer(tmp_path)
    for i in range(1, 4):
        w.write(frame(i))
    calls.short = 1
    release.set()
    assert w.flush(10)
    calls.fail = True  # and the disk stays full: the part-end and the newline are never written
    w.close()
    data = w.paths[0].read_bytes()
    assert not data.endswith(b"\n")
    parsed = [orjson.loads(line) for line in data.split(b"\n")]
    assert [p["i"] for p in parsed if p[fmt.F_TYPE] == fmt.FRAME] == [0, 1, 2, 3]
    assert w.lost == 0 and w.written == len(parsed) == 5
    assert messages == []  # the records are all there: nothing to report


def test_a_big_line_ends_its_batch_so_two_are_never_held_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line of 64 KiB or more is written as soon as it is encoded (with the small lines before it),
    so the writer never holds two of them: two megabyte lines alive together made malloc give their
    memory back and fault it in again for the next, about 250 page faults per record."""
    calls = Syscalls(monkeypatch)
    w, release, messages = held_writer(tmp_path, chain_key=KEY)
    sizes = [40, 40, 200_000, 40, 40, 300_000, 200_000, 40]
    for i, size in enumerate(sizes, start=1):
        w.write(frame(i, size=size))
    before = len(calls.calls)
    release.set()
    assert w.flush(10)
    batches = calls.calls[before:]
    assert len(batches) == 4, batches  # 1-3, 4-6, 7, 8
    assert batches[0] > 200_000 and 300_000 < batches[1] < 400_000 and 200_000 < batches[2] < 300_000
    assert batches[3] < 1_000
    w.close()
    assert messages == [] and w.lost == 0 and w.written == len(sizes) + 2
    records = read_records(w.paths)
    assert [r.get("i") for r in records if r[fmt.F_TYPE] == fmt.FRAME] == list(range(len(sizes) + 1))
    assert [len(r[fmt.F_RAW]) for r in records if r[fmt.F_TYPE] == fmt.FRAME][1:] == sizes
    result = verify(w.paths, key=KEY)
    assert [f.status for f in result.files] == [Status.VERIFIED] and result.findings == []


# --- a long payload, given in pieces ------------------------------------------------------------------


def text_frame(i: int, payload: bytes | fmt.Pieces) -> dict[str, Any]:
    """A frame as the tee makes it, stamped: the same record whatever the writer's clock says."""
    return {
        fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c1", **fmt.payload_fields(payload), fmt.F_NL: True,
        fmt.F_DIR: fmt.S2C, fmt.F_TS: 1796000000.25, fmt.F_MONO: 12.5 + i, fmt.F_SERVER: "srv",
    }  # fmt: skip


def in_pieces(data: bytes, size: int) -> fmt.Pieces:
    return fmt.Pieces([data[i : i + size] for i in range(0, len(data), size)])


@given(
    payload=st.one_of(st.text(max_size=400).map(str.encode), st.binary(max_size=400)),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
    block=st.integers(min_value=1, max_value=40),
)
@settings(max_examples=300, deadline=None)
def test_a_payload_in_pieces_is_encoded_as_orjson_encodes_its_text(payload: bytes, cuts: list[int], block: int) -> None:
    """Any payload (UTF-8 to escape or not, or not UTF-8 at all), in any pieces, encoded a few bytes at a
    time (characters and base64 groups cut between blocks): the very bytes of its record as text."""
    bounds = sorted({c % (len(payload) + 1) for c in cuts} | {0, len(payload)})
    pieces = fmt.Pieces([payload[a:b] for a, b in itertools.pairwise(bounds)])
    record = {**text_frame(1, pieces), fmt.F_SEQ: 7}
    given = dict(record)
    as_text = {**text_frame(1, payload), fmt.F_SEQ: 7}
    with mock.patch.object(writer_mod, "_TEXT_BLOCK", block):
        line = writer_mod._encode_long(record)
    assert line is not None
    got = b"".join(line.pieces) if isinstance(line, chain.Pieced) else line
    assert got == orjson.dumps(as_text, option=writer_mod._ENCODE_OPTS)
    assert list(record) == list(given) and all(record[k] is v for k, v in given.items())  # the same fields
    # the field's text now holds what was written of it (the pieces let go), and still reads as the text
    field = fmt.F_RAW if fmt.F_RAW in as_text else fmt.F_RAW_B64
    value = record[field]
    assert isinstance(value, fmt.PieceText) and value.pieces is None and value.encoded is not None
    assert b'"%b"' % b"".join(value.encoded) == orjson.dumps(as_text[field])
    assert value.text() == as_text[field]
    if field == fmt.F_RAW:
        assert value.holds(b"\\", b"a") == (b"\\" in payload or b"a" in payload)


LONG_TEXT = ('caf\u00e9 \\"quoted\\"\\n\t\U0001f600 \u2014 ' * 12000).encode()


@pytest.mark.parametrize("key", [None, KEY])
@pytest.mark.parametrize("block", [1, 5000, 4 << 20])
def test_a_payload_in_pieces_is_written_as_its_text_is_and_verifies(
    tmp_path: Path, key: bytes | None, block: int
) -> None:
    """The lines of long payloads given in pieces are those of the same payloads as text, and verify
    (their digests cover the pieces in order); the number of blocks stays bounded (`block` 1: 256)."""
    payloads = [b"short", LONG_TEXT, b"\xff" + LONG_TEXT, b"x" * 70_000, b"y"]
    written: list[list[bytes]] = []
    with mock.patch.object(writer_mod, "_TEXT_BLOCK", block):
        for given_as in ("text", "pieces"):
            messages: list[str] = []
            out = tmp_path / given_as
            w = CaptureWriter(out, transport=fmt.STDIO, server="srv", chain_key=key, on_error=messages.append)
            for i, payload in enumerate(payloads):
                w.put(text_frame(i, in_pieces(payload, 999) if given_as == "pieces" else payload))
            w.close()
            assert messages == [] and w.lost == 0
            # the header and part-end (and so every digest) differ: both hold the time they were written
            written.append([line[: line.rindex(b',"chain":"')] for line in w.paths[0].read_bytes().splitlines()[1:-1]])
            result = verify(w.paths, key=key)
            assert [f.status for f in result.files] == [Status.VERIFIED] and result.findings == []
    assert written[0] == written[1]
    records = read_records(tmp_path / "pieces")
    assert [fmt.payload_bytes(r) for r in records if r[fmt.F_TYPE] == fmt.FRAME] == payloads
    assert fmt.F_RAW_B64 in records[3] and fmt.F_RAW in records[2]


def test_a_short_write_inside_a_payload_in_pieces_is_completed_and_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Syscalls(monkeypatch)
    w, release, messages = held_writer(tmp_path, chain_key=KEY)
    w.put(text_frame(1, in_pieces(LONG_TEXT, 4096)))
    calls.cut = 0.5  # inside the payload
    release.set()
    assert w.flush(10)
    assert "short write" in messages[0] and w.lost == 1
    w.write(frame(2))  # the disk has room again: the torn line is completed first
    w.close()
    records = read_records(w.paths)
    types = [fmt.HEADER, fmt.FRAME, fmt.FRAME, fmt.CAPTURE_ERROR, fmt.FRAME, fmt.PART_END]
    assert [r[fmt.F_TYPE] for r in records] == types
    assert fmt.payload_bytes(records[2]) == LONG_TEXT and w.lost == 0
    result = verify(w.paths, key=KEY)
    assert [f.status for f in result.files] == [Status.VERIFIED] and result.findings == []


@pytest.mark.parametrize("in_pieces_of", [None, 4096])
def test_a_write_the_kernel_caps_is_written_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_pieces_of: int | None
) -> None:
    """One call writes at most 0x7ffff000 bytes on Linux, short without an error: a line of over 2 GiB
    (a tool's huge result through the tee) was torn there and the rest kept for a later write, counted
    lost and reported as a failed write, and the capture ended inside it when no later write came. The
    writer writes on from where the kernel stopped (measured by hand with the real tee and a 2.1 GiB
    line; here the cap is 64 kB)."""
    calls = Syscalls(monkeypatch)
    w, release, messages = held_writer(tmp_path, chain_key=KEY)
    if in_pieces_of is None:
        w.write(text_frame(1, LONG_TEXT))
    else:
        w.put(text_frame(1, in_pieces(LONG_TEXT, in_pieces_of)))
    w.write(frame(2))
    calls.cap = 64 << 10
    release.set()
    w.close()
    assert messages == [] and w.lost == 0 and w.write_errors == 0
    assert max(calls.calls) > calls.cap  # the line was offered whole, and cut by the cap
    records = read_records(w.paths)
    assert [r[fmt.F_TYPE] for r in records] == [fmt.HEADER, fmt.FRAME, fmt.FRAME, fmt.FRAME, fmt.PART_END]
    assert fmt.payload_bytes(records[2]) == LONG_TEXT
    result = verify(w.paths, key=KEY)
    assert [f.status for f in result.files] == [Status.VERIFIED] and result.findings == []


def test_close_waits_for_a_slow_disk_while_it_makes_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`close()` gave the writer `timeout` seconds in all, then returned with the writer still inside a
    long write, and the process ended it there: the tee relaying a 2.1 GiB answer to a disk taking
    30 s for it exited with the record torn, the part unclosed and nothing said. It now waits as long
    as the part keeps growing (here 64 kB every 50 ms against a timeout of 0.3 s)."""
    calls = Syscalls(monkeypatch)
    w, release, messages = held_writer(tmp_path)
    w.put(text_frame(1, in_pieces(LONG_TEXT, 4096)))
    w.write(frame(2))
    calls.cap = 64 << 10
    calls.delay = 0.05
    release.set()
    w.close(timeout=0.3)
    assert messages == [] and w.lost == 0
    records = read_records(w.paths)
    assert [r[fmt.F_TYPE] for r in records] == [fmt.HEADER, fmt.FRAME, fmt.FRAME, fmt.FRAME, fmt.PART_END]


def test_close_gives_up_on_a_stuck_disk_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that makes no progress (a hung network mount) is not waited for past `timeout`; what it
    leaves out is said, not lost in silence."""
    stuck, done = threading.Event(), threading.Event()
    real_writev = os.writev

    def writev(fd: int, pieces: Sequence[bytes | memoryview]) -> int:
        stuck.set()
        done.wait(30)
        return real_writev(fd, pieces)

    w, release, messages = held_writer(tmp_path)
    w.write(frame(1))
    w.write(frame(2))
    monkeypatch.setattr(os, "writev", writev)
    release.set()
    assert stuck.wait(10)
    w.close(timeout=0.3)
    done.set()
    assert len(messages) == 1 and "capture incomplete" in messages[0] and "still writing" in messages[0]
