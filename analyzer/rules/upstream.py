"""Failures on the recorder's side of an HTTP exchange: upstream-unreachable."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import polars as pl

from addon import format as fmt
from analyzer.findings import Finding, Severity
from analyzer.messages import as_strings
from analyzer.probes import file_of_answer
from analyzer.rules.base import rule
from analyzer.rules.context import INIT_METHOD, PROBE_METHOD, RuleContext
from analyzer.rules.frames import EVIDENCE_DTYPE, evidence

_MAX_ERROR = 160
"""Characters of the first error message quoted in the finding's message (evidence keeps all)."""


def cut_requests(ctx: RuleContext) -> pl.DataFrame:
    """The client requests an upstream failure answered: `file`, `line` (the failure), `req_file`,
    `req_line` (the request: a rotated capture can hold the two in different parts), `method`. A probe
    or `initialize` whose outcome line is the failure, and any request of the failed HTTP flow that
    the server had not answered."""
    fails = ctx.upstream_failures
    schema = {
        "file": pl.String(), "line": pl.UInt32(), "req_file": pl.String(), "req_line": pl.UInt32(),
        "method": pl.String(),
    }  # fmt: skip
    if fails.is_empty():  # the common case: no request scan
        return pl.DataFrame(schema=schema)
    keys = fails.select("file", "line")
    classified = [
        frame.select(
            file_of_answer().cast(pl.String).alias("file"),
            pl.col("answer_line").alias("line"),
            req_file=pl.col("file").cast(pl.String),
            req_line="line",
        )
        .join(keys.lazy(), on=["file", "line"], how="semi")
        .with_columns(method=pl.lit(method))
        .collect()
        for frame, method in ((ctx.probes, PROBE_METHOD), (ctx.inits, INIT_METHOD))
    ]
    # the server can answer before the flow fails (an event, then the stream is reset): that cut nothing
    by_flow = (
        ctx.http_requests_unanswered()
        .select("capture", "server", "flow", req_file="file", req_line="line", method="method")
        .pipe(as_strings)
        # the failed flow's requests under its own server key: an edited capture can key one apart
        .join(
            fails.lazy().select("capture", "server", "flow", "file", "line"),
            on=["capture", "server", "flow"],
            nulls_equal=True,
        )
        .select("file", "line", "req_file", "req_line", "method")
        .collect()
    )
    parts = [p.select(pl.col(name).cast(dtype) for name, dtype in schema.items()) for p in (*classified, by_flow)]
    # rechunked: see `RuleContext.upstream_failures` (polars 2.1 and `pl.format` on filtered strings)
    return (
        pl.concat(parts, how="vertical").unique(["req_file", "req_line"], keep="first", maintain_order=True).rechunk()
    )


def _counts(rows: pl.DataFrame, col: str, name: str) -> pl.DataFrame:
    """Per server, `value ×n` for each distinct value of `col`, sorted by value, as column `name`."""
    return (
        rows.group_by("server", col)
        .agg(pl.len().alias("_n"))
        .sort("server", col)
        .group_by("server", maintain_order=True)
        .agg(pl.format("{} ×{}", col, "_n").alias(name))
    )


_SPAWN_FAILED: Final = f"{fmt.EV_SPAWN_FAILED} ×"
"""How a count of the stdio tee's failed starts begins among the finding's `kinds`."""


def _message(d: dict[str, Any]) -> str:
    cut = f"; requests left without the server's answer: {', '.join(d['requests'])}" if d["requests"] else ""
    error = d["first_error"] or "?"
    if len(error) > _MAX_ERROR:
        error = error[: _MAX_ERROR - 1] + "…"
    kinds = ", ".join(d["kinds"])
    spawns = any(k.startswith(_SPAWN_FAILED) for k in d["kinds"])
    if spawns and len(d["kinds"]) == 1:  # a stdio server key: no exchange took place
        return (
            f"the recorder could not start the server {d['failures']} time(s), not because of the client: "
            f"{kinds} (first: {error}){cut}. Check the server command after `record stdio --`: that it exists, "
            "is executable and runs on this host"
        )
    hint = "the server is up and `--upstream` points at it" + (", and the stdio server command" if spawns else "")
    return (
        f"{d['failures']} exchange(s) failed between the recorder and the server, not because of the client: "
        f"{kinds} (first: {error}){cut}. Check that {hint}"
    )


@rule("upstream-unreachable", Severity.ERROR, _message)
def upstream_unreachable(ctx: RuleContext) -> pl.DataFrame:
    """The recorder could not reach the server, or lost it mid-exchange.

    What it flags:
        A stdio server command the tee could not start (`spawn-failed`: not found, not executable),
        and HTTP flow errors the recorder wrote (`http.error`) on the server's side of the proxy: the
        upstream refused the connection or its name did not resolve (`connection-refused`), reset
        or closed it before the answer was complete (`upstream-reset`), a `timeout` (a flow the
        proxy closed for its silence only while a request on it waited for the answer, not a quiet
        event stream), or another proxy failure (`other`); not `client-gone` (the client hung up) nor
        `recorder-stopped` (the recording ended with the flow open). The client then got a 502 made by
        the proxy (or a cut stream), never an answer from the server. One finding per server, with
        the failures and the requests they left unanswered as evidence.

    Why it matters:
        Such an exchange proves nothing about the server's era or the client's logic: the server
        never saw the request. The server's verdict then rests on these failures (its why-line
        names them), `misread-crash` and `probe-kills-server` do not count a probe whose "crash"
        was the proxy's, and any other client finding whose evidence includes one says so. Most
        often `record http --upstream` points at nothing (it warns at start when the upstream does
        not answer), or the server is down.

    Example:
        `erascope record http --upstream http://127.0.0.1:8000/mcp` with nothing listening: the
        client's `server/discover` flow ends in `http.error` `connection-refused`
        (`[Errno 111] Connect call failed ('127.0.0.1', 8000)`), then its fallback `initialize`
        does too → `upstream-unreachable`.
    """
    fails = ctx.upstream_failures
    cut = cut_requests(ctx).join(fails.select("file", "line", "server"), on=["file", "line"])
    requests = (
        cut.group_by("server")
        .agg(evidence("req_file", "req_line", pl.format("request {} (answered by the proxy)", "method")).alias("_cut"))
        .join(_counts(cut, "method", "requests"), on="server")
    )
    no_evidence = pl.lit([], pl.List(EVIDENCE_DTYPE))
    return (
        fails.group_by("server")
        .agg(
            pl.len().alias("failures"),
            pl.col("ts").min(),
            pl.col("error").sort_by("ts").first().alias("first_error"),
            evidence(note=pl.format("{}: {}", "kind", pl.col("error").fill_null("?"))).alias("_failed"),
        )
        .join(_counts(fails, "kind", "kinds"), on="server")
        .join(requests, on="server", how="left")
        .select(
            "server",
            "ts",
            "failures",
            "kinds",
            "first_error",
            pl.col("requests").fill_null(pl.lit([], pl.List(pl.String()))),
            pl.concat_list("_failed", pl.col("_cut").fill_null(no_evidence)).alias("evidence"),
        )
        .sort("server")
    )


def blame_upstream(findings: list[Finding], ctx: RuleContext) -> list[Finding]:
    """`findings`, where a client finding's evidence includes an upstream failure or a request it cut
    off, with a message that says so and `details["upstream_failures"]` (how many of those lines).

    The client may still have done what the finding says, but the server never saw those requests:
    the reader must know that the proxy, not the server, answered them.
    """
    if ctx.upstream_failures.is_empty():
        return findings
    lines = ctx.upstream_failure_lines()
    cut = cut_requests(ctx).join(lines, on=["file", "line"]).select(file="req_file", line="req_line", failure="failure")
    failed = {(f, ln): why for f, ln, why in pl.concat([lines, cut], how="vertical").iter_rows()}
    out = []
    for finding in findings:
        hits = [failed[(e.file, e.line)] for e in finding.evidence if (e.file, e.line) in failed]
        if finding.client is None or not hits:
            out.append(finding)
            continue
        note = (
            f" ({len(hits)} of its evidence lines are an upstream failure recorded by the proxy, not the "
            f"server's answer: {hits[0]}; see upstream-unreachable)"
        )
        details = {**finding.details, "upstream_failures": len(hits)}
        out.append(replace(finding, message=finding.message + note, details=details))
    return out
