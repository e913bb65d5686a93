"""Differential: `watch` against `analyze` on hostile and edge-case captures written while it follows them.

Each example takes corpus captures (some broken the ways tests/test_fuzz_inputs.py breaks them, some
rotated into parts, some of those parts compressed once closed), appends them to a live directory in
chunks of random sizes (lines cut mid-way, so a round meets torn last lines), a round of a `Watcher`
after each (a fake clock), then idles past the probe timeout. Watch never raises, its last word on
every finding and era change is what `analyze` gives on the final files (tests/test_watch.py's
`reported` and `expected`), and the malformed lines it notes are those `analyze` reports (file:line),
each once. The fixed cases after it are what it found, each made small.
"""

from __future__ import annotations

import gzip
import itertools
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from addon.errors import ErascopeError
from analyzer.sources import strip_compression
from analyzer.watch import Watcher
from tests.test_fuzz_inputs import FIELDS, ODD, _set_field, _splice, byte_mutation, fuzzed
from tests.test_watch import CORPUS, analyzed, expected, reported

SCENARIOS = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
NOTE = re.compile(r"^(.*\.jsonl(?:\.zst|\.gz)?):(\d+): (.*)$", re.DOTALL)


@dataclass(frozen=True)
class Source:
    """One capture as it will be written: its parts (file name, bytes), and how it was made."""

    parts: tuple[tuple[str, bytes], ...] = field(repr=False)
    how: str


@dataclass(frozen=True)
class Case:
    sources: tuple[Source, ...]
    seed: int
    pieces: int
    """Each part is written in up to this many pieces, cut at random bytes (a round after each)."""
    step: float
    compress: str | None
    """Closed parts compressed: `.zst` as `--compress`, `.gz` as logrotate."""
    read_limit: int | None = None
    """`READ_LIMIT` while watched (None: watch's own): a round reads a file in steps."""
    glob: bool = False
    """Watch `live/*.jsonl` instead of the directory."""
    backlog: int = 0
    """How many of the captures are there whole before watch starts."""

    def __repr__(self) -> str:
        return (
            f"Case({[s.how for s in self.sources]}, seed={self.seed}, pieces={self.pieces}, step={self.step},"
            f" compress={self.compress}, read_limit={self.read_limit}, glob={self.glob}, backlog={self.backlog})"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # hypothesis prints this, not the bytes
        p.text(repr(self))


def _mutate(draw: st.DrawFn, data: bytes) -> tuple[bytes, str]:
    kind = draw(st.sampled_from(
        ["none", "none", "flip", "truncate", "utf8", "type", "line", "blank", "dup", "nonl", "rekey", "batch", "move",
         "ts"]
    ))
    at = draw(st.integers(0, max(0, len(data))))
    if (bytewise := byte_mutation(draw, data, kind, at, flips=4)) is not None:
        data = bytewise
    elif kind == "type":
        line = draw(st.integers(1, 200))
        data = _set_field(data, line, draw(st.sampled_from(FIELDS)), draw(ODD))
        kind = f"type@{line}"
    elif kind == "line":
        data = _splice(data, at, draw(st.binary(max_size=40)), line_no=draw(st.integers(1, 50)))
    elif kind == "blank":
        data = _splice(data, at, b"", line_no=draw(st.integers(1, 50)))
    elif kind == "dup":
        lines = data.split(b"\n")
        n = draw(st.integers(1, max(1, len(lines) - 2)))
        lines.insert(draw(st.integers(1, len(lines) - 1)), lines[n])
        data = b"\n".join(lines)
    elif kind == "nonl":  # the last line short of its newline only
        data = data.rstrip(b"\n")
    elif kind == "rekey":  # records moved to another server key (an edit; the recorders never do that)
        for line in draw(st.lists(st.integers(1, 200), min_size=1, max_size=4)):
            data = _set_field(data, line, "server", draw(st.sampled_from(["a", "", "ü" * 60])))
    elif kind == "batch":  # a message as a JSON-RPC batch of one, or of itself twice
        lines = data.split(b"\n")
        n = draw(st.integers(1, max(1, len(lines) - 2)))
        try:
            rec = orjson.loads(lines[n])
        except orjson.JSONDecodeError:
            rec = None
        if isinstance(rec, dict) and isinstance(rec.get("raw"), str) and rec["raw"].startswith("{"):
            rec["raw"] = "[" + ",".join([rec["raw"]] * draw(st.integers(1, 2))) + "]"
            lines[n] = orjson.dumps(rec)
        data = b"\n".join(lines)
    elif kind == "move":  # a line moved earlier (an answer before its request)
        lines = data.split(b"\n")
        if len(lines) > 3:
            n = draw(st.integers(2, len(lines) - 2))
            lines.insert(draw(st.integers(1, n - 1)), lines.pop(n))
        data = b"\n".join(lines)
    elif kind == "ts":  # a record's time moved (clocks are the recorder's)
        line = draw(st.integers(1, 200))
        data = _set_field(data, line, "ts", draw(st.sampled_from([0.0, 1.0, 1.7e9, 1.9e9, 4e9, -5.0])))
    return data, kind


def _rotated(name: str, data: bytes, cuts: list[int], short: bool) -> tuple[tuple[str, bytes], ...]:
    """`data` (a capture) as parts cut after the given record lines, each with its header (part, previous)
    and, but the last, a `part-end` naming the next part, as the recorder rotates; with `short`, the
    parts before the last end instead with their last line short of its newline (rotated out while the
    disk was full: captures/FORMAT.md)."""
    head, *body = data.split(b"\n")
    try:
        header = orjson.loads(head)
    except orjson.JSONDecodeError:
        return ((name, data),)
    if not isinstance(header, dict) or not isinstance(header.get("part"), int):
        return ((name, data),)
    stem = name.removesuffix(".000.jsonl")
    bounds = sorted({c % max(1, len(body)) for c in cuts} - {0})
    pieces = [body[a:b] for a, b in itertools.pairwise([0, *bounds, len(body)])]
    parts = []
    for i, lines in enumerate(pieces):
        h = {**header, "part": i, "previous": None if i == 0 else f"{stem}.{i - 1:03d}.jsonl"}
        out = [orjson.dumps(h), *lines]
        if i + 1 < len(pieces) and not short:
            end = {"type": "part-end", "seq": 0, "ts": header.get("ts"), "server": header.get("server"),
                   "reason": "rotated", "next": f"{stem}.{i + 1:03d}.jsonl"}
            out += [orjson.dumps(end), b""]
        parts.append((f"{stem}.{i:03d}.jsonl", b"\n".join(out)))
    return tuple(parts)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    scenarios = draw(st.lists(st.sampled_from(SCENARIOS), min_size=1, max_size=3, unique=True))
    sources = []
    for scenario in scenarios:
        files = sorted((CORPUS / scenario).glob("*.jsonl"))
        picked = draw(st.lists(st.sampled_from(files), min_size=1, max_size=3, unique=True))
        for f in sorted(picked):
            data, how = _mutate(draw, f.read_bytes())
            parts: tuple[tuple[str, bytes], ...] = ((f.name, data),)
            if draw(st.booleans()) and f.name.endswith(".000.jsonl"):
                cuts = draw(st.lists(st.integers(1, 400), min_size=1, max_size=3))
                short = draw(st.booleans())
                parts = _rotated(f.name, data, cuts, short)
                how += f":{len(parts)}p" + ("-short" if short else "")
            sources.append(Source(parts, f"{scenario}/{f.name[:8]}:{how}"))
    return Case(
        tuple(sources),
        seed=draw(st.integers(0, 2**16)),
        pieces=draw(st.sampled_from([1, 3, 8])),
        step=draw(st.sampled_from([0.05, 0.5, 3.0, 30.0])),
        compress=draw(st.sampled_from([None, None, ".zst", ".gz"])),
        read_limit=draw(st.sampled_from([None, None, 700, 5000])),
        glob=draw(st.booleans()),
        backlog=draw(st.integers(0, len(sources) - 1)),
    )


def run(case: Case, live: Path) -> tuple[list[dict[str, Any]], Watcher]:
    """Write `case` into `live` while a watcher follows it; the events of every round, and the watcher."""
    if case.read_limit is None:
        return _run(case, live)
    with mock.patch("analyzer.watch.READ_LIMIT", case.read_limit):
        return _run(case, live)


def _compress(part: Path, suffix: str) -> None:
    """A closed part compressed as `--compress` does it (`.zst`), or as logrotate's `compress` (`.gz`)."""
    from addon.retention import compress_part

    if suffix == ".zst":
        assert compress_part(part) is not None
    else:
        with gzip.open(f"{part}.gz", "wb") as out:
            out.write(part.read_bytes())
        part.unlink()


def _run(case: Case, live: Path) -> tuple[list[dict[str, Any]], Watcher]:
    rnd = random.Random(case.seed)
    # each capture: its parts in turn, each in pieces cut at random bytes, the pieces of the captures
    # interleaved, a round after each batch; a part compressed (if so) once whole and closed
    todo: list[list[tuple[str, bytes, bool]]] = []
    for s in case.sources:
        pieces = []
        for k, (name, data) in enumerate(s.parts):
            n = max(0, min(len(data) - 1, rnd.randint(0, case.pieces - 1)))
            bounds = [0, *sorted(rnd.sample(range(1, len(data)), n)), len(data)]
            closed = k + 1 < len(s.parts)
            pieces += [(name, data[a:b], closed and b == len(data)) for a, b in itertools.pairwise(bounds)]
        todo.append(pieces)

    def write(pieces: list[tuple[str, bytes, bool]], compress: str | None) -> None:
        name, piece, closed = pieces.pop(0)
        with open(live / name, "ab") as out:
            out.write(piece)
        if closed and compress:
            _compress(live / name, compress)

    for _ in range(case.backlog):  # captures there whole before watch starts
        while todo[0]:
            # a glob of plain names does not name the copies there before watch started (README), as
            # `analyze` of the directory does
            write(todo[0], None if case.glob else case.compress)
        todo.append(todo.pop(0))
    clock = [1000.0]
    watcher = Watcher([str(live / "*.jsonl" if case.glob else live)], clock=lambda: clock[0])
    events: list[dict[str, Any]] = []
    while any(todo):
        for pieces in todo:
            if pieces and rnd.random() < 0.8:
                write(pieces, case.compress)
        clock[0] += case.step
        events += [e.as_json() for e in watcher.poll()]
    # read to the end (a round reads at most `READ_LIMIT` of a file), then idle past the probe timeout
    for _ in range(10_000):
        before = watcher.bytes_read
        clock[0] += case.step
        events += [e.as_json() for e in watcher.poll()]
        if watcher.bytes_read == before:
            break
    clock[0] += 60
    events += [e.as_json() for e in watcher.poll()]
    return events, watcher


def malformed_noted(watcher: Watcher) -> list[tuple[str, int, str]]:
    """The malformed lines watch noted, as (file without compression, line, why), in order."""
    found = []
    for note in watcher.notes:
        m = NOTE.match(note)
        if m is not None:
            found.append((strip_compression(m.group(1)), int(m.group(2)), m.group(3)))
    return found


def analyzed_inputs(live: Path) -> tuple[tuple[set[Any], set[Any]], list[dict[str, Any]]]:
    """`expected(analyzed(live))` and the malformed lines `analyze` reports; none of either when it
    finds no record at all (it refuses such inputs, naming the malformed lines in its error)."""
    from analyzer.load import extract_files, find_inputs
    from analyzer.pipeline import _inputs

    try:
        report = analyzed(live)
    except ErascopeError as exc:
        assert "no capture records found" in str(exc), exc
        inputs = _inputs(extract_files(find_inputs([str(live)]), jobs=1))
        return (set(), set()), [{"file": b.file, "line": b.line, "reason": b.reason} for b in inputs.malformed]
    return expected(report), report["inputs"]["malformed"]


def check(case: Case, live: Path) -> None:
    events, watcher = run(case, live)
    want, malformed = analyzed_inputs(live)
    got = reported(events)
    assert got == want, (
        f"watch-only findings {got[0] - want[0]}\nanalyze-only findings {want[0] - got[0]}\n"
        f"watch-only eras {got[1] - want[1]}\nanalyze-only eras {want[1] - got[1]}"
    )
    noted = sorted(malformed_noted(watcher))
    bad = sorted((strip_compression(b["file"]), b["line"], b["reason"]) for b in malformed)
    assert [n[:2] for n in noted] == [b[:2] for b in bad], (noted, bad)  # each once, where `analyze` says
    assert noted == bad


@fuzzed(30)
@given(case=cases())
def test_watch_agrees_with_analyze_on_hostile_captures_written_live(tmp_path_factory: Any, case: Case) -> None:
    live = tmp_path_factory.mktemp("live")
    check(case, live)


# --- what the differential found, as small fixed cases -------------------------------------------
def _probe_answered(newline: bool) -> bytes:
    """A stdio spawn's first lines: its header, spawn, a probe and its answer (the last line, with its
    newline or short of it only)."""
    source = next((CORPUS / "probe-storm-stdio").glob("*.jsonl"))
    return b"\n".join(source.read_bytes().split(b"\n")[:4]) + (b"\n" if newline else b"")


def _watched_rounds(live: Path, writes: list[bytes]) -> tuple[list[dict[str, Any]], Watcher]:
    """The events of a watcher of `live` (a fake clock) while each of `writes` is appended to
    `live/capture.jsonl`, a round after each; then idle past the probe timeout."""
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events: list[dict[str, Any]] = []
    for data in writes:
        with open(live / "capture.jsonl", "ab") as out:
            out.write(data)
        clock[0] += 0.1
        events += [e.as_json() for e in watcher.poll()]
    clock[0] += 60
    return events + [e.as_json() for e in watcher.poll()], watcher


def test_a_last_line_short_only_of_its_newline_is_read(tmp_path: Path) -> None:
    """A line short only of its newline is written (captures/FORMAT.md: a recorder stopped by a full disk
    leaves one, and counts it written), and `analyze` reads it. Watch waited for the newline forever:
    here the probe's answer, so it reported the server `broken` and a probe timeout `analyze` never gives."""
    live = tmp_path / "live"
    live.mkdir()
    events, watcher = _watched_rounds(live, [_probe_answered(newline=False)])
    report = analyzed(live)
    assert [t["era"] for s in report["servers"] for t in s["timeline"]] == ["modern"]
    assert reported(events) == expected(report)
    assert watcher.records == report["inputs"]["records"]


def test_a_newline_coming_after_its_line_was_read_ends_that_line(tmp_path: Path) -> None:
    """The line read whole but for its newline, then its newline and more lines (the recorder writes the
    rest of a torn line first once the disk has room): no empty line, no line read twice, the lines
    after it numbered as `analyze` numbers them."""
    live = tmp_path / "live"
    live.mkdir()
    source = next((CORPUS / "probe-storm-stdio").glob("*.jsonl")).read_bytes()
    head = _probe_answered(newline=False)
    events, watcher = _watched_rounds(live, [head, source[len(head) :]])
    assert (live / "capture.jsonl").read_bytes() == source
    assert reported(events) == expected(analyzed(live))
    assert (watcher.notes, watcher.bytes_read) == ([], len(source))


def test_a_line_read_whole_that_goes_on_is_read_again(tmp_path: Path) -> None:
    """A line that read as a record without its newline, and then goes on (`cat more >> capture` onto a
    file without its last newline): `analyze` reads the line as it is now, malformed; so does watch,
    which reads the file again, the malformed lines before it noted once all the same."""
    live = tmp_path / "live"
    live.mkdir()
    header, *rest = _probe_answered(newline=False).split(b"\n")
    events, watcher = _watched_rounds(live, [b"\n".join([header, b"{", *rest]), b' "more"}\n'])
    report = analyzed(live)
    bad = [(str(live / "capture.jsonl"), b["line"], b["reason"]) for b in report["inputs"]["malformed"]]
    assert [line for _, line, _ in bad] == [2, 5]
    assert reported(events) == expected(report)
    assert malformed_noted(watcher) == bad


def test_an_unanswered_probe_in_a_part_compressed_since_is_decided(tmp_path: Path) -> None:
    """The rows read from a part before it was compressed (`--compress`: `x.jsonl.zst`, the plain file
    removed) name its plain file. Watch judges an unanswered probe by its capture's time, found by that
    name among the parts followed; not finding it (the part is its copy's now), it took the wall clock
    for the capture's time, which a capture's times need not be near (replayed, recorded where the
    clock is off; here a fake clock): its probe was held, here for good, its server never reported."""
    from addon.retention import compress_part

    live = tmp_path / "live"
    live.mkdir()
    source = next((CORPUS / "never-answers-stdio").glob("*.jsonl"))
    part = live / source.name
    # up to the probe: the server's output is not over (no `server-eof`), so only its time decides it
    part.write_bytes(b"".join(source.read_bytes().splitlines(keepends=True)[:3]))
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = [e.as_json() for e in watcher.poll()]
    assert events == []  # its answer can still come
    assert compress_part(part) is not None
    clock[0] += 60
    events += [e.as_json() for e in watcher.poll()]
    report = analyzed(live)
    assert expected(report) != (set(), set())  # an era change at least, which the held server never got
    assert reported(events) == expected(report)


def _without_time(data: bytes, line: int) -> bytes:
    """`data` with the record on `line` (from 1) holding `"ts": null`."""
    lines = data.split(b"\n")
    record = orjson.loads(lines[line - 1])
    lines[line - 1] = orjson.dumps({**record, "ts": None})
    return b"\n".join(lines)


@pytest.mark.parametrize("answered", [False, True], ids=["never answered", "answered after the timeout"])
def test_a_probe_without_a_time_is_decided_by_what_was_read(tmp_path: Path, answered: bool) -> None:
    """A probe whose record has no time (`"ts": null`, an edited capture) and no answer yet: watch added
    the probe timeout to None and raised (TypeError), ending `erascope watch` with a traceback and exit
    status 1, which `--fail-on` reads as a finding. Its answer is never late (`analyzer.probes`), so
    what has been read decides it, and an answer read later changes that, as in `analyze`."""
    live = tmp_path / "live"
    live.mkdir()
    if answered:
        lines = _without_time(_probe_answered(newline=True), 3).splitlines(keepends=True)
        writes = [b"".join(lines[:3]), lines[3]]  # the answer a round after the probe
    else:
        writes = [_without_time(next((CORPUS / "never-answers-stdio").glob("*.jsonl")).read_bytes(), 3)]
    events, _ = _watched_rounds(live, writes)
    report = analyzed(live)
    assert report["servers"][0]["probes"] == 1
    assert reported(events) == expected(report)
    # decided before its answer came: the finding then withdrawn
    assert [e["event"] for e in events if e["rule"]] == ["finding", "withdrawn"] if answered else ["finding"]


@pytest.mark.parametrize("cut", ["after a brace inside it", "short only of its newline"])
def test_a_last_line_without_its_newline_costs_one_extraction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    """A read that stops right after a `}` inside a record (the recorder's write not all on disk yet):
    the lines read were extracted twice, once with that last line (to see whether it reads as a
    record) and again without it. The line alone is tested first, and the lines are extracted once;
    a line that is a record but for its newline is still read in the same round, in one extraction."""
    import analyzer.watch

    extract_lines = analyzer.watch.extract_lines
    extracted: list[tuple[int, int]] = []  # (first line, lines) of each extraction

    def counted(path: str, data: bytes, first: int, *args: Any, **kwargs: Any) -> Any:
        extracted.append((first, data.count(b"\n")))
        return extract_lines(path, data, first, *args, **kwargs)

    monkeypatch.setattr(analyzer.watch, "extract_lines", counted)
    live = tmp_path / "live"
    live.mkdir()
    whole = _probe_answered(newline=True)
    answer = whole.rindex(b"\n", 0, len(whole) - 1) + 1  # the answer: the last line
    at = whole.index(b"}", answer) + 1 if cut == "after a brace inside it" else len(whole) - 1
    events, watcher = _watched_rounds(live, [whole[:at], whole[at:]])
    if cut == "after a brace inside it":
        assert extracted == [(1, 3), (4, 1)]  # lines 1-3 once, then the answer once it is whole
    else:
        assert extracted == [(1, 4)]  # the newline that comes later is no line of its own
    assert (watcher.notes, watcher.bytes_read) == ([], len(whole))
    report = analyzed(live)
    assert [t["era"] for s in report["servers"] for t in s["timeline"]] == ["modern"]
    assert reported(events) == expected(report)
