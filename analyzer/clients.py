"""The client table: per server and client, how it probed, what it concluded, what the rules found.

A client is its identity (`analyzer.identity`): clientInfo name and version, over HTTP the
User-Agent and the client's host, over stdio the host process that started the recorder. Two
connections are one client only when all of these match.
"""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from analyzer.findings import Finding
from analyzer.identity import IDENTITY_DTYPE
from analyzer.rules.context import RuleContext
from analyzer.rules.options import RuleOptions

CLIENT_TABLE_SCHEMA: Final[dict[str, pl.DataType]] = {
    "server": pl.String(),
    "client": pl.String(),  # the identity as text
    "identity": IDENTITY_DTYPE,  # its parts: name, version, user_agent, address, host_process
    "connections": pl.UInt32(),
    "requests": pl.UInt32(),  # real requests (not probe, initialize or ping)
    "probes": pl.UInt32(),
    "outcomes": pl.String(),  # probe outcomes with counts, most frequent first
    "inits": pl.UInt32(),
    "acted_as": pl.String(),  # modern | legacy | legacy+modern | none: the era its requests used
    "server_era": pl.String(),  # the server's verdict (analysis.servers)
    "findings": pl.UInt32(),  # findings naming this server and client
    "worst": pl.String(),  # most severe of those findings, or null
}


def client_table(analysis: Any, findings: list[Finding] | None = None) -> pl.DataFrame:
    """One row per (server, client) with `CLIENT_TABLE_SCHEMA` columns, sorted by server and client.

    `findings` defaults to `analysis.findings`; `analysis.servers` (verdicts) is optional.
    """
    ctx = RuleContext.from_analysis(analysis, RuleOptions())
    reqs = ctx.requests
    keys = ["server", "client"]
    # the era each real request or initialize acted in (`request_style`), as two flags per row:
    # strings for a million requests would cost more than the whole aggregate
    acted = pl.col("is_real") | pl.col("is_init")
    legacy = pl.col("is_init") | pl.col("session_id").is_not_null() | pl.col("meta_version").is_null()
    outcomes = (
        ctx.probe_rows.group_by(*keys, "outcome")
        .agg(pl.len().alias("n"))
        .sort("n", "outcome", descending=[True, False])
        .group_by(keys, maintain_order=True)
        .agg(pl.format("{} ×{}", "outcome", "n").str.join(", ").alias("outcomes"))
    )
    base = (
        ctx.conn_clients.group_by(keys)
        .agg(pl.col("identity").first(), pl.col("conn").n_unique().cast(pl.UInt32()).alias("connections"))
        .join(
            reqs.lazy()
            .group_by(keys)
            .agg(
                pl.col("is_real").sum().cast(pl.UInt32()).alias("requests"),
                pl.col("is_probe").sum().cast(pl.UInt32()).alias("probes"),
                pl.col("is_init").sum().cast(pl.UInt32()).alias("inits"),
                (acted & legacy).any().alias("_legacy"),
                (acted & ~legacy).any().alias("_modern"),
            )
            .with_columns(
                pl.col(keys).cast(pl.String),
                # the eras in name order, as `acted_as` lists them
                pl.concat_str(
                    pl.when("_legacy").then(pl.lit("legacy")),
                    pl.when("_modern").then(pl.lit("modern")),
                    separator="+",
                    ignore_nulls=True,
                ).alias("acted_as"),
            )
            .drop("_legacy", "_modern")
            # a row per request in, a row per client out: the streaming engine aggregates it in
            # small batches (the in-memory group-by took about 100 MB more at 2 GB of input)
            .collect(engine="streaming"),
            on=keys,
            how="left",
        )
        .join(outcomes, on=keys, how="left")
        .join(_server_eras(analysis), on="server", how="left")
        .join(_finding_counts(getattr(analysis, "findings", []) if findings is None else findings), on=keys, how="left")
        .with_columns(
            pl.col("requests", "probes", "inits", "findings").fill_null(0),
            pl.when(pl.col("acted_as").fill_null("") == "").then(pl.lit("none")).otherwise("acted_as").alias(
                "acted_as"
            ),
        )
    )
    return base.select(pl.col(name).cast(dtype) for name, dtype in CLIENT_TABLE_SCHEMA.items()).sort(keys)


def _server_eras(analysis: Any) -> pl.DataFrame:
    servers = getattr(analysis, "servers", None) or []
    return pl.DataFrame(
        {"server": [s.server for s in servers], "server_era": [s.era for s in servers]},
        schema={"server": pl.String(), "server_era": pl.String()},
    )


def _finding_counts(findings: list[Finding]) -> pl.DataFrame:
    rows = [(f.server, f.client, f.severity.rank, f.severity.value) for f in findings if f.client is not None]
    schema = {"server": pl.String(), "client": pl.String(), "rank": pl.Int64(), "sev": pl.String()}
    df = pl.DataFrame(rows, schema=schema, orient="row")
    return df.group_by("server", "client").agg(
        pl.len().cast(pl.UInt32()).alias("findings"), pl.col("sev").sort_by("rank").last().alias("worst")
    )
