"""watch and a stdio server that dies before it answers a probe: garbage on stdout (a banner) or
nothing, then the server's death. The death proves no answer can come, so `broken` is decided once
the server's output is over, not once the probe timeout has passed in the capture's time: watch
reported it only in the round after the timeout. An `exit` alone proves nothing yet: the tee can
reap the server before it records the last frames still in the pipe (captures/FORMAT.md,
Ordering), and an answer among them, within the timeout, is the probe's outcome for `analyze`.
A server still alive keeps being waited for. What watch reports is what `analyze` gives on the
final files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_messages import Cap, discover_result, probe
from tests.test_watch import CORPUS, analyzed, expected, reported, watched_rounds

IDLE = 60.0
"""Seconds of capture time the last round comes after (past the 10 s probe timeout)."""


def _corpus(case: str) -> tuple[str, list[bytes]]:
    source = next((CORPUS / case).glob("*.jsonl"))
    return source.name, source.read_bytes().splitlines(keepends=True)


def _at(lines: list[bytes], event: str) -> int:
    """The index of the first lifecycle record of `event` in `lines`: the round that reads it."""
    return next(i for i, line in enumerate(lines) if json.loads(line).get("event") == event)


def _broken_in(rounds: list[list[dict[str, Any]]]) -> list[int]:
    """The rounds that reported the server's era as `broken`."""
    return [i for i, events in enumerate(rounds) if any(e["era"] == "broken" for e in events if e["event"] == "era")]


def _all(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [e for events in rounds for e in events]


def test_garbage_then_death_is_reported_once_the_output_is_over(tmp_path: Path) -> None:
    """The real tee's capture of a server that prints a banner and exits (`exit`, then `server-eof`):
    decided in the round that reads `server-eof`, not in the round after the timeout."""
    name, lines = _corpus("banner-then-crash-stdio")
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, name, IDLE)
    assert _broken_in(rounds) == [_at(lines, "server-eof")], rounds
    assert rounds[-1] == []  # the timeout passing decides nothing more
    assert reported(_all(rounds)) == expected(analyzed(live))
    assert {f[0] for f in expected(analyzed(live))[0]} == {"stdout-pollution"}


def _ended_by_a_new_tee(out: Path) -> tuple[str, list[bytes]]:
    """A banner, the server's death, and the end the tee writes now (`linger-end`, `recorder-end`)."""
    cap = Cap(out)
    cap.c2s(probe(1))
    cap.frame("s2c", "weather-server 1.4.2 starting on stdio")
    cap.life("exit", code=1, status=1)
    cap.life("server-eof", dt=0.001)
    cap.life("linger-end", dt=2.0)
    cap.life("recorder-end", counters={})
    path = cap.close()
    return path.name, path.read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("source", ["corpus", "new-tee"])
def test_garbage_then_death_read_in_one_round_is_reported_in_it(tmp_path: Path, source: str) -> None:
    """The whole capture read in one round (watch started on it, or a round that read a backlog):
    condensing drops the `server-eof` after the `exit` (no probe reads it), and the tee's later
    `linger-end` (the old tee's last record) or `recorder-end` says the output is over."""
    name, lines = _corpus("banner-then-crash-stdio") if source == "corpus" else _ended_by_a_new_tee(tmp_path / "src")
    live = tmp_path / "live"
    rounds = watched_rounds([b"".join(lines)], live, name, IDLE)
    assert _broken_in(rounds) == [0], rounds
    assert rounds[-1] == []
    assert reported(_all(rounds)) == expected(analyzed(live))


def test_a_crash_is_reported_once_the_output_is_over(tmp_path: Path) -> None:
    """A server that dies on start, writing nothing to stdout (the real tee: `server-eof`, then `exit`)."""
    name, lines = _corpus("crash-on-start-stdio")
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, name, IDLE)
    assert _broken_in(rounds) == [_at(lines, "server-eof")], rounds
    assert rounds[-1] == []
    assert reported(_all(rounds)) == expected(analyzed(live))


def test_a_server_still_alive_is_waited_for(tmp_path: Path) -> None:
    """The banner and nothing more (the server neither answered nor died): undecided until the
    timeout has passed, then `broken` (probe garbage), as `analyze` reads the same lines."""
    name, lines = _corpus("banner-then-crash-stdio")
    alive = lines[: _at(lines, "exit")]
    live = tmp_path / "live"
    rounds = watched_rounds(alive, live, name, IDLE)
    assert _broken_in(rounds) == [len(alive)], rounds  # the round after the timeout
    assert reported(_all(rounds)) == expected(analyzed(live))


@pytest.mark.parametrize("banner", [False, True])
def test_an_answer_recorded_after_the_exit_is_the_outcome(tmp_path: Path, banner: bool) -> None:
    """The server answers and exits at once; the tee reaps it before it records the answer, still in
    the pipe, then `server-eof`. `analyze` reads the answer (it came within the timeout): the round
    that read the `exit` alone decided nothing (watch reported `broken` there, and withdrew it a
    round later)."""
    cap = Cap(tmp_path / "src")
    cap.c2s(probe(1))
    if banner:
        cap.frame("s2c", "weather-server 1.4.2 starting on stdio")
    cap.life("exit", code=0, status=0)
    cap.s2c(discover_result(1), dt=0.001)
    cap.life("server-eof", dt=0.001)
    path = cap.close()
    live = tmp_path / "live"
    rounds = watched_rounds(path.read_bytes().splitlines(keepends=True), live, path.name, IDLE)
    assert _broken_in(rounds) == [], rounds
    assert [e["event"] for e in _all(rounds) if e["era"] is not None] == ["era"]  # modern, never withdrawn
    assert reported(_all(rounds)) == expected(analyzed(live))
