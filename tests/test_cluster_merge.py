"""`analyzer.cluster.merge` accounts for every shard: a missing, repeated or stray shard result, or
shards that read different inputs, is an error, never a smaller report. No cluster needed."""

from __future__ import annotations

import dataclasses

import pytest

from addon.errors import ErascopeError
from analyzer.cluster import merge, shards_of
from bench.bench_cluster import synthetic_shards


def test_merge_of_whole_shards_has_every_server_once() -> None:
    results, plan = synthetic_shards(50, shards=4)
    merged = merge(results, plan)
    assert [v.server for v in merged.servers] == sorted(k for shard in plan for k in shard)
    assert len(merged.findings) == 100
    assert merged.clients is not None and merged.clients.height == 100
    assert merged.message_count == 50 * 40
    assert merged.probes.height == 100 and merged.inits.height == 50
    marked = merge(*synthetic_shards(50, shards=4, marks=True))
    assert marked.probes.height == 100 and marked.inits.height == 50
    assert marked.probes.get_column("server").n_unique() == 50


def test_a_missing_shard_is_an_error() -> None:
    results, plan = synthetic_shards(50, shards=4)
    with pytest.raises(ErascopeError, match="incomplete"):
        merge(results[:-1], plan)


def test_a_repeated_shard_is_an_error() -> None:
    results, plan = synthetic_shards(50, shards=4)
    with pytest.raises(ErascopeError, match="incomplete"):
        merge([*results[:-1], results[0]], plan)


def test_a_shard_speaking_of_another_shards_server_is_an_error() -> None:
    results, plan = synthetic_shards(50, shards=4)
    stray = dataclasses.replace(results[1], verdicts=[*results[1].verdicts, results[2].verdicts[0]])
    with pytest.raises(ErascopeError, match="other servers"):
        merge([results[0], stray, *results[2:]], plan)


def test_shards_that_read_different_inputs_are_an_error() -> None:
    results, plan = synthetic_shards(50, shards=4)
    changed = dataclasses.replace(results[3], inputs_digest="0" * 64)
    with pytest.raises(ErascopeError, match="different inputs"):
        merge([*results[:3], changed], plan)


def test_shards_are_balanced_by_bytes_and_cover_every_key_once() -> None:
    sizes = {"a": 100, "b": 60, "c": 50, "d": 10, "e": 1}
    plan = shards_of(sizes, 2)
    assert sorted(k for shard in plan for k in shard) == sorted(sizes)
    assert plan == [("a", "d", "e"), ("b", "c")]  # largest first, each onto the lightest shard: 111 and 110
    assert shards_of(sizes, 99) == [(k,) for k in ("a", "b", "c", "d", "e")]  # at most one shard per key


def test_keys_that_share_a_session_go_to_one_shard() -> None:
    from analyzer.cluster import shards_of
    from analyzer.watch_shard import SessionLinks

    links = SessionLinks()
    links.add([("s1", "a"), ("s2", "c"), ("s1", "b"), ("s3", "x")])  # x is in no archive: ignored
    plan = shards_of({"a": 10, "b": 1, "c": 5, "d": 7}, 4, links)
    assert sorted(plan) == [("a", "b"), ("c",), ("d",)]
    assert sorted(shards_of({"a": 10, "b": 1, "c": 5, "d": 7}, 4)) == [("a",), ("b",), ("c",), ("d",)]
