"""Derived frames several rules share, computed once per analysis.

`requests` is the client-decision view: every client→server request in time order per server and
client, a narrow row each. `probe_rows` adds, for the probes only, what the server answered and what
the client sent next (on the same connection, else its next request to the same server on another
connection).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Final

import polars as pl

from addon import format as fmt
from analyzer.condense import Rows, Traffic, has_rows, traffic_of
from analyzer.eras import well_formed_modern
from analyzer.identity import UNKNOWN_CLIENT, connection_identities
from analyzer.messages import FLOW_KEY_DTYPE, as_strings
from analyzer.probes import LEGACY_CODES, UNSUPPORTED_CODES, UPSTREAM_FAILURE_EVENTS, handshake_only
from analyzer.rules.frames import as_lazy, grouped, matching, pair_key, picked
from analyzer.rules.options import RuleOptions
from analyzer.schema import INITS_SCHEMA, MESSAGES_SCHEMA, MODERN_VERSIONS, PROBES_SCHEMA
from analyzer.spill import Spill

UPSTREAM_EVENT_PREFIX: Final = "http-error:"
"""The messages frame's `event` of an `http.error` record is this prefix and the record's `kind`."""
PROBE_METHOD: Final = "server/discover"
INIT_METHOD: Final = "initialize"
NOT_REAL: Final = (PROBE_METHOD, INIT_METHOD, "ping")
"""Requests that only negotiate or keep alive; everything else is a real request (tools/call, …)."""
__all__ = ["UNSUPPORTED_CODES", "RuleContext", "era_of_probe", "modern_list", "request_style"]

_NEXT_COLUMNS: Final = ("file", "line", "ts", "method", "id", "meta_version", "has_envelope", "conn", "init_outcome")
_VIEW_COLUMNS: Final = (
    "file",
    "line",
    "capture",
    "server",
    "transport",
    "conn",
    "seq",
    "ts",
    "method",
    "meta_version",
    "session_id",
    "peer",
)
"""The columns of `RuleContext.requests`: what rules read of every request."""
_VIEW_CATEGORICALS: Final = ("transport", "conn", "method", "meta_version", "session_id", "peer")
VIEW_SLICE_ROWS: Final = 1 << 17
"""A spilled request view is written this many rows at a time (about 8 MB)."""
VIEW_BUCKET_ROWS: Final = 1 << 18
"""A spilled request view is built from buckets of about this many requests (16 MB of view rows):
one bucket is in memory at a time, each read once more (`_buckets`)."""
VIEW_MEMORY_ROWS: Final = 1 << 20
"""A request view of up to this many rows (about 64 MB) is built and kept in memory when the requests
it is built from are (`RuleContext._view_in_memory`): writing it to the spill and reading it back
in every rule costs more than it holds. Bigger views, and views of spilled requests, are spilled."""
VIEW_SORT_ONCE_ROWS: Final = 1 << 17
"""A request view of up to this many rows is put in order by one sort on all its keys (`_view_order`)."""
_DETAIL_COLUMNS: Final = ("flow", "id", "has_envelope", "header_version", "header_method")
"""Request columns only `probe_rows` carries (read for the probes and the requests after them)."""


@dataclass
class RuleContext:
    """The analysis frames the rules read, plus shared derived frames (computed lazily, once)."""

    messages: pl.LazyFrame
    probes: pl.LazyFrame
    inits: pl.LazyFrame
    options: RuleOptions
    traffic_facts: Traffic | None = None
    """What condensing dropped (`analyzer.condense`); computed from `messages` when not given."""
    spill: Spill | None = None
    """Where the request view is written once built (`analyzer.spill`); None: it stays in memory."""
    identities: Callable[[pl.LazyFrame, Traffic, Rows | None], pl.DataFrame] = connection_identities
    """How `conn_clients` is computed: `connection_identities`, or what gives the same frame (`watch`
    carries it across its rounds, `analyzer.watch_state`)."""
    lexsort_view: bool = False
    """Put a request view kept in memory in order with numpy (`_lexsorted`): `watch`, which sorts it
    every round, sets it; `analyze`, which sorts it once, does not import numpy for it."""
    _released: bool = field(default=False, init=False, repr=False)

    @classmethod
    def from_analysis(cls, analysis: Any, options: RuleOptions, spill: Spill | None = None) -> RuleContext:
        """Read `messages`, `probes` and `inits` from any object that has them (missing ones are empty).

        An analysis that carries a `rule_context` (the pipeline sets one) gets that context back with
        `options` set, so the derived frames, which do not depend on options, are computed once.
        """
        shared = getattr(analysis, "rule_context", None)
        if isinstance(shared, cls):
            shared.options = options
            return shared
        return cls(
            messages=as_lazy(getattr(analysis, "messages", None), MESSAGES_SCHEMA),
            probes=as_lazy(getattr(analysis, "probes", None), PROBES_SCHEMA),
            inits=as_lazy(getattr(analysis, "inits", None), INITS_SCHEMA),
            options=options,
            traffic_facts=getattr(analysis, "traffic", None),
            spill=spill,
        )

    @cached_property
    def traffic(self) -> Traffic:
        """`traffic_facts`, or the same facts computed from `messages` (never condensed then)."""
        if self.traffic_facts is not None:
            return self.traffic_facts
        return traffic_of(self.messages.collect())

    def release_moved(self) -> Traffic:
        """Build every frame that reads the rows condensing moved out, then let those rows go.

        The moved requests (`Traffic.requests`, a row per condensed request: about 80 MB at 2 GB of
        input) are read only by `conn_clients`, `requests` and `probe_rows`; the dropped answers
        (`Traffic.answers`, about 23 MB) only by `responses`. Each goes as soon as what reads it
        exists, and the facts without them are returned. Whoever else holds the original `Traffic`
        keeps the rows alive: the caller should hold it only through the context while this runs.
        (In an analysis they are scans of files on disk already, `analyzer.spill`: what goes then is
        the small part of them that stayed in memory.)
        """
        # the answers first: while the request frames are built, they are gone already
        _ = self.responses
        self._keep(replace(self.traffic, answers=Traffic().answers))
        _ = self.conn_clients, self.requests, self.probe_rows
        self._released = True
        self._keep(replace(self.traffic, requests=None))
        return self.traffic

    def _keep(self, traffic: Traffic) -> None:
        self.traffic_facts = traffic
        self.__dict__["traffic"] = traffic  # the cached property's slot

    def _moved(self) -> Rows | None:
        """`Traffic.requests`, the moved requests; refused once `release_moved` let them go."""
        if self._released:
            raise RuntimeError("the moved requests were released (RuleContext.release_moved)")
        return self.traffic.requests

    def _moved_requests(self) -> pl.LazyFrame:
        """Every request, kept and moved (`Traffic.request_rows`); refused once `release_moved` ran."""
        self._moved()
        return self.traffic.request_rows(self.messages)

    @cached_property
    def conn_clients(self) -> pl.DataFrame:
        """One client per (server, conn): its identity (`analyzer.identity`), as text in `client` and
        as parts in `identity`, plus the connection's first and last time. A stdio capture has one
        connection per spawn."""
        return self.identities(self.messages, self.traffic, self._moved())

    @cached_property
    def upstream_failures(self) -> pl.DataFrame:
        """The recorders' failures on the server's side, one row each (`server`, `capture`, `file`,
        `line`, `ts`, `conn`, `flow`, `kind`, `error`).

        The `http.error` records of `UPSTREAM_FAILURE_KINDS`: the proxy could not connect upstream,
        the upstream reset or closed the exchange, it timed out, or another proxy failure. The client
        then got the proxy's own 502 (or a cut stream), not an answer from the server. And the stdio
        tee's `spawn-failed` (kind `spawn-failed`): the server command could not start, as the
        recorders' live counters count it among the upstream errors.
        """
        failures = (
            self.messages.filter(
                ((pl.col("record_type") == fmt.HTTP_ERROR) & pl.col("event").is_in(UPSTREAM_FAILURE_EVENTS))
                | ((pl.col("record_type") == fmt.LIFECYCLE) & (pl.col("event") == fmt.EV_SPAWN_FAILED))
            )
            .select(
                "server",
                "capture",
                "file",
                "line",
                "ts",
                "conn",
                "flow",
                kind=pl.col("event").cast(pl.String).str.strip_prefix(UPSTREAM_EVENT_PREFIX),
                error="error_message",
            )
            .pipe(as_strings)
            .sort("file", "line")
            .collect()
            # rechunked: polars 2.1 panics when `pl.format` reads a filtered string column as it
            # comes out of the filter (binview index assertion); the rows are few
            .rechunk()
        )
        # A flow cut for its silence (`timeout`: the proxy's idle timer, `--idle-timeout`) is the
        # server's failure only while a request on it waited for the answer: a quiet event stream
        # (a legacy client's GET stream the server had nothing to send on) was up all along. Before
        # any flow (`flow` null), connecting upstream timed out. Looked up only for such flows.
        idle = failures.filter((pl.col("kind") == "timeout") & pl.col("flow").is_not_null())
        if idle.is_empty():
            return failures
        waiting = self.http_requests_unanswered().select("capture", "flow").pipe(as_strings).unique()
        quiet = idle.lazy().join(waiting, on=["capture", "flow"], how="anti").select("file", "line").collect()
        return failures.join(quiet, on=["file", "line"], how="anti", maintain_order="left").rechunk()

    def http_requests_unanswered(self) -> pl.LazyFrame:
        """The client's requests of HTTP flows no answer was recorded to (`capture`, `server`, `flow`,
        `seq`, `file`, `line`, `method`).

        Condensing moved most answered requests out of the messages frame, not those whose answer it
        keeps (a probe's, an `initialize`'s, an error): those answers name their request by `req_seq`.
        """
        answered = self.messages.filter(
            (pl.col("dir") == fmt.S2C)
            & pl.col("req_seq").is_not_null()
            & pl.col("kind").is_in(("response", "error", "invalid"))
        ).select("capture", seq="req_seq")
        return (
            # the client's: a request of the server's on a flow's stream (sampling, elicitation) waits
            # for the client, not for the server
            self.messages.filter(
                (pl.col("dir") == fmt.C2S) & (pl.col("kind") == "request") & pl.col("flow").is_not_null()
            )
            .select("capture", "server", "flow", "seq", "file", "line", "method")
            .join(answered, on=["capture", "seq"], how="anti")
        )

    def upstream_failure_lines(self) -> pl.DataFrame:
        """`file`, `line` (the keys of `upstream_failures`), `failure` (`kind: error`)."""
        return self.upstream_failures.select(
            "file", "line", failure=pl.format("{}: {}", "kind", pl.col("error").fill_null("?"))
        )

    @cached_property
    def requests(self) -> Rows:
        """Client requests in time order per (server, client), one narrow row each.

        Every rule that reads all requests needs only these columns; what a probe was answered and
        what the client sent next are in `probe_rows` (the few probes), so this frame, which has a
        row per request of the input, stays narrow. `_i` is the row's position in this order.

        With a `spill`, the frame is built a bucket of rows at a time (`_buckets`), written there and read back
        lazily: only one bucket of requests is ever in memory, and each rule reads only the columns
        and rows it needs. Readers call `.lazy()` on it either way.
        """
        rows = self._moved_requests().select(*_VIEW_COLUMNS, well_formed_modern().alias("is_wf_modern"))
        cat = pl.Categorical()
        clients = self.conn_clients.select(pair_key("server", "conn", cast=cat), pl.col("client").cast(cat))
        # a record without a server or conn has no key: no client to look up (and keys must be unique)
        clients = clients.filter(pl.col("_key").is_not_null())
        every = (
            # A row per request: every repetitive column is categorical (4 bytes a row instead of 16
            # and more), `server` and `client` too; rules turn them into strings on their small
            # results. `evidence()` turns `file` back into strings, `responses` keys `capture` alike.
            rows.with_columns(pl.col("file", "capture", "server", *_VIEW_CATEGORICALS).cast(pl.Categorical()))
            # Looked up, not joined: a join would copy every column, a look-up adds one.
            .with_columns(
                pair_key("server", "conn")
                .replace_strict(clients["_key"], clients["client"], default=None, return_dtype=pl.Categorical())
                .fill_null(pl.lit(UNKNOWN_CLIENT).cast(pl.Categorical()))
                .alias("client")
            )
            .with_columns(
                (pl.col("method") == PROBE_METHOD).fill_null(False).alias("is_probe"),
                (pl.col("method") == INIT_METHOD).fill_null(False).alias("is_init"),
                (~pl.col("method").is_in(NOT_REAL)).fill_null(False).alias("is_real"),
            )
        )
        columns = [*_VIEW_COLUMNS, "client", "is_probe", "is_init", "is_real", "is_wf_modern"]
        if self._view_in_memory():
            # one contiguous frame: gathering from hundreds of chunks (a file's each) costs several times more
            unsorted = every.collect().rechunk()
            # sorting positions, then gathering each column once, copies rows once
            order = _view_order(unsorted, self.lexsort_view)
            return unsorted.select(pl.col(columns).gather(order)).with_row_index("_i")
        # The buckets come in the view's order (`_buckets`: their (server, client) codes, then time),
        # and each is sorted on its own: together, the view's order. Each is read anew from the
        # (spilled) requests, and written a slice of rows at a time.
        parts = []
        offset = 0
        for bucket in _buckets(every, clients):
            unsorted = every.filter(bucket).collect(engine="streaming").rechunk()
            order = _view_order(unsorted)
            for start in range(0, order.len(), VIEW_SLICE_ROWS):
                positions = order.slice(start, VIEW_SLICE_ROWS)
                part = unsorted.select(pl.col(columns).gather(positions)).with_row_index("_i", offset=offset + start)
                parts.append(self.spill.put(part))
            offset += unsorted.height
        if not parts:
            parts.append(self.spill.put(every.select(columns).head(0).collect().with_row_index("_i")))
        return pl.concat(parts, how="vertical")

    def _view_in_memory(self) -> bool:
        """Whether the request view is built and kept in memory: without a spill, or when the moved
        requests it is built from are held in memory (none was written to the spill) and the view has
        at most `VIEW_MEMORY_ROWS` rows. Without moved requests (captures of a spawn per call, whose
        requests all stay in the messages frame) it is spilled as before: there the messages frame
        is the big one."""
        if self.spill is None:
            return True
        if not isinstance(self._moved(), pl.DataFrame):
            return False
        return self._moved_requests().select(pl.len()).collect().item() <= VIEW_MEMORY_ROWS

    def _request_details(self, keys: pl.DataFrame) -> pl.LazyFrame:
        """The wide request columns (`_DETAIL_COLUMNS`) of the requests at `keys` (`capture`, `seq`),
        as text; `capture` stays categorical, as the request view's (the probes' rows join on it)."""
        every = self._moved_requests()
        # matched in the request rows' own dtypes (`matching`): only the few wanted rows become strings
        return (
            matching(every.select("capture", "seq", *_DETAIL_COLUMNS), keys.select("capture", "seq").unique())
            .lazy()
            .with_columns(
                pl.col(pl.Categorical).exclude("capture").cast(pl.String),
                pl.col("capture").cast(pl.Categorical()),
                *([pl.col("flow").cast(pl.String)] if every.collect_schema()["flow"] == FLOW_KEY_DTYPE else []),
            )
            .unique(["capture", "seq"], keep="first")
        )

    @cached_property
    def probe_rows(self) -> pl.DataFrame:
        """The classified probes among `requests`, with their outcome and the client's next request.

        The next request is the next one on the same connection, else the client's next request to
        the same server on another connection (`next_same_conn` says which).
        """
        reqs = self.requests
        probes = self.probes.select(
            "file",
            "line",
            "outcome",
            "well_formed",
            "requested_version",
            pl.col("versions").alias("probe_versions"),
            "modern_versions",
            "ttl_ms",
            pl.col("error_code").alias("probe_error_code"),
            pl.col("http_status").alias("probe_http_status"),
            "answer_file",
            "answer_line",
            "answer_ts",
            pl.col("peer").alias("probe_peer"),
        )
        # Positions only, looked up for the few probes (no window over every request): the next
        # request on the probe's connection is the next position with the same (server, conn) —
        # a connection belongs to one client, so it lies inside the client's stretch of positions;
        # the client's next request is the next position, when it is still the same client.
        # Every request is read by filters alone (`picked`), never by a join: over a view on disk a
        # join holds the whole view in memory.
        probe_view = picked(reqs.lazy(), pl.col("is_probe"))
        probe_at = probe_view.lazy().select("_i", "server", "conn", "client")
        # the request right after each probe, picked by position
        after = (
            picked(reqs.lazy(), pl.col("_i").is_in((probe_view.get_column("_i") + 1).implode()))
            .lazy()
            .select(pl.col("_i") - 1, _after_server="server", _after_client="client", _after_conn="conn", _ac="_i")
        )
        # a row per probe, read twice below: collected once, not once per query that reads it
        with_after = (
            probe_at.join(after, on="_i", how="left")
            .with_columns(
                _on_conn=((pl.col("_after_server") == pl.col("server")) & (pl.col("_after_conn") == pl.col("conn")))
                .fill_null(False)
            )
            .collect()
            .lazy()
        )
        # Most often that request is on the probe's connection. Only for the other probes is the next
        # request on their connection looked up further on, among the requests of those connections
        # alone (one integer key per (server, conn), as `probe_costs` does).
        # sorted: an as-of join needs its left side in order, and a join's output order is not kept
        elsewhere = (
            with_after.filter(~pl.col("_on_conn")).select("_i", pair_key("server", "conn")).sort("_i").collect()
        )
        # picked by a filter, which keeps the view's order (the as-of join's right side needs it)
        wanted = elsewhere.get_column("_key").unique().implode()
        candidates = picked(reqs.lazy().select(pair_key("server", "conn"), _sc="_i"), pl.col("_key").is_in(wanted))
        further = elsewhere.lazy().join_asof(
            candidates.lazy(),
            left_on="_i",
            right_on="_sc",
            by="_key",
            strategy="forward",
            allow_exact_matches=False,
            check_sortedness=False,
        ).select("_i", "_sc")
        nexts = (
            with_after.join(further, on="_i", how="left")
            .with_columns(
                _sc=pl.when("_on_conn").then(pl.col("_ac")).otherwise(pl.col("_sc")),
                _ac=pl.when(
                    (pl.col("_after_server") == pl.col("server")) & (pl.col("_after_client") == pl.col("client"))
                ).then(pl.col("_ac")),
            )
            .select("_i", _next=pl.coalesce("_sc", "_ac"), next_same_conn=pl.col("_sc").is_not_null())
        )
        # Keyed on the view's categoricals (`file`, `capture`), not on their text: every spawn of a
        # capture directory sends a probe, and 100,000 probes' paths as text cost more than the
        # frame they make. Joins keep the view's order (`_i`), so the result needs no sort.
        rows = (
            probe_view.lazy()
            .join(
                probes.with_columns(pl.col("file").cast(pl.Categorical())),
                on=["file", "line"],
                how="inner",
                maintain_order="left",
            )
            .join(nexts, on="_i", how="left", maintain_order="left")
            .collect()
        )
        next_rows = picked(reqs.lazy(), pl.col("_i").is_in(rows.get_column("_next").implode()))
        # one look-up over every request for both the probes and the requests after them
        details = self._request_details(pl.concat([r.select("capture", "seq") for r in (rows, next_rows)])).collect()
        # a line holds several `initialize`s when it is a JSON-RPC batch: told apart by id, and one
        # row per key kept, so that the join below adds no row
        inits = self.inits.select(
            pl.col("file").cast(pl.Categorical()), "line", "id", pl.col("outcome").alias("init_outcome")
        ).unique(["file", "line", "id"], keep="first", maintain_order=True)
        next_cols = (
            next_rows.lazy()
            .join(details.lazy(), on=["capture", "seq"], how="left", maintain_order="left")
            .join(inits, on=["file", "line", "id"], how="left", maintain_order="left")
            .select("_i", *[pl.col(c).alias(f"next_{c}") for c in _NEXT_COLUMNS])
        )
        # The added columns alone go through the joins (a row each: the right sides' keys are unique),
        # then stand beside the probes' own: their columns are not copied once per join.
        added = (
            rows.lazy()
            .select("capture", "seq", "_next")
            .join(details.lazy(), on=["capture", "seq"], how="left", maintain_order="left")
            .join(next_cols, left_on="_next", right_on="_i", how="left", maintain_order="left")
            .drop("capture", "seq", "_next")
            .collect()
        )
        return (
            rows.hstack(added.get_columns())
            .lazy()
            .with_columns(
                pl.col("next_same_conn").fill_null(False),
                (pl.col("next_method") == PROBE_METHOD).fill_null(False).alias("next_is_probe"),
                (pl.col("next_method") == INIT_METHOD).fill_null(False).alias("next_is_init"),
                # a modern request is one that carries the version envelope (the probe included)
                (pl.col("next_meta_version").is_not_null() | (pl.col("next_method") == PROBE_METHOD))
                .fill_null(False)
                .alias("next_is_modern"),
            )
            .drop("_next")
            # the few probe rows meet string columns of other frames: only the paths stay categorical
            .with_columns(
                pl.col("server", "client", *_VIEW_CATEGORICALS, "next_method", "next_meta_version", "next_conn").cast(
                    pl.String
                )
            )
            .collect()
        )

    @cached_property
    def responses(self) -> Rows:
        """Server answers to requests, keyed by the request's (capture, seq): unique across rotated parts
        (`resp_file` is the answer's part, which can follow its request's).

        The first answer of each request: the kept answer rows and the answers condensing dropped
        (`Traffic.answers`: results to enveloped requests), in the order they were seen (`seq`).
        A row per answered request: `resp_kind` and `resp_peer` are categoricals, like the request view.
        When the moved requests are on disk (big inputs), so is this frame, written to the `spill`
        (56 MB of heap for the rest of an analysis of 4 GB of captures otherwise); readers call
        `.lazy()` on it either way.
        """
        spill = self.spill if isinstance(self.traffic.requests, pl.LazyFrame) else None
        kept = self.messages.filter(
            (pl.col("dir") == "s2c") & pl.col("kind").is_in(["response", "error"]) & pl.col("req_seq").is_not_null()
        ).select(
            "capture",
            pl.col("req_seq").alias("seq"),
            pl.col("file").cast(pl.Categorical()).alias("resp_file"),
            pl.col("line").alias("resp_line"),
            pl.col("ts").alias("resp_ts"),
            pl.col("kind").cast(pl.Categorical()).alias("resp_kind"),
            pl.col("error_code").alias("resp_error_code"),
            pl.col("peer").cast(pl.Categorical()).alias("resp_peer"),
            pl.col("seq").alias("_answer_seq"),
        )
        dropped = self.traffic.answers.lazy().select(
            "capture",  # categorical, like the messages frame's in an analysis
            pl.col("req_seq").alias("seq"),
            pl.col("file").cast(pl.Categorical()).alias("resp_file"),
            pl.col("line").alias("resp_line"),
            pl.col("ts").alias("resp_ts"),
            pl.lit("response").cast(pl.Categorical()).alias("resp_kind"),
            pl.lit(None, pl.Int64()).alias("resp_error_code"),
            pl.col("peer").cast(pl.Categorical()).alias("resp_peer"),
            pl.col("seq").alias("_answer_seq"),
        )
        frames = [kept]
        if has_rows(self.traffic.answers):
            frames.append(dropped)
        every = pl.concat(frames, how="vertical").with_columns(
            pl.col("capture").cast(pl.Categorical())  # joined with `requests` on it
        )
        # Big inputs: streamed to disk as they are read (held whole, they and their copies were
        # +155 MB at 4 GB of captures), and checked there.
        answers: Rows = spill.sink(every) if spill is not None else every.collect()
        # A request answered twice is rare: only when one is, the answers are put in the order they
        # were seen to keep each request's first (a sort and a de-duplication copy every row).
        if _answered_twice(answers):
            first = (
                answers.lazy()
                .collect()
                .sort("_answer_seq", maintain_order=True)
                .unique(subset=["capture", "seq"], keep="first", maintain_order=True)
            )
            answers = spill.put(first) if spill is not None else first
        return answers.drop("_answer_seq")


def _buckets(rows: pl.LazyFrame, clients: pl.DataFrame) -> list[pl.Expr]:
    """Filters that cut `rows` (the view's rows) into buckets of about `VIEW_BUCKET_ROWS` rows or
    fewer that follow each other in the view's order (`_view_order`): runs of whole (server, client)
    pairs in the order of their codes (a missing server last), and a pair with more rows than that
    cut by time into stretches of about that many (`_stretches`). Rows of one pair and time are never
    apart, so each bucket sorted on its own is its part of the view. Bounded by rows, not by
    servers: one busy client of one server is most of some inputs.

    A pair's rows are named by their connections (`clients`: `_key` of (server, conn), `client`):
    a filter on columns as read is applied while reading, one on the looked-up client only after
    every row was read.
    """
    key = pair_key("server", "conn")
    # `_s` names the rows of a server without a connection, whose `_key` is null
    per_conn = rows.group_by(key, _s=pl.col("server").to_physical()).agg(pl.len()).collect(engine="streaming")
    unknown = pl.Series([UNKNOWN_CLIENT], dtype=pl.Categorical()).to_physical().item()
    pairs = (
        per_conn.join(clients, on="_key", how="left")
        .with_columns(
            _pair=pl.col("_s").cast(pl.UInt64()) * (1 << 32)
            + pl.col("client").to_physical().fill_null(unknown).cast(pl.UInt64())
        )
        .group_by("_pair")
        .agg(pl.col("len").sum(), pl.col("_key"), pl.col("_s"))
        .sort("_pair", nulls_last=True)
    )
    buckets: list[pl.Expr] = []
    runs = grouped(((connections, n) for _, n, *connections in pairs.iter_rows()), VIEW_BUCKET_ROWS)
    for run, total in runs:
        if total > VIEW_BUCKET_ROWS:  # one pair alone, cut by time
            buckets.extend(_stretches(rows, _connections(run)))
        else:
            buckets.append(_connections(run))
    return buckets


def _connections(run: list[list[list[int | None]]]) -> pl.Expr:
    """The rows of the connections in `run`: per pair, its connections' `_key`s (of server and conn)
    and their server codes."""
    both = [key for keys, _ in run for key in keys if key is not None]
    codes = [(key, server) for keys, servers in run for key, server in zip(keys, servers, strict=True)]
    no_conn = sorted({server for key, server in codes if key is None and server is not None})
    keep = pair_key("server", "conn").is_in(pl.Series(both, dtype=pl.UInt64()).implode())
    if no_conn:
        server = pl.col("server").to_physical()
        keep = keep | (pl.col("conn").is_null() & server.is_in(pl.Series(no_conn, dtype=pl.UInt32()).implode()))
    if any(server is None for _, server in codes):
        keep = keep | pl.col("server").is_null()
    return keep.fill_null(False)


def _stretches(rows: pl.LazyFrame, same: pl.Expr) -> list[pl.Expr]:
    """Filters that cut one pair's rows (`same`) at every `VIEW_BUCKET_ROWS`-th of their times, in order.

    A time equal to a cut goes after it. Rows without a time (null, NaN) sort last in the view and
    go to the last stretch: each row is in exactly one stretch, whatever its `ts`."""
    ts = pl.col("ts")
    times = (
        rows.filter(same)
        .select(ts.drop_nulls().drop_nans().sort())
        .collect(engine="streaming")
        .to_series()
    )
    cuts = times.gather_every(VIEW_BUCKET_ROWS, offset=VIEW_BUCKET_ROWS).unique(maintain_order=True).to_list()
    if not cuts:
        return [same]
    before = [ts < cut for cut in cuts]
    stretches = [same & before[0]]
    stretches += [same & ~below & above for below, above in itertools.pairwise(before)]
    stretches.append(same & (~before[-1]).fill_null(True))
    return stretches


def _view_order(unsorted: pl.DataFrame, lexsort: bool = False) -> pl.Series:
    """The positions of `unsorted`'s rows in (server, client, ts, seq) order, ties in row order.

    The (server, client) groups come in the order of their categorical codes (only the order inside
    them matters). Up to `VIEW_SORT_ONCE_ROWS` rows, one sort on the three keys; beyond, one sort on
    the pair alone, then each group's stretch sorted on (ts, seq): a sort of every row on the three
    keys at once encodes them all together, twice the memory (+100 MB against +46 MB for 1.1 M
    rows), in the same time. A stretch costs its own calls, though, which a few thousand rows do not
    repay (47,000 rows of 28 groups, `erascope watch`'s 100 MB backlog: 13 ms against 27–38 ms).
    """
    key = pair_key("server", "client")
    if unsorted.height <= VIEW_SORT_ONCE_ROWS:
        keys = unsorted.select(key, "ts", "seq")
        if lexsort and not any(column.null_count() for column in keys.get_columns()):
            return _lexsorted(keys)
        return keys.select(pl.arg_sort_by("_key", "ts", "seq", nulls_last=True, maintain_order=True)).to_series()
    by_pair = unsorted.select(pl.arg_sort_by(key, nulls_last=True, maintain_order=True)).to_series()
    lengths = unsorted.select(key.gather(by_pair).rle().struct.field("len")).to_series()
    parts = [by_pair.clear()]
    offset = 0
    for length in lengths:
        positions = by_pair.slice(offset, length)
        offset += length
        inside = unsorted.select(pl.col("ts", "seq").gather(positions)).select(
            pl.arg_sort_by("ts", "seq", nulls_last=True, maintain_order=True)
        )
        parts.append(positions.gather(inside.to_series()))
    return pl.concat(parts)


def _lexsorted(keys: pl.DataFrame) -> pl.Series:
    """The positions of `keys`' rows (`_key`, `ts`, `seq`, no nulls) in that order, ties in row order,
    by numpy's `lexsort`: it is stable, and its merge sort runs through the stretches already in order
    (rows come a capture at a time, in time order) where polars encodes every key of every row first.
    47,000 rows of `erascope watch`'s 100 MB backlog: 3.7-4.5 ms against 10-11 ms; numpy's import
    (about 90 ms) is paid once per process, so `watch` uses it (`RuleContext.lexsort_view`), `analyze`
    (one sort a run) does not."""
    import numpy as np

    order = np.lexsort([keys.get_column(c).to_numpy() for c in ("seq", "ts", "_key")])
    return pl.Series("_key", order, dtype=pl.get_index_type())


def _answered_twice(answers: Rows) -> bool:
    """Whether two rows of `answers` share (capture, seq), checked on one integer per row: the capture's
    categorical code (plus one, so a missing capture is a value of its own) above the seq's bits.
    Rows on disk are read as a stream, two columns at a time.

    A struct of both columns is encoded row by row first: +149 MB for 613 k answers (the 2 GB
    analysis' peak) and five times the time. Seqs leave room for batch members
    (`analyzer.messages.MEMBER_SLOTS`, 20 bits), so 1 GB of captures has seqs of 39 bits; when they
    do not fit beside the code, their dense ranks do (distinct seqs keep distinct ranks).
    """
    keys = answers.lazy().select("capture", "seq")
    code = pl.col("capture").cast(pl.Categorical()).to_physical().cast(pl.UInt64()) + 1
    seq = pl.col("seq")
    n, lo, hi, nulls, top = (
        keys.select(pl.len(), seq.min(), seq.max().alias("hi"), seq.null_count().alias("nulls"), code.max())
        .collect(engine="streaming")
        .row(0)
    )
    if not n:
        return False
    top = top or 0
    fits = isinstance(lo, int) and isinstance(hi, int) and lo >= 0 and nulls == 0
    if not (fits and hi.bit_length() + top.bit_length() <= 64):
        # ranks start at 1: a missing seq is 0, one value of its own, as a struct's null field is
        keys = keys.collect(engine="streaming").select("capture", seq.rank("dense").fill_null(0)).lazy()
        hi = keys.select(seq.max()).collect().item()
    assert isinstance(hi, int)
    key = code.fill_null(0) * pl.lit(1 << hi.bit_length(), pl.UInt64()) + seq.cast(pl.UInt64())
    # counting distinct keys builds one hash table; `is_duplicated` builds it and marks every row
    return keys.select(key.n_unique()).collect(engine="streaming").item() < n


def era_of_probe() -> pl.Expr:
    """The era a probe answer shows: `modern`, `legacy`, or null when the answer proves nothing."""
    outcome = pl.col("outcome")
    code = pl.col("probe_error_code")
    modern = pl.col("modern_versions").fill_null(False)
    return (
        pl.when((outcome == "discover-result") & modern)
        .then(pl.lit("modern"))
        .when((outcome == "unsupported-version") & modern)
        .then(pl.lit("modern"))
        .when(outcome == "modern-error")
        .then(pl.lit("modern"))
        .when((outcome == "discover-result") & ~modern & handshake_only("probe_versions"))
        .then(pl.lit("legacy"))
        # as `analyzer.eras.evidence_frame` reads it: a legacy error code, or an HTTP 4xx without a
        # JSON-RPC error; a 5xx without one (the server failed) or an unknown code proves no era
        .when(
            (outcome == "legacy-answer")
            & (
                code.is_in(LEGACY_CODES)
                | (code.is_null() & pl.col("probe_http_status").is_between(400, 499))
            ).fill_null(False)
        )
        .then(pl.lit("legacy"))
        .otherwise(pl.lit(None, dtype=pl.String()))
    )


def request_style() -> pl.Expr:
    """The era a non-probe request of `RuleContext.requests` acts in: `modern` (it carries the version
    envelope) or `legacy` (the handshake, a session id, or a bare request)."""
    return (
        pl.when(pl.col("is_init") | pl.col("session_id").is_not_null())
        .then(pl.lit("legacy"))
        .when(pl.col("meta_version").is_not_null())
        .then(pl.lit("modern"))
        .otherwise(pl.lit("legacy"))
    )


def modern_list(col: str) -> pl.Expr:
    """The known modern versions a version list names (empty list when none or null)."""
    return (
        pl.col(col)
        .fill_null(pl.lit([], dtype=pl.List(pl.String())))
        .list.set_intersection(pl.lit(sorted(MODERN_VERSIONS), dtype=pl.List(pl.String())))
    )
