"""Reading Parquet archives (written by `erascope compact`, `analyzer.compact`): the second source of frames.

An archive holds, per input capture file, its message rows (`MESSAGES_SCHEMA` plus the payload
`raw`) split into Parquet parts by UTC day and server, and a `_sources/<file>.json` entry with its
accounting and its parts:

    ARCHIVE/day=2026-11-28/server=https%3A%2F%2Fapi.example.test%2Fmcp/<capture file name>.parquet
    ARCHIVE/_sources/<capture file name>.json

`read_entries` reads the rows of many archived files as lazy Parquet scans that read only the
columns the analysis uses (never `raw`: projection pushdown), only the rows a `Selection` keeps
(predicate pushdown) and only the parts whose `day=`/`server=` partition can hold them (partition
pruning, `kept_parts`). The rows come in input order (file, then line), as the JSONL reader gives
them, in windows of about `CHUNK_ROWS` rows: small files share a window, a big file is read a
range of lines at a time. Each window is paired and condensed as it is read and the windows are
relinked at the end (`analyzer.facts.relink`), so memory holds one window and the kept rows, and
the report is the JSONL files' report.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote

import orjson
import polars as pl

from addon.errors import ErascopeError
from analyzer.condense import Traffic, condense, spilled
from analyzer.facts import CHUNK_ROWS, BadLine, FileFacts, set_relinked
from analyzer.messages import MEMBER_SLOTS, as_categoricals, pair_responses
from analyzer.schema import MESSAGES_SCHEMA
from analyzer.selection import Selection
from analyzer.spill import Spill
from analyzer.storage import files_under, glob, is_dir, is_url, join, read_bytes

ARCHIVE_FORMAT: Final = "erascope-archive/1"
SOURCES_DIR: Final = "_sources"
"""Per-input accounting entries live here; its presence marks a directory as an archive."""
PARQUET_SUFFIX: Final = ".parquet"
ARCHIVE_SCHEMA: Final[dict[str, pl.DataType]] = {**MESSAGES_SCHEMA, "raw": pl.String()}
"""Columns of every archive Parquet file: the messages frame plus the exact payload."""
_NO_LINE: Final = 1 << 32
"""Past every line number (`line` is a UInt32)."""
NULL_SERVER: Final = "__null__"
"""The partition directory of rows without a server key."""


def is_archive(path: Path | str) -> bool:
    """True for a directory written by `compact` (it has a `_sources` directory), local or at a URL
    (`analyzer.storage`)."""
    if isinstance(path, str) and is_url(path):
        return is_dir(join(path, SOURCES_DIR))
    return (Path(path) / SOURCES_DIR).is_dir()


def is_source_entry(path: str | Path) -> bool:
    """True for an archive's per-input accounting file (`…/_sources/<name>.json`).

    Asked of every input file, so read as `pathlib` reads a path without making one: `pathlib`
    interns each part of a path it parses, and Python 3.12 keeps interned strings for good (100,000
    capture names: 18 MB kept, holding about 55 MB of Python heap around them; bench/README.md).
    """
    text = os.fspath(path)
    if os.altsep:
        text = text.replace(os.altsep, os.sep)
    parts = [part for part in text.split(os.sep) if part and part != "."]
    if len(parts) < 2 or parts[-2] != SOURCES_DIR:
        return False
    name = parts[-1]
    dot = name.rfind(".")
    return 0 < dot < len(name) - 1 and name[dot:] == ".json"  # `PurePath.suffix`


def source_entries(archive: Path | str) -> list[str]:
    """The archive's per-input entries, in the order the inputs were found (their original paths)."""
    if isinstance(archive, str) and is_url(archive):
        found = glob(archive, f"{SOURCES_DIR}/*.json")
    else:
        found = [str(p) for p in (Path(archive) / SOURCES_DIR).glob("*.json")]
    entries = [(p, read_entry(p)["file"]) for p in found]
    # Path order, as `find_inputs` sorts a directory's captures: the archive reads in the same order
    return [p for p, _ in sorted(entries, key=lambda e: Path(e[1]))]


def read_entry(path: Path | str) -> dict[str, Any]:
    """An archive entry's JSON; `ErascopeError` when it is unreadable or of another archive format."""
    try:
        entry = orjson.loads(read_bytes(path) if isinstance(path, str) and is_url(path) else Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ErascopeError(f"{path}: not a readable archive entry ({exc})") from None
    if not isinstance(entry, dict) or entry.get("format") != ARCHIVE_FORMAT:
        raise ErascopeError(
            f"{path}: archive entry format {entry.get('format') if isinstance(entry, dict) else None!r}"
            f" is not supported (this erascope reads {ARCHIVE_FORMAT})"
        )
    return entry


def kept_parts(parts: Iterable[str], selection: Selection) -> list[str]:
    """The archive parts (`day=…/server=…/<name>.parquet`, relative) that can hold rows `selection` keeps.

    Told from the partition names alone: a part of another day or server is never opened.
    """
    kept = []
    for part in parts:
        day, server = _partition_of(part)
        # `__null__` holds the rows without a server, with an empty one, and with the key `__null__`
        keys = ("", NULL_SERVER) if server == NULL_SERVER else (server,)
        if (day is None or selection.keeps_day(day)) and (server is None or any(map(selection.keeps_server, keys))):
            kept.append(part)
    return kept


def _partition_of(part: str) -> tuple[str | None, str | None]:
    """(day, server) of a part's path; None for what it does not name (an unknown layout keeps the part)."""
    names = dict(d.split("=", 1) for d in Path(part).parts[:-1] if "=" in d)
    day, server = names.get("day"), names.get("server")
    return day, (None if server is None else unquote(server))


# --- reading -------------------------------------------------------------------------------------
def same_extraction(entry: dict[str, Any]) -> bool:
    """Whether an entry's rows are what this erascope extracts: its columns, and `seq` numbered with
    room for batch members (`analyzer.messages.MEMBER_SLOTS`; archives from before have record seqs)."""
    return entry.get("columns") == list(ARCHIVE_SCHEMA) and entry.get("seq_slots") == MEMBER_SLOTS


@dataclass
class _Archived:
    """One archived input file: its facts (accounting) and the parts its selected rows are in."""

    facts: FileFacts
    parts: list[str]
    lines: int
    """Lines of the original file (records, bad lines): its rows' `line` is at most this."""


def _archived(entry_path: str, selection: Selection | None, listed: dict[str, set[str]]) -> _Archived:
    """An entry's accounting as `extract_file` gave it when the file was compacted, and its parts.

    `listed` caches, per archive at a URL, one listing of its objects (existence checks of many
    parts on an object store would be a request each)."""
    remote = is_url(entry_path)
    # `Path` would fold a URL's `//`: an archive at a URL is joined as text
    root = entry_path.rsplit("/", 2)[0] if remote else str(Path(entry_path).parent.parent)
    entry = read_entry(entry_path)
    if not same_extraction(entry):
        raise ErascopeError(
            f"{entry_path}: archived with other columns than this erascope extracts;"
            " run `erascope compact` on the captures again to refresh the archive"
        )
    try:
        facts = FileFacts(
            file=entry["file"],
            capture=entry["capture"],
            transport=entry["transport"],
            skipped=entry["skipped"],
            records=entry["records"],
            counts=dict(entry["counts"]),
            malformed=[BadLine(entry["file"], line, reason) for line, reason in entry["malformed"]],
            torn=BadLine(entry["file"], *entry["torn"]) if entry["torn"] else None,
            lost=entry["lost"],
            unit=entry.get("unit", "line"),  # HAR entries, dump flows; archives before them hold lines
        )
        names = list(entry["parts"])
        if selection is not None and not selection.everything:
            names = kept_parts(names, selection)
        parts = [join(root, p) if remote else str(Path(root) / p) for p in names]
    except (KeyError, TypeError, ValueError) as exc:
        raise ErascopeError(f"{entry_path}: malformed archive entry ({exc!r})") from None
    if remote:
        there = listed[root] if root in listed else listed.setdefault(root, files_under(root))
        missing = [p for p in parts if p not in there]
    else:
        missing = [p for p in parts if not Path(p).is_file()]
    if missing:
        raise ErascopeError(f"archive {root} is incomplete: {', '.join(missing)} missing")
    lines = facts.records + len(facts.malformed) + (1 if facts.torn else 0)
    return _Archived(facts, parts, lines)


@dataclass
class _Window:
    """Rows read together: whole files, or one range of lines of a big file."""

    files: list[_Archived]
    lines: tuple[int, int] | None = None
    """[first, last) line of a big file's range; None: the files whole."""


def _windows(files: list[_Archived], rows: int) -> Iterator[_Window]:
    """Files in input order grouped into windows of about `rows` lines; a bigger file in line ranges."""
    group: list[_Archived] = []
    size = 0
    for f in files:
        if not f.parts:
            continue
        if f.lines > rows:
            if group:
                yield _Window(group)
                group, size = [], 0
            starts = range(1, f.lines + 1, rows)
            for start in starts:
                # the last range is open: rows past the counted lines are still read
                yield _Window([f], (start, start + rows if start != starts[-1] else _NO_LINE))
            continue
        group.append(f)
        size += f.lines
        if size >= rows:
            yield _Window(group)
            group, size = [], 0
    if group:
        yield _Window(group)


def _scan(window: _Window, selection: Selection | None) -> pl.LazyFrame:
    """The window's rows in input order (file, line), in the dtypes `extract_file` gives."""
    parts = [p for f in window.files for p in f.parts]
    rank = {p: n for n, f in enumerate(window.files) for p in f.parts}
    # part names come from capture file names, which may hold `[`, `*` or `?`: no globbing
    rows = pl.scan_parquet(
        parts, schema=ARCHIVE_SCHEMA, hive_partitioning=False, glob=False, include_file_paths="_part"
    ).select(*MESSAGES_SCHEMA, "_part")
    if window.lines is not None:
        rows = rows.filter(pl.col("line").is_between(*window.lines, closed="left"))
    if selection is not None and not selection.everything:
        rows = rows.filter(selection.expr())
    if len(window.files) > 1:
        rows = rows.with_columns(_rank=pl.col("_part").replace_strict(rank, return_dtype=pl.UInt32))
        order = ["_rank", "line"]
    else:
        order = ["line"]
    # categorical before the sort, in the streaming engine: plain strings are never all in memory
    # stable: rows sharing a line (a HAR entry's) stay in the parts' order
    return rows.pipe(as_categoricals).sort(order, maintain_order=True).select(list(MESSAGES_SCHEMA))


def read_entries(
    entries: list[str], selection: Selection | None = None, spill: Spill | None = None
) -> list[FileFacts]:
    """The `FileFacts` of archived input files (their `_sources` entries), in the order given.

    The rows of all of them, paired and condensed together (see the module docstring), go with the
    first file read; the others keep their own accounting and share empty frames, as the JSONL
    reader's batches of small files do. With a `spill`, the rows condensing moves out are written
    there window by window. Raises `ErascopeError` for a malformed or incomplete archive.
    """
    listed: dict[str, set[str]] = {}
    files = [_archived(str(e), selection, listed) for e in entries]
    frames: list[pl.DataFrame] = []
    traffics: list[Traffic] = []
    for window in _windows(files, CHUNK_ROWS):
        rows = _scan(window, selection).collect(engine="streaming")
        if rows.is_empty():
            continue
        kept, traffic = condense(pair_responses(rows))
        frames.append(kept)
        traffics.append(spilled(traffic, spill) if spill is not None else traffic)
    facts = [f.facts for f in files]
    holder = next((f for f in facts if f.was_read), None)
    if holder is not None and traffics:
        set_relinked(holder, frames, traffics)
    return facts


def extract_archived(entry_path: str | Path, selection: Selection | None = None) -> FileFacts:
    """The `FileFacts` of one archived input file, as `extract_file` gave them when it was compacted."""
    return read_entries([str(entry_path)], selection)[0]
