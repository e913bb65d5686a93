"""Rules about how often clients probe and what probing costs: probe-storm, probe-timeout."""

from __future__ import annotations

from typing import Any

import polars as pl

from analyzer.findings import Severity
from analyzer.rules.base import rule
from analyzer.rules.context import RuleContext, era_of_probe
from analyzer.rules.frames import answer_evidence, evidence, key_buckets, pair_key, picked

_KEYS = ["server", "client"]


def _dt(col: str = "ts") -> pl.Expr:
    return pl.from_epoch((pl.col(col) * 1_000_000).cast(pl.Int64()), time_unit="us")


def probe_costs(ctx: RuleContext) -> pl.DataFrame:
    """Per probe: seconds from the probe to the first real request it delayed.

    That is the first real request on the probe's connection; when the connection carries none (a
    throwaway sibling process), the client's next real request to the server within
    `cost_horizon_s`. Null when no real request followed.
    """
    # keyed like the request view (categoricals): the few probes are converted, not every request
    probes = (
        ctx.probe_rows.select("file", "line", "server", "client", "conn", "ts")
        .with_columns(pl.col("server", "client", "conn").cast(pl.Categorical()))
        .sort("ts")
    )
    real = ctx.requests.lazy().filter(pl.col("is_real"))

    # Only the requests of probed connections and probing clients can answer the look-ups below.
    # The view is in time order within each (server, client), hence within each connection too:
    # what an as-of join needs inside each `by` group, so these rows are not sorted again. They are
    # picked by a filter, which keeps that order (a join need not), a group of keys at a time.
    on_disk = isinstance(ctx.requests, pl.LazyFrame)

    def look_up(left: pl.DataFrame, first: str, second: str, **tolerance: float) -> pl.DataFrame:
        left = left.with_columns(pair_key(first, second))
        rows = real.select(pair_key(first, second), real_ts="ts")
        parts = [
            # a filter keeps the probes in time order, as the as-of join needs its left side
            left.filter(pl.col("_key").is_in(keys.implode())).join_asof(
                picked(rows, pl.col("_key").is_in(keys.implode())),
                left_on="ts",
                right_on="real_ts",
                by="_key",
                strategy="forward",
                check_sortedness=False,
                **tolerance,
            )
            for keys in key_buckets(rows, left.get_column("_key"), on_disk=on_disk)
        ]
        # a probe without a key (no server key) has no request to look in
        unkeyed = left.filter(pl.col("_key").is_null()).with_columns(real_ts=pl.lit(None, pl.Float64()))
        return pl.concat([*parts, unkeyed]).drop("_key").sort("ts", maintain_order=True)

    same_conn = look_up(probes, "server", "conn").rename({"real_ts": "conn_real_ts"})
    return (
        look_up(same_conn, "server", "client", tolerance=ctx.options.cost_horizon_s)
        .with_columns((pl.coalesce("conn_real_ts", "real_ts") - pl.col("ts")).alias("cost_s"))
        .select("file", "line", "cost_s")
    )


def _n(value: float | None) -> str:
    """A number of a message; `?` when the captures cannot tell it (probes whose records carry no time)."""
    return "?" if value is None else f"{value:g}"


def _storm_message(d: dict[str, Any]) -> str:
    ratio = d["probes_per_request"]
    per_req = "no real request at all" if ratio is None else f"{ratio:g} probes per real request"
    text = (
        f"{d['probes']} probes in {_n(d['span_s'])} s ({_n(d['rate_per_min'])}/min, up to {_n(d['max_in_window'])} "
        f"within {d['window_s']:g} s) over {d['connections']} connections; {per_req}; "
        f"{d['answer_runs']} distinct answer run(s); probing cost {_n(d['cost_s_total'])} s before real requests"
    )
    if d["ttl_zero"]:
        text += "; the server's DiscoverResult says ttlMs: 0, which tells clients to re-probe every time"
    return text


@rule("probe-storm", Severity.WARNING, _storm_message)
def probe_storm(ctx: RuleContext) -> pl.DataFrame:
    """A server probed far more often than its answer changes.

    What it flags:
        A client that sends `server/discover` to one server many times while the answer stays the
        same: at least `storm_min_probes` probes and `storm_probes_per_verdict` probes per distinct
        answer run, and either `storm_window_probes` probes inside `storm_window_s`, or at least
        `storm_probes_per_request` probes per real request (a probe on most connections or calls).
        A probe sent once the previous answer's `ttlMs` (above 0) has run out counts toward none of
        these: re-probing an expired verdict is what a caching client should do.
        Reports the count, the rate, probes per real request, and the time the probes cost (probe
        start to the first real request it delayed). Points at `ttlMs: 0` in the server's
        DiscoverResult when that is present.

    Why it matters:
        Each probe (plus fallback) adds 0.4–1.2 s and a process spawn or a round trip. Spawn-per-call
        clients, probes on throwaway sibling processes and clients without a verdict cache multiply
        that by every tool call.

    Example:
        A new `mcp` 2.3.0 `Client(mode="auto")` per tool call: 20 calls, 20 spawns, 20 probes, each
        answered with the same DiscoverResult (`ttlMs: 0`) → one `probe-storm` finding with
        `probes_per_request = 1`.
    """
    opts = ctx.options
    # only the columns read here are sorted: every spawn of a capture directory sends a probe
    read = (
        "server", "client", "ts", "outcome", "modern_versions", "file", "line", "answer_file", "answer_line",
        "ttl_ms", "conn", "probe_versions", "answer_ts", "probe_error_code", "probe_http_status",
    )  # fmt: skip
    # in capture order: probes tied on time (a coarse clock) taken in the order their rows came would
    # count answer runs, and pick the ttlMs: 0 answer, differently in a cluster's shard than locally
    probes = (
        ctx.probe_rows.select(read)
        .sort("server", "client", "ts", "file", "line", maintain_order=True)
        .with_columns(pl.coalesce(era_of_probe(), pl.col("outcome")).alias("answer"))
        # A probe sent once the verdict the previous one got has expired (its DiscoverResult's ttlMs,
        # above 0, has run out) is what the spec asks of a caching client: it counts toward no storm.
        .with_columns(
            _ttl=pl.col("ttl_ms").shift(1).over(_KEYS),
            _given=pl.coalesce("answer_ts", "ts").shift(1).over(_KEYS),
        )
        .with_columns(
            _due=((pl.col("_ttl") > 0) & (pl.col("ts") >= pl.col("_given") + pl.col("_ttl") / 1000)).fill_null(False)
        )
        .drop("_ttl", "_given")
    )
    if probes.is_empty():
        return probes.select("server", "client", "ts").clear()
    costs = probe_costs(ctx)
    windows = (
        probes.select(*_KEYS, _dt().alias("dt"))
        .drop_nulls("dt")  # a probe without a time is in no window (it still counts per request)
        .sort("dt")
        .rolling(index_column="dt", period=f"{int(opts.storm_window_s * 1_000_000)}us", group_by=_KEYS)
        .agg(pl.len().alias("in_window"))
        .group_by(_KEYS)
        .agg(pl.col("in_window").max().alias("max_in_window"))
    )
    reqs = (
        ctx.requests.lazy()
        .group_by(_KEYS)
        .agg(pl.col("is_real").sum().alias("real_requests"), pl.col("conn").n_unique().alias("connections"))
        .with_columns(pl.col(_KEYS).cast(pl.String))
        # a row per request in, a row per client out: in small batches (see `client_table`)
        .collect(engine="streaming")
    )
    per_client = (
        probes.join(costs, on=["file", "line"], how="left", maintain_order="left")
        .group_by(_KEYS)
        .agg(
            pl.len().alias("probes"),
            (~pl.col("_due")).sum().alias("_undue"),
            pl.col("ts").min().alias("ts"),
            (pl.col("ts").max() - pl.col("ts").min()).alias("span_s"),
            (pl.col("answer").rle_id().max() + 1).alias("answer_runs"),
            pl.col("cost_s").sum().alias("cost_s_total"),
            pl.col("cost_s").mean().alias("cost_s_mean"),
            (pl.col("ttl_ms") == 0).any().alias("ttl_zero"),
            pl.col("conn").n_unique().alias("probed_connections"),
            evidence(note=pl.format("probe ({})", pl.col("outcome"))).alias("evidence"),
            answer_evidence("DiscoverResult with ttlMs: 0")
            .filter(pl.col("ttl_ms") == 0)
            .head(1)
            .alias("_ttl_ev"),
        )
        .join(windows, on=_KEYS, how="left")
        .join(reqs, on=_KEYS, how="left")
        .with_columns(
            pl.when(pl.col("real_requests") > 0)
            .then(pl.col("probes") / pl.col("real_requests"))
            .otherwise(None)
            .alias("probes_per_request"),
            # a floor of one second keeps a burst from reading as an absurd rate; no rate without a
            # span (probes whose records carry no time)
            pl.when(pl.col("span_s").is_not_null())
            .then(pl.col("probes") * 60 / pl.max_horizontal(pl.col("span_s"), pl.lit(1.0)))
            .alias("rate_per_min"),
            pl.lit(opts.storm_window_s).alias("window_s"),
        )
    )
    undue = pl.col("_undue")  # the probes sent while the client's last verdict was fresh, or had no ttlMs
    storm = (
        (undue >= opts.storm_min_probes)
        & (undue / pl.col("answer_runs") >= opts.storm_probes_per_verdict)
        & (
            (pl.col("max_in_window") >= opts.storm_window_probes)
            | pl.col("probes_per_request").is_null()
            | (undue / pl.col("real_requests") >= opts.storm_probes_per_request)
        )
    )
    return (
        per_client.filter(storm)
        .with_columns(
            # the first DiscoverResult with ttlMs: 0 answers one of the first probes, so it survives the cap
            pl.concat_list("_ttl_ev", "evidence").alias("evidence"),
            pl.col("cost_s_total").fill_null(0.0),
        )
        .drop("_ttl_ev", "_undue")
        .sort(_KEYS)
    )


def _timeout_message(d: dict[str, Any]) -> str:
    return (
        f"{d['probes']} probe(s) got no answer; they cost {_n(d['cost_s_total'])} s in total "
        f"(longest {_n(d['cost_s_max'])} s) before the client moved on"
    )


@rule("probe-timeout", Severity.WARNING, _timeout_message)
def probe_timeout(ctx: RuleContext) -> pl.DataFrame:
    """A probe that got no answer; reports the time it cost.

    What it flags:
        Probes whose outcome is `no-answer`: the server never answered `server/discover` before the
        client gave up. The cost is the time from the probe to the client's next request (on that
        connection, else its next one to the server), or to the end of the connection. A probe
        abandoned sooner than `timeout_min_wait_s` did not time out and is not reported.

    Why it matters:
        Some legacy servers never answer an unknown method. Every client start then waits for the
        whole probe timeout (10 s in `mcp` 2.3.0, 60 s in the TypeScript client) before falling back.

    Example:
        `server/discover` at 12:00:00.0, nothing back, `initialize` at 12:00:10.0 → a finding with
        `cost_s_total = 10`.
    """
    conns = ctx.conn_clients.select("server", "conn", "conn_end")
    rows = ctx.probe_rows.filter(pl.col("outcome") == "no-answer").join(conns, on=["server", "conn"], how="left")
    return (
        rows.with_columns((pl.coalesce("next_ts", "conn_end") - pl.col("ts")).clip(lower_bound=0).alias("cost"))
        .filter(pl.col("cost").is_null() | (pl.col("cost") >= ctx.options.timeout_min_wait_s))
        .group_by(_KEYS)
        .agg(
            pl.len().alias("probes"),
            pl.col("ts").min(),
            pl.col("cost").sum().alias("cost_s_total"),
            pl.col("cost").max().alias("cost_s_max"),
            evidence(note="probe without an answer").alias("evidence"),
        )
        .with_columns(pl.col("cost_s_total").fill_null(0.0), pl.col("cost_s_max").fill_null(0.0))
        .sort(_KEYS)
    )
