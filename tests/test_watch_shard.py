"""`erascope watch` analyzes in a round only the server keys its new lines touched, and carries every
other server's verdict and findings from the round that last analyzed it (`analyzer.watch_shard`).

The carried results, merged as the cluster path merges shards, are in every round what `analyze`
gives on the files as they are then: corpus scenarios replayed together (several servers, rounds
touching some of them), and a generated backlog whose proxy captures hold several servers in one file.
"""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from addon.errors import ErascopeError
from analyzer.facts import FileFacts
from analyzer.findings import Finding
from analyzer.pipeline import analyze
from analyzer.watch import Watcher
from analyzer.watch_shard import only_servers, piece_servers
from analyzer.watch_state import piece_connections
from tests.test_watch import replay, with_backlog

CORPUS = Path(__file__).parent.parent / "captures" / "corpus"


class Rounds:
    """Wraps a watcher's `poll`: after each round, its carried results against `analyze` of the directory."""

    def __init__(self, watcher: Watcher, live: Path) -> None:
        self.watcher, self.live = watcher, live
        self.analyzed: list[set[str | None]] = []
        self.present: list[set[str | None]] = []
        self._poll = watcher.poll
        watcher.poll = self.poll  # type: ignore[method-assign]

    def poll(self) -> list:
        events = self._poll()
        verdicts, findings = self.watcher.results()
        try:
            analysis = analyze([str(self.live)])
        except ErascopeError:
            assert (verdicts, findings) == ([], [])  # nothing but headers yet
            return events
        try:
            assert [v.server for v in verdicts] == [v.server for v in analysis.servers]
            assert verdicts == analysis.servers
            assert _shown(findings) == _shown(analysis.findings)
        finally:
            analysis.close()
        self.analyzed.append(set(self.watcher.analyzed))
        self.present.append({v.server for v in verdicts})
        return events


def _shown(findings: list[Finding]) -> list[tuple[object, ...]]:
    """A finding as the reports show it (`details` is not part of a finding's equality)."""
    return [(f, f.details) for f in findings]


@pytest.mark.parametrize(
    "scenarios",
    [
        ["rollout-split-http", "probe-storm-http", "upgrade-http", "never-answers-http"],
        ["auto-legacy-http", "legacy-mode-dual-stdio", "unsupported-retry-http", "crash-on-start-stdio"],
    ],
)
def test_carried_results_are_the_whole_history_s_in_every_round(tmp_path: Path, scenarios: list[str]) -> None:
    live = tmp_path / "live"
    live.mkdir()
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    rounds = Rounds(watcher, live)
    sources = [p for s in scenarios for p in sorted((CORPUS / s).glob("*.jsonl"))]
    replay(sources, live, watcher, clock, seed=17)
    assert len(rounds.analyzed) > 5
    # some round analyzed fewer servers than the results hold: the rest were carried
    assert any(a < p for a, p in zip(rounds.analyzed, rounds.present, strict=True))


def test_carried_results_over_a_generated_backlog(tmp_path: Path) -> None:
    """The load `bench.bench_watch` measures: a backlog read at once, then a proxy capture of the same
    server keys appended in pieces; a round analyzes only the servers its piece has lines of, though
    every piece is one file's (a proxy capture holds several servers' traffic)."""
    live, more = with_backlog(tmp_path, "300k")
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    rounds = Rounds(watcher, live)
    watcher.poll()
    source = max(more.glob("*_proxy_*.jsonl"), key=lambda p: p.stat().st_size)
    data = source.read_bytes()
    analysis = analyze([str(source)])
    servers = {v.server for v in analysis.servers}
    analysis.close()
    assert len(servers) > 1
    rnd = random.Random(5)
    pos = 0
    target = live / "growing.000.jsonl"
    while pos < len(data):
        n = rnd.randint(2_000, 40_000)
        with open(target, "ab") as out:
            out.write(data[pos : pos + n])
        pos += n
        clock[0] += 0.1
        watcher.poll()
    clock[0] += 30
    watcher.poll()
    later = rounds.analyzed[1:]
    assert len(later) > 5
    # some round's piece had lines of only some of the file's servers: the others were not analyzed
    assert any(a & servers and not servers <= a for a in later)


def test_a_piece_by_server_keeps_every_row_once(tmp_path: Path) -> None:
    """`only_servers` on a proxy capture of several servers: each server's selection holds its rows
    and those without a key; the selections of every server together hold each row once."""
    from analyzer.load import LoadOptions, extract_lines, read_header

    live, _ = with_backlog(tmp_path, "300k")
    path = max(live.glob("*_proxy_*.jsonl"), key=lambda p: p.stat().st_size)
    facts = extract_lines(str(path), path.read_bytes(), 1, read_header(str(path)), LoadOptions())
    servers = piece_servers(facts, piece_connections(facts)) - {None}
    assert len(servers) > 1
    picked = {s: only_servers(facts, [s]) for s in servers}

    def frames(f: FileFacts) -> dict[str, pl.DataFrame]:
        t = f.traffic
        assert isinstance(t.requests, pl.DataFrame) and isinstance(t.answers, pl.DataFrame)
        return {"messages": f.messages, "conns": t.conns, "sessions": t.sessions, "servers": t.servers,
                "requests": t.requests, "answers": t.answers}

    whole = frames(facts)
    assert whole["requests"].height and whole["answers"].height
    for name, frame in whole.items():
        assert sum(frames(p)[name].height for p in picked.values()) == frame.height, name
        if name != "answers":
            for s, p in picked.items():
                assert set(frames(p)[name].get_column("server").cast(pl.String).unique()) <= {s}, name
