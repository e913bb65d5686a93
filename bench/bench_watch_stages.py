"""Where a round of `erascope watch` spends its CPU, per pipeline stage, as the backlog grows.

    python -m bench.bench_watch_stages [--quick] [--json]

The load of `bench.bench_watch` (a backlog of `bench.generate` captures, seed 1, 10 MB and 100 MB;
`--quick`: 5 and 25 MB; then the bulk file of the seed-2 generation appended 1 MB a round, 4 rounds),
with each stage of a round timed (`time.process_time`, every thread): reading the new lines, each
step of `analyzer.pipeline.analyze_facts` (pairing, probe and initialize classification, client
identities, verdicts, the rules' shared frames, each rule) and the watcher's own bookkeeping. The
figure is CPU seconds per new MB for each stage at both backlogs; a stage whose cost grows with the
backlog is one that still reads the touched servers' whole history.

The stages are timed by wrapping the functions a round calls (this process only): the wrappers
cost a few microseconds a call, nothing next to the stages. The client identities, which a round
carries (`analyzer.watch_state`), are also computed from the whole history beside them in each
round, as before they were carried, and both are shown (`(paired)`): on a shared machine the load
moves single stages by more than the difference between two runs, not between two calls in one round.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from bench._standalone import module_main
from bench.bench_watch import MB, _generated, appended_bulk, watcher_at_end

ROUNDS = 4


class _Stages:
    """CPU seconds per stage name, counted only while `on`."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.on = False

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return fn(*args, **kwargs)
            started = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.cpu[name] += time.process_time() - started

        return timed


def _instrument(stages: _Stages) -> None:
    import analyzer.pipeline as pipeline
    import analyzer.rules as rules
    import analyzer.watch as watch
    import analyzer.watch_state as watch_state
    from analyzer.rules.context import RuleContext

    for name in ("combine", "classify_probes", "classify_inits", "server_verdicts", "run_rules"):
        setattr(pipeline, name, stages.wrap(name, getattr(pipeline, name)))
    for prop in ("responses", "conn_clients", "requests", "probe_rows"):
        cached = RuleContext.__dict__[prop]
        cached.func = stages.wrap(f"context.{prop}", cached.func)
    for rule_id, rule in rules.REGISTRY.items():
        object.__setattr__(rule, "find", stages.wrap(f"rule {rule_id}", rule.find))
    watch.Watcher._read_round = stages.wrap("reading the new lines", watch.Watcher._read_round)
    watch.Watcher.poll = stages.wrap("round (all)", watch.Watcher.poll)
    watch_state.CarriedIdentities.__call__ = _paired(stages, watch_state.CarriedIdentities.__call__)


def _paired(stages: _Stages, carried: Callable[..., Any]) -> Callable[..., Any]:
    """The carried identities, and beside them (on the same rows, in the same round, so that the load of
    the machine weighs on both alike) `connection_identities` on the whole history, which a round does
    not run: its time is counted apart and taken out of the round's and `conn_clients`'."""
    from analyzer.identity import connection_identities

    def both(self: Any, messages: Any, traffic: Any, moved: Any) -> Any:
        started = time.process_time()
        result = carried(self, messages, traffic, moved)
        between = time.process_time()
        connection_identities(messages, traffic, moved)
        whole = time.process_time() - between
        if stages.on:
            stages.cpu["identities carried (paired)"] += between - started
            stages.cpu["identities from the whole history (paired)"] += whole
            for name in ("round (all)", "context.conn_clients"):
                stages.cpu[name] -= whole
        return result

    return both


def per_stage(backlog_mb: int, stages: _Stages) -> dict[str, float]:
    backlog = _generated(backlog_mb, 1)
    bulk = appended_bulk(10)
    stages.cpu.clear()
    with tempfile.TemporaryDirectory(prefix="erascope-watch-bench-") as tmp:
        watcher, live = watcher_at_end(backlog, tmp)
        read_before = watcher.bytes_read
        stages.on = True
        try:
            for n in range(ROUNDS):
                with open(live / "growing.000.jsonl", "ab") as f:
                    f.write(bulk[n * MB : (n + 1) * MB])
                watcher.poll()
        finally:
            stages.on = False
        new_mb = (watcher.bytes_read - read_before) / MB
    return {name: round(cpu / new_mb, 4) for name, cpu in stages.cpu.items()}


def run(quick: bool = False) -> dict[str, Any]:
    stages = _Stages()
    _instrument(stages)
    small, large = (5, 25) if quick else (10, 100)
    result = {"small": per_stage(small, stages), "large": per_stage(large, stages)}
    ratio = result["large"]["round (all)"] / max(result["small"]["round (all)"], 1e-9)
    return {
        "backlog_mb": [small, large],
        **result,
        "round_ratio_large_vs_small": round(ratio, 2),
        "load_average": os.getloadavg(),
        "targets": {"round flat (ratio <= 1.15)": ratio <= 1.15},
    }


def growth_lines(
    title: str, small: dict[str, float], large: dict[str, float], digits: int, ratio: str, load: list[float]
) -> list[str]:
    """`title`, a line per name with its figure at the small and the large backlog and the growth (the
    most grown first), then the `ratio` line and the load average."""
    names = sorted(large, key=lambda n: -(large[n] - small.get(n, 0.0)))
    lines = [title]
    for name in names:
        a, b = small.get(name, 0.0), large[name]
        lines.append(f"  {name:44} {a:8.{digits}f} {b:8.{digits}f} ({b - a:+.{digits}f})")
    return [*lines, f"  {ratio}", "  load average: " + " ".join(f"{x:.1f}" for x in load)]


def describe(result: dict[str, Any]) -> list[str]:
    small, large = result["backlog_mb"]
    return growth_lines(
        f"erascope watch, CPU s per new MB by stage: backlog {small} MB, {large} MB (growth)",
        result["small"], result["large"], 3,
        f"a round's CPU per new MB, large backlog vs small: {result['round_ratio_large_vs_small']}x",
        result["load_average"],
    )  # fmt: skip


if __name__ == "__main__":
    module_main(__doc__.split("\n\n")[0], run, describe)
