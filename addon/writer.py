"""The one capture writer every capture tool uses.

Recording must never slow down or break the traffic it watches, so `write()` only stamps the
record and hands it to a background thread; encoding (orjson) and disk I/O happen there.

Flush policy: each record is encoded to one line. Whenever the writer thread wakes, it takes every
record already queued (up to `_BATCH_RECORDS` and `_BATCH_BYTES`) and writes their lines with one
`os.write`/`os.writev` on an unbuffered file descriptor, so a record is in the kernel as soon as the
writer thread gets to it (it never waits for more to come, but for `batch_interval`) and survives the
recorder being killed. `fsync` happens when a part is rotated out and on `close()`, and every
`fsync_interval` seconds when that is set; power loss can cost at most the records since then.

Failure policy: when a write fails (disk full, file unwritable, directory gone) every record it
carried is counted as lost, `on_error` is called once with a clear message, and the writer keeps
trying with each new record. A write that stops short is written on from where it stopped (the
kernel caps one call at 0x7ffff000 bytes); when that fails (the disk is full), the lines written
whole are kept and the others counted as lost; at most the last line is torn, and the rest of that
line is what the part gets first once a write succeeds again (the line is then whole, and no longer
lost: a torn half never glues onto the next line). A line short only of its newline reads whole and
counts as written. When a write succeeds again, a `capture-error` record with the count lost so far
is written first, so the gap is visible inside the capture too. Writes into a part that was removed
(its directory deleted) succeed and go nowhere: the writer looks at the open part's link count
before a batch, at most every `_PART_CHECK_INTERVAL` seconds (an `fstat` costs about what a small
batch's write does), and counts every record of a removed part as lost, reports it, and opens a new
part. `close()` waits for the writer as long as it makes progress, and reports the final count (or,
after `timeout` seconds without progress, what the writer did not get to write).

Rotation and retention: a part is rotated out when the next record would take it past
`rotate_bytes`, or once it is `rotate_age` seconds old (also while no record comes: the writer
thread wakes for it). When the next part cannot be made (the directory not writable, out of inodes, a
proxy out of file descriptors), the records go on into the open part, past the size or age, and a new
part is tried again every `_ROTATE_RETRY` seconds; that is reported once. The open part is locked
(`addon.retention.open_locked`) so that retention, in this process or another, never removes it.
Each closed part is handed to a `PartKeeper`, which compresses it and sweeps the directory on its own
thread (see `addon.retention`). The hidden files of recorders killed while opening a part are removed
by the keeper, or without one by the writer when it opens its first part
(`addon.retention.remove_stale_openings`). `close()` leaves `paths` naming the parts as they are
then: compressed, perhaps by another recorder's keeper.

Chain: every line is sealed with the hash chain of `addon.chain` (its digest covers the previous
line's digest and the line's bytes as written); each part ends with a `part-end` record, whose
digest is the part's final one, and the next part's header starts from it.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import datetime as dt
import os
import queue
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson

from addon import chain
from addon import format as fmt
from addon.memory import release_freed
from addon.retention import PartKeeper, Retention, current_name, open_locked, remove_stale_openings
from addon.version import tool_version

DEFAULT_ROTATE_BYTES: Final = 256 * 1024 * 1024
_ENCODE_OPTS: Final = orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS
_STOP: Final = object()
_SEAL_BYTES: Final = len(chain.FIELD_OPEN) + 12 + chain.SEAL_TAIL_LEN
"""What sealing adds to a line at most (with a line index of up to 11 digits)."""
_BATCH_RECORDS: Final = 256
"""Records taken from the queue at most per wake-up (the rest wait for the next round)."""
_BATCH_BYTES: Final = 4 << 20
"""Bytes of sealed lines written at most by one system call (but a single longer line)."""
_BIG_LINE: Final = 64 << 10
"""A line this long ends its batch: it is written at once (see `_write_records`)."""
_PART_CHECK_INTERVAL: Final = 0.1
"""Seconds between checks that the open part still has a name (see `_check_part`): an `fstat` costs
about as much as a small batch's write, so it is not made for every batch."""
_ROTATE_RETRY: Final = 1.0
"""Seconds between attempts to rotate after one failed to make the next part: the open part takes the
records meanwhile (losing them would be worse than a part past `rotate_bytes`), and an idle writer
thread whose part came of age does not try again in a loop."""
_TEXT_BLOCK: Final = 1 << 20
"""Bytes of a long payload (`fmt.PieceText`) encoded at a time, at least (see `_text_blocks`)."""
_TEXT_BLOCKS: Final = 512
"""Blocks a long payload is encoded in at most (longer ones take longer blocks): with the record's two
ends and its seal, its line stays within the pieces one `os.writev` takes."""
_TRIM_BYTES: Final = 8 << 20
"""Bytes of a long payload's pieces let go between two hand-backs of freed memory (`release_freed`).

The pieces are let go as they are encoded (`_text_blocks`), but that lowers the tee's memory only
when glibc gave each piece a mapping of its own. It does so only for a block past a threshold it
raises to the largest mapped block freed so far (up to 32 MiB): once a pump's megabyte read buffer
was freed (the client's pump ends at its EOF), a long line's pieces land in a reading thread's heap,
which is given back only from its top, and stayed resident, freed, while the encoded record grew
beside them: twice the line at the peak."""
_BATCH_PIECES: Final = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 16, 1024) - 3
"""Pieces one `os.writev` may take (less one sealed line's worth)."""


def slug(text: str, limit: int = 40) -> str:
    """A filesystem-safe, readable fragment of a server key, for file names."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return (cleaned or "server")[:limit]


def state_dir() -> Path:
    """erascope's state directory: `$XDG_STATE_HOME/erascope`, else `~/.local/state/erascope`.

    Everything erascope keeps between runs lives here (unless redirected): the captures, the
    redaction key and mitmproxy's configuration directory.
    """
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "erascope"


def default_capture_dir() -> Path:
    """`$ERASCOPE_CAPTURE_DIR`, else `captures` in the state directory (`state_dir()`)."""
    env = os.environ.get("ERASCOPE_CAPTURE_DIR")
    if env:
        return Path(env)
    return state_dir() / "captures"


def mitmproxy_confdir() -> Path:
    """mitmproxy's confdir for `record http`: its CA files stay in erascope's state, not in ~/.mitmproxy."""
    return state_dir() / "mitmproxy"


def _write_on(fd: int, pieces: list[bytes | memoryview], written: int, size: int) -> tuple[int, str]:
    """After a write of `pieces` (`size` bytes) that wrote `written`, write the rest, as long as each
    call writes something. Returns the bytes written in all, and why it stopped short (", " and the
    error; "" when it did not).

    A write to a regular file stops short without an error at the kernel's limit for one call
    (0x7ffff000 bytes on Linux: a line of over 2 GiB), and the rest is to be written on; a disk that
    filled up shows in the next call, which fails, so a short write is a failure only then.
    """
    while 0 < written < size:
        rest: list[bytes | memoryview] = []
        offset = 0
        for piece in pieces:
            if offset + len(piece) > written:
                rest.append(memoryview(piece)[max(0, written - offset) :])
            offset += len(piece)
        try:
            more = os.write(fd, rest[0]) if len(rest) == 1 else os.writev(fd, rest)
        except OSError as exc:
            return written, f", then {exc}"
        if more == 0:
            break
        written += more
    return written, ""


def _encode_long(record: dict[str, Any]) -> bytes | chain.Pieced | None:
    """`record` encoded as orjson encodes it, but for its one `fmt.PieceText` field, whose JSON string is
    put in by blocks (`_text_blocks`): the same bytes, and no `str` nor whole copy of the payload is made.
    None when the record holds no such field, or another value orjson cannot encode."""
    short: dict[str, Any] = {}  # the record up to that field, the field empty
    for key, value in record.items():
        if value.__class__ is fmt.PieceText:
            short[key] = ""
            break
        short[key] = value
    else:
        return None
    record[key] = ""
    try:
        # A dict is encoded member after member: up to the field's empty string, both encodings agree.
        cut = len(orjson.dumps(short, option=_ENCODE_OPTS)) - len(b'"}\n')
        line = orjson.dumps(record, option=_ENCODE_OPTS)
    except TypeError:
        return None
    finally:
        record[key] = value
    return chain.pieced([line[:cut], *_text_blocks(value), line[cut:]])


def _text_blocks(text: fmt.PieceText) -> list[bytes | memoryview]:
    """What orjson writes between the quotes of `text`'s JSON string, a block at a time; `text` holds it
    from then on, its pieces let go as they are encoded (`fmt.PieceText`).

    A block is a megabyte or more of the pieces, cut after a whole character (base64: a multiple of three
    bytes), written as orjson writes that much text (base64 needs no escaping): JSON escapes a
    character at a time, so the blocks are the whole string's escaped text, in order.
    """
    assert text.pieces is not None
    chunks = text.pieces.chunks
    block = max(_TEXT_BLOCK, len(text.pieces) // _TEXT_BLOCKS)
    decode = codecs.getincrementaldecoder("utf-8")().decode  # keeps a character cut at a block's end
    out: list[bytes | memoryview] = []
    group: list[bytes] = []
    held = let_go = 0
    for i in range(len(chunks)):
        chunk, chunks[i] = chunks[i], b""  # let go once encoded: the payload is never held twice over
        group.append(chunk)
        held += len(chunk)
        last = i == len(chunks) - 1
        if held < block and not last:
            continue
        data = b"".join(group)
        group, held = [], 0
        if text.b64:
            cut = len(data) if last else len(data) - len(data) % 3
            if cut < len(data):
                group, held = [data[cut:]], len(data) - cut  # begins the next block
            out.append(base64.b64encode(memoryview(data)[:cut]))
        else:
            out.append(memoryview(orjson.dumps(decode(data, last)))[1:-1])
        let_go += len(data)
        del data, chunk  # before the next block's text is made
        if let_go >= _TRIM_BYTES:  # what was let go must leave the process, not only the payload
            release_freed()
            let_go = 0
    text.pieces, text.encoded = None, out
    return out


class CaptureWriter:
    """Writes records of one capture (one stdio spawn, or one proxy run) to rotating JSONL parts.

    File names sort by start time and never collide between concurrent recorders:
    `<UTC start>_<server slug>_<pid>_<random>.<part>.jsonl`.
    """

    def __init__(
        self,
        out_dir: Path,
        *,
        transport: str,
        server: str,
        header_extra: dict[str, Any] | None = None,
        rotate_bytes: int = DEFAULT_ROTATE_BYTES,
        fsync_interval: float | None = None,
        batch_interval: float = 0.0,
        on_error: Callable[[str], None] | None = None,
        rotate_age: float | None = None,
        retention: Retention | None = None,
        on_retention: Callable[[str], None] | None = None,
        observer: Callable[[list[dict[str, Any]]], None] | None = None,
        chain_key: bytes | None = None,
        chain_alg: str | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.transport = transport
        self.server = server
        self.rotate_bytes = rotate_bytes
        self.rotate_age = rotate_age
        """Seconds after which a part is rotated out (None: by size only)."""
        self._observer = observer
        """Called on the writer thread with every batch of records taken (written or lost), in order:
        live counters that must not cost the relay or the proxy's event loop anything (see
        `addon.metrics`). One call per batch, not per record: the records come many at a time."""
        self.fsync_interval = fsync_interval
        self.batch_interval = batch_interval
        """When > 0, the writer thread naps this long whenever it has caught up, so records that arrive
        meanwhile are written in one go instead of each waking the thread (a wake-up per record costs
        a latency-sensitive relay more than the write itself). Records reach the kernel at most this
        much later."""
        self._on_error = on_error
        self._header_extra = dict(header_extra or {})
        started = dt.datetime.now(dt.UTC)
        self.started = started
        self._stem = (
            f"{started.strftime('%Y%m%dT%H%M%S.%fZ')}_{slug(server)}_{os.getpid()}_{secrets.token_hex(3)}"
        )
        self.paths: list[Path] = []
        self.written = 0
        """Records written successfully (headers and capture-error records included, `part-end` records not)."""
        self.lost = 0
        """Records that could not be written."""
        self.write_errors = 0
        """Failed attempts to write (or encode) a record; each also counts in `lost`, but for the
        writer's own `capture-error` records."""
        self.last_error: str | None = None
        self._reported = False
        self._pending_error = False
        self._seq = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._fd: int | None = None
        self._part = -1
        self._part_bytes = 0
        self._part_records = 0
        self._part_oob = 0
        """Lines of the open part that are not traffic (its header, `capture-error` records)."""
        self._next_check = 0.0
        """When `_check_part` looks at the open part next (monotonic)."""
        self._torn = b""
        """What a short write left unwritten of the open part's last line: written before anything else."""
        self._torn_digest = b""
        """That line's digest: where the chain stands once it is whole."""
        self._torn_lost = 0
        """1 when that line counts in `lost` until it is completed (a traffic record), else 0."""
        self._last_fsync = time.monotonic()
        self._part_opened = 0.0
        self._rotate_retry = 0.0
        """When a rotation that failed to make the next part is tried again (monotonic)."""
        self._rotate_reported = False
        self._closed_bytes = 0
        """Bytes of the parts closed so far (`bytes_written` adds the open part's)."""
        self._bytes_lock = threading.Lock()
        self.keeper: PartKeeper | None = None
        """Compresses closed parts and applies the retention bound, when `retention` asks for either."""
        if retention is not None and retention.active:
            self.keeper = PartKeeper(
                self.out_dir,
                retention,
                log=on_retention or on_error or (lambda message: None),
                warn=on_error,
                on_compressed=self._compressed,
            )
            if retention.compress:
                self.keeper.tidy_soon()  # what earlier runs left uncompressed
            self.keeper.sweep_soon()  # the directory may be over its bound from earlier runs
        self._tidy_openings = self.keeper is None
        """The writer is to remove stale hidden `.opening` files when it opens its first part
        (`remove_stale_openings`): on its own thread, never the caller's, once."""
        # `chain_alg` None: the default (`chain.DEFAULT`, or `chain.DEFAULT_KEYED` with a key)
        self._chainer = chain.Chainer(chain_key, chain_alg)
        # Room kept in every part for its closing record, so parts stay within `rotate_bytes`.
        self._end_bytes = _SEAL_BYTES + len(
            orjson.dumps(
                {
                    fmt.F_TYPE: fmt.PART_END, fmt.F_SEQ: 0, fmt.F_TS: time.time(), fmt.F_MONO: time.monotonic(),
                    fmt.F_SERVER: server, fmt.F_REASON: fmt.END_ROTATED, fmt.F_NEXT: f"{self._stem}.0000.jsonl",
                },
                option=_ENCODE_OPTS,
            )
        )  # fmt: skip
        self.digest = chain.START
        """The digest of the last line written: after `close()`, the capture's final digest."""
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="erascope-writer", daemon=True)
        self._thread.start()

    # --- producer side (any thread) ------------------------------------------------------------
    def write(self, record: dict[str, Any]) -> None:
        """Queue a record. Never blocks on I/O and never raises for I/O reasons.

        Stamps `ts`/`mono`/`server` when the caller left them out. `seq` is assigned by the writer
        thread in queue order, so lines are always in `seq` order even when several threads write,
        and this method takes no lock: it is safe to call from a signal handler (SimpleQueue.put is
        reentrant).
        """
        if self._closed:
            self.lost += 1
            return
        # Tested, not `setdefault`: its default would read both clocks for every record that has them.
        if fmt.F_TS not in record:
            record[fmt.F_TS] = time.time()
        if fmt.F_MONO not in record:
            record[fmt.F_MONO] = time.monotonic()
        if fmt.F_SERVER not in record:
            record[fmt.F_SERVER] = self.server
        self._queue.put(record)

    def put(self, record: dict[str, Any]) -> None:
        """`write` for a record that carries its `ts`, `mono` and `server` already: queued as it is.

        For a recorder that stamps its records when it makes them (the stdio tee, once per line).
        """
        if self._closed:
            self.lost += 1
            return
        self._queue.put(record)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record queued before this call was written (or counted lost).

        True when that happened within `timeout`. Not needed for durability (`close()` does it);
        useful to observe the writer's counters at a known point.
        """
        if self._closed:
            return not self._thread.is_alive()
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write everything queued, fsync, close. Reports lost records through `on_error`.

        Waits as long as the writer makes progress (a huge record to a slow disk can take minutes),
        and gives up once `timeout` seconds pass without any (a hung mount), saying what is missing.
        """
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        progress = self._progress()
        while True:
            self._thread.join(timeout)
            if not self._thread.is_alive():
                break
            now = self._progress()
            if now == progress:
                if self._on_error is not None:
                    self._on_error(
                        f"erascope: capture incomplete: the capture writer was still writing after {timeout:g} s"
                        " without progress; the records it had not written yet and the part's closing record"
                        " are missing; traffic was relayed unaffected"
                    )
                break
            progress = now
        if self.keeper is not None:
            self.keeper.close(timeout)  # the last part is compressed before the recorder reports it
        # Another recorder's keeper may have compressed a part meanwhile, without a word to this one.
        for i, path in enumerate(self.paths):
            self.paths[i] = current_name(path) or path
        if self.lost and self._on_error is not None:
            self._on_error(
                f"erascope: capture incomplete: {self.lost} record(s) lost"
                f" ({self.last_error}); traffic was relayed unaffected"
            )

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writer thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        get = self._queue.get
        get_nowait = self._queue.get_nowait
        empty = self._queue.empty
        while True:
            try:
                item = get(True, None if self.rotate_age is None else self._age_left())  # positional: cheaper
            except queue.Empty:  # the open part came of age while no record arrived
                self._check_part()
                if self._aged():
                    with contextlib.suppress(OSError):  # the next record retries, and reports
                        self._rotate()
                continue
            # Take what is queued already, so its lines go to the kernel in one system call.
            batch: list[dict[str, Any]] = []
            waiting: list[threading.Event] = []
            stop = False
            while True:
                if item.__class__ is dict:
                    batch.append(item)
                    if len(batch) >= _BATCH_RECORDS:
                        break
                elif item is _STOP:
                    stop = True
                    break
                elif isinstance(item, threading.Event):
                    waiting.append(item)  # set once the records queued before it are written
                else:
                    batch.append(item)
                if empty():  # tested, not caught: this thread alone takes from the queue, and raising costs
                    break
                item = get_nowait()
            if batch:
                self._check_part()
                if self.rotate_age is not None and self._aged():
                    with contextlib.suppress(OSError):  # else the records' own write opens the part, or reports
                        self._rotate()
                self._write_records(batch)
                if self._observer is not None:
                    self._observe(batch)
                if self.fsync_interval is not None and self._fd is not None:
                    now = time.monotonic()
                    if now - self._last_fsync >= self.fsync_interval:
                        self._fsync()
                        self._last_fsync = now
            # Let go of the records before waiting for more: held until the next came, a long payload's
            # encoded record stayed alive while the next long line was read (both, at that one's peak).
            del batch, item
            for event in waiting:
                event.set()
            if stop:
                break
            if self.batch_interval > 0 and self._queue.empty():
                time.sleep(self.batch_interval)
        self._check_part(force=True)
        if self._pending_error:
            self._try_write_error_record()
        self._end_part(fmt.END_CLOSED, None)
        self._close_part()

    def _observe(self, batch: list[dict[str, Any]]) -> None:
        observer = self._observer
        assert observer is not None
        try:
            observer(batch)
        except Exception as exc:  # counters are best effort; the capture is what matters
            self._observer = None
            if self._on_error is not None:
                self._on_error(f"erascope: live counters stopped ({exc!r}); the capture goes on")

    def _write_records(self, records: list[dict[str, Any]]) -> None:
        """Encode and write `records` in order, as few system calls as the parts and the failures allow."""
        # This loop runs once per record: names are locals, and a batch's bounds are one number.
        lines: list[bytes | chain.Pieced] = []
        size = 0  # bytes of `lines` once sealed (at most)
        limit = 0  # what `size` may grow to: the batch's bound, or the part's room before its closing record
        dumps, f_seq, seq = orjson.dumps, fmt.F_SEQ, self._seq
        try:
            for record in records:
                # Numbered before the attempt, so a lost record leaves a visible gap in `seq`.
                seq += 1
                record[f_seq] = seq
                try:
                    line: bytes | chain.Pieced | None = dumps(record, option=_ENCODE_OPTS)
                except TypeError as exc:  # a long payload (orjson does not know it), or a recorder bug
                    if lines:  # a long line is written alone; a bug's record must not hold the others back
                        self._flush_lines(lines)
                        lines, size = [], 0
                    line = _encode_long(record)
                    if line is None:  # a recorder bug must not kill the writer thread
                        self._fail(f"record not encodable: {exc}")
                        continue
                if self._pending_error and not self._try_write_error_record():
                    self._fail(self.last_error or "write failed")
                    continue
                size += len(line) + _SEAL_BYTES
                if lines and (size > limit or len(lines) * 3 >= _BATCH_PIECES):
                    self._flush_lines(lines)
                    lines, size = [], len(line) + _SEAL_BYTES
                    if self._pending_error and not self._try_write_error_record():
                        self._fail(self.last_error or "write failed")
                        size = 0
                        continue
                if not lines:
                    if not self._ready_for(line):
                        size = 0
                        continue
                    limit = _BATCH_BYTES
                    if self._rotate_retry <= time.monotonic():  # else the part grows past its size meanwhile
                        limit = min(limit, self.rotate_bytes - self._part_bytes - self._end_bytes)
                lines.append(line)
                if len(line) >= _BIG_LINE:
                    # Written and let go before the next record is encoded: with two such lines alive
                    # at once, malloc handed their memory back to the kernel when both were freed and
                    # faulted it in again for the next (about 250 page faults per megabyte record).
                    self._flush_lines(lines)
                    lines, size, line = [], 0, b""
        finally:
            self._seq = seq
        if lines:
            self._flush_lines(lines)

    def _check_part(self, force: bool = False) -> None:
        """When the open part was removed (its directory deleted under the recorder), count its records
        lost, report it, and let the next record open a new part, which starts with a `capture-error`.

        Writes to an unlinked file succeed, so without this everything until the next rotation would
        go nowhere unnoticed. Looked at before a batch is written, at most every `_PART_CHECK_INTERVAL`
        (and at close): what went into the removed part meanwhile is counted with the rest of it.
        """
        if self._fd is None:
            return
        if not force:
            now = time.monotonic()
            if now < self._next_check:
                return
            self._next_check = now + _PART_CHECK_INTERVAL
        try:
            if os.fstat(self._fd).st_nlink > 0:
                return
        except OSError:
            return  # the descriptor is fine as long as the writer holds it; the next write reports
        records = self._part_records - self._part_oob
        if records:  # a part that held only its header lost nothing: the next record opens another
            message = f"part {self.paths[-1].name} was removed while being written"
            self.lost += records
            self.write_errors += 1
            self.last_error = message
            self._pending_error = True
            if self._on_error is not None:
                self._on_error(
                    f"erascope: capture {message}: {records} record(s) in it lost."
                    " Traffic is still relayed; recording goes on in a new part."
                )
        self._torn = b""  # the rest of a torn line belongs to the removed part
        with contextlib.suppress(OSError):
            os.close(self._fd)  # not handed to the keeper: there is nothing left to compress
        self._fd = None
        with self._bytes_lock:
            self._closed_bytes += self._part_bytes
            self._part_bytes = 0

    def _ready_for(self, line: bytes | chain.Pieced) -> bool:
        """Open or rotate the part so that `line` fits in it. False (and counted) on failure."""
        try:
            if self._fd is None:
                self._open_next_part()
            elif (
                self._part_records > 1
                and self._part_bytes + len(self._torn) + len(line) + _SEAL_BYTES + self._end_bytes > self.rotate_bytes
                and self._rotate_retry <= time.monotonic()
            ):
                self._rotate()
            return True
        except OSError as exc:
            self._write_failed(exc)
            return False

    def _write_failed(self, exc: OSError) -> None:
        self._fail(str(exc))
        if self._fd is not None and self._part_records == 0:
            self._close_part()  # a part without its header is useless; retry from scratch

    def _flush_lines(self, lines: list[bytes | chain.Pieced]) -> None:
        """Write `lines` (the open part has room for them) and count what was written and what was lost."""
        done, error = self._write_lines(lines)
        self.written += done
        if error is not None:
            for _ in range(len(lines) - done):
                self._fail(error)

    def _emit(self, line: bytes, counted: bool = True) -> bool:
        """Write one encoded line, opening or rotating the part first. False (and counted) on failure.
        `counted`: the line is traffic (torn by a short write, it counts in `lost` until completed)."""
        if not self._ready_for(line):
            return False
        try:
            self._write_sealed(line, counted)
            return True
        except OSError as exc:
            self._write_failed(exc)
            return False

    def _fail(self, message: str) -> None:
        self.lost += 1
        self.write_errors += 1
        self.last_error = message
        self._pending_error = True
        if not self._reported and self._on_error is not None:
            self._reported = True
            where = self.paths[-1] if self.paths else self.out_dir
            self._on_error(
                f"erascope: cannot write capture to {where}: {message}. Traffic is still relayed;"
                " records are being lost and counted (the total is reported at exit)."
            )

    def _try_write_error_record(self) -> bool:
        if self._torn:
            error = self._complete_torn()
            if error is not None:  # the part still ends inside a line: nothing may follow it yet
                self.last_error = error
                return False
        record = {
            fmt.F_TYPE: fmt.CAPTURE_ERROR,
            fmt.F_SEQ: 0,  # out-of-band, like headers: it describes a gap, it is not traffic
            fmt.F_TS: time.time(),
            fmt.F_MONO: time.monotonic(),
            fmt.F_SERVER: self.server,
            "error": self.last_error,
            "lost": self.lost,
        }
        if self._emit(orjson.dumps(record, option=_ENCODE_OPTS), counted=False):
            self._pending_error = False
            self._part_oob += 1
            self.written += 1
            return True
        self.lost -= 1  # the error record itself is not traffic; do not count it as lost
        return False

    def _progress(self) -> tuple[int, int]:
        """What grows while the writer works: the bytes it counted written, and the open part's size
        (which a long write grows before it returns)."""
        paths = self.paths.copy()  # the writer thread appends and pops
        try:
            size = os.stat(paths[-1]).st_size if paths else -1
        except OSError:
            size = -1
        return self.bytes_written, size

    @property
    def bytes_written(self) -> int:
        """Bytes written to parts (every line, headers included); readable from any thread."""
        with self._bytes_lock:
            return self._closed_bytes + self._part_bytes

    def _aged(self) -> bool:
        """Whether the open part, holding a record besides its header, is old enough to be rotated out
        (by size, `_emit` decides), and no failed rotation is waited out."""
        if self.rotate_age is None or self._fd is None or self._part_records <= 1:
            return False
        now = time.monotonic()
        return now - self._part_opened >= self.rotate_age and now >= self._rotate_retry

    def _age_left(self) -> float | None:
        """Seconds until the open part comes of age (None: no age rotation, or nothing to rotate)."""
        if self.rotate_age is None or self._fd is None or self._part_records <= 1:
            return None
        now = time.monotonic()
        return max(0.0, self._part_opened + self.rotate_age - now, self._rotate_retry - now)

    def _rotate(self) -> None:
        """Start the next part in place of the open one. When the next part cannot be made, the open one
        stays open and takes the records until a retry `_ROTATE_RETRY` seconds later; raises `OSError`
        only when the open part was closed already (its closing record was written: nothing goes on)."""
        try:
            self._open_next_part()
        except OSError as exc:
            if self._fd is None:
                raise
            self._rotate_retry = time.monotonic() + _ROTATE_RETRY
            if not self._rotate_reported and self._on_error is not None:
                self._rotate_reported = True
                self._on_error(
                    f"erascope: cannot start a new capture part in {self.out_dir}: {exc}. Recording goes on in"
                    f" {self.paths[-1].name} past its rotation size or age; a new part is tried every"
                    f" {_ROTATE_RETRY:g} s"
                )
            return

    def _compressed(self, old: Path, new: Path) -> None:
        # on the keeper thread: `paths` names the files as they are now (a list item swap is atomic)
        with contextlib.suppress(ValueError):
            self.paths[self.paths.index(old)] = new

    def _write_sealed(self, line: bytes, counted: bool = False) -> None:
        """Seal `line` and write it with one system call; the chain advances only when the whole line
        was written. Raises `OSError`."""
        _, error = self._write_lines([line], counted)
        if error is not None:
            raise OSError(error)

    def _write_lines(self, lines: list[bytes | chain.Pieced], counted: bool = True) -> tuple[int, str | None]:
        """Seal `lines` with the chain and write them with one system call (into the open part).

        Returns how many lines were written whole, and what went wrong when not all were. The chain
        advances to the last whole line: after a short write, at most that write's last line is torn,
        its rest kept to be written first by the next write (`_complete_torn`). `counted`: the lines
        are traffic, which the caller counts in `lost` when not written.
        """
        assert self._fd is not None
        if self._torn:
            error = self._complete_torn()
            if error is not None:
                return 0, error
        pieces, size, digest = chain.seal_lines(self._chainer, self.digest, lines, self._part_records)
        try:
            n = os.write(self._fd, pieces[0]) if len(pieces) == 1 else os.writev(self._fd, pieces)
        except OSError as exc:
            return 0, str(exc)
        why = ""
        if n != size:
            n, why = _write_on(self._fd, pieces, n, size)
        if n == size:
            done = len(lines)
            self.digest = digest
        else:
            done = self._whole_lines(pieces, n)
            self._torn_lost = int(counted)
            if self._torn == b"\n":  # whole but for its newline: a reader reads it, so it is written
                done += 1
                self.digest = self._torn_digest
                self._torn_lost = -1  # completing it adds nothing
        self._part_bytes += n
        self._part_records += done
        if n != size and done < len(lines):
            return done, f"short write ({n} of {size} bytes{why})"
        return done, None

    def _complete_torn(self) -> str | None:
        """Write the rest of the line a short write tore (`_torn`); what went wrong when not all of it.

        Once whole, the line is as if written in one go: counted written (and no longer lost), the
        chain at its digest.
        """
        assert self._fd is not None
        size = len(self._torn)
        try:
            n = os.write(self._fd, self._torn)
        except OSError as exc:
            return str(exc)
        n, why = _write_on(self._fd, [self._torn], n, size)
        self._part_bytes += n
        self._torn = self._torn[n:]
        if len(self._torn) <= 1 and self._torn_lost >= 0:  # whole for a reader, at most its newline to come
            self.written += 1
            self.lost -= self._torn_lost
            self._part_records += 1
            self.digest = self._torn_digest
            self._torn_lost = -1
        return f"short write ({n} of {size} bytes{why})" if self._torn else None

    def _whole_lines(self, pieces: list[bytes | memoryview], written: int) -> int:
        """After a short write of `pieces`: how many lines it wrote whole; the chain goes back to the last,
        and the rest of a line it tore is kept (`_torn`).

        A sealed line carries its own digest, so the last whole one says where the chain stands.
        """
        done = 0
        line = b""
        offset = 0
        for k, piece in enumerate(pieces):
            offset += len(piece)
            line += piece
            if offset > written:
                cut = len(line) - (offset - written)  # of this line, written
                if cut > 0:  # a line torn: it is whole with the pieces up to its newline
                    whole = bytes(line)
                    for later in pieces[k + 1 :]:
                        if whole.endswith(b"\n"):
                            break
                        whole += bytes(later)
                    sealed = chain.split(whole)
                    assert sealed is not None
                    self._torn, self._torn_digest = whole[cut:], sealed[1]
                break
            if line.endswith(b"\n"):
                done += 1
                sealed = chain.split(line)
                assert sealed is not None
                self.digest = sealed[1]
                line = b""
        return done

    def _end_part(self, reason: str, next_name: str | None) -> None:
        """Write the part's closing record (its digest is the part's final one), when it can be."""
        if self._fd is None or self._part_records == 0:
            return
        record: dict[str, Any] = {
            fmt.F_TYPE: fmt.PART_END,
            fmt.F_SEQ: 0,  # out-of-band, like headers
            fmt.F_TS: time.time(),
            fmt.F_MONO: time.monotonic(),
            fmt.F_SERVER: self.server,
            fmt.F_REASON: reason,
        }
        if next_name is not None:
            record[fmt.F_NEXT] = next_name
        with contextlib.suppress(OSError):  # the part then reads as never closed; the next header still links
            self._write_sealed(orjson.dumps(record, option=_ENCODE_OPTS))

    def _part_name(self, part: int) -> str:
        """The file name part `part` is written under (plain: before any compression)."""
        return f"{self._stem}.{part:03d}{fmt.CAPTURE_SUFFIX}"

    def _open_next_part(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self._tidy_openings:
            # What recorders killed while opening a part left; a keeper does it in each of its rounds.
            self._tidy_openings = False
            remove_stale_openings(self.out_dir)
        path = self.out_dir / self._part_name(self._part + 1)
        # The next part exists before the current one names it in its closing record, so a crash in
        # between never leaves a `next` that points nowhere.
        fd = open_locked(path)  # locked while open: retention never removes it
        # by its name as written, not `paths[-1]`: the keeper's thread renames that once compressed
        previous = self._part_name(self._part) if self._part >= 0 else None
        self._end_part(fmt.END_ROTATED, path.name)
        self._close_part()
        self._fd = fd
        self._part += 1
        self.paths.append(path)
        self._part_bytes = 0
        self._part_records = 0
        self._part_oob = 1  # its header, once written
        self._part_opened = time.monotonic()
        header = {
            fmt.F_TYPE: fmt.HEADER,
            "format": fmt.FORMAT_ID,
            "tool": "erascope",
            "tool_version": tool_version(),
            "started": self.started.isoformat(),
            "host": socket.gethostname(),
            "transport": self.transport,
            fmt.F_SERVER: self.server,
            "part": self._part,
            "previous": previous,
            "recorder_pid": os.getpid(),
            fmt.F_TS: time.time(),
            fmt.F_MONO: time.monotonic(),
            **self._header_extra,
            **self._chainer.header_fields(self.digest if self._part > 0 else None),
        }
        header[fmt.F_SEQ] = 0  # out-of-band: traffic records number from 1 across all parts
        line = orjson.dumps(header, option=_ENCODE_OPTS)
        try:
            self._write_sealed(line)
        except OSError:
            # Without its header the part is useless; remove it and reuse its number next time, so a
            # full disk does not leave one empty file per lost record.
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
            self._torn = b""  # the part is gone, and any line it tore with it
            with contextlib.suppress(OSError):
                path.unlink()
            self.paths.pop()
            self._part -= 1
            raise
        self.written += 1
        # however it came (a rotation, or a removed part replaced), a new part has its full size again
        self._rotate_retry = 0.0
        self._rotate_reported = False

    def _fsync(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)

    def _close_part(self) -> None:
        self._torn = b""  # a line still torn stays torn: the reader knows a torn last line
        if self._fd is None:
            return
        self._fsync()
        with contextlib.suppress(OSError):
            os.close(self._fd)  # drops its lock: the part is closed for retention from now on
        self._fd = None
        with self._bytes_lock:  # moved in one step: `bytes_written` never counts a part twice or not at all
            self._closed_bytes += self._part_bytes
            self._part_bytes = 0
        if self.keeper is not None and self.paths:
            self.keeper.closed(self.paths[-1])
