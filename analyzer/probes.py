"""Probe and `initialize` outcomes, classified from the paired messages frame.

For every `server/discover` request (`PROBES_SCHEMA`) and every `initialize` request
(`INITS_SCHEMA`) the deciding event is, in order of precedence:

1. its paired answer, when it came within the probe timeout, or later but before the client sent
   that server anything else, left or saw the connection die (it waited longer than the timeout, as
   the TypeScript client's 60 s do); a late answer after the client moved on is `no-answer` (it had
   given up); an `initialize` has no timeout (clients wait for it);
2. otherwise output that is no JSON-RPC message on the same connection before the connection died
   or the timeout ran out (`garbage`; a banner line before a real answer is not garbage, rule 1
   wins; so is `{"jsonrpc":"2.0","id":1}`, which holds the id but answers nothing: the SDKs refuse
   such a line and go on waiting, and `messages.pair_responses` pairs it with no request);
3. otherwise the connection dying within the timeout: stdio `exit` / `server-eof` /
   `server-stdin-broken` (unless the client left first: `client-eof`, `client-stdout-broken`, or its
   host or terminal stopped the server: a relayed SIGINT, SIGTERM, SIGHUP or SIGQUIT), HTTP
   `http.error` or an event stream that ended with `upstream-reset` / `error` (`connection-died`); the recorder stopping
   (`recorder-stopped`) is not a death;
4. otherwise `no-answer`.

An answer the recorder could not decode (`undecodable` on its response or its event stream's end)
is `undecodable`, after rule 1: it answered, but what it said is unread, so it proves no era.

An answer from what stands in front of the server (an auth gate's 401/403/407, a rate limiter's
429, a redirect, a load balancer's 502/503/504 without a JSON-RPC error) gets an outcome of its
own (`NON_ERA_OUTCOMES`): it answers the request, but says nothing about the server's era.

Everything is joins (`join_asof` forward on `seq` within a connection or flow), no row loops.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from addon import format as fmt
from analyzer.condense import STDIO_DEATHS, Rows, with_moved
from analyzer.messages import UNDECODABLE_BODY, UNDECODABLE_STREAM, server_code
from analyzer.schema import HANDSHAKE_VERSIONS, INITS_SCHEMA, MODERN_VERSIONS, PROBES_SCHEMA

_CLIENT_GONE: Final = (fmt.EV_CLIENT_EOF, fmt.EV_STDOUT_BROKEN)
"""Stdio events that say the client left: a death after one of them proves nothing (rule 3); so does
a death after a `signal` of `fmt.ENDING_SIGNALS`, the client's host or terminal ending the server."""
DEFAULT_PROBE_TIMEOUT: Final = 10.0
"""Seconds a client waits for a probe answer (the `mcp` 2.3.0 client's default)."""

UNSUPPORTED_CODES: Final = (-32022, -32004)
"""UnsupportedProtocolVersion: final code and the release-candidate code some servers still send."""
MODERN_ERROR_CODES: Final = (-32020, -32021)
"""HeaderMismatch and MissingRequiredClientCapability: only a modern server sends them."""
LEGACY_CODES: Final = (-32601, -32602, -32600, -32000)
"""What legacy servers answer an unknown method or a sessionless request with."""
MODERN_PROOF_CODES: Final = UNSUPPORTED_CODES + MODERN_ERROR_CODES

AUTH_STATUSES: Final = (401, 403, 407)
"""Unauthorized, Forbidden, Proxy Authentication Required: an auth gate answered, whatever the body."""
GATEWAY_STATUSES: Final = (502, 503, 504)
"""What a load balancer or proxy answers when no healthy upstream served the request."""
UNDECODABLE: Final = "undecodable"
"""The outcome of an answer the recorder kept as it came, unable to decode it (an unknown
`Content-Encoding`, a body that is not what its encoding says): answered, but unread, so no evidence."""
NON_ERA_OUTCOMES: Final = ("auth-required", "rate-limited", "redirected", "gateway-error")
"""Answers from what stands in front of the server (auth gate, rate limiter, proxy, load balancer),
not from the MCP server itself: they say nothing about its era (see `non_era_outcome`)."""
UPSTREAM_FAILURE_KINDS: Final = ("connection-refused", "upstream-reset", "timeout", "other")
"""`http.error` kinds of a failure between the HTTP recorder and the server: the client got the
proxy's 502 (or a cut stream), not the server's answer. Not `client-gone` (the client's doing), nor
`recorder-stopped` (the recording ended while a flow was open): those are not the server's absence."""
UPSTREAM_FAILURE_EVENTS: Final = tuple(f"http-error:{kind}" for kind in UPSTREAM_FAILURE_KINDS)
"""The messages frame's `event` of those `http.error` records."""

OUTPUT_ENDS: Final = (
    fmt.EV_SERVER_EOF,
    fmt.EV_STDOUT_BROKEN,
    fmt.EV_SPAWN_FAILED,
    fmt.EV_LINGER_END,
    fmt.EV_RECORDER_END,
)
"""Stdio events after which the tee records nothing more of the server's stdout on the connection:
its stream closed (`server-eof`; `client-stdout-broken`, the tee stopped reading it), never opened
(`spawn-failed`), or closed before (the tee writes `linger-end` and `recorder-end` after it; they
stand for a `server-eof` condensing dropped behind an `exit`). Not `exit`: the tee can reap the
server before it records the last frames still in the pipe (captures/FORMAT.md, Ordering)."""
_HTTP_DEATHS: Final = ("sse-end:upstream-reset", "sse-end:error")
_NOT_DEATHS: Final = frozenset({"http-error:recorder-stopped", "http-error:client-gone"})
"""The recorder stopping ends the observation of a flow, not the server's connection; a client hanging
up ends it by the client's doing (its timeout cancelling the request), as a client leaving first does on
stdio (`_CLIENT_GONE`)."""
_REQUEST_KEYS: Final = ("file", "line", "server", "transport", "conn", "flow", "ts", "id")
"""Columns the probe and initialize frames take from the request row as they are."""
_REQUEST_COLUMNS: Final = (
    *_REQUEST_KEYS,
    "capture",
    "seq",
    "meta_version",
    "header_version",
    "header_method",
    "has_envelope",
    "init_version",
    "peer",
    "client_name",
)
"""What the classification reads of a request row: nothing else of it is copied."""
_EVENT_COLUMNS: Final = ("capture", "server", "conn", "flow", "seq", "ts", "file", "line")
"""What `_first_after` reads of an event."""
_NAME_COLUMNS: Final = ("capture", "server", "conn", "flow", "seq", "client_name")
"""Columns read from the rows that name a client, to name the client of a connection or flow."""
_KEY: Final = ("_k_cap", "_k_srv", "_k_stdio", "_k_conn", "_k_conn_null", "_k_flow")
"""The columns of `_conn_key`."""


def _conn_key(schema: pl.Schema | dict[str, pl.DataType]) -> dict[str, pl.Expr]:
    """Stdio requests live on a connection; HTTP requests on a flow: the key of either, as columns.

    The server key is part of it: the recorders write a connection's or flow's records under one
    key, and an event keyed apart (an edited capture) settles no probe of another key, so that a
    probe's outcome is a function of its own server's traffic (`messages.pair_responses`).

    In the frame's own physical dtypes (a categorical's code, a flow's hash): 100,000 probe spawns
    built a string key per request and per event before. Never null (`join_asof` matches no null
    key): a null becomes the dtype's zero with a flag, so a stdio row without a connection still
    meets the others of its capture without one, as it did.
    """

    def physical(value: pl.Expr, name: str) -> pl.Expr:
        return value.to_physical().fill_null("" if schema[name] == pl.String() else 0)

    stdio = pl.col("flow").is_null()
    conn = pl.when(stdio).then(pl.col("conn"))
    return {
        "_k_cap": physical(pl.col("capture"), "capture"),
        "_k_srv": server_code(schema["server"]),
        "_k_stdio": stdio,
        "_k_conn": physical(conn, "conn"),
        "_k_conn_null": conn.is_null(),
        "_k_flow": physical(pl.col("flow"), "flow"),
    }


def non_era_outcome(status: pl.Expr, code: pl.Expr) -> pl.Expr:
    """The outcome of an HTTP answer that came from in front of the server, else null.

    - `auth-required`: 401, 403 or 407, with any body (the SDKs' bearer middleware sends an OAuth
      JSON error, gateways HTML or nothing);
    - `rate-limited`: 429, with any body;
    - `redirected`: a 3xx (the client was sent elsewhere; what answers there is another record);
    - `gateway-error`: 502, 503 or 504 without a JSON-RPC error code (a load balancer or proxy
      found no upstream; a JSON-RPC error in such a body is the server's own and is read as such).

    Every other HTTP status is read through its JSON-RPC body, or as before when it has none.
    """
    return (
        pl.when(status.is_in(AUTH_STATUSES))
        .then(pl.lit("auth-required"))
        .when(status == 429)
        .then(pl.lit("rate-limited"))
        .when(status.is_between(300, 399))
        .then(pl.lit("redirected"))
        .when(status.is_in(GATEWAY_STATUSES) & code.is_null())
        .then(pl.lit("gateway-error"))
    )


def _first_after(requests: pl.DataFrame, events: pl.DataFrame, prefix: str) -> pl.DataFrame:
    """For each request (`_KEY`, `seq`, sorted on `seq`), the first event on its connection/flow
    after it: `{prefix}seq`, `{prefix}ts`, `{prefix}file`, `{prefix}line`, one row per request in the
    same order."""
    ev = events.select(
        *_KEY,
        seq=pl.col("seq"),
        **{
            f"{prefix}seq": pl.col("seq"),
            f"{prefix}ts": pl.col("ts"),
            f"{prefix}file": pl.col("file"),
            f"{prefix}line": pl.col("line"),
        },
    ).sort("seq")
    found = requests.join_asof(ev, on="seq", by=list(_KEY), strategy="forward", check_sortedness=False)
    return found.select(f"{prefix}seq", f"{prefix}ts", f"{prefix}file", f"{prefix}line")


def _decide(messages: pl.DataFrame, method: str, timeout: float, moved: Rows | None) -> pl.DataFrame:
    """Requests of `method` with their answer and the first garbage/death/client-EOF after them.

    Everything stays in the messages frame's own dtypes (categoricals, flow hashes) and only the
    columns read are copied; the result's columns become strings when the caller casts it to its
    schema.
    """
    key = _conn_key(messages.schema)
    reqs = (
        messages.lazy()
        .filter((pl.col("kind") == "request") & (pl.col("method") == method))
        .select(*_REQUEST_COLUMNS, **key)
        .collect()
    )
    # Lazy with the requests' keys semi-joined first: only the few connections and answers that
    # concern these requests are copied, not every named row or every answer of the input.
    lazy = messages.lazy()
    # Client identity: the request's own, else the first one named on the connection (stdio) or
    # flow (HTTP).
    on_conn = reqs.lazy().filter(pl.col("flow").is_null()).select("capture", "conn").unique()
    on_flow = reqs.lazy().filter(pl.col("flow").is_not_null()).select("capture", "flow").unique()
    named = []
    for source in with_moved(lazy, moved):
        rows = source.select(*_NAME_COLUMNS).filter(pl.col("client_name").is_not_null())
        named.append(rows.filter(pl.col("flow").is_null()).join(on_conn, on=["capture", "conn"], how="semi"))
        named.append(rows.filter(pl.col("flow").is_not_null()).join(on_flow, on=["capture", "flow"], how="semi"))
    named_rows = pl.concat(named, how="vertical_relaxed")
    names = (
        named_rows.with_columns(pl.when(pl.col("flow").is_null()).then(pl.col("conn")).alias("conn"))
        # first in the order the rows were captured (one key lies within one capture)
        .sort("seq", maintain_order=True)
        .group_by("capture", "server", "flow", "conn", maintain_order=True)
        .agg(_conn_client=pl.col("client_name").first().cast(messages.schema["client_name"]))
        .select(**_conn_key(named_rows.collect_schema()), _conn_client="_conn_client")
    )
    reqs = (
        reqs.lazy()
        .join(names, on=list(_KEY), how="left", maintain_order="left")
        .with_columns(client_name=pl.coalesce("client_name", "_conn_client"))
        .drop("_conn_client")
        .collect()
    )
    answers = (
        lazy.filter(pl.col("req_seq").is_not_null() & pl.col("kind").is_in(("response", "error", "invalid")))
        .join(reqs.lazy().select("capture", req_seq="seq"), on=["capture", "req_seq"], how="semi")
        .sort("seq")
        .unique(["capture", "req_seq"], keep="first")
        .select(
            "capture",
            seq="req_seq",
            a_seq="seq",
            a_file="file",
            a_line="line",
            a_ts="ts",
            a_kind="kind",
            a_code="error_code",
            a_status="http_status",
            a_sv="supported_versions",
            a_es="error_supported",
            a_init="init_version",
            a_ttl="ttl_ms",
            a_peer="peer",
            a_node="node_hint",
        )
        .collect()
    )
    reqs = reqs.join(answers, on=["capture", "seq"], how="left")
    events = lazy.select(*_EVENT_COLUMNS, "kind", "dir", "req_seq", "event", "signal")
    s2c_garbage = events.filter(
        (pl.col("kind") == "invalid") & (pl.col("dir") == "s2c") & pl.col("req_seq").is_null()
    ).with_columns(**key)
    # the distinct events are few: pick the `http-error:*` ones there instead of a string test per row
    seen = messages.get_column("event").drop_nulls().unique().cast(pl.String).to_list()
    fatal = sorted({*STDIO_DEATHS, *_HTTP_DEATHS, *(e for e in seen if e.startswith("http-error:"))} - _NOT_DEATHS)
    deaths = events.filter(pl.col("event").is_in(fatal)).with_columns(**key)
    # a client that stopped reading (`client-stdout-broken`) left as surely as one that closed stdin
    client_eof = events.filter(
        pl.col("event").is_in(_CLIENT_GONE)
        | ((pl.col("event") == fmt.EV_SIGNAL) & pl.col("signal").is_in(fmt.ENDING_SIGNALS))
    ).with_columns(**key)
    unread = events.filter(pl.col("event").is_in((UNDECODABLE_BODY, UNDECODABLE_STREAM))).with_columns(**key)
    s2c_garbage, deaths, client_eof, unread = pl.collect_all([s2c_garbage, deaths, client_eof, unread])

    # each search reads the keys alone; its three columns join the requests side by side (same order)
    reqs = reqs.sort("seq")
    keys = reqs.select(*_KEY, "seq")
    reqs = reqs.hstack(
        [
            column
            for events, prefix in ((s2c_garbage, "g_"), (deaths, "d_"), (client_eof, "e_"), (unread, "u_"))
            for column in _first_after(keys, events, prefix).get_columns()
        ]
    )
    del keys
    sources = with_moved(lazy, moved)
    reqs = reqs.with_columns(
        _sent_nothing_before(reqs, sources, timeout, "a_"), _sent_nothing_before(reqs, sources, timeout, "u_")
    )
    deadline = pl.col("ts") + timeout

    def in_time(ts: str) -> pl.Expr:  # a record without a time (`ts` missing) cannot be late
        return (pl.col(ts) <= deadline).fill_null(True)

    def waited_for(prefix: str) -> pl.Expr:
        """A client that waits longer than `timeout` (the TypeScript client's 60 s) gets a late
        answer: one that came before the client sent the server anything else, left or saw the
        connection die was waited for, and is the answer. A client that gave up moved on first (the
        `mcp` 2.3.0 client sends its fallback `initialize` at once)."""

        def before(seq: str) -> pl.Expr:
            return pl.col(seq).is_not_null() & (pl.col(seq) < pl.col(f"{prefix}seq"))

        return pl.col(f"_{prefix}waited") & ~(before("e_seq") | before("d_seq"))

    answered = pl.col("a_line").is_not_null() & (in_time("a_ts") | waited_for("a_"))
    died = (
        pl.col("d_seq").is_not_null()
        & in_time("d_ts")
        & (pl.col("e_seq").is_null() | (pl.col("e_seq") > pl.col("d_seq")))
    )
    garbage = (
        pl.col("g_seq").is_not_null()
        & in_time("g_ts")
        & (pl.col("d_seq").is_null() | (pl.col("g_seq") < pl.col("d_seq")))
    )
    return reqs.with_columns(
        _answered=answered,
        _died=died.fill_null(False),
        _garbage=garbage.fill_null(False),
        _unread=(pl.col("u_seq").is_not_null() & (in_time("u_ts") | waited_for("u_"))).fill_null(False),
        _deadline=deadline,
    )


def _text_keys() -> dict[str, pl.Expr]:
    """Capture and server key as text, never null (`join_asof` matches no null key), alike in frames
    whose categoricals differ."""
    return {
        "_cap": pl.col("capture").cast(pl.String).fill_null("\x00"),
        "_srv": pl.col("server").cast(pl.String).fill_null("\x00"),
    }


def _sent_nothing_before(reqs: pl.DataFrame, sources: list[pl.LazyFrame], timeout: float, prefix: str) -> pl.Series:
    """Per request of `reqs`: whether its answer (`prefix` `a_`, or `u_` for one the recorder could not
    decode) came after `timeout` and before the client sent that server any other request or
    notification, on any connection or flow of the capture; as the column `_{prefix}waited`.

    Late answers are few (none, mostly): only theirs are looked at, by a search among the requests
    in their stretch of `seq` of their captures and server keys, `sources` being the messages frame
    and the requests condensing moved out of it (whose rows are all requests from the client)."""
    name, answer = f"_{prefix}waited", f"{prefix}seq"
    late = (pl.col(answer).is_not_null() & (pl.col(f"{prefix}ts") > pl.col("ts") + timeout)).fill_null(False)
    rows = reqs.with_row_index("_r").filter(late).select("_r", "seq", answer, **_text_keys())
    none = pl.repeat(False, reqs.height, eager=True).alias(name)
    if rows.is_empty():
        return none
    low, high = rows.get_column("seq").min(), rows.get_column(answer).max()
    keys = rows.select("_cap", "_srv").unique().lazy()
    sent = []
    for i, source in enumerate(sources):
        if i == 0:  # the messages frame: its client requests and notifications
            source = source.filter((pl.col("dir") == fmt.C2S) & pl.col("kind").is_in(("request", "notification")))
        sent.append(
            source.filter(pl.col("seq").is_between(low, high, closed="none"))
            .select(**_text_keys(), _n=pl.col("seq"))
            .join(keys, on=["_cap", "_srv"], how="semi")
        )
    nexts = pl.concat(sent).collect().sort("_n")
    found = rows.sort("seq").join_asof(
        nexts,
        left_on="seq",
        right_on="_n",
        by=["_cap", "_srv"],
        strategy="forward",
        allow_exact_matches=False,
        check_sortedness=False,  # both sorted on their `seq` just above
    )
    waited = found.filter(pl.col("_n").is_null() | (pl.col("_n") > pl.col(answer))).get_column("_r")
    return none.scatter(waited, True)


def output_ended(messages: pl.DataFrame, rows: pl.DataFrame) -> pl.Series:
    """Per row of `rows` (probes or initializes of `messages`, by their request's `file` and `line`):
    whether one of `OUTPUT_ENDS` follows the request on its stdio connection in `messages`. Then no
    answer, garbage or undecodable line of the server can follow any more: its outcome is the one it
    has, whatever the timeout (`erascope watch` decides it at once). False on HTTP, and where
    condensing dropped the event (`analyzer.condense._unread_lifecycle`) with no other after it:
    undecided there, as before, until the timeout passes."""
    wanted = rows.filter(pl.col("flow").is_null()).select("file", "line").unique()
    if wanted.is_empty():
        return pl.repeat(False, rows.height, eager=True, dtype=pl.Boolean())
    key = _conn_key(messages.schema)
    reqs = (
        messages.lazy()
        .filter(
            (pl.col("kind") == "request")
            & pl.col("method").is_in(("server/discover", "initialize"))
            & pl.col("flow").is_null()
        )
        .select(pl.col("file").cast(pl.String), "line", "seq", **key)
        .join(wanted.lazy(), on=["file", "line"], how="semi")
        .collect()
        .sort("seq")
    )
    ends = messages.filter(pl.col("event").is_in(OUTPUT_ENDS) & pl.col("flow").is_null()).with_columns(**key)
    found = _first_after(reqs.select(*_KEY, "seq"), ends, "o_").get_column("o_seq").is_not_null()
    over = reqs.select("file", "line").filter(found).unique().with_columns(_over=pl.lit(True))
    on = rows.select("file", "line").join(over, on=["file", "line"], how="left", maintain_order="left")
    return on.get_column("_over").fill_null(False)


def decided_by_answer(messages: pl.DataFrame, rows: pl.DataFrame) -> pl.Series:
    """Per row of `rows` (probes or initializes of `messages`, by their deciding line: `file_of_answer`
    and `answer_line`): whether that line is an answer paired with a request in `messages`, and its
    outcome one that nothing read later replaces (`erascope watch` decides it at once).

    A probe's answer is rule 1's outcome (a request's first answer is its answer), a `garbage` one
    too: an HTTP body that is no JSON-RPC answer (a body answers its flow's request whatever it holds). An
    `initialize` has no outcome of its own for such an answer (`classify_inits`): it is `no-answer`
    located at the answer. The body ends its flow, so nothing recorded later on it can make the answer
    `undecodable`; a death read later makes it `connection-died` at the same line, the same era: no
    reason to wait.

    False for garbage not paired with the request (a stdout line or an event on its stream that is no
    JSON-RPC message, whatever id it holds), which an answer within the timeout replaces, for deaths and
    for no answer."""
    located = rows.select(file=file_of_answer(), line=pl.col("answer_line").cast(pl.UInt32))
    wanted = located.drop_nulls().unique()
    if wanted.is_empty():
        return pl.repeat(False, rows.height, eager=True, dtype=pl.Boolean())
    answers = (
        messages.lazy()
        .filter(pl.col("req_seq").is_not_null() & pl.col("kind").is_in(("response", "error", "invalid")))
        .select(
            pl.col("file").cast(pl.String),
            pl.col("line").cast(pl.UInt32),
        )
        .join(wanted.lazy(), on=["file", "line"], how="semi")
        .collect()
    )
    decided = answers.select("file", "line").unique().with_columns(_answer=pl.lit(True))
    on = located.join(decided, on=["file", "line"], how="left", maintain_order="left")
    return on.get_column("_answer").fill_null(False)


def handshake_only(col: str) -> pl.Expr:
    """A non-empty version list that names handshake versions alone (a legacy advertisement)."""
    versions = pl.col(col)
    return (
        (versions.list.len() > 0)
        & versions.list.eval(pl.element().is_in(sorted(HANDSHAKE_VERSIONS))).list.all()
    ).fill_null(False)


def names_modern(versions: pl.Expr) -> pl.Expr:
    """Whether a version list names a known modern version (null for a null list)."""
    return versions.list.eval(pl.element().is_in(sorted(MODERN_VERSIONS))).list.any()


def with_opening(rows: pl.DataFrame, openers: pl.DataFrame, opener: pl.Expr) -> pl.DataFrame:
    """`rows` with `_opened`: when a row of `openers` that `opener` picks first came on the same stdio
    connection (server, conn); null on HTTP and on connections no such row opened. A dual-era stdio
    server serves a connection in the era of its first request (`AFTER_OPENING`)."""
    opened = (
        openers.filter(opener & pl.col("flow").is_null() & pl.col("conn").is_not_null())
        .group_by("server", "conn")
        .agg(_opened=pl.col("ts").min())
    )
    return rows.join(opened, on=["server", "conn"], how="left", nulls_equal=True, maintain_order="left")


AFTER_OPENING: Final = (pl.col("flow").is_null() & (pl.col("_opened") < pl.col("ts"))).fill_null(False)
"""A row of `with_opening` sent on a stdio connection after another era's request opened it."""


def _deciding(column: str, *, garbage: bool = True) -> pl.Expr:
    """`column` (`file`, `line`, `ts`) of the deciding event, in the outcome's order of precedence:
    the answer, an answer the recorder could not decode, garbage (probes only), the death."""
    picked = pl.when("_answered").then(f"a_{column}").when("_unread").then(f"u_{column}")
    if garbage:
        picked = picked.when("_garbage").then(f"g_{column}")
    return picked.when("_died").then(f"d_{column}")


def _other_file(answer_file: pl.Expr) -> pl.Expr:
    """The answer's file where it is not the request's, else null. A rotated capture can cut an
    exchange, its answer on a line of the next part; null is the common case, and costs nothing
    beside the request's own `file` in the probe rows every rule reads (`file_of_answer` reads the
    two together)."""
    return pl.when(answer_file != pl.col("file")).then(answer_file)


def file_of_answer() -> pl.Expr:
    """The file of a probe's or `initialize`'s deciding answer, on rows of `PROBES_SCHEMA` or
    `INITS_SCHEMA`: `answer_file` where a rotated capture put the answer in the part after the
    request's, else the request's `file`."""
    return pl.coalesce("answer_file", "file")


def answer_location(rows: pl.DataFrame | pl.LazyFrame) -> pl.Expr:
    """`file_of_answer()` for every row of `rows`, read as the request's `file` itself when no answer
    of `rows` is in another part: a coalesced copy of every row's file name raised the peak heap at
    4 GB by 40 MB, and the common case needs none."""
    if not rows.lazy().select(pl.col("answer_file").is_not_null().any()).collect().item():
        return pl.col("file")
    return file_of_answer()


def classify_probes(
    messages: pl.DataFrame, timeout: float = DEFAULT_PROBE_TIMEOUT, moved: Rows | None = None
) -> pl.DataFrame:
    """One row per `server/discover` request with its outcome (`PROBES_SCHEMA`).

    `moved`: the requests condensing moved out of `messages` (`Traffic.requests`), read for client names.
    """
    if messages.is_empty():
        return pl.DataFrame(schema=PROBES_SCHEMA)
    df = _decide(messages, "server/discover", timeout, moved)
    is_http = pl.col("flow").is_not_null()
    well_formed = pl.col("has_envelope").fill_null(False) & (
        ~is_http | (pl.col("header_version").is_not_null() & pl.col("header_method").is_not_null())
    )
    code = pl.col("a_code")
    answer_outcome = (
        pl.when(non_era_outcome(pl.col("a_status"), code).is_not_null())
        .then(non_era_outcome(pl.col("a_status"), code))
        # a result without an array `supportedVersions` and an object `capabilities` is no DiscoverResult
        # (`supported_versions` is null): the SDK's client falls back to `initialize` after it
        .when((pl.col("a_kind") == "response") & pl.col("a_sv").is_not_null())
        .then(pl.lit("discover-result"))
        .when(code.is_in(UNSUPPORTED_CODES))
        .then(pl.lit("unsupported-version"))
        .when(code.is_in(MODERN_ERROR_CODES))
        .then(pl.lit("modern-error"))
        .when(pl.col("a_kind").is_in(("error", "response")))
        .then(pl.lit("legacy-answer"))
        .otherwise(pl.lit("garbage"))
    )
    outcome = (
        pl.when(pl.col("_answered"))
        .then(answer_outcome)
        .when(pl.col("_unread"))
        .then(pl.lit(UNDECODABLE))
        .when(pl.col("_garbage"))
        .then(pl.lit("garbage"))
        .when(pl.col("_died"))
        .then(pl.lit("connection-died"))
        .otherwise(pl.lit("no-answer"))
    )
    df = df.with_columns(_well_formed=well_formed, _outcome=outcome).with_columns(
        # A malformed probe's legacy-looking answer proves nothing; modern answers still prove modern.
        _outcome=pl.when(~pl.col("_well_formed") & (pl.col("_outcome") == "legacy-answer"))
        .then(pl.lit("malformed-probe"))
        .otherwise(pl.col("_outcome"))
    )
    answered = pl.col("_answered")
    versions = pl.when(answered).then(pl.coalesce("a_sv", "a_es"))
    out = df.select(
        *_REQUEST_KEYS,
        requested_version=pl.coalesce("meta_version", "header_version"),
        well_formed="_well_formed",
        outcome="_outcome",
        answer_file=_other_file(_deciding("file")),
        answer_line=_deciding("line"),
        answer_ts=_deciding("ts"),
        error_code=pl.when(answered).then(code),
        http_status=pl.when(answered).then(pl.col("a_status")),
        versions=versions,
        modern_versions=pl.when(versions.is_not_null()).then(names_modern(versions)),
        ttl_ms=pl.when(answered).then(pl.col("a_ttl")),
        peer=pl.coalesce("a_peer", "peer"),
        node_hint=pl.when(answered).then(pl.col("a_node")),
        client_name="client_name",
    )
    # cast first: the file names sort as text
    return out.cast(PROBES_SCHEMA).sort("ts", "file", "line")  # type: ignore[arg-type]


CROSS_ERA: Final = "cross-era-refusal"
"""A stdio probe refused -32600 on a connection a served `initialize` opened: a dual-era stdio server
serves a connection in the era of its first request and refuses the other era's requests on it
(`mcp` 2.3.0: "this connection serves the handshake protocol era"). That says what the connection
serves, not the server: no era evidence, as an `initialize` refused on a connection a probe opened
modern is none (`analyzer.eras.evidence_frame`)."""


def mark_cross_era(probes: pl.DataFrame, inits: pl.DataFrame) -> pl.DataFrame:
    """`probes` with `CROSS_ERA` as the outcome of each stdio `legacy-answer` -32600 sent after an
    `initialize` was served on its connection. A legacy server's answer there (-32601, -32602) is
    still a legacy answer."""
    if probes.is_empty():
        return probes
    locked = (pl.col("outcome") == "legacy-answer") & (pl.col("error_code") == -32600).fill_null(False) & AFTER_OPENING
    return (
        with_opening(probes, inits, pl.col("outcome") == "served")
        .with_columns(outcome=pl.when(locked).then(pl.lit(CROSS_ERA)).otherwise(pl.col("outcome")))
        .drop("_opened")
    )


def classify_inits(messages: pl.DataFrame, moved: Rows | None = None) -> pl.DataFrame:
    """One row per `initialize` request with its outcome (`INITS_SCHEMA`).

    No timeout: clients wait for `initialize` without one (the `mcp` 2.3.0 client's fallback has
    none), so an answer that comes at any time serves it, and a death at any time before one ends it.
    """
    if messages.is_empty():
        return pl.DataFrame(schema=INITS_SCHEMA)
    df = _decide(messages, "initialize", float("inf"), moved)
    answered = pl.col("_answered")
    named = pl.col("a_es").list.len().fill_null(0) > 0
    outcome = (
        pl.when(answered & non_era_outcome(pl.col("a_status"), pl.col("a_code")).is_not_null())
        .then(non_era_outcome(pl.col("a_status"), pl.col("a_code")))
        .when(answered & (pl.col("a_kind") == "response"))
        .then(pl.lit("served"))
        # the endpoint takes no POST (the HTTP+SSE transport's GET-only /sse) or is not there:
        # nothing was said about versions
        .when(answered & pl.col("a_code").is_null() & pl.col("a_status").is_in((404, 405)))
        .then(pl.lit("http-refused"))
        .when(answered & (pl.col("a_kind") == "error") & named)
        .then(pl.lit("refused-named"))
        .when(answered & (pl.col("a_kind") == "error"))
        .then(pl.lit("refused-unnamed"))
        .when(pl.col("_unread"))
        .then(pl.lit(UNDECODABLE))
        .when(pl.col("_died"))
        .then(pl.lit("connection-died"))
        .otherwise(pl.lit("no-answer"))
    )
    out = df.select(
        *_REQUEST_KEYS,
        requested_version=pl.coalesce("init_version", "header_version"),
        outcome=outcome,
        answer_file=_other_file(_deciding("file", garbage=False)),
        answer_line=_deciding("line", garbage=False),
        error_code=pl.when(answered).then(pl.col("a_code")),
        versions=pl.when(answered).then(
            pl.when(pl.col("a_init").is_not_null()).then(pl.concat_list(pl.col("a_init"))).otherwise(pl.col("a_es"))
        ),
        peer=pl.coalesce("a_peer", "peer"),
        client_name="client_name",
    )
    return out.cast(INITS_SCHEMA).sort("ts", "file", "line")  # type: ignore[arg-type]
