"""Client identities read in batches of rows (`analyzer.identity.NAMED_BATCH_ROWS`) are the identities
read from all rows at once: the earliest row naming each part wins whatever batch it falls in."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from analyzer import identity
from analyzer.condense import traffic_of
from analyzer.identity import connection_identities
from analyzer.messages import as_categoricals
from analyzer.schema import MESSAGES_SCHEMA
from analyzer.spill import Spill

CONNS = [("s0", "c0"), ("s0", "c1"), ("s1", "c0"), ("s1", "c2"), (None, "c3")]
NAMES = [None, "mcp", "agent", "curl/8.5"]


def _rows(rng: random.Random, n: int) -> list[dict[str, object]]:
    rows = []
    for _ in range(n):
        server, conn = rng.choice(CONNS)
        agent = rng.choice([None, "python-httpx/0.28.1", "curl/8.5"])
        rows.append(
            {
                "server": server,
                "conn": conn,
                # few distinct instants, some missing: ties and nulls decide the earliest row
                "ts": rng.choice([None, 1.0, 2.0, 2.0, 3.0]),
                "seq": rng.choice([None, 1, 2, 2]),
                "kind": "request",
                "client_name": rng.choice([*NAMES, agent]),  # a name equal to the agent is no clientInfo
                "client_version": rng.choice([None, "1.0", "2.0"]),
                "user_agent": agent,
                "client_addr": rng.choice([None, "10.0.0.1:5000", "[::1]:6000"]),
                "host_process": rng.choice([None, "node a.js", "python b.py"]),
                "session_id": rng.choice([None, None, "sess-1"]),
            }
        )
    return rows


def _frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    columns = {c: [r.get(c) for r in rows] for c in MESSAGES_SCHEMA}
    return as_categoricals(pl.DataFrame(columns, schema=MESSAGES_SCHEMA).lazy()).collect()


def _sorted(identities: pl.DataFrame) -> pl.DataFrame:
    return identities.sort("server", "conn", nulls_last=True)  # a frame of connections in no set order


@pytest.mark.parametrize("seed", range(12))
def test_identities_in_batches_equal_identities_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    messages = _frame(_rows(rng, 40))
    moved = _frame(_rows(rng, 60)).drop("host_process")  # moved requests carry no host process
    traffic = traffic_of(messages)
    at_once = connection_identities(messages, traffic, moved)
    on_disk = Spill(tmp_path).put(moved)  # batched only when the moved requests are on disk
    heights: list[int] = []
    ranked = identity._ranked

    def recorded(rows: pl.DataFrame) -> pl.DataFrame:
        heights.append(rows.height)
        return ranked(rows)

    monkeypatch.setattr(identity, "NAMED_BATCH_ROWS", 7)
    monkeypatch.setattr(identity, "_ranked", recorded)
    assert _sorted(connection_identities(messages, traffic, moved)).equals(_sorted(at_once))
    assert len(heights) == 1  # rows in memory are taken at once
    heights.clear()
    batched = connection_identities(messages, traffic, on_disk)
    assert len(heights) > 2 and max(heights) <= 7  # really read in batches, none bigger than asked
    assert _sorted(batched).equals(_sorted(at_once))
    assert at_once.height == traffic.conns.height
    # the draw must be able to tell batches apart: some connection has a name
    assert at_once.get_column("client").ne("unknown").any()


def test_a_tie_across_batches_goes_to_the_earlier_row() -> None:
    rows = [
        {"server": "s", "conn": "c", "ts": 1.0, "seq": 5, "client_name": "first", "kind": "request"},
        {"server": "s", "conn": "c", "ts": 1.0, "seq": 5, "client_name": "second", "kind": "request"},
    ]
    frame = _frame(rows)
    batches = iter([frame.head(1), frame.tail(1)])
    parts = identity._earliest_parts(batches, ["server", "conn"], single=False)
    assert parts.get_column("name").cast(pl.String).to_list() == ["first"]
    reversed_ = identity._earliest_parts(iter([frame.tail(1), frame.head(1)]), ["server", "conn"], single=False)
    assert reversed_.get_column("name").cast(pl.String).to_list() == ["second"]
