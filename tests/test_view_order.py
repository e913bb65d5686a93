"""The request view's order (`analyzer.rules.context._view_order`) is one order whichever way it is
computed: one sort on every key for small views, a sort per (server, client) stretch for big ones."""

from __future__ import annotations

import random

import polars as pl
import pytest

import analyzer.rules.context as context


def _unsorted(rows: int, seed: int) -> pl.DataFrame:
    rng = random.Random(seed)
    servers = ["a", "b", None]
    clients = ["x", "y", "z", None]
    return pl.DataFrame(
        {
            "server": [rng.choice(servers) for _ in range(rows)],
            "client": [rng.choice(clients) for _ in range(rows)],
            # few distinct times and sequence numbers: ties, which keep row order, and nulls
            "ts": [rng.choice([1.0, 2.0, 3.0, None]) for _ in range(rows)],
            "seq": [rng.choice([1, 2, None]) for _ in range(rows)],
        },
        schema={"server": pl.Categorical(), "client": pl.Categorical(), "ts": pl.Float64(), "seq": pl.Int64()},
    )


@pytest.mark.parametrize("seed", range(5))
def test_one_sort_and_stretches_give_one_order(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    unsorted = _unsorted(500, seed)
    once = context._view_order(unsorted)
    monkeypatch.setattr(context, "VIEW_SORT_ONCE_ROWS", 0)
    stretches = context._view_order(unsorted)
    assert once.to_list() == stretches.to_list()
    # and it is the documented order: (server, client) pairs by code, then (ts, seq), ties by row
    ordered = unsorted.with_row_index("_r").sort(
        context.pair_key("server", "client"), "ts", "seq", "_r", nulls_last=True
    )
    assert once.to_list() == ordered.get_column("_r").to_list()


def _without_nulls(rows: int, seed: int) -> pl.DataFrame:
    """Keys as rows of the view hold them when none is null: ties on every key, times that compare
    equal with other bits (-0.0 and 0.0), NaN, sequence numbers beyond 32 bits and below zero."""
    rng = random.Random(seed)
    times = [1.0, 2.0, 0.0, -0.0, float("nan"), float("inf"), -1.5, 1e9 + 0.5]
    return pl.DataFrame(
        {
            "server": [rng.choice(["a", "b", "c"]) for _ in range(rows)],
            "client": [rng.choice(["x", "y"]) for _ in range(rows)],
            "ts": [rng.choice(times) for _ in range(rows)],
            "seq": [rng.choice([1, 2, -3, 1 << 40]) for _ in range(rows)],
        },
        schema={"server": pl.Categorical(), "client": pl.Categorical(), "ts": pl.Float64(), "seq": pl.Int64()},
    )


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("nulls", [False, True])
def test_numpy_lexsort_gives_the_view_s_order(seed: int, nulls: bool) -> None:
    """`watch`'s sort (`lexsort=True`: numpy, when no key is null; polars otherwise) is polars' order."""
    unsorted = _unsorted(500, seed) if nulls else _without_nulls(500, seed)
    ordered = context._view_order(unsorted, lexsort=True)
    assert ordered.dtype == pl.get_index_type()
    assert ordered.to_list() == context._view_order(unsorted).to_list()
    # the documented order: (server, client) pairs by code, then (ts, seq), ties by row
    documented = unsorted.with_row_index("_r").sort(
        context.pair_key("server", "client"), "ts", "seq", "_r", nulls_last=True
    )
    assert ordered.to_list() == documented.get_column("_r").to_list()
