"""What the Dask engine costs (`--scheduler`, analyzer/cluster.py), measured in one run:

    python -m bench.bench_cluster [--quick]

- overhead: `erascope analyze ARCHIVE` without and with `--scheduler` (a `dask scheduler` and two
  single-threaded `dask worker` processes on loopback, started here), whole processes, interleaved,
  on the archive of the bundled corpus and of a generated set; the reports must be identical. The
  generated set also gives the cluster's throughput (MB of JSONL captures per second, compact and
  analyze) that bench/README.md extrapolates from.
- merge: `analyzer.cluster.merge` of synthetic shard results (16 shards; per server key a verdict
  with evidence and a timeline, two findings, two client rows) for 1k, 10k and 100k server keys,
  and the JSON rendering of the merged analysis. Target: linear (time per key at 100k within 3×
  of that at 1k) and small (100k keys under 10 s).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

from bench._standalone import module_main
from bench.dask_cluster import dask_cluster
from bench.generate import generate

ROOT = Path(__file__).resolve().parent.parent
ERASCOPE = Path(sys.executable).parent / "erascope"
MB = 1 << 20


def _run(*args: str | Path) -> tuple[float, bytes]:
    start = time.perf_counter()
    done = subprocess.run([str(ERASCOPE), *map(str, args)], cwd=ROOT, capture_output=True, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"erascope {' '.join(map(str, args))}: {done.stderr.decode()}")
    return took, done.stdout


def _size(paths: list[Path]) -> int:
    return sum(f.stat().st_size for p in paths for f in ([p] if p.is_file() else p.rglob("*.jsonl*")))


def overhead(tmp: Path, address: str, name: str, source: Path, runs: int) -> dict[str, Any]:
    """Compact once locally and once on the cluster, then analyze the archive both ways, interleaved."""
    local_arch, cluster_arch = tmp / f"{name}-local", tmp / f"{name}-cluster"
    compact_local, _ = _run("compact", source, "--out", local_arch)
    compact_cluster, _ = _run("compact", source, "--out", cluster_arch, "--scheduler", address)
    local, cluster = [], []
    reports = set()
    for _ in range(runs):
        t, out = _run("analyze", local_arch, "--format", "json", "--quiet")
        local.append(t)
        reports.add(out)
        t, out = _run("analyze", cluster_arch, "--format", "json", "--quiet", "--scheduler", address)
        cluster.append(t)
        reports.add(out)
    mb = _size([source]) / MB
    return {
        "input_mb": round(mb, 2),
        "compact_local_s": round(compact_local, 2),
        "compact_cluster_s": round(compact_cluster, 2),
        "analyze_local_s": round(statistics.median(local), 2),
        "analyze_cluster_s": round(statistics.median(cluster), 2),
        "overhead_s": round(statistics.median(cluster) - statistics.median(local), 2),
        "cluster_compact_mb_s": round(mb / compact_cluster, 2),
        "cluster_analyze_mb_s": round(mb / statistics.median(cluster), 2),
        "identical_reports": len(reports) == 1,
    }


def _marks(servers: tuple[str, ...], outcome: str, each: int) -> pl.DataFrame:
    """`each` probe (or initialize) rows with `outcome` per server, as a shard sends them back."""
    from analyzer.cluster import MARK_COLUMNS

    rows = [{"server": s, "ts": 1.0e9 + n, "outcome": outcome, "file": "caps/0.jsonl", "line": n}
            for n, s in enumerate(servers) for _ in range(each)]
    return pl.DataFrame(rows, schema=MARK_COLUMNS)


def synthetic_shards(keys: int, shards: int = 16, marks: bool = False) -> tuple[list[Any], list[tuple[str, ...]]]:
    """Shard results as workers send them back, for `keys` server keys spread over `shards` shards
    (`marks`: a row per probe and initialize, as for the html page)."""
    from analyzer.cluster import ShardResult, _sent, shards_of
    from analyzer.eras import ServerVerdict, TimelineEntry
    from analyzer.findings import Evidence, Finding, Severity
    from analyzer.pipeline import Inputs

    names = [f"https://host-{i:06d}.example.test/mcp" for i in range(keys)]
    plan = shards_of(dict.fromkeys(names, 1), shards)
    inputs = Inputs(files=[f"caps/{i}.jsonl" for i in range(100)], records=keys * 40, malformed=[], torn=[], skipped=[])
    from analyzer.cluster import _digest

    digest = _digest(inputs)
    results = []
    for shard, members in enumerate(plan):
        verdicts, findings, rows = [], [], []
        for n, server in enumerate(members):
            ev = Evidence(f"caps/{n % 100}.jsonl", n, "probe answered")
            verdicts.append(
                ServerVerdict(
                    server=server, transport="http", era="dual-era", modern_support="yes", legacy_support="yes",
                    versions=["2025-06-18", "2026-07-28"], first_seen=1.0e9 + n, last_seen=1.0e9 + n + 60,
                    connections=3, probes=2, probe_outcomes={"discover-result": 2}, inits=1,
                    init_outcomes={"initialized": 1}, clients=["c1", "c2"], evidence=[ev],
                    timeline=[TimelineEntry(1.0e9 + n, "modern", ev), TimelineEntry(1.0e9 + n + 30, "dual-era", ev)],
                )
            )
            for client in ("c1", "c2"):
                findings.append(
                    Finding("probe-storm", Severity.WARNING, server, "many probes", (ev,), client, 1.0e9 + n, {"n": 9})
                )
                rows.append({"server": server, "client": client})
        clients = pl.DataFrame(rows, schema={"server": pl.String(), "client": pl.String()}).with_columns(
            connections=pl.lit(3, pl.UInt32()), requests=pl.lit(10, pl.UInt32()), probes=pl.lit(1, pl.UInt32()),
            outcomes=pl.lit("discover-result ×1"), inits=pl.lit(1, pl.UInt32()), acted_as=pl.lit("modern"),
            server_era=pl.lit("dual-era"), findings=pl.lit(1, pl.UInt32()), worst=pl.lit("warning"),
        )
        results.append(
            ShardResult(
                shard=shard, servers_assigned=members, verdicts=verdicts, findings=findings, clients=clients,
                messages=len(members) * 40, probes=_sent(_marks(members, "discover-result", 2), marks),
                inits=_sent(_marks(members, "initialized", 1), marks), inputs_digest=digest,
                inputs=inputs if shard == 0 else None, marks=marks,
            )
        )
    return results, plan


def merge_cost(keys: int, runs: int) -> dict[str, Any]:
    from analyzer.cluster import merge
    from analyzer.report import render_json

    results, plan = synthetic_shards(keys)
    merges = []
    for _ in range(runs):
        start = time.perf_counter()
        analysis = merge(results, plan)
        merges.append(time.perf_counter() - start)
    # the renderer is the local run's too: timed once, for scale
    start = time.perf_counter()
    render_json(analysis)
    render_s = time.perf_counter() - start
    assert len(analysis.servers) == keys and len(analysis.findings) == 2 * keys
    merge_s = statistics.median(merges)
    return {
        "keys": keys,
        "merge_s": round(merge_s, 4),
        "merge_us_per_key": round(merge_s / keys * 1e6, 2),
        "render_json_s": round(render_s, 3),
    }


def run(quick: bool = False) -> dict[str, Any]:
    runs = 3 if quick else 5
    result: dict[str, Any] = {"merge": [merge_cost(k, runs) for k in (1_000, 10_000, 100_000)]}
    tmp = Path(tempfile.mkdtemp(prefix="erascope-bench-cluster-"))
    try:
        gen = tmp / "gen"
        generate(gen, (16 if quick else 64) * MB, files=8, spawns=200, seed=3)
        with dask_cluster(tmp / "cluster", cwd=ROOT) as cluster:
            result["corpus"] = overhead(tmp, cluster.address, "corpus", ROOT / "captures" / "corpus", runs)
            result["generated"] = overhead(tmp, cluster.address, "generated", gen, runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    first, last = result["merge"][0], result["merge"][-1]
    result["targets"] = {
        "identical reports": result["corpus"]["identical_reports"] and result["generated"]["identical_reports"],
        "merge linear (µs/key at 100k ≤ 3× 1k)": last["merge_us_per_key"] <= 3 * first["merge_us_per_key"],
        "merge of 100k keys < 10 s": last["merge_s"] < 10,
    }
    return result


def describe(result: dict[str, Any]) -> list[str]:
    lines = ["merge of shard results (16 shards):"]
    lines += [
        f"  {m['keys']:>7} keys: merge {m['merge_s']:.3f} s ({m['merge_us_per_key']} µs/key), render json"
        f" {m['render_json_s']:.2f} s"
        for m in result["merge"]
    ]
    for name in ("corpus", "generated"):
        o = result[name]
        lines.append(
            f"{name} ({o['input_mb']} MB JSONL): analyze local {o['analyze_local_s']} s, cluster"
            f" {o['analyze_cluster_s']} s (overhead {o['overhead_s']} s); compact local {o['compact_local_s']} s,"
            f" cluster {o['compact_cluster_s']} s; cluster throughput: compact {o['cluster_compact_mb_s']} MB/s,"
            f" analyze {o['cluster_analyze_mb_s']} MB/s"
        )
    return lines


if __name__ == "__main__":
    module_main(__doc__.splitlines()[0], run, describe)
