"""`erascope verify`: check the hash chains of captures and locate every break (file:line).

A file's chain is checked line by line (see "Hash chain" in `captures/FORMAT.md`): each line's
digest must be the digest of the previous accepted line's digest and this line's covered bytes,
and each line's index must be the next one. Where it is not, the index tells what happened:

- a line whose digest does not match at the expected index was **changed** (its bytes, or the digest
  of the line before it), and so was a JSON object whose `chain` field no longer ends its line (a
  CRLF, keys reordered): the chain goes on from that seal; a line that is the expected one with only
  its index edited is one changed line too, and so is a first line that is no sealed header before a
  sealed line (a header edited into something else: the chain cannot be checked without it), and a
  sealed header naming a format or a chain algorithm this erascope does not know whose seal no longer
  covers it while the next line goes on from that seal in a chain it knows (the chain is checked on
  in that one; a header its seal covers is of a capture this erascope cannot check);
- an index that jumps ahead means lines were **removed** before it, unless the missing indices turn
  up later in the file: then those lines were **reordered** (moved after their successors);
- an index already seen, or a line without a digest in a chained file, was **inserted**;
- lines after the part's `part-end` record (whole, short of their newline, or torn) were **appended**
  after it was closed.

Across the parts of one capture, each header's `chain_prev` must be the previous part's final digest,
and a part named by a `previous` or `next` link must exist. What is not tampering is said as such:
a file without a `part-end` whose chain holds up to its last complete line was never closed (the
recorder crashed or is still writing), and so was a file empty or holding a torn header with no part
after it (the recorder stopped while starting the part), a file without a chain (and without sealed lines) predates
chains, and parts missing before the first one present may have been removed by retention. A compressed
part is another matter: the recorders write it whole (to a hidden name, then renamed into place), so one
whose stream is cut short or corrupt before its chain is closed was **cut** after it was written, and its
lines after the cut are lost.

A file may hold captures joined (`cat a.jsonl b.jsonl`; FORMAT.md, Ordering): a header after its first
line starts another capture there, checked as in a file of its own, and a rotated part joined right
after its previous part is linked to it there. A header does not restart the chain it is found in
when the line after it goes on with that chain (it was inserted), nor when it is sealed as that
chain's next line (it was changed). A line is read as the analyzer reads it (`analyzer.load.read_line`):
whether it is a header, the seal it claims when that no longer ends it, a `part-end`'s `next`.

Library code: returns a `Verification`, never prints; the CLI formats it.
"""

from __future__ import annotations

import bisect
import contextlib
import io
import itertools
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import orjson
import polars as pl

from addon import chain
from addon import format as fmt
from addon.errors import ErascopeError
from addon.retention import PART_NAME
from analyzer.load import find_inputs, line_as_text, read_line
from analyzer.scrub import scrubbed, valid_unicode
from analyzer.sources import COMPRESSED_SUFFIXES, CutStream, open_stream, strip_compression
from analyzer.storage import is_url, mode_size
from analyzer.terminal import json_visible, visible

VERIFY_FORMAT: Final = "erascope-verify/1"
"""The `format` of `verify --format json` output."""
_PART_NAME: Final = re.compile(r"^(?P<capture>.+)\.(?P<part>\d{3,})\.jsonl$")
_PART_END_PREFIX: Final = b'{"type":"part-end"'
_OPENERS_KEPT: Final = 16 << 20
"""Bytes of gap-opening lines kept for their check: a file of many gaps must not be held whole."""
_HEADER_LIMIT: Final = 1 << 20
"""The longest first line read as a header."""
_LAST_DIGEST_CHARACTERS: Final = frozenset(b"AEIMQUYcgkosw048")
"""The base64 characters a digest's 43rd can be as written (`chain.encode`): its two low bits are unused, so zero."""
FINDINGS_LIMIT: Final = 10_000
"""The most breaks said of one capture: its check stops there (a compressed part of a few kilobytes can
hold millions of bad lines, and each finding is held and printed)."""
LINE_LIMIT: Final = 512 << 20
"""The longest line checked (its newline included), as `erascope analyze` bounds a document: a line
is held whole to be checked, and a compressed part of a few kilobytes can hold a line of gigabytes."""


class Kind(StrEnum):
    """What a finding says happened."""

    CHANGED = "changed"
    REMOVED = "removed"
    REORDERED = "reordered"
    INSERTED = "inserted"
    APPENDED = "appended"
    PART_MISSING = "part-missing"
    PART_LINK = "part-link"
    UNKEYED = "unkeyed"
    """`--key` was given but the chain is unkeyed or absent: anyone could have written it."""


class Status(StrEnum):
    """A file's verdict."""

    VERIFIED = "verified"
    """The chain holds from the header to the `part-end` record."""
    UNCLOSED = "unclosed"
    """The chain holds up to the last complete line, but the part was never closed (crash, or still
    being written): not tampering, and the end of such a file cannot be vouched for."""
    CUT = "cut"
    """A compressed part whose stream ends early or is corrupt before its chain is closed: written whole,
    it was cut after, and its lines after the cut are lost (its chain holds up to `intact_to`)."""
    NO_CHAIN = "no-chain"
    """The capture predates chains (or its chain was stripped): nothing to check."""
    TAMPERED = "tampered"
    """At least one finding."""
    ERROR = "error"
    """The file could not be checked (unreadable, not a capture, keyed with a key not given)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One break in a chain, located where a user opens it."""

    kind: Kind
    file: str
    line: int | None
    """1-based line of the decompressed file; None when the finding is about a whole file."""
    message: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "file": self.file, "line": self.line, "message": self.message}


@dataclass(slots=True)
class FileResult:
    """What verifying one file found."""

    file: str
    status: Status = Status.ERROR
    lines: int = 0
    """Complete lines read: the number of the last one in the file (so the count, unless `line` > 1)."""
    line: int = 1
    """The file's line this capture's header is on: above 1 for a capture joined after another."""
    algorithm: str | None = None
    key_id: str | None = None
    part: int | None = None
    previous: str | None = None
    next: str | None = None
    chain_prev: bytes | None = None
    final: bytes | None = None
    """The digest of the last line the chain accepted (the part's final digest when closed)."""
    intact_to: int = 0
    """The last line up to which the chain holds without a break."""
    closed_at: int | None = None
    torn: int | None = None
    """The line number of an incomplete last line, if any."""
    cut: str | None = None
    """Why a compressed stream ended early, if it did."""
    stopped: int | None = None
    """The last line checked when the check stopped at `FINDINGS_LIMIT` findings: nothing after it was read."""
    header_cut: bool = False
    """The part is empty or its header torn: a recorder stopped while starting it (`fmt.cut_header`)."""
    continued: bool = False
    """The next part's header starts from this part's final digest (so an unclosed end is not a crash)."""
    follows: bool = False
    """A rotated part joined after the part before it in the file (`cat x.000.jsonl x.001.jsonl`):
    that one is its previous part, and the link between them is checked there, not by file name."""
    identity: tuple[Any, ...] | None = None
    """What the header says of the capture it is a part of (start, host, recorder pid): parts of one
    capture share it."""
    error: str | None = None
    findings: list[Finding] = field(default_factory=list)
    captures: list[FileResult] = field(default_factory=list)
    """When the file holds captures joined (`cat a.jsonl b.jsonl`): each one (or each rotated part),
    in file order, verified as in a file of its own; this result then sums them up. Empty otherwise."""

    @property
    def count(self) -> int:
        """The capture's complete lines."""
        return max(0, self.lines - self.line + 1)

    @property
    def units(self) -> list[FileResult]:
        """What was verified apart in this file: its captures when joined, else itself."""
        return self.captures or [self]

    def as_dict(self) -> dict[str, Any]:
        out = self._fields()
        # a joined capture's `lines` counts its own: its first is `line`
        out["captures"] = [
            {**c._fields(), "line": c.line, "lines": c.count, "follows": c.follows} for c in self.captures
        ]
        return out

    def _fields(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "status": self.status.value,
            "lines": self.lines,
            "chain": self.algorithm,
            "key_id": self.key_id,
            "part": self.part,
            "closed_at": self.closed_at,
            "intact_to": self.intact_to,
            "torn_line": self.torn,
            "cut": self.cut,
            "stopped_at": self.stopped,
            "final_digest": chain.encode(self.final).decode() if self.final is not None else None,
            "error": self.error,
            "findings": [f.as_dict() for f in self.findings],
        }


@dataclass(slots=True)
class Verification:
    """The result of verifying a set of inputs."""

    files: list[FileResult]
    notes: list[str] = field(default_factory=list)
    """Facts about the inputs that are not tampering (parts absent before the first one present, …)."""

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.files for c in r.units for f in c.findings]

    @property
    def tampered(self) -> bool:
        return any(c.findings for r in self.files for c in r.units)

    @property
    def cut(self) -> list[FileResult]:
        """The captures or parts (`FileResult.units`) cut after they were written (`Status.CUT`)."""
        return [c for r in self.files for c in r.units if c.status is Status.CUT]

    @property
    def errors(self) -> list[FileResult]:
        return [r for r in self.files if r.status is Status.ERROR]

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Status}
        for r in self.files:
            out[r.status.value] += 1
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": VERIFY_FORMAT,
            "files": [r.as_dict() for r in self.files],
            "counts": self.counts(),
            "findings": [f.as_dict() for f in self.findings],
            "notes": list(self.notes),
        }


def verify(paths: Iterable[str | Path], *, key: bytes | None = None) -> Verification:
    """Verify every capture file named by `paths` (files, directories, globs), and the links between
    the parts of each capture. Raises `ErascopeError` when a path does not exist."""
    files = find_inputs(paths)
    if not files:
        raise ErascopeError("no capture files found")
    results = [verify_file(path, key=key) for path in files]
    result = Verification(results)
    _check_links(result)
    for r in results:
        for c in r.units:
            if c.findings:
                c.status = Status.TAMPERED
        if r.captures:
            _sum_up(r)
    return result


def verify_file(path: str, *, key: bytes | None = None) -> FileResult:
    """Check one file's chain (not its links to other parts, but those between rotated parts joined
    in it). A file holding captures joined (`cat a.jsonl b.jsonl`) has each checked as in a file of
    its own (`FileResult.captures`): a header after the first line starts another one there."""
    result = FileResult(file=path)
    units = [result]
    cut: str | None = None
    try:
        # a FIFO named *.jsonl would block the read forever; an object at a URL is a regular file
        if not stat.S_ISREG(mode_size(path)[0]):
            raise _Unverifiable("not a regular file")
        with open_stream(path) as raw:
            stream = io.BufferedReader(raw) if isinstance(raw, CutStream) else raw
            try:
                first = stream.readline(_HEADER_LIMIT)
                if not first and not isinstance(raw, CutStream) and path.endswith(COMPRESSED_SUFFIXES):
                    # read as plain, having not even the magic number a compressed stream starts with
                    cut = result.cut = "the file is empty: its compressed stream was cut to nothing"
                if len(first) == _HEADER_LIMIT and not first.endswith(b"\n"):
                    # a header is small: a file that is one huge line is refused before it is read whole
                    raise _Unverifiable(
                        f"not an erascope capture (its first line is longer than {_HEADER_LIMIT} bytes)"
                    )
                lines = _Lines(_numbered(stream))
                _check_unit(result, first, lines, key, first_in_file=True)
                # a capture's check stops only at the end of the file or at the header of the next one
                for number, head in lines:
                    unit = FileResult(file=path, line=number)
                    _check_unit(unit, head, lines, key, first_in_file=False)
                    unit.follows = _follows(units[-1], unit)
                    units.append(unit)
            finally:
                # also when the file cannot be checked: a cut stream is often why its header is not whole
                if isinstance(raw, CutStream):
                    # the file's last capture is where its stream ends: the ones before it are whole
                    cut = units[-1].cut = raw.cut
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and (packed := _compressed_since(path)) is not None:
            return verify_file(packed, key=key)
        return _failed(path, cut, f"cannot read: {exc.strerror or exc}")
    except _Unverifiable as exc:
        return _failed(path, cut, str(exc))
    last = units[-1]
    if last.cut and last.status is Status.UNCLOSED:
        # no crash leaves this: the recorders write a compressed part whole and rename it into place
        last.status = Status.CUT
    if len(units) == 1:
        if result.error is not None and result.cut:
            result.error = f"{result.error}; {result.cut}"
        return result
    joined = FileResult(file=path, cut=cut, captures=units)
    _sum_up(joined)
    return joined


def _failed(path: str, cut: str | None, error: str) -> FileResult:
    """The result of a file that could not be checked at all."""
    return FileResult(file=path, cut=cut, error=f"{error}; {cut}" if cut else error)


def _check_unit(result: FileResult, first: bytes, lines: _Lines, key: bytes | None, *, first_in_file: bool) -> None:
    """Check one capture (or part) of a file, from its header `first` up to the next header."""
    try:
        _check(result, first, lines, key)
    except _Unverifiable as exc:
        if (first_in_file and isinstance(exc, _NotOurs)) or isinstance(exc, _TooLong):
            # the file is no capture this erascope reads, or cannot be read on: nothing in it is looked at further
            raise
        # a capture that cannot be checked (keyed, another key…): the ones joined after it still are
        result.status = Status.ERROR
        result.error = str(exc)
        for number, line in lines:
            if _is_header(line):
                lines.push((number, line))
                break


def _follows(before: FileResult, after: FileResult) -> bool:
    """Whether the part `after`, joined right after `before` in a file, goes on with it: a rotated
    part (`part` > 0) after the part whose `part-end` names a next part, or after a part of the same
    capture (whose `part-end` may be lost). Its link to `before` is then checked in the file."""
    if not isinstance(after.part, int) or isinstance(after.part, bool) or after.part <= 0:
        return False
    return before.next is not None or (before.identity is not None and before.identity == after.identity)


def _sum_up(joined: FileResult) -> None:
    """The file's verdict from its captures': tampered if any is, else cut, else an error, else the least
    its chains vouch for (no chain, never closed); where its chains hold to, and where the file ends."""
    units = joined.captures
    joined.findings = sorted((f for c in units for f in c.findings), key=lambda f: (f.line or 0, f.kind))
    statuses = {c.status for c in units}
    order = (Status.TAMPERED, Status.CUT, Status.ERROR, Status.NO_CHAIN, Status.UNCLOSED, Status.VERIFIED)
    joined.status = Status.TAMPERED if joined.findings else next(s for s in order if s in statuses)
    failed = next((c for c in units if c.error is not None), None)
    joined.error = None if failed is None else f"line {failed.line}: {failed.error}"
    first, last = units[0], units[-1]
    algorithms = {(c.algorithm, c.key_id) for c in units}
    joined.algorithm, joined.key_id = algorithms.pop() if len(algorithms) == 1 else (None, None)
    joined.part, joined.previous, joined.chain_prev = first.part, first.previous, first.chain_prev
    broken = next((c for c in units if c.findings or c.error is not None), last)
    joined.intact_to = broken.intact_to
    joined.lines, joined.next, joined.final = last.lines, last.next, last.final
    joined.closed_at, joined.torn, joined.continued = last.closed_at, last.torn, last.continued
    joined.stopped = last.stopped  # a check that stops reads nothing more: its capture is the file's last


def _compressed_since(path: str) -> str | None:
    """The compressed file a plain part listed a moment ago became, if it did: a recorder's retention
    (`--compress`) renames closed parts to `*.jsonl.zst` while a live folder is verified."""
    if is_url(path) or path.endswith(COMPRESSED_SUFFIXES):
        return None
    return next((path + suffix for suffix in COMPRESSED_SUFFIXES if _is_file(path + suffix)), None)


class _Unverifiable(Exception):
    """The file cannot be checked at all (not a capture, keyed with another key, …)."""


class _NotOurs(_Unverifiable):
    """The file's first line is no header of a capture this erascope reads."""


class _NoHeader(_NotOurs):
    """The file's first line is not a header record."""


class _TooLong(_Unverifiable):
    """A line is longer than `LINE_LIMIT`: the file is not checked further."""


def _numbered(stream: io.BufferedReader) -> Iterator[tuple[int, bytes]]:
    """The stream's lines after its first, numbered from 2, none longer than `LINE_LIMIT`. Raises
    `_TooLong` at a longer one, read only up to the limit."""
    for number in itertools.count(2):
        line = stream.readline(LINE_LIMIT + 1)
        if not line:
            return
        if len(line) > LINE_LIMIT:
            raise _TooLong(
                f"line {number} is longer than {LINE_LIMIT >> 20} MiB, more than verify holds to check a line:"
                " the file is not checked"
            )
        yield number, line


class _Lines:
    """A file's numbered lines after its first, read once, with room to give lines back: a capture's
    check that meets the header of a capture joined after it leaves that header to the next check."""

    __slots__ = ("_back", "_lines")

    def __init__(self, lines: Iterator[tuple[int, bytes]]) -> None:
        self._lines = lines
        self._back: list[tuple[int, bytes]] = []

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return self

    def __next__(self) -> tuple[int, bytes]:
        return self._back.pop() if self._back else next(self._lines)

    def push(self, item: tuple[int, bytes]) -> None:
        """Give `item` back: the next line read is it (the last pushed first)."""
        self._back.append(item)

    def stop(self) -> None:
        """Read nothing more: the rest of the file is not checked."""
        self._back.clear()
        self._lines = iter(())


def _is_header(line: bytes) -> bool:
    """The line is a `header` record: inside a file, where a capture joined after another starts
    (FORMAT.md, Ordering), as the analyzer reads it."""
    if b'"header"' not in line:  # the cheap test first: most lines are traffic, and every line is tested
        return False
    record = read_line(line)
    return record is not None and record.get(fmt.F_TYPE) == fmt.HEADER


@dataclass(slots=True)
class _Gap:
    """Indices missing where the chain jumped ahead; filled later if the lines were only moved."""

    start: int
    end: int
    line: int
    before: bytes
    """The digest the first missing line must follow."""
    moved: dict[int, int] = field(default_factory=dict)
    """index -> the line it was found on, further down."""
    digests: dict[int, bytes] = field(default_factory=dict)
    """index -> the digest written on that moved line: the next moved index must follow it."""
    opener: tuple[bytes, bytes] | None = None
    """The (covered bytes, digest) of the line that opened the gap, checked once the line before it
    turns up (it was moved ahead of it); None when it is not kept (`_OPENERS_KEPT`)."""


def _check(result: FileResult, first: bytes, lines: _Lines, key: bytes | None) -> None:
    at = result.line
    edited: chain.Chainer | None = None  # the chain of a header edited to name what this erascope does not know
    try:
        header = _parse_header(first)
    except _NoHeader:
        if fmt.cut_header(first):
            # what a crash while opening a part leaves; a part after this one would show it was emptied
            # (a compressed part is cut, not unclosed: `verify_file` says so once its stream is read)
            result.status = Status.UNCLOSED
            result.header_cut = True
            result.torn = 1 if first else None
            return
        # a sealed record first is a capture that lost its header, not another kind of file; so is a
        # first line that is no record before a sealed one (a header broken by an edit)
        index = _sealed_as(first)
        after: int | None = None  # the index the second line is sealed with
        if index is None:
            second = next(lines, None)
            if second is not None:
                lines.push(second)
                after = _sealed_as(second[1])
            if after is None:
                raise
        # without its header the chain cannot be followed, nor told from a capture joined after it
        lines.stop()
        result.status = Status.TAMPERED
        result.lines = 1
        if index is None:
            kind, why = (
                Kind.CHANGED,
                f"the first line is no sealed header record, but line 2 is sealed (as line index {after})",
            )
            why += ": the header was changed (the chain cannot be checked without it)"
        elif index == 1:
            kind, why = Kind.CHANGED, "the line sealed as the header (line index 1) is no header record"
        else:
            kind, why = Kind.REMOVED, f"the part starts with a record sealed as line index {index}, not with its header"
            why += ": the header was removed or moved (the chain cannot be checked without it)"
        result.findings.append(Finding(kind, result.file, 1, why))
        return
    except _NotOurs:
        header = read_line(first)  # a header record, naming a format this erascope does not know
        edited = _chain_of_edited(first, header, lines, key)
        if edited is None:
            raise
        result.findings.append(_edited_header(result, "format", header.get("format"), edited))
    result.part = header.get("part") if isinstance(header.get("part"), int) else None
    result.previous = header.get("previous") if isinstance(header.get("previous"), str) else None
    identity = tuple(header.get(name) for name in ("started", "host", "recorder_pid"))
    result.identity = identity if any(value is not None for value in identity) else None
    algorithm = header.get(fmt.F_CHAIN_ALG) if edited is None else edited.alg
    path = result.file
    if algorithm is None:
        result.status = Status.NO_CHAIN
        result.lines = at
        sealed_at: int | None = at if chain.split(first) is not None else None
        for number, line in lines:
            if _is_header(line):  # another capture joined after this one
                lines.push((number, line))
                break
            if line.endswith(b"\n"):
                result.lines = number
                if sealed_at is None and chain.split(line) is not None:
                    sealed_at = number
        if sealed_at is not None:
            # a capture made before chains has no sealed line: stripping the header's chain fields is
            # how a forger would make a chained capture go unchecked
            result.findings.append(
                Finding(
                    Kind.CHANGED,
                    path,
                    at,
                    f"the header names no chain, but line {sealed_at} is sealed:"
                    " the header's chain fields were removed",
                )
            )
        if key is not None:
            result.findings.append(
                Finding(Kind.UNKEYED, path, at, "no chain, although --key was given: anyone could have written it")
            )
        return
    if edited is None and (not isinstance(algorithm, str) or algorithm not in chain.ALGORITHMS):
        edited = _chain_of_edited(first, header, lines, key)
        if edited is None:
            raise _Unverifiable(f"unknown chain algorithm {algorithm!r}")
        result.findings.append(_edited_header(result, "chain algorithm", algorithm, edited))
        algorithm = edited.alg
    result.algorithm = algorithm
    result.key_id = header.get(fmt.F_CHAIN_KEY_ID) if isinstance(header.get(fmt.F_CHAIN_KEY_ID), str) else None
    if algorithm in chain.KEYED:
        if key is None:
            raise _Unverifiable(f"the chain is keyed (key id {result.key_id}); pass its key with --key FILE")
        chainer = chain.Chainer(key, algorithm)
        if chain.key_id(key) != result.key_id:
            # a key id is only a name: when the chain links under --key, it is the header that lies
            second = next(lines, None)
            if second is not None:
                lines.push(second)
            if second is None or not _links(chainer, first, second[1]):
                raise _Unverifiable(
                    f"the chain was made with another key (key id {result.key_id}; --key has {chain.key_id(key)})"
                )
            result.findings.append(
                Finding(
                    Kind.CHANGED,
                    path,
                    at,
                    f"the header's {fmt.F_CHAIN_KEY_ID} {result.key_id} is not --key's ({chain.key_id(key)}),"
                    " yet the chain links under --key: the header was changed",
                )
            )
    else:
        if key is not None:
            result.findings.append(
                Finding(Kind.UNKEYED, path, at, "the chain is not keyed, although --key was given: anyone can forge it")
            )
        chainer = chain.Chainer(None, algorithm)
    start = chain.START
    if fmt.F_CHAIN_PREV in header:
        linked = chain.decode(header[fmt.F_CHAIN_PREV]) if isinstance(header[fmt.F_CHAIN_PREV], str) else None
        if linked is None:
            result.findings.append(Finding(Kind.CHANGED, path, at, f"the header's {fmt.F_CHAIN_PREV} is not a digest"))
        else:
            start = linked
            result.chain_prev = linked
    _walk(result, chainer, start, first, lines)


def _chain_of_edited(first: bytes, header: Any, lines: _Lines, key: bytes | None) -> chain.Chainer | None:
    """The chain a sealed header that names a format or a chain algorithm this erascope does not know
    was sealed in, when it was changed since: the line after it follows its written seal under an
    algorithm this erascope knows (a keyed one only with `key`), and that seal does not cover the
    header's bytes. None when there is no such chain: the header is as it was sealed (a capture this
    erascope cannot check), or nothing shows it."""
    sealed = chain.split(first)
    second = next(lines, None) if sealed is not None and sealed[0] == 1 else None
    if sealed is None or second is None:
        return None
    lines.push(second)
    linked = header.get(fmt.F_CHAIN_PREV) if isinstance(header, dict) else None
    starts = [chain.START, *([d] if isinstance(linked, str) and (d := chain.decode(linked)) else [])]
    for algorithm in sorted(chain.ALGORITHMS):
        if algorithm in chain.KEYED and key is None:
            continue
        chainer = chain.Chainer(key if algorithm in chain.KEYED else None, algorithm)
        if _links(chainer, first, second[1]):
            return None if any(chainer.digest(s, sealed[2]) == sealed[1] for s in starts) else chainer
    return None


def _edited_header(result: FileResult, what: str, value: object, chainer: chain.Chainer) -> Finding:
    """The header's line changed: it names `what` as `value`, which this erascope does not know, yet
    the lines after it go on from its seal in `chainer`'s chain."""
    if value is None:
        names = f"no {what}"
    else:
        shown = fmt.shown_format(value) if isinstance(value, str) else repr(value)[:40]
        names = f"the {what} {shown}, which this erascope does not know"
    return Finding(
        Kind.CHANGED,
        result.file,
        result.line,
        f"the header names {names}, but the lines after it are sealed in a {chainer.alg} chain from its seal,"
        " and that seal does not cover it: the header was changed",
    )


def _sealed_as(line: bytes) -> int | None:
    """The line index a line is sealed with (or claims, its seal no longer ending it), or None when
    it is not sealed."""
    sealed = chain.split(line if line.endswith(b"\n") else line + b"\n")
    if sealed is not None:
        return sealed[0]
    claimed = _claimed_seal(line)
    return None if claimed is None else claimed[0]


def _links(chainer: chain.Chainer, first: bytes, second: bytes) -> bool:
    """The second line's seal follows the first's under `chainer`."""
    head, tail = chain.split(first), chain.split(second)
    return head is not None and tail is not None and chainer.digest(head[1], tail[2]) == tail[1]


def _parse_header(first: bytes) -> dict[str, Any]:
    """The header record `first`, as the analyzer reads it (`analyzer.load.read_line`): its values are
    read for what they say, the chain covers the line's bytes whatever that is."""
    header = read_line(first)
    if not isinstance(header, dict) or header.get(fmt.F_TYPE) != fmt.HEADER:
        raise _NoHeader("not an erascope capture (its first line is not a header record)")
    value = header.get("format")
    if not isinstance(value, str) or not value.startswith(fmt.FORMAT_NAME + "/"):
        raise _NotOurs("not an erascope capture (its header names no erascope format)")
    if fmt.parse_format_id(value) != fmt.FORMAT_MAJOR:
        raise _NotOurs(f"capture format {fmt.shown_format(value)} is not known to this erascope")
    return header


def _walk(result: FileResult, chainer: chain.Chainer, start: bytes, first: bytes, lines: _Lines) -> None:
    path = result.file
    findings = result.findings
    previous = start
    expected = 1
    broken = False
    seen_max = 0
    gaps: list[_Gap] = []
    openers_room = _OPENERS_KEPT
    # what is wrong with the header is said already; its digest not matching adds nothing
    header_changed = any(f.line == result.line and f.kind is Kind.CHANGED for f in findings)
    moved = 0
    for number, line in itertools.chain([(result.line, first)], lines):
        if len(findings) + len(gaps) + moved >= FINDINGS_LIMIT:
            # every gap and line moved is a finding to come: the capture is tampered, and said where up to here
            result.stopped = number - 1
            lines.stop()
            break
        # a capture's header is sealed as its line 1: a header sealed as the next line of the open chain
        # it is in is a line of that chain made a header (edited), and starts nothing
        if (
            number != result.line
            and _is_header(line)
            and (result.closed_at is not None or _sealed_as(line) != expected)
        ):
            if result.closed_at is None and (after := next(lines, None)) is not None:
                lines.push(after)
                if _continues(chainer, previous, expected, after[1]):
                    # its next line goes on with this chain: the header starts no capture, it was put here
                    result.lines = number
                    findings.append(
                        Finding(
                            Kind.INSERTED,
                            path,
                            number,
                            "a header record inside the capture (inserted or copied): the line after it goes on"
                            " with this capture's chain",
                        )
                    )
                    broken = True
                    continue
            lines.push((number, line))  # a capture joined after this one starts here
            break
        if not line.endswith(b"\n"):  # only the last line can lack its newline
            if not _whole(line):
                result.torn = number
                if result.closed_at is not None:
                    findings.append(_appended(path, number, result.closed_at, "an incomplete line"))
                break
            # readers take a line short only of its newline as written (FORMAT.md), so it is checked as one:
            # a record added after `part-end` must not pass as a torn tail
            line += b"\n"
        result.lines = number
        if result.closed_at is not None:  # whatever else is wrong with the line
            findings.append(_appended(path, number, result.closed_at, "a line"))
            broken = True
        sealed = chain.split(line)
        covered: memoryview | None = None
        if sealed is not None:
            index, written, covered = sealed
            closing = line.startswith(_PART_END_PREFIX)
            if line[-len(chain.TAIL) - 1] not in _LAST_DIGEST_CHARACTERS:
                # the digest's text is the one part of a line no digest covers, and its last character has
                # two bits a decoder ignores: set, the bytes changed and the digest read did not
                findings.append(
                    Finding(
                        Kind.CHANGED,
                        path,
                        number,
                        "its digest is not written as it was sealed (base64 with its unused bits set)",
                    )
                )
                broken = True
        elif (claimed := _claimed_seal(line)) is not None:
            # the seal is there but no longer ends the line (a CRLF, a space, keys reordered): the bytes
            # changed, and the chain goes on from the seal, so one edited line is one finding, not a cascade
            index, written, closing = claimed
            findings.append(
                Finding(
                    Kind.CHANGED,
                    path,
                    number,
                    "the line's bytes are not as sealed (reformatted or edited): its chain field no longer ends it",
                )
            )
            broken = True
        else:
            if result.closed_at is None:  # after the closing record, appended says it
                findings.append(
                    Finding(Kind.INSERTED, path, number, "a line without a chain digest (inserted or damaged)")
                )
            broken = True
            continue
        linked = covered is not None and chainer.digest(previous, covered) == written
        if index != expected and covered is not None and _renumbered(chainer, previous, covered, expected) == written:
            # sealed as the expected line with only its number edited: one changed line, not a gap and a cascade
            findings.append(
                Finding(Kind.CHANGED, path, number, f"its line index was edited: sealed as {expected}, it says {index}")
            )
            broken = True
            index, linked = expected, True
        if index < expected:
            gap = _gap_of(gaps, index)
            if gap is not None:
                gap.moved[index] = number
                moved += 1
                gap.digests[index] = written
                # checked against the line it follows when that one is known: moving one line up displaces
                # all it jumped over, and an edit among them must not pass as part of the move
                before = gap.before if index == gap.start else gap.digests.get(index - 1)
                if covered is not None and before is not None and chainer.digest(before, covered) != written:
                    findings.append(Finding(Kind.CHANGED, path, number, "the moved line does not match its digest"))
                if index == gap.end - 1 and gap.opener is not None:
                    # the line that opened the gap follows this one: it was moved up, and may be edited too
                    if chainer.digest(written, gap.opener[0]) != gap.opener[1]:
                        findings.append(
                            Finding(Kind.CHANGED, path, gap.line, "the line moved up does not match its digest")
                        )
                    openers_room += len(gap.opener[0])
                    gap.opener = None
            else:
                findings.append(
                    Finding(Kind.INSERTED, path, number, f"line index {index} was already taken (inserted or copied)")
                )
            broken = True
            continue
        if index > expected:
            gap = _Gap(expected, index, number, previous)
            if covered is not None and len(covered) <= openers_room:
                gap.opener = (bytes(covered), written)
                openers_room -= len(covered)
            gaps.append(gap)
            broken = True
        elif not linked and covered is not None and not (number == result.line and header_changed):
            findings.append(
                Finding(
                    Kind.CHANGED,
                    path,
                    number,
                    "the line does not match its digest (the line was changed, or the digest of the line before it)",
                )
            )
            broken = True
        previous = written
        expected = index + 1
        seen_max = max(seen_max, index)
        if not broken:
            result.intact_to = number
        if closing and result.closed_at is None:
            result.closed_at = number
            _read_part_end(result, line)
    result.final = previous
    for gap in gaps:
        _report_gap(result, gap)
    findings.sort(key=lambda f: (f.line or 0, f.kind))
    if findings:
        result.status = Status.TAMPERED
    else:
        result.status = Status.VERIFIED if result.closed_at is not None else Status.UNCLOSED


def _continues(chainer: chain.Chainer, previous: bytes, expected: int, line: bytes) -> bool:
    """The line is sealed as the line expected next, after the line whose digest is `previous`."""
    sealed = chain.split(line if line.endswith(b"\n") else line + b"\n")
    return sealed is not None and sealed[0] == expected and chainer.digest(previous, sealed[2]) == sealed[1]


def _renumbered(chainer: chain.Chainer, previous: bytes, covered: memoryview, index: int) -> bytes:
    """The digest of a sealed line's covered bytes with its line index written as `index`."""
    end = bytes(covered[-(len(chain.FIELD_OPEN) + 21) :])  # the field's opening, at most 20 digits and `:`
    written = len(end) - end.rfind(chain.FIELD_OPEN) - len(chain.FIELD_OPEN)
    return chainer.digest(previous, covered[: len(covered) - written], b"%d:" % index)


def _gap_of(gaps: list[_Gap], index: int) -> _Gap | None:
    """The gap a line moved back belongs to, unless its index is already found there.

    Gaps open at the expected index, which only grows, so `gaps` is sorted and disjoint: a search,
    not a scan, or a file of many gaps costs quadratic time.
    """
    at = bisect.bisect_right(gaps, index, key=lambda g: g.start) - 1
    if at < 0:
        return None
    gap = gaps[at]
    return gap if index < gap.end and index not in gap.moved else None


def _claimed_seal(line: bytes) -> tuple[int, bytes, bool] | None:
    """The (index, digest, is a `part-end`) a line's `chain` field claims when the line is a JSON object
    (as the analyzer reads it, `analyzer.load.read_line`) whose seal `chain.split` cannot take from its
    end, or None when it carries no seal."""
    # orjson refuses a lone surrogate escape: a reformatted line holding one was called inserted, and one
    # first in a part whose header was removed made the file no capture
    record = read_line(line)
    seal = record.get(fmt.F_CHAIN) if record is not None else None
    if not isinstance(seal, str):
        return None
    number, colon, digest = seal.encode("ascii", "replace").partition(b":")
    parsed = chain.parse_seal(number, digest) if colon else None
    if parsed is None:
        return None
    return parsed[0], parsed[1], record.get(fmt.F_TYPE) == fmt.PART_END


def _whole(line: bytes) -> bool:
    """A line lacking its newline is whole when it is sealed or otherwise complete JSON; a line the
    recorder tore is neither (it lacks at least the record's closing `}`)."""
    if chain.split(line + b"\n") is not None:
        return True
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        # `erascope analyze` reads lines with polars' JSON reader, which takes some lines orjson refuses
        # (a lone surrogate escape, "\ud800"): a line it reads as a record is no torn line, and is checked
        return _read_by_analyze(line)
    return True


def _read_by_analyze(line: bytes) -> bool:
    """Whether `erascope analyze`'s NDJSON reader (`analyzer.load`) takes `line` for a record, its lone
    surrogate escapes written as their text first, as `analyze` writes them (the reader refuses a low
    one alone)."""
    try:
        line.decode()
        frame = pl.read_ndjson(io.BytesIO(line_as_text(line)), schema={fmt.F_TYPE: pl.String()})
    except Exception:  # polars raises errors of its own (ComputeError, …) for what it cannot read
        return False  # analyze reads such a line as torn, as verify does
    return frame.height == 1 and frame.item(0, fmt.F_TYPE) is not None


def _appended(path: str, number: int, closed_at: int, what: str) -> Finding:
    return Finding(Kind.APPENDED, path, number, f"{what} after the part's closing record, line {closed_at}")


def _read_part_end(result: FileResult, line: bytes) -> None:
    # as the analyzer reads the line: orjson refuses a lone surrogate escape, and the `next` of a
    # `part-end` holding one was lost (the part taken for its rotation's last, a missing next part unsaid)
    record = read_line(line)
    if record is not None and isinstance(record.get(fmt.F_NEXT), str):
        result.next = record[fmt.F_NEXT]


def _report_gap(result: FileResult, gap: _Gap) -> None:
    # the gap's size comes from an index written in the file: only the moved indices are counted one by one
    missing = gap.end - gap.start - len(gap.moved)
    first = gap.start
    while first in gap.moved:
        first += 1
    last = gap.end - 1
    while last in gap.moved:
        last -= 1
    if not missing and _moved_up(result, gap):
        return
    for index, line in sorted(gap.moved.items()):
        result.findings.append(
            Finding(
                Kind.REORDERED,
                result.file,
                line,
                f"line index {index} belongs before line {gap.line}: lines were moved",
            )
        )
    if missing:
        result.findings.append(
            Finding(
                Kind.REMOVED,
                result.file,
                gap.line,
                f"{missing} line(s) removed before this line (line index {first}"
                + (f" to {last})" if missing > 1 else ")"),
            )
        )


def _moved_up(result: FileResult, gap: _Gap) -> bool:
    """Say the lines that opened `gap` were moved up, when that is what happened and they are fewer
    than the lines they jumped over (which all turned up after them, in order): one finding, not
    one per displaced line."""
    after = gap.moved[gap.start]
    up = after - gap.line  # the lines from the gap's opener to the first displaced one
    if up >= len(gap.moved) or any(gap.moved[i] != after + i - gap.start for i in range(gap.start, gap.end)):
        return False
    what = (
        f"line index {gap.end} belongs"
        if up == 1
        else f"lines {gap.line} to {after - 1} (line index {gap.end} to {gap.end + up - 1}) belong"
    )
    where = f"line index {gap.end - 1} (line {gap.moved[gap.end - 1]})"
    result.findings.append(Finding(Kind.REORDERED, result.file, gap.line, f"{what} after {where}: moved up"))
    return True


def _check_links(result: Verification) -> None:
    """Check the rotation links between the parts given, and that every part a link names exists.

    Rotated parts joined in one file (`FileResult.follows`) are linked there, by their place: the
    part that follows a `part-end` in the file is its next part, whatever its file was named."""
    # by folder, then name: two copies of a capture (a folder and its backup) are two sets of parts,
    # and a part of one must not stand in for the other's deleted part
    given: dict[str, dict[str, FileResult]] = {}
    unchecked: set[tuple[str, str]] = set()  # given, but not a chain this could check (its error is reported)
    for r in result.files:
        where = (_folder(r.file), strip_compression(os.path.basename(r.file)))
        if r.error is None or r.captures:  # a file of captures joined is read, though one could not be checked
            copies = given.setdefault(where[1], {})
            # copies of one part under its name, plain and compressed (`x.000.jsonl`, `x.000.jsonl.zst`):
            # the fullest stands for the part, not the first listed, which may be a copy taken while the
            # part was written (each copy's own chain is checked all the same)
            if where[0] not in copies or _fullness(r) > _fullness(copies[where[0]]):
                copies[where[0]] = r
        else:
            unchecked.add(where)

    # the parts of a rotation joined in a file, by the name their file had: a part given apart names them
    # (`cat x.001.jsonl x.002.jsonl > rest.jsonl` beside x.000.jsonl)
    inside: dict[tuple[str, str], FileResult] = {}
    for r in result.files:
        for i, u in enumerate(r.captures):
            name = _joined_name(r.captures[i - 1] if u.follows else None, u)
            if name is not None and name not in given:
                inside.setdefault((_folder(r.file), name), u)

    def linked(r: FileResult, name: str) -> FileResult | None:
        """The part given that `r`'s link to `name` names: beside `r`, or else in a folder that holds
        no copy of `r` (the capture's older parts moved to another folder), or joined in a file beside `r`."""
        copies = given.get(name, {})
        folder = _folder(r.file)
        if folder in copies:
            return copies[folder]
        own = given.get(strip_compression(os.path.basename(r.file)), {})
        return next((p for f, p in copies.items() if f not in own), inside.get((folder, name)))

    by_file = {r.file: r for r in result.files}
    present: dict[tuple[str, str], set[int]] = {}
    for name, copies in given.items():
        m = _PART_NAME.match(name)
        for folder, r in copies.items():
            if m and r.units[0].part is not None:
                present.setdefault((folder, m["capture"]), set()).add(r.units[0].part)
    for (folder, name), u in inside.items():
        if (m := _PART_NAME.match(name)) and u.part is not None:
            present.setdefault((folder, m["capture"]), set()).add(u.part)
    missing: set[tuple[str, str]] = set()
    standing = {id(r) for copies in given.values() for r in copies.values()}
    for r in result.files:
        if id(r) not in standing and (r.error is None or r.captures):
            # a copy that does not stand for its part is not linked, but must hold the part its name says
            _misnamed(r, strip_compression(os.path.basename(r.file)))
    for name, folder, r in sorted((n, f, r) for n, copies in given.items() for f, r in copies.items()):
        if _misnamed(r, name):
            continue
        units = r.units
        for i, u in enumerate(units):
            if u.error is not None:
                continue  # its error is reported; so is a link to it from the part joined after it
            if u.follows:
                if units[i - 1].error is None:
                    _check_link(units[i - 1], u, in_file=True)
            elif u.previous is not None:
                _check_previous(result, u, i == 0, name, folder, linked, by_file, present, unchecked, missing)
            if u.next is None or (i + 1 < len(units) and units[i + 1].follows):
                continue
            if linked(u, u.next) is None and (folder, u.next) not in missing:
                other = _given_under_another_name(u.file, u.next, by_file)
                if other is not None and _part_number(u.next) != other.units[0].part:
                    missing.add((folder, u.next))
                    u.findings.append(Finding(Kind.PART_LINK, u.file, u.closed_at, _replaced(u.next, other, "next")))
                elif other is None and not _on_disk(u.file, u.next):
                    missing.add((folder, u.next))
                    u.findings.append(
                        Finding(Kind.PART_MISSING, u.file, u.closed_at, f"the next part {u.next} is missing")
                    )


def _misnamed(r: FileResult, name: str) -> bool:
    """Say so when the file `r`, named `name` (without `.gz`/`.zst`), is another part (a link, a copy)
    under a part's name, its header as sealed: its links are not that part's (a header changed to say
    so is found changed already)."""
    head = r.units[0]
    named = _PART_NAME.match(name) if PART_NAME.fullmatch(name) else None
    if not named or head.findings or head.part is None or int(named["part"]) == head.part:
        return False
    head.findings.append(
        Finding(
            Kind.PART_LINK,
            head.file,
            1,
            f"the file is named as part {int(named['part'])}, but its header is part {head.part}'s:"
            " the part was replaced or renamed",
        )
    )
    return True


def _fullness(r: FileResult) -> tuple[bool, bool, bool, int]:
    """How much of its part a copy holds, for the copy to stand for it: the part its name says, an
    intact chain, then a closed part, then more lines."""
    number = _part_number(os.path.basename(r.file))
    return (
        number is None or number == r.units[0].part,
        not r.findings and r.error is None,
        r.units[-1].closed_at is not None,
        r.lines,
    )


def _check_previous(
    result: Verification,
    r: FileResult,
    heads_file: bool,
    name: str,
    folder: str,
    linked: Callable[[FileResult, str], FileResult | None],
    by_file: dict[str, FileResult],
    present: dict[tuple[str, str], set[int]],
    unchecked: set[tuple[str, str]],
    missing: set[tuple[str, str]],
) -> None:
    """Check the link from part `r` to the previous part its header names, in another file: `r`
    heads its file, or is joined after a capture that is not its previous part."""
    previous = r.previous
    assert previous is not None
    at = f"{r.file}" if r.line == 1 else f"{r.file}:{r.line}"
    before = linked(r, previous)
    if before is not None:
        end = _previous_in(before, r, name)
        if end.error is None:
            _check_link(end, r)
        else:
            result.notes.append(f"{at}: the previous part {previous} could not be checked; link not checked")
    elif (folder, previous) in unchecked:
        result.notes.append(f"{at}: the previous part {previous} could not be checked; link not checked")
    elif (folder, previous) in missing:
        pass  # said already, by the part before it
    elif (other := _given_under_another_name(r.file, previous, by_file)) is not None:
        if _part_number(previous) == other.units[-1].part:  # its own part, given under a wrong name
            _check_link(other.units[-1], r)
        else:
            missing.add((folder, previous))
            r.findings.append(Finding(Kind.PART_LINK, r.file, r.line, _replaced(previous, other, "previous")))
    elif _on_disk(r.file, previous):
        result.notes.append(f"{at}: the previous part {previous} was not given; link not checked")
    else:
        m = _PART_NAME.match(name) if heads_file else None
        earlier = present.get((folder, m["capture"]), set()) if m else set()
        if r.part is not None and any(p < r.part for p in earlier):
            missing.add((folder, previous))
            r.findings.append(Finding(Kind.PART_MISSING, r.file, r.line, f"the previous part {previous} is missing"))
        else:
            result.notes.append(
                f"{at}: the capture's parts before part {r.part} are absent (removed by retention,"
                " or deleted); its chain starts from the digest its header names"
            )


def _previous_in(before: FileResult, r: FileResult, name: str) -> FileResult:
    """The part of the file `before` that the part `r` (in the file named `name`) goes on from: the one
    whose `part-end` names that file, else the one numbered just before `r` of its capture, else the
    file's last part. A file may hold more after its part (its next parts joined, `cat x.001.jsonl >>
    x.000.jsonl`; another capture): its last part is not always the one `r` follows."""
    units = before.units
    named = next((u for u in reversed(units) if u.next == name), None)
    if named is not None:
        return named
    if isinstance(r.part, int) and not isinstance(r.part, bool) and r.identity is not None:
        numbered = (u for u in reversed(units) if u.part == r.part - 1 and u.identity == r.identity)
        return next(numbered, units[-1])
    return units[-1]


def _joined_name(before: FileResult | None, u: FileResult) -> str | None:
    """The name the file of part `u`, joined in a file (after `before` when it follows it), had: the
    name the part before it links to it by, or else the one its own links' names make for its part."""
    if before is not None and before.next is not None:
        return before.next
    if not isinstance(u.part, int) or isinstance(u.part, bool) or u.part < 0:
        return None
    for link in (u.previous, u.next):
        if link is not None and (m := _PART_NAME.match(link)):
            return f"{m['capture']}.{u.part:03d}.jsonl"
    return None


def _given_under_another_name(beside: str, name: str, given: dict[str, FileResult]) -> FileResult | None:
    """The given file that the part `name` next to `beside` is under another name (a symbolic or hard
    link between the two): the inputs list one file once, so `name` itself was not read. None otherwise."""
    if is_url(beside) or not _on_disk(beside, name):
        return None
    here = os.path.join(os.path.dirname(beside), name)
    for path, r in given.items():
        with contextlib.suppress(OSError):
            if os.path.basename(path) != name and os.path.samefile(here, path):
                return r
    return None


def _part_number(name: str) -> int | None:
    m = _PART_NAME.match(strip_compression(name))
    return int(m["part"]) if m else None


def _replaced(name: str, other: FileResult, which: str) -> str:
    return (
        f"the {which} part {name} is {os.path.basename(other.file)} (part {other.part}) under another name (a link"
        " between the two): the part was replaced or renamed"
    )


def _folder(path: str) -> str:
    """The folder a given file is in, however it was named (`c/x`, `./c/x`, a link to the folder)."""
    if is_url(path):
        return path.rpartition("/")[0]
    return os.path.realpath(os.path.dirname(path) or ".")


def _check_link(before: FileResult, after: FileResult, *, in_file: bool = False) -> None:
    """Check that part `after` starts where part `before` ends: parts in files of their own, or
    (`in_file`) joined one after the other in one file, named then by the line their header is on."""

    def label(r: FileResult) -> str:
        return f"the part on line {r.line}" if in_file else os.path.basename(r.file)

    if before.header_cut and after.algorithm is not None:
        what = "cut within its header" if before.torn else "cut before its first line" if before.cut else "empty"
        after.findings.append(
            Finding(
                Kind.PART_LINK,
                after.file,
                after.line,
                f"{label(before)} is {what}, yet this part follows it: its records were removed",
            )
        )
        return
    if before.algorithm is None or after.algorithm is None:
        # a capture's parts are all chained or none is: a chainless part linked to a chained one is a
        # chained part whose seals were stripped (then edited at will), not a capture made before chains
        named = f" ({fmt.F_CHAIN_PREV} names this part's final digest)"
        for bare, chained, where in ((after, before, "before it"), (before, after, f"after it{named}")):
            if chained.algorithm is not None and bare.status is Status.NO_CHAIN:
                why = f"the part has no chain, but {label(chained)} {where} has one"
                bare.findings.append(
                    Finding(Kind.PART_LINK, bare.file, bare.line, f"{why}: this part's chain was removed")
                )
                break
        return
    if after.chain_prev is not None and before.final == after.chain_prev:
        before.continued = True
        if before.status is Status.UNCLOSED:
            before.status = Status.VERIFIED  # its closing record was lost, but the next part vouches for its end
        return
    why = "that part's end was changed or cut"
    if in_file and isinstance(before.part, int) and isinstance(after.part, int) and after.part != before.part + 1:
        why = f"this is part {after.part}, after part {before.part}: the parts between them were removed or moved"
    after.findings.append(
        Finding(
            Kind.PART_LINK,
            after.file,
            after.line,
            f"the header does not start where {label(before)} ends (line {before.lines}): {why}",
        )
    )


def _on_disk(beside: str, name: str) -> bool:
    """A part named by a link is a file next to the file naming it (plain or compressed), though not given.

    The recorder links parts by file name; a link that is not a plain name (a path, `..`, a NUL)
    came from an edit and names no part, so nothing outside the capture's folder is looked at.
    """
    if "\x00" in name or name in ("", ".", "..") or os.path.basename(name) != name or "\\" in name:
        return False
    folder = os.path.dirname(beside)
    return any(_is_file(os.path.join(folder, name + suffix)) for suffix in ("", *COMPRESSED_SUFFIXES))


def _is_file(path: str) -> bool:
    """A regular file (an object at a URL too) is there: a directory or a FIFO named like a deleted
    part must not hide its removal."""
    try:
        return stat.S_ISREG(mode_size(path)[0])
    except OSError:
        return False


def render_text(result: Verification) -> str:
    """The human report: one line per file, then each finding as `file:line: kind: message`."""
    out: list[str] = []
    for r in result.files:
        if not r.captures:
            out.append(f"{r.file}: {_describe(r)}")
            out.extend(f"  {f.where}: {f.kind.value}: {f.message}" for f in r.findings)
            continue
        # each capture joined in the file, as its own file would be reported, under the file's verdict
        out.append(f"{r.file}: {describe(r)}")
        for c in r.captures:
            rotated = isinstance(c.part, int) and (c.part > 0 or c.next is not None)
            out.append(f"  line {c.line}: {f'part {c.part}: ' if rotated else ''}{_describe(c)}")
            out.extend(f"    {f.where}: {f.kind.value}: {f.message}" for f in c.findings)
    out.extend(f"note: {note}" for note in result.notes)
    counts = result.counts()
    joined = [r for r in result.files if r.captures]
    out.append(
        f"{len(result.files)} file(s)"
        + (
            f" ({len(joined)} holding {sum(len(r.captures) for r in joined)} captures or parts joined)"
            if joined
            else ""
        )
        + ": "
        + ", ".join(f"{n} {status}" for status, n in counts.items() if n)
        + (f"; {len(result.findings)} finding(s): tampering" if result.tampered else "")
        + (f"; {len(result.cut)} compressed part(s) cut after they were written: lines lost" if result.cut else "")
    )
    # file names and what a chain's records claim (algorithm, key id) come from the captures
    return "\n".join(visible(line) for line in out) + "\n"


def render_json(result: Verification) -> str:
    """The report for programs (`--format json`), indented, ending with a newline."""
    doc = result.as_dict()
    try:
        return json_visible(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()) + "\n"
    except TypeError:  # a file name that is not UTF-8 (read with surrogate escapes, which JSON cannot hold)
        # its undecodable bytes as U+FFFD, as `erascope analyze`'s json writes them
        return json_visible(orjson.dumps(scrubbed(doc, valid_unicode), option=orjson.OPT_INDENT_2).decode()) + "\n"


def describe(r: FileResult) -> str:
    """What `render_text` says of one file on its line: its verdict, or a joined file's sum."""
    return f"{_joined(r)}: {_sum(r)}" if r.captures else _describe(r)


def _joined(r: FileResult) -> str:
    """What a file of captures joined holds: captures, or the parts of one."""
    captures = sum(not c.follows for c in r.captures)
    parts = len(r.captures)
    if captures == parts:
        return f"{captures} captures joined"
    if captures == 1:
        return f"{parts} parts of one capture joined"
    return f"{captures} captures joined ({parts} parts)"


def _sum(r: FileResult) -> str:
    """The verdict of a file of captures joined, each one's said under it."""
    match r.status:
        case Status.VERIFIED:
            return "verified"
        case Status.TAMPERED:
            return f"TAMPERED: {len(r.findings)} finding(s)"
        case Status.CUT:
            return f"CUT: {r.cut}; lines lost"
        case Status.ERROR:
            return "not all could be checked"
        case Status.NO_CHAIN:
            return "not all carry a chain"
        case _:
            return "not all were closed (a crash, not tampering)"


def _describe(r: FileResult) -> str:
    keyed = f"{r.algorithm}, key id {r.key_id}" if r.key_id else f"{r.algorithm or 'no chain named'}"
    final = chain.encode(r.final).decode() if r.final is not None else ""
    torn = f"; line {r.torn} is torn (incomplete)" if r.torn else ""
    cut = f"; {r.cut}" if r.cut else ""
    match r.status:
        case Status.VERIFIED if r.closed_at is None:
            return (
                f"verified ({r.count} lines, {keyed}): its closing record is missing but the next part starts from"
                f" its last line's digest{torn}"
            )
        case Status.VERIFIED:
            return f"verified ({r.count} lines, closed, {keyed}, final digest {final}){cut}"
        case Status.UNCLOSED if r.header_cut:
            what = "its header (line 1) is torn" if r.torn else "empty"
            return (
                f"never closed: {what}. The recorder stopped before its header was written whole (a crash,"
                " or it is just starting): nothing to check, not tampering"
            )
        case Status.UNCLOSED:
            return (
                f"never closed: the chain holds up to line {r.intact_to}, its last complete line{torn}"
                f" ({keyed}). The recorder crashed or is still writing: not tampering, but lines lost after"
                " that point cannot be told from a cut"
            )
        case Status.CUT if r.header_cut:
            what = "its header (line 1) is torn" if r.torn else "not one line of it can be read"
            return (
                f"CUT: {r.cut}; {what}. A compressed part is written whole, so this one was cut after it was"
                " written: all its lines are lost"
            )
        case Status.CUT:
            return (
                f"CUT: {r.cut}; the chain holds up to line {r.intact_to}, its last complete line{torn}"
                f" ({keyed}). A compressed part is written whole, so this one was cut after it was written:"
                " its lines after that point are lost"
            )
        case Status.NO_CHAIN:
            return f"no chain ({r.count} lines; made before captures carried one){cut}: not checked"
        case Status.TAMPERED:
            stopped = (
                f"; not checked after line {r.stopped}: more than {FINDINGS_LIMIT} findings"
                if r.stopped is not None
                else ""
            )
            return (
                f"TAMPERED: {len(r.findings)} finding(s) ({keyed}; chain intact up to line {r.intact_to}){stopped}{cut}"
            )
        case _:
            return f"error: {r.error}"
