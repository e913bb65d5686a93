"""`erascope watch` by server key: a round analyzes only the servers its new lines touched
(`analyzer.watch`), and the others' results are carried from the round that last analyzed them.

Every verdict and finding is a function of one server key's traffic (analyzer/CLUSTER.md checks it
step by step and rule by rule; `analyze --scheduler` shards by server key on it). A capture part
can hold many servers' traffic (a proxy's), so the watcher keeps each piece of lines it reads
split by server key (`split_by_server`, once per piece: the cost follows the new bytes); a round
hands the pipeline only the touched servers' pieces, and `CarriedResults` merges its verdicts and
findings with the other servers' as `analyzer.cluster.merge` merges shards.

Rows without a server key (`None`) go with every round that analyzes a part holding them: they
match no key, so they are never carried (as the cluster path refuses them, which cannot split them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import polars as pl

from analyzer.condense import Traffic, has_rows
from analyzer.eras import ServerVerdict
from analyzer.facts import FileFacts
from analyzer.findings import Finding
from analyzer.rules import sort_findings

ServerKey = str | None


def _parts(frame: pl.DataFrame) -> dict[ServerKey, pl.DataFrame]:
    """`frame`'s rows by server key (as text; a null key is `None`), each in the frame's order and dtypes."""
    if not frame.height:
        return {}
    keyed = frame.with_columns(pl.col("server").cast(pl.String).alias("_key"))
    return {key[0]: part.drop("_key") for key, part in keyed.partition_by("_key", as_dict=True).items()}


def split_by_server(facts: FileFacts) -> dict[ServerKey, FileFacts]:
    """A piece of lines (`extract_lines`' facts, rows in memory) as one piece per server key.

    Each piece holds its server's message rows and `Traffic`; the dropped answers go with the server
    of the moved request they answer (one condensed exchange: both in this piece), an answer whose
    request is not here with the rows without a key (analyzed with every server: `responses` keys
    answers by their request, so an extra one changes nothing). Each piece keeps the input accounting
    of the whole (records, counts), which the watcher reads only to tell a piece of headers alone;
    malformed lines the watcher notes itself, so the pieces have none.
    """
    t = facts.traffic
    requests = t.requests if isinstance(t.requests, pl.DataFrame) else None
    if t.requests is not None and requests is None:
        raise ValueError("split_by_server takes rows in memory, not spilled ones")
    messages, conns, sessions, servers = (_parts(f) for f in (facts.messages, t.conns, t.sessions, t.servers))
    moved = _parts(requests) if requests is not None else {}
    answers: dict[ServerKey, pl.DataFrame] = {}
    if has_rows(t.answers):
        frame = t.answers if isinstance(t.answers, pl.DataFrame) else t.answers.collect()
        owners = (
            requests.select("capture", "seq", _key=pl.col("server").cast(pl.String)).unique(["capture", "seq"])
            if requests is not None
            else pl.DataFrame(schema={"capture": frame.schema["capture"], "seq": pl.Int64(), "_key": pl.String()})
        )
        keyed = frame.join(
            owners.rename({"seq": "req_seq"}), on=["capture", "req_seq"], how="left", maintain_order="left"
        )
        answers = {k[0]: p.drop("_key") for k, p in keyed.partition_by("_key", as_dict=True).items()}
    keys = set(messages) | set(conns) | set(sessions) | set(servers) | set(moved) | set(answers)
    empty = Traffic()
    out: dict[ServerKey, FileFacts] = {}
    for key in sorted(keys, key=lambda k: (k is not None, k or "")):
        traffic = Traffic(
            conns=conns.get(key, t.conns.clear()),
            sessions=sessions.get(key, t.sessions.clear()),
            servers=servers.get(key, t.servers.clear()),
            answers=answers.get(key, empty.answers),
            requests=moved.get(key),
            rows=messages.get(key, facts.messages.clear()).height + (moved[key].height if key in moved else 0),
        )
        out[key] = replace(facts, messages=messages.get(key, facts.messages.clear()), traffic=traffic, malformed=[])
    return out


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
