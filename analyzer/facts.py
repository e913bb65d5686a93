"""What every input source gives the analysis: per-file facts (rows and accounting), paired and condensed.

Two sources read captures into the same frames: `analyzer.load` reads JSONL captures (and HAR files,
mitmproxy dumps), `analyzer.archive` reads Parquet archives written by `erascope compact`. Both
return a `FileFacts` per input file, whose `messages` rows are paired and condensed
(`analyzer.condense`) and whose accounting (records, malformed and torn lines) the report shows;
`analyzer.load.combine` joins them whatever their source. This module holds what both share: the
facts, the options, and pairing and condensing in chunks with `relink` across chunks. It depends on
neither source, and neither source depends on the other's reading.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field
from typing import Final, NamedTuple

import polars as pl

from addon import format as fmt
from addon.errors import ErascopeError
from analyzer.condense import Rows, Traffic, condense, has_rows, merge, traffic_of
from analyzer.messages import as_categoricals, pair_responses
from analyzer.schema import MESSAGES_SCHEMA
from analyzer.selection import Selection

no_messages: Final = as_categoricals(pl.LazyFrame(schema=MESSAGES_SCHEMA)).collect().clear
"""An empty messages frame, in the dtypes rows have in memory (`as_categoricals`): an input condensed
to no rows meets other frames as any other does. Clearing a template, as building one costs 0.2 ms."""
NO_MESSAGES: Final = no_messages()
NO_TRAFFIC: Final = Traffic()
"""The empty messages and traffic every file without rows of its own shares: frames are never changed
in place, and a frame per file (38 columns, four more in `Traffic`) is about 30 kB of memory, which
100,000 small captures read in batches would otherwise hold for nothing."""
CHUNK_ROWS: Final = 100_000
"""Rows already read whole (archives, foreign files, batches of small captures) are paired and condensed
in chunks of this many rows."""


class InputError(ErascopeError):
    """One input file cannot be read (gone, unreadable, an unknown format major): the other files
    still can. `extract_files` notes it on the file's `FileFacts.error` and goes on."""


class UnknownMajor(InputError):
    """An input file's header names an erascope format major this erascope does not know (FORMAT.md,
    Versioning): none of it is read. Told apart from the other input errors by `compact`, which names
    it and archives the other inputs, as `analyze` reads them."""


@dataclass(frozen=True, order=True)
class BadLine:
    """A capture line that could not be used: where, and why."""

    file: str
    line: int
    reason: str


@dataclass
class LoadOptions:
    """Options of the loading step (kept small; the pipeline passes its own on)."""

    keep_stderr: bool = False
    """Reserved: stderr lines are counted but not turned into messages."""
    keep_raw: bool = False
    """Add the payload `raw` to the messages rows, unpaired and not condensed (what Parquet archives keep)."""
    condense: bool = True
    """Drop the rows later steps read only as aggregates (`analyzer.condense`); off to see every message."""
    selection: Selection | None = None
    """Keep only the message rows of this time window and these servers (`analyzer.selection`); the
    input accounting still counts every record of the files read."""


@dataclass(frozen=True, slots=True)
class Joined:
    """A capture that starts inside a file, after another one's records (files joined by `cat`, or
    by a log shipper appending them to one stream): from its header's line on, rows get its own
    capture label and transport. Its `seq` numbers start again (FORMAT.md, Ordering), so its rows
    paired under the first capture's label would meet that capture's requests of the same `seq`.
    A rotated part's header (`part` > 0) after its previous part is noted too, with the label of the
    capture it goes on with: it names a capture part another input may hold (`analyzer.load.repeats`)."""

    line: int
    capture: str
    transport: str | None


@dataclass(frozen=True, slots=True)
class Repeated:
    """Lines `first` to `last` of a file hold a capture part read already from `file`: not read again."""

    first: int
    last: int
    file: str


@dataclass(frozen=True, slots=True)
class Refused:
    """Lines `first` to `last` of a file hold a capture joined after another whose header (on line
    `first`) this erascope does not read (FORMAT.md, Versioning): none of them is read, as none of a
    file so headed is. `error` tells an unknown format major (an input error) from a header naming no
    erascope format (no capture: skipped)."""

    first: int
    last: int
    why: str
    """What is wrong with the header, without where it is (`note` says that)."""
    error: bool

    def note(self, file: str) -> str:
        """What the inputs' errors (`error`) or skipped files name it by, in `file` (as reports name it)."""
        if self.error:
            return f"{file}:{self.first}: {self.why} (lines {self.first}–{self.last} not read)"
        return (
            f"lines {self.first}–{self.last}: not an erascope capture (the header on line {self.first},"
            f" joined after another capture, {self.why})"
        )


class CapturePart(NamedTuple):
    """One capture part of a file of joined captures, with what its lines add to the file's
    accounting: what an archive entry keeps of each (`analyzer.compact`), so that the lines of a part
    another input holds are left out of the archived file as `analyzer.load.repeats` leaves them out
    of its JSONL."""

    first: int
    last: int
    """Its lines, `first` to `last` (its header's line to the line before the next header's)."""
    identity: tuple[bytes, ...]
    """What names it (`analyzer.load._identity` of its header; empty for a header written by hand)."""
    counts: dict[str, int]
    """Its well-formed records per record type."""
    lost: int
    """Records the recorder reported lost in it."""
    undecodable: int
    """HTTP bodies in it that do not decode with their `Content-Encoding`."""
    undecodable_line: int | None
    """The first such body's line."""


def inside(ranges: tuple[tuple[int, int], ...], line: int) -> bool:
    """Whether `line` is in one of `ranges` (first, last; sorted and apart, as lines left out are)."""
    at = bisect.bisect_right(ranges, line, key=lambda r: r[0]) - 1
    return at >= 0 and ranges[at][1] >= line


def records_of(counts: dict[str, int]) -> int:
    """Records that count as read: all but a hash chain's `part-end` records, which are bookkeeping
    like the chain itself, so a capture counts the same with or without its chain."""
    return sum(n for rtype, n in counts.items() if rtype != fmt.PART_END)


@dataclass(slots=True)
class FileFacts:
    """What one capture file contributes: its messages rows and its input accounting.

    Slotted: an input of 100,000 spawn captures holds as many (a dict of attributes each was 30 MB)."""

    file: str
    """The path as given or found (relative paths stay relative, so reports are stable)."""
    capture: str = ""
    """The capture id (file name without the part suffix): rotated parts share it."""
    transport: str | None = None
    skipped: str | None = None
    """Why the file was skipped (not an erascope capture, not a regular file); None when it was read."""
    error: str | None = None
    """Why the file could not be read (an input error: unreadable, vanished); None when it was read."""
    identity: tuple[bytes, ...] = ()
    """What names the capture part whatever the file is called (`_identity`): the same part read twice
    is read once (`extract_files`)."""
    duplicate_of: str | None = None
    """The file this one repeats (same `identity`), read in its place; None when it was read."""
    records: int = 0
    """Well-formed records read (header included; a hash chain's `part-end` records not)."""
    counts: dict[str, int] = field(default_factory=dict)
    """Well-formed records per record type. Not changed once the file is read: files with the same
    counts share one dict (`analyzer.load.extract_files`)."""
    malformed: list[BadLine] = field(default_factory=list)
    torn: BadLine | None = None
    lost: int = 0
    """Records the recorder reported lost (`capture-error` records)."""
    undecodable: int = 0
    """HTTP bodies the recorder kept as they came: they do not decode with their `Content-Encoding`."""
    undecodable_line: int | None = None
    """The first such body's line."""
    messages: pl.DataFrame = field(default_factory=lambda: NO_MESSAGES)
    traffic: Traffic = field(default_factory=lambda: NO_TRAFFIC)
    """What condensing dropped from `messages` (`analyzer.condense`)."""
    pending: bool = False
    """`messages` are read but not paired and condensed yet: a small file, left to be finished
    together with other such files (`finish_pending`)."""
    cut: str | None = None
    """Why a compressed file's stream ended early (`analyzer.sources.CutStream`); reported as torn."""
    unit: str = "line"
    """What its locations count: `line` (captures), `entry` (HAR), `flow` (mitmproxy dumps)."""
    digest: bytes = b""
    """A HAR file or dump: `analyzer.foreign.Converted.digest` of what was read, by which a report
    that reads it again (the html page's cited messages) knows it still holds the entries cited."""
    archived: bool = False
    """Read from a Parquet archive (`analyzer.archive`): `file` is what the archive says the capture
    was, a file this analysis never opened (and that may not be a capture at all)."""
    parts: tuple[str, ...] = ()
    """Archived: every Parquet part holding its rows, whatever a selection reads of them: where a
    report reads its messages again (their `raw` column), instead of the file `file` names."""
    joined: tuple[Joined, ...] = ()
    """The captures joined after this file's own (`cat a.jsonl b.jsonl`), as its reading finds them."""
    repeated: tuple[Repeated, ...] = ()
    """Its captures left out because an earlier input holds them (`analyzer.load.repeats`)."""
    refused: tuple[Refused, ...] = ()
    """Its captures joined after another that are not read, their headers naming a format this
    erascope does not read (`analyzer.load.extract_file`)."""
    captures: tuple[CapturePart, ...] = ()
    """Archived, a file of joined captures: the capture parts its entry lists (`analyzer.archive`)."""
    entry: str = ""
    """Archived: its `_sources` entry, read again without the lines of a repeated capture part."""
    placed: bool = False
    """Its reader decided already where the rows condensing moved out wait (written to the spill, or
    kept in memory: `analyzer.archive.read_entries`): `extract_files` does not spill them again."""
    read_with: tuple[str, ...] = ()
    """The files read together with it whose rows or `Traffic` it holds too (an archived file named by
    its `entry`, any other by its path): archive entries read by their rows (`analyzer.archive.read_entries`),
    small captures read in one batch or finished together (`analyzer.load`). When it or one of them is
    left out as a copy of a capture part another input holds, the others are read again without it
    (`analyzer.load.repeats`)."""
    holds: tuple[str, ...] = ()
    """The captures of the small files read in one batch with it, whose rows it holds (`analyzer.load`):
    a part of one of them in another file is paired with them (`analyzer.load.combine`)."""

    @property
    def was_read(self) -> bool:
        """Its records were read: not skipped, no input error, not a duplicate of another file."""
        return self.skipped is None and self.error is None and self.duplicate_of is None


def display_name(path: str) -> str:
    """`path` as text that frames and reports can hold.

    POSIX names are bytes: Python hands one that is not UTF-8 over with surrogate escapes, which
    polars (and UTF-8 output) cannot take. Such a name shows its odd bytes as `\\xNN`; the file is
    still opened by its real name.
    """
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return path


def finish(facts: FileFacts, *, condensed: bool = True) -> None:
    """Pair `facts.messages` and condense them (`analyzer.condense`) in chunks of `CHUNK_ROWS` rows.

    For frames already in memory (foreign files); reading a JSONL file does the same chunk by chunk
    as it reads (`analyzer.load`), an archive window by window (`analyzer.archive`).
    `condensed=False` only pairs.
    """
    if not condensed:
        paired = pair_responses(facts.messages)
        facts.messages, facts.traffic = paired, traffic_of(paired)
        return
    frames: list[pl.DataFrame] = []
    traffics: list[Traffic] = []
    for offset in range(0, max(facts.messages.height, 1), CHUNK_ROWS):
        kept, traffic = condense(pair_responses(facts.messages.slice(offset, CHUNK_ROWS)))
        frames.append(kept)
        traffics.append(traffic)
    set_relinked(facts, frames, traffics)


def set_relinked(facts: FileFacts, frames: list[pl.DataFrame], traffics: list[Traffic]) -> None:
    """A file's condensed chunks (kept rows, `Traffic`: one per chunk) become its messages and traffic."""
    facts.traffic = merge(traffics)
    if len(traffics) > 1:
        facts.messages = relink(frames, facts.traffic.requests)
    elif frames:
        facts.messages = frames[0]  # one chunk, paired as a whole already


def relink(frames: list[pl.DataFrame], moved: Rows | None) -> pl.DataFrame:
    """Pair the kept rows of consecutive pieces of work (chunks of a file, parts of a capture) again.

    Each piece was paired on its own, so an answer whose request lies in an earlier piece is still
    unpaired. The kept rows are few; the moved requests (`Traffic.requests`) an answer can belong to
    (the one a kept answer already names, and those on an unpaired answer's connection with its id,
    or in its flow) go through pairing with them and are left out again afterwards.

    `frames` are the pieces' kept rows (empty ones may be left out) and `moved` the requests of
    every piece, those whose kept rows are empty included: a piece condensed to nothing can still
    hold the request of a later duplicate answer.
    """
    if not frames:
        return no_messages()
    kept = pl.concat(frames, how="vertical", rechunk=False)
    if moved is None or not has_rows(moved):
        return pair_responses(kept)
    answers = kept.lazy().filter(pl.col("kind").is_in(("response", "error", "invalid")) & pl.col("dir").is_not_null())
    named = answers.filter(pl.col("req_seq").is_not_null()).select("capture", seq="req_seq")
    unpaired = answers.filter(pl.col("req_seq").is_null())
    on_conn = unpaired.filter(pl.col("flow").is_null()).select("capture", "conn", "id").unique()
    on_flow = unpaired.filter(pl.col("flow").is_not_null()).select("capture", "flow").unique()
    candidates = pl.concat(
        [
            moved.lazy().join(named, on=["capture", "seq"], how="semi"),
            moved.lazy().filter(pl.col("flow").is_null()).join(on_conn, on=["capture", "conn", "id"], how="semi"),
            moved.lazy().filter(pl.col("flow").is_not_null()).join(on_flow, on=["capture", "flow"], how="semi"),
        ]
    ).unique(["capture", "seq"], keep="first")
    dtypes = kept.schema
    as_rows = candidates.with_columns(
        kind=pl.lit("request").cast(dtypes["kind"]),
        dir=pl.lit(fmt.C2S).cast(dtypes["dir"]),
        record_type=pl.when(pl.col("flow").is_null())
        .then(pl.lit(fmt.FRAME))
        .otherwise(pl.lit(fmt.HTTP_REQUEST))
        .cast(dtypes["record_type"]),
        _moved=pl.lit(True),
    ).collect()
    if as_rows.is_empty():
        return pair_responses(kept)
    both = pl.concat([kept.with_columns(_moved=pl.lit(False)), as_rows], how="diagonal_relaxed")
    return pair_responses(both).filter(~pl.col("_moved")).drop("_moved").select(list(kept.columns))
