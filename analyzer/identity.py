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

from collections.abc import Iterable, Iterator
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


NAMED_BATCH_ROWS: Final = 1 << 17
"""The rows that name identity parts are ranked and reduced this many at a time (`_earliest_parts`)
when the moved requests are on disk: every request of the modern era names its client, so at 4 GB
of captures they are millions, and holding them all at once made the identities the analysis' peak
heap (441 MB; 203 MB in batches of this size, and 305 MB in batches four times bigger)."""


def _named_batches(
    messages: pl.DataFrame | pl.LazyFrame, moved: Rows | None, keys: list[str], rows: int
) -> tuple[Iterator[pl.DataFrame], bool]:
    """The rows of `messages`, then of `moved`, that name any part of an identity on a connection:
    `keys`, `ts`, `seq` and `_NAMED_COLUMNS`, in the messages frame's dtypes, in their frames' order;
    and whether they come as one frame. They come in batches of at most `rows` when `moved` is on
    disk and the frames hold more than `rows` rows together."""
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
        )  # fmt: skip
    # Rows held in memory already are taken at once (their named rows, a few columns of them, cost
    # less than batching them: archives). Moved requests on disk (`analyzer.spill`: big inputs) are
    # counted before the filter, which their files' metadata tells.
    if not isinstance(moved, pl.LazyFrame) or sum(src.select(pl.len()).collect().item() for src in sources) <= rows:
        return iter([pl.concat(frames, how="vertical").collect()]), True
    return (batch for frame in frames for batch in frame.collect_batches(chunk_size=rows)), False


def _ranked(rows: pl.DataFrame) -> pl.DataFrame:
    """`rows` with `_o`, each row's place in (ts, seq) order, ties in the rows' own order.

    The rows stay where they are: sorting them all would hold every column twice (+90 MB at 2 GB of
    captures), ranking them holds two integers a row.
    """
    order = rows.select(pl.arg_sort_by("ts", "seq", nulls_last=True, maintain_order=True)).to_series()
    return rows.with_columns(_o=order.arg_sort())  # the inverse of the sorting permutation


_PART_SOURCES: Final = tuple(zip(PARTS, _NAMED_COLUMNS, strict=True))
"""Each identity part and the column it is read from."""


def _part_where(part: str) -> pl.Expr | None:
    """Which rows may give `part`: for the name and version only those that carry clientInfo (loading
    falls back to the User-Agent in `client_name`; only a differing name is clientInfo); for the
    others any row where it is set."""
    if part in ("name", "version"):
        return pl.col("client_name").is_not_null() & (
            pl.col("user_agent").is_null() | (pl.col("client_name") != pl.col("user_agent"))
        )
    return None


def _earliest_parts(batches: Iterable[pl.DataFrame], keys: list[str], single: bool) -> pl.DataFrame:
    """Per connection (`keys`) of the named rows `batches` (`_named_batches`), each part of `PARTS`:
    its value on the earliest row (in (ts, seq) order, ties in the rows' order) that may give it;
    null when none does. `single`: `batches` is one frame.

    A batch at a time, so that the rows are never all held: each batch gives, per connection and
    part, its earliest candidate and that row's (ts, seq); the earliest of those, ties to the earlier
    batch, is the earliest of all, since the batches come in the rows' order.
    """
    partial = []
    for batch in batches:
        rows = _ranked(batch)
        # One group-by for every part, on one integer per connection when the keys are categoricals
        # (grouping by the two columns encodes every row's pair first).
        if all(rows.schema[k] == pl.Categorical() for k in keys):
            by: list[pl.Expr] = [_conn_code()]
            carried = [pl.col(k).first() for k in keys]
        else:
            by, carried = [pl.col(k) for k in keys], []
        found = []
        for part, column in _PART_SOURCES:
            where = _part_where(part)
            found.append(_earliest(column, where).alias(part))
            if not single:  # what the batches' candidates are compared by
                found += [
                    _earliest("ts", where, column).alias(f"_ts_{part}"),
                    _earliest("seq", where, column).alias(f"_seq_{part}"),
                    (pl.col(column).is_not_null() if where is None else where).any().alias(f"_has_{part}"),
                ]
        partial.append(rows.lazy().group_by(by).agg(*carried, *found).drop("_key", strict=False).collect())
    if not partial:
        return pl.DataFrame(schema={**{k: pl.String() for k in keys}, **{part: pl.String() for part in PARTS}})
    if single:
        return partial[0].select(*keys, *PARTS)
    candidates = pl.concat(partial, how="vertical")
    merged = candidates.select(keys).unique(maintain_order=True)
    for part in PARTS:
        # a stable sort: candidates of one instant stay in their batches' order
        earliest = (
            candidates.filter(pl.col(f"_has_{part}"))
            .sort(f"_ts_{part}", f"_seq_{part}", nulls_last=True, maintain_order=True)
            .group_by(keys, maintain_order=True)
            .agg(pl.col(part).first())
        )
        merged = merged.join(earliest, on=keys, how="left", nulls_equal=True, maintain_order="left")
    return merged


def _earliest(column: str, where: pl.Expr | None = None, set_in: str | None = None) -> pl.Expr:
    """In a group of ranked rows (`_ranked`), the value of `column` on the earliest row (`_o`) where
    `set_in` (default: `column`) is set and `where` holds; null when there is none."""
    kept = pl.col(set_in or column).is_not_null() if where is None else where
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
    batches, single = _named_batches(messages, moved, keys, NAMED_BATCH_ROWS)
    parts = (
        _earliest_parts(batches, keys, single)
        .lazy()
        .pipe(as_strings)
        .with_columns(pl.col("address").cast(pl.String()).str.replace(_HOST_PORT, "${1}"))
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
