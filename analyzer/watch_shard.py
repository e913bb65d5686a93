"""`erascope watch` by server key: a round analyzes only the servers its new lines touched
(`analyzer.watch`), and the others' results are carried from the round that last analyzed them.

Every verdict and finding is a function of one server key's traffic (analyzer/CLUSTER.md checks it
step by step and rule by rule; `analyze --scheduler` shards by server key on it). A capture part
can hold many servers' traffic (a proxy's): when a round touched only some of a part's servers, it
hands the pipeline only their rows (`only_servers`), and `CarriedResults` merges its verdicts and
findings with the other servers' as `analyzer.cluster.merge` merges shards.

The selection is made per round from the part's pieces as read, not kept split by server: the
pieces of one capture are paired again together in every round (`analyzer.load.combine`), and a
pairing call per server instead of one per capture cost more (0.07 CPU s a round on the synthetic
load) than the selection (a filter over the rows of parts not wholly touched).

Rows without a server key (`None`) go with every round that analyzes a part holding them: they
match no key, so they are never carried (the cluster path, which cannot split them, refuses them).

Server keys that share a session are analyzed together (`SessionLinks`): the HTTP+SSE transport
answers a POST to one path on the stream of another, and without `--server` the recorder keys each
path apart, so an answer pairs with its request only when both keys' rows are in the round.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace

import polars as pl

from analyzer.condense import Traffic, has_rows
from analyzer.eras import ServerVerdict
from analyzer.facts import FileFacts
from analyzer.findings import Finding
from analyzer.rules import sort_findings

ServerKey = str | None


def piece_servers(facts: FileFacts, connections: pl.DataFrame) -> set[ServerKey]:
    """The server keys a piece of lines has rows of, kept or condensed away (moved requests, the
    connections and sessions of dropped bookkeeping rows, a server's first and last time), given
    its `analyzer.watch_state.piece_connections`."""
    keys = set(connections.get_column("server").unique().to_list())
    return keys | set(facts.traffic.servers.get_column("server").cast(pl.String).unique().to_list())


class SessionLinks:
    """Groups of server keys whose traffic shares a session id, carried across rounds: a round that
    touches one key of a group analyzes the whole group (`closure`)."""

    def __init__(self) -> None:
        self._first: dict[str, str] = {}
        """Each session id's first server key."""
        self._parent: dict[str, str] = {}
        """Union-find over the keys linked to another: a key's parent, a group's root its own."""

    def add(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Note (session id, server key) pairs seen in lines read."""
        for session, server in pairs:
            first = self._first.setdefault(session, server)
            if first != server:
                a, b = self._root(first), self._root(server)
                if a != b:
                    low, high = sorted((a, b))
                    self._parent[high] = low
                    self._parent.setdefault(low, low)

    def closure(self, servers: set[str]) -> set[str]:
        """`servers` and every key linked to one of them."""
        roots = {self._root(s) for s in servers if s in self._parent}
        return servers | {s for s in self._parent if self._root(s) in roots} if roots else servers

    def _root(self, key: str) -> str:
        while (parent := self._parent.get(key, key)) != key:
            key = parent
        return key


def piece_sessions(facts: FileFacts) -> list[tuple[str, str]]:
    """The (session id, server key) pairs of a piece of lines: its kept rows, sessions and moved requests."""
    t = facts.traffic
    frames = [facts.messages.lazy(), t.sessions.lazy()]
    if t.requests is not None and has_rows(t.requests):
        frames.append(t.requests.lazy())
    pairs = pl.concat(
        [f.select(pl.col("session_id", "server").cast(pl.String)) for f in frames], how="vertical"
    ).drop_nulls()
    return list(pairs.unique().collect().iter_rows())


def _kept(servers: Collection[str]) -> pl.Expr:
    """True on rows of `servers` and rows without a key."""
    key = pl.col("server").cast(pl.String)
    return key.is_null() | key.is_in(list(servers))


def only_servers(facts: FileFacts, servers: Collection[str]) -> FileFacts:
    """A piece of lines (rows in memory) with the rows of `servers`, and those without a server key, only.

    Message rows and every `Traffic` frame are selected by their `server`; the dropped answers,
    which name only their request's (capture, seq), go unless their request is a moved request of
    a server left out (a condensed exchange's answer and request are read in one piece; an answer
    kept with no request of its own changes nothing: `responses` keys answers by their request).
    The input accounting (records, counts) stays the whole piece's: the watcher reads it only to
    tell a piece of headers alone, and notes malformed lines itself.
    """
    t = facts.traffic
    keep = _kept(servers)
    answers = t.answers
    if has_rows(t.requests) and has_rows(t.answers):
        gone = t.requests.lazy().filter(~keep).select("capture", req_seq="seq")
        answers = t.answers.lazy().join(gone, on=["capture", "req_seq"], how="anti", maintain_order="left").collect()
    requests = None if t.requests is None else t.requests.lazy().filter(keep).collect()
    traffic = Traffic(
        conns=t.conns.filter(keep),
        sessions=t.sessions.filter(keep),
        servers=t.servers.filter(keep),
        answers=answers,
        requests=requests,
        rows=t.rows,
    )
    return replace(facts, messages=facts.messages.filter(keep), traffic=traffic)


class CarriedResults:
    """Every server's verdict and findings as of the round that last analyzed it."""

    def __init__(self) -> None:
        self._verdicts: dict[ServerKey, ServerVerdict] = {}
        self._findings: dict[ServerKey, list[Finding]] = {}

    def update(self, analyzed: Iterable[ServerKey], verdicts: list[ServerVerdict], findings: list[Finding]) -> None:
        """Take a round's results: they replace those of every server in `analyzed` (the round read
        all of each one's traffic), including servers the round found nothing about."""
        for key in {*analyzed, *(v.server for v in verdicts), *(f.server for f in findings)}:
            self._verdicts.pop(key, None)
            self._findings.pop(key, None)
        for v in verdicts:
            self._verdicts[v.server] = v
        for f in findings:
            self._findings.setdefault(f.server, []).append(f)

    def verdicts(self) -> list[ServerVerdict]:
        """Every server's verdict, sorted by server key as `analyzer.eras.server_verdicts` sorts (no key first)."""
        return [self._verdicts[k] for k in sorted(self._verdicts, key=lambda k: (k is not None, k or ""))]

    def findings(self) -> list[Finding]:
        """Every server's findings in the rulebook's order (`sort_findings`; stable: findings that tie
        are of one server, in the order its round gave them, as `analyzer.cluster.merge` argues)."""
        return sort_findings([f for fs in self._findings.values() for f in fs])
