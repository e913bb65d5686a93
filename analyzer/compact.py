"""Parquet archives of captures: `erascope compact PATH... --out DIR`.

Compaction runs the loader's per-file step (`analyzer.load.extract_file`) once and keeps its result:
the messages rows (method, id, kind, error code, versions, … — `MESSAGES_SCHEMA`) plus the exact
payload `raw`, written as Parquet partitioned by UTC day and server:

    DIR/day=2026-11-28/server=https%3A%2F%2Fapi.example.test%2Fmcp/<capture file name>.parquet
    DIR/_sources/<capture file name>.json      one per input file: its accounting and its parts
    DIR/_condensed/<capture file name>.<frame>.parquet   its rows paired and condensed (see below)

The `_sources` entry holds what the report needs besides the rows (records per type, malformed and
torn lines, lost records, why a file was skipped, the capture part's identity, by which a copy is
read once: `analyzer.load._identity`; for a file of joined captures, each part's lines, identity
and records, `captures`: `analyzer.load.capture_parts`; the captures joined in it that were not read,
`refused`: `analyzer.facts.Refused`), so `erascope analyze DIR` gives the same report
as `erascope analyze` on the JSONL files (evidence keeps pointing at the original file:line). It is
written last, after the Parquet parts, so an interrupted run leaves no half-registered file.

Idempotent: outputs are named after the input file, so re-running replaces them instead of adding
duplicates, and an input whose size and modification time did not change is skipped. The entry
records the SHA-256 of every file it names (`digests`), so an input converted again never
overwrites a file of its old entry with other bytes: such a file is written under its name with
its content's digest added (`…/<name>.<digest>.parquet`; the next conversion may go back to the
plain name), the new entry replaces the old one, and then the files only the old entry named are
deleted. A run cut short in between leaves the old entry reading exactly what it was written
with. Bytes equal to the old file's keep its name: converting an unchanged input again (`--force`)
writes the same archive.

A local archive is written by one run at a time: another `compact` into it meanwhile is refused
(`_held`; an archive at a URL has no lock, and its runs must not overlap).

Only the same capture replaces an entry (`_same_capture`: the run its header names, which a renamed
capture does not share); another one under its name is refused. A file that is not a capture (not
an erascope capture, not a regular file) gets an entry saying why, as the report on the JSONL says
it, and is `skipped`, not compacted: inputs none of which is a capture are an error. A file whose
header names an erascope format major this erascope does not know, or that cannot be read (gone
since it was listed, unreadable, a compressed stream corrupt before its header ends, changed while
read: `analyzer.facts.InputError`), gets no entry: it is among the run's `errors`, named as `analyze`
names it, beside the captures joined in other files that are not archived, and the other inputs are
archived; the next run tries it again.

Partitions use percent-encoded server keys (hive style, lossless); readers take the true value
from the `server` column inside the files, so the directory names are for pruning and for humans. Each
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
are written to a local staging directory as above (under `temp_dir`, by default the system's
temporary directory; removed afterwards, also when the conversion fails), then uploaded in the
same order, parts and condensed frames first and the entry last, each upload appearing whole or
not at all; the objects its old entry named and the new one does not are deleted after the entry.
The archive's entries are read once, together, before any conversion: they tell which inputs are
unchanged (by the object's size and entity tag) and which files each old entry names, which the
conversion (here or on a cluster's worker) is handed instead of asking the store again. Who may
read or replace the objects is the bucket's policy.

It holds full payloads, so it gets the captures' permissions: files 0600, directories 0700 (the
`--out` directory and every parent erascope creates, and the archive's own directories on every
run). An existing `--out` that other users can write to (group or world writable, like /tmp) is
refused rather than tightened: its mode is the owner's decision, and another user could replace
the archive's files in it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple

import orjson
import polars as pl

from addon import format as fmt
from addon.errors import EMPTY_PATH, ErascopeError
from analyzer import storage
from analyzer.archive import (
    ARCHIVE_FORMAT,
    ARCHIVE_SCHEMA,
    CONDENSED_DIR,
    CONDENSED_SCHEMAS,
    PARQUET_SUFFIX,
    PART_PREFIX,
    SOURCES_DIR,
    EntryPath,
    condensed_facts,
    condensed_stamp,
    current_whole,
    entry_identity,
    entry_refused,
    extract_archived,
    is_archive,
    is_source_entry,
    kept_parts,
    own_file,
    read_entry,
    server_partition,
    source_entries,
)
from analyzer.facts import InputError, Refused
from analyzer.load import (
    LoadOptions,
    capture_parts,
    display_name,
    extract_file,
    find_inputs,
    listed,
    name_key,
    not_regular,
    part_identity,
    read_header,
    run_key,
)
from analyzer.messages import EXTRACTION_VERSION, MEMBER_SLOTS, as_strings
from analyzer.output import check_searchable
from analyzer.sources import COMPRESSED_SUFFIXES, strip_compression
from analyzer.storage import is_url, join, redact

__all__ = [  # the archive's reading side lives in `analyzer.archive`; these names stay importable here
    "ARCHIVE_FORMAT",
    "ARCHIVE_SCHEMA",
    "SOURCES_DIR",
    "CompactResult",
    "Converted",
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
    """Input files (as given) converted in this run: captures, not the `skipped`."""
    unchanged: list[str] = field(default_factory=list)
    """Input captures already in the archive with the same size and modification time."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """Input files that are not read as captures (not an erascope capture, not a regular file), each
    with why, as `analyze` notes them. Their entries record it, so a report on the archive names them
    too; they are not among the files `written` or `unchanged`."""
    errors: list[tuple[str, str]] = field(default_factory=list)
    """Input files whose header names a format major this erascope does not know, and captures joined
    in an input file whose header names one, each with what `analyze` names it by, in input order (a
    file's captures by line). Neither is archived, and the other inputs are. Such a file gets no entry
    and is not among the `written` or `unchanged`; a file of such captures is, and its other captures
    are archived (its entry names them, so a report on the archive does too). A joined capture whose
    header names no erascope format is among the `skipped` so, its file among the `written` or
    `unchanged`."""
    parts: int = 0
    """Parquet files written in this run."""
    rows: int = 0
    """Message rows written in this run."""


class Converted(NamedTuple):
    """What converting one input file wrote."""

    parts: int
    """Parquet parts."""
    rows: int
    """Message rows."""
    skipped: str | None
    """Why the file was not read as a capture (its entry records only that); None for a capture."""
    runs: frozenset[bytes] = frozenset()
    """The recording run and part its header names (`analyzer.load.run_key`); empty for a header
    written by hand, which only its name identifies."""
    refused: tuple[Refused, ...] = ()
    """The captures joined in it that were not read (`analyzer.facts.FileFacts.refused`)."""
    error: str | None = None
    """Why none of it was read, as `analyze` names it (`analyzer.facts.InputError`): it cannot be read
    (gone, unreadable, a compressed stream corrupt before its header ends, changed while read) or its
    header names a format major this erascope does not know. Nothing was written for it."""


# --- writing -------------------------------------------------------------------------------------
_LONGEST_NAME: Final = 120
"""Bytes of an input's file name its archive files' names keep whole: they add up to about 110
bytes to it (a digest, a suffix, a temporary file's), and a file name may have at most 255."""


def archive_name(path: str) -> str:
    """What an input's archive files (parts, condensed frames, entry) are named after: its file name
    in text polars can write, or, when that is too long to add to, the name's first 80 bytes and a
    digest of all of it."""
    name = display_name(Path(path).name)
    encoded = name.encode()
    if len(encoded) <= _LONGEST_NAME:
        return name
    return f"{encoded[:80].decode(errors='ignore')}@{hashlib.sha256(encoded).hexdigest()[:32]}"


def _check_layout(paths: list[str], inputs: list[str], out: Path) -> None:
    """Refuse layouts where writing the archive could touch, or mix with, its input (inputs at URLs
    cannot: the archive is local)."""
    paths, inputs = [p for p in paths if not is_url(p)], [f for f in inputs if not is_url(f)]
    out_r = out.resolve()
    check_searchable(out_r, f"the archive {out}")
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
        try:
            with contextlib.suppress(FileExistsError):  # another worker made it meanwhile
                d.mkdir(mode=DIR_MODE)
            os.chmod(d, DIR_MODE)
        except OSError as exc:
            raise ErascopeError(f"cannot create the archive directory {d}: {exc.strerror or exc}") from None


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


def _atomic_write(path: Path, write: Any, renamed: Callable[[Path], Path] | None = None) -> Path:
    """Write `path` whole or not at all; `renamed`, given the file written, may name it otherwise. The path written."""
    _private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        # created 0600 before anything is written into it; the writer truncates, keeping the mode
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE))
            os.chmod(tmp, FILE_MODE)
            write(tmp)
            os.chmod(tmp, FILE_MODE)  # in case the writer replaced the file instead
            if renamed is not None:
                path = renamed(tmp)
            # inside the handler too: what holds the name may be no file (a directory put there)
            os.replace(tmp, path)
        except (OSError, pl.exceptions.ComputeError) as exc:
            # a full disk reaches polars' Parquet writer as a ComputeError naming the OS error
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ErascopeError(f"cannot write {path}: {why}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


DIGEST_CHARS: Final = 16
"""Hex digits of the content digest added to the name of a file written where the old entry names one."""

Named = dict[str, str | None]
"""The files an archive entry names (relative) with their SHA-256 (None: not recorded)."""


def _write_new(out: Path, rel: str, write: Any, old: Named, digests: dict[str, str]) -> str:
    """`_atomic_write` of `out/rel`, recording its SHA-256 in `digests`. When the input's old entry
    names `rel` (`old`) with other bytes, or without saying which, the file is written under that name
    with its digest added before the suffix: the old entry's file stays as it was until the new
    entry replaces the old one (see the module docstring). Its name, relative."""
    stem = rel.removesuffix(PARQUET_SUFFIX)

    def digested(tmp: Path) -> Path:
        with open(tmp, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        name = rel if rel not in old or old[rel] == digest else f"{stem}.{digest[:DIGEST_CHARS]}{PARQUET_SUFFIX}"
        digests[name] = digest
        return out / name

    return _atomic_write(out / rel, write, digested).relative_to(out).as_posix()


def _own_names(name: str) -> re.Pattern[str]:
    """The file names (last path segment) the archive files of the input archived as `name` have:
    its parts and condensed frames, plain or with a content digest (`_write_new`)."""
    kinds = "|".join(map(re.escape, CONDENSED_SCHEMAS))
    return re.compile(rf"{re.escape(name)}(\.(?:{kinds}))?(\.[0-9a-f]{{{DIGEST_CHARS}}})?{re.escape(PARQUET_SUFFIX)}")


def _named(entry: dict[str, Any], name: str) -> Named:
    """The archive files an entry names, relative (its parts and condensed frames), with their
    recorded digests. Only names of the archive's own layout count, and only the files of the input
    archived as `name`: a malformed entry names no file outside the archive, nor another input's
    file there, to replace or delete."""
    parts = entry.get("parts")
    condensed = entry.get("condensed")
    frames = condensed.get("frames") if isinstance(condensed, dict) else None
    digests = entry.get("digests") if isinstance(entry.get("digests"), dict) else {}
    names = [p for p in parts if isinstance(p, str)] if isinstance(parts, list) else []
    if isinstance(frames, dict):
        names += [f[0] for f in frames.values() if isinstance(f, list) and f and isinstance(f[0], str)]
    mine = _own_names(name)
    own = (
        n
        for n in names
        if (own_file(n, PART_PREFIX) or own_file(n, CONDENSED_DIR + "/")) and mine.fullmatch(n.rsplit("/", 1)[-1])
    )
    return {n: d if isinstance(d := digests.get(n), str) else None for n in sorted(own)}


def _write_parts(frame: pl.DataFrame, out: Path, name: str, old: Named, digests: dict[str, str]) -> list[str]:
    """Write a file's rows (with their payloads) as Parquet parts by UTC day and server, never over
    other bytes the old entry names (`_write_new`); their paths."""
    parts: list[str] = []
    if not frame.height:
        return parts
    day = (
        # floored, not truncated toward zero: a time before 1970 a fraction of a microsecond before
        # midnight is of the day before (`Selection.keeps_day` prunes by it)
        (pl.col("ts") * 1e6)
        .floor()
        .cast(pl.Int64, strict=False)
        .cast(pl.Datetime("us", "UTC"))
        .dt.strftime("%Y-%m-%d")
        .fill_null("unknown")
    )
    # grouped by the partition a key's rows go to, not by the key: rows without a key, with an empty
    # one and with the key `__null__` share a partition, hence one part
    names = {key: server_partition(key) for key in frame.get_column("server").unique().to_list()}
    partition = pl.col("server").replace_strict(names, return_dtype=pl.String())
    groups = frame.with_columns(_day=day, _partition=partition).partition_by(
        ["_day", "_partition"], as_dict=True, maintain_order=True
    )
    for (day_value, partition_name), chunk in groups.items():
        rel = f"{PART_PREFIX}{day_value}/{partition_name}/{name}{PARQUET_SUFFIX}"
        rows = as_strings(chunk.select(list(ARCHIVE_SCHEMA)))  # the archive keeps plain strings
        # row groups of a fraction of the reader's window: a window over a range of a big file's
        # lines skips the others by their `line` statistics instead of decoding them
        rel = _write_new(
            out,
            rel,
            lambda tmp, rows=rows: rows.write_parquet(tmp, compression="zstd", row_group_size=ROW_GROUP_ROWS),
            old,
            digests,
        )
        parts.append(rel)
    return parts


def compact_file(
    path: str, out: Path | str, old: Named | None = None, temp_dir: str | Path | None = None
) -> Converted:
    """Compact one input file into the archive at `out` (a directory, or a URL: `_compact_to_url`);
    returns what it wrote.

    `old`: the files the archive's entry for `path` names (`_named`; {} when it has none), when the
    caller has read the entry already; None: it is read here. `temp_dir`: where a conversion to a URL
    is staged (default: the system's temporary directory)."""
    if isinstance(out, str) and is_url(out):
        return _compact_to_url(path, out, old, temp_dir)
    out = Path(out)
    name = archive_name(path)
    if old is None:
        entry_path = out / SOURCES_DIR / f"{name}.json"
        old = _named(read_entry(entry_path), name) if entry_path.is_file() else {}
    try:
        entry, height = _convert(path, out, name, old)
    except InputError as exc:
        return Converted(0, 0, None, error=str(exc))
    for stale in sorted(set(old) - set(_named(entry, name))):
        (out / stale).unlink(missing_ok=True)
    return Converted(len(entry["parts"]), height, entry["skipped"], _runs(path, entry), entry_refused(entry))


def _convert(path: str, out: Path, name: str, old: Named) -> tuple[dict[str, Any], int]:
    """Write one input's parts, its condensed frames and, last, its entry into the directory `out`,
    never over other bytes the old entry (naming `old`) names (`_write_new`): the entry and its rows."""
    entry_path = out / SOURCES_DIR / f"{name}.json"
    digests: dict[str, str] = {}
    try:
        fingerprint = source_fingerprint(path)
    except OSError as exc:  # gone since it was listed (a recorder compressed or removed it), or unreadable
        raise InputError(f"cannot read {redact(path)}: {exc.strerror or exc}") from None
    facts = extract_file(path, LoadOptions(keep_raw=True))
    parts = _write_parts(facts.messages, out, name, old, digests)
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
        **({"refused": [[r.first, r.last, r.why, r.error] for r in facts.refused]} if facts.refused else {}),
        "lost": facts.lost,
        "undecodable": facts.undecodable,
        "undecodable_line": facts.undecodable_line,
        "unit": facts.unit,
        # what names the capture part whatever its file is called: a copy is read once (`analyzer.load`)
        "identity": [key.hex() for key in facts.identity],
        "source": fingerprint,
        "columns": list(ARCHIVE_SCHEMA),
        "seq_slots": MEMBER_SLOTS,
        "extraction": EXTRACTION_VERSION,
        "parts": sorted(parts),
    }
    if captures := capture_parts(facts):
        # a file of joined captures: each part, so that a copy of any of them is read once (`analyzer.archive`)
        entry["captures"] = [
            {
                "lines": [c.first, c.last],
                "identity": [key.hex() for key in c.identity],
                "counts": c.counts,
                "lost": c.lost,
                "undecodable": c.undecodable,
                "undecodable_line": c.undecodable_line,
            }
            for c in captures
        ]
    del facts  # its rows and payloads are written: they go before the parts are read back
    entry["condensed"] = _write_condensed(entry, str(entry_path), out, name, old, digests)
    entry["digests"] = dict(sorted(digests.items()))
    _atomic_write(entry_path, lambda tmp: tmp.write_bytes(orjson.dumps(entry, option=orjson.OPT_INDENT_2)))
    return entry, height


def _compact_to_url(
    path: str, out: str, old: Named | None = None, temp_dir: str | Path | None = None
) -> Converted:
    """`compact_file` into the archive at the URL `out`: written whole to a local staging directory
    (in `temp_dir`), then uploaded in the local writer's order (see the module docstring). An object
    store has no rename, but an upload is atomic: the entry, uploaded last, never names an object
    that is not there, a new file's run cut short leaves objects no entry names, and a file
    converted again never replaces an object of its old entry with other bytes (`_write_new`), so a
    run cut short before the new entry leaves the old one naming exactly what it was written with."""
    name = archive_name(path)
    entry_url = join(out, SOURCES_DIR, f"{name}.json")
    if old is None:
        old = _named(read_entry(entry_url), name) if storage.is_file(entry_url) else {}
    with tempfile.TemporaryDirectory(prefix="erascope-compact-", dir=temp_dir) as staging:
        try:
            entry, height = _convert(path, Path(staging), name, old)
        except InputError as exc:
            return Converted(0, 0, None, error=str(exc))
        entry_path = Path(staging) / SOURCES_DIR / f"{name}.json"
        data = _named(entry, name)
        try:
            storage.put_files((str(Path(staging) / rel), join(out, rel)) for rel in data)
            storage.put_files([(str(entry_path), entry_url)])
            storage.remove(join(out, rel) for rel in sorted(set(old) - set(data)))
        except OSError as exc:
            raise ErascopeError(f"cannot write the archive {redact(out)}: {exc}") from None
    return Converted(len(entry["parts"]), height, entry["skipped"], _runs(path, entry), entry_refused(entry))


def _runs(path: str, entry: dict[str, Any]) -> frozenset[bytes]:
    """The identity keys of an entry that its header gave, not its file name (`Converted.runs`)."""
    names = {name_key(path), name_key(f) if isinstance(f := entry.get("file"), str) else None}
    return frozenset(entry_identity(entry)) - names


_AGGREGATES: Final = {"conns": ["server", "conn"], "sessions": ["server", "conn", "session_id"], "servers": ["server"]}
"""The condensed frames that are groups, by their keys."""


def _write_condensed(
    entry: dict[str, Any], entry_path: str, out: Path, name: str, old: Named, digests: dict[str, str]
) -> dict[str, Any]:
    """Write the file's rows as an analysis reads them, paired and condensed (from the parts just
    written, as reading the archive would), never over other bytes the old entry names
    (`_write_new`), and return the entry's `condensed` stamp naming them."""
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
        held = None if frame is None else frame.lazy().collect().select(list(schema))
        if held is None or held.is_empty():  # a file without messages holds them in other dtypes
            held = pl.DataFrame(schema=schema)
        if kind in _AGGREGATES:  # groups and sets gathered in no set order: the same input writes the same bytes
            keys = _AGGREGATES[kind]
            held = held.sort(pl.col(keys).cast(pl.String), nulls_last=True)
        if kind == "servers":
            held = held.with_columns(
                pl.col("transports", "peers").list.eval(pl.element().cast(pl.String).sort().cast(pl.Categorical()))
            )
        rel = f"{CONDENSED_DIR}/{name}.{kind}{PARQUET_SUFFIX}"
        rel = _write_new(out, rel, lambda tmp, held=held: held.write_parquet(tmp, compression="zstd"), old, digests)
        written[kind] = [rel, held.height]
    return {**condensed_stamp(), "rows": traffic.rows, "frames": written}


def _unchanged(
    path: str, out: Path | str, entry: dict[str, Any], entry_path: str, listing: set[str] | None = None
) -> bool:
    """Whether the archive at `out` holds `path` as this erascope writes it, from an input that did
    not change since: `entry` is its entry there, read already (at `entry_path`); at a URL, `listing`
    the archive's objects (`_archived_at_url`)."""
    return (
        entry.get("file") == display_name(path)
        and entry.get("source") == source_fingerprint(path)
        # an erascope that extracts more or condenses differently converts again, as does a malformed
        # or incomplete entry
        and current_whole(entry, str(entry_path), str(out), listing)
    )


def _same_capture(path: str, entry: dict[str, Any]) -> bool:
    """Whether an archive's entry under `path`'s name archives the capture at `path`. Another capture
    that shares the file name is not: replacing it would lose its rows.

    A header the recorder wrote names its recording run and part (`run_key`), which the same capture
    keeps whatever became of its file (grown since, moved, copied, compressed): when the archived
    entry names one, it decides, at any path. The recorder's file name does not: a capture renamed
    to the archived one's name shares it. Otherwise (a header written by hand, an entry without
    identity keys) the entry names the same input, or the same recorder file name."""
    file = entry.get("file")
    same_path = file == display_name(path)
    archived = set(entry_identity(entry))
    # the archived keys beside those of file names: the run its header named
    runs = archived - {name_key(path), name_key(file) if isinstance(file, str) else None}
    if not runs:
        if same_path:
            return True
        header = _header_or_none(path) if archived else None
        return header is not None and not archived.isdisjoint(part_identity(path, header))
    if same_path and entry.get("source") == _fingerprint_or_none(path):
        return True  # the very file archived, unchanged since: its header need not be read again
    header = _header_or_none(path)
    return header is not None and run_key(header) in runs


def _header_or_none(path: str) -> dict[str, Any] | None:
    """The erascope header of the file at `path`; None when it has none or cannot be read, and for a
    path that is not a regular file (opening a FIFO would block)."""
    try:
        return None if not_regular(path) else read_header(path)
    except ErascopeError:
        return None


def _fingerprint_or_none(path: str) -> dict[str, Any] | None:
    try:
        return source_fingerprint(path)
    except OSError:
        return None


def _refuse_other_capture(path: str, entry: dict[str, Any], out: Path | str) -> None:
    if not _same_capture(path, entry):
        file = entry.get("file")
        raise ErascopeError(
            f"{path}: the archive {redact(str(out))} holds another capture under the name {archive_name(path)}"
            f" (from {file if isinstance(file, str) else 'an unnamed file'}); compact it into a separate archive"
        )


def _archived_at_url(
    inputs: list[str], out: str, force: bool, listing: set[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, Named]]:
    """The inputs `_unchanged` in the archive at the URL `out` (none when `force`) with their entries
    there, and per input the files its entry there names ({} without one: `compact_file`'s `old`).
    The archive is listed once and the entries are read together (a request each, concurrently)
    here, and only here: not an input at a time, nor again by the conversion. `listing`: the files
    under `out`."""
    entries = {p: join(out, SOURCES_DIR, f"{archive_name(p)}.json") for p in inputs}
    contents = storage.read_many(sorted(u for u in entries.values() if u in listing))
    unchanged: dict[str, dict[str, Any]] = {}
    old: dict[str, Named] = {}
    for p, url in entries.items():
        content = contents.get(url)
        if content is None:
            old[p] = {}
            continue
        if isinstance(content, OSError):
            raise ErascopeError(f"{redact(url)}: not a readable archive entry ({content})")
        entry = read_entry(EntryPath(url, content))
        _refuse_other_capture(p, entry, out)
        old[p] = _named(entry, archive_name(p))
        if not force and _unchanged(p, out, entry, url, listing):
            unchanged[p] = entry
    return unchanged, old


def compact(
    paths: Iterable[str | Path],
    out: Path | str,
    *,
    jobs: int | None = None,
    force: bool = False,
    runner: Callable[[list[str], Path | str, list[Named | None]], list[Converted]] | None = None,
    temp_dir: str | Path | None = None,
) -> CompactResult:
    """Convert the capture files named by `paths` (files, directories, globs) into an archive at `out`.

    `jobs` files are converted at a time, in threads (default: one per core). `runner`, when given,
    runs `compact_file` on each of the files to convert elsewhere (a cluster: `analyzer.cluster`),
    with the files each one's old entry names when they were read already (its `old`), and returns
    their results in order. `temp_dir`: where each file converted for a URL is staged (default: the
    system's temporary directory).
    `force` re-converts inputs that look unchanged. Raises `ErascopeError` for bad layouts (see the
    module docstring), archives given as input, the loader's own input errors (but a file of a format
    major this erascope does not know: among the result's `errors`), inputs none of which is a
    capture (all `skipped`), and a local archive another run is writing (`_held`).
    """
    given = [str(p) for p in paths]
    if not str(out):
        raise ErascopeError(f"--out: {EMPTY_PATH}")
    out = str(out) if is_url(str(out)) else Path(out)
    if isinstance(out, str):
        storage.check_url(out)
    if temp_dir is not None and not Path(temp_dir).is_dir():
        raise ErascopeError(f"--temp-dir {temp_dir} is not a directory")
    for g in given:
        if is_archive(g):
            raise ErascopeError(f"{redact(g)} is already an archive; analyze it directly")
    inputs = [p for p in find_inputs(given) if not is_source_entry(p)]
    if not inputs:
        raise ErascopeError("no capture files to compact")
    names: dict[str, str] = {}
    for p in inputs:
        # by the name their archive files get, not the file name: names that differ only in bytes
        # that are not UTF-8, or a long name's cut and digest, share it, and one would replace the other
        other = names.setdefault(archive_name(p), p)
        if other != p:
            raise ErascopeError(
                f"{other} and {p} share a file name in the archive ({archive_name(p)});"
                " compact them into separate archives"
            )
    if isinstance(out, str):
        return _compact(given, inputs, out, jobs, force, runner, temp_dir)
    _check_layout(given, inputs, out)
    _check_out_mode(out)
    _private_dir(out / SOURCES_DIR)
    with _held(out):
        return _compact(given, inputs, out, jobs, force, runner, temp_dir)


@contextlib.contextmanager
def _held(out: Path) -> Iterator[None]:
    """The local archive `out` held by this run (an exclusive `flock` on its `_sources`), or
    `ErascopeError` while another run holds it. Each run names the files it writes after the entries
    it read (`_write_new`): two runs converting a capture that changed between them wrote the same
    names with other rows, and the entry left named another run's files beside its own accounting.
    Readers do not take it: an entry is replaced whole, after the files it names."""
    try:
        fd = os.open(out / SOURCES_DIR, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise ErascopeError(f"cannot open the archive {out}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ErascopeError(
                f"the archive {out} is being written by another `erascope compact`; run again when it is done"
            ) from None
        except OSError:
            pass  # a filesystem without locks (some network ones): the run goes on unheld rather than not at all
        yield
    finally:
        os.close(fd)  # releases the lock


def _compact(
    given: list[str],
    inputs: list[str],
    out: Path | str,
    jobs: int | None,
    force: bool,
    runner: Callable[[list[str], Path | str, list[Named | None]], list[Converted]] | None,
    temp_dir: str | Path | None,
) -> CompactResult:
    """`compact` of `inputs` (found from `given`) once the layout is checked, and a local archive held."""
    if isinstance(out, str):
        _check_url_layout(given, inputs, out)
        listing = storage.files_under(out) if storage.is_dir(out) else set()
        unchanged, entries = _archived_at_url(inputs, out, force, listing)
        todo = [p for p in inputs if p not in unchanged]
        old: list[Named | None] = [entries[p] for p in todo]
    else:
        archived: dict[str, tuple[dict[str, Any], str]] = {}  # input -> its entry there, read once
        for p in inputs:
            if (entry_path := out / SOURCES_DIR / f"{archive_name(p)}.json").is_file():
                archived[p] = (read_entry(entry_path), str(entry_path))
                _refuse_other_capture(p, archived[p][0], out)
        for p in out.rglob("*"):  # what an older, looser erascope wrote, too
            if not p.is_symlink():
                os.chmod(p, DIR_MODE if p.is_dir() else FILE_MODE)
        todo = [p for p in inputs if force or p not in archived or not _unchanged(p, out, *archived[p])]
        unchanged = {p: archived[p][0] for p in inputs if p not in set(todo)}
        old = [None] * len(todo)  # read by each conversion from the disk
        listing = set()
    result = CompactResult(archive=out)
    workers = min(jobs or os.cpu_count() or 1, len(todo))
    if runner is not None:
        done = runner(todo, out, old) if todo else []
    elif workers <= 1:
        done = [compact_file(p, out, o, temp_dir) for p, o in zip(todo, old, strict=True)]
    else:
        # threads, as in `analyzer.load.extract_files`: polars releases the GIL, nothing is pickled
        with ThreadPoolExecutor(max_workers=workers) as pool:
            done = list(pool.map(compact_file, todo, [out] * len(todo), old, [temp_dir] * len(todo)))
    converted = dict(zip(todo, done, strict=True))
    runs = {p: converted[p].runs if p in converted else _runs(p, unchanged[p]) for p in inputs}
    _drop_superseded(out, runs, inputs, listing)
    # in input order: a file skipped is named with why each time, as `analyze` names it, whether its
    # entry was written now or is unchanged
    refused: list[tuple[str, Refused | str]] = []
    for p in inputs:
        if p in converted:
            parts, rows, skipped, _, joined, error = converted[p]
            result.parts += parts
            result.rows += rows
            if error is not None:  # none of it read, nothing written: named with the joined captures refused
                refused.append((p, error))
                continue
        else:
            skipped, joined = unchanged[p].get("skipped"), entry_refused(unchanged[p])
        if isinstance(skipped, str):
            result.skipped.append((p, skipped))
        else:
            (result.written if p in converted else result.unchanged).append(p)
        refused += ((p, r) for r in joined)
    whole = len(result.skipped)
    for p, r in refused:
        if isinstance(r, str):
            result.errors.append((p, r))
        else:
            (result.errors if r.error else result.skipped).append((p, r.note(p)))
    if whole == len(inputs):
        # nothing to analyze, as `analyze` fails on the same inputs: an exit 0 would tell a cron job
        # or a CI step that captures were archived
        skipped = [f"{redact(p)}: {why}" for p, why in result.skipped]
        raise ErascopeError(
            f"no capture files to compact in {', '.join(redact(g) for g in given)}"
            f" ({len(skipped)} file(s) skipped: {listed(skipped)})"
        )
    return result


def _drop_superseded(out: Path | str, runs: dict[str, frozenset[bytes]], inputs: list[str], listing: set[str]) -> None:
    """Remove the entry that archives an input part (converted now or unchanged) under the other
    spelling of its file name, compressed or plain: the recorder compresses a part it closed
    (`x.jsonl` becomes `x.jsonl.zst`), and the entry of the part compacted while it was still
    written would stay beside the whole one, and be read in its place (of two copies of a part, the
    first is read). Unchanged inputs too: a run cut short after the whole part's entry was written
    left the stale one, and the next run finds the whole part unchanged. The same run and part in
    both headers (`runs`: `run_key`, per input), not the name alone, makes it the same part; only the
    files that entry alone names go with it. `listing`: the archive's files, when it is at a URL."""
    url = out if isinstance(out, str) else None
    current = {f"{archive_name(p)}.json" for p in inputs}
    for p, part_runs in runs.items():
        if not part_runs:
            continue
        plain = strip_compression(Path(p).name)
        for spelling in (plain, *(plain + s for s in COMPRESSED_SUFFIXES)):
            name = f"{archive_name(spelling)}.json"
            where = join(url, SOURCES_DIR, name) if url else str(Path(out, SOURCES_DIR, name))
            if name in current or not (where in listing if url else Path(where).is_file()):
                continue
            try:
                stale = read_entry(where)
            except ErascopeError:  # not an entry this run can judge: left as it is
                continue
            if not part_runs & set(entry_identity(stale)):
                continue
            named = sorted(_named(stale, archive_name(spelling)))
            files = [where, *(join(url, r) if url else str(Path(out, r)) for r in named)]
            if url:
                try:
                    storage.remove(files)
                except OSError as exc:
                    raise ErascopeError(f"cannot write the archive {redact(url)}: {exc}") from None
            else:
                for f in files:
                    Path(f).unlink(missing_ok=True)
