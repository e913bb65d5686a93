"""Rules about eras changing over time: stale-era, rollout-split."""

from __future__ import annotations

from typing import Any

import polars as pl

from analyzer.eras import sessionless_refusal
from analyzer.findings import Severity
from analyzer.probes import answer_location
from analyzer.rules.base import rule
from analyzer.rules.context import UNSUPPORTED_CODES, RuleContext, era_of_probe, request_style
from analyzer.rules.frames import evidence, matching, picked, run_ids

_KEYS = ["server", "client"]
"""How legacy servers refuse a request outside a session: "Server not initialized", "Missing session ID"."""


def split_windows(answers: pl.DataFrame, window_us: int) -> pl.DataFrame:
    """Per (server, axis), every window of `window_us` starting each half window (`dt` in µs) that holds
    answers: how many eras and peers answered in it, its runs of one era, its first and last `ts`.

    The windows `group_by_dynamic(every=window_us // 2, period=window_us)` lays, without its walk from
    window to window: it steps through every window between two answers, so one answer stamped
    centuries later (a `ts` is any number up to year 9999) cost hours. Each answer is put in the
    two or three windows that hold it instead (none starting before its group's first answer, as
    there), found by division: linear in answers, whatever the times. `answers` is sorted by `dt`,
    so each window's rows stay in time order (`runs` reads it).
    """
    every = max(window_us // 2, 1)
    us = pl.col("dt").dt.epoch("us")
    # as `group_by_dynamic` lays them: a group's first window starts at its first answer, floored
    first = us.min().over("server", "axis").floordiv(every)
    return (
        answers.with_columns(
            _w=pl.int_ranges(
                pl.max_horizontal((us - window_us).floordiv(every) + 1, first), us.floordiv(every) + 1
            )
        )
        .explode("_w")
        .group_by("server", "axis", "_w", maintain_order=True)
        .agg(*window_aggregates())
        .drop("_w")
    )


def window_aggregates() -> list[pl.Expr]:
    """What `split_windows` says of each window, from its answers in time order."""
    return [
        pl.col("era").n_unique().alias("eras"),
        pl.col("peer").n_unique().alias("peers"),
        (pl.col("_change").sum() - pl.col("_change").first() + 1).alias("runs"),
        pl.col("ts").min().alias("w_start"),
        pl.col("ts").max().alias("w_end"),
    ]


def _runs(seq: pl.LazyFrame, flag: pl.Expr, reason: str, note: str, min_len: int) -> pl.DataFrame:
    """Runs of at least `min_len` flagged rows in a row per (server, client).

    `seq` is in request order, as in the request view. Only the flagged rows are kept, with their
    position in `seq`: a run goes on while a client's next flagged row is its very next row of
    `seq`. No window over every row of `seq`.
    """
    return _runs_of(seq.with_row_index("_pos").filter(flag.fill_null(False)), reason, note, min_len)


def _runs_of(flagged: pl.LazyFrame, reason: str, note: str, min_len: int) -> pl.DataFrame:
    """`_runs` of the flagged rows alone, each with its position (`_pos`) in request order, in that order."""
    flagged = flagged.select(*_KEYS, "_pos", "ts", "file", "line")
    return (
        flagged.with_columns(run_ids("_pos", _KEYS).alias("_run"))
        .group_by([*_KEYS, "_run"])
        .agg(pl.len().alias("n"), pl.col("ts").min(), evidence(note=note).alias("evidence"))
        .filter(pl.col("n") >= min_len)
        .select(pl.col(_KEYS).cast(pl.String), "ts", "n", pl.lit(reason).alias("reason"), "evidence")
        .collect()
    )


def _legacy_refusals(ctx: RuleContext) -> pl.DataFrame:
    """The requests (`capture`, `seq`) a server refused the legacy way, outside a session: -32000 or
    -32600 about a session or initialization, as `analyzer.eras.request_evidence` reads them (a
    dual-era server's -32600 to an enveloped request on a connection it serves legacy is no such
    refusal). Errors are kept in the messages frame whatever condensing drops."""
    return (
        ctx.messages.filter((pl.col("dir") == "s2c") & pl.col("req_seq").is_not_null() & sessionless_refusal())
        .select(pl.col("capture").cast(pl.Categorical()), seq=pl.col("req_seq"))
        .unique()
        .collect()
    )


def _era_changes(ctx: RuleContext) -> pl.DataFrame:
    """Per server, each probe whose answer shows a different era than the previous answer (any client)."""
    return (
        # only the columns read here are copied by the filter and the sort: a probe per spawn is many
        ctx.probe_rows.select(
            "server", "client", "ts", "file", "line", "outcome", "modern_versions", "probe_versions",
            "probe_error_code", "probe_http_status",
        )
        .with_columns(era_of_probe().alias("era"))
        .filter(pl.col("era").is_not_null())
        # in capture order: answers tied on time taken in the order their rows came would find other
        # changes in a cluster's shard than locally
        .sort("server", "ts", "file", "line", maintain_order=True)
        .with_columns(pl.col("era").shift(1).over("server").alias("old_era"))
        .filter(pl.col("old_era").is_not_null() & (pl.col("era") != pl.col("old_era")))
        .with_columns(pl.col("ts").shift(-1).over("server").alias("next_change_ts"))
        .select(
            "server",
            pl.col("client").alias("changer"),
            pl.col("ts").alias("change_ts"),
            "next_change_ts",
            pl.col("era").cast(pl.Categorical()).alias("new_era"),
            pl.col("old_era").cast(pl.Categorical()),
            pl.col("file").alias("change_file"),
            pl.col("line").alias("change_line"),
        )
    )


def _unnoticed_changes(ctx: RuleContext) -> pl.DataFrame:
    """Clients that kept acting in the old era after other clients saw the server change, without re-probing.

    Each request is matched (as-of, backwards) with the server's latest era change before it and with
    the client's own latest probe before it: linear in the number of requests, however often eras flip.
    """
    # keyed like the request view (categoricals): the few changes and probes are converted
    changes = _era_changes(ctx).with_columns(pl.col("server", "changer").cast(pl.Categorical())).sort(
        "change_ts", "change_file", "change_line", maintain_order=True
    )
    # only the requests to servers whose era changed can act in an old one
    reqs = ctx.requests.lazy().filter(pl.col("server").is_in(changes.get_column("server").unique().implode()))
    firsts = reqs.group_by(_KEYS).agg(pl.col("ts").min().alias("first_ts")).collect(engine="streaming")
    acting = (
        # only the columns used below: `requests` is wide and every copy of it counts
        picked(
            reqs.select(
                *_KEYS, "ts", "file", "line", "capture", "seq", "transport", "conn", "is_real", "is_init",
                request_style().alias("style"),
            ),
            pl.col("is_real") | pl.col("is_init"),
        )
        .lazy()
        .select(
            *_KEYS, "ts", "file", "line", "capture", "seq", "transport", "conn", pl.col("style").cast(pl.Categorical())
        )
        .join(firsts.lazy(), on=_KEYS)
        .sort("ts")
        .collect()
    )
    probes = ctx.probe_rows.select(
        pl.col("server", "client").cast(pl.Categorical()), pl.col("ts").alias("probe_ts")
    ).sort("probe_ts")
    found = (
        acting.join_asof(
            changes, left_on="ts", right_on="change_ts", by="server", strategy="backward", check_sortedness=False
        )
        # narrowed before the second look-up: most requests are not acting in an old era
        .filter(
            pl.col("change_ts").is_not_null()
            & (pl.col("client") != pl.col("changer"))
            & (pl.col("style") == pl.col("old_era"))
            & (pl.col("first_ts") < pl.col("change_ts"))
        )
        .join_asof(probes, left_on="ts", right_on="probe_ts", by=_KEYS, strategy="backward", check_sortedness=False)
        # a client that never probed holds no era verdict to go stale: a legacy-only client speaks the
        # one era it has, and a server that still serves it contradicts nothing (one that refuses it
        # is case (a))
        .filter(pl.col("probe_ts") < pl.col("change_ts"))
    )
    # What the client's own traffic shows contradicts no verdict: a modern request the server answered
    # with a result was served in the modern era (another node of a split fleet, a transient failure
    # elsewhere), and a stdio connection that began before the change is the old process, which still
    # speaks the old era (an upgrade reaches new spawns only).
    # only the answers of the few requests found (the answers are a row per answered request)
    wanted = found.select(pl.col("capture").cast(pl.String), "seq").unique()
    served_modern = (
        ctx.responses.lazy()
        .filter(pl.col("resp_kind") == "response")
        .select(pl.col("capture").cast(pl.String), "seq")
        .join(wanted.lazy(), on=["capture", "seq"], how="semi")
        .unique()
        .with_columns(_served=pl.lit(True))
        .collect()
    )
    started = ctx.conn_clients.select(pl.col("server", "conn").cast(pl.String), "conn_start")
    found = (
        found.with_columns(pl.col("capture", "server", "conn", "transport").cast(pl.String))
        .join(served_modern, on=["capture", "seq"], how="left", maintain_order="left")
        .join(started, on=["server", "conn"], how="left", maintain_order="left")
        .filter(
            ~((pl.col("style") == "modern") & pl.col("_served").fill_null(False))
            & ~((pl.col("transport") == "stdio") & (pl.col("conn_start") < pl.col("change_ts"))).fill_null(False)
        )
        .drop("_served", "conn_start")
        .with_columns(pl.col(_KEYS).cast(pl.Categorical()))
    )
    groups = [*_KEYS, "change_ts"]
    # Plain aggregations per group, and the evidence structs built for the rows shown alone (a
    # group's first ten, in time order) and gathered as they are: list and struct expressions in an
    # aggregation are evaluated group by group, which cost more than the rest of the rule together
    # once clients and era changes are many.
    lead = found.group_by(groups).agg(
        pl.len().alias("n"),
        pl.col("ts").min(),
        pl.col("old_era", "new_era", "change_file", "change_line", "changer").first(),
    )
    shown = (
        found.filter(pl.int_range(pl.len()).over(groups) < 10)
        .select(*groups, evidence(note=pl.format("{} request", "style")).alias("_shown"))
        .group_by(groups)
        .agg("_shown")
    )
    return lead.join(shown, on=groups, how="left", nulls_equal=True).select(
        pl.col(_KEYS).cast(pl.String),
        "ts",
        "n",
        pl.format("kept acting as {} after another client saw the server turn {}", "old_era", "new_era").alias(
            "reason"
        ),
        pl.concat_list(
            evidence(
                "change_file", "change_line", pl.format("{} saw {}", pl.col("changer").cast(pl.String), "new_era")
            ),
            "_shown",
        ).alias("evidence"),
    )


def _stale_message(d: dict[str, Any]) -> str:
    return "acted on an old era verdict without re-probing: " + "; ".join(d["reasons"])


@rule("stale-era", Severity.WARNING, _stale_message)
def stale_era(ctx: RuleContext) -> pl.DataFrame:
    """A client kept acting on an old era verdict after traffic contradicted it.

    What it flags:
        Without a re-probe in between, a client that (a) sends `initialize` again after the server
        refused it with -32022/-32004, at least `stale_repeats` times in a row; (b) sends modern
        requests that the server refuses the legacy way (-32000 "Server not initialized", -32600
        "Missing session ID"), at least `stale_repeats` times in a row; or (c) probed before another
        client's probe saw the server change era, and keeps sending requests in the old era after it (a
        client that never probed holds no verdict to go stale; a modern request the server answered
        with a result, and a request on a stdio process started before the change, the old binary,
        do not count: the client's own traffic did not contradict its verdict).

    Why it matters:
        Servers get upgraded (and rolled back). A verdict cached for ever makes the server look
        broken to this client while everyone else works.

    Example:
        client A cached "legacy"; the server is upgraded; client B's probe now gets a modern
        DiscoverResult; client A keeps sending `initialize` → `stale-era` for client A.
    """
    opts = ctx.options
    reqs = ctx.requests
    refused_init = _runs(
        reqs.lazy()
        .filter(pl.col("is_init") | pl.col("is_probe"))
        .select(*_KEYS, "_i", "ts", pl.col("file").cast(pl.String), "line", "is_init")
        .join(ctx.inits.select("file", "line", init_error_code="error_code"), on=["file", "line"], how="left")
        .sort("_i"),
        pl.col("is_init") & pl.col("init_error_code").is_in(UNSUPPORTED_CODES),
        "kept sending initialize to a server that refuses it with unsupported-version",
        "initialize refused",
        opts.stale_repeats,
    )
    # The answers that refuse the legacy way are few: positions first, then the refused requests
    # picked by a semi join on them (a join that keeps every request costs several times more), back
    # in position order.
    refused_reqs = (
        reqs.lazy()
        .filter(pl.col("is_probe") | (pl.col("is_real") & pl.col("meta_version").is_not_null()))
        .select(*_KEYS, "ts", "file", "line", "is_real", "is_wf_modern", "capture", "seq")
        .with_row_index("_pos")
        .filter(pl.col("is_real") & pl.col("is_wf_modern"))
        .join(_legacy_refusals(ctx).lazy(), on=["capture", "seq"], how="semi")
        .sort("_pos")
    )
    refused_modern = _runs_of(
        refused_reqs,
        "kept sending modern requests to a server that now answers as legacy",
        "modern request refused the legacy way",
        opts.stale_repeats,
    )
    found = pl.concat([refused_init, refused_modern, _unnoticed_changes(ctx)], how="vertical_relaxed")
    return (
        found.group_by(_KEYS)
        .agg(
            pl.col("ts").min(),
            pl.col("n").sum().alias("requests"),
            pl.col("reason").unique().sort().alias("reasons"),
            pl.col("evidence").list.explode(keep_nulls=False, empty_as_null=False),
        )
        .sort(_KEYS)
    )


def _first_evidence(inside: pl.DataFrame, shown: int) -> pl.DataFrame:
    """Per (server, axis): how many distinct answers (file, line, era via peer) lie inside the split
    (`evidence_total`), and the first `shown` of them in file:line order, as `emit` sorts them.

    Every answer inside the split is evidence, and there can be hundreds of thousands: only the rows
    shown become text. They are found in the categoricals' order of file names (few distinct ones,
    put in text order once) and lines; a note is a function of era and peer, so both count alike."""
    distinct = inside.select(
        "server", "axis", "file", pl.col("line").cast(pl.UInt32), "era", "peer"
    ).unique()
    files = distinct.select(pl.col("file").unique().drop_nulls())
    order = files.with_columns(_rank=pl.col("file").cast(pl.String).rank("ordinal").cast(pl.UInt32))
    ranked = distinct.join(order, on="file", how="left")
    # the first `shown` (file, line) of each group: its rows, whatever their notes, are all it shows
    firsts = (
        ranked.select("server", "axis", "_rank", "line")
        .unique()
        .sort("_rank", "line")
        .group_by("server", "axis", maintain_order=True)
        .head(shown)
    )
    totals = distinct.group_by("server", "axis").agg(pl.len().alias("evidence_total"))
    shown_rows = (
        ranked.join(firsts, on=["server", "axis", "_rank", "line"], how="semi", nulls_equal=True)
        .select(
            "server",
            "axis",
            pl.col("file").cast(pl.String),
            "line",
            pl.format("{} via {}", "era", "peer").alias("note"),
        )
        .sort("file", "line", "note")
        .group_by("server", "axis", maintain_order=True)
        .agg(evidence(note=pl.col("note")).head(shown).alias("evidence"))
    )
    # from the totals: with no line shown (`max_evidence=0`) a split has no shown rows, and is still one
    return (
        totals.join(shown_rows, on=["server", "axis"], how="left", maintain_order="left")
        .with_columns(pl.col("evidence").fill_null(pl.lit([], dtype=shown_rows.schema["evidence"])))
        .select("server", "axis", "evidence_total", "evidence")
    )


def _split_message(d: dict[str, Any]) -> str:
    peers = "; ".join(f"{p['peer']} → {p['era']} ×{p['count']}" for p in d["peers"])
    return (
        f"{d['axis']} answers disagreed from {d['began']} to {d['ended']} ({d['duration_s']:g} s, "
        f"{d['windows']} window(s) of {d['window_s']:g} s): {peers}"
    )


@rule("rollout-split", Severity.WARNING, _split_message)
def rollout_split(ctx: RuleContext) -> pl.DataFrame:
    """One server key giving different era answers at the same time.

    What it flags:
        Within one `split_window_s` window (windows start every half window: answers under half a
        window apart always share one), one server key answered in different eras — probes
        answered modern and legacy, or modern requests answered with results and with legacy
        sessionless refusals (-32000 / -32600) — or `initialize` was both served and refused with
        -32022; either from different upstream peers (load-balancer nodes) or flipping back and
        forth. Reports which peer answered which way, and when the split began and ended.

    Why it matters:
        A half-rolled fleet makes every client's verdict a coin toss; legacy sessions break when the
        next request lands on an upgraded node.

    Example:
        10.0.0.1:8000 answers `server/discover` with a DiscoverResult, 10.0.0.2:8000 answers the
        following `tools/call` with 400 "Missing session ID", within a minute → `rollout-split`
        naming both peers.
    """
    opts = ctx.options
    # An answer row per enveloped request: its text columns stay categorical, like the request view
    # they come from, and only the few rows of the result become strings.
    cat = pl.Categorical()
    probe_answers = ctx.probe_rows.select(
        pl.col("server").cast(cat),
        "ts",
        answer_location(ctx.probe_rows).alias("file"),
        pl.col("answer_line").alias("line"),
        pl.coalesce("probe_peer", "peer").cast(cat).alias("peer"),
        era_of_probe().cast(cat).alias("era"),
        pl.lit("era").cast(cat).alias("axis"),
    )
    # modern requests show the era of the node that answered them: a result is modern, a sessionless
    # refusal is a legacy node (a round-robin proxy sending the call after the probe elsewhere)
    modern_requests = ctx.requests.lazy().filter(
        pl.col("is_real") & pl.col("meta_version").is_not_null() & pl.col("is_wf_modern")
    )
    # A server whose answers all show the modern era cannot split: the answers to its modern
    # requests (a row each, most of the input) are read only for servers that also answered the
    # legacy way somewhere, in a probe answer or a sessionless refusal (few rows either way).
    answered_legacy = pl.concat(
        [
            probe_answers.filter(pl.col("era") == "legacy").select("server"),
            matching(modern_requests.select("server", "capture", "seq"), _legacy_refusals(ctx)).select("server"),
        ]
    ).unique()
    legacy = picked(
        modern_requests.select("server", "file", "peer", "capture", "seq"),
        pl.col("server").is_in(answered_legacy.get_column("server").implode()),
    )
    refusals = _legacy_refusals(ctx).with_columns(_legacy_refusal=pl.lit(True))
    request_answers = (
        matching(ctx.responses.lazy(), legacy, how="inner")
        .lazy()
        .join(refusals.lazy(), on=["capture", "seq"], how="left")
        .with_columns(pl.col("_legacy_refusal").fill_null(False))
        .select(
            "server",
            pl.col("resp_ts").alias("ts"),
            pl.col("resp_file").alias("file"),
            pl.col("resp_line").alias("line"),
            pl.coalesce("resp_peer", "peer").alias("peer"),
            pl.when(pl.col("resp_kind") == "response")
            .then(pl.lit("modern"))
            .when(pl.col("_legacy_refusal"))
            .then(pl.lit("legacy"))
            .cast(cat)
            .alias("era"),
            pl.lit("era").cast(cat).alias("axis"),
        )
        .collect()
    )
    init_answers = (
        ctx.inits.filter((pl.col("outcome") == "served") | pl.col("error_code").is_in(UNSUPPORTED_CODES))
        .select(
            pl.col("server").cast(cat),
            "ts",
            answer_location(ctx.inits).cast(cat).alias("file"),
            pl.coalesce("answer_line", "line").alias("line"),
            pl.col("peer").cast(cat),
            pl.when(pl.col("outcome") == "served")
            .then(pl.lit("serves initialize"))
            .otherwise(pl.lit("refuses initialize"))
            .cast(cat)
            .alias("era"),
            pl.lit("initialize").cast(cat).alias("axis"),
        )
        .collect()
    )
    answers = (
        pl.concat([probe_answers, request_answers, init_answers], how="vertical_relaxed")
        # an answer without a time (its record carried none) is in no window
        .filter(pl.col("era").is_not_null() & pl.col("ts").is_not_null())
        .with_columns(
            pl.coalesce("peer", pl.lit("(no peer address)").cast(cat)),
            pl.from_epoch((pl.col("ts") * 1_000_000).cast(pl.Int64()), time_unit="us").alias("dt"),
        )
        # answers tied on time in capture order, as in `_era_changes`
        .sort("dt", "file", "line", maintain_order=True)
        # where the era differs from the group's previous answer: a window's runs are its first
        # answer's run and the changes after it (`rle_id` over each window is evaluated window by
        # window, and the windows are as many as the history is long)
        .with_columns(
            _change=(pl.col("era") != pl.col("era").shift(1)).over("server", "axis").fill_null(False).cast(pl.UInt32)
        )
    )
    if answers.is_empty():
        return pl.DataFrame(schema={"server": pl.String(), "ts": pl.Float64(), "evidence": pl.List(pl.Null())})
    windows = split_windows(answers, int(opts.split_window_s * 1_000_000)).filter(
        (pl.col("eras") > 1) & ((pl.col("peers") > 1) | (pl.col("runs") >= 3))
    )
    spans = windows.group_by("server", "axis").agg(
        pl.col("w_start").min().alias("ts"), pl.col("w_end").max().alias("end_ts"), pl.len().alias("windows")
    )
    inside = answers.join(spans, on=["server", "axis"]).filter(pl.col("ts").is_between("ts_right", "end_ts"))
    peers = (
        inside.group_by("server", "axis", "peer", "era")
        .agg(pl.len().alias("count"))
        .with_columns(pl.col("peer", "era").cast(pl.String))
        .sort("peer", "era")
        .group_by("server", "axis")
        .agg(pl.struct("peer", "era", "count").alias("peers"))
    )
    ev = _first_evidence(inside, opts.max_evidence)
    fmt = "%Y-%m-%dT%H:%M:%S%.3fZ"
    return (
        spans.join(peers, on=["server", "axis"])
        .join(ev, on=["server", "axis"])
        .with_columns(pl.col("server", "axis").cast(pl.String))
        .with_columns(
            pl.from_epoch((pl.col("ts") * 1e6).cast(pl.Int64()), time_unit="us").dt.strftime(fmt).alias("began"),
            pl.from_epoch((pl.col("end_ts") * 1e6).cast(pl.Int64()), time_unit="us").dt.strftime(fmt).alias("ended"),
            (pl.col("end_ts") - pl.col("ts")).alias("duration_s"),
            pl.lit(opts.split_window_s).alias("window_s"),
        )
        .drop("end_ts")
        .sort("server", "axis")
    )
