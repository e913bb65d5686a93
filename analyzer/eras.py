"""Per-server era verdicts from probe and `initialize` outcomes, with evidence and a timeline.

What counts as evidence (each item has a time and the file:line of the deciding message):

- modern support **yes**: a DiscoverResult naming a modern version; -32022/-32004 (any probe, even
  a malformed one: only a modern server sends them); -32020/-32021; an `initialize` refused with
  -32022/-32004 naming a modern version.
- modern support **no**: a well-formed probe answered with a legacy error (-32601, -32602, -32600,
  -32000, or an HTTP 4xx without a JSON-RPC error code); a DiscoverResult listing only handshake
  versions (a legacy advertisement); a well-formed modern request (any method) refused the way
  legacy servers refuse sessionless requests (-32600/-32000 about a session or initialization).
- legacy support **yes**: an `initialize` served.
- legacy support **no**: an `initialize` refused with -32022/-32004.
- **broken**: a probe or `initialize` that got no answer, garbage, or a dying connection; a stdio
  server the tee could not start (`spawn-failed`: its client's probe was never read, so no probe
  outcome says it).

Other answers (a malformed probe's legacy-looking error, unknown error codes) prove nothing.

At each piece of evidence the latest value of each dimension gives the era label; a change of
label is a timeline entry (a server upgraded mid-capture shows `legacy` then `modern`). When modern
support flips, earlier legacy evidence belongs to the old server and is forgotten.

`inconsistent`: the server answered both ways at the same time. Evidence contradicts when a
dimension flips back (A → B → A) with the whole excursion inside `window` seconds, or when the
opposite evidence just before it came from a different upstream peer less than `window` seconds
earlier (two nodes of one fleet disagreeing). The label holds until `window` seconds pass without
a contradiction, so a finished rollout settles on its new era. While it holds, a support dimension
that was answered both `yes` and `no` within `window` seconds of the latest contradiction is
`mixed` (nodes of a fleet at different versions); one answered one way only keeps that value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import polars as pl

from addon import format as fmt
from analyzer.condense import Traffic, traffic_of
from analyzer.findings import Evidence
from analyzer.identity import connection_identities
from analyzer.messages import as_strings
from analyzer.probes import (
    AFTER_OPENING,
    LEGACY_CODES,
    MODERN_PROOF_CODES,
    UNSUPPORTED_CODES,
    UPSTREAM_FAILURE_EVENTS,
    answer_location,
    handshake_only,
    names_modern,
    with_opening,
)
from analyzer.schema import MODERN_VERSIONS

DEFAULT_WINDOW: Final = 300.0
"""Seconds within which contradicting evidence counts as "at the same time" (not an upgrade/rollback)."""

YES: Final = "yes"
NO: Final = "no"
UNKNOWN: Final = "unknown"
ERAS: Final = ("dual-era", "modern-only", "modern", "legacy", "broken", "unknown", "inconsistent")
"""Every era label a verdict can carry (the README's table and the reports' legends list these)."""
MIXED: Final = "mixed"
"""Support of an `inconsistent` server that answered this dimension both ways at the same time."""
_MAX_EVIDENCE: Final = 6
_MAX_ERROR: Final = 120
"""Characters of a recorder's error message quoted in a why-line."""
_NO_TEXTS: Final = pl.lit([], dtype=pl.List(pl.String()))


@dataclass(frozen=True)
class TimelineEntry:
    """The era label changed at `ts`, decided by `evidence`."""

    ts: float
    era: str
    evidence: Evidence


@dataclass
class ServerVerdict:
    """Everything the report says about one server key."""

    server: str
    transport: str
    era: str
    modern_support: str
    legacy_support: str
    versions: list[str] = field(default_factory=list)
    """Versions the server itself named (supportedVersions, data.supported, initialize results)."""
    first_seen: float | None = None
    last_seen: float | None = None
    connections: int = 0
    probes: int = 0
    probe_outcomes: dict[str, int] = field(default_factory=dict)
    inits: int = 0
    init_outcomes: dict[str, int] = field(default_factory=dict)
    clients: list[str] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    timeline: list[TimelineEntry] = field(default_factory=list)


def _label(m: pl.Expr, leg: pl.Expr, broken: pl.Expr) -> pl.Expr:
    return (
        pl.when((m == YES) & (leg == YES))
        .then(pl.lit("dual-era"))
        .when((m == YES) & (leg == NO))
        .then(pl.lit("modern-only"))
        .when(m == YES)
        .then(pl.lit("modern"))
        .when(leg == YES)
        .then(pl.lit("legacy"))
        .when((m == NO) & leg.is_null())
        .then(pl.lit("legacy"))
        .when((m == NO) | (leg == NO) | broken)
        .then(pl.lit("broken"))
        .otherwise(pl.lit("unknown"))
    )


def evidence_frame(probes: pl.DataFrame, inits: pl.DataFrame) -> pl.DataFrame:
    """One row per piece of evidence: server, ts, file, line, dim (modern/legacy/broken), value, note."""
    code = pl.col("error_code")
    outcome = pl.col("outcome")
    init_file = answer_location(inits)
    p = probes.select(
        "server",
        "peer",
        ts=pl.coalesce("answer_ts", "ts"),
        file=answer_location(probes),
        line=pl.coalesce("answer_line", "line"),
        note=pl.lit("probe ") + outcome,
        dim=pl.when(outcome.is_in(("no-answer", "connection-died", "garbage")))
        .then(pl.lit("broken"))
        .when(outcome.is_in(("unsupported-version", "modern-error")))
        .then(pl.lit("modern"))
        .when(
            (outcome == "legacy-answer")
            & (code.is_in(LEGACY_CODES) | (code.is_null() & pl.col("http_status").is_between(400, 499)))
        )
        .then(pl.lit("modern"))
        # a DiscoverResult without a modern version is a legacy advertisement only when it lists
        # handshake versions alone; unknown versions (or none) prove nothing
        .when(outcome == "discover-result")
        .then(pl.when(pl.col("modern_versions").fill_null(False) | handshake_only("versions")).then(pl.lit("modern"))),
        value=pl.when(outcome.is_in(("no-answer", "connection-died", "garbage")))
        .then(pl.lit(YES))
        .when(outcome == "discover-result")
        .then(pl.when(pl.col("modern_versions").fill_null(False)).then(pl.lit(YES)).otherwise(pl.lit(NO)))
        .when(outcome.is_in(("unsupported-version", "modern-error")))
        .then(pl.lit(YES))
        .otherwise(pl.lit(NO)),
    )
    refused_modern = outcome.is_in(("refused-named", "refused-unnamed")) & code.is_in(UNSUPPORTED_CODES)
    # A dual-era stdio server locks a connection into the era of its first request: an `initialize` on
    # a connection a well-formed probe opened modern is refused as a cross-era request, which says
    # nothing about whether the server serves legacy clients (the `mcp` 2.3.0 server does this).
    inits = with_opening(inits, probes, pl.col("well_formed").fill_null(False))
    listed_modern = names_modern(pl.col("versions")).fill_null(False)
    i = inits.select(
        "server",
        "peer",
        ts=pl.col("ts"),
        file=init_file,
        line=pl.coalesce("answer_line", "line"),
        note=pl.lit("initialize ") + outcome,
        dim=pl.when(outcome.is_in(("no-answer", "connection-died")))
        .then(pl.lit("broken"))
        .when((outcome == "served") | (refused_modern & ~AFTER_OPENING))
        .then(pl.lit("legacy")),
        value=pl.when(outcome.is_in(("no-answer", "connection-died", "served")))
        .then(pl.lit(YES))
        .otherwise(pl.lit(NO)),
    )
    # An initialize refused with -32022 naming a modern version also proves modern support.
    i_modern = inits.filter(refused_modern & listed_modern).select(
        "server",
        "peer",
        ts=pl.col("ts"),
        file=init_file,
        line=pl.coalesce("answer_line", "line"),
        note=pl.lit("initialize refused naming a modern version"),
        dim=pl.lit("modern"),
        value=pl.lit(YES),
    )
    frames = [f for f in (p, i, i_modern) if f.height]
    if not frames:
        return pl.DataFrame(
            schema={
                "server": pl.String,
                "peer": pl.String,
                "ts": pl.Float64,
                "file": pl.String,
                "line": pl.UInt32,
                "note": pl.String,
                "dim": pl.String,
                "value": pl.String,
            }
        )
    return (
        pl.concat(frames, how="vertical_relaxed")
        .filter(pl.col("dim").is_not_null())
        .sort("server", "ts", "file", "line", maintain_order=True)
    )


_SESSION_ERROR: Final = r"(?i)session|not initiali[sz]ed"
"""Legacy refusals of a sessionless request: 'Missing session ID', 'Session not found', 'Server not initialized'."""


def sessionless_refusal() -> pl.Expr:
    """On messages rows: an error the way legacy servers refuse a sessionless request, -32600 or
    -32000 about a session or initialization. A dual-era server's -32600 to an enveloped request on a
    connection it serves legacy ("this connection serves the handshake protocol era") is none: it
    says what the connection serves, not the server."""
    return (
        (pl.col("kind") == "error")
        & pl.col("error_code").is_in((-32600, -32000))
        & pl.col("error_message").cast(pl.String).str.contains(_SESSION_ERROR).fill_null(False)
    )


def well_formed_modern() -> pl.Expr:
    """On request rows: a well-formed modern request, its envelope and over HTTP the version header.
    Only such a request's refusal says what era the server answers in: one without the header lands
    on a dual-era server's legacy path (the SDKs route on it)."""
    return (
        pl.col("has_envelope").fill_null(False)
        & (pl.col("flow").is_null() | pl.col("header_version").is_in(sorted(MODERN_VERSIONS)))
    ).fill_null(False)


def request_evidence(messages: pl.DataFrame) -> pl.DataFrame:
    """Modern support **no** from ordinary requests: a well-formed modern request (envelope, and over
    HTTP the version header) refused the way legacy servers refuse sessionless requests (-32600 or
    -32000 about a session / initialization). Catches a fleet where probes reach a modern node and
    the calls after them a legacy one."""
    reqs = messages.filter(
        (pl.col("kind") == "request")
        & well_formed_modern()
        & ~pl.col("method").is_in(("server/discover", "initialize"))
    ).select("capture", _rseq="seq")
    answers = messages.filter(sessionless_refusal()).pipe(as_strings)
    reqs = reqs.pipe(as_strings)
    return answers.join(reqs, left_on=["capture", "req_seq"], right_on=["capture", "_rseq"], how="inner").select(
        "server",
        "peer",
        ts=pl.col("ts"),
        file="file",
        line="line",
        note=pl.lit("modern ") + pl.col("method").fill_null("request") + pl.lit(" refused as sessionless"),
        dim=pl.lit("modern"),
        value=pl.lit(NO),
    )


def late_probe_evidence(messages: pl.DataFrame, probes: pl.DataFrame) -> pl.DataFrame:
    """Modern support **yes** from a probe answer that came after the client gave up on it (outcome
    `no-answer`: it moved on first, usually to `initialize`): a DiscoverResult naming a modern version,
    or an error only a modern server sends. The client was right to fall back, but the server that
    sent it speaks the modern era: a slow dual-era server is not a legacy one."""
    waited = probes.filter(pl.col("outcome") == "no-answer").select(pl.col("file").cast(pl.String), "line")
    requests = (
        messages.lazy()
        .filter((pl.col("kind") == "request") & (pl.col("method") == "server/discover"))
        .select(pl.col("capture").cast(pl.String), "seq", pl.col("file").cast(pl.String), "line")
        .join(waited.lazy(), on=["file", "line"], how="semi")
        .select("capture", req_seq="seq")
        .collect()
    )
    modern = ((pl.col("kind") == "response") & names_modern(pl.col("supported_versions")).fill_null(False)) | (
        (pl.col("kind") == "error") & pl.col("error_code").is_in(MODERN_PROOF_CODES)
    )
    # the answers to those few probes first: every other answer is left unread
    answers = (
        messages.lazy()
        .filter((pl.col("dir") == fmt.S2C) & pl.col("req_seq").is_not_null())
        .with_columns(pl.col("capture").cast(pl.String))
        .join(requests.lazy(), on=["capture", "req_seq"], how="semi")
        .filter(modern)
        .sort("seq")
        .unique(["capture", "req_seq"], keep="first", maintain_order=True)
        .collect()
        .pipe(as_strings)
    )
    return answers.select(
        "server",
        "peer",
        ts=pl.col("ts"),
        file="file",
        line="line",
        note=pl.lit("probe answered after the client gave up on it"),
        dim=pl.lit("modern"),
        value=pl.lit(YES),
    )


def spawn_evidence(messages: pl.DataFrame) -> pl.DataFrame:
    """Broken evidence from the tee's `spawn-failed` records: the server command could not start, so the
    client's probe or `initialize` was never read and no outcome of theirs says so (over HTTP the same
    failure is the probe's `connection-died`)."""
    failed = (pl.col("record_type") == fmt.LIFECYCLE) & (pl.col("event") == fmt.EV_SPAWN_FAILED)
    columns = ("server", "peer", "ts", "file", "line")
    rows = messages.lazy().filter(failed).select(*columns, "error_message").collect().pipe(as_strings)
    return rows.select(
        *columns,
        note=pl.lit("server could not start (spawn-failed: ")
        + pl.col("error_message").fill_null("?").str.slice(0, _MAX_ERROR)
        + pl.lit(")"),
        dim=pl.lit("broken"),
        value=pl.lit(YES),
    )


def _mark_contradictions(ev: pl.DataFrame, window: float) -> pl.DataFrame:
    """Add `_contra`: this evidence contradicts other evidence of the same dimension "at the same time".

    Two ways: the value flips back (A → B → A) with the whole excursion inside `window` seconds, or
    the latest opposite evidence came from a different upstream peer less than `window` seconds
    earlier (two nodes of one fleet answering differently).
    """
    dims = ev.filter(pl.col("dim").is_in(("modern", "legacy"))).with_columns(
        _run=pl.col("value").rle_id().over("server", "dim")
    )
    runs = dims.group_by("server", "dim", "_run").agg(
        _end_ts=pl.col("ts").last(),
        _end_peer=pl.col("peer").last(),
        _end_file=pl.col("file").last(),
        _end_line=pl.col("line").last(),
    )
    prev1 = runs.with_columns(pl.col("_run") + 1).rename(
        {"_end_ts": "_p1_ts", "_end_peer": "_p1_peer", "_end_file": "_p1_file", "_end_line": "_p1_line"}
    )
    prev2 = runs.with_columns(pl.col("_run") + 2).select(
        "server", "dim", "_run", _p2_ts="_end_ts", _p2_file="_end_file", _p2_line="_end_line"
    )
    marked = (
        dims.join(prev1, on=["server", "dim", "_run"], how="left")
        .join(prev2, on=["server", "dim", "_run"], how="left")
        .with_columns(
            _contra=(
                (pl.col("ts") - pl.col("_p2_ts") <= window).fill_null(False)
                | (
                    (pl.col("ts") - pl.col("_p1_ts") <= window)
                    & (pl.col("_p1_peer") != pl.col("peer"))
                ).fill_null(False)
            ),
        )
        .select("_row", "_contra", "_p1_file", "_p1_line")
    )
    return ev.join(marked, on="_row", how="left").with_columns(pl.col("_contra").fill_null(False)).sort("_row")


def server_verdicts(
    messages: pl.DataFrame,
    probes: pl.DataFrame,
    inits: pl.DataFrame,
    window: float = DEFAULT_WINDOW,
    traffic: Traffic | None = None,
    identities: pl.DataFrame | None = None,
) -> list[ServerVerdict]:
    """One verdict per server key seen in the messages, sorted by server key.

    `traffic` holds what condensing dropped (`analyzer.condense`); without it, it is computed from
    `messages`. `identities`: the connections' client identities (`connection_identities` of the
    same frames) when the caller has them already; computed here otherwise.
    """
    if messages.is_empty() and (traffic is None or traffic.rows == 0):  # condensing can empty `messages`
        return []
    ev_all = pl.concat(
        [
            evidence_frame(probes, inits),
            request_evidence(messages),
            late_probe_evidence(messages, probes),
            spawn_evidence(messages),
        ],
        how="vertical_relaxed",
    )
    ev_all = ev_all.sort("server", "ts", "file", "line", maintain_order=True).with_row_index("_row")
    ev_all = _mark_contradictions(ev_all, window)
    ev_all = _name_upstream_failures(ev_all, messages)
    m = pl.col("_m")
    last_contra = pl.when(pl.col("_contra")).then(pl.col("ts")).forward_fill().over("server")
    ev_all = (
        ev_all.with_columns(
            _m=pl.when(pl.col("dim") == "modern").then(pl.col("value")).forward_fill().over("server"),
            _b=(pl.col("dim") == "broken").cast(pl.Int8).cum_max().over("server").cast(pl.Boolean),
            _inc=(pl.col("ts") - last_contra <= window).fill_null(False),
        )
        .with_columns(
            # When modern support flips (an upgrade or rollback), legacy evidence from before the flip
            # describes the old server: legacy support starts over as unknown.
            _epoch=(m.is_not_null() & m.shift(1).is_not_null() & (m != m.shift(1)))
            .fill_null(False)
            .cast(pl.Int32)
            .cum_sum()
            .over("server")
        )
        .with_columns(
            _l=pl.when(pl.col("dim") == "legacy").then(pl.col("value")).forward_fill().over("server", "_epoch"),
        )
        .with_columns(
            _era=pl.when(pl.col("_inc"))
            .then(pl.lit("inconsistent"))
            .otherwise(_label(pl.col("_m"), pl.col("_l"), pl.col("_b"))),
            # Several pieces of evidence at one instant (one message) make one timeline step.
            _last_at_ts=pl.col("ts") != pl.col("ts").shift(-1).over("server").fill_null(-1.0),
        )
    )

    # Aggregated on the frame's own dtypes (categoricals stay 4 bytes a row); only the small
    # per-server lists are turned into strings, then sorted.
    def texts(col: str) -> pl.Expr:
        return pl.col(col).list.eval(pl.element().cast(pl.String)).list.unique().list.sort()

    traffic = traffic if traffic is not None else traffic_of(messages)
    # the same client identities as the rules and the client table see (`analyzer.identity`)
    if identities is None:
        identities = connection_identities(messages, traffic, traffic.requests)
    clients = (
        identities.lazy()
        .group_by("server")
        .agg(_clients=pl.col("client").unique())
    )
    kept = messages.lazy().group_by("server").agg(
        _listed=pl.concat_list(pl.col("supported_versions").fill_null([]), pl.col("error_supported").fill_null([]))
        .list.explode(keep_nulls=False, empty_as_null=False)
        .drop_nulls()
        .unique(),
        _served=pl.col("init_version").filter(pl.col("kind") == "response").drop_nulls().unique(),
    )
    conns = traffic.conns.lazy().group_by("server").agg(connections=pl.col("conn").n_unique())
    server_key = pl.col("server").cast(pl.String)
    summary = (
        traffic.servers.lazy()
        .with_columns(server_key)
        .join(kept.with_columns(server_key), on="server", how="left")
        .join(conns.with_columns(server_key), on="server", how="left")
        .join(clients, on="server", how="left")
        .select(
            "server",
            transport=texts("transports").list.join("+"),
            first_seen="first",
            last_seen="last",
            connections=pl.col("connections").fill_null(0),
            clients=texts("_clients").fill_null(_NO_TEXTS),
            peers=texts("peers"),
            versions=pl.concat_list(texts("_listed").fill_null(_NO_TEXTS), texts("_served").fill_null(_NO_TEXTS))
            .list.unique()
            .list.sort(),
        )
        .collect()
    )
    # Every per-server fact is computed over whole frames, then looked up by key: filtering the frames
    # once per server made the verdicts cost servers × rows (100,000 server keys: minutes).
    probe_counts, probe_totals = _outcome_counts(probes)
    init_counts, init_totals = _outcome_counts(inits)
    ends = _as_text_keys(ev_all.filter(pl.col("_row") == pl.col("_row").max().over("server")))
    last = {r["server"]: r for r in ends.iter_rows(named=True)}
    timelines = _timelines(ev_all)
    deciding = _deciding_rows(ev_all)
    inconsistent = [k for k, r in last.items() if r["_era"] == "inconsistent"]
    by_server = (
        _as_text_keys(ev_all.filter(pl.col("server").cast(pl.String).is_in(inconsistent, nulls_equal=True)))
        .partition_by("server", as_dict=True, maintain_order=True)
        if inconsistent
        else {}
    )
    verdicts: list[ServerVerdict] = []
    for row in summary.sort("server").iter_rows(named=True):
        server = row["server"]  # None: the traffic without a server key
        v = ServerVerdict(
            server=server,
            transport=row["transport"] or "",
            era="unknown",
            modern_support=UNKNOWN,
            legacy_support=UNKNOWN,
            versions=[x for x in row["versions"] if x],
            first_seen=row["first_seen"],
            last_seen=row["last_seen"],
            connections=row["connections"],
            probes=probe_totals.get(server, 0),
            probe_outcomes=probe_counts.get(server, {}),
            inits=init_totals.get(server, 0),
            init_outcomes=init_counts.get(server, {}),
            clients=row["clients"],
            peers=row["peers"],
        )
        if (end := last.get(server)) is not None:
            v.modern_support = end["_m"] or UNKNOWN
            v.legacy_support = end["_l"] or UNKNOWN
            v.era = end["_era"]
            v.timeline = timelines.get(server, [])
            if v.era == "inconsistent":
                ev = by_server[(server,)]
                v.evidence = _contradiction(ev)
                _mark_mixed(ev, v, window)
            else:
                v.evidence = _deciding(deciding.get(server, {}), v)
        verdicts.append(v)
    return verdicts


def _as_text_keys(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(pl.col("server").cast(pl.String))


def _outcome_counts(frame: pl.DataFrame) -> tuple[dict[str | None, dict[str, int]], dict[str | None, int]]:
    """Per server key: its rows by outcome (sorted by outcome), and its rows."""
    counts: dict[str | None, dict[str, int]] = {}
    totals: dict[str | None, int] = {}
    rows = frame.lazy().group_by("server", "outcome").len().select(
        pl.col("server").cast(pl.String), pl.col("outcome").cast(pl.String), "len"
    )
    for server, outcome, n in rows.collect().sort("server", "outcome").iter_rows():
        counts.setdefault(server, {})[outcome] = n
        totals[server] = totals.get(server, 0) + n
    return counts, totals


def _timelines(ev_all: pl.DataFrame) -> dict[str | None, list[TimelineEntry]]:
    """Per server key, each change of era: the last evidence of an instant whose era differs from
    the instant before it (several pieces of evidence at one instant make one step)."""
    steps = ev_all.filter(pl.col("_last_at_ts"))
    changes = _as_text_keys(steps.filter(pl.col("_era") != pl.col("_era").shift(1).over("server").fill_null("")))
    out: dict[str | None, list[TimelineEntry]] = {}
    for r in changes.select("server", "ts", "_era", "file", "line", "note").iter_rows():
        out.setdefault(r[0], []).append(TimelineEntry(r[1], r[2], Evidence(r[3], int(r[4]), r[5])))
    return out


def _deciding_rows(ev_all: pl.DataFrame) -> dict[str | None, dict[str, list[Evidence]]]:
    """Per server key, the candidates `_deciding` picks from: for `modern` and `legacy`, the first
    evidence of the dimension's last run of one value, when that value is the final one; `broken`,
    the first broken evidence."""
    by = ("server", "dim")
    # the server's final support, as the verdict takes it from its last evidence (`… or UNKNOWN`);
    # before the filter, so that the last evidence is the server's, of any dimension
    at_end = (
        pl.when(pl.col("dim") == "modern")
        .then(pl.col("_m").last().over("server"))
        .otherwise(pl.col("_l").last().over("server"))
        .cast(pl.String)
    )
    dims = (
        ev_all.with_columns(_final=pl.when(at_end.is_null() | (at_end == "")).then(pl.lit(UNKNOWN)).otherwise(at_end))
        .filter(pl.col("dim").is_in(("modern", "legacy")))
        # legacy evidence from before modern support last flipped is forgotten (`_epoch`): the last
        # run of a value does not reach back across the flip into the old server's answers
        .with_columns(_run=pl.struct("_epoch", "value").rle_id().over(by))
    )
    runs = dims.filter(
        pl.col("_run") == pl.col("_run").max().over(by), pl.col("value").cast(pl.String) == pl.col("_final")
    )
    first = pl.int_range(pl.len())
    columns = ("server", "dim", "file", "line", "note")
    picked = pl.concat(
        [
            runs.filter(first.over(by) < _MAX_EVIDENCE // 2).select(columns),
            ev_all.filter(pl.col("dim") == "broken").filter(first.over("server") < _MAX_EVIDENCE).select(columns),
        ],
        how="vertical_relaxed",
    )
    out: dict[str | None, dict[str, list[Evidence]]] = {}
    for server, dim, file, line, note in _as_text_keys(picked).iter_rows():
        out.setdefault(server, {}).setdefault(dim, []).append(Evidence(file, int(line), note))
    return out


def _mark_mixed(ev: pl.DataFrame, v: ServerVerdict, window: float) -> None:
    """Support `mixed` for each dimension answered both yes and no within `window` of the latest contradiction."""
    since = ev.filter(pl.col("_contra")).get_column("ts").max()
    recent = ev.filter(pl.col("ts") >= since - window) if isinstance(since, float) else ev.clear()
    for dim in ("modern", "legacy"):
        values = set(recent.filter(pl.col("dim") == dim).get_column("value").to_list())
        if {YES, NO} <= values:
            setattr(v, f"{dim}_support", MIXED)


def _name_upstream_failures(ev: pl.DataFrame, messages: pl.DataFrame) -> pl.DataFrame:
    """`ev` with the note of each piece of evidence that is an HTTP recorder's upstream failure (an
    `http.error` of `UPSTREAM_FAILURE_KINDS`: the client got the proxy's 502, not the server's answer)
    naming it: `probe connection-died: upstream unreachable (connection-refused: [Errno 111] …)`."""
    failed = (
        messages.lazy()
        .filter((pl.col("record_type") == fmt.HTTP_ERROR) & pl.col("event").is_in(UPSTREAM_FAILURE_EVENTS))
        .select("file", "line", "event", "error_message")
        .pipe(as_strings)
        # the few rows, rechunked: polars 2.1 panics when `pl.format` reads the filtered string
        # column as it comes out of the filter (binview index assertion)
        .collect()
        .rechunk()
        .select(
            pl.col("file").alias("_file"),
            "line",
            _why=pl.format(
                "upstream unreachable ({}: {})",
                pl.col("event").str.strip_prefix("http-error:"),
                pl.col("error_message").fill_null("?").str.slice(0, _MAX_ERROR),
            ),
        )
        .unique(["_file", "line"])
    )
    if failed.is_empty():
        return ev
    return (
        ev.with_columns(_file=pl.col("file").cast(pl.String))
        .join(failed, on=["_file", "line"], how="left", maintain_order="left")
        .with_columns(
            note=pl.when(pl.col("_why").is_not_null()).then(pl.format("{}: {}", "note", "_why")).otherwise("note")
        )
        .drop("_file", "_why")
    )


def _deciding(candidates: dict[str, list[Evidence]], v: ServerVerdict) -> list[Evidence]:
    """The first evidence of each final dimension value since it last changed (plus broken evidence),
    from the server's candidates (`_deciding_rows`)."""
    picks = [*candidates.get("modern", ()), *candidates.get("legacy", ())]
    if v.era in ("broken", "unknown") or not picks:
        picks.extend(candidates.get("broken", ()))
    return list(dict.fromkeys(picks))[:_MAX_EVIDENCE]


def _contradiction(ev: pl.DataFrame) -> list[Evidence]:
    """The latest contradicting pairs: each contradicting message and the opposite one before it."""
    picks: list[Evidence] = []
    for r in ev.filter(pl.col("_contra")).tail(_MAX_EVIDENCE // 2).iter_rows(named=True):
        if r["_p1_file"] is not None:
            picks.append(Evidence(r["_p1_file"], int(r["_p1_line"]), "contradicted by the next"))
        picks.append(Evidence(r["file"], int(r["line"]), f"{r['note']} ({r['dim']} support {r['value']})"))
    by_place = {(e.file, e.line): e for e in reversed(picks)}  # one entry per line, the first note wins
    return sorted(by_place.values())[:_MAX_EVIDENCE]

