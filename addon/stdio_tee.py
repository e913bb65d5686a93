"""The stdio tee behind `erascope record stdio -- CMD ARGS...`.

The tee sits where an MCP host expects the server command: it spawns the real server, relays the
client's stdin to the server and the server's stdout to the client byte for byte, passes the
server's stderr through, and records every line of all three into one capture.

Why it looks the way it does:

- One blocking thread per direction, reading large chunks from raw file descriptors. asyncio's
  stream reader has a 64 KiB line limit that breaks large messages, and a thread parked in a plain
  `readv` into a reused 1 MiB buffer wakes once per chunk and forwards it at once: one system call
  in, one out, no allocation (see bench/bench_tee.py for what that costs).
- Each chunk is forwarded before it is split into lines for the recorder, so the peer never waits
  for a line end, for the recorder, or for the disk. The capture writer encodes and writes on its
  own thread.
- The host's descriptors, stderr too, may be non-blocking (O_NONBLOCK is shared with the host, so
  it is left as it is): a read or write that would block waits in `poll` and is retried
  (`wait_ready`), so a slow client is never taken for a gone one.
- The pumps never parse JSON: a line is whatever lies between two `\\n` bytes (a `\\r` before the
  `\\n` stays in the payload). Invalid UTF-8 is recorded in base64, an unterminated tail with
  `nl: false` (at EOF, or when the tee closes the stream itself: `Sequencer.close`'s `held`), so
  reconstruction is exact.
- A blocking read cannot be interrupted, so the tee never stops a pump: it closes the stream's
  recording gate instead (the linger window ended; the server died while a grandchild still holds
  its stdout). A parked pump is a daemon thread and ends with its source or the process.
- The server runs in a session (and process group) of its own, and the tee signals that whole group:
  a launcher (`npx`, `uvx`, `sh -c`) is the server's parent more often than not, and a signal to the
  launcher alone left the real server running as an orphan.

Library code never prints: the only bytes written to the `stderr` stream given to `run_tee` are the
server's own stderr (passed through) and the capture writer's failure reports.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import heapq
import os
import secrets
import select
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO, Final

from addon import format as fmt
from addon.command_key import server_key
from addon.errors import ErascopeError
from addon.metrics import PROBE_TIMEOUT, LiveStats, checked_probe_timeout, writer_counters
from addon.redact import Redactor
from addon.retention import Retention
from addon.writer import CaptureWriter, default_capture_dir

CHUNK_SIZE: Final = 1 << 20
"""Bytes asked for per read. Large reads keep syscalls per megabyte low; a read returns what is there."""

STDERR_PIECE: Final = 64 << 10
"""A stderr line is recorded in pieces of at most this many bytes (`nl` false on all but its last): a
progress bar redrawn with `\r` never ends its line, and would be held in memory, unrecorded, until it did."""

LONG_LINE: Final = 4 << 20
"""A line at least this long that spans reads is handed on in the pieces it was read in (`fmt.Pieces`),
never joined into one `bytes` nor decoded into one `str`: the capture writer encodes its record a block
at a time. Each whole copy of a 200 MB line is 200 MB more of the tee's memory (a `str` of text beyond
Latin-1, 400 or 800 MB); shorter lines are joined, which is as fast and costs a few megabytes at most."""

PIPE_SIZE: Final = 1 << 20
"""Kernel buffer asked for on the pipes on both sides, when they are pipes (best effort; default 64 KiB)."""

WRITER_BATCH: Final = 0.002
"""Seconds the capture writer naps after catching up (see `CaptureWriter.batch_interval`)."""

DEFAULT_LINGER: Final = 2.0
"""Seconds client bytes are still recorded after the server exited."""

DEFAULT_GRACE: Final = 5.0
"""Seconds a server may outlive the client's EOF (or a signal to the tee) before the tee sends it
SIGTERM, and then SIGTERM before SIGKILL."""

FORWARDED_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""Signals the tee passes on to the server instead of dying from them (a terminal's Ctrl-C, Ctrl-\\ and
hangup, a host's SIGTERM): the server, in a session of its own, gets none of them from the terminal."""

HANDLED_SIGNALS: Final = (*FORWARDED_SIGNALS, signal.SIGTSTP)
"""Signals whose handlers run on the main thread (`StdioTee._install_signal_handlers`): the tee's other
threads block them, so that they interrupt the main thread's waits. SIGTSTP (Ctrl-Z) is job control
(`StdioTee._on_stop`); SIGTTIN and SIGTTOU keep their default action (they stop the whole tee) and are
not blocked: a thread that reads or writes the terminal from a background job and blocks them gets EIO."""

PIDFD_SIGNAL_PROCESS_GROUP: Final = 4
"""`pidfd_send_signal` flag (linux/pidfd.h, Linux >= 6.9; Python names none): signal the process group
the pidfd's process leads. Safe from pid reuse like any pidfd signal, even once the leader is reaped."""

GROUP_POLL: Final = 0.05
"""Seconds between looks at whether the server's process group is gone, while the tee ends it."""

HANDLER_LOCK_WAIT: Final = 0.05
"""Seconds a signal handler waits for the sequencer's lock to record its signal in place (a relay
thread holds it for one record at most), before leaving the record to the main thread."""

REDACTION_POLICY: Final = {
    "mode": "default",
    "argv": "credentials replaced by hmac:<12 hex> (addon.redact.redact_argv)",
    "env": "not recorded",
    "frames": "verbatim",
}
"""The `redaction` object of a stdio capture's header."""


class SpawnFailed(ErascopeError):
    """The server command could not be started; `exit_code` is 127 (not found) or 126 (not runnable)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# --- pure helpers ----------------------------------------------------------------------------------


def process_argv(pid: int) -> list[str] | None:
    """The command line of process `pid` as its argv, or None when the system does not show it.

    Read from `/proc/<pid>/cmdline` (Linux); elsewhere, or for a process that is gone or hides its
    command line, None. Bytes that are not UTF-8 are replaced (a record must be valid JSON text).
    """
    try:
        data = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if not data:  # a zombie, or a kernel thread
        return None
    return [arg.decode("utf-8", "replace") for arg in data.removesuffix(b"\0").split(b"\0")]


def parent_fields(redactor: Redactor) -> dict[str, object]:
    """`parent_pid` and `parent_argv` (redacted like the server's) of the process that started the tee.

    That process is the MCP host (the client) that put `erascope record stdio` in its server config:
    the analyzer tells clients apart by it (captures/FORMAT.md, the `spawn` event).
    """
    pid = os.getppid()
    argv = process_argv(pid)
    return {"parent_pid": pid, "parent_argv": None if argv is None else redactor.argv(argv)}


def exit_status(returncode: int) -> int:
    """The tee's own exit status for a server return code: the code, or 128+signal like a shell."""
    return 128 - returncode if returncode < 0 else returncode


def signal_name(signum: int) -> str:
    """`SIGTERM` for 15; `SIG<n>` for numbers Python does not name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def group_running(pgid: int) -> bool:
    """True while a process of process group `pgid` runs: a zombie, dead but not yet reaped, does not count.

    Signal 0 says whether the group has members, zombies included; the orphans of a dead launcher are
    reaped by init, which may take its time (seconds, under some container inits; never, under one
    that does not reap). On Linux, the members' states are read from /proc; elsewhere a zombie counts.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # none we may signal, yet members: they may run
        pass
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            stat = Path("/proc", name, "stat").read_bytes()
        except OSError:  # gone meanwhile
            continue
        # `pid (comm) state ppid pgrp ...`: comm may hold spaces and parentheses, so count from the last `)`
        state, _ppid, pgrp = stat[stat.rfind(b")") + 2 :].split(maxsplit=3)[:3]
        if int(pgrp) == pgid and state not in (b"Z", b"X"):
            return True
    return False


class LineSplitter:
    """Splits a byte stream, fed in arbitrary chunks, into lines at `\\n`, keeping partial lines.

    `feed` returns the complete lines a chunk finished (without their `\\n`); the carry-over is kept
    as a list of pieces, so a 10 MB line arriving in 64 KiB chunks is joined once, not re-copied per
    chunk. With `long_line`, a line of at least that many bytes that spans chunks is not joined at all:
    it comes back as its pieces (`fmt.Pieces`). `tail()` returns the unterminated rest at EOF.
    """

    __slots__ = ("long_line", "pending")

    def __init__(self, long_line: int | None = None) -> None:
        self.long_line = long_line
        self.pending: list[bytes] = []
        """The carry-over: pieces of a line not finished yet. Empty after a chunk that ended with `\\n`;
        cleared in place, never replaced, so a caller may hold it (`Pump` checks it per read)."""

    def feed(
        self, chunk: bytes | bytearray, size: int | None = None, *, borrow: bool = False
    ) -> list[bytes | memoryview | fmt.Pieces]:
        """The lines `chunk[:size]` completes, in order, each without its `\\n`.

        `chunk` may be a reused read buffer: every line and kept piece is copied out of it once. With
        `borrow`, a chunk that is exactly one whole line (the common case) comes back as a memoryview of
        `chunk` instead, not copied at all: it is valid only until `chunk` is read into again.
        """
        size = len(chunk) if size is None else size
        view = memoryview(chunk)
        find = chunk.find
        end = find(b"\n", 0, size)
        if end == size - 1 and not self.pending:  # the common case: one whole message in one read
            return [view[:end] if borrow else bytes(view[:end])]
        if end < 0:
            if size:
                self.pending.append(bytes(view[:size]))
            return []
        if self.pending:
            self.pending.append(bytes(view[:end]))
            lines: list[bytes | memoryview | fmt.Pieces] = [self._carried()]
        else:
            lines = [bytes(view[:end])]
        start = end + 1
        while (end := find(b"\n", start, size)) >= 0:
            lines.append(bytes(view[start:end]))
            start = end + 1
        if start < size:
            self.pending.append(bytes(view[start:size]))
        return lines

    def tail(self) -> bytes | fmt.Pieces | None:
        """The unterminated rest of the stream (None when the stream ended with `\\n`); clears it."""
        return self._carried() if self.pending else None

    def _carried(self) -> bytes | fmt.Pieces:
        """The carry-over as one line (its pieces, when it is long); clears it."""
        pending = self.pending
        if self.long_line is not None and len(pending) > 1 and sum(map(len, pending)) >= self.long_line:
            line: bytes | fmt.Pieces = fmt.Pieces(pending.copy())  # a new list: `pending` is cleared in place
        else:
            line = b"".join(pending)
        pending.clear()
        return line


def wait_ready(fd: int, events: int) -> None:
    """Block until `fd` is ready for `events` (or hung up, or in error: the next call on it says which).

    For descriptors the host made O_NONBLOCK: the flag belongs to a file description the tee shares
    with the host (and whoever else inherited it), so the tee waits for a blocked descriptor here
    instead of clearing the flag under them. Only the EAGAIN path comes here, never the usual one.
    """
    poller = select.poll()  # not select(): it cannot watch descriptors above 1023
    poller.register(fd, events)
    poller.poll()


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte of `data` to `fd` (pipes may accept less than asked; a non-blocking one may
    accept nothing for a while: then the write waits for room, like a blocking one)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            wait_ready(fd, select.POLLOUT)


Forward = Callable[[memoryview], None]
"""Sends relayed bytes on; raises OSError when the destination is gone."""


def fd_forwarder(fd: int) -> Forward:
    """A forward function for a raw file descriptor."""

    write = os.write

    def forward(data: memoryview) -> None:
        try:
            n = write(fd, data)
        except BlockingIOError:  # a non-blocking pipe with no room yet
            n = 0
        if n != len(data):  # a pipe took less than asked
            write_all(fd, data[n:])

    return forward


def stream_write_all(stream: BinaryIO, data: bytes | memoryview) -> None:
    """Write every byte of `data` to `stream` and flush it; on a non-blocking one, wait for room.

    Over an O_NONBLOCK descriptor (the host's stderr may be one, like its stdout) a buffered stream
    raises BlockingIOError where a blocking one would wait, having taken `characters_written` bytes,
    and a raw one returns None or a short count. Taking either for a gone reader would stop the
    pass-through for good at the first full pipe, so the rest is waited out in `poll` and retried.
    """
    view = memoryview(data)
    while view:
        try:
            n = stream.write(view)
        except BlockingIOError as exc:
            n = exc.characters_written
            view = view[n:]
            if view:
                wait_ready(stream.fileno(), select.POLLOUT)
            continue
        if n:
            view = view[n:]
        else:  # a raw stream that would block (None) took nothing
            wait_ready(stream.fileno(), select.POLLOUT)
    while True:
        try:
            stream.flush()
            return
        except BlockingIOError:  # the buffer keeps what the descriptor did not take yet
            wait_ready(stream.fileno(), select.POLLOUT)


def stream_forwarder(stream: BinaryIO, lock: threading.Lock) -> Forward:
    """A forward function for a binary stream shared with other writers (the tee's stderr)."""

    def forward(data: memoryview) -> None:
        with lock:
            stream_write_all(stream, data)

    return forward


class Pump:
    """Relays one direction: a blocking read of up to `chunk_size` bytes, forward them, then record.

    `on_line(payload, nl)` gets each line without its `\\n` (`nl` False only for the tail at EOF): bytes,
    or, for a line read whole in one read, a memoryview of the read buffer that is valid only during the
    call (a megabyte line is not copied just to be encoded; copy what must be kept), or, for a line of
    at least `long_line` bytes that spans reads, its pieces (`fmt.Pieces`, see `LONG_LINE`).
    `forward` is a function, or a file descriptor the pump writes to itself (one call less per read).
    Forwarding raises OSError when the destination is gone; `on_forward_error` is then called once
    and the pump keeps reading and recording without forwarding (the bytes still reach the capture,
    and the source never blocks on a full pipe). With `stop_on_forward_error` it stops instead: the
    read that could not be forwarded is not recorded (it was not relayed), the unfinished line held
    from earlier reads (relayed) is recorded with `nl` false, then `on_forward_error` is called and
    the pump ends with `on_end(False)`, reading no more. At EOF `on_end(True)` runs after the tail line.
    With a `sequencer`, each read (data or EOF) takes a ticket under the pump's `name` before it is
    forwarded, and ends it once everything it caused (forwarding, `on_line`, `on_end`) is done.

    The read is a plain blocking `readv` into one reused buffer: one system call per chunk, no
    allocation. Nothing can interrupt it, so a pump cannot be stopped from outside; whoever must
    stop listening (the linger window closed) gates what `on_line` records instead, and the thread
    stays parked in the read until its source ends (as a daemon, it never holds the process up).
    """

    def __init__(
        self,
        src: int,
        forward: Forward | int | None,
        on_line: Callable[[bytes | memoryview | fmt.Pieces, bool], None],
        *,
        on_forward_error: Callable[[OSError], None] | None = None,
        on_end: Callable[[bool], None] | None = None,
        stop_on_forward_error: bool = False,
        sequencer: Sequencer | None = None,
        chunk_size: int = CHUNK_SIZE,
        name: str = "pump",
        max_carried: int | None = None,
        long_line: int | None = LONG_LINE,
    ) -> None:
        self.src = src
        self.name = name
        self._sequencer = sequencer
        self._forward = forward
        self._on_line = on_line
        self._on_forward_error = on_forward_error
        self._on_end = on_end
        self._stop_on_forward_error = stop_on_forward_error
        self._chunk_size = chunk_size
        self._max_carried = max_carried
        """Bytes of an unfinished line held at most: past them, what is held goes to `on_line` (`nl`
        false) and the line goes on in the next call (stderr: a line that never ends)."""
        self._splitter = LineSplitter(long_line)
        self.reads = 0
        """Reads that returned so far (with data or EOF)."""
        self.last_read = 0
        """Bytes the last read returned: while the pump is not `reading`, forwarded or not yet recorded."""
        self.reading = False
        """True while the pump waits in (or is about to enter) a read, i.e. it forwarded all it read."""
        self.eof = False
        """The source reached EOF."""
        self.done = threading.Event()
        """Set when the pump has finished, including `on_end`."""
        self.error: BaseException | None = None
        """An unexpected exception that ended the pump (a bug, surfaced by the caller)."""
        self.thread = threading.Thread(target=self.run, name=f"erascope-{name}", daemon=True)

    def start(self) -> Pump:
        """Run the pump on its own thread."""
        self.thread.start()
        return self

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the pump to finish; True when it has."""
        return self.done.wait(timeout)

    def drained(self) -> bool:
        """Finished, or waiting for bytes that are not there: all it read is forwarded and recorded.

        Used after the server died: what it wrote is already in the pipe, so a pump that waits on an
        empty pipe waits for a grandchild that inherited the write end, not for the server.
        """
        if self.done.is_set():
            return True
        if not self.reading:
            return False
        poller = select.poll()  # not select(): it cannot watch descriptors above 1023
        poller.register(self.src, select.POLLIN | select.POLLHUP)
        try:
            return not poller.poll(0)
        except OSError:
            return True

    def unrecorded(self) -> int:
        """Bytes read and not recorded yet: an unfinished line, and the read being forwarded.

        Exact only while the pump is stuck (forwarding to a reader that takes nothing), which is when
        the tee asks, to say what it gives up.
        """
        if self.done.is_set():
            return 0
        held = sum(map(len, self._splitter.pending))
        return held if self.reading else held + self.last_read

    def take_tail(self) -> bytes | fmt.Pieces | None:
        """The unfinished line the pump holds (bytes it relayed but could not record yet, lacking their
        `\\n`), handed over and cleared; None when it holds none.

        For whoever closes the pump's stream from outside (`Sequencer.close`'s `held`): call it only
        while no read of the pump is in progress, i.e. not between the sequencer's `begin` and `end`
        for its stream, when the pump cannot be changing what it holds.
        """
        return self._splitter.tail()

    def run(self) -> None:
        """The pump loop (call directly to run on the current thread)."""
        if threading.current_thread() is not threading.main_thread():
            # The tee's forwarded signals must reach the main thread (the one that runs handlers).
            signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
        # One buffer, reused: allocating a fresh 1 MiB bytes object per read (os.read) costs more
        # than relaying a small message (a bare relay measured ~45 µs vs ~19 µs per round trip).
        buf = bytearray(self._chunk_size)
        view = memoryview(buf)
        bufs = [buf]
        src = self.src
        seq, name = self._sequencer, self.name
        readv = os.readv
        feed = self._splitter.feed
        carried = self._splitter.pending
        find = buf.find
        write = os.write
        forward_fd = self._forward if isinstance(self._forward, int) else None
        on_line = self._on_line
        try:
            while True:
                self.reading = True
                try:
                    n = readv(src, bufs)
                except BlockingIOError:  # a non-blocking source with nothing yet (see `wait_ready`)
                    wait_ready(src, select.POLLIN)
                    continue
                except OSError as exc:
                    if exc.errno in (errno.EIO, errno.ECONNRESET):
                        n = 0  # a terminal or socket that went away: as good as EOF
                    else:
                        raise
                self.reads += 1
                self.last_read = n
                self.reading = False
                if seq is not None:
                    seq.begin(name)
                if not n:
                    self.eof = True
                    break
                # Relayed here, not in a method: this runs once per read on the relay path.
                if forward_fd is not None:
                    try:
                        try:
                            sent = write(forward_fd, view[:n])
                        except BlockingIOError:  # a non-blocking destination, full: nothing written yet
                            sent = 0
                        if sent != n:  # a pipe took less than asked
                            write_all(forward_fd, view[sent:n])
                    except OSError as exc:
                        forward_fd = None
                        if self._forward_failed(exc):
                            break
                elif self._forward is not None:
                    try:
                        self._forward(view[:n])  # a function here
                    except OSError as exc:
                        if self._forward_failed(exc):
                            break
                # Forwarded first; only now are lines taken out of the reused buffer for the recorder.
                # One whole line in one read with nothing carried over is the common case: lent to
                # `on_line` as `feed(borrow=True)` would lend it, without that call (about 5 % of a
                # 250 B message's instructions, bench/README.md).
                if not carried and find(b"\n", 0, n) == n - 1:
                    on_line(view[: n - 1], True)
                else:
                    for line in feed(buf, n, borrow=True):
                        on_line(line, True)
                    if self._max_carried is not None and sum(map(len, carried)) > self._max_carried:
                        held = b"".join(carried)
                        carried.clear()  # in place: `carried` is the splitter's own list
                        on_line(held, False)
                if seq is not None:
                    seq.end(name)
            tail = self._splitter.tail()
            if tail is not None:
                self._on_line(tail, False)
            if self._on_end is not None:
                self._on_end(self.eof)
        except BaseException as exc:  # surfaced through `error`; a dead pump must not hang the tee
            self.error = exc
        finally:
            self.reading = False
            if seq is not None:
                seq.end(name)
            self.done.set()

    def _forward_failed(self, exc: OSError) -> bool:
        """The destination is gone: forward no more. True when the pump is to stop (the read that
        failed is then not recorded; what it held from earlier, relayed reads is recorded first)."""
        self._forward = None
        if self._stop_on_forward_error:
            tail = self._splitter.tail()
            if tail is not None:
                self._on_line(tail, False)
        if self._on_forward_error is not None:
            self._on_forward_error(exc)
        return self._stop_on_forward_error


class Sequencer:
    """Hands records to the writer in the order the tee *read* their bytes, not the order in which
    the threads got round to recording them.

    Recording follows forwarding, on one thread per stream, so without this an answer could be
    recorded before the request that caused it (the request's thread was descheduled after
    forwarding, say, while the writer thread held the GIL for a big record). Every read takes a
    ticket before it is forwarded; a record is written once no other stream still holds an
    unrecorded read with a smaller ticket, and records held meanwhile come out in ticket order.
    Nothing ever waits here, so relaying cannot deadlock on recording; a stream whose forwarding is
    blocked only holds back the records of the others (in memory), never the traffic.

    Causality is exact: a line can only be answered after it was forwarded, hence after its read
    took its ticket. Records carry their own `ts`/`mono`, stamped when made, not when released.

    It is also the recording gate: once a stream is closed (`close`, e.g. at linger-end), records of
    that stream are dropped, so nothing of it lands after its closing record.
    """

    def __init__(self, write: Callable[[dict[str, Any]], None]) -> None:
        self._write = write
        self._lock = threading.Lock()
        self._next = 0
        self._pending: dict[str, int] = {}
        self._held: list[tuple[int, int, dict[str, Any]]] = []
        self._count = 0
        self.current: dict[str, int] = {}
        """Each stream's latest ticket: the one its records carry."""
        self._closed: set[str] = set()

    def begin(self, stream: str) -> int:
        """`stream` read something: its ticket. That stream's records carry it until `end`."""
        with self._lock:
            ticket = self._next
            self._next = ticket + 1
            self._pending[stream] = self.current[stream] = ticket
            return ticket

    def end(self, stream: str) -> None:
        """`stream` has recorded everything its last read caused."""
        # Without the lock in the common case (nothing held), since this runs once per read. Safe
        # because a holder pushes its record before it reads `_pending` (`_submit`), and this pops
        # from `_pending` before it reads `_held` (each step atomic under the GIL): whichever comes
        # second sees the other, so a held record is always released by one of the two.
        if self._pending.pop(stream, None) is not None and self._held:
            with self._lock:
                self._release()

    def submit(self, record: dict[str, Any], ticket: int | None = None) -> None:
        """Write `record` as soon as nothing read before `ticket` is still unrecorded (None: now)."""
        with self._lock:
            self._submit(record, self._next_ticket() if ticket is None else ticket)

    def reserve(self) -> int | None:
        """From a signal handler: a ticket for a record made a moment later (`fulfil`); records of
        reads after it wait for that record. None, with nothing done, when the lock is not had within
        `HANDLER_LOCK_WAIT` seconds: a handler runs on the main thread, which may itself hold it (the
        lock is not reentrant), and waiting for itself would never end."""
        if not self._lock.acquire(timeout=HANDLER_LOCK_WAIT):
            return None
        try:
            ticket = self._next_ticket()
            self._pending[f"reserved-{ticket}"] = ticket
            return ticket
        finally:
            self._lock.release()

    def fulfil(self, ticket: int, record: dict[str, Any]) -> None:
        """Write `record` in the place `reserve` gave `ticket`, and what waited for it."""
        with self._lock:
            del self._pending[f"reserved-{ticket}"]
            self._submit(record, ticket)
            self._release()

    def record(self, stream: str, record: dict[str, Any]) -> None:
        """Submit a record caused by `stream`'s current read; dropped once the stream is closed."""
        with self._lock:  # `_submit` inlined: this runs for every line relayed
            if stream in self._closed:
                return
            ticket = self.current[stream]
            pending = self._pending
            if not self._held and (not pending or ticket <= min(pending.values())):
                self._write(record)
            else:
                self._submit(record, ticket)

    def close(
        self,
        stream: str,
        record: dict[str, Any] | None = None,
        ticket: int | None = None,
        held: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> bool:
        """Stop recording `stream`, with `record` as its last word; False when it was closed already.

        `held()` gives the records of what the stream's reader holds unrecorded (an unfinished line):
        they go just before `record`. It is called only when no read of `stream` is in progress (none
        between `begin` and `end`), under the lock that `begin` takes: then the reader cannot be
        changing what it holds, and whatever it records later is dropped by the closed gate, so no
        byte is recorded twice. A read in progress records what it completes itself, or loses it to
        the gate, as it always did.
        """
        with self._lock:
            if stream in self._closed:
                return False
            self._closed.add(stream)
            ticket = self._next_ticket() if ticket is None else ticket
            if held is not None and stream not in self._pending:
                for rec in held():
                    self._submit(rec, ticket)  # same ticket, submitted first: released first
            if record is not None:
                self._submit(record, ticket)
            return True

    def _next_ticket(self) -> int:
        ticket = self._next
        self._next = ticket + 1
        return ticket

    def _submit(self, record: dict[str, Any], ticket: int) -> None:
        pending = self._pending
        if not self._held and (not pending or ticket <= min(pending.values())):
            self._write(record)  # the common case: nothing to wait for
            return
        self._count += 1
        heapq.heappush(self._held, (ticket, self._count, record))
        self._release()

    def drain(self) -> None:
        """Write everything still held (at the end: whatever a stalled stream held back)."""
        with self._lock:
            self._pending.clear()
            self._release()

    def _release(self) -> None:
        held = self._held
        low = min(self._pending.values(), default=None)
        while held and (low is None or held[0][0] <= low):
            self._write(heapq.heappop(held)[2])


def _grow_pipe(fd: int) -> None:
    # Best effort: a bigger kernel buffer means fewer reads, writes and wake-ups per megabyte on
    # both ends; nothing breaks without it (the limit is /proc/sys/fs/pipe-max-size).
    setpipe = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setpipe is None:
        return
    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) < PIPE_SIZE:
            fcntl.fcntl(fd, setpipe, PIPE_SIZE)


def _close_to_devnull(fd: int) -> None:
    """Close what `fd` refers to (the peer sees EOF) while keeping the number taken.

    Replacing it with /dev/null instead of closing it keeps a later `open` (say, the next capture
    part) from landing on fd 1 and receiving stray prints.

    A socket's sending side is shut down first: a host may give the tee one socket as both stdin and
    stdout (socat's `EXEC:`, inetd and systemd `Accept=yes` services), and closing fd 1 alone then
    left it open through stdin, so the client saw EOF only when the tee exited (after the linger
    window), where the server's own exit would have ended it at once.
    """
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            with socket.socket(fileno=os.dup(fd)) as sock:  # the copy is closed, the client's socket shut
                sock.shutdown(socket.SHUT_WR)
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


# --- the tee ---------------------------------------------------------------------------------------


class StdioTee:
    """One recorded spawn of a stdio server. `run()` returns the tee's exit status.

    `stdin_fd`/`stdout_fd` are the client's side (0 and 1 for the command); `stderr` receives the
    server's stderr and the capture writer's failure reports.
    """

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        server: str | None = None,
        out_dir: Path | None = None,
        linger: float = DEFAULT_LINGER,
        grace: float = DEFAULT_GRACE,
        stderr: BinaryIO,
        stdin_fd: int = 0,
        stdout_fd: int = 1,
        redactor: Redactor | None = None,
        rotate_bytes: int | None = None,
        rotate_age: float | None = None,
        retention: Retention | None = None,
        chain_key: bytes | None = None,
        probe_timeout: float = PROBE_TIMEOUT,
    ) -> None:
        if not cmd:
            raise ErascopeError("no server command given; usage: erascope record stdio [OPTIONS] -- CMD [ARGS...]")
        if linger < 0:
            raise ErascopeError(f"--linger must be >= 0 seconds, got {linger}")
        if not grace > 0:
            raise ErascopeError(f"--grace must be > 0 seconds, got {grace}")
        probe_timeout = checked_probe_timeout(probe_timeout)
        self.cmd = list(cmd)
        self.linger = linger
        self.grace = grace
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self._stderr = stderr
        self._stderr_lock = threading.Lock()
        self._redactor = redactor or Redactor()
        # the host's bytes, which need not be UTF-8: the command runs as given, its record reads so
        self.argv = [fmt.utf8_text(arg) for arg in self._redactor.argv(self.cmd)]
        self.parent = parent_fields(self._redactor)
        """The host process that started the tee (recorded on `spawn`), read once at start."""
        self.server = fmt.printable_key(server or server_key(self.argv))
        self.conn = f"stdio-{os.getpid()}-{secrets.token_hex(4)}"
        extra = {} if rotate_bytes is None else {"rotate_bytes": rotate_bytes}
        self.stats = LiveStats(probe_timeout=probe_timeout)
        """Counters kept from the records on the writer's thread, written into `recorder-end`; probes
        timed out after `probe_timeout` seconds, as the analyzer's `--probe-timeout` times them."""
        self.writer = CaptureWriter(
            out_dir if out_dir is not None else default_capture_dir(),
            transport=fmt.STDIO,
            server=self.server,
            header_extra={"argv": self.argv, "redaction": dict(REDACTION_POLICY)},
            on_error=self._report,
            batch_interval=WRITER_BATCH,
            rotate_age=rotate_age,
            retention=retention,
            observer=self.stats.observe_all,
            chain_key=chain_key,
            **extra,
        )
        # Orders records and gates streams: c2s closes at linger-end, s2c at server-eof, stderr once
        # the server is gone and its stderr drained; a pump parked on a grandchild's pipe (or on a
        # client that never closes) can outlive its stream, but nothing it reads is recorded after.
        self._seq = Sequencer(self.writer.put)  # every record it gets is stamped (`_event`, the lines)
        self._on_c2s = self._line_recorder(fmt.C2S, fmt.FRAME, fmt.C2S)
        self._on_s2c = self._line_recorder(fmt.S2C, fmt.FRAME, fmt.S2C)
        self._on_stderr = self._line_recorder(fmt.STDERR, fmt.STDERR, None)
        # Signal handlers run on the main thread between any two bytecodes, possibly while it holds
        # the sequencer's lock: they only queue their record here, the main thread submits it.
        self._signals: collections.deque[dict[str, Any]] = collections.deque()
        self._cut_linger = False
        self._held_signals: list[tuple[int, dict[str, Any]]] = []
        """Signals that came while the server was being started, with their records: forwarded once it runs."""
        self.pumps: dict[str, Pump] = {}
        """The running pumps by stream (`c2s`, `s2c`, `stderr`), once the server is spawned."""
        self.proc: subprocess.Popen[bytes] | None = None
        self._pidfd: int | None = None
        """The server as a pidfd where the OS has them: signals can never reach a recycled pid."""
        self._pidfd_groups = True
        """Whether the kernel signals a process group through the pidfd (Linux >= 6.9); else `os.killpg`."""
        self._group_signalled = False
        """The tee signalled the server's process group (a forwarded signal, or its own SIGTERM): from
        then on the server is ended only when no process of its group runs (`_server_ended`)."""
        self._released = False
        """The tee let go of the server (its pidfd closed): it signals nothing any more."""
        self._ending: threading.Thread | None = None
        self._exited = threading.Event()
        self._paused: tuple[float | None, float] = (None, 0.0)
        """For `_clock`: when the tee was stopped (Ctrl-Z), None while it runs; and the seconds it spent
        stopped before. One tuple, so that other threads read both at once."""
        # Reentrant: the signal handler (main thread) may interrupt the main thread holding it.
        self._kill_lock = threading.RLock()

    # --- recording ----------------------------------------------------------------------------
    def _report(self, message: str) -> None:
        with contextlib.suppress(OSError, ValueError), self._stderr_lock:
            stream_write_all(self._stderr, message.encode("utf-8", "replace") + b"\n")

    def _event(self, event: str, **fields: object) -> dict[str, Any]:
        return {
            fmt.F_TYPE: fmt.LIFECYCLE,
            fmt.F_CONN: self.conn,
            fmt.F_EVENT: event,
            **fields,
            fmt.F_TS: time.time(),
            fmt.F_MONO: time.monotonic(),
            fmt.F_SERVER: self.server,  # where the writer would put it
        }

    def _lifecycle(self, event: str, **fields: object) -> None:
        self._seq.submit(self._event(event, **fields))

    def _line_record(
        self, rtype: str, payload: bytes | fmt.Pieces, nl: bool, direction: str | None
    ) -> dict[str, object]:
        """The record of one line (a frame, or a stderr line when `direction` is None)."""
        rec: dict[str, object] = {fmt.F_TYPE: rtype, fmt.F_CONN: self.conn, **fmt.payload_fields(payload), fmt.F_NL: nl}
        if direction is not None:
            rec[fmt.F_DIR] = direction
        rec[fmt.F_TS] = time.time()
        rec[fmt.F_MONO] = time.monotonic()
        rec[fmt.F_SERVER] = self.server  # where the writer would put it
        return rec

    def _line_recorder(
        self, stream: str, rtype: str, direction: str | None
    ) -> Callable[[bytes | memoryview | fmt.Pieces, bool], None]:
        """A pump's `on_line` for `stream`: `_line_record` with every name bound once, since it runs on
        the relay thread for every line; the same record, the same field order."""
        record, conn, server, clock, mono = self._seq.record, self.conn, self.server, time.time, time.monotonic
        t_key, conn_key, raw_key, len_key, nl_key, dir_key, ts_key, mono_key, srv_key = (
            fmt.F_TYPE, fmt.F_CONN, fmt.F_RAW, fmt.F_LEN, fmt.F_NL, fmt.F_DIR, fmt.F_TS, fmt.F_MONO, fmt.F_SERVER
        )  # fmt: skip
        slow = self._line_record

        if direction is None:  # a stderr line: rare next to frames, so the plain record (a copy) does

            def on_stderr(payload: bytes | memoryview | fmt.Pieces, nl: bool) -> None:
                for rec in self._stderr_records(payload, nl):
                    record(stream, rec)

            return on_stderr

        # one dict display per frame, in `_line_record`'s field order
        def on_frame(payload: bytes | memoryview | fmt.Pieces, nl: bool) -> None:
            try:
                raw = str(payload, "utf-8")
            except UnicodeDecodeError:
                record(stream, slow(rtype, bytes(payload), nl, direction))
                return
            except TypeError:  # a long line in its pieces: caught, not tested for, since this runs per line
                assert isinstance(payload, fmt.Pieces)
                record(stream, slow(rtype, payload, nl, direction))
                return
            record(
                stream,
                {
                    t_key: rtype, conn_key: conn, raw_key: raw, len_key: len(payload), nl_key: nl,
                    dir_key: direction, ts_key: clock(), mono_key: mono(), srv_key: server,
                },
            )  # fmt: skip

        return on_frame

    def _stderr_records(self, payload: bytes | memoryview | fmt.Pieces, nl: bool) -> list[dict[str, object]]:
        """The records of one stderr line: pieces of at most STDERR_PIECE bytes, `nl` on the last only."""
        data = bytes(payload)
        pieces = [data[i : i + STDERR_PIECE] for i in range(0, len(data), STDERR_PIECE)] or [b""]
        last = len(pieces) - 1
        return [self._line_record(fmt.STDERR, piece, nl and i == last, None) for i, piece in enumerate(pieces)]

    def _held_records(self, stream: str) -> Callable[[], list[dict[str, Any]]]:
        """For `Sequencer.close(held=...)`: the record of the unfinished line `stream`'s pump holds.

        Its bytes were relayed, so they belong in the capture, `nl` false as at EOF; without this a
        stream the tee closes itself (the linger window ended; the server died while a grandchild
        holds its pipes) lost them with no trace, though the peer had received them.
        """

        def held() -> list[dict[str, Any]]:
            tail = self.pumps[stream].take_tail()
            if tail is None:
                return []
            if stream == fmt.STDERR:
                return self._stderr_records(tail, False)
            return [self._line_record(fmt.FRAME, tail, False, stream)]

        return held

    def _on_stdin_broken(self, exc: OSError) -> None:
        self._seq.record(fmt.C2S, self._event(fmt.EV_STDIN_BROKEN, error=_describe(exc)))

    def _on_client_end(self, eof: bool) -> None:
        # The c2s pump owns the server's stdin: nobody else closes it while the pump may write to it.
        assert self.proc is not None and self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        self._seq.record(fmt.C2S, self._event(fmt.EV_CLIENT_EOF))
        self._end_server_later(fmt.EV_CLIENT_EOF)

    def _end_server_later(self, after: str) -> None:
        """Once, after `client-eof` or a signal: a server still running after the grace period gets
        SIGTERM, and SIGKILL one more grace period later, each with a `terminate` record.

        Without this, a server that ignores EOF (and SIGTERM) outlives its client as an orphan. The
        signals go to the server's process group: a launcher (`npx`, `uvx`, `sh -c`) and the real
        server it started end together (`_kill`).
        """
        if self._ending is not None or self._exited.is_set():
            return
        self._ending = threading.Thread(target=self._escalate, args=(after,), name="erascope-ending", daemon=True)
        self._ending.start()

    def _escalate(self, after: str) -> None:
        if threading.current_thread() is not threading.main_thread():
            signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)  # the main thread handles them
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self._server_ended(self.grace):
                return
            self._submit_signals()  # the main thread, parked in wait(), has not placed them yet
            self._seq.submit(self._event(fmt.EV_TERMINATE, signal=signal_name(sig), after=after, grace=self.grace))
            self._kill(sig)

    def _server_ended(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the server to end; True when it did.

        Until the tee signalled the server, the server's own exit ends it: what a server that exits by
        itself leaves running is its business, as it would be without the tee. Once the tee signalled
        it, the server is its whole process group: a launcher may die of the signal at once while the
        server it started ignores it, and that one must not be left behind.
        """
        deadline = self._clock() + timeout
        while True:
            if self._exited.is_set() and not (self._group_signalled and group_running(self._pgid())):
                return True
            left = deadline - self._clock()
            if left <= 0:
                return False
            # Short steps: a signal forwarded meanwhile makes the whole group count (`_group_signalled`).
            if self._exited.is_set():
                time.sleep(min(left, GROUP_POLL))
            else:
                self._exited.wait(min(left, GROUP_POLL))

    def _clock(self) -> float:
        """`time.monotonic()` less the time the tee (and with it the server) spent stopped by Ctrl-Z, and
        frozen while it is: `--grace` and the linger window are the server's and the client's time to
        act, which they do not have while stopped. Without it, a job continued with `fg` during a
        graceful shutdown got SIGTERM at once, its grace period spent while it could not run."""
        stopped_at, stopped_for = self._paused
        return (time.monotonic() if stopped_at is None else stopped_at) - stopped_for

    def _pgid(self) -> int:
        assert self.proc is not None
        return self.proc.pid  # the server leads its own session and process group (`_spawn`)

    def _kill(self, sig: int) -> bool:
        """Send `sig` to the server's process group; True when it reached a process.

        The group is the server and whatever it started that stayed in it: the real server behind a
        launcher (`npx`, `uvx`, `docker run`'s client, `sh -c`, node wrappers), which a signal to the
        launcher alone leaves running as an orphan. Processes that left the group (daemons) are not
        reached. Once the server is reaped its pid may be reused, but not while its group has a member.
        """
        with self._kill_lock:  # the pidfd is not closed (and its number reused) meanwhile
            if self.proc is None or self._released:
                return False
            try:
                self._signal_group(sig)
            except OSError:  # ProcessLookupError: gone already
                return False
            self._group_signalled = True
            return True

    def _signal_group(self, sig: int) -> None:
        if self._pidfd is not None and self._pidfd_groups:
            try:
                signal.pidfd_send_signal(self._pidfd, sig, None, PIDFD_SIGNAL_PROCESS_GROUP)
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._pidfd_groups = False  # Linux < 6.9: by the group id, which a live member keeps taken
        os.killpg(self._pgid(), sig)

    def _on_server_end(self, ticket: int) -> None:
        """The server's output is over (EOF, or it died and its pipe is drained): tell the client.

        `ticket` was taken before the client can see EOF, so whatever the client sends in reaction
        is read later and recorded after `server-eof`.
        """
        with contextlib.suppress(OSError):
            _close_to_devnull(self.stdout_fd)  # harmless when the other path did it already
        self._seq.close(fmt.S2C, self._event(fmt.EV_SERVER_EOF), ticket, self._held_records(fmt.S2C))

    def _on_client_stdout_broken(self, exc: OSError) -> None:
        """Relaying to the client failed (it closed its end of the tee's stdout: EPIPE): the s2c pump
        stops (`stop_on_forward_error`). Say so, and close the server's stdout like the client did.

        Directly, the server's next write would fail with EPIPE and most servers end there; draining
        its output into the capture instead hid the client's leaving from it (it ran on until stdin
        EOF and the grace period), and recorded as relayed what no client received. The read that
        failed is not recorded; `held` says how many bytes it had.
        """
        assert self.proc is not None and self.proc.stdout is not None
        pump = self.pumps[fmt.S2C]
        self._seq.close(
            fmt.S2C,
            self._event(fmt.EV_STDOUT_BROKEN, error=_describe(exc), held=pump.last_read),
            self._seq.current[fmt.S2C],
        )
        # The pump reads it no more (it ends once this returns), so nobody else uses the descriptor.
        with contextlib.suppress(OSError):
            self.proc.stdout.close()

    def _submit_signals(self) -> None:
        while self._signals:
            self._seq.submit(self._signals.popleft())

    def _reserve(self) -> int | None:
        """A place among the traffic for a signal's record, taken in its handler before the signal is
        passed on: the server's death it causes must come after it in the capture (a death after the
        client's host or terminal ended the server is no crash). Left to the main thread
        (`_submit_signals`), the record came after the server's `server-eof`, the main thread being
        parked in `wait()` until the exit. None: queued behind earlier ones, in order."""
        return None if self._signals or self.proc is None else self._seq.reserve()

    def _signal_record(self, ticket: int | None, record: dict[str, Any]) -> None:
        if ticket is None:
            self._signals.append(record)
        else:
            self._seq.fulfil(ticket, record)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # To the server's whole group, as a terminal's Ctrl-C or a hangup reaches its whole foreground
        # group: in a session of its own (`_spawn`), the server gets each such signal from the tee
        # alone, once (in the tee's group it got the terminal's and then the tee's).
        proc = self.proc
        ticket = self._reserve()
        # While any process of the group runs, not only the server: a launcher (`sh -c`) that died of a
        # first signal is reaped at once, and a second SIGTERM (a host's "now") must still reach the
        # server it started, which is shutting down. The pidfd (or the group id, which a live member
        # keeps taken) still names the group once the launcher is reaped (`_signal_group`).
        forwarded = proc is not None and (proc.poll() is None or group_running(self._pgid())) and self._kill(signum)
        # We are told to stop: whenever the server is (or becomes) gone, do not linger for the client.
        # Also when the kill reached a dead but unreaped server, which it cannot tell from a live one.
        self._cut_linger = True
        record = self._event(fmt.EV_SIGNAL, signal=signal_name(signum), forwarded=forwarded)
        self._signal_record(ticket, record)
        if proc is None:  # the server is being started (or cannot be): `_forward_held_signals` sends it on
            self._held_signals.append((signum, record))
        if forwarded:
            self._end_server_later(fmt.EV_SIGNAL)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        """Ctrl-Z (SIGTSTP): stop the server's group and the tee, as a shell's job control stops a whole
        job, and continue the group when the tee is continued (`fg`, `bg`: SIGCONT to the tee's group).

        The tee stopped alone while the server ran on. Passing SIGTSTP on does nothing: the server's
        group, in a session of its own, is orphaned, and the kernel discards job-control stop signals
        to processes of an orphaned group that do not handle them. So it gets SIGSTOP, as Ctrl-Z stops
        a server that does not handle SIGTSTP (one that does gets no chance to tidy up first). The tee
        stops itself by SIGTSTP's default action rather than SIGSTOP: in an orphaned group itself (no
        shell would ever continue it) the kernel discards that too, and the tee continues the group at
        once. Every thread stops with the main thread; `_clock` leaves the time stopped out of the timers.
        """
        ticket = self._reserve()
        stopped = self._kill(signal.SIGSTOP)
        self._signal_record(ticket, self._event(fmt.EV_SIGNAL, signal=signal_name(signum), forwarded=stopped))
        since = time.monotonic()
        self._paused = (since, self._paused[1])
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        try:
            os.kill(os.getpid(), signal.SIGTSTP)  # the whole process stops as this call returns; until SIGCONT
        finally:
            signal.signal(signal.SIGTSTP, self._on_stop)
            self._paused = (None, self._paused[1] + time.monotonic() - since)
        if stopped:
            ticket = self._reserve()
            continued = self._kill(signal.SIGCONT)
            record = self._event(fmt.EV_SIGNAL, signal=signal_name(signal.SIGCONT), forwarded=continued)
            self._signal_record(ticket, record)

    def _stalled_after_signal(self, pump: Pump) -> Callable[[], bool]:
        """For `_await_drained` once the server is gone: True when the tee was told to stop (a signal)
        and `pump` has not relayed a read for `grace` seconds since (its reader takes nothing).

        Without it a host that stopped reading and sent SIGTERM had the tee wait for that reader
        forever, deaf to more signals, its capture's last records held back until a SIGKILL lost
        them, where the server alone would have died of the signal. What the pump holds then reaches
        neither the reader nor the capture.
        """
        reads, since = pump.reads, self._clock()

        def stalled() -> bool:
            nonlocal reads, since
            if not self._cut_linger:  # no signal yet: a slow reader is waited for, as it would be
                since = self._clock()
            elif pump.reads != reads:  # the reader takes the output, slowly
                reads, since = pump.reads, self._clock()
            return self._clock() - since >= self.grace

        return stalled

    def _relay_abandoned(self, stream: str, pump: Pump) -> None:
        """Say what the tee gives up of `stream` when its reader took nothing for `grace` seconds after
        a signal: what `pump` read and holds is lost to the capture too, and must not be lost silently."""
        self._lifecycle(fmt.EV_RELAY_ABANDONED, stream=stream, held=pump.unrecorded(), grace=self.grace)

    def _forward_held_signals(self) -> None:
        """Forward the signals that came while the server was being started, now that it runs.

        Their records wait in `_signals` (only this thread submits them before the server is waited
        for), so each can still say whether it was forwarded.
        """
        while self._held_signals:
            signum, record = self._held_signals.pop(0)
            if self._kill(signum):
                record["forwarded"] = True
                self._end_server_later(fmt.EV_SIGNAL)

    # --- running ------------------------------------------------------------------------------
    def run(self, *, restore_signals: bool = True) -> int:
        """Spawn the server, relay and record until it ended and the linger window closed.

        With `restore_signals` false (a command that exits with the status returned, at once), the
        forwarded signals stay ignored instead of getting their previous handlers back: a host's SIGTERM
        that came in between killed the command (-15), where the server's status was due.
        """
        # From before the server exists until the capture is closed: a SIGTERM that came while the
        # server started killed the tee outright, leaving the server orphaned and the part unclosed.
        previous = self._install_signal_handlers()
        try:
            try:
                return self._run()
            finally:
                self._submit_signals()
                self._seq.drain()
                self._write_counters()
                self.writer.close()
        finally:
            self._restore_signal_handlers(previous, restore_signals)

    def counters(self) -> dict[str, Any]:
        """The recorder's counters so far (those of `record http --metrics`, but `sse_open`)."""
        out: dict[str, Any] = self.stats.snapshot()
        del out["sse_open"]  # no event streams on stdio
        out.update(writer_counters(self.writer))
        return out

    def _write_counters(self) -> None:
        # After every other record: the counters then cover them all (but this one and what the
        # writer adds when it closes the part). A writer too slow to catch up is read as it stands.
        self.writer.flush(5.0)
        if self.writer.keeper is not None:
            self.writer.keeper.flush(5.0)  # retention's work on the parts closed so far, counted too
        self.writer.write(self._event(fmt.EV_RECORDER_END, **{fmt.F_COUNTERS: self.counters()}))

    def _spawn(self) -> subprocess.Popen[bytes]:
        # In a session (and process group) of its own, so that ending the server ends what it started
        # too (`_kill`): launchers are the common case. A new session rather than only a new group: a
        # background group of the terminal's session would be stopped (SIGTTIN) by reading the
        # terminal; without one, opening /dev/tty fails at once. Signals to the tee's own group (a
        # terminal's Ctrl-C, a host's killpg) reach the server through the tee (`_on_signal`).
        try:
            return subprocess.Popen(
                self.cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                start_new_session=True,
            )
        except OSError as exc:
            # Like a shell: 127 when there is nothing to run, 126 when it cannot be run.
            missing = isinstance(exc, FileNotFoundError | NotADirectoryError)
            code = 127 if missing else 126
            self._lifecycle(fmt.EV_SPAWN_FAILED, error=_describe(exc), status=code)
            raise SpawnFailed(f"cannot start server {self.argv[0]!r}: {_describe(exc)}", code) from exc

    def _run(self) -> int:
        proc = self.proc = self._spawn()
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        with contextlib.suppress(AttributeError, OSError):  # Linux >= 5.3; else plain pids
            self._pidfd = os.pidfd_open(proc.pid)
        self._lifecycle(fmt.EV_SPAWN, argv=self.argv, pid=proc.pid, cwd=fmt.utf8_text(os.getcwd()), **self.parent)
        self._forward_held_signals()
        for fd in (proc.stdin.fileno(), proc.stdout.fileno(), self.stdin_fd, self.stdout_fd):
            _grow_pipe(fd)

        seq = self._seq
        s2c = Pump(
            proc.stdout.fileno(),
            self.stdout_fd,
            self._on_s2c,
            on_forward_error=self._on_client_stdout_broken,
            # not at EOF: the client went away (`_on_client_stdout_broken` closed the stream)
            on_end=lambda eof: self._on_server_end(seq.current[fmt.S2C]) if eof else None,
            stop_on_forward_error=True,  # as the server's own write would, relaying fails for good
            sequencer=seq,
            name=fmt.S2C,
        )
        err = Pump(
            proc.stderr.fileno(),
            stream_forwarder(self._stderr, self._stderr_lock),
            self._on_stderr,
            on_forward_error=lambda exc: None,
            sequencer=seq,
            name=fmt.STDERR,
            max_carried=STDERR_PIECE,
        )
        c2s = Pump(
            self.stdin_fd,
            proc.stdin.fileno(),
            self._on_c2s,
            on_forward_error=self._on_stdin_broken,
            on_end=self._on_client_end,
            sequencer=seq,
            name=fmt.C2S,
        )
        self.pumps = {fmt.C2S: c2s, fmt.S2C: s2c, fmt.STDERR: err}
        try:
            for pump in (s2c, err, c2s):
                pump.start()
            returncode = proc.wait()
            self._exited.set()
            self._submit_signals()
            status = exit_status(returncode)
            if returncode < 0:
                self._lifecycle(fmt.EV_EXIT, signal=signal_name(-returncode), status=status)
            else:
                self._lifecycle(fmt.EV_EXIT, code=returncode, status=status)
            # What the server wrote before dying is already in its pipes. Once a pump has relayed
            # that, the client gets EOF even if a grandchild still holds the write end open.
            if _await_drained(s2c, self._stalled_after_signal(s2c)):
                self._relay_abandoned("stdout", s2c)
            if not s2c.done.is_set():  # a grandchild holds the pipe, or the client no longer reads
                self._on_server_end(seq.begin("main"))
                seq.end("main")
            if _await_drained(err, self._stalled_after_signal(err)):
                self._relay_abandoned("stderr", err)
            seq.close(fmt.STDERR, held=self._held_records(fmt.STDERR))
            self._linger(c2s)
            self._finish_ending()
        finally:
            with self._kill_lock:
                self._released = True
                self._exited.set()
                if self._pidfd is not None:
                    with contextlib.suppress(OSError):
                        os.close(self._pidfd)
                    self._pidfd = None
        for pump in (s2c, err, c2s):
            if pump.error is not None:
                raise pump.error
        for pump, pipe in ((s2c, proc.stdout), (err, proc.stderr)):
            if pump.done.is_set():  # else a parked pump still reads it
                with contextlib.suppress(OSError):
                    pipe.close()
        return status

    def _finish_ending(self) -> None:
        """Wait for `_escalate`, if it runs: once the tee signalled the server, it ends what is left of
        its group after the server exited (at most two `grace` periods), which a tee that exited first
        could not. Without a signal sent it returns as soon as it sees the server gone."""
        ending = self._ending
        while ending is not None and ending.is_alive():
            ending.join(GROUP_POLL)  # short steps: signals are handled on this thread

    def _linger(self, c2s: Pump) -> None:
        """Keep recording client bytes for `linger` seconds after the server's exit (unless at EOF)."""
        if c2s.eof:
            c2s.join(5.0)  # the client already closed stdin; let its pump record `client-eof`
            return
        deadline = self._clock() + self.linger
        # Short steps, so a forwarded signal (handled on this thread) can end the window early.
        while not self._cut_linger and (left := deadline - self._clock()) > 0:
            if c2s.join(min(left, 0.05)):
                break
        self._submit_signals()
        self._seq.close(fmt.C2S, self._event(fmt.EV_LINGER_END), held=self._held_records(fmt.C2S))

    def _install_signal_handlers(self) -> dict[int, object]:
        previous: dict[int, object] = {}
        if threading.current_thread() is not threading.main_thread():
            return previous  # signal handlers can only be set from the main thread
        for sig in FORWARDED_SIGNALS:
            # A signal the host made the tee ignore (`nohup`: SIGHUP; a background job of a shell:
            # SIGINT, SIGQUIT) stays ignored: the server inherits that through exec, as it would
            # without the tee, and the tee neither dies of it nor passes it on.
            if signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, self._on_signal)
        if signal.getsignal(signal.SIGTSTP) is not signal.SIG_IGN:
            previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, self._on_stop)
        # A write to a dead server or a gone client must be an EPIPE error we handle, not our death.
        previous[signal.SIGPIPE] = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        return previous

    def _restore_signal_handlers(self, previous: dict[int, object], restore: bool = True) -> None:
        for sig, handler in previous.items():
            if not restore and sig in FORWARDED_SIGNALS:
                handler = signal.SIG_IGN  # the process exits with the server's status right after (`run`)
            with contextlib.suppress(TypeError, ValueError):
                signal.signal(sig, handler)  # type: ignore[arg-type]


def _await_drained(pump: Pump, give_up: Callable[[], bool] | None = None) -> bool:
    """Wait until `pump` finished, or relayed everything and waits on an empty pipe, or `give_up()`;
    True in that last case.

    The second case is a dead server whose child inherited the pipe. "Empty" must hold across a short
    pause with no new read, so a read that just returned (flags not yet updated) is not mistaken for
    an idle pump.
    """
    while not pump.join(0.02):
        if give_up is not None and give_up():
            return True
        if pump.drained():
            reads = pump.reads
            if pump.join(0.05):
                return False
            if pump.drained() and pump.reads == reads:
                return False
    return False


def _describe(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    text = exc.strerror or str(exc)
    where = f": {exc.filename!r}" if exc.filename else ""
    return f"{name} {text}{where}".strip() if name else f"{text}{where}"


def run_tee(
    cmd: Sequence[str],
    *,
    server: str | None = None,
    out_dir: Path | None = None,
    linger: float = DEFAULT_LINGER,
    grace: float = DEFAULT_GRACE,
    stderr: BinaryIO,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    rotate_bytes: int | None = None,
    rotate_age: float | None = None,
    retention: Retention | None = None,
    chain_key: bytes | None = None,
    probe_timeout: float = PROBE_TIMEOUT,
    restore_signals: bool = True,
) -> int:
    """Run `cmd` as a recorded stdio server between `stdin_fd`/`stdout_fd` and the server.

    Returns the server's exit status (128+signal number when a signal killed it). Raises
    `SpawnFailed` (exit status 127 or 126, the failure recorded) when the command cannot start, and
    `ErascopeError` for bad arguments. `chain_key` makes the capture's hash chain keyed (`blake3-keyed`).
    Capture write failures never stop the relay: they are reported
    on `stderr` with a count. A server still running `grace` seconds after the client closed stdin
    (or after a forwarded signal) gets SIGTERM, then SIGKILL after another `grace` seconds: sent to its
    process group (the server runs in a session of its own), so a launcher's server ends with it.

    Installs handlers for SIGINT/SIGTERM/SIGHUP/SIGQUIT (forwarded to the server) and SIGTSTP (stops
    the server's group with the tee) and ignores SIGPIPE while it runs, when called from the main
    thread; `restore_signals=False` (a caller that exits with the returned status at once) leaves the
    forwarded signals ignored afterwards rather than restoring their previous handlers. When it returns
    while the client still holds `stdin_fd` open (the server exited first), the thread reading it stays
    parked until the client closes it; it records and forwards nothing more. The command exits right
    away, so only in-process callers see that thread.
    """
    tee = StdioTee(
        cmd,
        server=server,
        out_dir=out_dir,
        linger=linger,
        grace=grace,
        stderr=stderr,
        stdin_fd=stdin_fd,
        stdout_fd=stdout_fd,
        rotate_bytes=rotate_bytes,
        rotate_age=rotate_age,
        retention=retention,
        chain_key=chain_key,
        probe_timeout=probe_timeout,
    )
    return tee.run(restore_signals=restore_signals)
