"""Parquet archives of captures: `erascope compact PATH... --out DIR`.

Compaction runs the loader's per-file step (`analyzer.load.extract_file`) once and keeps its result:
the messages rows (method, id, kind, error code, versions, … — `MESSAGES_SCHEMA`) plus the exact
payload `raw`, written as Parquet partitioned by UTC day and server:

    DIR/day=2026-11-28/server=https%3A%2F%2Fapi.example.test%2Fmcp/<capture file name>.parquet
    DIR/_sources/<capture file name>.json      one per input file: its accounting and its parts
    DIR/_condensed/<capture file name>.<frame>.parquet   its rows paired and condensed (see below)

The `_sources` entry holds what the report needs besides the rows (records per type, malformed and
torn lines, lost records, why a file was skipped), so `erascope analyze DIR` gives the same report
as `erascope analyze` on the JSONL files (evidence keeps pointing at the original file:line). It is
written last, after the Parquet parts, so an interrupted run leaves no half-registered file.

Idempotent: outputs are named after the input file, so re-running replaces them instead of adding
duplicates, and an input whose size and modification time did not change is skipped. Partitions
use percent-encoded server keys (hive style, lossless); readers take the true value from the
`server` column inside the files, so the directory names are for pruning and for humans. Each
entry records the columns it was written with: an archive from an erascope that extracted other
columns is refused when read (with the fix: compact again), and the next `compact` converts again.

The archive never shares space with its input: an output directory inside an input directory, an
input inside the output directory, or an output directory that holds captures is refused.

Each file's rows are also kept as an analysis holds them once it has read them: paired and
condensed, with what condensing added up (`analyzer.archive`, "_condensed"). An analysis of every
row reads these instead of the parts; they are written with the file's parts, before its entry, and
written again by the next `compact` when this erascope condenses differently (`analyzer.archive.current_whole`).

Inputs may be objects at URLs (`s3://bucket/captures/`, read as `analyzer.load` reads them), and the
archive may be written to a URL (`--out s3://bucket/archive`, `_compact_to_url`): each file's objects
are written to a local staging directory as above, then uploaded in the same order, parts and
condensed frames first and the entry last, each upload appearing whole or not at all; the parts
its old entry named and the new one does not are deleted after the entry. Unchanged inputs are told
by the object's size and entity tag. Who may read or replace the objects is the bucket's policy.

It holds full payloads, so it gets the captures' permissions: files 0600, directories 0700 (the
`--out` directory and every parent erascope creates, and the archive's own directories on every
run). An existing `--out` that other users can write to (group or world writable, like /tmp) is
refused rather than tightened: its mode is the owner's decision, and another user could replace
the archive's files in it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import orjson
import polars as pl

from addon import format as fmt
from addon.errors import ErascopeError
from analyzer import storage
from analyzer.archive import (
    ARCHIVE_FORMAT,
    ARCHIVE_SCHEMA,
    CONDENSED_DIR,
    CONDENSED_SCHEMAS,
    NULL_SERVER,
    PARQUET_SUFFIX,
    SOURCES_DIR,
    EntryPath,
    condensed_facts,
    condensed_stamp,
    current_whole,
    extract_archived,
    is_archive,
    is_source_entry,
    kept_parts,
    read_entry,
    source_entries,
)
from analyzer.load import LoadOptions, display_name, extract_file, find_inputs
from analyzer.messages import MEMBER_SLOTS, as_strings
from analyzer.storage import is_url, join, redact

__all__ = [  # the archive's reading side lives in `analyzer.archive`; these names stay importable here
    "ARCHIVE_FORMAT",
    "ARCHIVE_SCHEMA",
    "SOURCES_DIR",
    "CompactResult",
    "compact",
    "compact_file",
    "extract_archived",
    "is_archive",
    "is_source_entry",
    "kept_parts",
    "source_entries",
]

@dataclass
class CompactResult:
    """What a compaction run did, per input file."""

    archive: Path | str
    written: list[str] = field(default_factory=list)
    """Input files (as given) converted in this run."""
    unchanged: list[str] = field(default_factory=list)
    """Input files already in the archive with the same size and modification time."""
    parts: int = 0
    """Parquet files written in this run."""
    rows: int = 0
    """Message rows written in this run."""


# --- writing -------------------------------------------------------------------------------------
def _partition_dir(day: str, server: str | None) -> str:
    return f"day={day}/server={quote(server, safe='') if server else NULL_SERVER}"


def _check_layout(paths: list[str], inputs: list[str], out: Path) -> None:
    """Refuse layouts where writing the archive could touch, or mix with, its input (inputs at URLs
    cannot: the archive is local)."""
    paths, inputs = [p for p in paths if not is_url(p)], [f for f in inputs if not is_url(f)]
    out_r = out.resolve()
    if out_r.exists() and not out_r.is_dir():
        raise ErascopeError(f"--out {out} exists and is not a directory")
    for given in paths:
        g = Path(given).resolve()
        if g.is_dir() and (out_r == g or g in out_r.parents):
            raise ErascopeError(
                f"refusing to write the archive into the input directory {given}: choose --out outside it"
            )
    for f in inputs:
        fr = Path(f).resolve()
        if out_r == fr or out_r in fr.parents:
            raise ErascopeError(f"refusing to compact {f}: it is inside the output directory {out}")
    if out_r.is_dir() and any(out_r.rglob("*" + fmt.CAPTURE_SUFFIX)):
        raise ErascopeError(f"--out {out} holds capture files; an archive needs a directory of its own")


def _check_url_layout(paths: list[str], inputs: list[str], out: str) -> None:
    """`_check_layout` of an archive at a URL: prefixes, not directories, are compared."""
    top = out.rstrip("/")
    if storage.is_file(top):
        raise ErascopeError(f"--out {redact(out)} is an object, not a prefix an archive can be written under")
    for given in (p.rstrip("/") for p in paths if is_url(p)):
        if top == given or top.startswith(given + "/"):
            raise ErascopeError(
                f"refusing to write the archive under the input {redact(given)}: choose --out outside it"
            )
    for f in inputs:
        if f.startswith(top + "/"):
            raise ErascopeError(f"refusing to compact {redact(f)}: it is under the output {redact(out)}")
    if storage.is_dir(top) and storage.captures_under(top, (fmt.CAPTURE_SUFFIX,)):
        raise ErascopeError(f"--out {redact(out)} holds capture files; an archive needs a prefix of its own")


ROW_GROUP_ROWS: Final = 25_000
"""Rows per Parquet row group (`analyzer.archive` reads windows of `CHUNK_ROWS`, four times this)."""
FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700


def _private_dir(path: Path) -> None:
    """Create `path` and its missing parents 0700 (mkdir's `mode` skips parents and obeys the umask)."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another worker made it meanwhile
            d.mkdir(mode=DIR_MODE)
        os.chmod(d, DIR_MODE)


def _check_out_mode(out: Path) -> None:
    """Refuse an existing `--out` that users other than its owner can write to."""
    try:
        mode = out.stat().st_mode
    except FileNotFoundError:
        return
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ErascopeError(
            f"--out {out} is writable by other users (mode {stat.S_IMODE(mode):04o}): they could replace the"
            f" archive's files; run `chmod go-w {out}` or choose another directory (erascope does not change"
            " the mode of a directory it did not create)"
        )


def source_fingerprint(path: str) -> dict[str, Any]:
    """What tells that an input changed since it was compacted: a local file's size and modification
    time, an object's size and version (`analyzer.storage.fingerprint`). Raises `OSError`."""
    if is_url(path):
        return storage.fingerprint(path)
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _atomic_write(path: Path, write: Any) -> None:
    _private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        # created 0600 before anything is written into it; the writer truncates, keeping the mode
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE))
        os.chmod(tmp, FILE_MODE)
        write(tmp)
        os.chmod(tmp, FILE_MODE)  # in case the writer replaced the file instead
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_parts(frame: pl.DataFrame, out: Path, name: str) -> list[str]:
    """Write a file's rows (with their payloads) as Parquet parts by UTC day and server; their paths."""
    parts: list[str] = []
    if not frame.height:
        return parts
    day = (
        (pl.col("ts") * 1e6)
        .cast(pl.Int64, strict=False)
        .cast(pl.Datetime("us", "UTC"))
        .dt.strftime("%Y-%m-%d")
        .fill_null("unknown")
    )
    groups = frame.with_columns(_day=day).partition_by(["_day", "server"], as_dict=True, maintain_order=True)
    for (day_value, server), chunk in groups.items():
        rel = f"{_partition_dir(str(day_value), server)}/{name}{PARQUET_SUFFIX}"
        rows = as_strings(chunk.select(list(ARCHIVE_SCHEMA)))  # the archive keeps plain strings
        # row groups of a fraction of the reader's window: a window over a range of a big file's
        # lines skips the others by their `line` statistics instead of decoding them
        _atomic_write(
            out / rel,
            lambda tmp, rows=rows: rows.write_parquet(tmp, compression="zstd", row_group_size=ROW_GROUP_ROWS),
        )
        parts.append(rel)
    return parts


def compact_file(path: str, out: Path | str) -> tuple[int, int]:
    """Compact one input file into the archive at `out` (a directory, or a URL: `_compact_to_url`);
    returns (Parquet parts, rows) written."""
    if isinstance(out, str) and is_url(out):
        return _compact_to_url(path, out)
    out = Path(out)
    name = display_name(Path(path).name)  # archive files are named in text polars can write
    entry_path = out / SOURCES_DIR / f"{name}.json"
    old_parts: list[str] = read_entry(entry_path)["parts"] if entry_path.is_file() else []
    fingerprint = source_fingerprint(path)
    facts = extract_file(path, LoadOptions(keep_raw=True))
    parts = _write_parts(facts.messages, out, name)
    height = facts.messages.height
    entry: dict[str, Any] = {
        "format": ARCHIVE_FORMAT,
        "file": display_name(facts.file),
        "capture": display_name(facts.capture),
        "transport": facts.transport,
        "skipped": facts.skipped,
        "records": facts.records,
        "counts": dict(sorted(facts.counts.items())),
        "malformed": [[b.line, b.reason] for b in facts.malformed],
        "torn": [facts.torn.line, facts.torn.reason] if facts.torn else None,
        "lost": facts.lost,
        "unit": facts.unit,
        "source": fingerprint,
        "columns": list(ARCHIVE_SCHEMA),
        "seq_slots": MEMBER_SLOTS,
        "parts": sorted(parts),
    }
    del facts  # its rows and payloads are written: they go before the parts are read back
    entry["condensed"] = _write_condensed(entry, str(entry_path), out, name)
    _atomic_write(entry_path, lambda tmp: tmp.write_bytes(orjson.dumps(entry, option=orjson.OPT_INDENT_2)))
    for stale in set(old_parts) - set(parts):
        (out / stale).unlink(missing_ok=True)
    return len(parts), height


def _compact_to_url(path: str, out: str) -> tuple[int, int]:
    """`compact_file` into the archive at the URL `out`: written whole to a local staging directory,
    then uploaded in the local writer's order (see the module docstring). An object store has no
    rename, but an upload is atomic: the entry, uploaded last, never names an object that is not
    there, and a new file's run cut short leaves objects no entry names. As in a local archive, a
    file converted again replaces its parts under the same names before its new entry replaces the
    old one."""
    name = display_name(Path(path).name)
    entry_url = join(out, SOURCES_DIR, f"{name}.json")
    old_parts: list[str] = read_entry(entry_url)["parts"] if storage.is_file(entry_url) else []
    with tempfile.TemporaryDirectory(prefix="erascope-compact-") as staging:
        written = compact_file(path, Path(staging))
        entry_path = Path(staging) / SOURCES_DIR / f"{name}.json"
        entry = read_entry(entry_path)
        data = [*entry["parts"], *(rel for rel, _ in entry["condensed"]["frames"].values())]
        try:
            storage.put_files((str(Path(staging) / rel), join(out, rel)) for rel in data)
            storage.put_files([(str(entry_path), entry_url)])
            storage.remove(join(out, rel) for rel in sorted(set(old_parts) - set(entry["parts"])))
        except OSError as exc:
            raise ErascopeError(f"cannot write the archive {redact(out)}: {exc}") from None
    return written


_AGGREGATES: Final = {"conns": ["server", "conn"], "sessions": ["server", "conn", "session_id"], "servers": ["server"]}
"""The condensed frames that are groups, by their keys."""


def _write_condensed(entry: dict[str, Any], entry_path: str, out: Path, name: str) -> dict[str, Any]:
    """Write the file's rows as an analysis reads them, paired and condensed (from the parts just
    written, as reading the archive would), and return the entry's `condensed` stamp naming them."""
    facts = condensed_facts(entry, entry_path, str(out))
    traffic = facts.traffic
    frames = {
        "messages": facts.messages,
        "requests": traffic.requests,
        "answers": traffic.answers,
        "conns": traffic.conns,
        "sessions": traffic.sessions,
        "servers": traffic.servers,
    }
    written: dict[str, list[Any]] = {}
    for kind, frame in frames.items():
        schema = CONDENSED_SCHEMAS[kind]
        held = pl.DataFrame(schema=schema) if frame is None else frame.lazy().collect()
        held = held.select(list(schema))
        if kind in _AGGREGATES:  # groups and sets gathered in no set order: the same input writes the same bytes
            keys = _AGGREGATES[kind]
            held = held.sort(pl.col(keys).cast(pl.String), nulls_last=True)
        if kind == "servers":
            held = held.with_columns(
                pl.col("transports", "peers").list.eval(pl.element().cast(pl.String).sort().cast(pl.Categorical()))
            )
        rel = f"{CONDENSED_DIR}/{name}.{kind}{PARQUET_SUFFIX}"
        _atomic_write(out / rel, lambda tmp, held=held: held.write_parquet(tmp, compression="zstd"))
        written[kind] = [rel, held.height]
    return {**condensed_stamp(), "rows": traffic.rows, "frames": written}


def _unchanged(
    path: str, out: Path | str, entry_path: Path | EntryPath | None = None, listing: set[str] | None = None
) -> bool:
    """Whether the archive at `out` holds `path` as this erascope writes it, from an input that did
    not change since. At a URL, `entry_path` holds the entry read already and `listing` the archive's
    objects (`_unchanged_at_url`)."""
    if entry_path is None:
        entry_path = Path(out) / SOURCES_DIR / f"{display_name(Path(path).name)}.json"
        if not entry_path.is_file():
            return False
    entry = read_entry(entry_path)
    return (
        entry.get("file") == display_name(path)
        and entry.get("source") == source_fingerprint(path)
        # an erascope that extracts more or condenses differently converts again, as does a malformed
        # or incomplete entry
        and current_whole(entry, str(entry_path), str(out), listing)
    )


def _unchanged_at_url(inputs: list[str], out: str) -> set[str]:
    """The inputs `_unchanged` in the archive at the URL `out`: the archive is listed once and the
    entries there read together (a request each, concurrently), not an input at a time."""
    listing = storage.files_under(out) if storage.is_dir(out) else set()
    entries = {p: join(out, SOURCES_DIR, f"{display_name(Path(p).name)}.json") for p in inputs}
    contents = storage.read_many(sorted(u for u in entries.values() if u in listing))
    unchanged = set()
    for p, url in entries.items():
        content = contents.get(url)
        if isinstance(content, bytes) and _unchanged(p, out, EntryPath(url, content), listing):
            unchanged.add(p)
    return unchanged


def compact(
    paths: Iterable[str | Path],
    out: Path | str,
    *,
    jobs: int | None = None,
    force: bool = False,
    runner: Callable[[list[str], Path | str], list[tuple[int, int]]] | None = None,
) -> CompactResult:
    """Convert the capture files named by `paths` (files, directories, globs) into an archive at `out`.

    `jobs` files are converted at a time, in threads (default: one per core). `runner`, when given,
    runs `compact_file` on each of the files to convert elsewhere (a cluster: `analyzer.cluster`)
    and returns their results in order.
    `force` re-converts inputs that look unchanged. Raises `ErascopeError` for bad layouts (see the
    module docstring), archives given as input, and the loader's own input errors.
    """
    given = [str(p) for p in paths]
    out = str(out) if is_url(str(out)) else Path(out)
    if isinstance(out, str):
        storage.check_url(out)
    for g in given:
        if (is_url(g) and is_archive(g)) or (not is_url(g) and Path(g).is_dir() and is_archive(Path(g))):
            raise ErascopeError(f"{redact(g)} is already an archive; analyze it directly")
    inputs = [p for p in find_inputs(given) if not is_source_entry(p)]
    if not inputs:
        raise ErascopeError("no capture files to compact")
    names: dict[str, str] = {}
    for p in inputs:
        other = names.setdefault(Path(p).name, p)
        if other != p:
            raise ErascopeError(f"{other} and {p} share a file name; compact them into separate archives")
    if isinstance(out, str):
        _check_url_layout(given, inputs, out)
        unchanged = set() if force else _unchanged_at_url(inputs, out)
        todo = [p for p in inputs if p not in unchanged]
    else:
        _check_layout(given, inputs, out)
        _check_out_mode(out)
        _private_dir(out / SOURCES_DIR)
        for p in out.rglob("*"):  # what an older, looser erascope wrote, too
            if not p.is_symlink():
                os.chmod(p, DIR_MODE if p.is_dir() else FILE_MODE)
        todo = [p for p in inputs if force or not _unchanged(p, out)]
    result = CompactResult(archive=out)
    result.unchanged = [p for p in inputs if p not in set(todo)]
    workers = min(jobs or os.cpu_count() or 1, len(todo))
    if runner is not None:
        done = runner(todo, out) if todo else []
    elif workers <= 1:
        done = [compact_file(p, out) for p in todo]
    else:
        # threads, as in `analyzer.load.extract_files`: polars releases the GIL, nothing is pickled
        with ThreadPoolExecutor(max_workers=workers) as pool:
            done = list(pool.map(compact_file, todo, [out] * len(todo)))
    for p, (parts, rows) in zip(todo, done, strict=True):
        result.written.append(p)
        result.parts += parts
        result.rows += rows
    return result
