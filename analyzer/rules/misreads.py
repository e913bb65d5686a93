"""Rules about conclusions clients draw from probe answers: misread-crash, probe-kills-server, misread-modern."""

from __future__ import annotations

from typing import Any

import polars as pl

from analyzer.findings import Severity
from analyzer.probes import file_of_answer
from analyzer.rules.base import rule
from analyzer.rules.context import RuleContext, era_of_probe, modern_list
from analyzer.rules.frames import answer_evidence, evidence

_KEYS = ["server", "client"]
_CRASH = ("connection-died", "garbage")


def _crash_fallbacks(ctx: RuleContext) -> pl.DataFrame:
    """Crashed or garbled probes the client followed with `initialize`, classified as a misread or as
    the documented recovery (a served `initialize` on a fresh process of a server with no modern answer).

    A probe whose "crash" was the recorder failing to reach the server (`upstream-unreachable`) is
    left out: the server never saw it, so what the client concluded says nothing about either.
    """
    modern_servers = ctx.probe_rows.filter(era_of_probe() == "modern").select("server").unique()
    proxy_failed = ctx.upstream_failures.select(answer_file="file", answer_line="line")
    rows = (
        ctx.probe_rows.filter(pl.col("outcome").is_in(_CRASH) & pl.col("next_is_init"))
        .with_columns(file_of_answer().cast(pl.String).alias("answer_file"))
        .join(proxy_failed, on=["answer_file", "answer_line"], how="anti")
        .join(modern_servers.with_columns(pl.lit(True).alias("server_answered_modern")), on="server", how="left")
        .with_columns(pl.col("server_answered_modern").fill_null(False))
    )
    answered_modern = pl.col("server_answered_modern")
    # Over HTTP, the next request on the same client connection (keep-alive) is not on a dead
    # connection: the upstream's stream died, the client's connection did not.
    same_conn = pl.col("next_same_conn") & (pl.col("transport") == "stdio")
    # A server that wrote a line that is no JSON, answered nothing and then served `initialize` on
    # that very connection is alive and legacy: the client waited out its probe and fell back, as it
    # should (stdout-pollution reports the line), unless the server answers other probes as modern.
    alive = (
        same_conn
        & (pl.col("outcome") == "garbage")
        & (pl.col("next_init_outcome") == "served")
        & ~answered_modern
    )
    rows = rows.filter(~alive)
    dead_conn = same_conn & (pl.col("outcome") == "connection-died")
    recovery = (
        ~dead_conn
        & (pl.col("next_init_outcome") == "served")
        & ~answered_modern
    )
    reason = (
        pl.when(dead_conn)
        .then(pl.lit("initialize sent on the dead connection"))
        .when(same_conn & ~answered_modern)
        .then(pl.format("initialize sent on the connection that wrote garbage was {}", pl.col("next_init_outcome")))
        .when(answered_modern)
        .then(pl.lit("settled on legacy although the server answers probes as modern"))
        .otherwise(pl.format("settled on legacy; the fresh initialize was {}", pl.col("next_init_outcome")))
    )
    return rows.with_columns(recovery.alias("recovery"), reason.alias("reason"))


def _group(rows: pl.DataFrame) -> pl.DataFrame:
    return (
        rows.group_by(_KEYS)
        .agg(
            pl.len().alias("count"),
            pl.col("ts").min(),
            pl.col("outcome").unique().sort().alias("outcomes"),
            pl.col("reason").unique().sort().alias("reasons"),
            pl.concat_list(
                evidence(note=pl.format("probe ({})", pl.col("outcome"))),
                answer_evidence(pl.format("{}", pl.col("outcome"))),
                evidence("next_file", "next_line", "initialize"),
            )
            .list.explode(keep_nulls=False, empty_as_null=False)
            .alias("evidence"),
        )
        .sort(_KEYS)
    )


def _crash_message(d: dict[str, Any]) -> str:
    return (
        f"{d['count']} probe(s) ended in {'/'.join(d['outcomes'])} and the client concluded 'legacy': "
        + "; ".join(d["reasons"])
    )


@rule("misread-crash", Severity.ERROR, _crash_message)
def misread_crash(ctx: RuleContext) -> pl.DataFrame:
    """A crashed or garbled probe read as "this server is legacy".

    What it flags:
        Probe outcome `connection-died` or `garbage`, after which the client sent `initialize`: on the
        dead connection itself (the stdio recorder keeps client bytes during a linger window after
        the server exits), or on a later connection when that `initialize` failed too or the server
        answers other probes as modern.

        Not when the "crash" was the HTTP recorder failing to reach the server (`upstream-unreachable`
        reports that): the server never saw the probe. Not when a stdio server wrote garbage, answered
        nothing and then served that `initialize` on the same connection: it is alive and legacy, and
        the client fell back after its probe timeout as it should (`stdout-pollution` reports the line).

    Why it matters:
        A crash says nothing about the era. Clients that cache "legacy" after one crash make a modern
        server permanently unusable, or keep talking to a process that is gone.

    Example:
        `server/discover` → server exits (EOF) → client writes `initialize` to the dead stdin during
        the linger window → `misread-crash`.
    """
    return _group(_crash_fallbacks(ctx).filter(~pl.col("recovery")))


def _kills_message(d: dict[str, Any]) -> str:
    return (
        f"the probe ended in {'/'.join(d['outcomes'])} {d['count']} time(s); the client recovered with a "
        "successful initialize on a fresh process"
    )


@rule("probe-kills-server", Severity.INFO, _kills_message)
def probe_kills_server(ctx: RuleContext) -> pl.DataFrame:
    """A server that exits on the probe, recovered from correctly.

    What it flags:
        Probe outcome `connection-died` or `garbage`, followed by a successful `initialize` on a fresh
        process (the client's next connection to the same server), for a server that never answered
        a probe as modern. Not when the probe's "crash" was the HTTP recorder failing to reach the
        server (`upstream-unreachable`).

    Why it matters:
        This is the documented recovery for servers that exit when the first request is not
        `initialize`; it works but costs a spawn per start. Worth knowing, not an error.

    Example:
        spawn 1: `server/discover` → exit 1; spawn 2: `initialize` → result → `probe-kills-server`.
    """
    return _group(_crash_fallbacks(ctx).filter(pl.col("recovery"))).drop("reasons")


def _modern_message(d: dict[str, Any]) -> str:
    return f"fell back to initialize {d['count']} time(s) after a modern answer: " + ", ".join(d["answers"])


@rule("misread-modern", Severity.ERROR, _modern_message)
def misread_modern(ctx: RuleContext) -> pl.DataFrame:
    """A modern answer read as "this server is legacy".

    What it flags:
        The client sent `initialize` right after a probe answered with a DiscoverResult naming a
        modern version, an `unsupported-version` error naming another modern version to retry with,
        or a modern error (-32020 header mismatch, -32021 missing client capability) — over HTTP
        also when that error came as a 400 body.

    Why it matters:
        The server speaks the modern protocol; falling back to the legacy handshake loses the modern
        features and, against a modern-only server, fails. `mcp` 2.3.0's client falls back on -32020,
        which this rule reports.

    Example:
        `server/discover` → error -32020 (HTTP 400) → `initialize` → `misread-modern`.
    """
    mutual_refusal = modern_list("probe_versions").list.set_difference(
        pl.concat_list(pl.col("requested_version").fill_null(""))
    )
    modern_answer = (
        ((pl.col("outcome") == "discover-result") & pl.col("modern_versions").fill_null(False))
        | ((pl.col("outcome") == "unsupported-version") & (mutual_refusal.list.len() > 0))
        | (pl.col("outcome") == "modern-error")
    )
    label = (
        pl.when(pl.col("probe_error_code").is_not_null())
        .then(pl.format("{} {}", pl.col("outcome"), pl.col("probe_error_code")))
        .otherwise(pl.col("outcome"))
    )
    rows = ctx.probe_rows.filter(modern_answer & pl.col("next_is_init")).with_columns(label.alias("answer"))
    return (
        rows.group_by(_KEYS)
        .agg(
            pl.len().alias("count"),
            pl.col("ts").min(),
            pl.col("answer").unique().sort().alias("answers"),
            pl.concat_list(
                evidence(note="probe"),
                answer_evidence(pl.format("modern answer: {}", pl.col("answer"))),
                evidence("next_file", "next_line", "initialize after it"),
            )
            .list.explode(keep_nulls=False, empty_as_null=False)
            .alias("evidence"),
        )
        .sort(_KEYS)
    )
