"""Shared look-up helpers of the rules: one integer key per pair, as-of look-ups in the view's order."""

from __future__ import annotations

import polars as pl
import pytest

from analyzer.rules import RuleContext, RuleOptions
from analyzer.rules.frames import pair_key
from analyzer.rules.scenario import Scenario
from analyzer.rules.storms import probe_costs


def test_pair_key_is_one_key_per_pair_across_frames() -> None:
    cat = pl.Categorical()
    left = pl.DataFrame({"a": ["s1", "s1", "s2", None], "b": ["x", "y", "x", "x"]}).cast(cat)
    right = pl.DataFrame({"a": ["s2", "s1"], "b": ["x", "y"]}).cast(cat)
    keys = left.select(pair_key("a", "b"))["_key"].to_list()
    # distinct pairs, distinct keys; a missing half gives no key (it matches nothing, like the pair)
    assert len(set(keys[:3])) == 3 and keys[3] is None
    # the same strings in another frame give the same keys (categories are shared)
    assert right.select(pair_key("a", "b"))["_key"].to_list() == [keys[2], keys[1]]


def test_probe_costs_with_clients_interleaved_in_time() -> None:
    # The request view is in time order within each (server, client), not overall: two clients
    # probing the same server in turns must each get the cost to their own next real request.
    s = Scenario()
    for i in range(4):
        for client, offset, wait in (("A", 0.0, 0.5), ("B", 0.1, 0.8)):
            t = i * 2.0 + offset
            s.conn("weather", f"{client}-probe{i}", client=client).probe(t, "discover-result")
            s.conn("weather", f"{client}-call{i}", client=client).call(t + wait, modern=True)
    ctx = RuleContext.from_analysis(s.analysis(), RuleOptions())
    costs = probe_costs(ctx).join(ctx.probe_rows.select("file", "line", "client"), on=["file", "line"])
    by_client = costs.group_by("client").agg(pl.col("cost_s").min().alias("lo"), pl.col("cost_s").max().alias("hi"))
    got = {row["client"]: (row["lo"], row["hi"]) for row in by_client.iter_rows(named=True)}
    assert got["A"] == (pytest.approx(0.5), pytest.approx(0.5))
    assert got["B"] == (pytest.approx(0.8), pytest.approx(0.8))
    assert costs.height == 8


def test_probe_next_request_on_its_connection_when_another_connection_comes_between() -> None:
    # Each probe is followed first by its client's request on another connection, then by one on
    # its own, so the next request on its connection is looked up further on. Many probes share a
    # connection, and with a few thousand of them polars' joins no longer keep the probes in
    # order: an as-of look-up on them unsorted finds the wrong next requests (it did here).
    s = Scenario()
    for c in range(20):
        own = s.conn("weather", f"own{c}", client=f"agent{c}")
        other = s.conn("weather", f"other{c}", client=f"agent{c}")
        for i in range(100):
            t = i * 10.0 + c * 0.01
            own.probe(t, "discover-result")
            other.call(t + 1.0, modern=True)
            own.call(t + 2.0, modern=True)
    rows = RuleContext.from_analysis(s.analysis(), RuleOptions()).probe_rows
    assert rows.height == 2000
    assert rows["next_same_conn"].all()
    assert (rows["next_ts"] - rows["ts"]).to_list() == pytest.approx([2.0] * 2000)
    assert (rows["next_conn"] == rows["conn"]).all()


def test_probe_rows_in_view_order_with_their_own_details() -> None:
    # `probe_rows` relies on its joins keeping the view's order (it is not sorted again) and sets
    # the joined columns beside the probes' own: with thousands of probes, a join that reorders
    # would misplace them. Each row must be in `_i` order and carry its own request's id and next request.
    s = Scenario()
    for c in range(30):
        conn = s.conn(f"server{c % 3}", f"spawn{c}", client=f"agent{c % 7}")
        for i in range(100):
            t = i * 10.0 + c * 0.01
            conn.probe(t, "discover-result" if (c + i) % 4 else "no-answer")
            conn.call(t + 1.0, modern=bool(i % 2))
    analysis = s.analysis()
    rows = RuleContext.from_analysis(analysis, RuleOptions()).probe_rows
    assert rows.height == 3000
    assert rows["_i"].is_sorted() and rows["_i"].n_unique() == 3000
    requests = analysis.messages.filter(pl.col("kind") == "request").select(
        pl.col("file").cast(pl.String), "line", "id", "ts"
    )
    own = rows.select(pl.col("file").cast(pl.String), "line", "id", "next_line", "next_ts")
    joined = own.join(requests, on=["file", "line"], how="left", suffix="_req")
    assert (joined["id"] == joined["id_req"]).all()
    # the next request is the call one second after the probe, on its own connection
    assert (rows["next_ts"] - rows["ts"]).to_list() == pytest.approx([1.0] * 3000)
    assert rows["next_same_conn"].all()


def test_matching_is_the_join_it_replaces_for_any_capture_and_seq() -> None:
    """`matching` picks rows by one integer made of capture and seq's low 32 bits: rows that share
    it with a key without being one (seq 2³² apart, another capture) must not come through."""
    from analyzer.rules.frames import matching

    seqs = [1, 2, 3, (1 << 32) + 1, -1, (1 << 32) - 1, None]
    rows = pl.DataFrame(
        {
            "capture": [c for c in ("a", "b") for _ in seqs],
            "seq": seqs * 2,
            "v": list(range(2 * len(seqs))),
        },
        schema_overrides={"capture": pl.Categorical()},
    )
    keys = pl.DataFrame(
        {"capture": ["a", "a", "b", "b", "c"], "seq": [1, -1, (1 << 32) - 1, None, 1], "k": [1, 2, 3, 4, 5]}
    )
    for how in ("semi", "inner"):
        categorical = keys.with_columns(pl.col("capture").cast(pl.Categorical()))
        expected = rows.join(categorical, on=["capture", "seq"], how=how)
        got = matching(rows.lazy(), keys, how=how)
        assert got.equals(expected.sort("v")), how
        assert got.get_column("v").to_list() == [0, 4, 12]
