"""Wall and CPU seconds of each stage after reading, in one process: `python -m bench.stage_times PATH [--runs N]`.

Finer than the `stages` workload: the rule context's frames and each rule apart. Prints one line per
stage (the median over the runs) and the total.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections import defaultdict


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def once(path: str, use_spill: bool = True) -> dict[str, tuple[float, float]]:
    """One analysis of `path`, stage by stage: {stage: (wall s, CPU s)}."""
    from analyzer.clients import client_table
    from analyzer.eras import server_verdicts
    from analyzer.load import extract_files, find_inputs
    from analyzer.pipeline import Analysis, AnalyzeOptions
    from analyzer.probes import classify_inits, classify_probes
    from analyzer.rules import REGISTRY, RuleContext, RuleOptions, sort_findings
    from analyzer.rules.upstream import blame_upstream
    from analyzer.spill import Spill
    from bench.workloads import combined

    marks: dict[str, tuple[float, float]] = {}
    last = [time.perf_counter(), _cpu()]

    def mark(name: str) -> None:
        now, cpu = time.perf_counter(), _cpu()
        marks[name] = (now - last[0], cpu - last[1])
        last[:] = [time.perf_counter(), _cpu()]

    opts = AnalyzeOptions()
    with Spill() as spill:
        facts = extract_files(find_inputs([path]), opts.load, spill=spill if use_spill else None)
        mark("read")
        inputs, messages, traffic = combined(facts)
        del facts
        mark("combine")
        probes = classify_probes(messages, opts.probe_timeout, traffic.requests)
        mark("classify probes")
        inits = classify_inits(messages, traffic.requests)
        mark("classify inits")
        analysis = Analysis(inputs=inputs, messages=messages, probes=probes, inits=inits, servers=[], traffic=traffic)
        analysis.rule_context = ctx = RuleContext.from_analysis(analysis, RuleOptions(), spill if use_spill else None)
        _ = ctx.conn_clients
        mark("conn_clients")
        analysis.servers = server_verdicts(
            messages, probes, inits, opts.inconsistency_window, traffic, identities=ctx.conn_clients
        )
        mark("verdicts")
        del traffic
        analysis.traffic = None
        _ = ctx.responses
        mark("responses")
        _ = ctx.requests
        mark("request view")
        _ = ctx.probe_rows
        mark("probe_rows")
        analysis.traffic = ctx.release_moved()
        mark("release")
        findings = []
        for rule_id, rule in REGISTRY.items():
            findings.extend(rule.run(ctx))
            mark(f"rule {rule_id}")
        analysis.findings = sort_findings(blame_upstream(findings, ctx))
        mark("blame_upstream")
        analysis.clients = client_table(analysis)
        mark("client table")
    return marks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-spill", action="store_true")
    args = parser.parse_args()
    from bench.workloads import _HeapSampler

    heap = _HeapSampler()
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for _ in range(args.runs):
        for name, m in once(args.path, not args.no_spill).items():
            runs[name].append(m)
    total_w = total_c = 0.0
    for name, ms in runs.items():
        w = statistics.median(m[0] for m in ms)
        c = statistics.median(m[1] for m in ms)
        total_w += w
        total_c += c
        print(f"{name:32s} {w:6.3f} wall {c:6.3f} cpu")
    print(f"{'total':32s} {total_w:6.3f} wall {total_c:6.3f} cpu")
    print(f"peak heap {heap.mark()[1]} MB")


if __name__ == "__main__":
    main()
