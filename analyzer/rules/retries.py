"""Rules about the retry after `unsupported-version`: retry-same-id, retry-unsupported-version, retry-loop."""

from __future__ import annotations

from typing import Any

import polars as pl

from analyzer.findings import Severity
from analyzer.rules.base import rule
from analyzer.rules.context import RuleContext
from analyzer.rules.frames import answer_evidence, evidence, run_ids

_KEYS = ["server", "client"]


def _refused() -> pl.Expr:
    return pl.col("outcome") == "unsupported-version"


def _retry_evidence() -> pl.Expr:
    return pl.concat_list(
        evidence(note="probe"),
        answer_evidence("unsupported-version"),
        evidence("next_file", "next_line", "retry"),
    ).list.explode(keep_nulls=False, empty_as_null=False)


def _same_id_message(d: dict[str, Any]) -> str:
    return f"{d['count']} retry(ies) after unsupported-version reused the refused request's id ({', '.join(d['ids'])})"


@rule("retry-same-id", Severity.WARNING, _same_id_message)
def retry_same_id(ctx: RuleContext) -> pl.DataFrame:
    """The retry after `unsupported-version` reused the refused request's id.

    What it flags:
        A modern request (probe or enveloped request) sent right after an `unsupported-version`
        answer, carrying the same JSON-RPC id as the refused request (over stdio, on the same
        connection: a fresh spawn's ids are its own).

    Why it matters:
        Responses are matched by id; a reused id makes a late or duplicated answer to the first
        request indistinguishable from the answer to the retry, and some servers reject it.

    Example:
        `{"id":1,"method":"server/discover"}` → -32022 → `{"id":1,"method":"server/discover"}`.
    """
    # Ids are per connection: a stdio retry on another process (a fresh spawn) cannot be confused with
    # the refused request's answer, whatever its id.
    same_namespace = pl.col("next_same_conn") | (pl.col("transport") != "stdio")
    rows = ctx.probe_rows.filter(
        _refused() & pl.col("next_is_modern") & (pl.col("next_id") == pl.col("id")) & same_namespace.fill_null(False)
    )
    return (
        rows.group_by(_KEYS)
        .agg(
            pl.len().alias("count"),
            pl.col("ts").min(),
            pl.col("id").unique().sort().alias("ids"),
            _retry_evidence().alias("evidence"),
        )
        .sort(_KEYS)
    )


def _bad_version_message(d: dict[str, Any]) -> str:
    return (
        f"{d['count']} retry(ies) after unsupported-version named {', '.join(d['retried'])}, "
        f"not in the server's supported list {d['supported']}"
    )


@rule("retry-unsupported-version", Severity.ERROR, _bad_version_message)
def retry_unsupported_version(ctx: RuleContext) -> pl.DataFrame:
    """The retry named a version the server did not offer.

    What it flags:
        A modern request sent right after an `unsupported-version` answer whose protocol version is
        not in that answer's `data.supported` list (answers without a list are left to
        `unnamed-versions`).

    Why it matters:
        The retry is bound to fail the same way; the client ignored the one piece of information the
        error exists to carry.

    Example:
        probe at 2099-01-01 → -32022 `supported: ["2026-07-28"]` → re-probe at 2099-01-01.
    """
    offered = pl.col("probe_versions").fill_null(pl.lit([], dtype=pl.List(pl.String())))
    rows = ctx.probe_rows.filter(
        _refused()
        & pl.col("next_is_modern")
        & pl.col("next_meta_version").is_not_null()
        & (offered.list.len() > 0)
        & ~offered.list.contains(pl.col("next_meta_version"))
    )
    return (
        rows.group_by(_KEYS)
        .agg(
            pl.len().alias("count"),
            pl.col("ts").min(),
            pl.col("next_meta_version").unique().sort().alias("retried"),
            offered.first().alias("supported"),
            _retry_evidence().alias("evidence"),
        )
        .sort(_KEYS)
    )


def _loop_message(d: dict[str, Any]) -> str:
    text = f"{d['retries']} retries in a row after unsupported-version (allowed: {d['max_retries']})"
    if d["refused_listed_as_supported"]:
        text += "; the server's supported list contains the very version it refused"
    return text


@rule("retry-loop", Severity.ERROR, _loop_message)
def retry_loop(ctx: RuleContext) -> pl.DataFrame:
    """More than one retry in a row after `unsupported-version`.

    What it flags:
        A run of probes to one server where each was refused with `unsupported-version` and followed
        by yet another probe, longer than `max_retries`. Notes when the server's `supported` list
        contains the very version it refused (an obedient client then loops for ever).

    Why it matters:
        One re-probe with a mutual version settles the era; more means client and server disagree
        about the list, and every round costs a round trip or hangs the start.

    Example:
        probe 2026-07-28 → -32022 `supported: ["2026-07-28"]` → probe 2026-07-28 → -32022 → probe …
    """
    opts = ctx.options
    # A run is a stretch of retried probes with no other request of the client in between: adjacent
    # positions (`_i`) in the client's request sequence.
    retried = ctx.probe_rows.filter((_refused() & pl.col("next_is_probe")).fill_null(False)).sort("_i")
    runs = (
        retried.with_columns(run_ids("_i", _KEYS).alias("run"))
        .group_by([*_KEYS, "run"])
        .agg(
            pl.len().alias("retries"),
            pl.col("ts").min(),
            pl.col("probe_versions")
            .fill_null(pl.lit([], dtype=pl.List(pl.String())))
            .list.contains(pl.col("requested_version"))
            .fill_null(False)
            .any()
            .alias("refused_listed_as_supported"),
            _retry_evidence().alias("evidence"),
            pl.col("_i").min().alias("_first"),
        )
        .filter(pl.col("retries") > opts.max_retries)
    )
    return (
        # the longest loop's evidence, the first of the longest: groups come in no set order
        runs.sort("retries", "_first", descending=[True, False])
        .group_by(_KEYS, maintain_order=True)
        .agg(
            pl.col("retries").first(),
            pl.col("ts").min(),
            pl.col("refused_listed_as_supported").any(),
            pl.len().alias("loops"),
            pl.col("evidence").first(),
        )
        .with_columns(pl.lit(opts.max_retries).alias("max_retries"))
        .sort(_KEYS)
    )
