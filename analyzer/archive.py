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

`compact` also keeps each file's rows as the analysis holds them after reading: paired and
condensed (`analyzer.condense`), with the `Traffic` they add up to, in `_condensed/<name>.<frame>.parquet`
(the entry's `condensed` names them). That is the work reading does at every analysis, done once:
an analysis of every row (no `Selection`) reads these few frames instead of the parts, file by file
as the JSONL reader gives them (rotated parts are paired across files by `analyzer.load.combine`,
as for JSONL). They are a cache of the parts, used only when written by this erascope's condensing
(`CONDENSE_VERSION`) and polars (the flow keys are polars hashes): otherwise, and for a selection,
the parts are read. `compact` writes them again whenever they are stale.

The entry of a file of joined captures (`cat a.jsonl b.jsonl > both.jsonl`) lists each capture
part it holds (`captures`: lines, identity keys, what its records add to the accounting), and such a
file is read on its own. When another input holds one of them (`analyzer.load.repeats`),
`read_without` reads the file again from its parts without that part's lines, its accounting added
up from the parts kept, as the JSONL reader reads the file without them. An entry without
`captures` is of a file of one capture, or from an erascope that named only the first (read so, and
converted again by the next `compact`: `captures_listed`).
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, unquote

import orjson
import polars as pl

from addon import format as fmt
from addon.errors import ErascopeError
from analyzer.condense import (
    ANSWERS_SCHEMA,
    CONDENSE_VERSION,
    CONNS_SCHEMA,
    REQUEST_COLUMNS,
    SERVERS_SCHEMA,
    SESSIONS_SCHEMA,
    Traffic,
    condense,
    spilled,
)
from analyzer.facts import (
    CHUNK_ROWS,
    BadLine,
    CapturePart,
    FileFacts,
    Refused,
    Repeated,
    inside,
    records_of,
    set_relinked,
)
from analyzer.messages import EXTRACTION_VERSION, MEMBER_SLOTS, as_categoricals, bounded_time, in_times, pair_responses
from analyzer.schema import MESSAGES_SCHEMA
from analyzer.selection import Selection
from analyzer.spill import Spill
from analyzer.storage import files_under, glob, is_dir, is_url, join, read_bytes, read_many

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
_LONGEST_KEY: Final = 200
"""Bytes of a percent-encoded server key kept whole in its partition's name (a directory's name may
have at most 255)."""
_DIGESTED: Final = "@"
"""Joins a cut key and its digest in a partition's name: percent-encoding writes every `@` of a key
as `%40`, so no whole key's name holds one."""
CONDENSED_DIR: Final = "_condensed"
"""Per input file, its rows paired and condensed (see the module docstring)."""
_IN_MEMORY: Final = as_categoricals(pl.LazyFrame(schema=MESSAGES_SCHEMA)).collect_schema()
CONDENSED_SCHEMAS: Final[dict[str, dict[str, pl.DataType]]] = {
    "messages": dict(_IN_MEMORY),
    "requests": {name: _IN_MEMORY[name] for name in REQUEST_COLUMNS},
    "answers": ANSWERS_SCHEMA,
    "conns": CONNS_SCHEMA,
    "sessions": SESSIONS_SCHEMA,
    "servers": SERVERS_SCHEMA,
}
"""The frames `_condensed` keeps per file, in the dtypes the analysis holds them in."""
MOVED_IN_MEMORY_BYTES: Final = 96 << 20
"""An archive read from its condensed frames keeps the moved requests and dropped answers in memory
up to this many bytes together (about 62 MB at 1 GB of captures) instead of writing them to the
analysis' temporary files: once read they are in memory anyway, and the rules' first frames read
them several times. More are spilled (`analyzer.spill`), so the heap stays bounded as input grows."""
COMPACT_AGAIN: Final = "run `erascope compact --force` on the captures to rewrite the archive"
"""The fix for an archive file that cannot be read as its entry says."""


def is_archive(path: Path | str) -> bool:
    """True for a directory written by `compact` (it has a `_sources` directory), local or at a URL
    (`analyzer.storage`)."""
    if isinstance(path, str) and is_url(path):
        return is_dir(join(path, SOURCES_DIR))
    try:
        return (Path(path) / SOURCES_DIR).is_dir()
    except OSError:  # a directory that cannot be searched is no archive this can read (its listing names why)
        return False


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


def server_partition(server: str | None) -> str:
    """The `server=` partition's name of `server`'s rows: the key percent-encoded (hive style,
    lossless), or, when that is too long for a directory's name, its first 150 bytes and a digest of
    the whole key (`server_of_partition` cannot tell the key from that name)."""
    if not server:
        return f"server={NULL_SERVER}"
    name = quote(server, safe="")
    if len(name) > _LONGEST_KEY:
        cut = name[:150]
        cut = cut[: cut.rindex("%")] if "%" in cut[-2:] else cut  # never inside a %XX
        name = f"{cut}{_DIGESTED}{hashlib.sha256(server.encode()).hexdigest()[:32]}"
    return f"server={name}"


def server_of_partition(name: str) -> str | None:
    """The server key a `server=` partition's value (after `=`) names: `NULL_SERVER` for rows
    without one, None when the name cannot tell it (a cut key and its digest: read the files)."""
    return None if _DIGESTED in name else unquote(name)


class EntryPath(str):
    """The path of an archive entry that holds the entry's bytes, read when the archive was listed
    (`source_entries` reads every entry to order them): the reader takes them from here instead of
    reading the entry again (`read_entry`), which at a URL is a request per entry."""

    content: bytes | None
    source: str | None
    """The input file the entry archives, as the archive's reports name it."""
    identity: tuple[bytes, ...]
    """What names the archived capture part (`entry_identity`), for telling copies apart before reading."""
    captures: tuple[CapturePart, ...]
    """The capture parts of an archived file of joined captures (`entry_captures`)."""
    lines: int | None
    """The complete lines the archived file held (its records and malformed lines), as
    `analyzer.load.fullest_first` counts a capture file's; None when the entry does not say."""

    def __new__(cls, path: str, content: bytes, entry: dict[str, Any] | None = None) -> EntryPath:
        self = super().__new__(cls, path)
        self.content = content
        self.source = entry.get("file") if entry is not None and isinstance(entry.get("file"), str) else None
        self.identity = entry_identity(entry) if entry is not None else ()
        self.captures = entry_captures(entry) if entry is not None else ()
        records, malformed = (entry.get("records"), entry.get("malformed")) if entry is not None else (None, None)
        ok = _count(records) and isinstance(malformed, list)
        self.lines = records + len(malformed) if ok else None
        return self

    def take(self) -> bytes | None:
        """The entry's bytes, once: they are let go as the reader takes them."""
        content, self.content = self.content, None
        return content


def entry_contents(archive: Path | str) -> dict[str, bytes]:
    """The archive's `_sources` entries (their paths, as listed) with their bytes, each read once (at a
    URL, together: concurrent requests). `ErascopeError` for one that cannot be read."""
    if isinstance(archive, str) and is_url(archive):
        found = glob(archive, f"{SOURCES_DIR}/*.json")
        contents: dict[str, bytes | OSError] = read_many(found)
    else:
        found = [str(p) for p in (Path(archive) / SOURCES_DIR).glob("*.json")]
        contents = {}
        for p in found:
            try:
                contents[p] = read_regular(p)
            except OSError as exc:
                contents[p] = exc
    read: dict[str, bytes] = {}
    for p in found:
        content = contents[p]
        if isinstance(content, OSError):
            raise ErascopeError(f"{p}: not a readable archive entry ({content})")
        read[p] = content
    return read


def source_entries(archive: Path | str) -> list[str]:
    """The archive's per-input entries, in the order the inputs were found (their original paths).

    Each entry is read once, here; its path (an `EntryPath`) carries its bytes to the reader. An
    archive at a URL has its entries read together (concurrent requests)."""
    entries = []
    for p, content in entry_contents(archive).items():
        entry = _parsed(p, content)
        if (wrong := malformed_fields(entry)) is not None:  # its `file` orders the entries, first
            raise ErascopeError(f"{p}: malformed archive entry ({wrong}); {COMPACT_AGAIN}")
        entries.append((EntryPath(p, content, entry), entry["file"]))
    # in the order of the paths they archive, as `find_inputs` sorts captures: the archive is read in
    # the order the same files are as JSONL
    return [p for p, _ in sorted(entries, key=lambda e: e[1])]


_UNITS: Final = ("line", "entry", "flow")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _bad_line(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and _count(value[0]) and isinstance(value[1], str)


def malformed_fields(entry: dict[str, Any]) -> str | None:
    """Which accounting fields of an entry are not of the types `compact` writes (their names); None
    when all are. An entry is any JSON: checked before any field is used."""
    text = (str,)
    ok = {
        "file": isinstance(entry.get("file"), text),
        "capture": isinstance(entry.get("capture"), text),
        "transport": entry.get("transport") is None or isinstance(entry.get("transport"), text),
        "skipped": entry.get("skipped") is None or isinstance(entry.get("skipped"), text),
        "records": _count(entry.get("records")),
        "lost": _count(entry.get("lost")),
        "undecodable": _count(entry.get("undecodable")),
        "undecodable_line": entry.get("undecodable_line") is None or _count(entry.get("undecodable_line")),
        "counts": isinstance(counts := entry.get("counts"), dict)
        and all(isinstance(k, str) and _count(v) for k, v in counts.items()),
        "malformed": isinstance(bad := entry.get("malformed"), list) and all(map(_bad_line, bad)),
        "torn": not entry.get("torn") or _bad_line(entry.get("torn")),
        "unit": entry.get("unit", "line") in _UNITS,
        "parts": isinstance(parts := entry.get("parts"), list) and all(isinstance(p, str) for p in parts),
        "captures": entry.get("captures") is None
        or (isinstance(captures := entry.get("captures"), list) and all(map(_capture_part, captures))),
        "refused": entry.get("refused") is None
        or (isinstance(refused := entry.get("refused"), list) and all(map(_refused, refused))),
    }
    wrong = [name for name, good in ok.items() if not good]
    return f"{', '.join(wrong)}: missing or not as `erascope compact` writes" if wrong else None


def _refused(value: Any) -> bool:
    """Whether an item of an entry's `refused` is as `compact` writes it: [first, last, why, error]."""
    return (
        isinstance(value, list)
        and len(value) == 4
        and _count(value[0])
        and _count(value[1])
        and isinstance(value[2], str)
        and isinstance(value[3], bool)
    )


def _capture_part(value: Any) -> bool:
    """Whether an item of an entry's `captures` is as `compact` writes it (`entry_captures`)."""
    if not isinstance(value, dict):
        return False
    lines, counts, first = value.get("lines"), value.get("counts"), value.get("undecodable_line")
    return (
        isinstance(lines, list)
        and len(lines) == 2
        and all(map(_count, lines))
        and isinstance(value.get("identity"), list)
        and isinstance(counts, dict)
        and all(isinstance(k, str) and _count(v) for k, v in counts.items())
        and _count(value.get("lost"))
        and _count(value.get("undecodable"))
        and (first is None or _count(first))
    )


def entry_refused(entry: dict[str, Any]) -> tuple[Refused, ...]:
    """The captures joined in an entry's file that were not read (`analyzer.facts.FileFacts.refused`);
    empty for an entry naming none, or a malformed list (`malformed_fields` names it)."""
    refused = entry.get("refused") if isinstance(entry, dict) else None
    if not isinstance(refused, list) or not all(map(_refused, refused)):
        return ()
    return tuple(Refused(*r) for r in refused)


def entry_captures(entry: dict[str, Any]) -> tuple[CapturePart, ...]:
    """The capture parts an entry of a file of joined captures lists (`analyzer.load.capture_parts`);
    empty for a file of one capture, an entry from an erascope that did not list them, or a malformed
    list (`malformed_fields` names it)."""
    captures = entry.get("captures") if isinstance(entry, dict) else None
    if not isinstance(captures, list) or not all(map(_capture_part, captures)):
        return ()
    return tuple(
        CapturePart(
            first=c["lines"][0],
            last=c["lines"][1],
            identity=entry_identity(c),
            counts=dict(c["counts"]),
            lost=c["lost"],
            undecodable=c["undecodable"],
            undecodable_line=c["undecodable_line"],
        )
        for c in captures
    )


def captures_listed(entry: dict[str, Any]) -> bool:
    """Whether an entry says all a copy of one of its capture parts needs: a file of one header needs
    nothing more than its `identity`, one of joined captures its `captures` (an erascope before them
    named only the first, by which an archive counted the others' copies twice)."""
    counts = entry.get("counts")
    return "captures" in entry or not isinstance(counts, dict) or counts.get(fmt.HEADER, 0) <= 1


def entry_identity(entry: dict[str, Any]) -> tuple[bytes, ...]:
    """The identity keys of the capture part an entry archives (`analyzer.load`'s, as hex); empty for
    an entry from an erascope that did not write them, or one that does not hold them well formed."""
    keys = entry.get("identity") if isinstance(entry, dict) else None
    if not isinstance(keys, list):
        return ()
    try:
        return tuple(bytes.fromhex(k) for k in keys if isinstance(k, str) and len(k) == 32)
    except ValueError:
        return ()


def read_entry(path: Path | str) -> dict[str, Any]:
    """An archive entry's JSON; `ErascopeError` when it is unreadable or of another archive format.

    An `EntryPath` gives the bytes it holds, once; any other path is read."""
    content = path.take() if isinstance(path, EntryPath) else None
    if content is None:
        try:
            content = read_bytes(path) if isinstance(path, str) and is_url(path) else read_regular(path)
        except OSError as exc:
            raise ErascopeError(f"{path}: not a readable archive entry ({exc})") from None
    return _parsed(str(path), content)


def read_regular(path: Path | str) -> bytes:
    """The bytes of the regular file at `path`; `OSError` for anything else. An entry is named by
    the archive's listing, not checked: opened without blocking and looked at before it is read, a
    FIFO in its place is not waited on forever, nor a device (/dev/zero) read until memory runs out."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return f.read()


def _parsed(path: str, content: bytes) -> dict[str, Any]:
    try:
        entry = orjson.loads(content)
    except orjson.JSONDecodeError as exc:
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


PART_PREFIX: Final = "day="
"""How every part's name (relative to its archive) starts."""


def own_file(rel: str, prefix: str) -> bool:
    """Whether `rel`, a name an entry gives, is a file of the archive's own layout under `prefix`
    (`PART_PREFIX`, or `CONDENSED_DIR` and `/`). An entry is any JSON: an absolute name, or one
    climbing out with `..`, would have the reader open (and the writer replace or delete) files of
    another archive or any other file the user may read."""
    return rel.startswith(prefix) and ".." not in rel.split("/")


def _partition_of(part: str) -> tuple[str | None, str | None]:
    """(day, server) of a part's path; None for what it does not name (an unknown layout keeps the part)."""
    names = dict(d.split("=", 1) for d in Path(part).parts[:-1] if "=" in d)
    day, server = names.get("day"), names.get("server")
    return day, (None if server is None else server_of_partition(server))


# --- reading -------------------------------------------------------------------------------------
def same_extraction(entry: dict[str, Any]) -> bool:
    """Whether an entry's rows are what this erascope extracts: its columns, `seq` numbered with
    room for batch members (`analyzer.messages.MEMBER_SLOTS`; archives from before have record seqs),
    and the values derived as this erascope derives them (`EXTRACTION_VERSION`; 1 before it was written)."""
    return (
        entry.get("columns") == list(ARCHIVE_SCHEMA)
        and entry.get("seq_slots") == MEMBER_SLOTS
        and entry.get("extraction", 1) == EXTRACTION_VERSION
    )


@dataclass
class _Archived:
    """One archived input file: its facts (accounting) and the parts its selected rows are in."""

    facts: FileFacts
    root: str
    """The archive it is in."""
    parts: list[str]
    lines: int
    """Lines of the original file (records, bad lines): its rows' `line` is at most this."""
    condensed: dict[str, tuple[str, int]] | None = None
    """Its `_condensed` frames (path, rows) when they are current and the analysis reads every row."""
    condensed_rows: int = 0
    """Message rows before condensing (`Traffic.rows`)."""
    leave_out: tuple[tuple[int, int], ...] = ()
    """Lines (first, last) whose rows are not read: capture parts another input holds (`read_without`)."""


def condensed_stamp() -> dict[str, Any]:
    """What `_condensed` frames must have been written by to be read (see the module docstring)."""
    return {"version": CONDENSE_VERSION, "polars": pl.__version__}


def condensed_current(entry: dict[str, Any]) -> bool:
    """Whether an entry's `_condensed` frames were written by this erascope's condensing and polars."""
    condensed = entry.get("condensed")
    return isinstance(condensed, dict) and all(condensed.get(k) == v for k, v in condensed_stamp().items())


def _archived(entry_path: str, selection: Selection | None, leave_out: tuple[Repeated, ...] = ()) -> _Archived:
    """An entry's accounting as `extract_file` gave it when the file was compacted, and its parts."""
    remote = is_url(entry_path)
    # `Path` would fold a URL's `//`: an archive at a URL is joined as text
    root = entry_path.rsplit("/", 2)[0] if remote else str(Path(entry_path).parent.parent)
    return archived_entry(read_entry(entry_path), str(entry_path), root, selection, leave_out)


def archived_entry(
    entry: dict[str, Any],
    entry_path: str,
    root: str,
    selection: Selection | None,
    leave_out: tuple[Repeated, ...] = (),
) -> _Archived:
    """`_archived` of an entry already read (`compact` reads the one it is about to write).
    `leave_out`: the lines of the capture parts (`entry_captures`) not to read (`read_without`)."""
    remote = is_url(root)
    everything = selection is None or selection.everything
    if not same_extraction(entry):
        raise ErascopeError(
            f"{entry_path}: archived with other columns or values than this erascope extracts;"
            " run `erascope compact` on the captures again to refresh the archive"
        )

    def located(rel: str) -> str:
        return join(root, rel) if remote else str(Path(root) / rel)

    if (wrong := malformed_fields(entry)) is not None:
        raise ErascopeError(f"{entry_path}: malformed archive entry ({wrong}); {COMPACT_AGAIN}")
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
            undecodable=entry["undecodable"],
            undecodable_line=entry.get("undecodable_line"),
            unit=entry.get("unit", "line"),  # HAR entries, dump flows; archives before them hold lines
            identity=entry_identity(entry),
            archived=True,
            captures=entry_captures(entry),
            # the captures joined in the file that were not read (`analyzer.load.extract_file`): named as
            # the file's reading names them
            refused=entry_refused(entry),
            entry=str(entry_path),
        )
        names = list(entry["parts"])
        if len(set(names)) != len(names):
            raise ErascopeError(
                f"{entry_path}: names a part twice (written by an erascope that could lose the rows of"
                " server keys sharing a partition); run `erascope compact` on the captures again"
            )
        _check_own(entry_path, names, PART_PREFIX)
        facts.parts = tuple(located(p) for p in names)
        if not everything:
            names = kept_parts(names, selection)  # type: ignore[arg-type]
        parts = [located(p) for p in names]
        condensed, condensed_rows = None, 0
        if everything and condensed_current(entry):
            frames = {kind: (rel, rows) for kind, (rel, rows) in entry["condensed"]["frames"].items()}
            _check_own(entry_path, [rel for rel, _ in frames.values()], CONDENSED_DIR + "/")
            condensed = {kind: (located(rel), rows) for kind, (rel, rows) in frames.items()}
            if set(condensed) != set(CONDENSED_SCHEMAS):
                raise ValueError(f"condensed frames {sorted(condensed)}")
            condensed_rows = entry["condensed"]["rows"]
            # counts as compact writes them, not taken with `int()`: 1.5 would read as 1, and the
            # report would count messages the archive does not hold, without an error
            if not all(map(_count, [condensed_rows, *(rows for _, rows in condensed.values())])):
                raise ValueError("a row count that is not a whole number of at least 0")
        lines = facts.records + len(facts.malformed) + (1 if facts.torn else 0)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ErascopeError(f"{entry_path}: malformed archive entry ({exc!r})") from None
    ranges = tuple(sorted((r.first, r.last) for r in leave_out))
    if ranges:  # the condensed frames hold every part's rows: the parts are read
        _without_lines(facts, ranges)
        condensed, condensed_rows = None, 0
    return _Archived(facts, root, parts, lines, condensed, condensed_rows, ranges)


def _without_lines(facts: FileFacts, ranges: tuple[tuple[int, int], ...]) -> None:
    """`facts`' accounting without the capture parts that start in `ranges`, as the JSONL reader counts
    the file read without their lines (`analyzer.load.repeats`): added up from what the entry lists
    per part (`entry_captures`)."""
    kept = [c for c in facts.captures if not inside(ranges, c.first)]
    counts: dict[str, int] = {}
    for c in kept:
        for rtype, n in c.counts.items():
            counts[rtype] = counts.get(rtype, 0) + n
    facts.counts = dict(sorted(counts.items()))
    facts.records = records_of(facts.counts)
    facts.lost = max((c.lost for c in kept), default=0)
    facts.undecodable = sum(c.undecodable for c in kept)
    facts.undecodable_line = min((c.undecodable_line for c in kept if c.undecodable_line is not None), default=None)
    facts.malformed = [b for b in facts.malformed if not inside(ranges, b.line)]
    if facts.torn is not None and inside(ranges, facts.torn.line):
        facts.torn = None


def _check_own(entry_path: str, names: list[str], prefix: str) -> None:
    """Raise `ErascopeError` when an entry names a file out of its archive's own layout (`own_file`)."""
    for rel in names:
        if not isinstance(rel, str) or not own_file(rel, prefix):
            raise ErascopeError(
                f"{entry_path}: malformed archive entry (names {rel!r}, not a file of the archive); {COMPACT_AGAIN}"
            )


def _every_file(f: _Archived) -> list[str]:
    """The parts and the condensed frames an entry names."""
    return f.parts + [path for path, _ in (f.condensed or {}).values()]


def current_whole(entry: dict[str, Any], entry_path: str, root: str, listing: set[str] | None = None) -> bool:
    """Whether this erascope reads `entry` as it is: its rows' columns, its condensed frames current
    and well formed, and every file it names in the archive (what `compact` need not write again).
    `listing`: the objects of an archive at a URL, listed once for all its entries."""
    try:
        archived = archived_entry(entry, entry_path, root, None)
        _check_present([archived], _every_file, None if listing is None else {archived.root: listing})
    except ErascopeError:
        return False
    return archived.condensed is not None and captures_listed(entry)


def _check_present(
    files: list[_Archived], paths: Callable[[_Archived], list[str]], listed: dict[str, set[str]] | None = None
) -> None:
    """Raise `ErascopeError` naming the files of `paths(file)` that are missing from their archive.

    An archive at a URL is listed once (existence checks of many parts on an object store would be
    a request each), or not at all when `listed` (archive → its objects) has it."""
    listed = dict(listed or {})
    for f in files:
        needed = paths(f)
        if is_url(f.root):
            there = listed[f.root] if f.root in listed else listed.setdefault(f.root, files_under(f.root))
            missing = [p for p in needed if p not in there]
        else:
            missing = [p for p in needed if not Path(p).is_file()]
        if missing:
            raise ErascopeError(f"archive {f.root} is incomplete: {', '.join(missing)} missing")


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
            # only the ranges that hold rows: the line count is the entry's word, and an entry
            # claiming 2**40 lines would otherwise be read as millions of empty ranges (for hours)
            for i in _held_ranges(f, rows, len(starts)):
                # the last range is open: rows past the counted lines are still read
                yield _Window([f], (starts[i], starts[i] + rows if i != len(starts) - 1 else _NO_LINE))
            continue
        group.append(f)
        size += f.lines
        if size >= rows:
            yield _Window(group)
            group, size = [], 0
    if group:
        yield _Window(group)


def _held_ranges(f: _Archived, rows: int, ranges: int) -> list[int]:
    """Which of a big file's `ranges` ranges of `rows` lines (from line 1; the last one open) hold
    rows of its parts, in order: at most one per row, whatever line count its entry gives."""
    try:
        held = (
            pl.scan_parquet(f.parts, glob=False, hive_partitioning=False)
            .select(pl.col("line").cast(pl.Int64))
            .filter(pl.col("line") >= 1)
            .select(((pl.col("line") - 1) // rows).clip(upper_bound=ranges - 1).unique())
            .collect(engine="streaming")
        )
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise ErascopeError(f"archive {f.root}: a part cannot be read ({exc}); {COMPACT_AGAIN}") from None
    return sorted(held.get_column("line").to_list())


def _scan(window: _Window, selection: Selection | None) -> pl.LazyFrame:
    """The window's rows in input order (file, line), in the dtypes `extract_file` gives."""
    parts = [p for f in window.files for p in f.parts]
    rank = {p: n for n, f in enumerate(window.files) for p in f.parts}
    # part names come from capture file names, which may hold `[`, `*` or `?`: no globbing
    rows = pl.scan_parquet(
        parts, schema=ARCHIVE_SCHEMA, hive_partitioning=False, glob=False, include_file_paths="_part"
    ).select(*MESSAGES_SCHEMA, "_part").with_columns(bounded_time("ts"))
    if window.lines is not None:
        rows = rows.filter(pl.col("line").is_between(*window.lines, closed="left"))
    left_out = [(f, r) for f in window.files for r in f.leave_out]
    if left_out:
        rows = rows.filter(
            ~pl.any_horizontal((pl.col("_part").is_in(f.parts) & pl.col("line").is_between(*r)) for f, r in left_out)
        )
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

    When every file has current `_condensed` frames and `selection` keeps every row, each file's
    facts are read from them. Otherwise the rows of all of them, paired and condensed together (see
    the module docstring), go with the first file read; the others keep their own accounting and
    share empty frames, as the JSONL reader's batches of small files do: rows read together are
    paired together, which a mix of both ways would not do for a capture's parts. The first names
    the others (`FileFacts.read_with`): when one of them is left out as a copy (`analyzer.load.repeats`:
    a file of joined captures read before holds its capture), the others are read again. With a `spill`,
    the rows condensing moves out are written there window by window. Raises `ErascopeError` for a
    malformed or incomplete archive.
    """
    files = [_archived(e, selection) for e in entries]
    # every file the entries name, the parts too: an archive missing some is incomplete, whichever
    # frames this analysis reads and whichever parts the selection keeps (a cluster's shard selects
    # its servers, and would otherwise report an archive that lost a server's partition, or had it
    # renamed, as one without that server)
    _check_present(files, lambda f: [*f.facts.parts, *(path for path, _ in (f.condensed or {}).values())])
    if all(f.condensed is not None for f in files if f.parts):
        condensed = [f for f in files if f.condensed is not None]
        _read_condensed(condensed)
        # As the rows' reading does, what grows with the input waits on disk, unless it is little
        # enough to keep: it is in memory already, and every later query would read it back.
        keep = spill is None or _moved_bytes(condensed) <= MOVED_IN_MEMORY_BYTES
        for f in condensed:
            if not keep:
                f.facts.traffic = spilled(f.facts.traffic, spill)  # type: ignore[arg-type]
            f.facts.placed = True
    else:
        _read_rows(files, selection, spill)
    return [f.facts for f in files]


def read_without(
    entry_path: str, leave_out: tuple[Repeated, ...], selection: Selection | None, spill: Spill | None
) -> FileFacts:
    """The `FileFacts` of an archived file of joined captures read without the lines of the capture
    parts `leave_out` names (another input holds them), as the JSONL reader reads the file without
    them: from its parts, whatever its condensed frames hold."""
    archived = _archived(entry_path, selection, leave_out)
    archived.facts.repeated = leave_out
    _check_present([archived], _every_file)
    _read_rows([archived], selection, spill)
    return archived.facts


def condensed_facts(entry: dict[str, Any], entry_path: str, root: str) -> FileFacts:
    """The facts of one archived file read from its parts, paired and condensed, held in memory: what
    `compact` keeps in `_condensed` (its entry is not written yet)."""
    archived = archived_entry(entry, entry_path, root, None)
    _check_present([archived], lambda f: f.parts)
    _read_rows([archived], None, None)
    return archived.facts


def _read_rows(files: list[_Archived], selection: Selection | None, spill: Spill | None) -> None:
    """The rows of `files` read from their parts, paired and condensed together, go with the first
    file read (see `read_entries`)."""
    frames: list[pl.DataFrame] = []
    traffics: list[Traffic] = []
    for window in _windows(files, CHUNK_ROWS):
        try:
            rows = _scan(window, selection).collect(engine="streaming")
        except (pl.exceptions.PolarsError, OSError) as exc:
            # a damaged or replaced part: said, with the archive, instead of a traceback
            raise ErascopeError(
                f"archive {window.files[0].root}: a part cannot be read ({exc}); {COMPACT_AGAIN}"
            ) from None
        if rows.is_empty():
            continue
        if _unplaced(rows):
            # every row a capture gives has its file and line (the reader numbers them): evidence needs them
            raise ErascopeError(
                f"malformed archive {window.files[0].root}: {_names(window)} hold a row no capture gives"
                f" (without its file or line, or a request without its method); {COMPACT_AGAIN}"
            )
        if _repeated(rows):
            # a row no capture gives: the rules join on these keys, taking them for unique
            raise ErascopeError(
                f"malformed archive {window.files[0].root}: {_names(window)} hold a row twice (file, line"
                f" and seq repeated); {COMPACT_AGAIN}"
            )
        kept, traffic = condense(pair_responses(rows))
        frames.append(kept)
        traffics.append(spilled(traffic, spill) if spill is not None else traffic)
    facts = [f.facts for f in files]
    holder = next((f for f in facts if f.was_read), None)
    if holder is not None and traffics:
        set_relinked(holder, frames, traffics)
        holder.read_with = tuple(f.entry for f in facts if f is not holder and f.was_read)


def _names(window: _Window, limit: int = 3) -> str:
    """The parts a window reads, named (the first few)."""
    parts = [p for f in window.files for p in f.parts]
    return ", ".join(parts[:limit]) + (f" and {len(parts) - limit} more" if len(parts) > limit else "")


def _unplaced(rows: pl.DataFrame) -> bool:
    """Whether a row lacks its place (file or line), or is a request or notification without its method:
    no capture line gives such a row, and the rules take them for granted. (A `seq` may be missing: a
    record is the sender's to shape, and one without `seq` is read as the JSONL reads it.)"""
    unnamed = pl.col("method").is_null() & pl.col("kind").is_in(("request", "notification"))
    return bool(rows.select((pl.any_horizontal(pl.col("file", "line").is_null()) | unnamed).any()).item())


def _repeated(rows: pl.DataFrame) -> bool:
    """Whether message rows repeat a (file, line, seq): each record's rows (a batch's members, a HAR
    entry's records) differ in `seq`, and a line is one record."""
    return bool(rows.select(pl.struct("file", "line", "seq").is_duplicated().any()).item())


_WALL_CLOCK: Final = ("ts", "start", "end", "first", "last")
"""Condensed frames' columns that hold times read from `ts`: within `_TIMES` or null, as condensing wrote them."""


def _as_written(kind: str, frame: pl.DataFrame) -> bool:
    """Whether a condensed frame holds only what condensing writes: times a capture's row can hold
    (`bounded_time`), and messages rows each once (`_repeated`)."""
    times = [c for c in _WALL_CLOCK if c in frame.columns]
    if times and not frame.select(pl.all_horizontal(in_times(c).all() for c in times)).item():
        return False
    return kind != "messages" or not _repeated(frame)


def _read_condensed(files: list[_Archived]) -> None:
    """Each file's messages and traffic from its `_condensed` frames, as reading its rows gives them.

    Every frame is read whole now, all at once: a frame that is damaged is an error here, not in the
    middle of the rules. The frames of one kind are read by one scan of every file's, in input
    order (`collect_all` reads the six in parallel), and each file gets its own slice of the rows
    by the row counts its entry gives: a query per file and frame costs more than reading them
    (294 frames of 49 files at 1 GB of captures: 0.37 s of CPU against 0.23 s). A frame of another
    kind fails the scan; one with other rows than its entry says fails the count of its kind.
    """
    if not files:
        return
    kinds = list(CONDENSED_SCHEMAS)
    scans = [
        pl.scan_parquet([(f.condensed or {})[kind][0] for f in files], glob=False, hive_partitioning=False)
        for kind in kinds
    ]
    try:
        collected = pl.collect_all(scans)
    except (pl.exceptions.PolarsError, OSError):
        raise ErascopeError(_damaged(files)) from None
    frames: dict[str, list[pl.DataFrame]] = {}
    for kind, frame in zip(kinds, collected, strict=True):
        rows = [(f.condensed or {})[kind][1] for f in files]
        if dict(frame.schema) != CONDENSED_SCHEMAS[kind] or frame.height != sum(rows) or not _as_written(kind, frame):
            raise ErascopeError(_damaged(files))
        offsets = itertools.accumulate(rows, initial=0)
        frames[kind] = [frame.slice(offset, n) for offset, n in zip(offsets, rows, strict=False)]
    for n, f in enumerate(files):
        requests = frames["requests"][n]
        f.facts.messages = frames["messages"][n]
        f.facts.traffic = Traffic(
            conns=frames["conns"][n],
            sessions=frames["sessions"][n],
            servers=frames["servers"][n],
            answers=frames["answers"][n],
            requests=requests if requests.height else None,
            rows=f.condensed_rows,
        )


def _damaged(files: list[_Archived]) -> str:
    """What is wrong with the first damaged condensed frame of `files`, named: the frames read one by
    one, which only a damaged archive pays for (`_read_condensed` read them together)."""
    for f in files:
        for kind, (path, rows) in (f.condensed or {}).items():
            try:
                frame = pl.read_parquet(path, glob=False, hive_partitioning=False)
            except (pl.exceptions.PolarsError, OSError) as exc:
                return f"{path}: a condensed frame that cannot be read ({exc}); {COMPACT_AGAIN}"
            if (
                dict(frame.schema) != CONDENSED_SCHEMAS.get(kind)
                or frame.height != rows
                or not _as_written(kind, frame)
            ):
                return f"{path}: not the condensed {kind} this erascope wrote for its entry; {COMPACT_AGAIN}"
    return f"archive {files[0].root}: the condensed frames do not add up to their entries; {COMPACT_AGAIN}"


def _moved_bytes(files: list[_Archived]) -> int:
    """Bytes the moved requests and dropped answers of `files` hold in memory."""
    total = 0
    for f in files:
        traffic = f.facts.traffic
        for frame in (traffic.requests, traffic.answers):
            if isinstance(frame, pl.DataFrame):
                total += int(frame.estimated_size())
    return total


def extract_archived(entry_path: str | Path, selection: Selection | None = None) -> FileFacts:
    """The `FileFacts` of one archived input file, as `extract_file` gave them when it was compacted."""
    return read_entries([str(entry_path)], selection)[0]
