"""`erascope watch` on captures joined into one file beside a copy of one of them.

`cat a.jsonl b.jsonl > both.jsonl` beside `b.jsonl`: `analyze` counts `b` once (the first file in
input order holding it keeps it, tests/test_joined_duplicates.py). watch must report what `analyze`
reports on the same files: it counted `b` twice (a probe storm of 20 probes reported as 40).
"""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from analyzer.watch import Watcher, WatchEvent
from tests.test_watch import CORPUS, ERASCOPE, Watch, analyzed, expected, replay, reported
from tests.test_watch import watches as watches  # the fixture

A = next((CORPUS / "banner-then-work-stdio").glob("*.jsonl"))
B = next((CORPUS / "probe-storm-http").glob("*.jsonl"))


def _watched(live: Path) -> list[dict[str, object]]:
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = watcher.poll()
    clock[0] += 30  # past the probe timeout: unanswered probes are decided
    events += watcher.poll()
    assert watcher.notes == []
    return [e.as_json() for e in events]


def _storm(events: list[dict[str, object]]) -> str:
    """The probe storm's message as last reported (a `finding-update` replaces it as probes come)."""
    return [str(e["message"]) for e in events if e.get("rule") == "probe-storm"][-1]


def test_a_joined_file_after_a_copy_of_its_second_capture(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    (live / "1-b.jsonl").write_bytes(B.read_bytes())
    (live / "2-both.jsonl").write_bytes(A.read_bytes() + B.read_bytes())
    events = _watched(live)
    assert _storm(events).startswith("20 probes")
    assert reported(events) == expected(analyzed(live))


def test_a_joined_file_before_a_copy_of_its_second_capture(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    (live / "1-both.jsonl").write_bytes(A.read_bytes() + B.read_bytes())
    (live / "2-b.jsonl").write_bytes(B.read_bytes())
    events = _watched(live)
    assert _storm(events).startswith("20 probes")
    assert reported(events) == expected(analyzed(live))


def test_a_file_holding_one_capture_twice(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    (live / "twice.jsonl").write_bytes(B.read_bytes() + A.read_bytes() + B.read_bytes())
    events = _watched(live)
    assert _storm(events).startswith("20 probes")
    assert reported(events) == expected(analyzed(live))


def test_a_joined_file_growing_beside_a_copy_growing_too(tmp_path: Path) -> None:
    """Both written in pieces cut at random bytes, a round after each: the copy's header comes first,
    as its file comes first in input order."""
    staged, live = tmp_path / "staged", tmp_path / "live"
    staged.mkdir()
    live.mkdir()
    (staged / "1-b.jsonl").write_bytes(B.read_bytes())
    (staged / "2-both.jsonl").write_bytes(A.read_bytes() + B.read_bytes())
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = [e.as_json() for e in replay(sorted(staged.iterdir()), live, watcher, clock, seed=5)]
    # (a growing finding's message is as of its last report, which its evidence decides: not compared)
    assert reported(events) == expected(analyzed(live))


def _written_in_turn(live: Path, files: list[tuple[str, bytes]]) -> list[dict[str, object]]:
    """Each file written whole, in the order given, a round after each (and one past the probe timeout)."""
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = []
    for name, data in files:
        (live / name).write_bytes(data)
        clock[0] += 1
        events += watcher.poll()
        clock[0] += 30
        events += watcher.poll()
    assert watcher.notes == []
    return [e.as_json() for e in events]


@pytest.mark.parametrize("copy", ["z-b.jsonl", "z-b.jsonl.gz"])
@pytest.mark.parametrize("copy_first", [True, False])
def test_a_joined_file_named_before_a_copy_of_its_second_capture(tmp_path: Path, copy: str, copy_first: bool) -> None:
    """`analyze` keeps the joined file's copy (first in input order) whichever was written first: so
    must watch, its evidence naming the joined file's lines, not the copy's it read before."""
    live = tmp_path / "live"
    live.mkdir()
    files = [
        (copy, gzip.compress(B.read_bytes()) if copy.endswith(".gz") else B.read_bytes()),
        ("a-both.jsonl", A.read_bytes() + B.read_bytes()),
    ]
    events = _written_in_turn(live, files if copy_first else files[::-1])
    assert _storm(events).startswith("20 probes")
    assert reported(events) == expected(analyzed(live))


@pytest.mark.parametrize("copy_first", [True, False])
def test_two_plain_copies_of_one_capture(tmp_path: Path, copy_first: bool) -> None:
    """The copy first in input order is the one `analyze` reads, whichever watch saw first."""
    live = tmp_path / "live"
    live.mkdir()
    files = [("z-b.jsonl", B.read_bytes()), ("a-b.jsonl", B.read_bytes())]
    events = _written_in_turn(live, files if copy_first else files[::-1])
    assert _storm(events).startswith("20 probes")
    assert reported(events) == expected(analyzed(live))


@pytest.mark.parametrize("joined_first", [True, False])
def test_a_joined_file_starting_with_a_copy_of_another_file(tmp_path: Path, joined_first: bool) -> None:
    """`cat b.jsonl a.jsonl > 2-ba.jsonl` beside `1-b.jsonl`: the capture joined after the copy is read
    too (it was never read: its findings and era change missing), the copy's lines left out."""
    live = tmp_path / "live"
    live.mkdir()
    files = [("1-b.jsonl", B.read_bytes()), ("2-ba.jsonl", B.read_bytes() + A.read_bytes())]
    events = _written_in_turn(live, files[::-1] if joined_first else files)
    assert _storm(events).startswith("20 probes")
    assert reported(events) == expected(analyzed(live))
    assert any(e["rule"] == "stdout-pollution" for e in events)  # A's, read from the joined file


def test_a_joined_file_named_first_growing_beside_a_copy_growing_too(tmp_path: Path) -> None:
    """As above, but the joined file first in input order: the copy's header is read first, the joined
    file's copy of it later (while both grow), and from then on the joined file's lines are the ones read."""
    staged, live = tmp_path / "staged", tmp_path / "live"
    staged.mkdir()
    live.mkdir()
    (staged / "z-b.jsonl").write_bytes(B.read_bytes())
    (staged / "a-both.jsonl").write_bytes(A.read_bytes() + B.read_bytes())
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = [e.as_json() for e in replay(sorted(staged.iterdir())[::-1], live, watcher, clock, seed=5)]
    assert reported(events) == expected(analyzed(live))
    assert watcher.notes == []


@pytest.mark.parametrize("copy", ["z-b.jsonl", "0-b.jsonl"])
def test_the_file_keeping_a_capture_rewritten_without_it(tmp_path: Path, copy: str) -> None:
    """The joined file that kept `b` is rewritten to hold `a` alone: the copy left out is read then."""
    live = tmp_path / "live"
    live.mkdir()
    events = _written_in_turn(
        live,
        [(copy, B.read_bytes()), ("a-both.jsonl", A.read_bytes() + B.read_bytes()), ("a-both.jsonl", A.read_bytes())],
    )
    assert _storm(events).startswith("20 probes")
    assert reported(events) == expected(analyzed(live))


def _findings_of(events: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e for e in events if e["rule"] is not None]


@pytest.mark.parametrize("copy", ["a-b.jsonl", "a-b.jsonl.gz", "a-both.jsonl"])
def test_a_copy_named_first_written_later_updates_the_findings_it_takes_over(tmp_path: Path, copy: str) -> None:
    """`z-b.jsonl` read, then a copy first in input order written (another name, compressed, or a file
    of joined captures holding `a` then `b`): `analyze` reads `b` there now, so watch does. The
    findings are the same, their lines are the copy's: each is reported once more as one
    `finding-update` naming the report it replaces (as when a finding's first line moves), not as a
    new `finding` beside a `withdrawn` one."""
    live = tmp_path / "live"
    live.mkdir()
    data = A.read_bytes() + B.read_bytes() if copy == "a-both.jsonl" else B.read_bytes()
    events = _written_in_turn(
        live, [("z-b.jsonl", B.read_bytes()), (copy, gzip.compress(data) if ".gz" in copy else data)]
    )
    assert _storm(events).startswith("20 probes")
    assert reported(events) == expected(analyzed(live))
    findings = _findings_of(events)
    assert [e for e in findings if e["event"] == "withdrawn"] == []
    first = {(e["rule"], e["server"], e["client"]) for e in findings if e["server"] == "probe-storm-http-server"}
    assert first  # b's findings, first read from z-b.jsonl
    for key in first:
        reports = [e for e in findings if (e["rule"], e["server"], e["client"]) == key]
        assert [e["event"] for e in reports].count("finding") == 1, reports
        moved = [e for e in reports if e["replaces"] is not None]
        assert len(moved) == 1, reports
        assert moved[0]["event"] == "finding-update"
        assert moved[0]["replaces"]["file"].endswith("z-b.jsonl")  # type: ignore[index]
        assert all(x["file"].endswith(copy) for x in moved[0]["evidence"])  # type: ignore[union-attr]


def test_a_copy_taking_over_reports_nothing_of_findings_it_leaves_as_they_were(tmp_path: Path) -> None:
    """The file that kept `b` (`z-both.jsonl`, `a` joined after it) is taken over by a copy of `b`
    named first: `a`'s findings and era change, read from the same lines before and after, are not
    reported again."""
    live = tmp_path / "live"
    live.mkdir()
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    (live / "z-both.jsonl").write_bytes(B.read_bytes() + A.read_bytes())
    before = watcher.poll()
    clock[0] += 30
    before += watcher.poll()
    assert any(e.rule == "stdout-pollution" for e in before)  # a's
    (live / "a-b.jsonl").write_bytes(B.read_bytes())
    clock[0] += 1
    after = watcher.poll()
    clock[0] += 30
    after += watcher.poll()
    assert after and all(e.server == "probe-storm-http-server" for e in after), after
    assert watcher.notes == []
    assert reported([e.as_json() for e in before + after]) == expected(analyzed(live))


NAME = B.name
"""A recorder's file name: `analyze` reads the copy under it holding the most lines (`fullest_first`)."""


def _full_and_early() -> tuple[bytes, bytes]:
    """`b` whole, and a copy taken while the recorder still wrote it (its first half of lines)."""
    lines = B.read_bytes().splitlines(keepends=True)
    return b"".join(lines), b"".join(lines[: len(lines) // 2])


def _two_directories(tmp_path: Path) -> tuple[Path, Path]:
    dirs = tmp_path / "dir-a", tmp_path / "dir-b"
    for d in dirs:
        d.mkdir()
    return dirs


def _rounds(watcher: Watcher, clock: list[float]) -> list[WatchEvent]:
    """A round a second on, then one past the probe timeout (unanswered probes are decided)."""
    clock[0] += 1
    events = watcher.poll()
    clock[0] += 30
    return events + watcher.poll()


def _files_named(events: list[dict[str, Any]]) -> set[str]:
    """The files every finding's last report names."""
    last = {}
    for e in events:
        if e["rule"] is not None:
            last[(e["rule"], e["server"], e["client"])] = e
    return {x["file"] for e in last.values() if e["event"] != "withdrawn" for x in e["evidence"]}


@pytest.mark.parametrize("fuller", [0, 1])
@pytest.mark.parametrize("written", ["fuller first", "fuller last", "together"])
def test_copies_of_one_name_in_two_directories(tmp_path: Path, fuller: int, written: str) -> None:
    """`watch dir-a dir-b`, a recorder's part under its name in both, one copy taken while it was
    written: `analyze dir-a dir-b` reads the copy holding the most lines wherever it is, and so must
    watch, whichever it read first (it kept that one: 10 probes reported, from the early copy)."""
    dirs = _two_directories(tmp_path)
    full, early = _full_and_early()
    copies = [(dirs[fuller] / NAME, full), (dirs[1 - fuller] / NAME, early)]
    if written == "fuller last":
        copies.reverse()
    clock = [1000.0]
    watcher = Watcher([str(d) for d in dirs], clock=lambda: clock[0])
    events = []
    for path, data in copies:
        path.write_bytes(data)
        if written != "together":
            events += _rounds(watcher, clock)
    events += _rounds(watcher, clock)
    assert watcher.notes == []
    printed = [e.as_json() for e in events]
    assert _storm(printed).startswith("20 probes")
    assert reported(printed) == expected(analyzed(*dirs))
    assert _files_named(printed) == {str(dirs[fuller] / NAME)}


def test_a_copy_of_one_name_growing_past_the_one_read(tmp_path: Path) -> None:
    """An early copy in `dir-a` (read first, first in input order), the recorder's part in `dir-b`
    written in pieces: once it holds more lines than the copy, `analyze` reads it, and so does watch."""
    dirs = _two_directories(tmp_path)
    full, early = _full_and_early()
    (dirs[0] / NAME).write_bytes(early)
    clock = [1000.0]
    watcher = Watcher([str(d) for d in dirs], clock=lambda: clock[0])
    events = [e.as_json() for e in watcher.poll()]
    events += [e.as_json() for e in replay([B], dirs[1], watcher, clock, seed=5)]
    assert (dirs[1] / NAME).read_bytes() == full
    assert watcher.notes == []
    # (a growing finding's message is as of its last report, which its evidence decides: the results')
    assert [f.message[:9] for f in watcher.results()[1] if f.rule == "probe-storm"] == ["20 probes"]
    assert reported(events) == expected(analyzed(*dirs))
    assert _files_named(events) == {str(dirs[1] / NAME)}


def test_the_cli_reads_the_fuller_copy_of_one_name_in_two_directories(tmp_path: Path, watches: list[Watch]) -> None:
    """`erascope watch --format json dir-a dir-b` against `erascope analyze -f json dir-a dir-b`, the
    early copy first in input order: watch's last word on every finding is analyze's."""
    dirs = _two_directories(tmp_path)
    full, early = _full_and_early()
    (dirs[0] / NAME).write_bytes(early)
    (dirs[1] / NAME).write_bytes(full)
    args = ["--probe-timeout", "2"]
    res = subprocess.run(
        [str(ERASCOPE), "analyze", "-f", "json", "-q", *args, *map(str, dirs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    want = expected(json.loads(res.stdout))
    w = Watch(*map(str, dirs), "--format", "json", "--interval", "0.2", *args)
    watches.append(w)
    w.events_until(lambda ev: reported(ev) == want)
    assert w.stop() == 0
    assert reported(w.events()) == want
    assert _files_named(w.events()) == {str(dirs[1] / NAME)}
    assert w.errors == []


def test_copies_of_another_name_in_two_directories_are_read_in_input_order(tmp_path: Path) -> None:
    """Under a name that is not a recorder's, `analyze` does not rank copies by their lines: it reads
    the first in input order (`dir-a`'s, the early copy here), and so must watch, though it read the
    fuller one in `dir-b` first."""
    dirs = _two_directories(tmp_path)
    full, early = _full_and_early()
    clock = [1000.0]
    watcher = Watcher([str(d) for d in dirs], clock=lambda: clock[0])
    events = []
    for path, data in ((dirs[1] / "b.jsonl", full), (dirs[0] / "b.jsonl", early)):
        path.write_bytes(data)
        events += _rounds(watcher, clock)
    assert watcher.notes == []
    printed = [e.as_json() for e in events]
    assert _storm(printed).startswith("10 probes")
    assert reported(printed) == expected(analyzed(*dirs))
    assert _files_named(printed) == {str(dirs[0] / "b.jsonl")}
