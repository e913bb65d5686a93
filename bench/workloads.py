"""The measured workloads, each run in a child process of the harness so its peak RSS is its own.

    python -m bench.workloads scan DIR               bare polars scan_ndjson(schema=RECORD_SCHEMA)
    python -m bench.workloads scan-parquet ARCHIVE   bare polars scan_parquet of every column of an archive
    python -m bench.workloads analyze PATH [--jobs N] the analyzer pipeline (JSONL or a Parquet archive)
    python -m bench.workloads load PATH              loading alone (per-file step + combine)
    python -m bench.workloads stages PATH [--jobs N]  the pipeline stage by stage (seconds, peak RSS, heap)
    python -m bench.workloads extract DIR MODE [--jobs N]   per-file step only: seq | threads | processes
    python -m bench.workloads compact DIR OUT [--jobs N]    erascope compact

Prints one JSON object: `seconds` (the work itself, after imports) and a few counts that let the
harness check that both sides of a comparison read the same data.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import orjson

if sys.argv[1:2] not in (["scan"], ["scan-parquet"]):
    # the analyzer's workloads run with the allocator settings the `erascope` command gets
    # (`analyzer.ALLOCATOR_CONF`, set only if the package is imported before polars); the bare
    # scan, the baseline, keeps polars' defaults
    import analyzer  # noqa: F401
import polars as pl


def _capture_files(directory: str) -> list[str]:
    return sorted(str(p) for p in Path(directory).rglob("*.jsonl"))


def scan(directory: str) -> dict[str, Any]:
    """The baseline: every column of every record parsed by polars with the explicit schema."""
    from analyzer.schema import RECORD_SCHEMA

    files = _capture_files(directory)
    t = time.perf_counter()
    counts = pl.scan_ndjson(files, schema=RECORD_SCHEMA).select(pl.all().count()).collect(engine="streaming")
    return {"seconds": time.perf_counter() - t, "records": int(counts.item(0, "type")), "files": len(files)}


def scan_parquet(archive: str) -> dict[str, Any]:
    """The archive's baseline: every column (the payload `raw` included) of every part, no analysis."""
    parts = sorted(str(p) for p in Path(archive).glob("day=*/server=*/*.parquet"))
    t = time.perf_counter()
    counts = (
        pl.scan_parquet(parts, hive_partitioning=False, glob=False)
        .select(pl.all().count())
        .collect(engine="streaming")
    )
    return {"seconds": time.perf_counter() - t, "rows": int(counts.item(0, "line")), "files": len(parts)}


def analyze(path: str, jobs: int | None) -> dict[str, Any]:
    from analyzer.pipeline import AnalyzeOptions
    from analyzer.pipeline import analyze as run

    t = time.perf_counter()
    result = run([path], AnalyzeOptions(jobs=jobs))
    return {
        "seconds": time.perf_counter() - t,
        "records": result.inputs.records,
        "messages": result.message_count,
        "findings": len(result.findings),
        "files": len(result.inputs.files),
    }


def load(path: str) -> dict[str, Any]:
    """Loading alone, as `analyze` loads: every file's per-file step (spilling), then the combine step (pairing)."""
    from analyzer.load import combine, extract_files, find_inputs
    from analyzer.spill import Spill

    t = time.perf_counter()
    with Spill() as spill:
        loaded = combine(extract_files(find_inputs([path]), spill=spill))
    return {"seconds": time.perf_counter() - t, "records": loaded.records, "messages": loaded.traffic.rows}


def _heap_mb() -> int:
    """This process' anonymous resident memory (`RssAnon`), MB: its heap, without mapped files."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) // 1024
    return 0


class _HeapSampler:
    """Samples `_heap_mb` every 5 ms in a thread: `mark` gives the heap now and its peak since the last mark."""

    def __init__(self) -> None:
        import threading

        self._peak = _heap_mb()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            self._peak = max(self._peak, _heap_mb())
            time.sleep(0.005)

    def mark(self) -> tuple[int, int]:
        now = _heap_mb()
        peak, self._peak = max(self._peak, now), now
        return now, peak


def combined(facts: list[Any]) -> tuple[Any, Any, Any]:
    """The files' facts combined as `analyze_facts` combines them: (inputs, messages, traffic). The
    per-file facts are let go (`facts` is emptied) and the freed C heap handed back."""
    from addon.memory import release_freed
    from analyzer.load import combine
    from analyzer.pipeline import _inputs

    inputs = _inputs(facts)
    loaded = combine(facts)
    messages, traffic = loaded.messages, loaded.traffic
    facts.clear()
    del loaded
    release_freed()
    return inputs, messages, traffic


def stages(path: str, jobs: int | None) -> dict[str, Any]:
    """The pipeline stage by stage: seconds and peak RSS (MB) after each, and the heap (`RssAnon`, MB)
    after each and at its highest during it, to see where time and memory go."""
    import resource

    from analyzer.clients import client_table
    from analyzer.eras import server_verdicts
    from analyzer.load import extract_files, find_inputs
    from analyzer.pipeline import Analysis, AnalyzeOptions
    from analyzer.probes import classify_inits, classify_probes
    from analyzer.rules import RuleContext, RuleOptions, run_rules
    from analyzer.spill import Spill

    opts = AnalyzeOptions(jobs=jobs)
    spill = Spill()
    marks: dict[str, dict[str, float]] = {}
    start = last = time.perf_counter()

    heap = _HeapSampler()

    def mark(name: str) -> None:
        nonlocal last
        now = time.perf_counter()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        heap_now, heap_peak = heap.mark()
        marks[name] = {
            "s": round(now - last, 3),
            "peak_rss_mb": round(peak, 1),
            "heap_mb": heap_now,
            "stage_peak_heap_mb": heap_peak,
        }
        last = now

    facts = extract_files(find_inputs([path]), opts.load, jobs=jobs, spill=spill)
    mark("extract_files")
    inputs, messages, traffic = combined(facts)
    mark("combine")
    probes = classify_probes(messages, opts.probe_timeout, traffic.requests)
    inits = classify_inits(messages, traffic.requests)
    mark("classify")
    servers = server_verdicts(messages, probes, inits, opts.inconsistency_window, traffic)
    mark("verdicts")
    analysis = Analysis(inputs=inputs, messages=messages, probes=probes, inits=inits, servers=servers, traffic=traffic)
    # as `analyze` does: one context, its request frames built, the moved requests let go
    analysis.rule_context = context = RuleContext.from_analysis(analysis, RuleOptions(), spill)
    rows = traffic.rows
    del traffic
    analysis.traffic = None
    analysis.traffic = context.release_moved()
    mark("request_view")
    findings = run_rules(analysis, opts.rule_options)
    mark("rules")
    analysis.findings = findings
    analysis.clients = client_table(analysis)
    mark("clients")
    spill.close()
    return {
        "seconds": time.perf_counter() - start,
        "stages": marks,
        "messages": rows,
        "kept_rows": messages.height,
        "messages_mb": round(messages.estimated_size() / 2**20, 1),
        "findings": len(findings),
    }


def extract(directory: str, mode: str, jobs: int) -> dict[str, Any]:
    """The per-file step and the combine step, parallelized three ways, for the jobs benchmark."""
    from analyzer.load import combine, extract_file, extract_files, find_inputs

    files = find_inputs([directory])
    t = time.perf_counter()
    if mode == "seq":
        facts = extract_files(files, jobs=1)
    elif mode == "threads":
        facts = extract_files(files, jobs=jobs)
    elif mode == "processes":
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            facts = list(pool.map(extract_file, files))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    loaded = combine(facts)
    return {"seconds": time.perf_counter() - t, "messages": loaded.traffic.rows, "files": len(files)}


def compact(directory: str, out: str, jobs: int | None) -> dict[str, Any]:
    from analyzer.compact import compact as run

    t = time.perf_counter()
    result = run([directory], Path(out), jobs=jobs, force=True)
    return {"seconds": time.perf_counter() - t, "rows": result.rows, "parts": result.parts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.workloads")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("scan").add_argument("dir")
    sub.add_parser("scan-parquet").add_argument("archive")
    p = sub.add_parser("analyze")
    p.add_argument("path")
    p.add_argument("--jobs", type=int, default=None)
    sub.add_parser("load").add_argument("path")
    p = sub.add_parser("stages")
    p.add_argument("path")
    p.add_argument("--jobs", type=int, default=None)
    p = sub.add_parser("extract")
    p.add_argument("dir")
    p.add_argument("mode", choices=["seq", "threads", "processes"])
    p.add_argument("--jobs", type=int, default=2)
    p = sub.add_parser("compact")
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--jobs", type=int, default=None)
    args = ap.parse_args(argv)
    if args.cmd == "scan":
        result = scan(args.dir)
    elif args.cmd == "scan-parquet":
        result = scan_parquet(args.archive)
    elif args.cmd == "analyze":
        result = analyze(args.path, args.jobs)
    elif args.cmd == "stages":
        result = stages(args.path, args.jobs)
    elif args.cmd == "load":
        result = load(args.path)
    elif args.cmd == "extract":
        result = extract(args.dir, args.mode, args.jobs)
    else:
        result = compact(args.dir, args.out, args.jobs)
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
