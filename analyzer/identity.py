"""Who a client is: an identity per connection, built from what the wire and the recorder show.

A client's identity is the combination of

- its clientInfo `name` and `version` (the probe envelope's `io.modelcontextprotocol/clientInfo`
  or `initialize`'s `clientInfo`, the first one seen on the connection);
- over HTTP, its `User-Agent` and the host part of its address (the port changes with every
  connection of one program, so it is left out);
- over stdio, the command line of the host process that started the recorder (`parent_argv` of
  the `spawn` record, redacted; its pid is left out, so one program run twice stays one client).

Two connections belong to one client only when every part matches; a part the capture does not
have (older captures, another transport) is simply absent. Different programs often share a
clientInfo (the `mcp` 2.3.0 and 1.30.0 Python SDKs both send `{"name": "mcp", "version": "0.1.0"}`);
what launched them, or the HTTP stack they use, tells them apart.

A legacy HTTP client sends later requests of its session with only `mcp-session-id`, often on new
connections: such a connection without clientInfo takes the whole identity of the connection
that opened the session (the first one with clientInfo that carried the session id). A
connection without any part is `unknown`.

The identity's text (the `client` column everywhere in the analysis) joins the parts present:
`mcp 0.1.0 · python-httpx/0.28.1 · from 127.0.0.1`, `mcp 0.1.0 · host: /usr/bin/node agent.js`.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from analyzer.condense import Rows, Traffic, with_moved
from analyzer.messages import as_strings

UNKNOWN_CLIENT: Final = "unknown"
"""The identity of a connection nothing names."""
SEPARATOR: Final = " · "
PARTS: Final = ("name", "version", "user_agent", "address", "host_process")
"""The parts of an identity, in the order its text shows them."""
IDENTITY_DTYPE: Final = pl.Struct({part: pl.String() for part in PARTS})
"""The identity as a struct (the client table's `identity` column)."""
IDENTITIES_SCHEMA: Final[dict[str, pl.DataType]] = {
    "server": pl.String(),
    "conn": pl.String(),
    "client": pl.String(),  # the identity's text
    "identity": IDENTITY_DTYPE,
    "conn_start": pl.Float64(),
    "conn_end": pl.Float64(),
}
_HOST_PORT: Final = r"^(\[[^\]]*\]|[^:]*):\d+$"
"""`host:port` or `[v6]:port` (the recorder's `client`); the host is group 1."""


def identity_text(parts: pl.Expr) -> pl.Expr:
    """The text of an identity struct (`IDENTITY_DTYPE`): the parts present, `unknown` when none is."""
    f = parts.struct.field
    name = pl.concat_str(f("name"), f("version"), separator=" ", ignore_nulls=True)
    # a User-Agent the name already says (no clientInfo: loading names the client by it) is not repeated
    agent = pl.when(f("user_agent") != f("name").fill_null("")).then(f("user_agent"))
    text = pl.concat_str(
        pl.when(f("name").is_not_null()).then(name),
        agent,
        pl.lit("from ") + f("address"),
        pl.lit("host: ") + f("host_process"),
        separator=SEPARATOR,
        ignore_nulls=True,
    )
    return pl.when(text != "").then(text).otherwise(pl.lit(UNKNOWN_CLIENT))


_NAMED_COLUMNS: Final = ("client_name", "client_version", "user_agent", "client_addr", "host_process")
"""The columns an identity is made of (the session's owner aside)."""


def _named_rows(messages: pl.DataFrame | pl.LazyFrame, moved: Rows | None, keys: list[str]) -> pl.DataFrame:
    """The rows of `messages` and `moved` that name any part of an identity on a connection: `keys`
    and `_NAMED_COLUMNS`, in the messages frame's dtypes, and `_o`, each row's place in (ts, seq)
    order (stable: rows of one instant keep the order of their frames).

    The rows stay where they are: sorting them all would hold every column twice (+90 MB at 2 GB of
    captures, the analysis' peak), ranking them holds two integers a row.
    """
    sources = with_moved(messages, moved)
    base = sources[0].collect_schema()
    columns = [*keys, "ts", "seq", *_NAMED_COLUMNS]
    dtypes = {c: base.get(c, pl.String()) for c in columns}
    frames = []
    for src in sources:
        have = src.collect_schema()
        frames.append(
            src.select(
                (pl.col(c) if have[c] == dtypes[c] else pl.col(c).cast(dtypes[c])) if c in have
                # a frame without a part (moved requests have no host) names none of it
                else pl.lit(None, dtypes[c]).alias(c)
                for c in columns
            ).filter(pl.col("conn").is_not_null() & pl.any_horizontal(pl.col(c).is_not_null() for c in _NAMED_COLUMNS))
        )
    rows = pl.concat(frames, how="vertical").collect()
    order = rows.select(pl.arg_sort_by("ts", "seq", nulls_last=True, maintain_order=True)).to_series()
    # the inverse of the sorting permutation: each row's place
    return rows.select(*keys, *_NAMED_COLUMNS, _o=order.arg_sort())


def _earliest(column: str, where: pl.Expr | None = None) -> pl.Expr:
    """In a group of `_named_rows`, the value of `column` on the earliest row (`_o`) where it is set
    and `where` holds; null when there is none."""
    kept = pl.col(column).is_not_null() if where is None else where
    return pl.col(column).filter(kept).get(pl.col("_o").filter(kept).arg_min())


def _conn_code() -> pl.Expr:
    """A connection's (server, conn) categoricals as one 64-bit integer: codes are process-wide (equal
    strings, equal codes), and a null server is a value of its own (`conn` is never null here)."""
    server = (pl.col("server").to_physical().cast(pl.UInt64()) + 1).fill_null(0)
    return (server * (1 << 32) + pl.col("conn").to_physical().cast(pl.UInt64())).alias("_key")


def connection_identities(messages: pl.DataFrame | pl.LazyFrame, traffic: Traffic, moved: Rows | None) -> pl.DataFrame:
    """One row per (server, conn) of `traffic.conns`: its client identity (`IDENTITIES_SCHEMA`).

    `messages` is the messages frame and `moved` the requests condensing moved out of it
    (`Traffic.requests`, which the caller may have released from `traffic` already).
    """
    keys = ["server", "conn"]
    rows = _named_rows(messages, moved, keys)
    # loading falls back to the User-Agent in client_name; only a differing name is clientInfo
    is_info = pl.col("client_name").is_not_null() & (
        pl.col("user_agent").is_null() | (pl.col("client_name") != pl.col("user_agent"))
    )
    # One group-by for every part, on one integer per connection when the keys are categoricals
    # (grouping by the two columns encodes every row's pair first).
    if all(rows.schema[k] == pl.Categorical() for k in keys):
        by: list[pl.Expr] = [_conn_code()]
        carried = [pl.col(k).first() for k in keys]
    else:
        by, carried = [pl.col(k) for k in keys], []
    parts = (
        rows.lazy()
        .group_by(by)
        .agg(
            *carried,
            _earliest("client_name", is_info).alias("name"),
            _earliest("client_version", is_info).alias("version"),
            _earliest("user_agent"),
            _earliest("client_addr").cast(pl.String()).alias("address"),
            _earliest("host_process"),
        )
        .select(*keys, *PARTS)
        .pipe(as_strings)
        .with_columns(pl.col("address").str.replace(_HOST_PORT, "${1}"))
    )
    own = (
        traffic.conns.lazy()
        .pipe(as_strings)
        .join(parts, on=keys, how="left")
        .with_columns(_own=pl.struct(*PARTS), _named=pl.col("name").is_not_null())
    )
    # session ids come from `traffic`: condensing dropped rows that carry them
    sessions = traffic.sessions.lazy().sort("ts", "seq", nulls_last=True).pipe(as_strings)
    first_session = sessions.group_by(keys).agg(pl.col("session_id").first().alias("_session"))
    owners = (
        sessions.select(*keys, "session_id")
        .join(own.filter("_named").select(*keys, "_own"), on=keys)
        .group_by("server", "session_id", maintain_order=True)
        .agg(pl.col("_own").first().alias("_owner"))
        .rename({"session_id": "_session"})
    )
    identity = pl.when("_named").then("_own").otherwise(pl.coalesce("_owner", "_own"))
    return (
        own.join(first_session, on=keys, how="left")
        .join(owners, on=["server", "_session"], how="left")
        .select(*keys, identity.alias("identity"), conn_start="start", conn_end="end")
        .with_columns(identity_text(pl.col("identity")).alias("client"))
        .select(list(IDENTITIES_SCHEMA))
        .collect()
    )
