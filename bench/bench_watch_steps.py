"""A round of `erascope watch` step by step on the same rows, repeated: what each step costs at two backlogs.

    python -m bench.bench_watch_steps [--quick] [--json]

The load of `bench.bench_watch` (a backlog of `bench.generate` captures, seed 1, 10 MB and 100 MB;
`--quick`: 5 and 25 MB; then one MB of the seed-2 bulk file appended and read). Then, on the rows a
round hands the pipeline (the touched servers' parts, as `Watcher.poll` selects them), the pipeline
(`analyzer.pipeline.analyze_facts`) is run `REPEATS` times, and each rule and each shared frame of
the rules' context (`requests`, `probe_rows`, `responses`) is computed `REPEATS` times on its own,
the two backlogs alternating; the figure is the least CPU time (`time.process_time`) of the repeats.
What the steps read is counted beside (message rows, moved requests, dropped answers, request view
rows, probes, `initialize` requests, connections).

`bench_watch_stages` times the stages of real rounds, each once: on a shared machine the load moves
one stage by as much as the changes looked for. Here every step is repeated on the same rows and the
least time kept, which the load inflates least; a step whose time grows more than its rows (about
9× from 10 to 100 MB) does work per group or per window that grows with the history. Run it from
another checkout (`PYTHONPATH=that-tree python path/to/bench_watch_steps.py`) to compare two trees
on the same data.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from bench._standalone import module_main
from bench.bench_watch import MB, _generated, appended_bulk, watcher_at_end
from bench.bench_watch_stages import growth_lines

REPEATS = 8


def _watcher_after_one_mb(backlog_mb: int, tmp: str) -> Any:
    watcher, live = watcher_at_end(_generated(backlog_mb, 1), tmp)
    bulk = appended_bulk(10)
    with open(live / "growing.000.jsonl", "ab") as f:
        f.write(bulk[:MB])
    watcher.poll()
    return watcher


def _round_facts(watcher: Any) -> list[Any]:
    """The rows a round that touched every server hands the pipeline (as `Watcher.poll` picks them)."""
    parts = {id(p): p for p in watcher._parts.values()}.values()
    return [replace(piece) for p in sorted(parts, key=lambda p: p.path) for piece in p.pieces]


def _analysis(watcher: Any, keep_moved: bool) -> Any:
    facts = _round_facts(watcher)
    if not keep_moved:
        return watcher.analyze_round(facts)
    from analyzer.rules.context import RuleContext

    release = RuleContext.release_moved
    RuleContext.release_moved = _keep_moved  # type: ignore[method-assign]
    try:
        return watcher.analyze_round(facts)
    finally:
        RuleContext.release_moved = release  # type: ignore[method-assign]


def _keep_moved(self: Any) -> Any:
    """`RuleContext.release_moved` without the release: the context keeps the moved requests, so that
    its frames can be computed again on their own."""
    _ = self.responses, self.conn_clients, self.requests, self.probe_rows
    return self.traffic


def _rows(context: Any) -> dict[str, int]:
    """What a round's steps read, counted: what their growth from one backlog to the other follows."""
    import polars as pl

    traffic = context.traffic
    return {
        "message rows": context.messages.select(pl.len()).collect().item(),
        "moved requests": 0 if traffic.requests is None else traffic.requests.height,
        "dropped answers": traffic.answers.height,
        "request view": context.requests.height,
        "probes": context.probe_rows.height,
        "initialize requests": context.inits.select(pl.len()).collect().item(),
        "connections": context.conn_clients.height,
    }


def _steps(watchers: dict[int, Any], rows: dict[int, dict[str, int]]) -> dict[str, dict[int, Callable[[], Any]]]:
    from analyzer import rules
    from analyzer.rules.context import RuleContext

    contexts = {size: _analysis(w, keep_moved=True).rule_context for size, w in watchers.items()}
    rows.update({size: _rows(c) for size, c in contexts.items()})
    steps: dict[str, dict[int, Callable[[], Any]]] = {
        "round's pipeline (all)": {size: (lambda w=w: _analysis(w, keep_moved=False)) for size, w in watchers.items()}
    }
    for name in ("requests", "probe_rows", "responses"):
        compute = RuleContext.__dict__[name].func
        steps[f"context.{name}"] = {size: (lambda c=c, f=compute: f(c)) for size, c in contexts.items()}
    for rule_id, rule in rules.REGISTRY.items():
        steps[f"rule {rule_id}"] = {size: (lambda c=c, r=rule: r.find(c)) for size, c in contexts.items()}
    return steps


def run(quick: bool = False) -> dict[str, Any]:
    small, large = (5, 25) if quick else (10, 100)
    with tempfile.TemporaryDirectory(prefix="erascope-watch-steps-") as tmp:
        watchers = {size: _watcher_after_one_mb(size, os.path.join(tmp, str(size))) for size in (small, large)}
        rows: dict[int, dict[str, int]] = {}
        steps = _steps(watchers, rows)
        least = {name: dict.fromkeys(watchers, float("inf")) for name in steps}
        for _ in range(REPEATS):
            for name, by_size in steps.items():
                for size, fn in by_size.items():  # the backlogs alternate, so the load weighs on both alike
                    started = time.process_time()
                    fn()
                    least[name][size] = min(least[name][size], time.process_time() - started)
    ms = {name: {str(size): round(t * 1000, 2) for size, t in by_size.items()} for name, by_size in least.items()}
    whole = least["round's pipeline (all)"]
    ratio = whole[large] / max(whole[small], 1e-9)
    return {
        "backlog_mb": [small, large],
        "least_cpu_ms": ms,
        "pipeline_ratio_large_vs_small": round(ratio, 2),
        "rows": {str(size): counts for size, counts in rows.items()},
        "load_average": os.getloadavg(),
        "targets": {"pipeline flat (ratio <= 1.15)": ratio <= 1.15},
    }


def describe(result: dict[str, Any]) -> list[str]:
    small, large = (str(s) for s in result["backlog_mb"])
    ms = result["least_cpu_ms"]
    rows = result["rows"]
    counts = ", ".join(f"{name} {rows[small][name]:,} → {rows[large][name]:,}" for name in rows[large])
    return [*growth_lines(
        f"erascope watch, least CPU ms per step on one round's rows: backlog {small} MB, {large} MB (growth)",
        {n: ms[n][small] for n in ms}, {n: ms[n][large] for n in ms}, 2,
        f"the round's pipeline, large backlog vs small: {result['pipeline_ratio_large_vs_small']}x",
        result["load_average"],
    ), f"  rows a round reads, {small} MB → {large} MB: {counts}"]  # fmt: skip


if __name__ == "__main__":
    module_main(__doc__.split("\n\n")[0], run, describe)
