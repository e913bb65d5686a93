"""The rulebook: one explicit registry of client-behaviour rules.

`run_rules(analysis, options)` is the pipeline's entry point. Each rule has a stable id (part of the
report contract), one severity, a docstring with fixed sections, and thresholds in `RuleOptions`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import polars as pl

from analyzer.findings import Finding
from analyzer.rules.base import Rule
from analyzer.rules.context import RuleContext
from analyzer.rules.hygiene import malformed_probe, rc_error_code, stdout_pollution, unnamed_versions
from analyzer.rules.misreads import misread_crash, misread_modern, probe_kills_server
from analyzer.rules.options import RuleOptions
from analyzer.rules.retries import retry_loop, retry_same_id, retry_unsupported_version
from analyzer.rules.storms import probe_storm, probe_timeout
from analyzer.rules.timeline import rollout_split, stale_era
from analyzer.rules.upstream import blame_upstream, upstream_unreachable

__all__ = ["REGISTRY", "Rule", "RuleContext", "RuleOptions", "run_rules", "sort_findings"]

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
    # Rules only read the context, and polars runs their queries without the GIL: as many at a time
    # as polars has threads keep the cores busy (a rule's queries are mostly too small to use them
    # all). Their findings are taken in registry order, as one after the other gives them.
    with ThreadPoolExecutor(max_workers=pl.thread_pool_size()) as pool:
        findings = [finding for found in pool.map(lambda rule: rule.run(ctx), rules) for finding in found]
    return sort_findings(blame_upstream(findings, ctx))
