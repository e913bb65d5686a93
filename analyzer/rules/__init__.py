"""The rulebook: one explicit registry of client-behaviour rules.

`run_rules(analysis, options)` is the pipeline's entry point. Each rule has a stable id (part of the
report contract), one severity, a docstring with fixed sections, and thresholds in `RuleOptions`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import polars as pl

from analyzer.condense import Rows
from analyzer.findings import Finding
from analyzer.rules.base import Rule
from analyzer.rules.context import RuleContext
from analyzer.rules.hygiene import (
    invalid_discover_result,
    malformed_probe,
    rc_error_code,
    stdout_pollution,
    unnamed_versions,
)
from analyzer.rules.misreads import misread_crash, misread_modern, probe_kills_server
from analyzer.rules.options import RuleOptions
from analyzer.rules.retries import retry_loop, retry_same_id, retry_unsupported_version
from analyzer.rules.storms import probe_storm, probe_timeout
from analyzer.rules.timeline import rollout_split, stale_era
from analyzer.rules.upstream import blame_upstream, upstream_unreachable

__all__ = ["REGISTRY", "Rule", "RuleContext", "RuleOptions", "run_rules", "sort_findings", "stages_together"]

REGISTRY: Final[dict[str, Rule]] = {
    r.id: r
    for r in (
        probe_storm,
        misread_crash,
        probe_kills_server,
        misread_modern,
        retry_same_id,
        retry_unsupported_version,
        retry_loop,
        stale_era,
        rollout_split,
        unnamed_versions,
        stdout_pollution,
        malformed_probe,
        rc_error_code,
        invalid_discover_result,
        probe_timeout,
        upstream_unreachable,
    )
}
"""Every rule by id, in documentation order. Adding a rule means adding it here."""


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then by time (findings without a time last), then rule, server and client."""
    return sorted(
        findings,
        key=lambda f: (
            -f.severity.rank,
            f.ts is None,
            f.ts or 0.0,
            f.rule,
            f.server or "",
            f.client or "",
        ),
    )


def stages_together(rows: Rows | None) -> bool:
    """Whether the analysis runs its stages after reading two at a time: when polars has more than
    one thread and `rows` (the moved requests, or the rules' request view) are held in memory.

    Each stage is a chain of polars queries, mostly too small to keep more than one core busy, and
    polars runs them without the GIL: two stages that read the same frames and not each other's
    results take less time side by side (an archive of 1 GiB of captures: 0.75 s → 0.6 s in process).
    Rows read from the analysis' temporary files (`analyzer.spill`: every JSONL analysis, big
    archives) are read a stage at a time, as before: side by side, two stages' reads add up (2 GiB
    of JSONL: peak heap 284 → 304 MB)."""
    return isinstance(rows, pl.DataFrame) and pl.thread_pool_size() > 1


def run_rules(
    analysis: Any,
    options: RuleOptions | dict[str, Any] | None = None,
    *,
    only: list[str] | None = None,
) -> list[Finding]:
    """All findings for an analysis (any object with `messages`, `probes` and `inits` frames).

    `options` is a `RuleOptions` or a mapping of its fields; `only` restricts to some rule ids.
    Findings come sorted by severity, then time.
    """
    from addon.errors import ErascopeError

    opts = options if isinstance(options, RuleOptions) else RuleOptions.from_mapping(options)
    if only is not None:
        unknown = sorted(set(only) - set(REGISTRY))
        if unknown:
            raise ErascopeError(f"unknown rule id(s): {', '.join(unknown)}")
    ctx = RuleContext.from_analysis(analysis, opts)
    rules = [rule for rule_id, rule in REGISTRY.items() if only is None or rule_id in only]
    _ = ctx.upstream_failures  # read by a rule and by `blame_upstream`: built once, before they run
    # Rules only read the context, and polars runs their queries without the GIL: two at a time keep
    # both cores busy where one rule's queries mostly do not (`stages_together`). Their findings are
    # taken in registry order, as one after the other gives them.
    with ThreadPoolExecutor(max_workers=2 if stages_together(ctx.requests) else 1) as pool:
        findings = [finding for found in pool.map(lambda rule: rule.run(ctx), rules) for finding in found]
    return sort_findings(blame_upstream(findings, ctx))
