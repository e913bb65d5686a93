"""`compact` and `analyze` on a Dask distributed cluster: `--scheduler ADDRESS`.

The work splits exactly (analyzer/CLUSTER.md checks it rule by rule):

- `compact` is a map over input files: each task runs the local per-file step
  (`analyzer.compact.compact_file`) on a worker, which reads the capture and writes its archive
  parts itself (both may be at URLs: the worker fetches its own input and uploads its own
  objects); only (parts, rows) travels back. For an archive at a URL, the files each input's old
  entry names go with its task (the client read the entries already, all at once).
- `analyze ARCHIVE` is a map over shards of server keys: each task runs the whole local pipeline
  (`analyzer.pipeline.analyze`) on the archive with `AnalyzeOptions.servers` set to its shard, so
  only that shard's `server=` partitions are opened, and sends back what the report shows of it
  (`ShardResult`: verdicts, findings, client rows, totals, a small row per probe and initialize).
  `merge` puts the shards together on the client into the `Analysis` the local run gives, and the
  report is byte-identical.

Workers open the paths as the client names them: inputs and archive must be on a filesystem the
client and every worker see under the same path (a shared mount), or at URLs every worker can read
(and, for `compact --out`, write) with the credentials in its own environment. Each task checks that, and fails
with a clear error instead of reading another file or archive (`archive_identity`; a compact task's
entry is looked for in the client's `--out`), and runs only on a worker with the client's erascope
and polars (`code_identity`): another one would analyze its shard its own way. A task whose worker
dies is run again by the scheduler elsewhere (up to its `allowed-failures`); a task that fails for
good fails the whole run: the result accounts for every shard or there is no result.

`distributed` is an optional dependency (`erascope[dask]`): it is imported only here, and this
module only by the `--scheduler` paths of the CLI.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib.util
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import orjson
import polars as pl

from addon.errors import ErascopeError
from analyzer.archive import (
    COMPACT_AGAIN,
    NULL_SERVER,
    SOURCES_DIR,
    entry_contents,
    is_archive,
    read_regular,
    server_of_partition,
)
from analyzer.compact import (
    CompactResult,
    Converted,
    Named,
    archive_name,
    compact,
    compact_file,
    source_fingerprint,
)
from analyzer.condense import Traffic
from analyzer.eras import ServerVerdict
from analyzer.findings import Finding
from analyzer.pipeline import Analysis, AnalyzeOptions, Inputs, analyze
from analyzer.schema import MESSAGES_SCHEMA
from analyzer.storage import is_url, part_sizes, redact
from analyzer.watch_shard import SessionLinks

if TYPE_CHECKING:
    from distributed import Client

INSTALL_HINT: Final = "pip install 'erascope[dask]'"
CONNECT_TIMEOUT_S: Final = 10.0
"""Seconds to wait for the scheduler to answer before giving up with an error."""
WAIT_FOR_WORKERS_S: Final = 60.0
"""Default seconds to wait for the scheduler to have a worker, at the start and whenever it has none
left: tasks given to a scheduler without workers wait for one forever."""


# --- the cluster ---------------------------------------------------------------------------------
@contextmanager
def connect(address: str, wait_for_workers: float = WAIT_FOR_WORKERS_S) -> Iterator[Client]:
    """A Dask client of the scheduler at `address` (`tcp://host:port`, or a scheduler file's path).

    Raises `ErascopeError` when the engine is not installed, nothing at `address` answers as a
    Dask scheduler within `CONNECT_TIMEOUT_S`, the scheduler has no worker within `wait_for_workers`
    seconds, or leaves a call unanswered for `_answer_within(wait_for_workers)` seconds.
    """
    if importlib.util.find_spec("distributed") is None:
        raise ErascopeError(f"--scheduler needs the Dask engine, which is not installed: {INSTALL_HINT}")
    from distributed import Client

    target = _checked(address, _scheduler_address(address))
    where = f"the Dask scheduler at {shown(address)}"
    try:
        kind = asyncio.run(asyncio.wait_for(_identify(target), CONNECT_TIMEOUT_S))
    except TimeoutError:
        raise ErascopeError(f"cannot reach {where}: nothing answered as one within {CONNECT_TIMEOUT_S:g} s") from None
    except (OSError, ValueError, TypeError) as exc:
        raise ErascopeError(f"cannot reach {where}: {shown(str(exc))}") from None
    if kind != "Scheduler":
        raise ErascopeError(
            f"cannot reach {where}: what answers there is {kind or 'not Dask'}, not a scheduler (give the address"
            " `dask scheduler` prints, or its --scheduler-file)"
        )
    try:
        client = Client(address=target, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError, TypeError, ImportError) as exc:
        raise ErascopeError(f"cannot reach {where}: {shown(str(exc))}") from None
    try:
        # not Dask's `wait_for_workers`: it asks the scheduler with no time limit, and looks at its own
        # only between answers
        deadline = time.monotonic() + wait_for_workers
        while not _nthreads(client, address, wait_for_workers, "while waiting for a worker"):
            if time.monotonic() >= deadline:
                raise ErascopeError(
                    f"{where} has no workers, and none joined within {wait_for_workers:g} s: start some"
                    f" (`dask worker {target}`), or wait longer with --wait-for-workers"
                )
            time.sleep(_WORKER_POLL_S)
        _check_workers(client, address, wait_for_workers)
        yield client
    finally:
        _close(client)


_WORKER_POLL_S: Final = 0.1
"""Seconds between two looks at a scheduler without workers, for one to join (as Dask's own wait)."""


def _answer_within(wait_for_workers: float) -> float:
    """Seconds the scheduler may leave a call unanswered before the run fails: `wait_for_workers`,
    at least `CONNECT_TIMEOUT_S`. A scheduler that stopped answering (a stopped process, a host cut
    off without a reset) keeps its connections open, and Dask's calls to it have no time limit."""
    return max(wait_for_workers, CONNECT_TIMEOUT_S)


def _silent(address: str, seconds: float, when: str = "mid-run") -> ErascopeError:
    return ErascopeError(
        f"the Dask scheduler at {shown(address)} has not answered for {seconds:g} s {when}; the run did not complete"
        " and gives no result (running it again is safe). Check the scheduler and its host"
    )


def _nthreads(client: Client, address: str, wait_for_workers: float, when: str = "mid-run") -> dict[str, int]:
    """The scheduler's workers and their threads; `ErascopeError` when it does not answer within
    `_answer_within(wait_for_workers)` seconds, or is gone."""
    silent = _answer_within(wait_for_workers)
    try:
        return client.nthreads(callback_timeout=silent)
    except TimeoutError:
        raise _silent(address, silent, when) from None
    except OSError:  # (after TimeoutError, one of them) a comm error: the scheduler is gone
        raise _lost(address, when) from None


def _close(client: Client) -> None:
    """Close `client` without Dask's log noise: after the scheduler is gone, closing cancels the
    client's reconnecting coroutine, which logs that cancellation with a traceback on stderr (the
    run's own error says what happened)."""
    logger = logging.getLogger("distributed.client")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        client.close()
    finally:
        logger.setLevel(level)


def shown(address: str) -> str:
    """`address` (or a message naming it) as messages show it: a password in it is not repeated."""
    return redact(address)


_SCHEMES: Final = ("tcp", "tls", "ws", "wss", "ucx")
"""Dask's protocols that reach a scheduler in another process (`inproc` is one process's own)."""


def _checked(address: str, target: str) -> str:
    """`target` (what `address` names, `_scheduler_address`), or `ErascopeError` for an address no
    scheduler can have: Dask's own errors for these were a bare `ValueError` text ("not enough
    values to unpack"), a 10 s wait for a port out of range, or the password repeated in clear."""
    named = f"--scheduler {shown(address)}"
    if target != address:
        named += f" (its scheduler file names {shown(target)})"
    if shown(target) != target:
        raise ErascopeError(
            f"{named}: a Dask address carries no user, password or query; a scheduler that needs credentials"
            " takes TLS certificates from the Dask configuration (tls://host:port)"
        )
    scheme, sep, rest = target.rpartition("://")
    if not sep:
        scheme, rest = "tcp", target  # Dask's default protocol
    if scheme not in _SCHEMES:
        raise ErascopeError(
            f"{named}: {scheme or 'no'} protocol; a scheduler other processes reach is at"
            f" {' or '.join(f'{p}://host:port' for p in _SCHEMES)}, or give its scheduler file"
        )
    if scheme == "ucx" and importlib.util.find_spec("distributed_ucxx") is None:
        # Dask left UCX to a package of its own; without it a connection fails with "Can't instantiate
        # abstract class UCXConnector"
        raise ErascopeError(
            f"{named}: Dask's ucx protocol needs distributed-ucxx (conda-forge; distributed-ucxx-cu12 or"
            " -cu13 on PyPI), which is not installed; or give the scheduler's tcp:// or tls:// address"
        )
    try:
        port = urlsplit(f"//{rest}").port
    except ValueError as exc:  # a port out of range, not digits, or a bad IPv6 host
        raise ErascopeError(f"{named}: {exc}; give host:port") from None
    if port is None or port == 0:
        raise ErascopeError(
            f"{named}: no port{'' if sep else ', and no scheduler file at that path'}; give host:port (the port"
            " `dask scheduler` prints) or its --scheduler-file"
        )
    return target


def _scheduler_address(address: str) -> str:
    """The address `address` names: itself, or the one in the scheduler file at that path."""
    if not Path(address).is_file():  # `dask scheduler --scheduler-file FILE` writes the address there
        return address
    try:
        found = orjson.loads(Path(address).read_bytes()).get("address")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        found = None
    if not isinstance(found, str):
        raise ErascopeError(
            f"--scheduler {shown(address)} is a file but no scheduler file (the JSON `dask scheduler --scheduler-file`"
            " writes, naming the scheduler's address)"
        )
    return found


async def _identify(address: str) -> str | None:
    """What the Dask server at `address` says it is (`Scheduler`, `Worker`, …); None for a reply that
    is no Dask identity. The caller bounds the time: the handshake after the TCP connect has no
    timeout of its own, and a port that accepts but never speaks (not Dask) would hang the client."""
    from distributed.comm import connect as open_comm
    from distributed.security import Security

    comm = await open_comm(address, timeout=CONNECT_TIMEOUT_S, **Security().get_connection_args("client"))
    try:
        await comm.write({"op": "identity", "reply": True})
        reply = await comm.read()
    finally:
        comm.abort()
    kind = reply.get("type") if isinstance(reply, dict) else None
    return kind if isinstance(kind, str) else None


_CODE_SUFFIXES: Final = (".py", ".j2")


@functools.cache
def code_identity() -> str:
    """This erascope, as far as its results go: its version and a digest of its modules and report
    templates (`addon`, `analyzer`), which tells apart two development trees of one version too,
    and the polars it runs on (any 2.x is allowed; each writes its version into every Parquet part,
    and analyzes with its own behaviour)."""
    import hashlib

    import addon
    import analyzer
    from addon.version import tool_version

    digest = hashlib.sha256()
    for package in (Path(addon.__file__).parent, Path(analyzer.__file__).parent):
        for path in sorted(p for p in package.rglob("*") if p.suffix in _CODE_SUFFIXES and p.is_file()):
            digest.update(f"{package.name}/{path.relative_to(package).as_posix()}\0".encode())
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return f"{tool_version()} (code {digest.hexdigest()[:16]}, polars {pl.__version__})"


_SAME_ERASCOPE: Final = (
    "install the client's erascope and polars on every worker (and restart them); the run did not start"
)


def _check_workers(client: Client, address: str, wait_for_workers: float) -> None:
    """Refuse workers whose erascope is not the client's: they would analyze their shards, or write
    their archive files, their own way, and the report would not be the local one."""
    mine = code_identity()
    silent = _answer_within(wait_for_workers)
    # any exception: what a worker without this erascope, or with an older one, raises unpickling
    # the check is anyone's guess
    try:
        theirs = client.run(code_identity, callback_timeout=silent)
    except TimeoutError:  # the bound's: the scheduler says a worker it cannot reach with an OSError
        raise _silent(address, silent, "while checking the workers") from None
    except Exception as exc:
        raise ErascopeError(
            f"the workers cannot run this erascope ({type(exc).__name__}: {exc}), they run another erascope or"
            f" none: {_SAME_ERASCOPE}"
        ) from None
    for worker, theirs_ in sorted(theirs.items()):
        if theirs_ != mine:
            raise ErascopeError(
                f"worker {worker} runs another erascope ({theirs_}) than this client ({mine}): {_SAME_ERASCOPE}"
            )


def _same_erascope(expected: str) -> None:
    """In a task: refuse to run on a worker that joined after `_check_workers` with another erascope."""
    if (mine := code_identity()) != expected:
        raise ErascopeError(
            f"worker {os.uname().nodename} runs another erascope ({mine}) than the client ({expected}): install"
            " the client's erascope and polars on every worker (and restart them)"
        )


def _gather(client: Client, address: str, futures: list[Any], what: list[str], wait_for_workers: float) -> list[Any]:
    """Every task's result, in order, or an `ErascopeError` naming the first task that failed for good,
    or saying that the scheduler had no worker for `wait_for_workers` seconds.

    An `ErascopeError` raised inside a task (bad input, --strict) comes back as it is. On Ctrl-C
    the tasks are given up like after any failure: the scheduler does not run what nobody waits for.
    """
    from concurrent.futures import CancelledError

    from distributed import KilledWorker

    try:
        _wait_while_workers(client, address, futures, wait_for_workers)
        # a task's own error first, from what the client holds (as Dask's gather raises it, asking the
        # scheduler nothing): a TimeoutError of the gather below is then the bound's, not a task's (a
        # read from object storage that timed out)
        for f in futures:
            if f.status in ("error", "cancelled"):
                f.result()
        # bounded: Dask's gather asks the scheduler for the results with no time limit
        silent = _answer_within(wait_for_workers)
        try:
            return client.sync(lambda: client.gather(futures, asynchronous=True), callback_timeout=silent)
        except TimeoutError:
            raise _silent(address, silent, "when asked for the results") from None
    except KilledWorker as exc:
        task = next((w for f, w in zip(futures, what, strict=True) if f.status == "error"), "a task")
        raise ErascopeError(
            f"{task}: the workers running it died too often ({exc}); the run did not complete and gives no"
            " result (running it again is safe). Check the workers' memory and logs"
        ) from None
    except CancelledError as exc:
        # the scheduler died or became unreachable: the client cancels every future it held
        # ("scheduler-connection-lost"); a future is cancelled for other reasons too (another client
        # cancelling these keys), and none of them leaves a result for the task
        reason = getattr(exc, "reason", "unknown")
        if reason == "scheduler-connection-lost":
            raise _lost(address) from None
        task = next((w for f, w in zip(futures, what, strict=True) if f.cancelled()), "a task")
        raise ErascopeError(
            f"{task}: the Dask scheduler at {shown(address)} cancelled it ({reason}); the run did not complete"
            " and gives no result (running it again is safe)"
        ) from None
    finally:
        # released, a task nobody else holds is forgotten by the scheduler, run or not (Ctrl-C too)
        for f in futures:
            f.release()


_WORKER_CHECK_S: Final = 1.0


def _wait_while_workers(client: Client, address: str, futures: list[Any], wait_for_workers: float) -> None:
    """Return once every future is done; `ErascopeError` when the scheduler has had no worker for
    `wait_for_workers` seconds before that (its tasks would wait for one forever).

    The wait is this thread's own (a callback per future sets an event) rather than the client's
    blocking `gather`: a Ctrl-C there left the client's coroutines waiting, each printing a traceback
    when the client closed.
    """
    if not futures:
        return
    left = len(futures)
    lock = threading.Lock()
    all_done = threading.Event()

    def done(_future: Any) -> None:
        nonlocal left
        with lock:
            left -= 1
            if left == 0:
                all_done.set()

    for f in futures:
        f.add_done_callback(done)
    without_since: float | None = None
    # bounded (`_nthreads`): the futures of a scheduler that stopped answering would never be done
    while not all_done.wait(_WORKER_CHECK_S):
        if _nthreads(client, address, wait_for_workers):
            without_since = None
            continue
        now = time.monotonic()
        without_since = now if without_since is None else without_since
        if now - without_since >= wait_for_workers:
            raise ErascopeError(
                f"the Dask scheduler lost its last worker mid-run, and none joined within {wait_for_workers:g} s;"
                " the run did not complete and gives no result (running it again is safe). Start workers, or"
                " wait longer with --wait-for-workers"
            )


def _lost(address: str, when: str = "mid-run") -> ErascopeError:
    return ErascopeError(
        f"lost the connection to the Dask scheduler at {shown(address)} {when}; the run did not complete and gives"
        " no result (running it again is safe). Check the scheduler's logs"
    )


# --- compact -------------------------------------------------------------------------------------
_SHARED: Final = "a filesystem the client and the workers share, under the same path, or at a URL they can all read"


def _compact_task(
    identity: str,
    path: str,
    out: str,
    fingerprint: dict[str, Any],
    old: Named | None = None,
    temp_dir: str | None = None,
) -> tuple[Converted, str | None]:
    """Run on a worker: compact one input file (a path or a URL) into the shared archive `out` (a
    directory or a URL): the worker reads the input and writes the archive's objects itself. `old`
    and `temp_dir` as for `compact_file` (the staging directory is the worker's); `identity`: the
    client's `code_identity`. With it, the digest of the entry written into a directory `out`
    (`_entry_digest`), for the client to find it in its own view of `out`."""
    _same_erascope(identity)
    try:
        seen = source_fingerprint(path)
    except OSError as exc:
        raise ErascopeError(f"{path}: not readable on worker {os.uname().nodename} ({exc.strerror or exc}); inputs"
                            f" must be on {_SHARED}") from None
    if seen != fingerprint:
        # either another file under the path, or this one changed since the client listed it: a
        # capture still being written grows, and what the worker would read is not what the client saw
        raise ErascopeError(
            f"{path} on worker {os.uname().nodename} is not the file the client listed (its size or version"
            f" differ): it changed since the client listed it (a capture still being written: compact again"
            f" once it is closed), or the worker sees another file there (inputs must be on {_SHARED})"
        )
    if is_url(out):
        if temp_dir is not None and not Path(temp_dir).is_dir():
            raise ErascopeError(f"--temp-dir {temp_dir} is not a directory on worker {os.uname().nodename}")
        return compact_file(path, out, old, temp_dir), None
    if not (Path(out) / SOURCES_DIR).is_dir():
        raise ErascopeError(f"--out {out} is not visible on worker {os.uname().nodename}: the archive must be on"
                            f" {_SHARED}")
    converted = compact_file(path, Path(out), old)
    return converted, _entry_digest(Path(out), path)


def _entry_digest(out: Path, path: str) -> str | None:
    """A digest of the entry for `path` in the archive directory `out` as this process sees it; None
    when there is none (or it cannot be read)."""
    import hashlib

    try:
        return hashlib.sha256(read_regular(out / SOURCES_DIR / f"{archive_name(path)}.json")).hexdigest()
    except OSError:
        return None


def _written_here(out: Path, todo: list[str], digests: list[str | None]) -> None:
    """`ErascopeError` unless the entry each worker wrote (`digests`, as the worker read it back) is the
    one in the archive the client sees: a worker with an archive of its own under the same path
    (its own disk) wrote there, and the client's archive lacks those inputs."""
    for path, digest in zip(todo, digests, strict=True):
        if _entry_digest(out, path) != digest:
            raise ErascopeError(
                f"--out {out}: the worker that compacted {redact(path)} wrote it into a directory of its own under that"
                f" path, not the archive the client sees: the archive must be on {_SHARED}"
                " (this archive may lack the inputs compacted elsewhere: compact them again)"
            )


def compact_on_cluster(
    address: str,
    paths: Iterable[str | Path],
    out: Path | str,
    *,
    force: bool = False,
    temp_dir: str | Path | None = None,
    wait_for_workers: float = WAIT_FOR_WORKERS_S,
) -> CompactResult:
    """`analyzer.compact.compact`, with the per-file step run as one task per file on the cluster.

    The client checks the layout and prepares the archive exactly as a local run does; the workers
    read the inputs and write the parts and entries, so the archive holds the same files.
    """
    with connect(address, wait_for_workers) as client:

        def run(todo: list[str], archive: Path | str, old: list[Named | None]) -> list[Converted]:
            # a file gone since it was listed is gone for the client too: named as a local run names it
            gone: dict[str, Converted] = {}
            prints = {}
            for p in todo:
                try:
                    prints[p] = source_fingerprint(p)
                except OSError as exc:
                    gone[p] = Converted(0, 0, None, error=f"cannot read {redact(p)}: {exc.strerror or exc}")
            sent = [(p, o) for p, o in zip(todo, old, strict=True) if p not in gone]
            if not sent:
                return [gone[p] for p in todo]
            token = _token()
            futures = client.map(
                _compact_task,
                [code_identity()] * len(sent),
                [p for p, _ in sent],
                [archive if isinstance(archive, str) else str(archive.absolute())] * len(sent),
                [prints[p] for p, _ in sent],
                [o for _, o in sent],
                [None if temp_dir is None else str(temp_dir)] * len(sent),
                pure=False,
                key=[f"erascope-compact-{token}-{i}" for i in range(len(sent))],
            )
            done = _gather(client, address, futures, [f"compacting {p}" for p, _ in sent], wait_for_workers)
            if not isinstance(archive, str):
                _written_here(archive, [p for p, _ in sent], [digest for _, digest in done])
            converted = {p: c for (p, _), (c, _) in zip(sent, done, strict=True)}
            return [gone[p] if p in gone else converted[p] for p in todo]

        return compact(paths, out, force=force, runner=run, temp_dir=temp_dir)


# --- analyze -------------------------------------------------------------------------------------
@dataclass
class ShardResult:
    """What one shard's analysis sends back: everything the report shows of its servers, and no rows."""

    shard: int
    servers_assigned: tuple[str, ...]
    verdicts: list[ServerVerdict]
    findings: list[Finding]
    clients: pl.DataFrame | None
    messages: int
    """Message rows of the shard (condensed ones included), as `Analysis.message_count`."""
    probes: pl.DataFrame
    """The shard's probes: with `marks`, a small row each of the columns the html page reads of them
    (`MARK_COLUMNS`); else what the other reports read, their outcome counts (`outcome`, `n`)."""
    inits: pl.DataFrame
    """The shard's initializes, as `probes`."""
    inputs_digest: str
    """The input accounting of the shard's run: every shard reads every archive entry, so all agree."""
    inputs: Inputs | None
    """The accounting itself, from shard 0 only (the others send the digest)."""
    marks: bool = False
    """`probes` and `inits` hold a row each (for the html page), not outcome counts."""


def _digest(inputs: Inputs) -> str:
    import hashlib

    return hashlib.sha256(orjson.dumps(dataclasses.asdict(inputs))).hexdigest()


MARK_COLUMNS: Final = {
    "server": pl.String(),
    "ts": pl.Float64(),
    "outcome": pl.String(),
    "peer": pl.String(),
    "client_name": pl.String(),
    "file": pl.String(),
    "line": pl.UInt32(),
}
"""What reports read of a probe or initialize: its outcome (counted), and the html page's mark of it."""


def _sent(frame: pl.DataFrame, marks: bool) -> pl.DataFrame:
    """What a shard sends back of its probes or initializes (`ShardResult.probes`): a row each only
    for the html page; a probe storm of millions is otherwise a few rows of counts. Plain strings:
    categoricals of two workers' processes need not concatenate."""
    if marks:
        return frame.select(pl.col(c).cast(t) for c, t in MARK_COLUMNS.items())
    return frame.group_by(pl.col("outcome").cast(pl.String)).agg(n=pl.len()).sort("outcome")


def _received(frames: Sequence[pl.DataFrame], marks: bool) -> pl.DataFrame:
    """The shards' probes or initializes (`frames`, rows with `marks`) as the merged `Analysis` holds them."""
    if marks:
        return pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=MARK_COLUMNS)
    counts = Counter[str]()
    for frame in frames:
        counts.update(dict(frame.select("outcome", "n").iter_rows()))
    return _outcome_rows(counts)


def _outcome_rows(counts: Counter[str]) -> pl.DataFrame:
    """A frame of one `outcome` row per probe (or initialize), from the outcome counts: what the
    text, JSON and markdown reports read of `Analysis.probes`/`inits` (their height and outcome
    counts). 4 bytes a probe."""
    keys = sorted(counts)
    return pl.DataFrame(
        {"outcome": pl.Series(keys, dtype=pl.Categorical()), "n": [counts[k] for k in keys]}
    ).select(pl.col("outcome").repeat_by("n").explode())


def _analyze_shard(
    identity: str,
    shard: int,
    archive: str,
    seen: str,
    servers: tuple[str, ...],
    options: AnalyzeOptions,
    marks: bool = False,
) -> ShardResult:
    """Run on a worker: the local pipeline on the archive, these server keys only (`identity`: the
    client's `code_identity`; `seen`: the `archive_identity` the client planned the shards from;
    `marks`: a row per probe and initialize, for the html page)."""
    _same_erascope(identity)
    if not is_archive(archive):
        raise ErascopeError(f"archive {archive} is not visible on worker {os.uname().nodename}: it must be on"
                            f" {_SHARED}")
    # another archive under the same path (a disk of the worker's own), or this one compacted again
    # since the client planned the shards: its servers are not those the shards were cut from, and
    # the merged report would silently lack some (or their traffic would differ)
    try:
        mine = archive_identity(archive, archive_parts(archive))
    except OSError as exc:
        raise ErascopeError(f"archive {archive} on worker {os.uname().nodename}: {exc}") from None
    if mine != seen:
        raise ErascopeError(
            f"archive {archive} on worker {os.uname().nodename} is not the archive the client sees (its entries or"
            f" parts differ): it must be on {_SHARED}, and not be compacted into during the run"
        )
    analysis = analyze([archive], dataclasses.replace(options, servers=servers))
    try:
        return ShardResult(
            shard=shard,
            servers_assigned=servers,
            verdicts=analysis.servers,
            findings=analysis.findings,
            clients=analysis.clients,
            messages=analysis.message_count,
            probes=_sent(analysis.probes, marks),
            inits=_sent(analysis.inits, marks),
            marks=marks,
            inputs_digest=_digest(analysis.inputs),
            inputs=analysis.inputs if shard == 0 else None,
        )
    finally:
        analysis.close()


def archive_parts(archive: Path | str) -> list[tuple[str, str, int]]:
    """The archive's Parquet parts: (path, its `server=` partition's value, bytes), listed once (local,
    or at a URL: one listing)."""
    if isinstance(archive, str) and is_url(archive):
        return [(p, p.rsplit("/", 2)[1].split("=", 1)[1], size) for p, size in part_sizes(archive).items()]
    # only what compact names a part, as at a URL: a compact killed mid-write leaves its temporary
    # file (`.<part>.<pid>.<thread>.tmp`) beside them, which no entry names and no local run reads
    return [
        (str(p), p.parent.name.split("=", 1)[1], p.stat().st_size)
        for p in Path(archive).glob("day=*/server=*/*.parquet")
        if p.is_file()
    ]


def archive_identity(archive: str, parts: list[tuple[str, str, int]]) -> str:
    """What tells two views of the archive apart: each entry's name and bytes (what a run reads of its
    inputs) and each Parquet part's name and size (`parts`, `archive_parts`), under the archive's path.
    Two copies of one archive agree, wherever they are; an archive compacted again in between does
    not. `ErascopeError` for an entry that cannot be read, as a local run says it."""
    import hashlib

    root = archive.rstrip("/")
    digest = hashlib.sha256()
    for p, content in sorted(entry_contents(archive).items()):
        digest.update(f"{p.removeprefix(root)}\0{len(content)}\0".encode())
        digest.update(content)
    for path, _, size in sorted(parts):
        digest.update(f"{path.removeprefix(root)}\0{size}\0".encode())
    return digest.hexdigest()


def archive_servers(parts: list[tuple[str, str, int]]) -> dict[str | None, int]:
    """The archive's server keys (None: rows without one) with the bytes of their Parquet parts
    (`archive_parts`), told from the `server=` partition names."""
    sizes: Counter[str | None] = Counter()
    for path, name, size in parts:
        key = None if name == NULL_SERVER else server_of_partition(name)
        if key is not None:
            sizes[key] += size
            continue
        # the part's rows hold the keys: one too long for its partition's name (one key, as compact
        # writes), or `__null__`'s, rows without a key beside those with an empty one or the key
        # `__null__` (a shard selects those two, no shard the rows without a key)
        keys = pl.scan_parquet(path, glob=False, hive_partitioning=False).select("server").unique().collect()
        for key in keys.get_column("server"):
            sizes[key] += size // keys.height
    return dict(sizes)


def linked_servers(parts: list[tuple[str, str, int]], keys: Collection[str]) -> SessionLinks:
    """Which of `keys` share a session id in the rows of `parts` (`archive_parts`): they go to one
    shard (the HTTP+SSE transport recorded without --server answers its `/messages/` POSTs on its
    `/sse` stream, two keys; analyzer/CLUSTER.md). Reads two columns of the parts; only small frames
    come back."""
    links = SessionLinks()
    if parts:
        pairs = (
            pl.scan_parquet(sorted(p for p, _, _ in parts), glob=False, hive_partitioning=False)
            .select("session_id", "server")
            .drop_nulls()
            .filter(pl.col("server").is_in(list(keys)))
            .unique()
            .collect()
        )
        links.add(pairs.iter_rows())
    return links


def shards_of(sizes: dict[str, int], count: int, links: SessionLinks | None = None) -> list[tuple[str, ...]]:
    """`count` shards (at most one per server) of about equal bytes: the largest servers first, each
    onto the lightest shard so far; keys `links` joins stay together. Deterministic; each shard's
    keys sorted."""
    units: dict[tuple[str, ...], int] = {}
    done: set[str] = set()
    for server in sorted(sizes):
        if server not in done:
            group = tuple(sorted(links.closure({server}) & sizes.keys())) if links is not None else (server,)
            done.update(group)
            units[group] = sum(sizes[k] for k in group)
    count = max(1, min(count, len(units)))
    loads = [0] * count
    members: list[list[str]] = [[] for _ in range(count)]
    for group, size in sorted(units.items(), key=lambda kv: (-kv[1], kv[0])):
        lightest = min(range(count), key=lambda i: (loads[i], i))
        loads[lightest] += size
        members[lightest].extend(group)
    return [tuple(sorted(m)) for m in members if m]


def merge(results: Sequence[ShardResult], shards: Sequence[tuple[str, ...]]) -> Analysis:
    """The `Analysis` of the whole archive from its shards' results (analyzer/CLUSTER.md, "The merge").

    Checks that every shard answered exactly once and that each shard spoke only of its own servers:
    a missing or foreign part raises `ErascopeError` instead of giving a partial report.
    """
    by_shard = {r.shard: r for r in results}
    if len(by_shard) != len(results) or sorted(by_shard) != list(range(len(shards))):
        raise ErascopeError(f"cluster run incomplete: results for shards {sorted(by_shard)} of {len(shards)}")
    ordered = [by_shard[i] for i in range(len(shards))]
    for r, assigned in zip(ordered, shards, strict=True):
        own = set(assigned)
        stray = {v.server for v in r.verdicts} - own | {f.server for f in r.findings if f.server is not None} - own
        if r.servers_assigned != assigned or stray:
            raise ErascopeError(f"shard {r.shard} answered for other servers than its own: {sorted(stray)[:3]}")
    digests = {r.inputs_digest for r in ordered}
    inputs = ordered[0].inputs
    if len(digests) != 1 or inputs is None:
        raise ErascopeError("the shards read different inputs (was the archive changed during the run?)")
    verdicts = sorted((v for r in ordered for v in r.verdicts), key=lambda v: v.server)
    # stable: findings that tie on the rulebook's order are of one server, hence of one shard, in its order
    findings = [f for r in ordered for f in r.findings]
    from analyzer.rules import sort_findings

    findings = sort_findings(findings)
    frames = [r.clients for r in ordered if r.clients is not None]
    clients = pl.concat(frames, how="vertical").sort("server", "client") if frames else None
    # No message rows come back: the report reads of them only their count, which adds up (via
    # `Traffic.rows`); of probes and inits it reads the columns they came back with
    marks = all(r.marks for r in ordered)
    return Analysis(
        inputs=inputs,
        messages=pl.DataFrame(schema=MESSAGES_SCHEMA),
        probes=_received([r.probes for r in ordered], marks),
        inits=_received([r.inits for r in ordered], marks),
        servers=verdicts,
        findings=findings,
        clients=clients,
        traffic=Traffic(rows=sum(r.messages for r in ordered)),
    )


def analyze_on_cluster(
    address: str,
    paths: Sequence[str | Path],
    options: AnalyzeOptions,
    *,
    shards: int | None = None,
    marks: bool = False,
    wait_for_workers: float = WAIT_FOR_WORKERS_S,
) -> Analysis:
    """`analyzer.pipeline.analyze` of one archive, as a map over shards of its server keys on the
    cluster and a merge on the client; the same `Analysis` as a local run, as far as reports read it
    (the html page too with `marks`: a row per probe and initialize travels back for it).

    `shards` defaults to the cluster's worker threads. `options.servers`, when given, narrows the
    keys analyzed; `since`/`until`/the rule options go to every shard as they are.
    """
    if len(paths) != 1 or not is_archive(str(paths[0])):
        raise ErascopeError(
            "--scheduler analyzes one archive: convert the captures first with"
            " `erascope compact PATH... --out ARCHIVE --scheduler ADDRESS`, then analyze ARCHIVE"
        )
    archive = str(paths[0]) if is_url(str(paths[0])) else str(Path(paths[0]).absolute())
    parts = archive_parts(archive)
    # the parts the plan reads: one the client cannot read is said as a local run says it
    try:
        sizes = archive_servers(parts)
        if None in sizes and options.servers is None:
            # a shard names its servers, and no selection names "no server": such rows would be in no
            # shard (a selection of servers, local or not, never keeps them)
            raise ErascopeError(
                f"{paths[0]} holds rows without a server key (in partition server={NULL_SERVER}): they belong"
                " to no server shard; analyze this archive without --scheduler"
            )
        keys = {k: v for k, v in sizes.items() if k is not None and (options.servers is None or k in options.servers)}
        links = linked_servers(parts, keys) if keys else None
        seen = archive_identity(archive, parts)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise ErascopeError(f"archive {paths[0]}: a part cannot be read ({exc}); {COMPACT_AGAIN}") from None
    remote = dataclasses.replace(options, progress=None, spill_dir=None)
    with connect(address, wait_for_workers) as client:
        count = shards or sum(_nthreads(client, address, wait_for_workers).values()) or 1
        plan = shards_of(keys, count, links) if keys else [tuple(options.servers or ())]
        token = _token()
        futures = client.map(
            _analyze_shard,
            [code_identity()] * len(plan),
            range(len(plan)),
            [archive] * len(plan),
            [seen] * len(plan),
            plan,
            [remote] * len(plan),
            [marks] * len(plan),
            pure=False,
            key=[f"erascope-shard-{token}-{i}" for i in range(len(plan))],
        )
        results = _gather(
            client, address, futures, [f"shard {i} ({len(p)} server(s))" for i, p in enumerate(plan)], wait_for_workers
        )
    analysis = merge(results, plan)
    analysis.selection = None if options.selection.everything else options.selection
    return analysis


def _token() -> str:
    import uuid

    return uuid.uuid4().hex[:12]
