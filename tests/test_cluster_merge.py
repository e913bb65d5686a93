"""`analyzer.cluster.merge` accounts for every shard: a missing, repeated or stray shard result, or
shards that read different inputs, is an error, never a smaller report. No cluster needed: shards
run in this process."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from addon.errors import ErascopeError
from analyzer.cluster import (
    _analyze_shard,
    archive_identity,
    archive_parts,
    archive_servers,
    code_identity,
    merge,
    shards_of,
)
from analyzer.pipeline import AnalyzeOptions
from analyzer.report import render_json
from bench.bench_cluster import synthetic_shards
from bench.generate import generate

ROOT = Path(__file__).resolve().parent.parent
ERASCOPE = Path(sys.executable).parent / "erascope"


def seen(archive: str) -> str:
    """The archive as the client sees it when it plans the shards (`_analyze_shard`'s check)."""
    return archive_identity(archive, archive_parts(archive))


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


def tied_captures(sources: list[Path], out: Path, *, servers: int, instants: int) -> None:
    """`sources` copied into `out`, each under the key `server-{i % servers}`, every record after its
    header at one of `instants` times half a second apart: probes and answers tied on time, many a
    server's."""
    out.mkdir()
    for i, source in enumerate(sources):
        records = [orjson.loads(line) for line in source.read_bytes().splitlines()]
        for n, record in enumerate(records):
            record["server"] = f"server-{i % servers}"
            if n and "ts" in record:
                record["ts"] = 1.796e9 + i % instants / 2
        (out / f"{i:03d}-{source.name}").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


def test_a_shard_run_after_other_work_gives_the_local_report(tmp_path: Path) -> None:
    """A worker runs shard after shard in one process: the categories, caches and row orders earlier
    work left in it must not change a finding. Probes and answers tied on time (a coarse clock, or
    times written into a capture) were taken in the order their rows came in, which differed, and
    so did a storm's answer runs, a split's evidence, a stale-era finding. The local report comes from
    a fresh process; the shards run here, after another archive was analyzed."""
    caps = tmp_path / "caps"
    tied_captures(sorted((ROOT / "captures" / "corpus").glob("*/*.jsonl")), caps, servers=4, instants=3)
    archive = tmp_path / "archive"
    subprocess.run([str(ERASCOPE), "compact", str(caps), "--out", str(archive)], check=True, timeout=300)
    local = subprocess.run(
        [str(ERASCOPE), "analyze", str(archive), "-f", "json", "-q"], capture_output=True, check=True, timeout=300
    ).stdout.decode()
    identity = code_identity()
    generate(tmp_path / "other", 1 << 20, files=3, spawns=12, seed=5)
    other = str(tmp_path / "other-archive")
    subprocess.run([str(ERASCOPE), "compact", str(tmp_path / "other"), "--out", other], check=True, timeout=300)
    servers = tuple(k for k in archive_servers(archive_parts(other)) if k is not None)
    _analyze_shard(identity, 0, other, seen(other), servers, AnalyzeOptions())
    keys = ("server-0", "server-1", "server-2", "server-3")
    for plan in ([keys], [(k,) for k in reversed(keys)], [("server-1", "server-3"), ("server-0", "server-2")]):
        view = seen(str(archive))
        results = [_analyze_shard(identity, i, str(archive), view, p, AnalyzeOptions()) for i, p in enumerate(plan)]
        assert render_json(merge(results, plan)) == local, plan


def test_a_partition_gone_from_the_archive_fails_every_shard_as_the_local_run() -> None:
    """The cluster plans its shards from the `server=` directories on disk: a server whose partition
    was lost (a partial copy to the shared filesystem, a directory renamed) got no shard, or a shard
    under the new name that pruned its parts, and the merged report simply had one server less while
    the local run said the archive is incomplete. Every shard checks every part the entries name."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "archive"
        subprocess.run([str(ERASCOPE), "compact", "captures/corpus", "--out", str(archive)], cwd=ROOT, check=True,
                       capture_output=True)  # fmt: skip
        gone = next(archive.glob("day=*/server=upgrade-stdio-server"))
        shutil.move(gone, gone.with_name("server=renamed"))
        local = subprocess.run([str(ERASCOPE), "analyze", str(archive), "--quiet"], cwd=ROOT, capture_output=True)
        assert local.returncode == 2 and b"is incomplete" in local.stderr, local.stderr
        keys = sorted(k for k in archive_servers(archive_parts(str(archive))) if k is not None)
        assert "upgrade-stdio-server" not in keys and "renamed" in keys  # what the plan is made of
        for shard in (("renamed",), tuple(k for k in keys if k != "renamed")):
            with pytest.raises(ErascopeError, match="is incomplete"):
                _analyze_shard(code_identity(), 0, str(archive), seen(str(archive)), shard, AnalyzeOptions())
