"""What `erascope watch` carries across its rounds instead of deriving it again from a server's whole
history (`analyzer.watch`).

`CarriedIdentities`: the connections' client identities (`analyzer.identity.connection_identities`).
A connection's identity is a function of its own rows (the first clientInfo, User-Agent, address and
host process by time), its first session id, and the connection that opened that session (the first
named connection carrying it). So a connection with no new row since its identity was computed
keeps it, unless a connection with new rows shares a session with it. A round computes the
identity again only for

- the connections of the lines read since the last computation (and those never computed before);
- every connection that carries a session id one of those carries (its owner may have changed);

from the rows of those connections and of every connection sharing a session with them (what the
owners are chosen from), and takes the others' from the last round. The result is the frame
`connection_identities` gives on the whole history, row for row.
"""

from __future__ import annotations

import polars as pl

from analyzer.condense import Rows, Traffic, has_rows
from analyzer.facts import FileFacts
from analyzer.identity import IDENTITIES_SCHEMA, connection_identities

_KEYS = ["server", "conn"]
_KEY_SCHEMA = {"server": pl.String(), "conn": pl.String()}


def _keys(frame: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
    """The distinct (server, conn) of `frame`'s rows, as text (a null conn stays null)."""
    return frame.lazy().select(pl.col(_KEYS).cast(pl.String)).unique()


def piece_connections(facts: FileFacts) -> pl.DataFrame:
    """The (server, conn) pairs a piece of lines has rows of: its kept rows, the requests condensing
    moved out, its session ids and its connections."""
    t = facts.traffic
    frames = [_keys(facts.messages), _keys(t.conns), _keys(t.sessions)]
    if t.requests is not None and has_rows(t.requests):
        frames.append(_keys(t.requests))
    return pl.concat(frames).unique().collect()


class CarriedIdentities:
    """`connection_identities`, recomputed per round only for the connections new lines can change.

    Call `touch` with the connections of every piece read (`piece_connections`); the watcher's
    pipeline calls the object in place of `connection_identities`.
    """

    def __init__(self) -> None:
        self._known = pl.DataFrame(schema=IDENTITIES_SCHEMA)
        """The identities computed so far (rows of `IDENTITIES_SCHEMA`, a (server, conn) once each)."""
        self._pending = pl.DataFrame(schema=_KEY_SCHEMA)
        """Connections with rows read since their identity was last computed."""
        self.recomputed = 0
        """Connections whose identity the last call computed (the rest were carried)."""

    def touch(self, connections: pl.DataFrame) -> None:
        """Note that lines of these connections (`server`, `conn` as text) were read."""
        self._pending = pl.concat([self._pending, connections.select(pl.col(_KEYS).cast(pl.String))]).unique()

    def __call__(self, messages: pl.DataFrame | pl.LazyFrame, traffic: Traffic, moved: Rows | None) -> pl.DataFrame:
        """What `connection_identities(messages, traffic, moved)` returns, computing only what changed."""
        present = traffic.conns.select(pl.col(_KEYS).cast(pl.String))
        known = self._known.select(_KEYS)
        # changed or never computed; a null key is matched by nothing: computed every time (they are few)
        stale = pl.concat(
            [
                present.join(self._pending, on=_KEYS, how="semi"),
                present.join(known, on=_KEYS, how="anti"),
                present.filter(pl.any_horizontal(pl.col(_KEYS).is_null())),
            ]
        ).unique()
        sessions = traffic.sessions.select(pl.col("server", "conn", "session_id").cast(pl.String))
        # whose owner can have changed: every connection carrying a session id a stale one carries
        shared = sessions.join(stale, on=_KEYS, how="semi").select("server", "session_id").unique()
        redo = pl.concat([stale, sessions.join(shared, on=["server", "session_id"], how="semi").select(_KEYS)]).unique()
        # what their owners are chosen from: every connection carrying a session id they carry
        theirs = sessions.join(redo, on=_KEYS, how="semi").select("server", "session_id").unique()
        rows_of = pl.concat([redo, sessions.join(theirs, on=["server", "session_id"], how="semi").select(_KEYS)])
        rows_of = rows_of.unique()
        subset = [_only(messages, rows_of), _only(traffic.conns, rows_of), _only(traffic.sessions, rows_of)]
        if moved is not None and has_rows(moved):
            subset.append(_only(moved, rows_of))
        # the few rows of those connections, picked once (the computation reads each source four times)
        rows, conns, sessions_of, *moved_rows = pl.collect_all(subset)
        computed = connection_identities(
            rows, Traffic(conns=conns, sessions=sessions_of), moved_rows[0] if moved_rows else None
        )
        computed = computed.join(redo, on=_KEYS, how="semi", nulls_equal=True)
        self.recomputed = computed.height
        done = present.join(self._pending, on=_KEYS, how="semi")
        self._pending = self._pending.join(done, on=_KEYS, how="anti")
        self._known = pl.concat([self._known.join(redo, on=_KEYS, how="anti"), computed.drop_nulls(_KEYS)])
        null_key = pl.any_horizontal(pl.col(_KEYS).is_null())
        carried = present.filter(~null_key).join(self._known, on=_KEYS, how="left", maintain_order="left")
        # the rows with a null key (few) are this round's computation's; the frame's row order means
        # nothing (`connection_identities`' own joins keep none)
        fresh = computed.filter(null_key)
        return pl.concat([carried.select(list(IDENTITIES_SCHEMA)), fresh.select(list(IDENTITIES_SCHEMA))])


def _only(frame: Rows, keys: pl.DataFrame) -> pl.LazyFrame:
    """The rows of `frame` on the connections `keys` (text), in their order, in the frame's own dtypes."""
    lazy = frame.lazy()
    schema = lazy.collect_schema()
    wanted = keys.lazy().select(pl.col(k).cast(schema[k]) for k in _KEYS)
    return lazy.join(wanted, on=_KEYS, how="semi", maintain_order="left", nulls_equal=True)
