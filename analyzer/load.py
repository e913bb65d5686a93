"""Loading captures: find files, read each one into messages, then combine.

This is the JSONL source of frames (captures, plain or compressed, and HAR files and mitmproxy
dumps read as captures); Parquet archives are the other (`analyzer.archive`, which reads all
archived files of an analysis together). Both give `analyzer.facts.FileFacts`, and `combine` joins
them whatever their source.

The work is split in two so it parallelizes and so other inputs can plug in:

- `extract_file(path, options) -> FileFacts` is the per-file step. It reads one capture file on
  its own (no shared state), checks its header, reads its records with the explicit
  `RECORD_SCHEMA`, locates malformed and torn lines, and turns the records into rows of the
  messages frame (`analyzer.messages.messages_from_records`). Running it for many files at once
  (threads or processes), or adding another input branch (Parquet), needs nothing else.
  As pieces are read, every `CHUNK_BYTES` (32 MiB) of them are paired and condensed
  (`analyzer.condense`: the rows later steps read only as aggregates are dropped, the requests of
  plain exchanges move into narrow rows), and at the end `relink` pairs the chunks' kept rows again
  for the answers whose request was in an earlier chunk. What a file leaves in memory is a small
  fraction of its rows, and no file is ever held whole.
- Small files (a capture per stdio spawn) are read many at once (`extract_files`, `_read_batch`):
  one reading costs a few milliseconds whatever its size, and 100,000 such files read one by one
  took 700 s and 5.5 GB. A batch is one text whose rows find their file by line number; each file
  keeps its own counts and bad lines, the rows stay in the batch's frame.
- `combine(facts) -> Loaded` relinks the parts of rotated captures across files (a connection
  can span parts), concatenates the per-file messages and `Traffic`, and sums up the inputs (files,
  records, malformed/torn locations, skipped files).

The messages rows hold their repetitive string columns as `pl.Categorical`
(`analyzer.messages.CATEGORICAL_COLUMNS`, about a third of the memory of plain strings) and flow
ids as 64-bit keys (`analyzer.messages.flow_key`: unique ids would fill polars' string cache for
good); `analyzer.messages.as_strings` gives the `MESSAGES_SCHEMA` dtypes back.

A file is read in pieces of about `PIECE_BYTES` (8 MiB), each cut after a newline (a longer line
makes its piece longer; lines are never split), and every piece keeps the file's line numbers.
Polars memory-maps a file it scans whole, and the streaming engine buffers large batches of it:
one 256 MiB capture read as a single streaming scan, condensed batch by batch, took 316 MB of heap
(plus 317 MB of mapped file) against 198 MB in pieces, in the same time (2.6 s both); over the
1 GB bench set it was no faster either, so pieces are the only path.
Pieces are read by the streaming engine although the in-memory one costs a fifth less CPU per
piece: it reads a piece on one core, so with two files read at a time an analysis of 1 GB took 6 %
longer in wall time, and reading more files at a time to fill the cores cost the heap the pieces
save (bench/README.md, 2026-12-02 11:50).
Per file only the record counts (summed), the condensed messages rows and the bad lines are kept.

Polars' NDJSON reader fails on the first syntax error even with `ignore_errors=True`, skips blank
lines (which shifts row numbers) and with `ignore_errors=True` silently turns wrong-typed fields
into nulls, so it cannot locate bad lines. It is still the one judge of what a record is: every
record line, in any piece, is read by it. Each piece:

1. `scan_ndjson` with the schema, strict. When it succeeds and its row count equals the piece's
   line count, row numbers are line numbers: done (the common case: files written by
   `CaptureWriter`). It rejects non-object lines (`[1,2]`) with an error; with
   `ignore_errors=True` it would turn them into all-null rows instead.
   `headers` is first read as text, which costs half the time of building its lists; a piece whose
   headers that text cannot carry exactly (a backslash or quote in a value, a pair that is not two
   strings; `analyzer.messages.HEADERS_AS_TEXT`) is scanned again with the lists, so both give
   the same rows and a piece may choose on its own.
2. Otherwise (a piece with a bad line; the others of the file stay on path 1) the piece is read as
   lines (`scan_lines`): `str.json_path_match("$.type")` (null for invalid JSON, non-objects and a
   missing `type`, never an exception) marks the bad lines, and the good ones are scanned as NDJSON
   again, each row given back its line number. When the reader refuses that batch too (valid JSON
   with a field of the wrong type, such as a `seq` that is a string), halving the batch finds the
   lines it refuses (`_refused`). `json_path_match` parses with serde_json, which refuses some
   JSON the reader (simd-json) reads, such as a lone surrogate escape (`"\\ud800"`): the lines it
   marks are asked of the reader too, in one reading, but for those certain to be refused
   (`_read_by_the_reader`), and a line the reader reads without a `type` is bad.

Before either path, a piece's lone surrogate escapes (`"\\ud800"`, which the reader reads as U+0000,
as it reads `"\\u0000"`; a low one alone, `"\\udc00"`, or a high one before an escape that is not a low
one, which it refuses) are written as their text (`_lone_surrogates_as_text`), so keys that differ
by one stay apart, and a line JSON allows is read. A payload's own (in `raw`'s text) are written so
where its fields are read (`analyzer.messages.messages_from_records`), and only in a piece the same
search found one in: `raw` stays as written.

A line is thus judged by the same reading wherever it is and whatever else its file holds: a
wrong type in a field the analysis never reads is not read, and an object `raw` is read as its
JSON text, on both paths. Only the id reading (robust or not, see `messages_from_records`) is
chosen per file: it writes `1.0` where the fast one writes `1`, so when a later piece needs it the
file is read again from its start with it (rare: an id that is an object). A bad last line of the
file (not empty) is torn, every other bad line malformed.

Each reading is one streaming query per piece that yields both the record counts and the messages
rows (`raw` is never kept). A piece of a stdio capture is read without the expressions only HTTP
and SSE records need (`analyzer.messages.messages_from_records` with `http=False`: 8 % fewer
instructions per piece); when its record counts show an HTTP or SSE record, whatever the file's
header says, it is read again with them, so its rows are those of the whole plan.
"""

from __future__ import annotations

import bisect
import datetime as dt
import glob
import hashlib
import io
import itertools
import json
import os
import re
import stat
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, Final, NamedTuple

import orjson
import polars as pl

from addon import format as fmt
from addon.errors import EMPTY_PATH, ErascopeError
from addon.jsontext import MAX_DEPTH, finite, refuse_constant, surrogates_read
from analyzer import storage
from analyzer.archive import EntryPath, is_archive, is_source_entry, read_entries, read_without, source_entries
from analyzer.condense import Traffic, concat_rows, condense, merge, spilled
from analyzer.facts import (
    CHUNK_ROWS,
    NO_MESSAGES,
    NO_TRAFFIC,
    BadLine,
    CapturePart,
    FileFacts,
    InputError,
    Joined,
    LoadOptions,
    Refused,
    Repeated,
    UnknownMajor,
    display_name,
    finish,
    inside,
    no_messages,
    records_of,
    relink,
    set_relinked,
)
from analyzer.messages import (
    DEEP_READS,
    HEADERS_AS_TEXT,
    HTTP_READS,
    HTTP_RECORD_TYPES,
    MESSAGE_RECORD_TYPES,
    RARE_READS,
    is_batch,
    lone_surrogates_as_text,
    messages_from_records,
    pair_responses,
    read_fields,
    spread_batch_answers,
)
from analyzer.schema import RECORD_SCHEMA
from analyzer.sources import (
    COMPRESSED_SUFFIXES,
    PLAIN,
    CutStream,
    Opened,
    compression_of,
    foreign_kind,
    open_stream,
    pieces,
    strip_compression,
)
from analyzer.sources import first_line as _sources_first_line
from analyzer.spill import Spill
from analyzer.storage import is_url

_HEADER_LIMIT: Final = 1 << 20
_PART_SUFFIX: Final = re.compile(r"\.\d{3}\.jsonl$")
_RECORDER_NAME: Final = re.compile(r"^(?P<started>\d{8}T\d{6}\.\d{6}Z)_.+_(?P<pid>\d+)_[0-9a-f]{6}\.\d{3}\.jsonl$")
"""The recorder's file names (captures/FORMAT.md): start time, server slug, pid, random hex, part."""
_COPY_OF_PART: Final = re.compile(r"^(?P<part>.+\.(?P<number>\d{3}))\D.*\.jsonl$")
"""A name given to a copy of a part by a file manager (`x.000 copy.jsonl`, `x.000 (1).jsonl`): the
part's name with text put before `.jsonl` (`capture_id`)."""
_TEXT_HEADERS_SCHEMA: Final = {**RECORD_SCHEMA, "headers": pl.String()}
"""`RECORD_SCHEMA` with `headers` read as text: half the time of building its lists (`HEADERS_AS_TEXT`)."""
PIECE_BYTES: Final = 8 << 20
"""A capture file is read in pieces of about this many bytes (see the module docstring)."""
CHUNK_BYTES: Final = 32 << 20
"""Pieces are paired and condensed together in chunks of about this many bytes (see `_read_pieces`)."""
SMALL_BYTES: Final = 1 << 20
"""Files of at most this size (whose capture has no other part among the inputs) are read many at
once: one reading costs a few milliseconds whatever its size, more than a small capture takes."""


@dataclass
class Loaded:
    """All inputs combined: the paired messages frame and the input accounting."""

    messages: pl.DataFrame
    files: list[FileFacts]
    traffic: Traffic = field(default_factory=Traffic)

    @property
    def records(self) -> int:
        return sum(f.records for f in self.read)

    @property
    def malformed(self) -> list[BadLine]:
        return sorted(b for f in self.read for b in f.malformed)

    @property
    def torn(self) -> list[BadLine]:
        return sorted(f.torn for f in self.read if f.torn is not None)

    @property
    def skipped(self) -> list[FileFacts]:
        return [f for f in self.files if f.skipped is not None]

    @property
    def read(self) -> list[FileFacts]:
        """The files whose records were read (not skipped, no input error, not a duplicate)."""
        return [f for f in self.files if f.was_read]


# --- finding files -------------------------------------------------------------------------------
def find_inputs(paths: Iterable[str | Path], *, missing_ok: bool = False) -> list[str]:
    """Input files named by `paths`: files (of any kind), directories (searched recursively for
    `*.jsonl`, `*.jsonl.gz` and `*.jsonl.zst`), globs, and archives, also at URLs (`analyzer.storage`).

    Sorted, each file once, so the same inputs read in the same order however they were named: a
    local file named twice (`x.har ./x.har`, a directory and a file in it, a symbolic link to it) is
    listed under the first name given. Inside directories, FIFOs, sockets and dangling links named
    `*.jsonl` are listed too: reading them gives a note instead of a hang or silence
    (`extract_file`). Raises `ErascopeError` for a path that does not exist, an empty one (`EMPTY_PATH`)
    or a glob that matches nothing; with `missing_ok` (`erascope watch`: the recorders may not have
    started yet) the last two name nothing instead.
    """
    found: dict[tuple[object, ...], str] = {}

    def named(names: Iterable[str]) -> None:
        # by their names: URLs and archive entries (the path of the capture an entry came from)
        for name in names:
            found.setdefault(("name", name), name)

    def local(path: str) -> None:
        found.setdefault(_same_file(path), path)

    def unlisted(exc: OSError) -> None:
        # a directory that cannot be listed (no read or search permission) is an input that cannot be
        # read, named as such when it is read (`extract_file`), never silently left out
        if exc.filename is not None:
            local(os.fspath(exc.filename))

    def walk(directory: Path) -> None:
        # os.walk tells directories from the rest without a stat per file (100,000 spawn captures)
        for parent, dirs, names in os.walk(directory, onerror=unlisted):
            # in name order: of two names for one file in a folder (a link beside its target), the one
            # listed is then the same on every run, not whichever the folder happened to list first
            dirs.sort()
            for n in sorted(names):
                if n.endswith(_CAPTURE_SUFFIXES):
                    local(os.path.join(parent, n))

    for item in paths:
        text = str(item)
        if not text:
            raise ErascopeError(EMPTY_PATH)
        if is_url(text):
            named(_found_at_url(text))
            continue
        path = Path(text)
        if path.is_dir() and is_archive(path):
            # a Parquet archive written by `erascope compact`: one entry per archived capture file
            named(source_entries(path))
        elif path.is_dir():
            walk(path)
        elif path.exists() or path.is_symlink():
            local(text)
        elif glob.has_magic(text):
            matches = sorted(glob.glob(text, recursive=True))
            if not matches and not missing_ok:
                raise ErascopeError(f"no files match {text!r}")
            for m in matches:
                if Path(m).is_dir():
                    walk(Path(m))
                else:
                    local(m)
        elif not missing_ok:
            raise ErascopeError(f"no such file or directory: {text}")
    return sorted(found.values(), key=_input_order)


def _input_order(path: str) -> str:
    """Where an input sorts: by its path, and an archive entry by the path of the file it archives, so
    that an archive's inputs are read in the order the same files are as JSONL (of copies of one
    capture part, the first is read). An entry's own name is flat (`x.jsonl.gz.json` sorts before
    `x.jsonl.json`, and the directory is gone)."""
    return path.source if isinstance(path, EntryPath) and path.source is not None else path


def fullest_first(paths: list[str]) -> list[str]:
    """`paths` with the copies of one capture part reordered so that the one holding the most
    complete lines comes first, and is the one read (`_drop_if_duplicate` reads the first).

    A copy taken while the recorder still wrote the part (a backup, an early `compact`) holds only
    its first lines; the part itself, or the copy the recorder compressed when it closed it, all of
    them. Copies are found by the recorder's file name (without `.gz`/`.zst`; an archive entry by
    the name it archives) and measured by counting their lines, decompressed: only when a name is
    found twice, which costs a reading of each such copy. Equal copies keep their order; a copy at
    a URL is not measured (its group keeps its order); copies under other names are told apart by
    their headers when read, and the first of those is read.
    """
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(paths):
        name = strip_compression(os.path.basename(p).removesuffix(".json" if isinstance(p, EntryPath) else ""))
        groups.setdefault(name, []).append(i)
    out = list(paths)
    for name, where in groups.items():
        if len(where) < 2 or not _RECORDER_NAME.match(name):
            continue
        counts = [_complete_lines(paths[i]) for i in where]
        if None in counts:
            continue
        ranked = sorted(range(len(where)), key=lambda k: (-(counts[k] or 0), k))
        for i, k in zip(where, ranked, strict=True):
            out[i] = paths[where[k]]
    return out


def _complete_lines(path: str) -> int | None:
    """The newline-ended lines of a capture file, decompressed (an archive entry: as it says); None
    at a URL or when the file cannot be read (its reading names the error)."""
    if isinstance(path, EntryPath):
        return path.lines
    if is_url(path):
        return None
    try:
        with open_stream(path) as f:  # a cut or corrupt stream ends where it stops making sense
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return None


def _same_file(path: str) -> tuple[object, ...]:
    """What one local file is however it is named. Its header tells a capture's copies apart later
    (`_identity`), but a HAR file, a dump or a capture whose header names no recorder has no more
    than its name: `x.har` and `./x.har` were two inputs, read and counted twice."""
    try:
        st = os.stat(path)
    except OSError:
        return ("path", os.path.abspath(path))  # a dangling link, a file gone: its name alone
    # some filesystems number no inodes (0): the name, made absolute, is all there is
    return ("file", st.st_dev, st.st_ino) if st.st_ino else ("path", os.path.realpath(path))


_CAPTURE_SUFFIXES: Final = tuple(fmt.CAPTURE_SUFFIX + s for s in ("", *COMPRESSED_SUFFIXES))
"""What a directory is searched for: captures, plain or compressed by logrotate (`analyzer.sources`)."""


def _found_at_url(url: str) -> list[str]:
    """`find_inputs` of one URL (`analyzer.storage`): an archive's entries, the captures under a
    prefix (one listing), an object, or what a glob matches."""
    storage.check_url(url)  # before any use of it names a part of it
    if is_archive(url):
        return source_entries(url)
    if storage.is_dir(url):
        return storage.captures_under(url, _CAPTURE_SUFFIXES)
    if storage.is_file(url):
        return [url]
    if glob.has_magic(url):
        found: list[str] = []
        for match in storage.glob_url(url):
            found += storage.captures_under(match, _CAPTURE_SUFFIXES) if storage.is_dir(match) else [match]
        if not found:
            raise ErascopeError(f"no files match {url!r}")
        return found
    raise ErascopeError(f"no such file or directory: {url}")


def capture_id(path: str, header: dict[str, Any] | None = None) -> str:
    """The capture a file belongs to: its name without the `.NNN.jsonl` part suffix (nor `.gz`/`.zst`).

    A file named otherwise whose `header` is of a rotated part (`part` above 0) is a renamed copy of
    that part (a file manager's `x.001 copy.jsonl`, which sorts before `x.001.jsonl` and is read in
    its place) or a part joined with those after it: it belongs to the capture of the part its header
    names as the previous one (`previous`, the recorder's name for it), so that an exchange cut by the
    rotation is paired across the two files (`combine`). A file named as a part keeps its name's
    capture: all the parts of a capture renamed alike (`mine.000.jsonl`, `mine.001.jsonl`) are one.

    Part 0 names no previous part, so only its name tells a copy of it (`x.000 copy.jsonl`, read in
    place of `x.000.jsonl`, which sorts after it) from a capture of its own: a name that is the
    recorder's part name with text put before `.jsonl`, whose header is of the part that name
    numbers, is of the recorder's capture, so the exchange cut by the rotation into part 1 is paired.
    """
    name = strip_compression(os.path.basename(path))
    if _PART_SUFFIX.search(name):
        return _PART_SUFFIX.sub("", name)
    if header is None:
        return name
    previous = header.get("previous")
    if _goes_on(header.get("part")) and isinstance(previous, str):
        before = strip_compression(os.path.basename(previous))
        if _PART_SUFFIX.search(before):
            return _PART_SUFFIX.sub("", before)
    copied = _COPY_OF_PART.match(name)
    part = header.get("part")
    if copied is not None and type(part) is int and part == int(copied["number"]):
        recorded = _RECORDER_NAME.match(copied["part"] + ".jsonl")
        if recorded is not None and _names_its_run(recorded, header):
            return _PART_SUFFIX.sub("", recorded.string)
    return name


def _names_its_run(name: re.Match[str], header: dict[str, Any]) -> bool:
    """Whether the recorder's file name (`_RECORDER_NAME`'s match) is of the run `header` is of: the
    start time and pid in the name are the header's `started` and `recorder_pid`, as the recorder
    writes both (another run's part 0 under a copy's name is no copy)."""
    started, pid = header.get("started"), header.get("recorder_pid")
    if not isinstance(started, str) or type(pid) is not int or not 0 < pid < 1 << 64 or str(pid) != name["pid"]:
        return False
    try:
        when = dt.datetime.fromisoformat(started)
    except ValueError:
        return False
    return when.tzinfo is not None and when.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ") == name["started"]


# --- one file ------------------------------------------------------------------------------------
def listed(notes: list[str], limit: int = 3) -> str:
    """The first `limit` notes, joined for one message line, and how many more there are."""
    shown = "; ".join(notes[:limit])
    return shown + (f"; and {len(notes) - limit} more" if len(notes) > limit else "")


def read_header(path: str) -> dict[str, Any] | None:
    """The file's header record, or None when the first line is not an erascope header.

    Raises `ErascopeError` when the file cannot be read or names an erascope major we do not know.
    """
    return _header_of(path, first_line(path))


def read_open_header(path: str, f: BinaryIO) -> dict[str, Any] | None:
    """`read_header` of the plain file open as `f` (read from its start; `f` is left there): the
    file those bytes came from, whatever `path` names by now."""
    f.seek(0)
    return _header_of(path, f.readline(_HEADER_LIMIT))


def first_line(path: str) -> bytes:
    """The file's first line as `read_header` reads it (decompressed; cut at a limit). Raises `InputError`."""
    try:
        return _sources_first_line(path, _HEADER_LIMIT)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


_TRANSPORTS: Final = {fmt.STDIO: fmt.STDIO, fmt.HTTP: fmt.HTTP}


def _transport(header: dict[str, Any]) -> str | None:
    """A header's `transport`, the known ones as one shared string (a file each held its own)."""
    value = header.get("transport")
    return _TRANSPORTS.get(value, value) if isinstance(value, str) else None


def _header_of(path: str, first: bytes) -> dict[str, Any] | None:
    # as the reader reads the line, and a header further down the file (`_header_record`)
    header = _header_record(first)
    if header is None:
        return None
    refusal = format_refusal(header.get("format"))
    if refusal is None:
        return header
    why, error = refusal
    if not error:
        return None
    raise UnknownMajor(f"{path}: {why}")


def format_refusal(value: Any) -> tuple[str, bool] | None:
    """Why a header's capture is not read, by its `format` (FORMAT.md, Versioning), and whether that is an
    input error (an erascope major this erascope does not know) rather than no erascope capture at all;
    None for a format this erascope reads. A file's first header and one joined further down alike."""
    if not isinstance(value, str) or not value.startswith(fmt.FORMAT_NAME + "/"):
        return "names no erascope format", False
    if fmt.parse_format_id(value) != fmt.FORMAT_MAJOR:
        return (
            f"capture format {fmt.shown_format(value)} is not supported by this erascope"
            f" (it reads {fmt.FORMAT_ID}); upgrade erascope to analyze it"
        ), True
    return None


def _refused_parts(heads: Iterable[Head], lines: int = 0) -> tuple[Refused, ...]:
    """The captures joined in a file (`heads`: its headers after line 1, in order) whose header names a
    format this erascope does not read: each up to the next header, the last to the end of the file
    (line `lines`, or unbounded when 0: `extract_file` bounds it once the file is read)."""
    heads = list(heads)
    found: list[Refused] = []
    for n, h in enumerate(heads):
        refusal = format_refusal(h.format)
        if refusal is not None:
            last = heads[n + 1].line - 1 if n + 1 < len(heads) else max(lines, h.line) if lines else _LAST
            found.append(Refused(h.line, last, *refusal))
    return tuple(found)


class _RefusedJoined(Exception):
    """A capture joined in a file names a format this erascope does not read: the file is read again
    without its lines (`extract_file`), which only a search of the whole file can bound."""


def _refuses_any(facts: FileFacts, piece: bytes, first_line: int, noted: set[int]) -> bool:
    """Whether a capture whose header the reading of `piece` just noted (`facts.joined`, beyond the lines
    `noted`) names a format this erascope does not read: the header read as `heads_in` reads it."""
    new = {j.line for j in facts.joined} - noted
    if not new:
        return False
    return any(h.line in new and format_refusal(h.format) is not None for h in heads_in(piece, first_line))


_READS: Final = (
    "erascope reads the captures `erascope record stdio` and `erascope record http` write"
    " (plain, .gz or .zst), HAR files and mitmproxy dumps"
)


def not_a_capture(path: str, first: bytes) -> str:
    """Why a file is skipped: not an erascope capture, with a hint when it looks like something known."""
    if fmt.cut_header(first):
        return (
            "empty: the recorder stopped before writing its header (a crash, or it is just starting); nothing to read"
            if not first
            else "its header is torn: the recorder stopped while writing it (a crash); nothing to read"
        )
    why = "not an erascope capture (first line is not an erascope header)"
    obj = read_line(first)
    if obj is not None and "jsonrpc" in obj:
        return (
            f"{why}: it looks like a plain JSON-RPC log; {_READS}: run the server behind"
            " `erascope record stdio` (or the proxy `erascope record http`) to record one"
        )
    return f"{why}; {_READS}"


def _identity(path: str, header: dict[str, Any]) -> tuple[bytes, ...]:
    """What names a capture part whatever its file is called or wherever it was copied.

    The recorder's header names a unique run (start time to the microsecond, host, recorder pid,
    transport, server) and the part; the recorder's file name carries the same start time and pid
    plus random hex, and is what an archive entry still knows of its source. Headers written by
    hand (without those fields) identify nothing: such files are only ever told apart by path.
    """
    return tuple(key for key in (run_key(header), name_key(path)) if key is not None)


def run_key(header: dict[str, Any]) -> bytes | None:
    """The identity key of the recording run and part a header names (see `_identity`); None for a
    header written by hand without them. Unlike the file name's key, no other capture shares it."""
    run = tuple(header.get(k) for k in ("started", "host", "recorder_pid", "transport", "server", "part"))
    if run[0] is None or run[2] is None:
        return None
    try:
        text = orjson.dumps(run)
    except TypeError:
        # an integer past 64 bits: `fmt.read_record` reads a line holding an escape with Python's
        # decoder, which keeps it whole where orjson cannot write it
        text = json.dumps(run, default=repr).encode()
    return _key(b"run:" + text)


def name_key(path: str) -> bytes | None:
    """The identity key of a recorder's file name (see `_identity`); None for another name."""
    name = strip_compression(os.path.basename(path))  # a part and its logrotated copy are the same part
    if not _RECORDER_NAME.match(name):
        return None
    return _key(b"name:" + name.encode("utf-8", "surrogateescape"))


def _key(text: bytes) -> bytes:
    # a digest, not the text: 100,000 small captures hold two keys each until they are combined
    return hashlib.blake2b(text, digest_size=16).digest()


def part_identity(path: str, header: dict[str, Any]) -> tuple[bytes, ...]:
    """What names a capture part whatever its file is called (its header's run and part, its
    recorder file name without `.gz`/`.zst`); empty for headers written by hand (see `_identity`)."""
    return _identity(path, header)


def not_regular(path: str) -> str | None:
    """Why `path` is not read as a file (a FIFO would block forever), or None for a regular file.

    Raises `ErascopeError` for a path that cannot be looked at (gone since it was found, say).
    """
    try:
        mode, _ = storage.mode_size(path)
    except FileNotFoundError:
        if not is_url(path) and os.path.islink(path):
            return "a dangling symbolic link"
        raise InputError(f"cannot read {path}: No such file or directory") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode) and not is_url(path):
        # only a directory that could not be listed is an input (`find_inputs`): say why
        try:
            os.listdir(path)
        except OSError as exc:
            raise InputError(f"cannot read directory {path}: {exc.strerror or exc}") from None
    kind = (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a directory"
        if stat.S_ISDIR(mode)
        else "a device"
    )
    return f"not a regular file ({kind})"


def _pieces(f: BinaryIO, size: int) -> Iterator[bytes]:
    """The file in pieces of about `size` bytes, each cut after a newline (only the last may lack one).

    A line longer than `size` makes its piece longer: lines are never split.
    """
    while piece := f.read(size):
        cut = piece.rfind(b"\n") + 1
        ended = len(piece) < size  # a buffered read gives less only at the end
        if cut == 0:
            # a line longer than a piece: its reads are joined once (joined at each read, a line of L
            # bytes cost L²/size bytes copied)
            parts, length = [piece], len(piece)
            while cut == 0 and (more := f.read(size)):
                last = more.rfind(b"\n")
                cut = 0 if last < 0 else length + last + 1
                parts.append(more)
                length += len(more)
                ended = len(more) < size
            piece = b"".join(parts)
        if 0 < cut < len(piece) and ended:
            # the end's last line without its newline: what a read after the cut would give (an
            # object at a URL would be asked for it again)
            yield piece[:cut]
            yield piece[cut:]
            return
        if 0 < cut < len(piece):
            # Seeking back to the cut instead of carrying the rest over saves copying every piece twice.
            f.seek(cut - len(piece), os.SEEK_CUR)
            piece = piece[:cut]
        yield piece


def _fast_scan(piece: bytes, first_line: int, *, headers_as_text: bool = False) -> pl.LazyFrame:
    """Path 1: a strict NDJSON scan; raises on the first bad line.

    `headers_as_text` reads `headers` as text (`_TEXT_HEADERS_SCHEMA`), which `_read` checks.
    """
    schema = _TEXT_HEADERS_SCHEMA if headers_as_text else RECORD_SCHEMA
    return pl.scan_ndjson(piece, schema=schema, ignore_errors=False).with_row_index("line", offset=first_line)


def _lines_scan(piece: bytes, first_line: int) -> pl.LazyFrame:
    """Paths 2 and 3: the piece as lines, `rtype` null on every line that is not a record."""
    return pl.scan_lines(piece, name="text", row_index_name="line", row_index_offset=first_line).with_columns(
        rtype=pl.col("text").str.json_path_match("$.type")
    )


_REASON: Final = (
    pl.when(pl.col("text").str.strip_chars() == "")
    .then(pl.lit("empty line"))
    .when(pl.col("text").str.json_path_match("$").is_null())
    .then(pl.lit("not valid JSON"))
    .when(~pl.col("text").str.strip_chars_start().str.starts_with("{"))
    .then(pl.lit("not a JSON object"))
    .otherwise(pl.lit("no record type"))
)


_INT64: Final = range(-(1 << 63), 1 << 63)


def _fits(value: Any, dtype: pl.DataType) -> bool:
    """Whether the NDJSON reader takes `value` for a field of `dtype` (checked against polars 2.1:
    any value fits a string, which gets its JSON text; numbers and booleans must be of their kind)."""
    if isinstance(dtype, pl.String):
        return True
    if isinstance(dtype, pl.Int64):
        return isinstance(value, int) and not isinstance(value, bool) and value in _INT64
    if isinstance(dtype, pl.Float64):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(dtype, pl.Boolean):
        return isinstance(value, bool)
    if dtype == pl.List(pl.String()):  # e.g. a spawn's parent_argv
        return isinstance(value, list) and all(isinstance(x, str) for x in value)
    if isinstance(dtype, pl.List):  # headers: a list of [name, value] lists
        return isinstance(value, list) and all(isinstance(pair, list) for pair in value)
    return True


def _type_error(obj: dict[str, Any], fields: Iterable[str] = RECORD_SCHEMA) -> str | None:
    """Why a decoded record does not fit RECORD_SCHEMA in `fields`, or None when it does."""
    for name in fields:
        value = obj.get(name)
        if value is not None and not _fits(value, RECORD_SCHEMA[name]):
            return f"field {name!r} has the wrong type ({type(value).__name__})"
    return None


def _decoded(text: str) -> Any:
    """`text` decoded, for the types of its fields; None when it cannot be.

    orjson is the fast one, but it refuses some JSON the reader reads (a lone surrogate escape):
    Python's decoder reads those, so their types are judged without a reading each (`_halved`)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # deeper than Python reads, say
        return None


def _why_refused(text: str, fields: Iterable[str]) -> str:
    obj = _decoded(text)
    return (isinstance(obj, dict) and _type_error(obj, fields)) or "a field does not fit the record schema"


def _checked_fields(options: LoadOptions | None) -> tuple[str, ...]:
    """The fields a reading checks the type of: those the messages read, and what `_read` counts."""
    fields = read_fields() | {"type", "lost"} | ({"raw"} if options is not None and options.keep_raw else set())
    return tuple(name for name in RECORD_SCHEMA if name in fields)


def _suspects(lines: pl.DataFrame, options: LoadOptions | None) -> dict[int, str]:
    """Positions in `lines` of the lines with a field of the wrong type, and why, judged in Python
    by the reader's own rules on the fields it reads (`_fits`): one decoding per line instead of a
    reading per line. Lines that cannot be decoded (`_decoded`) are left to the reader."""
    fields = _checked_fields(options)
    found = {}
    for n, text in enumerate(lines.get_column("text")):
        obj = _decoded(text)
        why = _type_error(obj, fields) if isinstance(obj, dict) else None
        if why is not None:
            found[n] = why
    return found


def _read(
    facts: FileFacts,
    records: pl.LazyFrame,
    options: LoadOptions | None,
    robust: bool,
    batches: bool = False,
    http: bool = True,
    rare: bool = True,
    lines: int | None = None,
    deep: bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame, bool] | None:
    """Record counts per type, the messages rows and whether the robust id reading was needed.

    `lines`: the lines `records` were scanned from, one record each (`_read_piece`); raises
    `_LinesShifted` when the reader read another number of records, before anything is noted of
    their line numbers.

    One streaming pass where polars can. Raises `PolarsError` when the records cannot be read this
    way (the caller picks another path). Returns None when `headers` was read as text and some
    record's headers do not have the shape that text carries exactly (`HEADERS_AS_TEXT`).

    A JSON-RPC batch is a row per member (`analyzer.messages.MEMBER_SLOTS`): a piece that holds
    one is read again with `batches` (the rare case pays for splitting, not every piece).

    `http=False` reads with the plan that leaves out the HTTP and SSE expressions (see
    `messages_from_records`); records of those types read that way are read again with `http=True`.
    `rare=False`: no record holds a surrogate's escape and no payload a `\\u` escape of its own
    (`_lone_surrogates_as_text`); a piece whose rows need the rare reading all the same
    (`RARE_READS`) is read again with it, and one whose payloads may nest past what `json_path_match`
    reads (`DEEP_READS`) with `deep`.
    """
    plain = records
    headers_as_text = records.collect_schema()["headers"] == pl.String()
    labels: dict[str, Any] = {
        "file": display_name(facts.file),
        "capture": display_name(facts.capture),
        "transport": facts.transport,
    }
    if isinstance(facts, _Batch):  # many files in one text: each row's file from its line number
        records, labels = facts.locate(records)
    records = records.with_columns(pl.col("line").cast(pl.UInt32))
    for attempt in (True,) if robust else (False, True):
        # The fast reading of id/method raises on an id that is an object or array; then the
        # slower one that never raises (see `messages_from_records`). One pass over the piece gives
        # both the counts and the messages: every record keeps a row until counted.
        extra = {"_type": pl.col("type"), "_lost": pl.col("lost"), "_undecodable": pl.col("undecodable")}
        if isinstance(facts, _Batch):
            extra["_f"] = pl.col("_f")
        if headers_as_text:
            extra["_bad_headers"] = ~pl.col("headers").str.contains(HEADERS_AS_TEXT).fill_null(True)
        if options is not None and options.keep_raw:
            extra["raw"] = pl.col("raw")
        extra["_batch"] = pl.col("_batch") if batches else is_batch()
        if batches:
            extra["_member"] = pl.col("_member")
        rows = messages_from_records(
            records,
            **labels,
            robust=attempt,
            all_records=True,
            categorical=True,
            flow_ids=options is not None and options.keep_raw,  # archives keep the ids
            extra=extra,
            batches=batches,
            http=http,
            rare=rare,
            deep=deep,
        )
        try:
            df = rows.collect(engine="streaming")
        except pl.exceptions.PolarsError:
            if attempt:
                raise
            continue
        if headers_as_text:
            if df.get_column("_bad_headers").any():
                return None
            df = df.drop("_bad_headers")
        if not deep and df.get_column(DEEP_READS).any():
            return _read(facts, plain, options, attempt, batches, http=http, rare=True, lines=lines, deep=True)
        if not rare and df.get_column(RARE_READS).any():
            return _read(facts, plain, options, attempt, batches, http=http, rare=True, lines=lines)
        if not batches and df.get_column("_batch").any():
            return _read(facts, plain, options, attempt, batches=True, http=http, rare=rare, lines=lines, deep=deep)
        by = ["_f", "_type"] if isinstance(facts, _Batch) else ["_type"]
        # records are counted once, not once per batch member
        record = pl.col("_member") == 0 if batches else pl.lit(True)
        undecodable = pl.col("_undecodable").is_not_null() & record
        counts = df.group_by(by).agg(
            n=record.sum().cast(pl.UInt32) if batches else pl.len(),
            lost=pl.col("_lost").max(),
            undecodable=undecodable.sum(),
            undecodable_line=pl.col("line").filter(undecodable).min(),
        )
        counts = counts.rename({"_type": "type"})
        types = counts.get_column("type")
        if lines is not None and (int(counts.get_column("n").sum()) != lines or (http and types.null_count())):
            # Blank lines are skipped by the NDJSON reader (row numbers shift), and a record without
            # `type` reads as nulls: the piece goes to the line path, its headers not noted here
            raise _LinesShifted
        if not http and (types.is_in(HTTP_RECORD_TYPES).any() or types.null_count()):
            # rows of those types need the whole plan
            return _read(facts, plain, options, robust, batches, rare=rare, lines=lines, deep=deep)
        if counts.get_column("type").is_in(MESSAGE_RECORD_TYPES).all(ignore_nulls=False):
            msgs = df  # most pieces hold only messages: no copy of every column
        else:
            msgs = df.filter(pl.col("_type").is_in(MESSAGE_RECORD_TYPES))
        if batches:
            msgs = spread_batch_answers(msgs).drop("_member")
        if options is not None and options.selection is not None and not options.selection.everything:
            msgs = msgs.filter(options.selection.expr())  # after counting: the accounting is the whole file's
        unread = (() if http else (HTTP_READS,)) + (() if rare else (RARE_READS,)) + (() if deep else (DEEP_READS,))
        if (facts.joined or types.eq(fmt.HEADER).any()) and _note_joined(facts, plain, df):
            msgs = _relabelled(facts, msgs)
        return counts, msgs.drop("_type", "_lost", "_undecodable", "_batch", *by[:-1], *unread), attempt
    raise AssertionError("unreachable")


class _LinesShifted(Exception):
    """The NDJSON reader read another number of records than the piece has lines (`_read`'s `lines`)."""


class _JoinedInBatch(Exception):
    """A file read in a batch holds a capture joined after its own: the batch is read again file
    by file (`_read_batch`), where a file's reading keeps track of where each capture starts."""


def _note_joined(facts: FileFacts, plain: pl.LazyFrame, df: pl.DataFrame) -> bool:
    """Add the captures that start inside the rows `df` read (a header after line 1, see `Joined`)
    to `facts.joined`; whether the rows need labelling apart (some capture starts at or before them).

    A rotated part's header (`part` > 0: `cat x.000.jsonl x.001.jsonl`) goes on with the capture
    before it, whose `seq` numbers it continues: noted with that capture's label. A reading read
    again (another plan, the robust id reading) finds the same headers: a line noted already is not
    noted twice (pieces are read in order, so those are the lines up to the last one noted).
    """
    heads = df.get_column("line").filter(df.get_column("_type") == fmt.HEADER)
    # read without some lines (`FileFacts.repeated`, `FileFacts.refused`), a file holds the notes of
    # their headers already
    noted = facts.joined[-1].line if facts.joined and not (facts.repeated or facts.refused) else 1
    lines = heads.filter(heads > noted).to_list()
    if lines:
        if isinstance(facts, _Batch):
            raise _JoinedInBatch
        found = plain.filter(pl.col("line").is_in(lines)).select("line", "transport", "part").collect()
        joined = list(facts.joined)
        _note_heads(facts, joined, found.sort("line").iter_rows())
        facts.joined = tuple(joined)
    return bool(facts.joined)


def _note_heads(facts: FileFacts, joined: list[Joined], heads: Iterable[tuple[int, Any, Any]]) -> None:
    """Note the headers (line, transport, part; in line order) in `joined`, in line order, each once."""
    for line, transport, part in heads:
        at = bisect.bisect_left(joined, line, key=lambda j: j.line)
        if at < len(joined) and joined[at].line == line:
            continue
        if _goes_on(part):  # the next part of the capture before it: its label goes on
            before = joined[at - 1] if at else Joined(1, display_name(facts.capture), facts.transport)
            note = Joined(int(line), before.capture, before.transport)
        else:
            note = Joined(int(line), f"{display_name(facts.capture)}@{line}", _transport({"transport": transport}))
        joined.insert(at, note)


def _goes_on(part: Any) -> bool:
    """Whether a joined header's `part` makes it the next part of the capture before it: a number
    other than 0, as the reader reads `part` (a line with any other value is no record to it)."""
    return isinstance(part, int) and not isinstance(part, bool) and part != 0


def _relabelled(facts: FileFacts, msgs: pl.DataFrame) -> pl.DataFrame:
    """`msgs` with each row's capture and transport those of the capture its line is in (`Joined`)."""
    starts = pl.Series([j.line for j in facts.joined], dtype=pl.UInt32)
    at = starts.search_sorted(msgs.get_column("line").cast(pl.UInt32), side="right")
    labels = {
        "capture": [display_name(facts.capture), *(j.capture for j in facts.joined)],
        "transport": [facts.transport, *(j.transport for j in facts.joined)],
    }
    return msgs.with_columns(
        pl.Series(name, values, dtype=pl.String).gather(at).cast(msgs.schema[name]) for name, values in labels.items()
    )


def _read_lists(
    facts: FileFacts,
    records: pl.LazyFrame,
    options: LoadOptions | None,
    robust: bool,
    http: bool = True,
    rare: bool = True,
    lines: int | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, bool]:
    """`_read` of records whose `headers` are lists (never None then)."""
    read = _read(facts, records, options, robust, http=http, rare=rare, lines=lines)
    assert read is not None
    return read


@dataclass
class _Piece:
    counts: pl.DataFrame
    messages: pl.DataFrame
    bad: list[BadLine]
    traffic: Traffic | None = None
    """Set on the last piece of a chunk once it is condensed (see `_read_pieces`)."""


def _http_plan(facts: FileFacts) -> bool:
    """Whether a file's pieces are read with the HTTP expressions (`_read`'s `http`): all but those
    of a stdio capture. Its header only makes the plan without them likely right; each piece's own
    record types decide (a piece holding HTTP or SSE records is read again with them)."""
    return isinstance(facts, _Batch) or facts.transport != fmt.STDIO


def _read_piece(
    facts: FileFacts, piece: bytes, first_line: int, lines: int, robust: bool, options: LoadOptions | None
) -> tuple[bool, _Piece]:
    """Read one piece (`lines` lines); returns it and whether it needed the robust id reading."""
    http = _http_plan(facts)
    piece, rare = _lone_surrogates_as_text(piece)
    try:
        scan = _fast_scan(piece, first_line, headers_as_text=True)
        read = _read(facts, scan, options, robust, http=http, rare=rare, lines=lines)
        if read is None:  # headers the text cannot carry exactly: read them as lists
            read = _read_lists(facts, _fast_scan(piece, first_line), options, robust, http, rare, lines)
        counts, msgs, used = read
        return used, _Piece(counts, msgs, [])
    except (pl.exceptions.PolarsError, _LinesShifted):
        pass
    return _read_bad_piece(facts, piece, first_line, robust, options, rare)


def _read_bad_piece(
    facts: FileFacts, piece: bytes, first_line: int, robust: bool, options: LoadOptions | None, rare: bool
) -> tuple[bool, _Piece]:
    """A piece with bad lines (path 2): locate them, and read the others as path 1 reads them."""
    piece, not_utf8 = _without_invalid_utf8(piece, first_line)
    lines_lf = _lines_scan(piece, first_line)
    unread = (
        lines_lf.filter(pl.col("rtype").is_null()).select("line", "text", reason=_REASON).collect(engine="streaming")
    )
    good = lines_lf.filter(pl.col("rtype").is_not_null()).select("line", "text").collect(engine="streaming")
    # `json_path_match` (serde_json) refuses lines the reader (simd-json) reads, such as a lone
    # surrogate escape: the reader has the last word on them, as it has on a piece of good lines.
    records, untyped = _read_by_the_reader(unread)
    if records:
        good = pl.concat([good, unread[records].select("line", "text")]).sort("line")
    at = pl.int_range(pl.len())
    reasons = unread.select(
        "line",
        reason=pl.when(at.is_in(untyped)).then(pl.lit("no record type")).otherwise("reason"),
    ).filter(~at.is_in(records))
    bad = [BadLine(facts.file, int(n), "not valid UTF-8" if n in not_utf8 else r) for n, r in reasons.iter_rows()]
    # Nothing else wrong with the piece: the reader refused a field's type, so the lines are found
    # by their types before reading (one reading saved); otherwise only if the reader refuses.
    read = None if not bad else _read_lines(facts, good, options, robust, rare)
    for by_type in (True, False):
        if read is not None:
            break
        # The reader refuses the batch: a field of the wrong type. The lines are found by their
        # types first (as cheap as reading them); halving finds any the reader refuses otherwise.
        if by_type:
            refused = _suspects(good, options)
        else:
            fields = _checked_fields(options)
            found = _refused(facts, good, options, robust, rare)
            refused = {n: _why_refused(good.item(n, "text"), fields) for n in found}
        numbers = good.get_column("line")
        bad += [BadLine(facts.file, int(numbers[n]), why) for n, why in refused.items()]
        good = good.with_row_index("_n").filter(~pl.col("_n").is_in(list(refused))).drop("_n")
        read = _read_lines(facts, good, options, robust, rare)
    if read is None:  # refused as a batch though no line alone is: never seen, but never fatal
        bad += [BadLine(facts.file, int(n), "refused with the lines around it") for n in good.get_column("line")]
        read = _read_lines(facts, good.clear(), options, robust, rare)
        assert read is not None
    counts, msgs, used = read
    types = _types(good) if counts.get_column("type").null_count() else None
    if types is not None:
        # `json_path_match` took the last of two `type` keys, the reader the first, a null one: a
        # line without a record type, as the reader reads it (rare: only then is it asked)
        untyped = types.is_null()
        bad += [BadLine(facts.file, int(n), "no record type") for n in good.get_column("line").filter(untyped)]
        read = _read_lines(facts, good.filter(~untyped), options, robust, rare)
        assert read is not None  # the lines it read already
        counts, msgs, used = read
    return used, _Piece(counts, msgs, sorted(bad))


def _without_invalid_utf8(piece: bytes, first_line: int) -> tuple[bytes, set[int]]:
    """`piece` with every line that is not valid UTF-8 blanked, and those lines' numbers.

    Polars refuses a whole text with invalid UTF-8 in it, so such lines are taken out before it
    reads the piece as lines (their newline stays: line numbers do not move). A recorder cut by a
    kill or a full disk can end a file inside a multi-byte character. Only ever run on a piece that
    failed the fast reading; checking it whole first costs a few milliseconds per 8 MiB.
    """
    try:
        piece.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        return piece, set()
    lines = piece.split(b"\n")
    bad: set[int] = set()
    for n, line in enumerate(lines):
        if line.isascii():
            continue
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            lines[n] = b" "  # blank, not empty: an empty last line would not be read as a line
            bad.add(first_line + n)
    return b"\n".join(lines), bad


def _read_lines(
    facts: FileFacts, lines: pl.DataFrame, options: LoadOptions | None, robust: bool, rare: bool = True
) -> tuple[pl.DataFrame, pl.DataFrame, bool] | None:
    """`_read` of record lines (`line`, `text`) scanned as NDJSON again; None when the reader refuses one."""
    if lines.is_empty():
        records = pl.LazyFrame(schema={"line": pl.UInt32(), **RECORD_SCHEMA})
    else:
        numbers = lines.lazy().select(_n=pl.int_range(pl.len(), dtype=pl.UInt32), line=pl.col("line"))
        records = (
            pl.scan_ndjson("\n".join(lines.get_column("text")).encode(), schema=RECORD_SCHEMA)
            .with_row_index("_n")
            .join(numbers, on="_n", how="left", maintain_order="left")
            .drop("_n")
        )
    try:
        return _read_lists(facts, records, options, robust, rare=rare)
    except pl.exceptions.PolarsError:
        return None


def _refused(
    facts: FileFacts, lines: pl.DataFrame, options: LoadOptions | None, robust: bool, rare: bool
) -> list[int]:
    """The positions in `lines` of the lines the reading refuses, found by halving (`_halved`): by
    the same reading as every other line (the fields the analysis reads, with their types)."""
    return _halved(lines, lambda part: _read_lines(facts, part, options, robust, rare) is not None)


def _halved(lines: pl.DataFrame, reads: Callable[[pl.DataFrame], bool]) -> list[int]:
    """The positions in `lines` (a batch `reads` refuses) of the lines `reads` refuses, found by halving.

    The NDJSON reader names no line when it refuses a batch; halving the batch until one line is
    left finds them in a few readings when they are few.
    """
    if lines.height == 1:
        return [0]
    mid = lines.height // 2
    found = []
    for offset, part in ((0, lines.head(mid)), (mid, lines.slice(mid))):
        if not reads(part):
            found += [offset + n for n in _halved(part, reads)]
    return found


_TYPE_ONLY: Final = {"type": pl.String()}


def _types(lines: pl.DataFrame) -> pl.Series | None:
    """The `type` the NDJSON reader reads on each line of `lines` (`text`), or None when it refuses one.

    Only `type` is asked for: the reader parses every line whole whatever the schema, so this is
    its judgement of the JSON; the types of the other fields are judged when the records are read.
    """
    try:
        types = pl.scan_ndjson("\n".join(lines.get_column("text")).encode(), schema=_TYPE_ONLY).collect()
    except pl.exceptions.PolarsError:
        return None
    # blank lines are never asked about; a row count that moved anyway would misplace every line
    return types.get_column("type") if types.height == lines.height else None


def _read_by_the_reader(unread: pl.DataFrame) -> tuple[list[int], list[int]]:
    """Of the lines `json_path_match` found no record type on (`line`, `text`, `reason`), the
    positions of those the NDJSON reader reads as records, and of those it reads as objects without
    a type ("no record type" whatever `json_path_match` made of them).

    The two parsers differ: serde_json refuses a lone surrogate escape, a value nested deeper than
    128 levels and takes the last of two `type` keys; simd-json takes them, up to 1024 levels, and
    the first `type`. Every line that may be read (`_may_be_read`) is asked of the reader in one
    reading; when it refuses some, halving finds them. The lines certain to be refused are never
    asked, so a piece of many bad lines costs no reading per line.
    """
    shaped = (
        pl.col("text").str.strip_chars(" \t\r").str.starts_with("{")
        & pl.col("text").str.strip_chars(" \t\r").str.ends_with("}")
        & (pl.col("reason") != "not a JSON object")
    )
    maybe = unread.with_row_index("_n").filter(shaped)
    maybe = maybe.filter(pl.Series([_may_be_read(t) for t in maybe.get_column("text")], dtype=pl.Boolean))
    if maybe.is_empty():
        return [], []
    types = _types(maybe)
    if types is None:
        refused = _halved(maybe, lambda part: _types(part) is not None)
        maybe = maybe.with_row_index("_m").filter(~pl.col("_m").is_in(refused)).drop("_m")
        types = None if maybe.is_empty() else _types(maybe)
        if types is None:  # refused as a batch though no line alone is: never seen; they stay bad
            return [], []
    at = maybe.get_column("_n")
    return at.filter(types.is_not_null()).to_list(), at.filter(types.is_null()).to_list()


_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"')


def _finite_int(text: str) -> float:
    return finite(text)  # a float: int() of many digits is slow, and refused past 4300 of them


def _may_be_read(text: str) -> bool:
    """Whether the NDJSON reader may read `text` as an object: False only when it certainly refuses it.

    A line the reader refuses costs a reading of its own to find (`_halved`), a line it reads
    nothing more; so this leaves to the reader whatever it is not sure of. Python's JSON decoder
    takes what the reader takes (lone surrogate escapes included) and more: what more it takes
    and the reader does not is refused here (NaN, numbers past a double's range, unpaired low
    surrogates, nesting past `MAX_DEPTH`).
    """
    try:
        obj = json.loads(text, parse_constant=refuse_constant, parse_float=finite, parse_int=_finite_int)
    except RecursionError:
        return _depth(text) <= MAX_DEPTH
    except ValueError:  # JSONDecodeError is one
        return False
    if not isinstance(obj, dict):
        return False
    if "\\u" in text and not surrogates_read(text):
        return False
    # deeper than the reader reads takes that many brackets (counted first: measuring costs more)
    return text.count("[") + text.count("{") <= MAX_DEPTH or _depth(text) <= MAX_DEPTH


_SURROGATE_ESCAPE: Final = re.compile(
    rb"\\u(?:[dD][89abAB]|005[cC]"
    # a low one's, but not right after a high one's escape (a line's own pair, found by its high
    # one) or its text in a payload (an escaped emoji's second half, found by its first)
    rb"|(?<!(?<!\\)\\u[dD][89abAB][0-9a-fA-F]{2}\\u)(?<!\\u[dD][89abAB][0-9a-fA-F]{2}\\\\u)[dD][c-fC-F]"
    # any escape of a payload's (`\\u` in the line): a member name may be written with one, which the
    # messages reading writes plainly (`analyzer.messages.plain_names`); the search visits every `\u`
    # already, so a piece without one pays nothing more
    rb"|(?<=\\\\u))"
)
"""A surrogate's escape, or the same text after an escaped backslash (`\\\\ud83d` in a payload
that escapes its emoji): `_starts_escape` tells them apart. Or a backslash's escape (`\\u005c`),
which may stand for the backslash of a payload's own escape. Or any escape of a payload's own
(`\\\\u0072`, found at its second backslash)."""


def _lone_surrogates_as_text(piece: bytes) -> tuple[bytes, bool]:
    r"""`piece` with every lone surrogate escape written as the escape's text: `"\ud800"` becomes
    `"\\ud800"`, in small letters (`\uD800` is the same JSON string); and whether a payload in it may
    hold one, or any other escape of its own (`analyzer.messages.messages_from_records`'s `rare`).

    The reader reads a high surrogate escape no low one follows as U+0000, so `"s\ud800"`,
    `"s\udbff"` and `"s\u0000"` were one server key (one connection, one client), named `s\x00`:
    a name the capture never wrote. As its text, each is a key of its own, named as `visible` shows
    a lone surrogate; as with a file name's odd byte written `\xff` (`display_name`), the same text
    written plainly (`"s\\ud800"`) is the same key. Done to a piece before anything reads it, so
    every path and every reading (`analyze`, `watch`, `compact`, `verify`'s `read_line`) reads the
    same values. The escapes the reader refuses (a low surrogate alone, `"s\udc00"`, a high one before
    an escape that is not a low one, `"s\ud800\u0041"`) are written so too: a line JSON allows, which
    the reader refused for them alone, is read, as every other reading of a line reads it; a line it
    refuses for anything else is refused still.

    A payload's own escapes (`raw`'s text) are the messages reading's to write so (`raw` stays as
    written): the same search finds them, behind an escaped backslash (`\\ud800`, `\u005cud800`),
    and an escape of the line's that is written as its text becomes one; a piece without any tells it
    so, and no payload of it is searched again.

    A piece without a surrogate's escape costs one search: 4 to 8 ms of CPU per 8 MiB, against
    160 to 570 ms for reading it (bench/README.md, 2026-12-05); only the lines holding one are decoded.
    """
    escapes = [m.start() for m in _SURROGATE_ESCAPE.finditer(piece)]
    found = [at for at in escapes if piece[at + 2] != 0x30 and _starts_escape(piece, at)]  # not `\u005c`
    if not found:
        return piece, bool(escapes)
    parts, done = [], 0
    for at in found:
        if at < done:  # in a line written already
            continue
        start, end = piece.rfind(b"\n", 0, at) + 1, piece.find(b"\n", at)
        end = len(piece) if end < 0 else end
        parts += [piece[done:start], line_as_text(piece[start:end])]
        done = end
    parts.append(piece[done:])
    return b"".join(parts), True


def _starts_escape(data: bytes, at: int) -> bool:
    """Whether the backslash at `at` starts an escape: an even number of backslashes before it."""
    start = at
    while start and data[start - 1] == 0x5C:
        start -= 1
    return (at - start) % 2 == 0


def line_as_text(line: bytes) -> bytes:
    """`line` with its lone surrogate escapes as their text (see `_lone_surrogates_as_text`): the line
    the reader reads."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:  # no line the reader reads
        return line
    written = lone_surrogates_as_text(text)
    return line if written is text else written.encode("utf-8")


def _depth(text: str) -> int:
    """The deepest nesting of objects and arrays in `text` (exact for valid JSON; any line that is
    not is refused by the reader whatever this says)."""
    depth = deepest = 0
    for c in _STRING.sub("", text):
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def _read_pieces(
    facts: FileFacts,
    robust: bool,
    options: LoadOptions | None,
    chunked: bool,
    defer: bool = False,
    spill: Spill | None = None,
    opened: Opened | None = None,
    leave_out: tuple[tuple[int, int], ...] = (),
    refuse: bool = True,
) -> tuple[bool, list[_Piece] | None, int, bool]:
    """Every piece of the file, all with the same id reading: that reading, the pieces, the file's
    line count, and whether its last line is complete (ends in a newline). The lines of the
    `leave_out` ranges (first, last) are not read (`repeats`, `Refused`).

    `refuse`: a capture joined whose header names a format this erascope does not read raises
    `_RefusedJoined` (False once its lines are left out already).

    The robust id reading writes `1.0` where the fast one writes `1`, so a file whose pieces read
    ids differently would read differently from the file read whole. When a later piece needs the
    robust reading, the pieces come back as None and the caller reads the file again with it.

    `chunked`: every `CHUNK_BYTES` of pieces are paired and condensed at once (`_finish_chunk`), so
    a file's messages never all wait in memory; the chunk's result is kept on its last piece.
    `defer`: a file of at most `PIECE_BYTES` is left unpaired, `pending` (see `finish_pending`).
    `spill`: each chunk's moved requests and dropped answers are written there (`spilled`).
    `opened`: the file opened already (for its header), read from its start and closed here.
    """
    parts: list[_Piece] = []
    open_from, open_bytes = 0, 0
    lines = 0
    complete = True
    with opened or Opened(facts.file) as f:
        compressed = f.compressed
        read = pieces(f.reader, PIECE_BYTES, f.head) if compressed else _pieces(f.reader, PIECE_BYTES)  # type: ignore[arg-type]
        for piece in read:
            complete = piece.endswith(b"\n")
            count = piece.count(b"\n") + (0 if complete else 1)
            for kept, first, n in _kept_lines(piece, lines + 1, count, leave_out):
                noted = {j.line for j in facts.joined} if refuse else set()
                needed, part = _read_piece(facts, kept, first, n, robust, options)
                if refuse and _refuses_any(facts, kept, first, noted):
                    raise _RefusedJoined
                if needed != robust:
                    if parts:
                        return needed, None, 0, complete
                    robust = needed
                parts.append(part)
                open_bytes += len(kept)
            lines += count
            if chunked and open_bytes >= CHUNK_BYTES:
                _finish_chunk(parts[open_from:], spill)
                open_from, open_bytes = len(parts), 0
        facts.cut = f.cut
    if defer and open_from == 0 and open_bytes <= PIECE_BYTES and not facts.joined:
        # a small file: left for `finish_pending`. Not one of joined captures: `repeats` may read it
        # again, and a group's aggregates, its own among them, stay with the group's first file
        facts.pending = True
    elif chunked and open_from < len(parts):
        _finish_chunk(parts[open_from:], spill)
    return robust, parts, lines, complete


def _left_out_notes(
    facts: FileFacts, heads: tuple[Head, ...], ranges: tuple[tuple[int, int], ...], before: tuple[Joined, ...] = ()
) -> tuple[Joined, ...]:
    """`before` (the notes of the lines read earlier) with the `Joined` notes of the headers in the lines
    left out (`ranges`), as reading every line makes them: a rotated part read after a part left out
    goes on with that part's capture. Reading notes the other headers."""
    notes = list(before)
    _note_heads(facts, notes, ((h.line, h.transport, h.part) for h in heads))
    kept = {j.line for j in before}
    return tuple(n for n in notes if n.line in kept or inside(ranges, n.line))


def _kept_lines(
    piece: bytes, first_line: int, count: int, leave_out: tuple[tuple[int, int], ...]
) -> Iterator[tuple[bytes, int, int]]:
    """`piece` (lines `first_line` on, `count` of them) without the lines of the `leave_out` ranges
    (sorted, apart: `_merged`): each run of lines kept, its first line and how many."""
    last_line = first_line + count - 1
    cuts = []
    # found by bisection: a file of many captures read again has as many ranges, and as many pieces
    for a, b in itertools.islice(leave_out, bisect.bisect_left(leave_out, first_line, key=lambda r: r[1]), None):
        if a > last_line:
            break
        cuts.append((max(a, first_line), min(b, last_line)))
    if not cuts:
        yield piece, first_line, count
        return
    at, line = 0, first_line  # the offset where `line` starts
    for first, last in cuts:
        start = _line_start(piece, at, first - line)
        if first > line:
            yield piece[at:start], line, first - line
        at, line = _line_start(piece, start, last - first + 1), last + 1
    if line <= last_line:
        yield piece[at:], line, last_line - line + 1


def _merged(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sorted line ranges, those that overlap or touch made one."""
    out: list[tuple[int, int]] = []
    for a, b in ranges:
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def _line_start(piece: bytes, at: int, lines: int) -> int:
    """The offset of the line `lines` lines after the one starting at `at` (the end past the last)."""
    for _ in range(lines):
        newline = piece.find(b"\n", at)
        if newline < 0:
            return len(piece)
        at = newline + 1
    return at


def _finish_chunk(pieces: list[_Piece], spill: Spill | None = None) -> None:
    """Pair and condense the messages of consecutive pieces; the result replaces them.

    With a `spill`, the moved requests and dropped answers go there at once: a big file's would
    otherwise wait in memory until the file is read to its end.
    """
    frames = [p.messages for p in pieces]
    messages = frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical", rechunk=False)
    kept, traffic = condense(pair_responses(messages))
    if spill is not None:
        traffic = spilled(traffic, spill)
    for p in pieces:
        p.messages, p.traffic = p.messages.clear(), None
    pieces[-1].messages, pieces[-1].traffic = kept, traffic


def extract_file(
    path: str,
    options: LoadOptions | None = None,
    *,
    defer: bool = False,
    spill: Spill | None = None,
    opened: Opened | None = None,
    leave_out: tuple[Repeated, ...] = (),
    heads: tuple[Head, ...] = (),
) -> FileFacts:
    """Read one capture file into its messages rows and its input accounting.

    Independent of every other file (safe to run in parallel). A file whose first line is not an
    erascope header, and a path that is not a regular file (a FIFO would block), are returned with
    `skipped` set. Raises `InputError` for an unreadable or vanished file or an unknown format major
    version (`UnknownMajor`; `extract_files` notes it and reads the other files).

    `defer=True` leaves a file of at most `PIECE_BYTES` `pending` (read, not yet paired and
    condensed): `finish_pending` finishes many such files at once. With a `spill`, the rows
    condensing moves out are written there as each chunk is condensed (`analyzer.spill`).
    `opened`: the file opened already for its header (`Opened`), read from there and closed here.
    `leave_out`: its lines holding capture parts read already from other files (`repeats`), not read.
    `heads`: the headers after its first line (`_headers_in`), given with `leave_out`: a rotated part
    read after a part left out goes on with that part's capture, whose header is not read.

    A capture joined whose header names a format this erascope does not read (FORMAT.md, Versioning) is
    not read, up to the next header (`FileFacts.refused`): the file is read again without its lines
    when its reading finds one, or without them at once when `heads` are given.
    """
    if is_source_entry(path):  # the Parquet branch (`analyzer.archive`)
        return _read_archived([path], options, spill)[0]
    facts = FileFacts(file=path, capture=capture_id(path))
    if opened is None:
        facts.skipped = not_regular(path)
        if facts.skipped is not None:
            return facts
        try:
            # opened once for the header and the pieces: an object's first bytes are fetched once
            opened = Opened(path, _HEADER_LIMIT)
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        first = opened.first
        header = _header_of(path, first)
        if header is None:
            cut = opened.cut
            opened.close()
            try:
                kind = foreign_kind(path)
            except OSError as exc:
                raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
            if kind is not None:
                return _extract_foreign(facts, kind, options)
            if cut is not None:  # not "not a capture": what it is cannot be told from so little
                raise InputError(f"{path}: {cut} within its first line, which tells nothing of what it held")
            facts.skipped = not_a_capture(path, first)
            return facts
        facts.capture = capture_id(path, header)
        facts.identity = _identity(path, header)
        facts.transport = _transport(header)
        facts.repeated = leave_out
        searched = bool(heads)
        facts.refused = _refused_parts(heads) if searched else ()
        robust = False
        parts: list[_Piece] | None = None
        opts = options or LoadOptions()
        chunked = opts.condense and not opts.keep_raw
        first_opened = opened
        while parts is None:  # read again (opened anew) when a later piece needs the robust reading
            ranges = _merged(sorted((r.first, r.last) for r in (*leave_out, *facts.refused)))
            facts.joined = _left_out_notes(facts, heads, ranges)
            try:
                robust, parts, total, complete = _read_pieces(
                    facts, robust, options, chunked, defer and chunked, spill, opened, ranges, not searched
                )
            except _RefusedJoined:
                # rare: the headers of the whole file bound the captures not read, and it is read again
                heads, lines = _headers_in(path)
                searched = True
                facts.refused, facts.cut, facts.pending = _refused_parts(heads, lines), None, False
                if not facts.refused:  # its lines are no longer those just read: never read them as erascope/1's
                    raise InputError(f"cannot read {path}: it changed while it was read") from None
                robust, parts = False, None
            opened = None if parts is not None else first_opened.again()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        if opened is not None:
            opened.close()
    # a capture refused at the end of the file ends with it
    facts.refused = tuple(replace(r, last=min(r.last, max(total, r.first))) for r in facts.refused)
    if not parts:
        return facts  # emptied since its header was read, or every line left out
    for b in sorted(b for part in parts for b in part.bad):
        if b.line == total and not complete:  # the last line without its newline: cut while written
            cut = f"; {facts.cut}" if facts.cut else ""
            facts.torn = BadLine(b.file, b.line, f"torn last line ({b.reason}{cut})")
        else:
            facts.malformed.append(b)
    if facts.cut and facts.torn is None:  # cut right after a newline: what followed is lost all the same
        facts.torn = BadLine(path, total + 1, f"nothing after line {total}: {facts.cut}")
    counts = (
        pl.concat([part.counts for part in parts])
        .group_by("type")
        .agg(pl.col("n", "undecodable").sum(), pl.col("lost").max(), pl.col("undecodable_line").min())
    )
    facts.counts = {str(t): int(n) for t, n in counts.select("type", "n").sort("type").iter_rows()}
    facts.records = records_of(facts.counts)
    facts.lost = int(counts.filter(pl.col("type") == fmt.CAPTURE_ERROR).get_column("lost").max() or 0)
    facts.undecodable = int(counts.get_column("undecodable").sum())
    first = counts.get_column("undecodable_line").min()
    facts.undecodable_line = int(first) if isinstance(first, int) else None
    frames = [part.messages for part in parts if part.messages.height]
    if chunked and not facts.pending:
        set_relinked(facts, frames, [part.traffic for part in parts if part.traffic is not None])
    else:
        facts.messages = pl.concat(frames, how="vertical", rechunk=False) if frames else facts.messages
        if not (chunked or opts.keep_raw):  # archives keep the rows as read; pending ones wait
            finish(facts, condensed=False)
    return facts


def extract_lines(
    path: str,
    data: bytes,
    first_line: int,
    header: dict[str, Any],
    options: LoadOptions | None = None,
    joined: tuple[Joined, ...] = (),
    leave_out: tuple[Repeated, ...] = (),
    heads: tuple[Head, ...] = (),
    refused: tuple[Refused, ...] = (),
) -> FileFacts:
    """Complete lines of capture file `path` (`data` ends with a newline; its first line is line
    `first_line` of the file, whose header record is `header`) as facts of their own, paired and
    condensed: for a reader that follows growing files (`analyzer.watch`). The facts of a file's
    consecutive pieces go to `combine` together, which pairs them again as it pairs rotated parts.

    `joined`: the captures found joined after the file's own in the lines before `data` (the
    previous piece's `FileFacts.joined`); the facts carry them on with those `data` adds.
    `leave_out` and `heads`: as `extract_file`'s, for the lines of `data` (a range may reach past them).
    `refused`: the lines of captures joined whose header names a format this erascope does not read
    (`FileFacts.refused`, as `extract_file` finds them): not read either; the caller names them.
    """
    facts = _lines_facts(path, header, joined)
    ranges = _merged(sorted((r.first, r.last) for r in (*leave_out, *refused)))
    if leave_out or refused:
        facts.repeated = leave_out
        facts.joined = _left_out_notes(facts, heads, ranges, joined)
    parts = [
        _read_piece(facts, kept, first, n, False, options)[1]
        for kept, first, n in _kept_lines(data, first_line, data.count(b"\n"), ranges)
    ]
    if not parts:
        return facts  # every line left out
    facts.malformed = sorted(b for part in parts for b in part.bad)
    _finish_chunk(parts)
    counts = pl.concat([part.counts for part in parts], how="vertical")
    counts = counts.group_by("type").agg(pl.col("n", "undecodable").sum(), pl.col("lost").max())
    facts.counts = {str(t): int(n) for t, n in counts.select("type", "n").iter_rows() if t is not None}
    facts.records = int(counts.get_column("n").sum())
    facts.lost = int(counts.filter(pl.col("type") == fmt.CAPTURE_ERROR).get_column("lost").max() or 0)
    facts.undecodable = int(counts.get_column("undecodable").sum())
    facts.messages = parts[-1].messages
    facts.traffic = parts[-1].traffic if parts[-1].traffic is not None else facts.traffic
    return facts


def malformed_lines(
    path: str, data: bytes, first_line: int, header: dict[str, Any], options: LoadOptions | None = None
) -> list[BadLine]:
    """The malformed lines `extract_lines` finds in `data` (same arguments), found by the same reading
    but with nothing paired or condensed: what a follower asks of a file's last line alone before it
    reads that line with the lines before it (`analyzer.watch`), instead of reading them all twice
    when the line is no record."""
    _, part = _read_piece(_lines_facts(path, header), data, first_line, data.count(b"\n"), False, options)
    return sorted(part.bad)


def _lines_facts(path: str, header: dict[str, Any], joined: tuple[Joined, ...] = ()) -> FileFacts:
    """The facts `extract_lines` fills, as a reading of the lines needs them (labels, transport)."""
    facts = FileFacts(file=path, capture=capture_id(path, header), identity=_identity(path, header), joined=joined)
    facts.transport = _transport(header)
    return facts


def _extract_foreign(facts: FileFacts, kind: str, options: LoadOptions | None) -> FileFacts:
    """A HAR file or mitmproxy dump (`analyzer.foreign`), read as the capture the recorder would have
    written: its records' locations are entry or flow numbers where a capture's are line numbers."""
    from analyzer import foreign  # mitmproxy is imported only when such a file is read

    try:
        with open_stream(facts.file) as f:
            try:
                converted = foreign.convert(kind, io.BufferedReader(f) if isinstance(f, CutStream) else f)
            finally:
                cut = f.cut if isinstance(f, CutStream) else None
    except foreign.ForeignError as exc:
        # a HAR document cut short is no JSON document: the cut is the cause worth saying
        raise InputError(f"{facts.file}: {exc}" + (f"; {cut}" if cut is not None else "")) from None
    except OSError as exc:
        raise InputError(f"cannot read {facts.file}: {exc.strerror or exc}") from None
    facts.transport, facts.unit = fmt.HTTP, foreign.UNITS[kind]
    # no header names it: what it holds does, so that a copy is read once (`extract_files`)
    facts.identity = (_key(b"foreign:" + converted.digest),) if converted.digest else ()
    facts.digest = converted.digest
    facts.malformed = [BadLine(facts.file, n, why) for n, why in converted.unread]
    if cut is not None:
        last = max((n for n, _ in converted.records), default=0)
        facts.torn = BadLine(facts.file, last + 1, f"nothing after {facts.unit} {last}: {cut}")
    numbered = list(foreign.lines(converted))
    rows = pl.DataFrame(
        {"line": [n for n, _ in numbered], "text": [t.decode() for _, t in numbered]},
        schema={"line": pl.UInt32(), "text": pl.String()},
    )
    read = _read_lines(facts, rows, options, False)
    if read is None:  # records this reader wrote itself: never seen
        raise InputError(f"{facts.file}: its records do not fit the capture schema")
    counts, msgs, _ = read
    facts.counts = {str(t): int(n) for t, n in counts.select("type", "n").sort("type").iter_rows()}
    facts.records = records_of(facts.counts)
    facts.messages = msgs
    opts = options or LoadOptions()
    if not opts.keep_raw:
        finish(facts, condensed=opts.condense)
    return facts


def finish_pending(facts: Iterable[FileFacts]) -> None:
    """Pair and condense the `pending` files among `facts`, many at once, as each would be alone.

    Pairing and condensing cost a few milliseconds per call whatever the size, which for a file
    of a few records (a stdio capture per spawn) is more than reading it. Pairing and condensing
    key every row by its capture, so files of different captures are finished together in groups
    of up to `CHUNK_ROWS` rows, and each file gets back exactly its own rows and moved requests.
    Files of one capture (rotated parts, or copies with the same name) never share a group: those
    are paired across files by `combine`.
    """
    group: list[FileFacts] = []
    captures: set[str] = set()
    rows = 0
    for f in facts:
        if not f.pending:
            continue
        if group and (rows >= CHUNK_ROWS or f.capture in captures):
            _finish_group(group)
            group, captures, rows = [], set(), 0
        group.append(f)
        captures.add(f.capture)
        rows += f.messages.height
    if group:
        _finish_group(group)


def _finish_group(files: list[FileFacts]) -> None:
    for f in files:
        f.pending = False
    frames = [f.messages for f in files if f.messages.height]
    if not frames:
        return
    kept, traffic = condense(pair_responses(pl.concat(frames, how="vertical", rechunk=False)))
    # kept rows stay in input order, so each file's are the next `height` rows
    heights = {str(name): int(n) for name, n in kept.group_by("file").len().iter_rows()}
    moved: dict[str, pl.DataFrame] = {}
    if isinstance(traffic.requests, pl.DataFrame):  # just condensed: in memory
        moved = {str(key[0]): part for key, part in traffic.requests.partition_by("file", as_dict=True).items()}
    offset = 0
    for n, f in enumerate(files):
        height = heights.get(display_name(f.file), 0)
        # a file condensed to nothing gets the empty frame a file read alone gets
        f.messages, offset = (kept.slice(offset, height) if height else no_messages()), offset + height
        # the group's aggregates go with its first file: `merge` adds up every file's anyway
        own = moved.get(display_name(f.file))
        f.traffic = replace(traffic, requests=own) if n == 0 else Traffic(requests=own)
    # what they add to the aggregates cannot be taken out again: a copy among them left out has the
    # others read again (`repeats`)
    files[0].read_with = tuple(f.file for f in files[1:])


def _read_archived(entries: list[str], options: LoadOptions | None, spill: Spill | None) -> list[FileFacts]:
    """Archived input files (their `_sources` entries), read together by `analyzer.archive`."""
    read = read_entries(entries, options.selection if options is not None else None, spill)
    for facts in read:
        # as its JSONL was identified; an entry written before entries held that, by its source's name
        facts.identity = facts.identity or _identity(facts.file, {})
    return read


# --- all files -----------------------------------------------------------------------------------
def extract_files(
    paths: list[str],
    options: LoadOptions | None = None,
    *,
    jobs: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    spill: Spill | None = None,
) -> list[FileFacts]:
    """`extract_file` for every path, `jobs` files at a time (default: all cores), in input order;
    small files in batches (`_units`, `_read_batch`). A file that cannot be read gets its
    `FileFacts.error`, a repeat of a capture part read already its `duplicate_of` (see `_units`).

    Threads, not processes: polars releases the GIL while it parses and computes, so threads keep
    every core busy without pickling each file's frame back to the parent, and start instantly
    (bench/README.md has the measurements). `progress(done, total, path)` is called in input order.

    Files of at most one piece (`PIECE_BYTES`) are finished (paired and condensed) together, as soon
    as they add up to `CHUNK_ROWS` rows (`finish_pending`): unpaired rows never pile up.

    With a `spill`, the moved requests and dropped answers are written to it as each chunk is
    condensed, and those of small files as soon as they are finished (`analyzer.condense.spilled`):
    what waits in memory is the kept rows alone.
    """

    def spill_finished(done: list[FileFacts]) -> None:
        if spill is not None:
            for f in done:
                if not f.pending and f.was_read and f.traffic is not NO_TRAFFIC and not f.placed:
                    f.traffic = spilled(f.traffic, spill)

    workers = max(1, min(jobs or os.cpu_count() or 1, len(paths)))
    facts: list[FileFacts] = []
    unfinished, pending_rows = 0, 0
    first_of: dict[bytes, str] = {}  # identity key -> the file read for it
    # HAR files and dumps are known by their content only once read: told apart here, in input order
    foreign_first: dict[bytes, str] = {}
    counts_seen: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
    done = 0

    def add(result: FileFacts) -> None:
        nonlocal unfinished, pending_rows, done
        if result.unit != "line" and result.was_read:
            _drop_if_duplicate(result, foreign_first)
        result.counts = _shared_counts(result.counts, counts_seen)
        facts.append(result)
        if result.pending:
            pending_rows += result.messages.height
        else:
            spill_finished([result])
        if pending_rows >= CHUNK_ROWS:
            finish_pending(facts[unfinished:])
            spill_finished(facts[unfinished:])
            unfinished, pending_rows = len(facts), 0
        done += 1
        if progress is not None:
            progress(done, len(paths), result.file)

    def extract(unit: str | _Opened | list[_Small] | _Entries | FileFacts) -> list[FileFacts]:
        if isinstance(unit, FileFacts):  # a duplicate, not read
            return [unit]
        if isinstance(unit, _Entries):
            return _read_archived(unit.paths, options, spill)
        if isinstance(unit, list):
            return _read_batch(unit, options, spill)
        path, opened = (unit.path, unit.opened) if isinstance(unit, _Opened) else (unit, None)
        try:
            return [extract_file(path, options, defer=True, spill=spill, opened=opened)]
        except InputError as exc:
            return [FileFacts(file=path, capture=capture_id(path), error=str(exc))]

    opts = options or LoadOptions()
    units = _units(paths, opts.condense and not opts.keep_raw, first_of)
    if workers == 1:
        for unit in units:
            for result in extract(unit):
                add(result)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            # a bounded window of units in flight: small files are read into memory as their batch is made
            window: deque[tuple[Future[list[FileFacts]], object]] = deque()
            try:
                for unit in units:
                    window.append((pool.submit(extract, unit), unit))
                    while len(window) > 2 * workers:
                        for result in window.popleft()[0].result():
                            add(result)
                while window:
                    for result in window.popleft()[0].result():
                        add(result)
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                for future, unit in window:  # a unit never run still holds its opened file
                    if future.cancelled() and isinstance(unit, _Opened):
                        unit.opened.close()
                raise
    finish_pending(facts[unfinished:])
    spill_finished(facts[unfinished:])
    facts, again = repeats(facts, options, spill)
    spill_finished(again)
    return facts


def repeats(
    facts: list[FileFacts], options: LoadOptions | None = None, spill: Spill | None = None
) -> tuple[list[FileFacts], list[FileFacts]]:
    """`facts` with every capture part counted once, and the files read again for it.

    A file of joined captures (`Joined`) names a part another input may hold: `cat a.jsonl b.jsonl >
    both.jsonl` beside `b.jsonl`. Duplicates are left out before reading by each file's first header
    (`_units`), which says nothing of the captures after it: here, in input order, the first file
    holding a part keeps it; a later file holding nothing else is left out (`duplicate_of`), one
    holding more is read again without the lines of the parts read already (`FileFacts.repeated`).
    Only files holding more than one header, and files left out before reading (which may), are
    looked into (`_headers_in`): files of one capture each cost nothing here.

    Files read together give what they share to the first (`FileFacts.read_with`: the rows of archive
    entries read by their rows and of a batch of small files, the aggregates of small files finished
    together): when one of them is left out, the others are read again without it (`_read_again_with`).
    """
    looked = [_segments(f) for f in facts]
    segments = [segs for segs, _ in looked]
    if all(len(s) <= 1 for s in segments):
        return facts, []
    owner: dict[bytes, str] = {}
    out: list[FileFacts] = []
    again: list[FileFacts] = []
    left_out: set[str] = set()  # the files left out whole (`_read_key`)
    for f, (segs, heads) in zip(facts, looked, strict=True):
        left: list[Repeated] = []
        kept = 0
        refused = {h.line for h in heads if format_refusal(h.format) is not None}
        for first, last, keys in segs:
            if first in refused:  # not read, so held by no input: named wherever it is
                kept += 1
                continue
            holder = next((owner[k] for k in keys if k in owner), None)
            if holder is None:
                kept += 1
            elif left and left[-1].file == holder and left[-1].last + 1 == first:
                left[-1] = Repeated(left[-1].first, last, holder)  # one note for a run of copies
            else:
                left.append(Repeated(first, last, holder))
            for k in keys:
                owner.setdefault(k, f.file)
        if not left:
            out.append(f)
        elif f.duplicate_of is not None and not kept:
            f.duplicate_of = left[0].file  # the file read for it, not another copy left out
            out.append(f)
        elif not kept:
            out.append(FileFacts(file=f.file, capture=f.capture, identity=f.identity, duplicate_of=left[0].file))
            left_out.add(_read_key(f))
        elif f.archived:  # its entry lists its parts: read again from the archive without their lines
            read = read_without(f.entry, tuple(left), options.selection if options is not None else None, spill)
            read.identity = f.identity
            out.append(read)
            again.append(read)
        else:
            try:
                read = extract_file(f.file, options, spill=spill, leave_out=tuple(left), heads=tuple(heads))
            except InputError as exc:
                read = FileFacts(file=f.file, capture=f.capture, error=str(exc))
            out.append(read)
            again.append(read)
    groups = [{_read_key(f), *f.read_with} for f in facts if f.read_with]
    taken: set[str] = set().union(*(group for group in groups if group & left_out))
    if taken:
        again += _read_again_with(out, taken, options, spill)
    return out, again


def _read_key(f: FileFacts) -> str:
    """What `FileFacts.read_with` names a file by: an archived file by its entry, any other by its path."""
    return f.entry if f.archived else f.file


def _read_again_with(
    facts: list[FileFacts], taken: set[str], options: LoadOptions | None, spill: Spill | None
) -> list[FileFacts]:
    """The files of `facts` read together with one left out (`taken`, `_read_key`), read again
    without it (`facts` changed in place): archive entries together, the others each alone, as
    `repeats` reads a file again; the files read. Each holds one capture part (a file of joined
    captures is read alone), so it is read or left out whole."""
    at = [n for n, f in enumerate(facts) if f.was_read and _read_key(f) in taken]
    entries = [n for n in at if facts[n].archived]
    read: dict[int, FileFacts] = {}
    if entries:
        selection = options.selection if options is not None else None
        read = dict(zip(entries, read_entries([facts[n].entry for n in entries], selection, spill), strict=True))
    for n in at:
        f = facts[n]
        if n not in read:
            try:
                read[n] = extract_file(f.file, options, spill=spill)
            except InputError as exc:
                read[n] = FileFacts(file=f.file, capture=f.capture, error=str(exc))
        read[n].identity = f.identity
        facts[n] = read[n]
    return [read[n] for n in at]


_LAST: Final = 1 << 62
"""The last line of a capture that goes on to the end of its file, whatever its length."""


def _segments(f: FileFacts) -> tuple[list[tuple[int, int, tuple[bytes, ...]]], list[Head]]:
    """The capture parts a capture file holds, as (first line, last line, identity keys), and the
    headers after its first line; nothing for what holds none (skipped, an input error, HAR, an
    archive's entry left out before reading)."""
    if f.unit != "line" or f.skipped is not None or f.error is not None:
        return [], []
    if f.archived:  # its entry says what it held; its file may be gone: never looked into
        if f.captures:
            return [(c.first, c.last, c.identity) for c in f.captures], []
        return ([] if f.duplicate_of is not None else [(1, _LAST, f.identity)]), []
    if f.duplicate_of is None and not f.joined:
        return [(1, _LAST, f.identity)], []
    headers, lines = _headers_in(f.file)
    starts = [1, *(h.line for h in headers)]
    ends = [start - 1 for start in starts[1:]] + [max(lines, starts[-1])]
    keys = [f.identity, *((h.key,) if h.key is not None else () for h in headers)]
    return list(zip(starts, ends, keys, strict=True)), headers


class Head(NamedTuple):
    """A header record found in a capture file's lines (`heads_in`)."""

    line: int
    key: bytes | None
    """Its `run_key`."""
    transport: Any
    part: Any
    format: Any = None
    """Its `format`, as the reader reads it (`format_refusal` tells whether its capture is read)."""


_HEADER_VALUE: Final = re.compile(
    rb'"(?:h|\\u0068)(?:e|\\u0065)(?:a|\\u0061)(?:d|\\u0064)(?:e|\\u0065)(?:r|\\u0072)"'
)
"""`"header"` as JSON can spell it: any of its letters may be a `\\u` escape, which the reader decodes
(their codes are all digits, so there is no other case to match)."""


def _headers_in(path: str) -> tuple[list[Head], int]:
    """The header records after a capture file's first line, and its line count. Nothing when it
    cannot be read: its reading says why. A byte search (`heads_in`) finds the candidates, so a file
    of one capture costs about what reading it from the page cache does."""
    found: list[Head] = []
    lines = 0
    try:
        with Opened(path) as f:
            read = pieces(f.reader, PIECE_BYTES, f.head) if f.compressed else _pieces(f.reader, PIECE_BYTES)  # type: ignore[arg-type]
            for piece in read:
                found += (h for h in heads_in(piece, lines + 1) if h.line > 1)
                lines += piece.count(b"\n") + (0 if piece.endswith(b"\n") else 1)
    except (OSError, ErascopeError):
        return [], 0
    return found, lines


def capture_parts(facts: FileFacts) -> tuple[CapturePart, ...]:
    """The capture parts of a file `extract_file` read (`facts`), each with what its lines add to the
    file's accounting, as reading the file without the others' lines counts it (`repeats`); nothing
    for a file holding one header or none. Only a file holding more reads its lines again, here.
    The captures it did not read (`FileFacts.refused`) are none of them."""
    if facts.unit != "line" or facts.counts.get(fmt.HEADER, 0) <= 1:
        return ()
    headers, lines = _headers_in(facts.file)
    if not headers:
        return ()
    starts = [1, *(h.line for h in headers)]
    ends = [start - 1 for start in starts[1:]] + [max(lines, starts[-1])]
    keys = [facts.identity, *((h.key,) if h.key is not None else () for h in headers)]
    member = FileFacts(file=facts.file, capture=facts.capture, transport=facts.transport)
    frames: list[pl.DataFrame] = []
    before = 0
    with Opened(facts.file) as f:
        read = pieces(f.reader, PIECE_BYTES, f.head) if f.compressed else _pieces(f.reader, PIECE_BYTES)  # type: ignore[arg-type]
        for piece in read:
            count = piece.count(b"\n") + (0 if piece.endswith(b"\n") else 1)
            first, at = before + 1, bisect.bisect_right(starts, before + 1) - 1
            upto = bisect.bisect_right(starts, before + count)
            # each part in the piece a member of a batch: one reading of the piece counts every
            # record for its part (`_Batch.locate`), however many parts it holds
            batch = _Batch(file=facts.file, members=[member] * (upto - at), starts=[first, *starts[at + 1 : upto]])
            try:
                counts = _read_piece(batch, piece, first, count, False, None)[1].counts
            except _JoinedInBatch:
                # a header the reader reads and the search does not: the parts cannot be told apart
                # here, and the file is archived as one capture is (copies told by its first header)
                return ()
            begins = pl.lit(pl.Series(batch.starts, dtype=pl.Int64)).gather(pl.col("_f"))
            frames.append(
                counts.select(
                    "type",
                    "n",
                    "lost",
                    "undecodable",
                    part=pl.col("_f").cast(pl.Int64) + at,
                    undecodable_line=pl.col("undecodable_line").cast(pl.Int64) + begins - 1,
                )
            )
            before += count
    summed = (
        pl.concat(frames)
        .group_by("part", "type")
        .agg(pl.col("n", "undecodable").sum(), pl.col("lost").max(), pl.col("undecodable_line").min())
        .sort("part", "type")
    )
    counts_of: list[dict[str, int]] = [{} for _ in starts]
    lost, undecodable = [0] * len(starts), [0] * len(starts)
    undecodable_line: list[int | None] = [None] * len(starts)
    for at, rtype, n, most, bodies, line in summed.select(
        "part", "type", "n", "lost", "undecodable", "undecodable_line"
    ).iter_rows():
        counts_of[at][str(rtype)] = int(n)
        if rtype == fmt.CAPTURE_ERROR:
            lost[at] = int(most or 0)
        if bodies:
            undecodable[at] += int(bodies)
            undecodable_line[at] = min(int(line), undecodable_line[at] or int(line))
    refused = {r.first for r in facts.refused}  # their lines were not read: no part of the file
    return tuple(
        CapturePart(*part)
        for part in zip(starts, ends, keys, counts_of, lost, undecodable, undecodable_line, strict=True)
        if part[0] not in refused
    )


def heads_in(piece: bytes, first_line: int) -> list[Head]:
    """The header records among the lines of `piece` (whole lines, the first numbered `first_line`),
    found by a byte search (`_HEADER_VALUE`) and read as the reader reads a line (`_header_record`)."""
    found: list[Head] = []
    before, at = first_line - 1, 0  # the lines before offset `at`
    hit = _HEADER_VALUE.search(piece)
    while hit is not None:
        start = piece.rfind(b"\n", 0, hit.start()) + 1
        end = piece.find(b"\n", hit.start())
        end = len(piece) if end < 0 else end
        before += piece.count(b"\n", at, start)
        at = start
        header = _header_record(piece[start:end])
        if header is not None:
            found.append(
                Head(before + 1, run_key(header), header.get("transport"), header.get("part"), header.get("format"))
            )
        hit = _HEADER_VALUE.search(piece, end)
    return found


def _header_record(line: bytes) -> dict[str, Any] | None:
    # as the reader reads the line (a header the reader reads but the search did not find made a
    # file's captures miscounted; one on a file's first line left the file skipped, its records lost)
    record = read_line(line)
    return record if record is not None and record.get(fmt.F_TYPE) == fmt.HEADER else None


def read_line(line: bytes) -> dict[str, Any] | None:
    """The JSON object on `line` as the reader reads it: a lone surrogate escape as its text
    (`_lone_surrogates_as_text`; orjson refuses the escape), a low one alone and a high one before an
    escape that is not a low one too, the keys that decide what the line is the first of each
    (`fmt.read_record`). None when it is no object."""
    return fmt.read_record(line_as_text(line) if b"\\u" in line else line)


_SHARED_COUNTS: Final = 4096
"""How many distinct `FileFacts.counts` `extract_files` keeps to share."""


def _shared_counts(counts: dict[str, int], seen: dict[tuple[tuple[str, int], ...], dict[str, int]]) -> dict[str, int]:
    """`counts`, or an equal dict seen before. Spawn captures have few distinct record counts (the
    generated 100,000 have three), and a dict each was about 20 MB held until the files are
    combined. Counts are never changed once a file is read, so files can share them."""
    key = tuple(counts.items())
    shared = seen.get(key)
    if shared is not None:
        return shared
    if len(seen) >= _SHARED_COUNTS:
        seen.clear()
    seen[key] = counts
    return counts


@dataclass
class _Entries:
    """Consecutive entries of an archive (`analyzer.archive`): read together, in windows of rows."""

    paths: list[str]


@dataclass
class _Opened:
    """A file opened already, for its header (`_unless_duplicate`): its pieces are read from there,
    so an object at a URL is fetched once."""

    path: str
    opened: Opened


@dataclass
class _Small:
    """A small capture file read into memory for a batch (`_read_batch`), or its note."""

    facts: FileFacts
    data: bytes = b""
    alone: bool = False
    """A compressed file: read alone, as a stream (`analyzer.sources`) of `data`, never batched whole."""


def _units(
    paths: list[str], batched: bool, first_of: dict[bytes, str]
) -> Iterator[str | _Opened | list[_Small] | _Entries | FileFacts]:
    """The work of `extract_files`, in input order: a path to read alone, a batch of small files,
    archive entries to read together, or the facts of a file left out as a duplicate.

    Every file's header is read here, in input order, so the first of the files holding the same
    capture part is the one read, and a repeat is left out before its rows join anything
    (`_drop_if_duplicate`). Small files (at most `SMALL_BYTES`, their capture in no other input
    file) are read here whole and grouped in batches of about `PIECE_BYTES`. Without `batched`
    (raw payloads kept, nothing condensed) every file is read alone.
    """
    captures = [capture_id(p) for p in paths]
    parts = Counter(captures)
    batch: list[_Small] = []
    entries: list[str] = []
    size = 0
    for path, capture in zip(paths, captures, strict=True):
        if batch and is_source_entry(path):
            yield batch
            batch, size = [], 0
        if entries and not is_source_entry(path):
            yield _Entries(entries)
            entries = []
        if is_source_entry(path):
            unit = _unless_duplicate(path, capture, first_of)
            if isinstance(unit, FileFacts):
                if entries:
                    yield _Entries(entries)
                    entries = []
                yield unit
            elif isinstance(path, EntryPath) and path.captures:
                # read alone: `repeats` may read it again without some lines, and what files read
                # together share goes with one of them
                if entries:
                    yield _Entries(entries)
                    entries = []
                yield _Entries([path])
            else:
                entries.append(path)
            continue
        small = batched and parts[capture] == 1 and _is_small(path)
        if not small:
            if batch:
                yield batch
                batch, size = [], 0
            yield _unless_duplicate(path, capture, first_of)
            continue
        item = _read_small(path, capture)
        # a part of a capture named otherwise (`capture_id`): read alone, to be paired with its capture's
        # other parts (a batch's rows go with its first file, of another capture)
        if item.alone or item.facts.capture != capture:
            if batch:
                yield batch
                batch, size = [], 0
            yield _unless_duplicate(path, capture, first_of, item.data)
            continue
        if item.facts.was_read:
            _drop_if_duplicate(item.facts, first_of)
            if item.facts.duplicate_of is not None:
                item.data = b""
        batch.append(item)
        size += len(item.data)
        if size >= PIECE_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch
    if entries:
        yield _Entries(entries)


def _unless_duplicate(
    path: str, capture: str, first_of: dict[bytes, str], data: bytes | None = None
) -> str | _Opened | FileFacts:
    """The file opened for its header and then read from there (`_Opened`), or when its header names
    a part read already, its facts saying so (not read again); `path` when it is to be read alone
    for what it is (not a capture, not readable). `data`: its bytes, fetched already."""
    if is_source_entry(path):  # `<capture file name>.json`: the name its capture was recorded under
        # Known by what its entry holds (read when the archive was listed): the source it archives
        # (reports name an archived file by its source) and the identity it had; else by its name.
        source, identity = (path.source, path.identity) if isinstance(path, EntryPath) else (None, ())
        facts = FileFacts(
            file=source or path,
            capture=capture,
            identity=identity or _identity(path.removesuffix(".json"), {}),
            archived=True,
            # a file of joined captures whose first is read already may hold others (`repeats`)
            captures=path.captures if isinstance(path, EntryPath) else (),
            entry=str(path),
        )
        _drop_if_duplicate(facts, first_of)
        for part in facts.captures[1:]:
            # the parts joined after its first are known too: a later entry repeating one is left out
            # before it is read with others, whose rows go with one of them (`analyzer.archive.read_entries`)
            for key in part.identity:
                first_of.setdefault(key, facts.file)
        return facts if facts.duplicate_of is not None else path
    if data is None and _not_regular_quietly(path):
        return path
    try:
        opened = Opened(path, _HEADER_LIMIT, data)
    except OSError:
        return path  # reading it alone notes why
    try:
        header = _header_of(path, opened.first)
    except InputError:
        header = None  # reading it alone notes why
    if header is None:
        opened.close()
        return path
    facts = FileFacts(file=path, capture=capture_id(path, header), identity=_identity(path, header))
    _drop_if_duplicate(facts, first_of)
    if facts.duplicate_of is not None:
        opened.close()
        return facts
    return _Opened(path, opened)


def _not_regular_quietly(path: str) -> bool:
    try:
        return not stat.S_ISREG(storage.mode_size(path)[0])
    except OSError:
        return True


def _is_small(path: str) -> bool:
    """A regular file of at most `SMALL_BYTES` (anything else is read alone, which notes what it is)."""
    try:
        mode, size = storage.mode_size(path)
    except OSError:
        return False
    return stat.S_ISREG(mode) and size <= SMALL_BYTES


def _read_small(path: str, capture: str) -> _Small:
    """A small file's bytes and header, or its facts with why it is not read (as `extract_file` says)."""
    facts = FileFacts(file=path, capture=capture)
    try:
        try:
            with storage.open_binary(path) as f:
                data = f.read()
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
        if compression_of(data[:4]) != PLAIN:
            return _Small(facts, data, alone=True)
        end = data.find(b"\n")
        first = data if end < 0 else data[: end + 1]
        header = _header_of(path, first)
    except InputError as exc:
        facts.error = str(exc)
        return _Small(facts)
    if header is None:
        try:
            if foreign_kind(path) is not None:
                return _Small(facts, alone=True)
        except OSError:
            return _Small(facts, alone=True)  # read alone, which notes why it cannot be
        facts.skipped = not_a_capture(path, first)
        return _Small(facts)
    facts.capture = capture_id(path, header)
    facts.transport = _transport(header)
    facts.identity = _identity(path, header)
    return _Small(facts, data)


@dataclass(slots=True)
class _Batch(FileFacts):
    """Small capture files read as one text (`_read_batch`): each row finds its file by its line number."""

    members: list[FileFacts] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    """The line of the text each member's first line is."""

    def locate(self, records: pl.LazyFrame) -> tuple[pl.LazyFrame, dict[str, Any]]:
        """`records` with `_f` (the member's position) and its own line numbers; the member's labels."""
        starts = pl.Series(self.starts, dtype=pl.UInt32)
        member = pl.lit(starts).search_sorted(pl.col("line").cast(pl.UInt32), side="right").cast(pl.Int64) - 1
        records = records.with_columns(_f=member).with_columns(
            line=pl.col("line").cast(pl.UInt32) - pl.lit(starts).gather(pl.col("_f")) + 1
        )
        names = {
            "file": [display_name(m.file) for m in self.members],
            "capture": [display_name(m.capture) for m in self.members],
            "transport": [m.transport for m in self.members],
        }
        labels = {
            name: pl.lit(pl.Series(values, dtype=pl.String)).gather(pl.col("_f")) for name, values in names.items()
        }
        return records, labels


def _read_batch(items: list[_Small], options: LoadOptions | None, spill: Spill | None) -> list[FileFacts]:
    """Read small files as one text: one reading, one pairing and condensing for all of them.

    Each file gets its own counts and bad lines, judged as reading it alone judges them; the rows
    (paired and condensed: every file is a capture of its own, keyed apart) and `Traffic` of the
    batch go with its first file, which names the others (`FileFacts.read_with`: `repeats` reads them
    again when one is left out as a copy), the others share empty ones. A batch that needs the robust id
    reading is read again file by file, from the bytes read already, so each file reads its ids as
    it does alone.
    """
    read = [item for item in items if item.facts.was_read]
    if not read:
        return [item.facts for item in items]
    batch = _Batch(file="", members=[item.facts for item in read])
    texts: list[bytes] = []
    ends: list[tuple[int, bool]] = []  # per member: line count, last line complete
    spans: dict[int, tuple[int, int]] = {}  # per member: where its bytes are in the text
    line, offset = 1, 0
    for item in read:
        complete = item.data.endswith(b"\n")
        count = item.data.count(b"\n") + (0 if complete else 1)
        batch.starts.append(line)
        ends.append((count, complete))
        spans[id(item)] = (offset, offset + len(item.data))
        texts.append(item.data if complete else item.data + b"\n")
        line += count
        offset += len(texts[-1])
    text = b"".join(texts)
    del texts
    for item in read:
        item.data = b""  # the text holds them now
    try:
        needed, part = _read_piece(batch, text, 1, line - 1, False, options)
    except _JoinedInBatch:
        needed = True
    if needed:
        alone: list[FileFacts] = []
        for item in items:
            if not item.facts.was_read:
                alone.append(item.facts)
                continue
            # from the bytes fetched already (plain text: opening them reads nothing), so a file at
            # a URL is not fetched again
            start, end = spans[id(item)]
            opened = Opened(item.facts.file, _HEADER_LIMIT, text[start:end])
            try:
                alone.append(extract_file(item.facts.file, options, defer=False, spill=spill, opened=opened))
            except InputError as exc:
                alone.append(replace(item.facts, error=str(exc)))
            alone[-1].identity = item.facts.identity
        return alone
    members = batch.members
    columns = ("_f", "type", "n", "lost", "undecodable", "undecodable_line")
    for at, rtype, n, lost, undecodable, first in part.counts.select(columns).iter_rows():
        facts = members[at]
        facts.counts[str(rtype)] = int(n)
        if rtype != fmt.PART_END:
            facts.records += int(n)
        if rtype == fmt.CAPTURE_ERROR:
            facts.lost = int(lost or 0)
        if undecodable:
            facts.undecodable += int(undecodable)
            # rows carry their file's own line numbers already (`_Batch.locate`)
            facts.undecodable_line = min(int(first), facts.undecodable_line or int(first))
    for facts in members:
        facts.counts = dict(sorted(facts.counts.items()))
    for b in sorted(part.bad):
        at = bisect.bisect_right(batch.starts, b.line) - 1
        facts, (count, complete) = members[at], ends[at]
        local = BadLine(facts.file, b.line - batch.starts[at] + 1, b.reason)
        if local.line == count and not complete:
            facts.torn = BadLine(facts.file, local.line, f"torn last line ({b.reason})")
        else:
            facts.malformed.append(local)
    if part.messages.height:
        kept, traffic = condense(pair_responses(part.messages))
        members[0].messages = kept
        members[0].traffic = spilled(traffic, spill) if spill is not None else traffic
        members[0].read_with = tuple(m.file for m in members[1:])
        members[0].holds = tuple(m.capture for m in members[1:])
    return [item.facts for item in items]


def _drop_if_duplicate(facts: FileFacts, first_of: dict[bytes, str]) -> None:
    """Leave out a file that repeats a capture part read already (same `FileFacts.identity`): a
    directory given twice, a copy, an archive and its JSONL. The first in input order is read."""
    for key in facts.identity:
        if key in first_of:
            facts.duplicate_of = first_of[key]
            facts.messages, facts.traffic, facts.pending = NO_MESSAGES, NO_TRAFFIC, False
            return
    for key in facts.identity:
        first_of[key] = facts.file


def combine(facts: list[FileFacts]) -> Loaded:
    """Pair the parts of rotated captures across files, then concatenate the messages in input order.

    Every file was paired and condensed on its own as it was read; only a capture split into several
    files has answers whose request is in another file. Its parts are relinked together (`relink`),
    each file getting back its own slice.
    """
    read = [f for f in facts if f.was_read and f.messages.height]
    for parts in _capture_groups(facts):
        if len(parts) > 1:
            _relink_parts(parts)
    frames = [f.messages for f in read]
    messages = pl.concat(frames, how="vertical", rechunk=False) if frames else no_messages()
    return Loaded(messages=messages, files=facts, traffic=merge([f.traffic for f in facts if f.was_read]))


def _capture_groups(facts: list[FileFacts]) -> list[list[FileFacts]]:
    """The files read whose rows share a capture, each group in input order.

    A file's rows are its capture's, but for archive entries read by their rows and small files read
    in one batch: those go with the first entry read (`analyzer.archive.read_entries`) or the batch's
    first file (`_read_batch`), of whatever capture, so that one holds the captures of every entry or
    file read with it, and is relinked with their other parts (a batch's files are of captures no other
    input is named for, but a part renamed is of its header's: `capture_id`)."""
    capture_of = {f.entry: f.capture for f in facts if f.archived}
    group_of: dict[str, int] = {}  # capture -> its group
    groups: list[list[int]] = []
    for n, f in enumerate(facts):
        # a part condensed to nothing still takes part: its moved requests can be answered later
        if not (f.was_read and (f.messages.height or f.traffic.requests is not None)):
            continue
        held = {f.capture, *f.holds}
        if f.archived:
            held.update(capture_of[e] for e in f.read_with if e in capture_of)
        joined = sorted({group_of[c] for c in held if c in group_of})
        into = joined[0] if joined else len(groups)
        if not joined:
            groups.append([])
        for other in joined[1:]:  # the file's captures were in groups apart: one group now
            groups[into] += groups[other]
            groups[other] = []
            group_of.update(dict.fromkeys([c for c, g in group_of.items() if g == other], into))
        groups[into].append(n)
        group_of.update((c, into) for c in held)
    return [[facts[n] for n in sorted(group)] for group in groups if group]


def _relink_parts(parts: list[FileFacts]) -> None:
    """Pair one capture's files again together; each file gets back its own slice (pairing keeps row order)."""
    heights = [f.messages.height for f in parts]
    moved = concat_rows([f.traffic.requests for f in parts])
    paired = relink([f.messages for f in parts if f.messages.height], moved)
    offset = 0
    for f, height in zip(parts, heights, strict=True):
        f.messages = paired.slice(offset, height)
        offset += height
