"""`erascope watch` on captures joined into one file beside a copy of one of them.

`cat a.jsonl b.jsonl > both.jsonl` beside `b.jsonl`: `analyze` counts `b` once (the first file in
input order holding it keeps it, tests/test_joined_duplicates.py). watch must report what `analyze`
reports on the same files: it counted `b` twice (a probe storm of 20 probes reported as 40).
"""

from __future__ import annotations

from pathlib import Path

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
