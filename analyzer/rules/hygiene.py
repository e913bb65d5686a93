"""Rules about single messages that break the protocol's letter: unnamed-versions, stdout-pollution,
malformed-probe, rc-error-code, invalid-discover-result."""

from __future__ import annotations

from typing import Any

import polars as pl

from analyzer.findings import Severity
from analyzer.messages import as_strings
from analyzer.probes import file_of_answer
from analyzer.rules.base import rule
from analyzer.rules.context import UNSUPPORTED_CODES, RuleContext
from analyzer.rules.frames import evidence

_KEYS = ["server", "client"]


def _per_server(rows: pl.LazyFrame | pl.DataFrame, note: pl.Expr | str) -> pl.DataFrame:
    return (
        rows.lazy()
        .group_by("server")
        .agg(pl.len().alias("count"), pl.col("ts").min(), evidence(note=note).alias("evidence"))
        .sort("server")
        .collect()
    )


def _unnamed_message(d: dict[str, Any]) -> str:
    return f"{d['count']} version refusal(s) without data.supported: the client cannot pick a version to retry with"


@rule("unnamed-versions", Severity.WARNING, _unnamed_message)
def unnamed_versions(ctx: RuleContext) -> pl.DataFrame:
    """A version refusal that does not say which versions the server supports.

    What it flags:
        An `unsupported-version` error (-32022 or -32004) without a non-empty `data.supported` list,
        and an `initialize` refused without naming versions.

    Why it matters:
        The list is how a client picks a mutual version for its one retry; without it the client can
        only guess or give up.

    Example:
        `{"error":{"code":-32022,"message":"Unsupported protocol version"}}` (no `data`).
    """
    errors = ctx.messages.filter(
        (pl.col("dir") == "s2c")
        & pl.col("error_code").is_in(UNSUPPORTED_CODES)
        & (pl.col("error_supported").list.len().fill_null(0) == 0)
    ).select("server", "file", "line", "ts").pipe(as_strings)
    inits = ctx.inits.filter(pl.col("outcome") == "refused-unnamed").select(
        "server", file=file_of_answer(), line=pl.coalesce("answer_line", "line"), ts="ts"
    )
    # an `initialize` refused so is both: one row, the error's, timed when the refusal came
    rows = pl.concat([errors, inits], how="vertical_relaxed").unique(
        ["file", "line"], keep="first", maintain_order=True
    )
    return _per_server(rows, "refusal without supported versions")


def _pollution_message(d: dict[str, Any]) -> str:
    return f"{d['count']} non-JSON-RPC line(s) on the server's stdout (banners or logs belong on stderr)"


@rule("stdout-pollution", Severity.WARNING, _pollution_message)
def stdout_pollution(ctx: RuleContext) -> pl.DataFrame:
    """Non-JSON-RPC lines on a stdio server's stdout.

    What it flags:
        Lines the server wrote to stdout that are not JSON-RPC messages (banners, log lines, progress
        bars), even when the client survived them.

    Why it matters:
        stdout is the protocol channel. `mcp` 2.3.0 logs and skips such lines, other clients treat
        them as a fatal parse error — and one arriving instead of the probe answer reads as `garbage`.

    Example:
        `Server v1.2 listening on stdio` printed before the first JSON-RPC response.
    """
    rows = ctx.messages.filter(
        (pl.col("transport") == "stdio")
        & (pl.col("dir") == "s2c")
        & (pl.col("kind") == "invalid")
        & (pl.col("record_type").cast(pl.String).fill_null("frame") == "frame")
    ).pipe(as_strings)
    return _per_server(rows, "not JSON-RPC")


def _malformed_message(d: dict[str, Any]) -> str:
    return f"{d['count']} probe(s) were malformed: " + ", ".join(d["problems"])


@rule("malformed-probe", Severity.WARNING, _malformed_message)
def malformed_probe(ctx: RuleContext) -> pl.DataFrame:
    """A probe without the `_meta` envelope or the modern HTTP headers.

    What it flags:
        `server/discover` requests that lack `params._meta` with protocolVersion and
        clientCapabilities (stdio and HTTP), or, over HTTP, the `mcp-protocol-version` /
        `mcp-method` headers.

    Why it matters:
        A dual-era server decides a stdio connection's era on the first request, and one HTTP SDK
        routes on the header alone: a bare probe can lock the connection into legacy, and its answer
        proves nothing about the server.

    Example:
        `{"jsonrpc":"2.0","id":1,"method":"server/discover"}` with no `params`.
    """
    bad = (pl.col("well_formed") == False) | (pl.col("outcome") == "malformed-probe")  # noqa: E712
    http = pl.col("transport") == "http"
    problem = pl.concat_list(
        pl.when(~pl.col("has_envelope").fill_null(False)).then(pl.lit("no _meta envelope")),
        pl.when(http & pl.col("header_version").is_null()).then(pl.lit("no mcp-protocol-version header")),
        pl.when(http & pl.col("header_method").is_null()).then(pl.lit("no mcp-method header")),
    ).list.drop_nulls()
    rows = ctx.probe_rows.filter(bad).with_columns(problem.alias("problem"))
    return (
        rows.group_by(_KEYS)
        .agg(
            pl.len().alias("count"),
            pl.col("ts").min(),
            pl.col("problem")
            .list.explode(keep_nulls=False, empty_as_null=False)
            .drop_nulls()
            .unique()
            .sort()
            .alias("problems"),
            evidence(note="malformed probe").alias("evidence"),
        )
        .with_columns(
            pl.when(pl.col("problems").list.len() == 0)
            .then(pl.lit(["missing required envelope keys"]))
            .otherwise(pl.col("problems"))
            .alias("problems")
        )
        .sort(_KEYS)
    )


def _rc_message(d: dict[str, Any]) -> str:
    return f"{d['count']} error(s) used the release-candidate code -32004 instead of -32022"


@rule("rc-error-code", Severity.WARNING, _rc_message)
def rc_error_code(ctx: RuleContext) -> pl.DataFrame:
    """A server still using the release-candidate error code -32004.

    What it flags:
        Errors from the server with code -32004, the release candidate's UnsupportedProtocolVersion
        code; the final code is -32022.

    Why it matters:
        Clients built against the final specification do not recognise -32004 as a version refusal
        and fall back to `initialize` or fail instead of retrying with a supported version.

    Example:
        `{"error":{"code":-32004,"message":"Unsupported protocol version","data":{"supported":[…]}}}`.
    """
    rows = ctx.messages.filter((pl.col("dir") == "s2c") & (pl.col("error_code") == -32004)).pipe(as_strings)
    return _per_server(rows, "error -32004")


def _invalid_discover_message(d: dict[str, Any]) -> str:
    return (
        f"{d['count']} answer(s) to server/discover that are no DiscoverResult: clients that validate answers "
        "fall back to initialize"
    )


@rule("invalid-discover-result", Severity.WARNING, _invalid_discover_message)
def invalid_discover_result(ctx: RuleContext) -> pl.DataFrame:
    """A server answering the probe with a result that is no DiscoverResult.

    What it flags:
        Results to `server/discover` without an array `supportedVersions` of strings alone and an
        object `capabilities`.

    Why it matters:
        A client that validates the answer, as the `mcp` 2.3.0 client does, cannot read it and falls
        back to `initialize`: the probe's outcome is `legacy-answer` and proves no era. A dual-era
        server that already serves the connection in the modern era then refuses that `initialize`,
        and the client fails.

    Example:
        `{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"]}}` (no `capabilities`).
    """
    rows = ctx.messages.filter(
        (pl.col("dir") == "s2c")
        & (pl.col("kind") == "response")
        & (pl.col("method") == "server/discover")
        & pl.col("supported_versions").is_null()
    ).pipe(as_strings)
    return _per_server(rows, "result that is no DiscoverResult")
