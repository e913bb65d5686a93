"""Retention of capture parts: age rotation settings, zstd compression of closed parts, and a bound on
what a capture directory keeps (`--keep-bytes`, `--keep-days`).

A recorder meant to run for weeks must keep its disk bounded without ever touching the part it is
writing, nor the part another recorder (a concurrent `record stdio` spawn) is writing in the same
directory. Which parts are open is told by file locks, not by guessing from names or times: every
writer holds an exclusive `flock` on its open part from the moment the part has its name until it
is closed (the file is created under a hidden name, locked, then linked to its real name, so no
other process can ever see an unlocked open part). A part is *closed* when nobody holds its lock: the
writer closed it, or the recorder died (the kernel dropped the lock; nothing will write it again).
A recorder killed while opening a part leaves its empty hidden `.<name>.opening` file; every recorder
removes such files once nobody holds their lock and they are older than `OPENING_STALE`
(`remove_stale_openings`): its keeper in each of its rounds, or a writer without one when it opens
its first part (on the writer thread, once).

All the other work here runs on a `PartKeeper` thread, never on a relay path or on the writer thread:

1. compress: a closed `x.000.jsonl` becomes `x.000.jsonl.zst` (written to a hidden temporary name,
   fsynced, renamed, keeping mode 0600 and the part's mtime), then the plain part is removed. The
   analyzer finds and reads `*.jsonl.zst` like the plain file (`analyzer.sources`). A failure to
   compress leaves the plain part as it was and is reported. A file already named `x.000.jsonl.zst`
   is never replaced: holding the part's bytes (a keeper killed between the rename and the removal),
   it stands for the part; holding anything else, it and the plain part both stay, reported. At
   start, the closed plain parts that earlier runs left are compressed too, and partial outputs no
   keeper writes are removed (a keeper killed mid-compression left both for good).
2. sweep: capture parts of the directory (names the writer makes, plain or compressed) are taken
   oldest first by mtime (the time their last record was written) and removed while older than
   `keep_days` or while the directory's capture parts total more than `keep_bytes`. A part whose
   lock is held (an open part) is skipped, never removed; the compressor holds the lock of the part
   it reads, so a part is never removed half-compressed either. Nor is a younger part of a capture
   whose part was skipped: a capture loses its oldest parts, never its middle. A part counts as no
   younger than the later parts of its capture: one written before the clock was stepped back goes
   first all the same (`capture_parts`). A part dated in the future (written while the clock ran
   ahead) ages from when a sweep first found it so, not from its date (`_found_at`). A part that
   cannot be removed (EPERM, a read-only mount) holds its capture's younger parts too, and is
   reported once per keeper. The recorders sharing a directory sweep it in turn (each holds the
   directory's `flock` while it lists and removes); a turn that does not come within `_SWEEP_WAIT`
   seconds is left out, never waited for without end.

The bound therefore holds up to the open parts: right after a sweep the directory is within
`keep_bytes` (when enough closed parts exist), and until the next rotation each running recorder's
open part can grow by up to one part (`rotate_bytes`, plus the record that crossed it). That is
the documented slack: one part per recorder writing into the directory.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import os
import queue
import re
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the backport mitmproxy already depends on (declared in pyproject.toml)
    from backports import zstd

from addon.errors import ErascopeError

ZSTD_SUFFIX: Final = ".zst"
ZSTD_LEVEL: Final = 3
"""zstd's default level: about 10x smaller captures at a few hundred MB/s on one core."""
CHUNK: Final = 1 << 20
PART_NAME: Final = re.compile(r"\d{8}T\d{6}\.\d{6}Z_[A-Za-z0-9._-]+_\d+_[0-9a-f]{6}\.\d{3,}\.jsonl(?:\.zst|\.gz)?")
"""Names of the capture parts the writer makes (plain, compressed by it, or by logrotate): the only
files a sweep ever considers, so nothing else in the directory is counted or removed."""
OPENING_SUFFIX: Final = ".opening"
"""A part is `.<name>.opening` between its creation and its lock (`open_locked`): hidden, and no
reader looking for `*.jsonl` (the analyzer, `erascope watch`) ever takes it for a capture."""
OPENING_STALE: Final = 60.0
"""Seconds after which an unlocked `.opening` file is taken for one a recorder killed while opening a
part left behind (`remove_stale_openings`). Its creator locks it in the very next system call, then
links and unlinks it at once: only a recorder stopped that long in between (SIGSTOP, a suspended
machine) has its file taken, and `open_locked` then starts over."""
PARTIAL_SUFFIX: Final = ".partial"
"""A compressed part is `.<name>.zst.partial` while it is written."""
_OPEN_ATTEMPTS: Final = 3
"""Times `open_locked` creates its hidden file when it is removed before it was locked."""
_LOCK_RETRIES: Final = 50
_LOCK_PAUSE: Final = 0.02
_DAY: Final = 86400.0
_SWEEP_WAIT: Final = 5.0
"""Seconds a sweep waits for its turn (the directory's lock; another recorder's sweep holds it for
milliseconds) before it leaves this round out. A process that holds it for good (a recorder stopped in
the middle of a sweep, a script's `flock` on the directory) stopped the keeper for good: no more
compression or sweeps, and the recorder's exit waited for the keeper."""

_SIZE_UNITS: Final = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DURATION_UNITS: Final = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": _DAY, "w": 7 * _DAY}


def parse_size(text: str, what: str) -> int:
    """`512k`, `256m`, `10g`, `4096` (bytes; binary multiples, like mitmproxy's sizes) as bytes > 0."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)i?b?\s*", text.lower())
    size = int(float(m.group(1)) * _SIZE_UNITS[m.group(2)]) if m else 0
    if size <= 0:
        raise ErascopeError(f"{what} must be a positive size such as 512k, 256m or 10g, not {text!r}")
    return size


def parse_duration(text: str, what: str) -> float:
    """`90s`, `30m`, `6h`, `7d`, `2w`, `3600` (seconds) as seconds > 0."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)] if m else 0.0
    if seconds <= 0:
        raise ErascopeError(f"{what} must be a positive duration such as 90s, 30m, 6h or 7d, not {text!r}")
    return seconds


@dataclass(frozen=True, slots=True)
class Retention:
    """What happens to a recorder's closed parts. The default does nothing (parts stay as written)."""

    compress: bool = False
    """Compress each closed part to `*.jsonl.zst`."""
    keep_bytes: int | None = None
    """Remove the oldest closed parts while the directory's capture parts total more than this."""
    keep_days: float | None = None
    """Remove closed parts whose last record is older than this many days."""

    @property
    def active(self) -> bool:
        """Whether there is anything to do at all (else no keeper thread is started)."""
        return self.compress or self.keep_bytes is not None or self.keep_days is not None

    def check(self) -> None:
        """Raise `ErascopeError` for bounds that cannot be met."""
        if self.keep_bytes is not None and self.keep_bytes <= 0:
            raise ErascopeError(f"--keep-bytes must be positive, not {self.keep_bytes}")
        if self.keep_days is not None and not self.keep_days > 0:
            raise ErascopeError(f"--keep-days must be positive, not {self.keep_days}")


@dataclass(slots=True)
class RetentionCounters:
    """What a keeper did (read by the recorders' metrics; plain ints, updated on the keeper thread)."""

    compressed: int = 0
    compress_failures: int = 0
    removed: int = 0
    removed_bytes: int = 0


# --- locks ------------------------------------------------------------------------------------------


def open_locked(path: Path) -> int:
    """Create `path` (0600, must not exist) for appending, holding an exclusive lock on it before it
    is visible under its name: a sweep in any process never sees it unlocked while it is open.

    The lock lives as long as the returned descriptor (closing it, or the process dying, drops it).
    """
    hidden = path.with_name(f".{path.name}{OPENING_SUFFIX}")
    for _ in range(_OPEN_ATTEMPTS):
        fd = os.open(hidden, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            # New and hidden: nobody else holds it, but for a recorder that took it for a killed one's
            # (`remove_stale_openings`), in the instant it removes it: this open then fails, reported.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            _discard(fd, hidden)
            raise
        if os.fstat(fd).st_nlink > 0:
            return _link_locked(fd, hidden, path)
        # Stopped longer than `OPENING_STALE` before the lock, this recorder had its file removed as a
        # killed one's: linking it would fail (ENOENT) and lose a record. The name is free again.
        os.close(fd)
    raise FileNotFoundError(errno.ENOENT, f"{hidden} was removed again and again while being opened", str(hidden))


def _link_locked(fd: int, hidden: Path, path: Path) -> int:
    """Give the locked, hidden new part `fd` (`hidden`) its name `path`, which must not exist; `fd`."""
    try:
        _rename_new(hidden, path)
    except BaseException:
        _discard(fd, hidden)
        raise
    return fd


def _rename_new(source: Path, name: Path) -> None:
    """Rename `source` to `name`, which must not exist: `FileExistsError` when it does (nothing changed).
    A rename would replace whatever is there; a link fails instead."""
    try:
        os.link(source, name)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
            raise
        if os.path.lexists(name):  # a file system without hard links: rename, minding the promise
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(name)) from exc
        os.rename(source, name)
    else:
        os.unlink(source)


def _discard(fd: int, hidden: Path) -> None:
    """Close and remove a new part that failed to open: nothing was written to it."""
    with contextlib.suppress(OSError):
        os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(hidden)


def remove_stale_openings(directory: Path, now: float | None = None) -> int:
    """Remove the hidden `.<part>.opening` files that recorders killed while opening a part (between
    creating the file and linking it to the part's name) left in `directory`; how many were removed.

    Such a file is empty (nothing is written before it has its name) and nothing would ever remove it.
    One is taken only when nobody holds its lock (a live recorder holds it from the system call after
    the file's creation until it is gone) and it is older than `OPENING_STALE` (the moment before that
    lock is microseconds long): never while its recorder is still opening the part. A recorder killed
    between linking and unlinking it left the part too: only the hidden name of that empty part goes.
    """
    now = time.time() if now is None else now
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    removed = 0
    for entry in entries:
        name = entry.name
        if not (
            name.startswith(".")
            and name.endswith(OPENING_SUFFIX)
            and PART_NAME.fullmatch(name[1 : -len(OPENING_SUFFIX)])
        ):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime <= OPENING_STALE:
                continue  # perhaps a recorder between creating and locking it (or a clock set back)
        except OSError:
            continue
        fd = _lock_closed(Path(entry.path))  # None: its recorder holds it, or it is gone, or not a file
        if fd is None:
            continue
        try:
            os.unlink(entry.path)  # under its lock: no recorder is opening a part with it
            removed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _lock_closed(path: Path, retries: int = 0) -> int | None:
    """A read descriptor holding `path`'s exclusive lock, or None when the part is open (its lock is
    held) or gone. `retries` waits out a sweep's or keeper's brief hold of a closed part's lock."""
    try:
        # a FIFO swapped in under a part's name would block this open, and the keeper with it; a link
        # would have its target compressed into the folder: only the part's own regular file is taken
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    for attempt in range(retries + 1):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_nlink == 0:
                # whoever held the lock meanwhile (another recorder's sweep or compressor) removed the part:
                # what is open here is no longer in the directory, and compressed it would come back
                break
            return fd
        except BlockingIOError:
            if attempt < retries:
                time.sleep(_LOCK_PAUSE)
        except OSError:
            break
    os.close(fd)
    return None


# --- compression ------------------------------------------------------------------------------------


def compress_part(path: Path, retries: int | None = None) -> Path | None:
    """Compress the closed part `path` to `path.zst` and remove `path`; the compressed path, or None
    when `path` is gone or open (nothing done). `retries`: how often to wait for a lock held briefly
    (default `_LOCK_RETRIES`). Raises `OSError` / `zstd.ZstdError` when compressing fails: the plain
    part is then left as it was and no partial output remains.

    A file already named `path.zst` is never replaced: when it holds the part's very bytes (a keeper
    was killed after putting it there, before removing the plain part), it stands for the part and
    only the plain part goes; when it holds anything else (a copy put back by hand, another tool's),
    both stay and `FileExistsError` names it."""
    fd = _lock_closed(path, retries=_LOCK_RETRIES if retries is None else retries)
    if fd is None:
        return None
    target = path.with_name(path.name + ZSTD_SUFFIX)
    try:
        placed = not os.path.lexists(target) and _write_compressed(fd, target)
        if not placed and not _holds(target, fd):
            raise FileExistsError(errno.EEXIST, "a different file already has its compressed name", str(target))
        try:
            os.unlink(path)  # still under our lock: no sweep removed it meanwhile
        except OSError:
            # The part cannot be removed (immutable, a read-only mount): two copies of it would be
            # counted twice toward `keep_bytes`, and the warning says the plain part is kept.
            if placed:
                with contextlib.suppress(OSError):
                    os.unlink(target)
            raise
        return target
    finally:
        os.close(fd)


def _write_compressed(fd: int, target: Path) -> bool:
    """Write the part open at `fd` compressed, durably, under the new name `target`; False (nothing
    written remains) when another file took that name meanwhile."""
    st = os.fstat(fd)
    partial = target.with_name(f".{target.name}{PARTIAL_SUFFIX}")
    # A new file, never one found under this predictable name: opening a link planted there would
    # overwrite the file it points to. What a killed keeper left there is removed first.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial)
    out = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with open(out, "wb", closefd=True) as sink, zstd.ZstdFile(sink, "wb", level=ZSTD_LEVEL) as z:
            while chunk := os.read(fd, CHUNK):
                z.write(chunk)
        with open(partial, "rb") as done:  # durable before the plain part goes
            os.fsync(done.fileno())
        os.utime(partial, ns=(st.st_atime_ns, st.st_mtime_ns))  # age and order stay those of the data
        try:
            _rename_new(partial, target)
        except FileExistsError:
            os.unlink(partial)
            return False
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    return True


def _holds(packed: Path, fd: int) -> bool:
    """Whether the regular file `packed` decompresses to exactly the bytes of the part open at `fd`."""
    try:
        src = os.open(packed, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(src).st_mode):
            return False
        offset = 0
        with open(src, "rb", closefd=False) as raw, zstd.ZstdFile(raw, "rb") as unpacked:
            while chunk := unpacked.read(CHUNK):
                if os.pread(fd, len(chunk), offset) != chunk:
                    return False
                offset += len(chunk)
        return offset == os.fstat(fd).st_size
    except (OSError, EOFError, zstd.ZstdError):  # EOFError: a stream cut short
        return False
    finally:
        os.close(src)


def current_name(path: Path) -> Path | None:
    """The part a writer wrote as `path`, as it is named now: `path`, or `path.zst` once a keeper compressed
    it (the writer's own, or that of another recorder sharing the directory, which tells the writer
    nothing); None when it is gone (a sweep removed it)."""
    for candidate in (path, path.with_name(path.name + ZSTD_SUFFIX)):
        if os.path.lexists(candidate):
            return candidate
    return None


# --- sweeping -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Removed:
    """One part a sweep removed."""

    path: Path
    size: int
    mtime: float
    reason: str
    """`keep-days` or `keep-bytes`."""

    def describe(self) -> str:
        """One log line."""
        try:
            when = dt.datetime.fromtimestamp(self.mtime, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        except (ValueError, OverflowError, OSError):
            # a time no calendar year 1 to 9999 holds (file systems with 64-bit times store any): the
            # line must still be logged, and the removals after it
            when = f"at {self.mtime:.0f} seconds from 1970"
        return f"erascope: retention ({self.reason}) removed {self.path} ({self.size} bytes, last written {when})"


def capture_parts(directory: Path, now: float | None = None) -> list[tuple[float, str, int, Path]]:
    """The directory's capture parts as (last written, name, size, path), oldest first.

    A part was last written at its mtime, or before: no later than any later part of its capture
    (the writer closes a part before it writes the next). Parts whose times say otherwise were written
    by a clock stepped back meanwhile (NTP correcting a clock that ran ahead): such a part is taken as
    old as its capture's oldest later part, so a capture is always taken in its parts' order. A part
    dated after `now` (default: the present) counts as written when a sweep found it so (`_found_at`,
    which may set that part's ctime).
    """
    now = time.time() if now is None else now
    parts: list[tuple[float, str, int, Path]] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in entries:
        if not PART_NAME.fullmatch(entry.name):
            continue
        with contextlib.suppress(OSError):
            st = entry.stat(follow_symlinks=False)
            if entry.is_file(follow_symlinks=False):
                when = st.st_mtime if st.st_mtime <= now else _found_at(Path(entry.path), st, now)
                parts.append((when, entry.name, st.st_size, Path(entry.path)))
    captures: dict[str, list[tuple[int, str, int]]] = {}
    for i, (_, name, _, _) in enumerate(parts):
        stem, number = _stem_and_number(name)
        captures.setdefault(stem, []).append((number, name, i))
    for members in captures.values():
        latest = float("inf")
        for _, _, i in sorted(members, reverse=True):  # the last part first
            latest = min(latest, parts[i][0])
            parts[i] = (latest, *parts[i][1:])
    # a capture's parts by number where their times tie (coarse file system clocks): `.1000` sorts
    # before `.999` as text, and removing it first would leave a hole in the middle of the capture
    parts.sort(key=lambda p: (p[0], *_stem_and_number(p[1]), p[1]))
    return parts


def _found_at(path: Path, st: os.stat_result, now: float) -> float:
    """When the part `path`, whose mtime (`st`) is after `now`, counts as last written: when its file
    last changed (its ctime), at the latest `now`.

    Such a part was written while the clock ran ahead, and the clock was set right since. Taken at its
    date it would wait for that date plus `keep_days`: years, for a clock years ahead. Its ctime was
    put ahead too (by the same writes), unless something changed the file since; the first sweep that
    finds the part closed sets the ctime to the present (a `utime` to the times it has, which stay as
    written), so the part ages from then on, across restarts too. The ctime serves only while the
    part's own date is ahead: a sweep by a clock running behind (a machine started without its clock)
    does the same to every part, and once the clock is right again they are judged by their own dates,
    not aged by that clock's wrong present.
    """
    if st.st_ctime <= now:
        return st.st_ctime
    fd = _lock_closed(path)
    if fd is None:
        return now  # open (never removed anyway), or gone
    try:
        kept = os.fstat(fd)
        os.utime(fd, ns=(kept.st_atime_ns, kept.st_mtime_ns))  # the kernel sets the ctime to the present
        return min(os.fstat(fd).st_ctime, now)
    except OSError:
        return now  # not permitted (another user's part, immutable): found now, again next time
    finally:
        os.close(fd)


def _stem_and_number(name: str) -> tuple[str, int]:
    """A part name's capture (its name up to the part number) and part number."""
    stem, _, rest = name.rpartition(".jsonl")[0].rpartition(".")
    return stem, int(rest) if rest.isdigit() else -1


def sweep(
    directory: Path,
    *,
    keep_bytes: int | None,
    keep_days: float | None,
    now: float | None = None,
    refused: Callable[[Path, OSError], None] | None = None,
) -> list[Removed]:
    """Remove the oldest closed parts of `directory` until the bounds hold; what was removed.

    Open parts (locked) are counted in the total but never removed, nor the younger parts of their
    capture; so are parts that cannot be removed (EPERM, EACCES, a read-only mount), each told to
    `refused`. Sweeps of one directory, in any process, take turns (`_sweeping`); raises
    `TimeoutError` when the turn did not come within `_SWEEP_WAIT` seconds (nothing was removed).
    """
    if keep_bytes is None and keep_days is None:
        return []
    now = time.time() if now is None else now
    with _sweeping(directory):
        parts = capture_parts(directory, now)
        total = sum(size for _, _, size, _ in parts)
        removed: list[Removed] = []
        held: set[str] = set()  # captures with a part that stays (open, being compressed): younger ones stay too
        for mtime, name, size, path in parts:
            too_old = keep_days is not None and now - mtime > keep_days * _DAY
            too_big = keep_bytes is not None and total > keep_bytes
            if not (too_old or too_big):
                break  # oldest first: every later part is younger, and the total only shrinks
            capture = _stem_and_number(name)[0]
            if capture in held:
                continue
            fd = _lock_closed(path)
            if fd is None:  # open, being compressed, or gone since listed: never removed
                if os.path.lexists(path) or os.path.lexists(f"{path}{ZSTD_SUFFIX}"):
                    # removing the capture's younger parts would leave a hole in its middle, which
                    # `verify` reports as a part missing (tampering); they wait for the next sweep
                    held.add(capture)
                if not os.path.lexists(path):
                    total -= size  # another recorder's keeper removed or compressed it since the listing
                continue
            try:
                st = os.fstat(fd)  # what is removed, as it is now: its own time, not its capture's
                os.unlink(path)  # under its lock: nobody is compressing or writing it
            except FileNotFoundError:
                total -= size  # removed meanwhile by someone who does not take the lock
                continue
            except OSError as exc:
                held.add(capture)  # going on with its younger parts would leave a hole in the capture
                if refused is not None:
                    refused(path, exc)
                continue
            finally:
                os.close(fd)
            total -= size
            removed.append(Removed(path, st.st_size, st.st_mtime, "keep-days" if too_old else "keep-bytes"))
    return removed


@contextlib.contextmanager
def _sweeping(directory: Path) -> Iterator[None]:
    """Hold `directory`'s own `flock` while sweeping it: the recorders sharing a directory sweep it in
    turn, each from a listing made in its turn. Sweeping at once, each counted the parts the others
    were removing and removed as many again beyond the bound."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield  # no directory: nothing to sweep, `capture_parts` finds nothing
        return
    try:
        deadline = time.monotonic() + _SWEEP_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        errno.ETIMEDOUT, f"another process held its lock for {_SWEEP_WAIT:g} s", str(directory)
                    ) from None
                time.sleep(_LOCK_PAUSE)
            except OSError:
                break  # a file system without flock: sweeps may overlap, as before
        yield
    finally:
        os.close(fd)  # drops the lock


# --- the keeper thread ----------------------------------------------------------------------------------

_STOP: Final = object()
_TIDY: Final = object()


def _remove_stale_partial(partial: Path, part: Path) -> None:
    """Remove `partial`, the output of a compression of `part` that no keeper is writing: `part` is gone,
    or closed (a keeper writing it holds `part`'s lock)."""
    fd = _lock_closed(part)
    if fd is None and os.path.lexists(part):
        return  # open, or being compressed right now
    try:
        with contextlib.suppress(OSError):
            os.unlink(partial)
    finally:
        if fd is not None:
            os.close(fd)


class PartKeeper:
    """Compresses a writer's closed parts and sweeps its directory, on a thread of its own.

    `closed(path)` queues a part the writer has just closed; `sweep_soon()` queues a sweep alone (at
    start: the directory may be over its bound from earlier runs). `log` gets one line per removed
    part, `warn` one per failure (the mitmproxy log for the addon, stderr for the tee);
    `on_compressed(old, new)` tells the writer a part's new name. None of them may raise.
    """

    def __init__(
        self,
        directory: Path,
        policy: Retention,
        *,
        log: Callable[[str], None],
        warn: Callable[[str], None] | None = None,
        on_compressed: Callable[[Path, Path], None] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.policy = policy
        self.counters = RetentionCounters()
        self._log = log
        self._warn = warn or log
        self._on_compressed = on_compressed
        self._refused_paths: set[Path] = set()
        """Parts a sweep could not remove, already reported."""
        self._sweep_waited = False
        """The last sweep found the directory locked by another process (reported)."""
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="erascope-keeper", daemon=True)
        self._thread.start()

    def closed(self, path: Path) -> None:
        """A part was closed: compress it (when asked to), then sweep."""
        self._queue.put(path)

    def tidy_soon(self) -> None:
        """At start, with compression: compress the closed plain parts earlier runs left (a keeper
        killed mid-compression, a run without it) and remove the partial outputs no keeper writes."""
        self._queue.put(_TIDY)

    def sweep_soon(self) -> None:
        """Sweep the directory (no part to compress)."""
        self._queue.put(None)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far is done; True when it was within `timeout`."""
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def close(self, timeout: float = 60.0) -> bool:
        """Finish what is queued (bounded by `timeout`), then stop; True when all was done."""
        self._queue.put(_STOP)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            # Best effort: the keeper yields the CPU to the relay (Linux: a thread id's own priority).
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        while True:
            # Everything queued meanwhile is taken at once: its parts are compressed first and the
            # directory swept once after, so a sweep weighs parts as they will stay (not the plain
            # size of a part about to be compressed) and a burst of rotations costs one sweep.
            batch = [self._queue.get()]
            with contextlib.suppress(queue.Empty):
                while batch[-1] is not _STOP:
                    batch.append(self._queue.get_nowait())
            waiting = [item for item in batch if isinstance(item, threading.Event)]
            try:
                if self.policy.compress:
                    done = 0
                    while done < len(batch):  # parts closed while compressing join this batch too
                        item = batch[done]
                        done += 1
                        if isinstance(item, Path):
                            self._compress(item)
                        elif item is _TIDY:
                            self._tidy()
                        if done == len(batch) and batch[-1] is not _STOP:
                            with contextlib.suppress(queue.Empty):
                                batch.append(self._queue.get_nowait())
                    waiting = [item for item in batch if isinstance(item, threading.Event)]
                self._sweep()
            except Exception as exc:  # a keeper bug must never stop the recorder
                self._warn(f"erascope: retention failed: {exc!r}")
            for event in waiting:
                event.set()
            if batch[-1] is _STOP:
                return

    def _compress(self, path: Path, retries: int | None = None) -> None:
        try:
            packed = compress_part(path, retries)
        except (OSError, zstd.ZstdError) as exc:
            self.counters.compress_failures += 1
            self._warn(f"erascope: cannot compress {path}: {exc}; the plain part is kept")
            return
        if packed is not None:
            self.counters.compressed += 1
            if self._on_compressed is not None:
                self._on_compressed(path, packed)

    def _refused(self, path: Path, exc: OSError) -> None:
        if path in self._refused_paths:
            return  # said once: it is refused again in every round
        self._refused_paths.add(path)
        self._warn(
            f"erascope: retention cannot remove {path}: {exc.strerror or exc}; it and the later parts of its"
            " capture are kept, and the directory may stay over its bound"
        )

    def _tidy(self) -> None:
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return
        for entry in entries:
            name = entry.name
            packed = name[1 : -len(PARTIAL_SUFFIX)]
            if name.startswith(".") and name.endswith(PARTIAL_SUFFIX) and PART_NAME.fullmatch(packed):
                _remove_stale_partial(Path(entry.path), self.directory / packed.removesuffix(ZSTD_SUFFIX))
            elif name.endswith(".jsonl") and PART_NAME.fullmatch(name) and entry.is_file(follow_symlinks=False):
                self._compress(Path(entry.path), retries=0)  # a locked part is being written: not waited for

    def _sweep(self) -> None:
        # every round, not only at start: recorders sharing the directory come and go (and get killed)
        # while this one runs for weeks
        remove_stale_openings(self.directory)
        try:
            removed = sweep(
                self.directory,
                keep_bytes=self.policy.keep_bytes,
                keep_days=self.policy.keep_days,
                refused=self._refused,
            )
        except TimeoutError as exc:
            if not self._sweep_waited:  # said once while it lasts: every round waits for it again
                self._sweep_waited = True
                self._warn(
                    f"erascope: retention skipped a sweep of {self.directory}: {exc.strerror};"
                    " tried again after the next rotation"
                )
            return
        self._sweep_waited = False
        for r in removed:
            self.counters.removed += 1
            self.counters.removed_bytes += r.size
            self._log(r.describe())
