"""Condensing one file's paired messages: drop the rows no later step reads, keep what they add up to.

Most rows of a busy capture are the answers to ordinary requests (`tools/call` results) and the HTTP
bookkeeping around them: an event stream's start and clean end, 2xx acknowledgements, progress
notifications. The classification, the verdicts and the rules read those rows only through a few
aggregates, so after pairing (which needs them) they are dropped and the aggregates are kept in
`Traffic`, a few small frames:

- `conns`: per (server, connection) the first and last time anything was seen on it;
- `sessions`: per (server, connection, session id) the first (ts, seq) it was seen;
- `servers`: per server the first and last time, transports and upstream peers seen;
- `answers`: for each dropped answer to a request that carries the version envelope, the answer's
  line, time, seq and peer (the rules read how modern requests were answered);
- `requests`: the requests whose answer was dropped, moved out of the messages frame into narrow
  rows (`REQUEST_COLUMNS`, about half the bytes of a message row); `Traffic.request_rows` gives
  every request back, kept and moved, for the rules' request view;
- `rows`: how many message rows there were before condensing (the report counts messages).

An analysis writes `requests` and `answers` to disk as the captures are read (`spilled`,
`analyzer.spill`): they grow with the input and are read again only by the rules' first frames.

What is condensed: an exchange whose answer is a plain result (s2c, answering anything but
`server/discover` and `initialize`, naming no versions). Its answer is dropped, its request moves
to `Traffic.requests`, and over HTTP the bookkeeping of its flow (the response that only starts the
event stream or acknowledges, the clean stream end) is dropped; s2c notifications are dropped too.
Errors, invalid lines, failures and every request without such an answer stay.

A stdio spawn's lifecycle records (`spawn`, `signal`, `server-eof`, `exit`, `client-eof`, ...) stay
but for those nothing can read (`_unread_lifecycle`): the classification reads of them only the
first death and the first `client-eof` or ending `signal` (the client's host or terminal stopping
the server) after each request on the connection (`analyzer.probes`), the client identity only the
`spawn` row's host; so a `terminate`, `linger-end` or Ctrl-Z `signal` row, and a death or
`client-eof` that follows a death or an ending `signal` with no request between them, are dropped
(a probe spawn its host kills keeps 3 of its 5 lifecycle rows: `spawn`, `signal`, `client-eof`).
Files are read and condensed in chunks (`analyzer.load`), so an answer can come in a later chunk
or part than its request; `analyzer.load.relink` pairs the kept rows again together with the moved
requests those answers can belong to, which gives the pairing of reading everything at once.

`traffic_of(messages)` gives the same `Traffic` for messages that were never condensed (inline test
frames, `LoadOptions(condense=False)`), so every consumer can rely on it. tests/test_condense.py
checks that condensing changes no report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Final

import polars as pl

from addon import format as fmt
from analyzer.messages import MEMBER_SLOTS, as_categoricals
from analyzer.spill import Spill

Rows = pl.DataFrame | pl.LazyFrame
"""Rows held in memory, or a lazy scan of rows written to disk (`spilled`)."""
CONDENSE_VERSION: Final = 5
"""What archives' condensed frames were condensed by (`analyzer.archive`): raise it with any change
to pairing or condensing that changes the rows they keep or the `Traffic` they give, so that
archives condensed before are read from their rows again (and `compact` refreshes them).
2: answers pair within their server key (`messages.pair_responses`).
3: dropped answers keep their `file` (a rotated capture's answer can be in the part after its request's).
4: `signal` rows are kept like `client-eof` (a server stopped by the client's side did not crash).
5: over HTTP, answers pair with the client's requests only (a server's own request on an event stream
   took the answers holding its id); a line or event that is no message pairs with no request."""
SPILL_MIN_ROWS: Final = 1_000
"""Smaller frames are not spilled: a file costs about 0.5 ms to write and more to scan whatever its
size, which for the few rows of a spawn-per-call capture is more than holding them (under 100 kB)."""

_KEEP_ANSWERS_OF: Final = ("server/discover", "initialize")
_MASK_COLUMNS: Final = (
    "capture",
    "flow",
    "kind",
    "dir",
    "req_seq",
    "method",
    "supported_versions",
    "error_supported",
    "init_version",
    "ttl_ms",
    "record_type",
    "event",
)
_CAT: Final = pl.Categorical()
STDIO_DEATHS: Final = (fmt.EV_EXIT, fmt.EV_SERVER_EOF, fmt.EV_STDIN_BROKEN, fmt.EV_SPAWN_FAILED)
"""The stdio lifecycle events that end a connection (`analyzer.probes` reads the first one after a request)."""
_UNREAD_EVENTS: Final = (fmt.EV_TERMINATE, fmt.EV_LINGER_END)
"""Lifecycle events nothing reads: a row of one is dropped wherever it is (`_unread_lifecycle`)."""
_AFTER_DEATH_EVENTS: Final = (fmt.EV_EXIT, fmt.EV_SERVER_EOF, fmt.EV_STDIN_BROKEN, fmt.EV_CLIENT_EOF, fmt.EV_SIGNAL)
"""Lifecycle events read only as the first of their kind after a request: dropped after a death."""
_LIFECYCLE_COLUMNS: Final = (
    "file",
    "line",
    "server",
    "transport",
    "conn",
    "seq",
    "ts",
    "record_type",
    "kind",
    "event",
    "exit_code",
    "signal",
    "http_status",  # an `exit` record's `status`: read only on answers (`analyzer.probes`)
    "capture",
)
"""The columns a droppable lifecycle row may carry; every other column of it must be null, so no
filter on one of them (a direction, an error code, a client name, a host) can meet it."""

CONNS_SCHEMA: Final = {"server": _CAT, "conn": _CAT, "start": pl.Float64(), "end": pl.Float64()}
SESSIONS_SCHEMA: Final = {"server": _CAT, "conn": _CAT, "session_id": _CAT, "ts": pl.Float64(), "seq": pl.Int64()}
SERVERS_SCHEMA: Final = {
    "server": _CAT,
    "first": pl.Float64(),
    "last": pl.Float64(),
    "transports": pl.List(_CAT),
    "peers": pl.List(_CAT),
}
REQUEST_COLUMNS: Final = (
    "file",
    "line",
    "capture",
    "server",
    "transport",
    "conn",
    "flow",
    "seq",
    "ts",
    "id",
    "method",
    "meta_version",
    "has_envelope",
    "header_version",
    "header_method",
    "session_id",
    "peer",
    "client_name",
    "client_version",
    "user_agent",
    "client_addr",
)
"""The columns of a request row that anything reads once its exchange is condensed."""
ANSWERS_SCHEMA: Final = {
    "capture": _CAT,
    "file": _CAT,
    "req_seq": pl.Int64(),
    "seq": pl.Int64(),
    "line": pl.UInt32(),
    "ts": pl.Float64(),
    "peer": _CAT,
}


def _empty(schema: dict[str, pl.DataType]) -> Callable[[], pl.DataFrame]:
    """A maker of empty frames with `schema`: clearing a template takes 1 µs, building a frame from
    a schema 40 µs and more, and every file read makes several."""
    return pl.DataFrame(schema=schema).clear


_no_conns: Final = _empty(CONNS_SCHEMA)
_no_sessions: Final = _empty(SESSIONS_SCHEMA)
_no_servers: Final = _empty(SERVERS_SCHEMA)
_no_answers: Final = _empty(ANSWERS_SCHEMA)


@dataclass
class Traffic:
    """What the condensed rows added up to (see the module docstring)."""

    conns: pl.DataFrame = field(default_factory=_no_conns)
    sessions: pl.DataFrame = field(default_factory=_no_sessions)
    servers: pl.DataFrame = field(default_factory=_no_servers)
    answers: Rows = field(default_factory=_no_answers)
    requests: Rows | None = None
    """The requests of condensed exchanges (`REQUEST_COLUMNS`), moved out of the messages frame."""
    rows: int = 0

    def request_rows(self, messages: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
        """Every request: those still in `messages` and the moved ones, with `REQUEST_COLUMNS`.

        Columns keep the messages frame's dtypes (categoricals in an analysis, strings in test frames).
        """
        kept = messages.lazy().filter((pl.col("kind") == "request") & (pl.col("dir") == fmt.C2S))
        kept = kept.select(REQUEST_COLUMNS)
        if self.requests is None or not has_rows(self.requests):
            return kept
        have = self.requests.lazy().collect_schema()
        moved = self.requests.lazy().with_columns(
            pl.col(name).cast(dtype)
            for name, dtype in kept.collect_schema().items()
            if have[name] != dtype  # in an analysis both sides have the messages dtypes: nothing to convert
        )
        return pl.concat([kept, moved], how="vertical")


def with_moved(messages: pl.LazyFrame | pl.DataFrame, moved: Rows | None) -> list[pl.LazyFrame]:
    """The frames whose rows carry request fields: `messages`, and the requests condensing moved out
    of it (`Traffic.requests`) when there are any. Each keeps its own dtypes."""
    frames = [messages.lazy()]
    if moved is not None and has_rows(moved):
        frames.append(moved.lazy())
    return frames


def has_rows(frame: Rows | None) -> bool:
    """Whether `frame` holds any row. A lazy frame here is a scan of rows written to disk
    (`spilled`), which is never empty: nothing is collected to tell."""
    if frame is None:
        return False
    return isinstance(frame, pl.LazyFrame) or frame.height > 0


def spilled(traffic: Traffic, spill: Spill) -> Traffic:
    """`traffic` with its moved requests and dropped answers written to `spill`, held as lazy scans.

    Frames of fewer than `SPILL_MIN_ROWS` rows, and frames spilled already, stay as they are.
    """
    requests, answers = traffic.requests, traffic.answers
    if isinstance(requests, pl.DataFrame) and requests.height >= SPILL_MIN_ROWS:
        requests = spill.put(requests)
    if isinstance(answers, pl.DataFrame) and answers.height >= SPILL_MIN_ROWS:
        answers = spill.put(answers)
    return replace(traffic, requests=requests, answers=answers)


def traffic_of(
    messages: pl.DataFrame, answers: pl.DataFrame | None = None, requests: pl.DataFrame | None = None
) -> Traffic:
    """The aggregates of `messages` (not condensed yet); `answers` and `requests` are what condensing moved."""
    lazy = messages.lazy()
    with_conn = lazy.filter(pl.col("conn").is_not_null())
    conns = with_conn.group_by("server", "conn").agg(start=pl.col("ts").min(), end=pl.col("ts").max())
    sessions = (
        with_conn.filter(pl.col("session_id").is_not_null())
        .group_by("server", "conn", "session_id")
        .agg(pl.col("ts", "seq").sort_by("ts", "seq", nulls_last=True).first())
    )
    servers = lazy.group_by("server").agg(
        first=pl.col("ts").min(),
        last=pl.col("ts").max(),
        # `sse`: the deprecated HTTP+SSE transport, known by its `endpoint` event (reports say `http+sse`)
        transports=pl.concat(
            [pl.col("transport").cast(pl.String), pl.when(pl.col("event") == "sse-endpoint").then(pl.lit("sse"))]
        )
        .drop_nulls()
        .unique()
        .cast(_CAT),
        peers=pl.col("peer").drop_nulls().unique().cast(pl.String).cast(_CAT),
    )
    conns_df, sessions_df, servers_df = pl.collect_all(
        [
            as_categoricals(conns),
            as_categoricals(sessions),
            as_categoricals(servers),
        ]
    )
    return Traffic(
        conns=conns_df.cast(CONNS_SCHEMA),  # type: ignore[arg-type]
        sessions=sessions_df.cast(SESSIONS_SCHEMA),  # type: ignore[arg-type]
        servers=servers_df.cast(SERVERS_SCHEMA),  # type: ignore[arg-type]
        answers=_no_answers() if answers is None else answers,
        requests=requests,
        rows=messages.height,
    )


def merge(parts: list[Traffic]) -> Traffic:
    """The `Traffic` of several files together (a connection or server can span files)."""
    if not parts:
        return Traffic()

    def rows_of(frames: list[pl.DataFrame]) -> list[pl.DataFrame]:
        # the empty frames of files that added nothing (100,000 spawn captures read in batches are
        # mostly such) are left out: concatenating them cost 70 MB for nothing; one keeps the schema
        return [f for f in frames if f.height] or frames[:1]

    conns = (
        pl.concat(rows_of([p.conns for p in parts]))
        .group_by("server", "conn", maintain_order=True)
        .agg(pl.col("start").min(), pl.col("end").max())
    )
    sessions = (
        pl.concat(rows_of([p.sessions for p in parts]))
        .group_by("server", "conn", "session_id", maintain_order=True)
        .agg(pl.col("ts", "seq").sort_by("ts", "seq", nulls_last=True).first())
    )
    servers = (
        pl.concat(rows_of([p.servers for p in parts]))
        .group_by("server", maintain_order=True)
        .agg(
            pl.col("first").min(),
            pl.col("last").max(),
            pl.col("transports").explode().drop_nulls().unique(),
            pl.col("peers").explode().drop_nulls().unique(),
        )
    )
    answers = concat_rows([p.answers for p in parts])
    return Traffic(
        conns=conns,
        sessions=sessions,
        servers=servers.cast(SERVERS_SCHEMA),  # type: ignore[arg-type]
        answers=_no_answers() if answers is None else answers,
        requests=concat_rows([p.requests for p in parts]),
        rows=sum(p.rows for p in parts),
    )


def concat_rows(frames: list[Rows | None]) -> Rows | None:
    """The frames with rows one after another; lazy when any was spilled, None when none has rows."""
    present = [f for f in frames if f is not None and has_rows(f)]
    if not present:
        return None
    if all(isinstance(f, pl.DataFrame) for f in present):
        return pl.concat(present, how="vertical", rechunk=False)  # type: ignore[type-var]
    # Each run of frames in memory becomes one frame first: a query over hundreds of small inputs
    # (a capture per spawn) costs more to plan than to run, and it runs once per reader.
    parts: list[pl.LazyFrame] = []
    run: list[pl.DataFrame] = []
    for frame in present:
        if isinstance(frame, pl.DataFrame):
            run.append(frame)
            continue
        if run:
            parts.append(pl.concat(run, how="vertical", rechunk=False).lazy())
            run = []
        parts.append(frame)
    if run:
        parts.append(pl.concat(run, how="vertical", rechunk=False).lazy())
    return pl.concat(parts, how="vertical")


def condense(messages: pl.DataFrame) -> tuple[pl.DataFrame, Traffic]:
    """Drop the rows later steps only read through `Traffic`; `messages` must be paired already.

    A condensed exchange: a plain result (dropped), its request (moved into `Traffic.requests`),
    and for HTTP its flow's bookkeeping (dropped). Requests without such an answer stay, so do the
    bookkeeping rows of their flows: pairing again across pieces of work (`relink`) needs them.
    """
    if messages.is_empty():
        return messages, traffic_of(messages)
    kind = pl.col("kind")
    s2c = pl.col("dir") == fmt.S2C
    plain_answer = (
        (kind == "response")
        & s2c
        & pl.col("req_seq").is_not_null()
        & ~pl.col("method").is_in(_KEEP_ANSWERS_OF).fill_null(False)
        & pl.col("supported_versions").is_null()
        & pl.col("error_supported").is_null()
        & pl.col("init_version").is_null()
        & pl.col("ttl_ms").is_null()
    ).fill_null(False)
    bookkeeping = (
        ((pl.col("record_type") == fmt.HTTP_RESPONSE) & (kind == "lifecycle")) | (pl.col("event") == "sse-end:clean")
    ).fill_null(False)
    notification = ((kind == "notification") & s2c).fill_null(False)
    # the masks are computed on the few columns they need; the frame itself is filtered once
    rows = messages.lazy().select(*_MASK_COLUMNS, "seq", "meta_version").with_row_index("_r")
    plain = rows.filter(plain_answer)
    answered = plain.select("capture", seq="req_seq").unique()
    moved_rows = rows.filter((kind == "request") & (pl.col("dir") == fmt.C2S)).join(
        answered, on=["capture", "seq"], how="semi"
    )
    moved_flows = moved_rows.filter(pl.col("flow").is_not_null()).select("capture", "flow").unique()
    booked = rows.filter(bookkeeping).join(moved_flows, on=["capture", "flow"], how="semi")
    modern = moved_rows.filter(pl.col("meta_version").is_not_null()).select("capture", req_seq="seq")
    plain_r, moved_r, booked_r, notified_r, modern_answers = pl.collect_all(
        [
            plain.select("_r"),
            moved_rows.select("_r"),
            booked.select("_r"),
            rows.filter(notification).select("_r"),
            plain.join(modern, on=["capture", "req_seq"], how="semi").select("_r"),
        ]
    )
    index = pl.int_range(pl.len(), dtype=pl.UInt32)
    moved_at = moved_r.get_column("_r").implode()
    gone_at = pl.concat([plain_r, booked_r, notified_r, moved_r]).get_column("_r").implode()
    is_moved = messages.select(index.is_in(moved_at)).to_series()
    is_gone = messages.select(index.is_in(gone_at)).to_series()
    answers = (
        messages.select(list(ANSWERS_SCHEMA))
        .with_row_index("_r")
        .join(modern_answers, on="_r", how="semi")
        .drop("_r")
        .lazy()
        .pipe(as_categoricals)
        .collect()
        .cast(ANSWERS_SCHEMA)  # type: ignore[arg-type]
    )
    moved = compacted(messages.filter(is_moved).select(REQUEST_COLUMNS))
    traffic = traffic_of(messages, answers, moved)
    is_gone = is_gone | _unread_lifecycle(messages, is_gone)
    return compacted(messages.filter(~is_gone)), traffic


def _unread_lifecycle(messages: pl.DataFrame, is_gone: pl.Series) -> pl.Series:
    """The stdio lifecycle rows of `messages` no later step can read, as a mask.

    What reads such a row (nothing else can: every other column of it is null, `_LIFECYCLE_COLUMNS`):
    the probes' search for the first death and the first `client-eof` or `signal` after each request on its
    (capture, connection) in `seq` order; its server (the eras' per-server rows, the watcher's
    servers); and its time, as the latest of its file's kept rows (the watcher's horizon). So a row
    is dropped when it is earlier than the latest row its file keeps anyway and either its event is
    read by nothing, or it follows a death on the same capture, connection and server with no
    request between them: then no request has it as its first death (that death comes first) and
    a later `client-eof` compares with that death the way any after it does; or it is a death or
    `client-eof` that follows an ending `signal` so: every request before it finds that signal
    first, and a death after it proves nothing to any of them. Between them means in
    consecutive records (and batch members) of this frame; a capture's record `seq` numbers are
    unique, so a request in another chunk or file cannot lie between them either.
    """
    kind, event = pl.col("kind"), pl.col("event")
    others = [name for name in messages.columns if name not in _LIFECYCLE_COLUMNS]
    candidate = (
        (pl.col("record_type") == fmt.LIFECYCLE)
        & (kind == "lifecycle")
        & pl.col("conn").is_not_null()
        & pl.all_horizontal(pl.col(name).is_null() for name in others)
        & event.is_in((*_UNREAD_EVENTS, *_AFTER_DEATH_EVENTS))
    ).fill_null(False)
    is_candidate = messages.select(candidate).to_series()
    if not is_candidate.any():
        return is_candidate
    # Runs of rows in frame order, each the record (or batch member) right after the one before it
    # in the same capture, no request among them but maybe the first: within a run `seq` grows, so
    # a window over it sees earlier records first (no sort: rows come in their files' order).
    seq, before = pl.col("seq"), pl.col("seq").shift(1)
    # (`seq > before`: no wrap-around at the top of the range, whatever `seq` a capture claims)
    follows = (seq > before) & ((seq == before + 1) | (seq == (before // MEMBER_SLOTS + 1) * MEMBER_SLOTS))
    linked = ((pl.col("capture") == pl.col("capture").shift(1)) & follows & (kind != "request")).fill_null(False)
    run = ((~linked).cum_sum(), "conn", "server")
    death = (event.is_in(STDIO_DEATHS) & pl.col("flow").is_null()).fill_null(False).cast(pl.UInt32)
    after_death = (death.cum_sum() - death).over(*run) > 0
    # A death after the client's side ended the server (a relayed SIGTERM, say) proves nothing to a
    # request before it, which finds that `signal` first: the death is read by nothing either. A
    # probe spawn the host kills once answered keeps as many rows as before signals were read.
    ending = ((event == fmt.EV_SIGNAL) & pl.col("signal").is_in(fmt.ENDING_SIGNALS)).fill_null(False).cast(pl.UInt32)
    after_ending = (ending.cum_sum() - ending).over(*run) > 0
    signal_only = (event == fmt.EV_SIGNAL) & (ending == 0)  # Ctrl-Z's stop and continue: read by nothing
    latest = pl.col("ts").filter(~pl.col("_gone")).max().over("file")
    unread = (
        pl.col("_cand")
        & (pl.col("ts") < latest).fill_null(False)
        & (
            event.is_in(_UNREAD_EVENTS)
            | signal_only
            # an ending signal after another is kept: it is what requests between them find first
            | (event.is_in(_AFTER_DEATH_EVENTS) & (after_death | (after_ending & (event != fmt.EV_SIGNAL))))
        )
    )
    rows = messages.select("file", "capture", "conn", "server", "seq", "ts", "kind", "event", "flow", "signal")
    return rows.with_columns(_cand=is_candidate, _gone=is_gone).select(unread.fill_null(False)).to_series()


def compacted(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with its text columns written into buffers of their own.

    Polars keeps texts longer than 12 bytes in buffers shared by every frame filtered from the same
    one: the few rows condensing keeps would hold the texts of every row read (the kept rows of
    2 GB of captures: 65 MB of memory, 19 MB of it their own). Appending "" copies each text.
    """
    texts = [name for name, dtype in frame.schema.items() if dtype == pl.String()]
    return frame.with_columns(pl.concat_str(pl.col(name), pl.lit("")) for name in texts) if texts else frame
