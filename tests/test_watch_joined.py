"""`erascope watch` on captures joined into one file beside a copy of one of them.

`cat a.jsonl b.jsonl > both.jsonl` beside `b.jsonl`: `analyze` counts `b` once (the first file in
input order holding it keeps it, tests/test_joined_duplicates.py). watch must report what `analyze`
reports on the same files: it counted `b` twice (a probe storm of 20 probes reported as 40).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from analyzer.watch import Watcher
from tests.test_watch import CORPUS, analyzed, expected, replay, reported

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
