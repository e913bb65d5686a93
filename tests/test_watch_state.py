"""What `erascope watch` carries across rounds (`analyzer.watch_state`) is, in every round, what
deriving it again from the whole history gives.

The captures are replayed into a watched directory in pieces cut at random bytes (in process, a fake
clock), and each round's carried frame is compared with the one computed from every row.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from analyzer.condense import Rows, Traffic
from analyzer.identity import connection_identities
from analyzer.pipeline import analyze
from analyzer.watch import Watcher
from analyzer.watch_state import CarriedIdentities
from tests.test_watch import replay, with_backlog

CORPUS = Path(__file__).parent.parent / "captures" / "corpus"
SHARED_SESSIONS = ["auto-legacy-http", "legacy-mode-dual-http", "legacy-sse-http", "rollout-split-http", "upgrade-http"]
"""Corpus scenarios where connections share a session id (a legacy HTTP client's later connections)."""


class Checked:
    """Stands in for the watcher's `CarriedIdentities`: each round, its frame against the whole computation."""

    def __init__(self, carried: CarriedIdentities) -> None:
        self.carried = carried
        self.rounds: list[tuple[pl.DataFrame, int]] = []

    def touch(self, connections: pl.DataFrame) -> None:
        self.carried.touch(connections)

    def __call__(self, messages: pl.LazyFrame, traffic: Traffic, moved: Rows | None) -> pl.DataFrame:
        got = self.carried(messages, traffic, moved)
        want = connection_identities(messages, traffic, moved)
        # the row order is not part of the frame's meaning (`connection_identities`' joins keep none)
        assert_frame_equal(got.sort("server", "conn"), want.sort("server", "conn"))
        self.rounds.append((got, self.carried.recomputed))
        return got


def checked_watcher(live: Path, clock: list[float]) -> tuple[Watcher, Checked]:
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    checked = Checked(watcher._identities)
    watcher._identities = checked  # type: ignore[assignment]
    return watcher, checked


@pytest.mark.parametrize("scenario", SHARED_SESSIONS)
def test_carried_identities_are_the_whole_history_s(tmp_path: Path, scenario: str) -> None:
    live = tmp_path / "live"
    live.mkdir()
    clock = [1000.0]
    watcher, checked = checked_watcher(live, clock)
    replay(sorted((CORPUS / scenario).glob("*.jsonl")), live, watcher, clock, seed=11)
    # compared in every round (a small scenario's rounds may each touch every connection or session)
    assert len(checked.rounds) > 3


def test_carried_identities_over_a_generated_backlog(tmp_path: Path) -> None:
    """The load `bench.bench_watch` measures: a backlog read at once, then more traffic of the same
    server keys in pieces; each round computes only the connections it read lines of."""
    live, more = with_backlog(tmp_path, "300k")
    clock = [1000.0]
    watcher, checked = checked_watcher(live, clock)
    watcher.poll()
    replay([max(more.glob("*_proxy_*.jsonl"))], live, watcher, clock, seed=5)
    later = checked.rounds[1:]
    assert later
    assert all(recomputed < frame.height for frame, recomputed in later)


def _split_session_owner(capture: Path, out: Path) -> set[str]:
    """Write `capture` as two captures in `out`: `a.jsonl` without the connection that opened the
    first session shared by several connections, `b.jsonl` (another recorder's header) with only it.
    Returns the other connections of that session."""
    lines = capture.read_bytes().splitlines(keepends=True)
    records = [json.loads(line) for line in lines]
    analysis = analyze([str(capture)])
    try:
        sessions = analysis.rule_context.traffic.sessions.cast({"conn": pl.String, "session_id": pl.String})
    finally:
        analysis.close()
    shared = sessions.group_by("session_id").agg(pl.col("conn").n_unique().alias("n")).filter(pl.col("n") > 1)
    session = shared.get_column("session_id")[0]
    rows = sessions.filter(pl.col("session_id") == session).sort("seq")
    owner = rows.get_column("conn")[0]
    others = set(rows.get_column("conn").to_list()) - {owner}
    header = dict(records[0], recorder_pid=records[0]["recorder_pid"] + 1)
    pairs = list(zip(lines, records, strict=True))
    (out / "a.jsonl").write_bytes(b"".join(line for line, r in pairs if r.get("conn") != owner))
    b = [json.dumps(header).encode() + b"\n", *(line for line, r in pairs if r.get("conn") == owner)]
    (out / "b.jsonl").write_bytes(b"".join(b))
    return others


def test_session_opener_read_later_renames_the_session_s_connections(tmp_path: Path) -> None:
    """The connection that opened a session (named by its `initialize`) arrives in a later round than
    the session's other connections: those take its identity then, though they have no new line."""
    source, live = tmp_path / "source", tmp_path / "live"
    source.mkdir()
    live.mkdir()
    others = _split_session_owner(next((CORPUS / "upgrade-http").glob("*.jsonl")), source)
    clock = [1000.0]
    watcher, checked = checked_watcher(live, clock)
    (live / "a.jsonl").write_bytes((source / "a.jsonl").read_bytes())
    watcher.poll()
    (live / "b.jsonl").write_bytes((source / "b.jsonl").read_bytes())
    clock[0] += 30
    watcher.poll()
    assert len(checked.rounds) == 2

    def clients(frame: pl.DataFrame) -> dict[str, str]:
        return dict(frame.filter(pl.col("conn").is_in(sorted(others))).select("conn", "client").iter_rows())

    before, after = (clients(frame) for frame, _ in checked.rounds)
    assert before.keys() == after.keys() == others
    assert before != after


def test_connections_without_a_key_are_computed_every_time(tmp_path: Path) -> None:
    """Traffic without a server key (`tests/test_eras.py`): its connections, matched by no key, are
    computed in every call, the others carried; the frame is the whole computation's both times."""
    from tests.test_eras import _without_server_keys

    with_key = next((CORPUS / "upgrade-http").glob("*.jsonl"))
    (tmp_path / with_key.name).write_bytes(with_key.read_bytes())
    _without_server_keys(tmp_path)
    analysis = analyze([str(tmp_path)])
    try:
        ctx = analysis.rule_context
        traffic = ctx.traffic
        messages, moved = ctx.messages, traffic.requests
        want = connection_identities(messages, traffic, moved).sort("server", "conn")
        assert want.get_column("server").null_count() > 0
        carried = CarriedIdentities()
        for _ in range(2):
            assert_frame_equal(carried(messages, traffic, moved).sort("server", "conn"), want)
        assert carried.recomputed == want.get_column("server").null_count() < want.height
    finally:
        analysis.close()
