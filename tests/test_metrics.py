"""The recorders' live counters (addon/metrics.py): outcomes and eras from records, bounded labels,
and the Prometheus exposition read back with prometheus_client's own parser.

End to end (a live recorder scraped over HTTP): tests/test_metrics_e2e.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from addon import format as fmt
from addon import metrics as m
from addon.metrics import LiveStats, RecorderCollector, answer_outcome
from addon.writer import CaptureWriter
from analyzer.probes import (
    AUTH_STATUSES,
    DEFAULT_PROBE_TIMEOUT,
    GATEWAY_STATUSES,
    LEGACY_CODES,
    MODERN_ERROR_CODES,
    UNSUPPORTED_CODES,
)
from analyzer.schema import HANDSHAKE_VERSIONS, MODERN_VERSIONS, PROBE_OUTCOMES

MODERN = "2026-07-28"
SERVER = "http://s/mcp"


def test_vocabulary_is_the_analyzers() -> None:
    # the addon cannot import the analyzer (polars in mitmproxy); the constants must still agree
    assert set(m.LIVE_OUTCOMES) <= set(PROBE_OUTCOMES)
    assert m.MODERN_VERSIONS == MODERN_VERSIONS and m.HANDSHAKE_VERSIONS == HANDSHAKE_VERSIONS
    assert m.UNSUPPORTED_CODES == UNSUPPORTED_CODES and m.MODERN_ERROR_CODES == MODERN_ERROR_CODES
    assert m.LEGACY_CODES == LEGACY_CODES
    assert m.AUTH_STATUSES == AUTH_STATUSES and m.GATEWAY_STATUSES == GATEWAY_STATUSES
    assert m.PROBE_TIMEOUT == DEFAULT_PROBE_TIMEOUT


def err(code: int, **data: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": "x", **({"data": data} if data else {})}}


def ok(result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "result": result}


def discovered(*versions: str) -> dict[str, Any]:
    """A DiscoverResult listing `versions`."""
    return ok({"supportedVersions": list(versions), "capabilities": {}})


D, INIT = "server/discover", "initialize"


@pytest.mark.parametrize(
    ("method", "msg", "status", "expected"),
    [
        (D, discovered(MODERN, "2025-11-25"), 200, ("discover-result", "modern")),
        (D, discovered("2025-11-25"), None, ("discover-result", "legacy")),
        (D, err(-32022, supported=[MODERN]), 400, ("unsupported-version", "modern-other-version")),
        (D, err(-32004), None, ("unsupported-version", "modern-other-version")),
        (D, err(-32020), 400, ("modern-error", "modern")),
        (D, err(-32602), None, ("legacy-answer", "legacy")),
        (D, err(-32600), 400, ("legacy-answer", "legacy")),
        (D, None, 400, ("legacy-answer", "legacy")),  # a bare 400: legacy server or its middleware
        (D, None, 200, ("garbage", None)),
        (D, None, None, ("garbage", None)),
        (D, discovered(MODERN), 401, ("auth-required", None)),
        (D, None, 429, ("rate-limited", None)),
        (D, None, 307, ("redirected", None)),
        (D, None, 502, ("gateway-error", None)),
        (D, err(-32022), 502, ("unsupported-version", "modern-other-version")),  # the server's own error
        (INIT, ok({"protocolVersion": "2025-11-25"}), 200, (None, "legacy")),
        (INIT, err(-32022, supported=[MODERN]), 400, (None, "modern-other-version")),
        (INIT, err(-32602), None, (None, None)),
        (INIT, None, 403, (None, None)),
    ],
)
def test_answer_outcome_table(method: str, msg: Any, status: int | None, expected: tuple[Any, Any]) -> None:
    assert answer_outcome(method, msg, status) == expected


# --- record streams -----------------------------------------------------------------------------------


def req(flow: str, msg: dict[str, Any], server: str = SERVER) -> dict[str, Any]:
    """An HTTP request record of `msg`, with the headers a modern client sends."""
    headers = [["mcp-protocol-version", MODERN], ["mcp-method", str(msg.get("method"))]]
    raw = orjson.dumps(msg).decode()
    return {fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": flow, fmt.F_SERVER: server, fmt.F_RAW: raw, "headers": headers}


def resp(flow: str, status: int, body: Any = None, *, sse: bool = False, server: str = SERVER) -> dict[str, Any]:
    rec: dict[str, Any] = {fmt.F_TYPE: fmt.HTTP_RESPONSE, "flow": flow, fmt.F_SERVER: server, "status": status}
    rec["streamed"] = sse
    rec["headers"] = [["content-type", "text/event-stream" if sse else "application/json"]]
    if body is not None:
        rec[fmt.F_RAW] = body if isinstance(body, str) else orjson.dumps(body).decode()
    return rec


def probe(i: Any = 1, version: str = MODERN) -> dict[str, Any]:
    """A well-formed probe (its envelope: a version and the client's capabilities)."""
    meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
    return {"jsonrpc": "2.0", "id": i, "method": D, "params": {"_meta": meta}}


def init(i: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": INIT, "params": {"protocolVersion": "2025-11-25"}}


_BATCHED: dict[int, tuple[LiveStats, LiveStats]] = {}
"""Per `LiveStats` fed by `feed`: itself (kept alive, so its id stays its own) and its batched twin."""


def feed(stats: LiveStats, records: list[dict[str, Any]]) -> dict[str, Any]:
    """`stats` after observing `records` one by one; a twin fed the same records in batches (as the
    capture writer hands them over, `observe_all`) must hold the same counters."""
    _, batched = _BATCHED.setdefault(id(stats), (stats, LiveStats(stats.max_servers)))
    for r in records:
        stats.observe(r)
    for start in range(0, len(records), 3):
        batched.observe_all([dict(r) for r in records[start : start + 3]])
    assert batched.snapshot() == stats.snapshot()
    return stats.snapshot()


def test_http_rollout_changes_the_era_and_counts_outcomes() -> None:
    s = feed(
        LiveStats(),
        [
            req("f1", init(0)),
            resp("f1", 200, ok({"protocolVersion": "2025-11-25"})),
            req("f2", probe(1)),
            resp("f2", 400, err(-32600)),
            req("f3", {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "initialize"}}),
            resp("f3", 200, ok({})),
            req("f4", probe("p")),
            resp("f4", 200, {**discovered(MODERN), "id": "p"}),
        ],
    )
    assert s["flows"] == 4
    server = s["servers"]["http://s/mcp"]
    assert server == {"era": "modern", "outcomes": {"legacy-answer": 1, "discover-result": 1}}


def test_http_answer_in_an_event_stream_and_open_streams() -> None:
    stats = LiveStats()
    s = feed(
        stats,
        [
            req("f1", init(7)),
            resp("f1", 200, sse=True),
            {fmt.F_TYPE: fmt.SSE_EVENT, "flow": "f1", fmt.F_RAW: '{"jsonrpc":"2.0","method":"notifications/x"}'},
            {fmt.F_TYPE: fmt.SSE_EVENT, "flow": "f1", fmt.F_RAW: orjson.dumps({**ok({}), "id": 7}).decode()},
            req("g", {"jsonrpc": "2.0", "id": 8, "method": "ping"}),
            resp("g", 200, sse=True),
        ],
    )
    assert s["sse_open"] == 2
    assert s["servers"]["http://s/mcp"]["era"] == "legacy"
    s = feed(stats, [{fmt.F_TYPE: fmt.SSE_END, "flow": "f1", "how": "clean"}])
    assert s["sse_open"] == 1


def test_http_errors_by_kind_and_a_probe_that_died() -> None:
    s = feed(
        LiveStats(),
        [
            req("f1", probe()),
            {fmt.F_TYPE: fmt.HTTP_ERROR, "flow": "f1", "kind": "connection-refused"},
            req("f2", probe()),
            {fmt.F_TYPE: fmt.HTTP_ERROR, "flow": "f2", "kind": "client-gone"},  # the client left: no outcome
            {fmt.F_TYPE: fmt.HTTP_ERROR, "flow": None, "kind": "connection-refused"},
            {fmt.F_TYPE: fmt.HTTP_ERROR, "flow": "f3", "kind": "recorder-stopped"},  # not an upstream error
        ],
    )
    assert s["upstream_errors"] == {"connection-refused": 2, "client-gone": 1}
    assert s["servers"]["http://s/mcp"] == {"era": "unknown", "outcomes": {"connection-died": 1}}


def frame(conn: str, direction: str, raw: str, server: str = "srv") -> dict[str, Any]:
    return {fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: conn, fmt.F_DIR: direction, fmt.F_RAW: raw, fmt.F_SERVER: server}


def event(conn: str, name: str) -> dict[str, Any]:
    return {fmt.F_TYPE: fmt.LIFECYCLE, fmt.F_CONN: conn, fmt.F_EVENT: name, fmt.F_SERVER: "srv"}


def test_stdio_outcomes_banner_garbage_and_death() -> None:
    dump = orjson.dumps
    s = feed(
        LiveStats(),
        [
            event("a", fmt.EV_SPAWN),
            frame("a", fmt.C2S, dump(probe(1)).decode()),
            frame("a", fmt.S2C, "Server starting..."),  # a banner before the real answer is not garbage
            frame("a", fmt.S2C, dump(err(-32602)).decode()),
            frame("a", fmt.C2S, dump(init(2)).decode()),
            frame("a", fmt.S2C, dump({**ok({"protocolVersion": "2025-11-25"}), "id": 2}).decode()),
            event("b", fmt.EV_SPAWN),
            frame("b", fmt.C2S, dump(probe("x")).decode()),
            frame("b", fmt.S2C, "panic: not initialized"),
            event("b", fmt.EV_EXIT),
            event("c", fmt.EV_SPAWN),
            frame("c", fmt.C2S, dump(probe(1)).decode()),
            event("c", fmt.EV_STDIN_BROKEN),
            event("d", fmt.EV_SPAWN),
            frame("d", fmt.C2S, dump(probe(1)).decode()),
            event("d", fmt.EV_CLIENT_EOF),  # the client gave up first: the exit proves nothing
            event("d", fmt.EV_EXIT),
            event("e", fmt.EV_SPAWN),
            frame("e", fmt.C2S, dump(probe(1)).decode()),
            event("e", fmt.EV_STDOUT_BROKEN),  # the client stopped reading: the server's EPIPE death proves nothing
            event("e", fmt.EV_EXIT),
        ],
    )
    assert s["flows"] == 5
    assert s["upstream_errors"] == {"server-stdin-broken": 1}
    assert s["servers"]["srv"] == {
        "era": "legacy",
        # d and e: the client left before the death, and nothing came: no answer
        "outcomes": {"legacy-answer": 1, "garbage": 1, "connection-died": 1, "no-answer": 2},
    }


def test_ids_are_matched_by_value_and_type() -> None:
    s = feed(
        LiveStats(),
        [
            frame("a", fmt.C2S, orjson.dumps(probe(1)).decode()),
            frame("a", fmt.S2C, orjson.dumps({**err(-32022), "id": "1"}).decode()),  # another request's answer
            frame("a", fmt.S2C, orjson.dumps({**discovered(MODERN), "id": 1}).decode()),
        ],
    )
    assert s["servers"]["srv"] == {"era": "modern", "outcomes": {"discover-result": 1}}


def with_id(ident: str, message: dict[str, Any]) -> str:
    """`message` as a JSON-RPC message's text with the id `ident` written as it is (orjson writes no
    integer beyond 64 bits, nor a number as `1e2`)."""
    members = {k: v for k, v in message.items() if k not in ("jsonrpc", "id")}
    return '{"jsonrpc":"2.0","id":' + ident + "," + orjson.dumps(members).decode()[1:]


PROBE: dict[str, Any] = {"method": D, "params": {"_meta": probe()["params"]["_meta"]}}
UNSUPPORTED: dict[str, Any] = {"error": {"code": -32022, "message": "Unsupported protocol version"}}


@pytest.mark.parametrize(
    ("asked", "other"),
    [
        ("18446744073709551617", "18446744073709551616"),  # beyond 64 bits orjson reads a float: one id
        ("-9223372036854775809", "-9223372036854775810"),
        ("123456789012345678901234567890", "123456789012345678901234567891"),
        ("9007199254740993", "9007199254740992"),  # within 64 bits: exact already
        ('"18446744073709551617"', "18446744073709551617"),  # a string is no number
        ("18446744073709551617", '"18446744073709551617"'),
    ],
)
def test_ids_are_matched_exactly_past_64_bits_and_floats(asked: str, other: str) -> None:
    """An answer to another request (-32022), then the probe's own DiscoverResult: the first settled the
    probe when its id read as the same float."""
    s = feed(
        LiveStats(),
        [
            frame("a", fmt.C2S, with_id(asked, PROBE)),
            frame("a", fmt.S2C, with_id(other, UNSUPPORTED)),
            frame("a", fmt.S2C, with_id(asked, discovered(MODERN))),
        ],
    )
    assert s["servers"]["srv"] == {"era": "modern", "outcomes": {"discover-result": 1}}


@pytest.mark.parametrize(
    ("asked", "other"),
    [
        ("9007199254740993.0", "9007199254740992.0"),  # two numbers one double stands for
        ("0.1", "0.1000000000000000055511151231257827"),
        ("9007199254740993e0", "9007199254740992"),
    ],
)
def test_two_spellings_of_one_double_are_one_id(tmp_path: Path, asked: str, other: str) -> None:
    """A number written with a fraction or an exponent is the double it reads as, to JavaScript, to
    Python's `json` and to the analyzer's `id`: an answer naming the other spelling answers the probe."""
    records = [frame("a", fmt.C2S, with_id(asked, PROBE)), frame("a", fmt.S2C, with_id(other, UNSUPPORTED))]
    outcomes = {"unsupported-version": 1}
    assert feed(LiveStats(), records)["servers"]["srv"] == {"era": "modern-other-version", "outcomes": outcomes}
    assert _analyzed(tmp_path, records) == {"era": "modern", "outcomes": outcomes}


@pytest.mark.parametrize(
    ("asked", "answered"),
    [("1", "1.0"), ("100", "1e2"), ("0", "-0"), ("18446744073709552000", "1.8446744073709551616e19"), ("0.5", "5e-1")],
)
def test_a_number_id_is_answered_by_the_same_number_written_otherwise(asked: str, answered: str) -> None:
    """As the analyzer pairs them (its `id` column reads `1.0` as `1`): one JSON number, one id."""
    s = feed(
        LiveStats(),
        [frame("a", fmt.C2S, with_id(asked, PROBE)), frame("a", fmt.S2C, with_id(answered, err(-32602)))],
    )
    assert s["servers"]["srv"] == {"era": "legacy", "outcomes": {"legacy-answer": 1}}


def test_ids_past_64_bits_on_an_http_sse_stream_settle_their_own_request() -> None:
    """The HTTP+SSE transport answers on the session's stream, by id: an `initialize` numbered 2**64 and
    a probe numbered 2**64 + 1 were one id, and the `initialize`'s result settled the probe."""
    stream, session = "http://s/sse", "/messages/?session_id=hmac:aaa"
    get = {fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": "g", "method": "GET", "url": stream, fmt.F_SERVER: stream}
    endpoint = {fmt.F_TYPE: fmt.SSE_EVENT, "flow": "g", "sse_event": "endpoint", fmt.F_RAW: session}

    def post(flow: str, text: str) -> list[dict[str, Any]]:
        url = "http://s" + session
        request = {fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": flow, "method": "POST", "url": url, fmt.F_SERVER: stream}
        request["headers"] = [["mcp-protocol-version", MODERN], ["mcp-method", D]]  # a well-formed probe's
        return [{**request, fmt.F_RAW: text}, {**resp(flow, 202, "Accepted", server=stream), "headers": []}]

    def answer(text: str) -> dict[str, Any]:
        return {fmt.F_TYPE: fmt.SSE_EVENT, "flow": "g", "sse_event": "message", fmt.F_SERVER: stream, fmt.F_RAW: text}

    big, bigger = str(2**64), str(2**64 + 1)
    s = feed(
        LiveStats(),
        [
            get, resp("g", 200, sse=True, server=stream), endpoint,
            *post("p1", with_id(big, {"method": INIT, "params": {}})),
            *post("p2", with_id(bigger, PROBE)),
            answer(with_id(big, ok({"protocolVersion": "2024-11-05"}))),
            answer(with_id(bigger, err(-32601))),
        ],
    )  # fmt: skip
    assert s["servers"][stream] == {"era": "legacy", "outcomes": {"legacy-answer": 1}}


def test_server_labels_are_capped() -> None:
    stats = LiveStats(max_servers=3)
    records = []
    for i in range(10):
        server = f"http://evil/{i}/" + "p" * 500
        records += [req(f"f{i}", probe(), server=server), resp(f"f{i}", 200, discovered(MODERN))]
    s = feed(stats, records)
    assert len(s["servers"]) == 4 and m.OTHER_SERVER in s["servers"]
    assert all(len(k) <= m.MAX_LABEL for k in s["servers"])
    assert s["servers"][m.OTHER_SERVER]["outcomes"] == {"discover-result": 7}
    assert s["server_labels_folded"] == 7


def test_server_labels_are_printable_text() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    stats = LiveStats()
    odd = "http://s/mcp\udcff\x1b[2J\u0085"  # a byte that was not UTF-8, ESC and a C1 control
    feed(stats, [req("f1", probe(), server=odd), resp("f1", 200, discovered(MODERN))])
    (label,) = stats.snapshot()["servers"]
    assert label == "http://s/mcp%FF%1B[2J%C2%85"
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RecorderCollector(stats.snapshot))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()  # raised UnicodeEncodeError: every scrape answered 500
    assert f'server="{label}"' in text and "\x1b" not in text


def _exposed_servers(stats: LiveStats) -> dict[str, dict[str, float]]:
    """Per `server` label of the exposition (read back by prometheus_client's parser), its outcomes."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(RecorderCollector(stats.snapshot))  # type: ignore[arg-type]
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in fam.samples:
            if "server" in sample.labels:
                per = out.setdefault(sample.labels["server"], {})
                if sample.name == "erascope_probe_outcomes_total":
                    per[sample.labels["outcome"]] = sample.value
    return out


@pytest.mark.parametrize("key", ["other", "", "<other>", "<empty>"])
def test_a_server_key_that_reads_as_the_fold_keeps_a_label_of_its_own(key: str) -> None:
    """The servers past the cap are counted under one label: a server whose key was that label's text
    (or empty, which was given it too) was merged with them, its legacy answer and their
    DiscoverResults under one name."""
    records = [req("f0", probe(), server=key), resp("f0", 400, err(-32600))]
    for i in range(1, 4):  # the second gets the last label, the third and fourth are folded
        server = f"http://s/{i}"
        records += [req(f"f{i}", probe(), server=server), resp(f"f{i}", 200, discovered(MODERN))]
    stats = LiveStats(max_servers=2)
    s = feed(stats, records)
    assert s["server_labels_folded"] == 2
    exposed = _exposed_servers(stats)
    assert len(exposed) == 3  # the key's, http://s/1's and the fold's
    assert exposed["http://s/1"] == {"discover-result": 1}
    assert sorted(sorted(outcomes.items()) for outcomes in exposed.values()) == [
        [("discover-result", 1)],
        [("discover-result", 2)],  # the fold's
        [("legacy-answer", 1)],  # the key's
    ]
    assert all(label for label in exposed)  # an empty label value is no label at all to Prometheus


HIDDEN = [
    ("\u202e", r"\u202e"),  # RIGHT-TO-LEFT OVERRIDE
    ("\u2066", r"\u2066"),  # LEFT-TO-RIGHT ISOLATE
    ("\u200f", r"\u200f"),  # RIGHT-TO-LEFT MARK
    ("\u061c", r"\u061c"),  # ARABIC LETTER MARK
    ("\u200b", r"\u200b"),  # ZERO WIDTH SPACE
    ("\u200d", r"\u200d"),  # ZERO WIDTH JOINER
    ("\u2060", r"\u2060"),  # WORD JOINER
    ("\ufeff", r"\ufeff"),  # BYTE ORDER MARK
    ("\u00ad", r"\xad"),  # SOFT HYPHEN
    ("\u2028", r"\u2028"),  # LINE SEPARATOR
    ("\u3164", r"\u3164"),  # HANGUL FILLER
    ("\ufe0f", r"\ufe0f"),  # VARIATION SELECTOR-16
    ("\U000e0041", r"\U000e0041"),  # TAG LATIN CAPITAL LETTER A
]


@pytest.mark.parametrize(("char", "written"), HIDDEN)
def test_server_labels_show_bidi_and_invisible_characters_as_escapes(char: str, written: str) -> None:
    """As the reports write them (`analyzer.terminal.visible`): a dashboard showed the key acted on
    (reordered) or without the character, two servers under one name. A key that holds the escape's
    text itself keeps a label of its own."""
    keys = [f"http://s/mcp{char}exe.evil", "http://s/mcpexe.evil", f"http://s/mcp{written}exe.evil"]
    stats = LiveStats()
    feed(
        stats,
        [r for i, k in enumerate(keys) for r in (req(f"f{i}", probe(), server=k), resp(f"f{i}", 400, err(-32600)))],
    )
    exposed = _exposed_servers(stats)
    labels = [f"http://s/mcp{written}exe.evil", "http://s/mcpexe.evil", f"http://s/mcp\\{written}exe.evil"]
    assert sorted(exposed) == sorted(labels)
    assert all(outcomes == {"legacy-answer": 1} for outcomes in exposed.values())


def test_pending_requests_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(m, "MAX_PENDING", 10)
    stats = LiveStats()
    feed(stats, [req(f"f{i}", probe()) for i in range(100)])  # never answered
    assert len(stats._pending) <= 10
    assert len(stats._flows) <= 10  # flows whose answer never came


def test_a_long_request_is_not_held_while_its_flow_is_open() -> None:
    """A flow's request is kept to tell its own answers on it from its session's others, but a long one
    is let go as soon as it is read: the recorder must not hold every open flow's body."""
    stats = LiveStats()
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"blob": "x" * m.MAX_KEPT_REQUEST}}
    feed(stats, [req("long", body)])
    entry = stats._flows["long"]
    assert isinstance(entry, m._Flow)
    assert entry.request is None
    assert entry.unread  # an answer with another id on it is taken for its own


def test_odd_records_are_ignored() -> None:
    stats = LiveStats()
    odd: list[dict[str, Any]] = [
        {},
        {fmt.F_TYPE: fmt.HTTP_REQUEST},
        {fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": "f", fmt.F_RAW: '{"method":"server/discover","id":{"a":1}}'},
        {fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": "f", fmt.F_RAW: '["server/discover"]'},
        {fmt.F_TYPE: fmt.HTTP_RESPONSE, "flow": "f", "status": "x", "headers": "nope"},
        {fmt.F_TYPE: fmt.FRAME, fmt.F_DIR: fmt.S2C, fmt.F_RAW_B64: "AAA="},
        {fmt.F_TYPE: fmt.LIFECYCLE, fmt.F_EVENT: None},
        {fmt.F_TYPE: "from-the-future"},
    ]
    s = feed(stats, odd)
    assert s["flows"] == 3 and s["servers"] == {}


# --- Prometheus exposition ------------------------------------------------------------------------------


def test_collector_output_parses_with_prometheus_client() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    stats = LiveStats()
    timeout = {fmt.F_TYPE: fmt.HTTP_ERROR, "flow": "x", "kind": "timeout"}
    feed(stats, [req("f1", probe()), resp("f1", 400, err(-32022)), timeout])

    def snapshot() -> dict[str, Any]:
        return {**stats.snapshot(), "records": 5, "bytes": 1234, "lost": 1, "write_errors": 2}

    registry = CollectorRegistry(auto_describe=False)
    registry.register(RecorderCollector(snapshot))  # type: ignore[arg-type]
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(generate_latest(registry).decode())
        for s in fam.samples
    }
    assert samples[("erascope_flows_total", ())] == 1
    assert samples[("erascope_bytes_written_total", ())] == 1234
    assert samples[("erascope_records_lost_total", ())] == 1
    assert samples[("erascope_write_errors_total", ())] == 2
    assert samples[("erascope_upstream_errors_total", (("kind", "timeout"),))] == 1
    key = (("outcome", "unsupported-version"), ("server", "http://s/mcp"))
    assert samples[("erascope_probe_outcomes_total", key)] == 1
    eras = {dict(k[1])["era"]: v for k, v in samples.items() if k[0] == "erascope_server_era"}
    assert eras == {"unknown": 0, "modern": 0, "modern-other-version": 1, "legacy": 0}


def _long_lines(repeat: int, *, panic: int, more: bool) -> list[dict[str, Any]]:
    """Two servers' records whose messages are long (read for their members first): a probe refused,
    an `initialize` answered, and (`more`) two calls of another method; then garbage of `panic`
    characters from the second server."""
    dump = orjson.dumps
    pad = {"note": '\u2019\u00e9\U0001f600 "initialize" ' * repeat}
    other = [
        frame("a", fmt.C2S, dump({"jsonrpc": "2.0", "id": 3, "method": "tools/call", **pad}).decode()),
        frame("a", fmt.C2S, dump({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "x": "y" * 70000}).decode()),
    ]
    return [
        event("a", fmt.EV_SPAWN),
        frame("a", fmt.C2S, dump({**probe(1), **pad}).decode()),
        frame("a", fmt.S2C, dump({**err(-32602), **pad}).decode()),
        frame("a", fmt.C2S, dump({**init(2), "x": pad}).decode()),
        frame("a", fmt.S2C, dump({**ok({"protocolVersion": "2025-11-25", **pad}), "id": 2}).decode()),
        *(other if more else []),
        event("b", fmt.EV_SPAWN),
        frame("b", fmt.C2S, dump({**probe("x"), **pad}).decode()),
        frame("b", fmt.S2C, "panic: " + "\u2603" * panic),
        event("b", fmt.EV_EXIT),
    ]


def _in_pieces(record: dict[str, Any], size: int) -> dict[str, Any]:
    """`record` with its text as the tee hands a long line's to the writer: `fmt.PieceText`, in pieces
    of `size` bytes (a character may be cut between two)."""
    data = record[fmt.F_RAW].encode()
    pieces = fmt.Pieces([data[i : i + size] for i in range(0, len(data), size)])
    return {**record, fmt.F_RAW: fmt.PieceText(pieces, b64=False)}


@pytest.mark.parametrize("size", [1, 7, 1000])
def test_a_long_line_in_pieces_counts_as_its_text(size: int) -> None:
    """A long line reaches the counters in pieces, never made one `str` (but for a client message that
    names a method looked for): the counters are those of the same lines as text, long or short."""
    records = _long_lines(3000, panic=40000, more=True)
    as_text = feed(LiveStats(), records)
    assert as_text["servers"]["srv"]["outcomes"] == {"legacy-answer": 1, "garbage": 1}
    pieced = [_in_pieces(r, size) if r[fmt.F_TYPE] == fmt.FRAME else r for r in records]
    assert feed(LiveStats(), pieced) == as_text


def test_a_long_line_in_pieces_counts_as_its_text_once_the_writer_wrote_it(tmp_path: Path) -> None:
    """The writer lets a long line's pieces go as it encodes them, before its observer (the counters) reads
    the record: the counters read the encoded text, to the same counts."""
    records = _long_lines(30000, panic=400000, more=False)
    counted = []
    for pieced in (False, True):
        stats = LiveStats()
        with CaptureWriter(tmp_path / str(pieced), transport=fmt.STDIO, server="srv", observer=stats.observe_all) as w:
            for r in records:
                w.write(_in_pieces(r, 70_000) if pieced and r[fmt.F_TYPE] == fmt.FRAME else dict(r))
        counted.append(stats.snapshot())
    assert counted[0]["servers"]["srv"]["outcomes"] == {"legacy-answer": 1, "garbage": 1}
    assert counted[1] == counted[0]


def test_a_death_after_the_host_stopped_the_server_is_no_crash() -> None:
    # The host's SIGTERM (relayed by the tee) ends the server before it answered: the client's doing,
    # like closing stdin. Ctrl-Z's SIGTSTP only stops it: a death after that is the server's own.
    s = feed(
        LiveStats(),
        [
            event("a", fmt.EV_SPAWN),
            frame("a", fmt.C2S, orjson.dumps(probe(1)).decode()),
            {**event("a", fmt.EV_SIGNAL), "signal": "SIGTERM", "forwarded": True},
            event("a", fmt.EV_SERVER_EOF),
            event("a", fmt.EV_EXIT),
            event("b", fmt.EV_SPAWN),
            frame("b", fmt.C2S, orjson.dumps(probe(1)).decode()),
            {**event("b", fmt.EV_SIGNAL), "signal": "SIGTSTP", "forwarded": True},
            event("b", fmt.EV_EXIT),
        ],
    )
    # a: nothing came before the host ended the server, so no answer
    assert s["servers"]["srv"] == {"era": "unknown", "outcomes": {"no-answer": 1, "connection-died": 1}}


def test_an_answer_the_recorder_cannot_decode_is_counted_as_such() -> None:
    # It was `garbage` for a body (the wire bytes are no JSON) and nothing at all for an event stream.
    s = feed(
        LiveStats(),
        [
            req("f1", probe(1)),
            {**resp("f1", 200), "raw_b64": "AAE=", "undecodable": "x-custom"},
            req("f2", probe(2)),
            resp("f2", 200, sse=True),
            {fmt.F_TYPE: fmt.SSE_END, "flow": "f2", "how": "clean", "undecodable": "x-custom"},
        ],
    )
    assert s["servers"]["http://s/mcp"] == {"era": "unknown", "outcomes": {"undecodable": 2}}


# --- lone surrogate escapes: the live counters read what the analyzer reads ------------------------------------


def _analyzed(tmp_path: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The analyzer's era and probe outcomes of `records` written as a stdio capture, as the counters hold them."""
    from analyzer.pipeline import analyze  # polars: only where a test compares with the analyzer
    from analyzer.report import report_dict

    with CaptureWriter(tmp_path / "cap", transport=fmt.STDIO, server="srv") as w:
        w.write({fmt.F_TYPE: fmt.LIFECYCLE, fmt.F_CONN: "a", fmt.F_EVENT: fmt.EV_SPAWN})
        for r in records:
            w.write({k: v for k, v in r.items() if k != fmt.F_SERVER})
    (server,) = report_dict(analyze([str(tmp_path)]))["servers"]
    return {"era": server["era"], "outcomes": server["probe_outcomes"]}


LONE = "\\ud800"
"""A lone surrogate's escape as a message's JSON text holds it: valid JSON (RFC 8259 allows it), which
orjson refuses and the analyzer reads."""
RELEASE = discovered(MODERN)
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
WELL_FORMED = {"method": D, "params": {"_meta": ENVELOPE}}
"""A probe the analyzer takes as well formed: a legacy answer to it is `legacy-answer`, not `malformed-probe`."""
NAMED = {"method": D, "params": {"_meta": ENVELOPE, "c": "?"}}


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        pytest.param(
            [
                frame("a", fmt.C2S, with_id("1", NAMED).replace("?", "c" + LONE)),
                frame("a", fmt.S2C, with_id("1", RELEASE)),
            ],
            {"era": "modern", "outcomes": {"discover-result": 1}},
            id="in-the-probe",
        ),
        pytest.param(
            [
                frame("a", fmt.C2S, with_id("1", WELL_FORMED)),
                frame("a", fmt.S2C, '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad c' + LONE + '"}}'),
            ],
            {"era": "legacy", "outcomes": {"legacy-answer": 1}},
            id="in-the-answer",
        ),
        pytest.param(
            [
                frame("a", fmt.C2S, with_id('"a' + LONE + '"', WELL_FORMED)),
                frame("a", fmt.S2C, with_id('"a\\udbff"', UNSUPPORTED)),  # another request's answer
                frame("a", fmt.S2C, with_id('"a' + LONE + '"', RELEASE)),
            ],
            {"era": "modern", "outcomes": {"discover-result": 1}},
            id="in-the-ids",
        ),
        # a low surrogate's escape alone, a high one's before an escape that is no low one: orjson and
        # the reader refused both, so the analyzer and the counters lost such messages alike
        pytest.param(
            [
                frame("a", fmt.C2S, with_id("1", NAMED).replace("?", "c\\udc00")),
                frame("a", fmt.S2C, with_id("1", RELEASE)),
            ],
            {"era": "modern", "outcomes": {"discover-result": 1}},
            id="low-in-the-probe",
        ),
        pytest.param(
            [
                frame("a", fmt.C2S, with_id("1", NAMED).replace("?", "c\\ud800\\u0041")),
                frame("a", fmt.S2C, with_id("1", RELEASE)),
            ],
            {"era": "modern", "outcomes": {"discover-result": 1}},
            id="high-before-another-in-the-probe",
        ),
        pytest.param(
            [
                frame("a", fmt.C2S, with_id("1", WELL_FORMED)),
                frame("a", fmt.S2C, '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad c\\udfff"}}'),
            ],
            {"era": "legacy", "outcomes": {"legacy-answer": 1}},
            id="low-in-the-answer",
        ),
        pytest.param(
            [
                frame("a", fmt.C2S, with_id('"a\\udc00"', WELL_FORMED)),
                frame("a", fmt.S2C, with_id('"a\\udc01"', UNSUPPORTED)),  # other requests' answers
                frame("a", fmt.S2C, with_id('"a"', UNSUPPORTED)),
                frame("a", fmt.S2C, with_id('"a\\udc00"', RELEASE)),
            ],
            {"era": "modern", "outcomes": {"discover-result": 1}},
            id="low-in-the-ids",
        ),
    ],
)
def test_messages_holding_a_lone_surrogate_escape_are_counted_as_the_analyzer_reads_them(
    tmp_path: Path, records: list[dict[str, Any]], expected: dict[str, Any]
) -> None:
    """orjson refuses such a message: a probe holding one was never counted, and an answer holding one
    left its probe pending, where the analyzer reads both."""
    assert feed(LiveStats(), records)["servers"].get("srv") == expected
    assert _analyzed(tmp_path, records) == expected


# --- malformed probes: a legacy-looking answer to one proves nothing ------------------------------------------

BARE: dict[str, Any] = {"method": D}
"""A `server/discover` without the envelope (a client that forgot `params._meta`)."""
NO_CAPABILITIES: dict[str, Any] = {
    "method": D,
    "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}},
}
LEGACY_REFUSAL: dict[str, Any] = {"error": {"code": -32602, "message": "Invalid request parameters", "data": ""}}


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        pytest.param(
            [frame("a", fmt.C2S, with_id("1", BARE)), frame("a", fmt.S2C, with_id("1", LEGACY_REFUSAL))],
            {"era": "unknown", "outcomes": {"malformed-probe": 1}},
            id="no-envelope",
        ),
        pytest.param(
            [
                frame("a", fmt.C2S, with_id("1", NO_CAPABILITIES)),
                frame("a", fmt.S2C, with_id("1", {"error": {"code": -32601, "message": "Method not found"}})),
            ],
            {"era": "unknown", "outcomes": {"malformed-probe": 1}},
            id="no-client-capabilities",
        ),
        pytest.param(
            [
                frame("a", fmt.C2S, with_id("1", WELL_FORMED)),
                frame("a", fmt.S2C, with_id("1", RELEASE)),
                frame("a", fmt.C2S, with_id("2", BARE)),
                frame("a", fmt.S2C, with_id("2", LEGACY_REFUSAL)),
            ],
            {"era": "modern", "outcomes": {"discover-result": 1, "malformed-probe": 1}},
            id="keeps-the-era",
        ),
        # guards: a malformed probe's modern answers still prove modern, as in the analyzer
        pytest.param(
            [frame("a", fmt.C2S, with_id("1", BARE)), frame("a", fmt.S2C, with_id("1", RELEASE))],
            {"era": "modern", "outcomes": {"discover-result": 1}},
            id="modern-answer",
        ),
    ],
)
def test_a_malformed_probe_is_counted_as_the_analyzer_counts_it(
    tmp_path: Path, records: list[dict[str, Any]], expected: dict[str, Any]
) -> None:
    """A probe without its envelope can land on a dual-era server's legacy path: its legacy error says
    nothing of the server's era. The counters called it `legacy-answer` and turned the era to `legacy`."""
    assert feed(LiveStats(), records)["servers"].get("srv") == expected
    assert _analyzed(tmp_path, records) == expected


def test_an_http_probe_without_the_version_headers_is_malformed() -> None:
    """Over HTTP a well-formed probe also names its version and method in headers: an SDK routes on
    the version header alone, so an enveloped probe without it is answered by a dual-era server's
    legacy path (400, -32600 "Missing session ID")."""
    envelope = {"jsonrpc": "2.0", "id": 1, **WELL_FORMED}
    modern = [["mcp-protocol-version", MODERN], ["mcp-method", D]]
    cases = {
        "none": [],
        "version only": modern[:1],
        "both": modern,
        "both, as sent": [[k.upper(), v] for k, v in modern],
    }
    got = {
        name: feed(LiveStats(), [{**req("f1", envelope), "headers": h}, resp("f1", 400, err(-32600))])["servers"]
        for name, h in cases.items()
    }
    malformed = {"http://s/mcp": {"era": "unknown", "outcomes": {"malformed-probe": 1}}}
    legacy = {"http://s/mcp": {"era": "legacy", "outcomes": {"legacy-answer": 1}}}
    assert got == {"none": malformed, "version only": malformed, "both": legacy, "both, as sent": legacy}


def _served(conn: str, ident: str) -> list[dict[str, Any]]:
    return [
        frame(conn, fmt.C2S, with_id(ident, {"method": INIT, "params": {"protocolVersion": "2025-11-25"}})),
        frame(conn, fmt.S2C, with_id(ident, ok({"protocolVersion": "2025-11-25"}))),
    ]


HANDSHAKE_ERA: dict[str, Any] = {
    "error": {"code": -32600, "message": "this connection serves the handshake protocol era"}
}


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        pytest.param(
            [
                *_served("a", "1"),
                frame("a", fmt.C2S, with_id("2", WELL_FORMED)),
                frame("a", fmt.S2C, with_id("2", HANDSHAKE_ERA)),
            ],
            {"cross-era-refusal": 1},
            id="after-initialize",
        ),
        # guards: the same refusal on another connection, and a legacy server's -32601 there
        pytest.param(
            [
                *_served("a", "1"),
                frame("b", fmt.C2S, with_id("2", WELL_FORMED)),
                frame("b", fmt.S2C, with_id("2", HANDSHAKE_ERA)),
            ],
            {"legacy-answer": 1},
            id="another-connection",
        ),
        pytest.param(
            [
                *_served("a", "1"),
                frame("a", fmt.C2S, with_id("2", WELL_FORMED)),
                frame("a", fmt.S2C, with_id("2", {"error": {"code": -32601, "message": "Method not found"}})),
            ],
            {"legacy-answer": 1},
            id="method-not-found",
        ),
    ],
)
def test_a_probe_refused_on_a_connection_initialize_opened_is_counted_as_the_analyzer_counts_it(
    tmp_path: Path, records: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    """A dual-era stdio server serves a connection in the era of its first request and refuses a probe on
    one a served `initialize` opened (-32600): the analyzer's `cross-era-refusal`, which the counters
    called `legacy-answer`."""
    records = [event("a", fmt.EV_SPAWN), *records]
    assert feed(LiveStats(), records)["servers"]["srv"]["outcomes"] == expected
    assert _analyzed(tmp_path, records)["outcomes"] == expected


GARBAGE_LINE = "panic: not initialized"
INITIALIZE: dict[str, Any] = {"method": INIT, "params": {"protocolVersion": "2025-11-25"}}


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        pytest.param(
            [
                frame("a", fmt.C2S, with_id("1", INITIALIZE)),
                frame("a", fmt.S2C, GARBAGE_LINE),
                frame("a", fmt.C2S, with_id("2", WELL_FORMED)),
                event("a", fmt.EV_EXIT),
            ],
            {"connection-died": 1},
            id="garbage-before-the-probe",
        ),
        pytest.param(
            [
                frame("a", fmt.C2S, with_id("1", WELL_FORMED)),
                frame("a", fmt.S2C, GARBAGE_LINE),
                frame("a", fmt.C2S, with_id("2", WELL_FORMED)),
                event("a", fmt.EV_EXIT),
            ],
            {"garbage": 1, "connection-died": 1},
            id="one-probe-before-one-after",
        ),
        pytest.param(
            [
                frame("a", fmt.C2S, with_id("1", WELL_FORMED)),
                frame("a", fmt.S2C, GARBAGE_LINE),
                event("a", fmt.EV_CLIENT_EOF),
                event("a", fmt.EV_EXIT),
            ],
            {"garbage": 1},
            id="the-client-left-after-garbage",
        ),
        # guards
        pytest.param(
            [
                frame("a", fmt.C2S, with_id("1", WELL_FORMED)),
                frame("a", fmt.S2C, GARBAGE_LINE),
                event("a", fmt.EV_EXIT),
            ],
            {"garbage": 1},
            id="garbage-then-death",
        ),
        pytest.param(
            [
                frame("a", fmt.C2S, with_id("1", WELL_FORMED)),
                event("a", fmt.EV_CLIENT_EOF),
                event("a", fmt.EV_EXIT),
            ],
            {"no-answer": 1},
            id="the-client-left-first",
        ),
    ],
)
def test_garbage_is_counted_for_the_probes_it_came_after(
    tmp_path: Path, records: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    """A line that is no JSON on a connection made every probe pending there at its death `garbage`,
    also one sent after that line; the analyzer counts it for the probes it came after (a probe sent
    since is `connection-died`), whether or not the client left before the death."""
    records = [event("a", fmt.EV_SPAWN), *records]
    assert feed(LiveStats(), records)["servers"]["srv"]["outcomes"] == expected
    assert _analyzed(tmp_path, records)["outcomes"] == expected


def _http_outcomes(tmp_path: Path, records: list[dict[str, Any]], *, keyed: bool = False) -> dict[str, int]:
    """The analyzer's probe outcomes of `records` written as an HTTP capture (`keyed`: with each record's
    server key, as the recorder writes them; the outcomes of `SERVER`)."""
    from analyzer.pipeline import analyze
    from analyzer.report import report_dict

    with CaptureWriter(tmp_path / "cap", transport=fmt.HTTP, server=SERVER) as w:
        for r in records:
            w.write(r if keyed else {k: v for k, v in r.items() if k != fmt.F_SERVER})
    servers = report_dict(analyze([str(tmp_path)]))["servers"]
    (server,) = [s for s in servers if s["server"] == SERVER] if keyed else servers
    return server["probe_outcomes"]


def _analyzed_http(tmp_path: Path, records: list[dict[str, Any]]) -> dict[str, int]:
    """`_http_outcomes` but `no-answer` (a timeout's outcome, left to the analyzer)."""
    return {k: v for k, v in _http_outcomes(tmp_path, records).items() if k != "no-answer"}


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        pytest.param(200, None, {}, id="200-no-body"),
        pytest.param(200, "", {}, id="200-empty"),
        pytest.param(204, None, {}, id="204"),
        pytest.param(202, discovered(MODERN), {}, id="202-result"),
        pytest.param(202, err(-32600), {}, id="202-error"),
        pytest.param(500, None, {"legacy-answer": 1}, id="500-no-body"),
        pytest.param(500, "Internal Server Error", {"legacy-answer": 1}, id="500-text"),
        pytest.param(501, "", {"legacy-answer": 1}, id="501-empty"),
        pytest.param(500, "{}", {"legacy-answer": 1}, id="500-json-no-message"),
        pytest.param(400, '{"jsonrpc":"2.0","id":1}', {"legacy-answer": 1}, id="400-json-no-answer"),
        pytest.param(200, '{"jsonrpc":"2.0","result":{}}', {"garbage": 1}, id="200-result-without-id"),
        # guards
        pytest.param(200, "Bad Gateway", {"garbage": 1}, id="200-text"),
        pytest.param(503, "", {"gateway-error": 1}, id="503-empty"),
        pytest.param(400, "", {"legacy-answer": 1}, id="400-empty"),
        pytest.param(200, discovered(MODERN), {"discover-result": 1}, id="200-result"),
    ],
)
def test_http_answers_that_say_nothing_are_counted_as_the_analyzer_counts_them(
    tmp_path: Path, status: int, body: Any, expected: dict[str, int]
) -> None:
    """A 2xx without a body is no answer to the analyzer (the counters said `garbage`), and a 202 is
    none whatever its body (README: the answer comes on another stream of the session; the counters
    read a JSON-RPC body in it). A 5xx without a JSON-RPC error but a gateway's is an answer other than
    the probe's, which a client falls back to legacy on: `legacy-answer` (the counters said `garbage`)."""
    records = [req("f1", probe(1)), resp("f1", status, body)]
    assert feed(LiveStats(), records)["servers"][SERVER]["outcomes"] == expected
    assert _analyzed_http(tmp_path, records) == expected


def _sse_event(flow: str, raw: str, index: int = 0) -> dict[str, Any]:
    return {fmt.F_TYPE: fmt.SSE_EVENT, "flow": flow, "index": index, "sse_event": "message", fmt.F_RAW: raw}


def _sse_end(flow: str, how: str) -> dict[str, Any]:
    return {fmt.F_TYPE: fmt.SSE_END, "flow": flow, "how": how, "events": 1}


@pytest.mark.parametrize(
    ("events", "how", "expected"),
    [
        pytest.param([GARBAGE_LINE], "upstream-reset", {"garbage": 1}, id="garbage-then-reset"),
        pytest.param([GARBAGE_LINE], "clean", {"garbage": 1}, id="garbage-then-end"),
        pytest.param(['{"no":"message"}'], "clean", {"garbage": 1}, id="json-no-message"),
        # guards
        pytest.param(
            [GARBAGE_LINE, orjson.dumps(discovered(MODERN)).decode()],
            "clean",
            {"discover-result": 1},
            id="garbage-then-answer",
        ),
        pytest.param([""], "upstream-reset", {"connection-died": 1}, id="no-data-then-reset"),
    ],
)
def test_garbage_on_a_probes_event_stream_is_counted_as_the_analyzer_counts_it(
    tmp_path: Path, events: list[str], how: str, expected: dict[str, int]
) -> None:
    """Events on a probe's stream that are no JSON-RPC message and no answer after them: the analyzer's
    `garbage` (a broken server), which the counters never counted (`connection-died` when the stream
    died, nothing when it ended)."""
    records = [
        req("f1", probe(1)),
        resp("f1", 200, sse=True),
        *(_sse_event("f1", raw, i) for i, raw in enumerate(events)),
        _sse_end("f1", how),
    ]
    assert feed(LiveStats(), records)["servers"][SERVER]["outcomes"] == expected
    assert _analyzed_http(tmp_path, records) == expected


def at(ts: float, record: dict[str, Any]) -> dict[str, Any]:
    """`record` as the recorder stamped it at `ts` seconds."""
    return {**record, fmt.F_TS: 1_800_000_000.0 + ts}


TOOLS_LIST: dict[str, Any] = {"method": "tools/list", "params": {}}
INITIALIZED: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def probed(*after: dict[str, Any]) -> list[dict[str, Any]]:
    """A well-formed probe at 0 s on connection `a`, then `after`."""
    return [at(0, frame("a", fmt.C2S, with_id("1", WELL_FORMED))), *after]


def s2c(ts: float, raw: str) -> dict[str, Any]:
    return at(ts, frame("a", fmt.S2C, raw))


def c2s(ts: float, raw: str, conn: str = "a") -> dict[str, Any]:
    return at(ts, frame(conn, fmt.C2S, raw))


NO_ANSWER = {"no-answer": 1}
ANSWERED = {"discover-result": 1}
LIST = with_id("2", TOOLS_LIST)
TIMED: list[tuple[str, list[dict[str, Any]], dict[str, int]]] = [
    ("death-after-the-timeout", [at(11, event("a", fmt.EV_EXIT))], NO_ANSWER),
    ("garbage-after-the-timeout", [s2c(11, GARBAGE_LINE), at(12, event("a", fmt.EV_EXIT))], NO_ANSWER),
    ("late-answer-after-the-client-moved-on", [c2s(1, LIST), s2c(12, with_id("1", RELEASE))], NO_ANSWER),
    (
        "late-answer-after-a-notification",
        [c2s(1, orjson.dumps(INITIALIZED).decode()), s2c(12, with_id("1", RELEASE))],
        NO_ANSWER,
    ),
    ("the-client-moved-on-after-the-timeout", [c2s(11, LIST)], NO_ANSWER),
    ("moved-on-in-time-and-again-after-the-timeout", [c2s(1, LIST), c2s(5, LIST), c2s(11, LIST)], NO_ANSWER),
    (
        "moved-on-from-a-probe-sent-after-a-move",
        [
            c2s(1, LIST),
            c2s(2, with_id("3", WELL_FORMED)),
            c2s(3, LIST),
            s2c(12.5, with_id("3", RELEASE)),
            c2s(13, LIST),
        ],
        {"no-answer": 2},
    ),
    (
        "a-probe-storm",
        [c2s(11, with_id("2", WELL_FORMED)), s2c(11.1, with_id("2", RELEASE))],
        {"no-answer": 1, "discover-result": 1},
    ),
    (
        "moved-on-on-another-connection",
        [at(0.5, event("b", fmt.EV_SPAWN)), c2s(1, with_id("1", TOOLS_LIST), "b"), s2c(12, with_id("1", RELEASE))],
        NO_ANSWER,
    ),
    ("the-client-left-first", [at(1, event("a", fmt.EV_CLIENT_EOF)), at(2, event("a", fmt.EV_EXIT))], NO_ANSWER),
    (
        "late-answer-after-the-client-left",
        [at(1, event("a", fmt.EV_CLIENT_EOF)), s2c(12, with_id("1", RELEASE)), at(13, event("a", fmt.EV_EXIT))],
        NO_ANSWER,
    ),
    # guards
    ("late-answer-the-client-waited-for", [s2c(30, with_id("1", RELEASE))], ANSWERED),
    ("moved-on-answered-in-time", [c2s(1, LIST), s2c(10, with_id("1", RELEASE))], ANSWERED),
    ("death-within-the-timeout", [at(10, event("a", fmt.EV_EXIT))], {"connection-died": 1}),
    ("garbage-in-time-then-the-client-moved-on", [s2c(9, GARBAGE_LINE), c2s(11, LIST)], {"garbage": 1}),
    ("moved-on-still-undecided", [c2s(1, LIST), s2c(5, with_id("2", {"result": {"tools": []}}))], {}),
]


@pytest.mark.parametrize(
    ("records", "expected"), [pytest.param(probed(*after), expected, id=name) for name, after, expected in TIMED]
)
def test_probes_are_timed_as_the_analyzer_times_them(
    tmp_path: Path, records: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    """The counters read the records' times as the analyzer reads them (`--probe-timeout`, 10 s by
    default): an answer, garbage or death after the timeout is none once the client moved on (sent
    that server anything else, or left), and a probe is `no-answer` as soon as nothing can change
    that any more. Before, a late answer or death counted as if it were in time, and `no-answer` was
    never told live."""
    records = [at(-1, event("a", fmt.EV_SPAWN)), *records]
    assert feed(LiveStats(), records)["servers"].get("srv", {}).get("outcomes", {}) == expected
    analyzed = _analyzed(tmp_path, records)["outcomes"]
    if expected == {}:
        assert analyzed == {"no-answer": 1}  # undecided live: an answer may still come
    else:
        assert analyzed == expected


def test_a_move_of_the_client_times_every_probe_of_its_server_before_it_and_none_after(tmp_path: Path) -> None:
    """Fifty probes of one server await their answers on as many connections when the client sends that
    server a request on another: each of them takes no answer after its timeout any more, and a probe
    sent after that move still does (its client waited). The counters note a move once for the server,
    not on each probe awaiting (a hung server's probes wait by the thousand while its traffic goes on)."""
    conns = [f"p{i}" for i in range(50)]
    records = [
        *(at(-1, event(conn, fmt.EV_SPAWN)) for conn in [*conns, "m", "late"]),
        *(c2s(0, with_id("1", WELL_FORMED), conn) for conn in conns),
        c2s(1, LIST, "m"),
        c2s(2, with_id("1", WELL_FORMED), "late"),
        *(at(13, frame(conn, fmt.S2C, with_id("1", RELEASE))) for conn in [*conns, "late"]),
    ]
    expected = {"no-answer": 50, "discover-result": 1}
    assert feed(LiveStats(), records)["servers"]["srv"]["outcomes"] == expected
    assert _analyzed(tmp_path, records)["outcomes"] == expected


@pytest.mark.parametrize(
    ("ending", "expected"),
    [
        pytest.param([resp("f1", 200, "")], {"no-answer": 1}, id="empty-answer"),
        pytest.param([resp("f1", 200, sse=True), _sse_end("f1", "clean")], {"no-answer": 1}, id="stream-ended"),
        pytest.param(
            [resp("f1", 200, sse=True), at(11, _sse_end("f1", "upstream-reset"))], {"no-answer": 1}, id="late-reset"
        ),
        # guard
        pytest.param(
            [resp("f1", 200, sse=True), at(9, _sse_end("f1", "upstream-reset"))],
            {"connection-died": 1},
            id="reset-in-time",
        ),
    ],
)
def test_an_http_probe_left_unanswered_is_no_answer_once_the_client_moved_on(
    tmp_path: Path, ending: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    """A probe's flow that ended without an answer stays undecided (a resumed stream may still bring
    it) until the client sends that server something else after the timeout: then it is `no-answer`,
    as the analyzer says; before, the counters forgot it."""
    records = [
        at(0, req("f1", probe(1))),
        *(r if fmt.F_TS in r else at(0.1, r) for r in ending),
        at(12, req("f2", {"jsonrpc": "2.0", "id": 2, **TOOLS_LIST})),
    ]
    assert feed(LiveStats(), records)["servers"][SERVER]["outcomes"] == expected
    assert _http_outcomes(tmp_path, records) == expected


ANSWER = {"result": {"supportedVersions": [MODERN], "capabilities": {}}}
NOTE = '{"jsonrpc":"2.0","method":"notifications/message"}'
DIED = {"connection-died": 1}
GARBAGE = {"garbage": 1}


def _batch(*members: str) -> str:
    return "[" + ",".join(members) + "]"


EXIT = event("a", fmt.EV_EXIT)
BATCHES: list[tuple[str, list[dict[str, Any]], dict[str, int]]] = [
    ("a-probe-in-a-batch", [c2s(0, _batch(with_id("1", WELL_FORMED))), s2c(1, _batch(with_id("1", ANSWER)))], ANSWERED),
    (
        "two-probes-in-a-batch",
        [
            c2s(0, _batch(with_id("1", WELL_FORMED), with_id("2", WELL_FORMED))),
            s2c(1, with_id("2", ANSWER)),
            s2c(2, with_id("1", UNSUPPORTED)),
        ],
        {"discover-result": 1, "unsupported-version": 1},
    ),
    ("its-answer-in-a-batch", probed(s2c(1, _batch(with_id("1", ANSWER)))), ANSWERED),
    (
        "its-answer-in-a-batch-beside-garbage",
        [c2s(0, with_id("1e0", WELL_FORMED)), s2c(1, _batch("7", with_id("1.0", ANSWER)))],
        ANSWERED,
    ),
    ("a-batch-of-other-messages-is-no-garbage", probed(s2c(1, _batch(NOTE, with_id("7", ANSWER))), EXIT), DIED),
    ("an-object-that-is-no-message-is-garbage", probed(s2c(1, "{}"), EXIT), GARBAGE),
    ("an-id-without-a-result-is-garbage", probed(s2c(1, '{"jsonrpc":"2.0","id":1}'), EXIT), GARBAGE),
    (
        "a-late-answer-to-a-probe-batched-before-a-notification",
        [c2s(0, _batch(with_id("1", WELL_FORMED), orjson.dumps(INITIALIZED).decode())), s2c(12, with_id("1", ANSWER))],
        NO_ANSWER,
    ),
    # guards
    ("an-empty-batch-is-garbage", probed(s2c(1, "[]"), EXIT), GARBAGE),
    ("a-batch-of-no-message-is-garbage", probed(s2c(1, _batch("7")), EXIT), GARBAGE),
]


@pytest.mark.parametrize(
    ("records", "expected"), [pytest.param(records, expected, id=name) for name, records, expected in BATCHES]
)
def test_batches_and_objects_that_are_no_message_are_read_as_the_analyzer_reads_them(
    tmp_path: Path, records: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    """A JSON-RPC batch is its members: a probe in one was not counted at all, an answer in one was
    `garbage` (so was a batch of notifications), and a JSON object that is no JSON-RPC message (`{}`,
    an id without a result) was no garbage, where the analyzer reads each member and calls an object
    that is no message garbage."""
    records = [event("a", fmt.EV_SPAWN), *records]
    assert feed(LiveStats(), records)["servers"].get("srv", {}).get("outcomes", {}) == expected
    assert _analyzed(tmp_path, records)["outcomes"] == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param({"body": _batch(with_id("1", ANSWER))}, {"discover-result": 1}, id="body-its-answer"),
        pytest.param({"body": _batch(NOTE, with_id("7", ANSWER))}, {"discover-result": 1}, id="body-after-a-note"),
        pytest.param({"body": _batch(with_id("1", ANSWER), "5")}, {"discover-result": 1}, id="body-then-garbage"),
        pytest.param({"body": _batch(with_id("7", UNSUPPORTED))}, {"unsupported-version": 1}, id="body-an-error"),
        pytest.param({"events": [_batch(with_id("1", ANSWER))]}, {"discover-result": 1}, id="event-its-answer"),
        pytest.param({"events": [_batch(with_id("7", ANSWER))]}, {"connection-died": 1}, id="event-another-answer"),
        pytest.param({"events": [_batch(NOTE)]}, {"connection-died": 1}, id="event-a-note"),
        # guards
        pytest.param({"body": _batch("5", with_id("1", ANSWER))}, {"garbage": 1}, id="body-garbage-first"),
        pytest.param({"body": "[]"}, {"garbage": 1}, id="body-empty"),
        pytest.param({"body": "{}"}, {"garbage": 1}, id="body-no-message"),
        pytest.param({"events": ["[]"]}, {"garbage": 1}, id="event-empty"),
        pytest.param({"events": [_batch("{}", with_id("1", ANSWER))]}, {"discover-result": 1}, id="event-answer-wins"),
    ],
)
def test_http_batch_answers_are_read_as_the_analyzer_reads_them(
    tmp_path: Path, answer: dict[str, Any], expected: dict[str, int]
) -> None:
    """An answer to a probe's POST in a JSON-RPC batch (the body, or an event's data) was garbage: the
    body's first member that answers (or is no message) is its answer, as the analyzer reads it, and
    an event's members are read for the probe's id."""
    records: list[dict[str, Any]] = [req("f1", probe(1))]
    if "body" in answer:
        records.append(resp("f1", 200, answer["body"]))
    else:
        records.append(resp("f1", 200, sse=True))
        records += [_sse_event("f1", raw, i) for i, raw in enumerate(answer["events"])]
        records.append(_sse_end("f1", "upstream-reset"))
    assert feed(LiveStats(), records)["servers"][SERVER]["outcomes"] == expected
    assert _analyzed_http(tmp_path, records) == expected


def test_an_http_sse_answer_in_a_batch_settles_its_request(tmp_path: Path) -> None:
    """The HTTP+SSE transport answers on the session's stream: an answer in a batch there was not read."""
    stream = "http://s/sse"
    session = "/messages/?session_id=abc"
    events = [_batch(with_id("7", ANSWER), with_id("1", ANSWER))]
    records: list[dict[str, Any]] = [
        {fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": "g", "method": "GET", "url": stream, "headers": [], fmt.F_RAW: ""},
        resp("g", 200, sse=True),
        {fmt.F_TYPE: fmt.SSE_EVENT, "flow": "g", "index": 0, "sse_event": "endpoint", fmt.F_RAW: session},
        {**req("p1", probe(1)), "method": "POST", "url": "http://s" + session},
        {**resp("p1", 202, "Accepted"), "headers": []},
        *(_sse_event("g", raw, i + 1) for i, raw in enumerate(events)),
    ]
    records = [{**r, fmt.F_SERVER: stream} for r in records]
    assert feed(LiveStats(), records)["servers"][stream]["outcomes"] == {"discover-result": 1}
    assert _analyzed_http(tmp_path, records) == {"discover-result": 1}


def _in_session(record: dict[str, Any], session: str | None) -> dict[str, Any]:
    """`record` with the `Mcp-Session-Id` header of Streamable HTTP's `session` (None: without one)."""
    if session is None:
        return record
    return {**record, "headers": [*record["headers"], ["mcp-session-id", session]]}


def _posted(ts: float, flow: str, msg: dict[str, Any], session: str | None = None) -> list[dict[str, Any]]:
    """A POST of `msg` whose answer is an event stream that opens."""
    return [at(ts, _in_session(req(flow, msg), session)), at(ts + 0.01, resp(flow, 200, sse=True))]


def _get_stream(ts: float, flow: str, session: str | None = None) -> list[dict[str, Any]]:
    """Streamable HTTP's standalone GET stream, opened."""
    get = {fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": flow, "method": "GET", "url": SERVER, "headers": [], fmt.F_RAW: ""}
    return [at(ts, _in_session(get, session)), at(ts + 0.01, resp(flow, 200, sse=True))]


def _left(ts: float, flow: str, session: str | None = None) -> list[dict[str, Any]]:
    """A probe POSTed at `ts` whose stream ended without an answer (it stays pending)."""
    return [*_posted(ts, flow, probe(1), session), at(ts + 0.02, _sse_end(flow, "clean"))]


def _died(ts: float, flow: str, session: str | None = None) -> list[dict[str, Any]]:
    """A probe POSTed at `ts` whose stream was reset before its answer."""
    return [*_posted(ts, flow, probe(1), session), at(ts + 0.02, _sse_end(flow, "upstream-reset"))]


def _garbled(ts: float, flow: str, session: str | None = None) -> list[dict[str, Any]]:
    """A probe POSTed at `ts` whose stream carried garbage, then ended."""
    garbage = at(ts + 0.02, _sse_event(flow, GARBAGE_LINE))
    return [*_posted(ts, flow, probe(1), session), garbage, at(ts + 0.03, _sse_end(flow, "clean"))]


def _answered(ts: float, flow: str, ident: int = 1) -> dict[str, Any]:
    return at(ts, {**_sse_event(flow, with_id(str(ident), ANSWER)), fmt.F_SERVER: SERVER})


LIST_1 = {"jsonrpc": "2.0", "id": 1, **TOOLS_LIST}
SERVER_PING_1 = '{"jsonrpc":"2.0","id":1,"method":"ping"}'
LIST_2 = {"jsonrpc": "2.0", "id": 2, **TOOLS_LIST}
ELSEWHERE: list[tuple[str, list[dict[str, Any]], dict[str, int]]] = [
    ("no-session-on-either-flow", [*_left(0, "p"), *_get_stream(1, "g"), _answered(2, "g")], NO_ANSWER),
    ("the-probe-in-no-session", [*_left(0, "p"), *_get_stream(1, "g", "S"), _answered(2, "g")], NO_ANSWER),
    ("another-sessions-stream", [*_left(0, "p", "S"), *_get_stream(1, "g", "T"), _answered(2, "g")], NO_ANSWER),
    ("a-stream-of-no-session", [*_left(0, "p", "S"), *_get_stream(1, "g"), _answered(2, "g")], NO_ANSWER),
    (
        "a-newer-request-of-the-session-took-its-id",
        [
            *_left(0, "p", "S"),
            *_posted(1, "q", LIST_1, "S"),
            at(1.5, _sse_end("q", "clean")),
            *_get_stream(2, "g", "S"),
            _answered(3, "g"),
        ],
        NO_ANSWER,
    ),
    ("on-another-posts-stream", [*_left(0, "p", "S"), *_posted(1, "q", LIST_2, "S"), _answered(2, "q")], ANSWERED),
    (
        "on-another-probes-stream",
        [*_left(0, "p", "S"), *_posted(1, "q", probe(2), "S"), _answered(2, "q")],
        {"discover-result": 1, "no-answer": 1},
    ),
    (
        "on-a-stream-its-response-named-the-session",
        [
            *_left(0, "p", "S"),
            at(1, req("q", LIST_2)),
            at(1.01, _in_session(resp("q", 200, sse=True), "S")),
            _answered(2, "q"),
        ],
        ANSWERED,
    ),
    (
        "its-stream-died-then-the-answer-came-elsewhere-in-time",
        [*_died(0, "p", "S"), *_get_stream(1, "g", "S"), _answered(2, "g")],
        ANSWERED,
    ),
    (
        "garbage-on-its-stream-then-the-answer-came-elsewhere",
        [*_garbled(0, "p", "S"), *_get_stream(1, "g", "S"), _answered(2, "g")],
        ANSWERED,
    ),
    (
        "garbage-then-a-late-answer-elsewhere-the-client-waited-for",
        [*_garbled(0, "p", "S"), *_get_stream(1, "g", "S"), _answered(11, "g")],
        ANSWERED,
    ),
    (
        "garbage-then-a-late-end-then-a-late-answer-the-client-waited-for",
        [
            *_posted(0, "p", probe(1), "S"),
            at(1, _sse_event("p", GARBAGE_LINE)),
            at(10.5, _sse_end("p", "clean")),
            *_get_stream(1, "g", "S"),
            _answered(11, "g"),
        ],
        ANSWERED,
    ),
    # guards
    (
        "an-older-request-of-the-session-with-its-id-answered",
        [*_posted(0, "q", LIST_1, "S"), *_left(1, "p", "S"), _answered(2, "q")],
        NO_ANSWER,
    ),
    ("its-stream-died-then-a-late-answer", [*_died(0, "p", "S"), *_get_stream(1, "g", "S"), _answered(11, "g")], DIED),
    ("its-stream-died-then-nothing", _died(0, "p", "S"), DIED),
    ("garbage-on-its-stream-then-nothing", _garbled(0, "p", "S"), GARBAGE),
    ("its-stream-died-in-no-session", [*_died(0, "p"), *_get_stream(1, "g", "S"), _answered(2, "g")], DIED),
    ("the-sessions-get-stream", [*_left(0, "p", "S"), *_get_stream(1, "g", "S"), _answered(2, "g")], ANSWERED),
    ("opened-before-the-probe", [*_get_stream(0, "g", "S"), *_left(1, "p", "S"), _answered(2, "g")], ANSWERED),
    (
        # the server's request is answered by the client's POST, never on a stream: the answer is the probe's
        "after-a-server-request-of-its-id",
        [*_left(0, "p", "S"), *_get_stream(1, "g", "S"), at(1.5, _sse_event("g", SERVER_PING_1)), _answered(2, "g")],
        ANSWERED,
    ),
    (
        "the-probe-named-the-session-in-its-response-only",
        [
            at(0, req("p", probe(1))),
            at(0.01, _in_session(resp("p", 200, sse=True), "S")),
            at(0.02, _sse_end("p", "clean")),
            *_posted(1, "q", LIST_2, "S"),
            _answered(2, "q"),
        ],
        NO_ANSWER,
    ),
]


@pytest.mark.parametrize(
    ("records", "expected"), [pytest.param(records, expected, id=name) for name, records, expected in ELSEWHERE]
)
def test_an_answer_on_another_flow_is_paired_by_session_as_the_analyzer_pairs_it(
    tmp_path: Path, records: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    """A probe whose own stream ended without its answer takes an answer on another flow only from a
    flow of its own session (the `Mcp-Session-Id` of its request, or its URL's `session_id`) that no
    newer request of the session with its id came before, as the analyzer pairs answers across flows.
    The counters took any answer with its id on any GET stream of its server (a probe of no session,
    another session's stream), and none on another POST's stream of its session. Such an answer in
    time wins over garbage or a death on the probe's own stream (the analyzer's first rule); the
    counters had decided those already."""
    records = [{fmt.F_SERVER: SERVER, **r} for r in records]
    records.append(at(12, req("z", {"jsonrpc": "2.0", "id": 9, **TOOLS_LIST})))  # moved on past the timeout
    assert feed(LiveStats(), records)["servers"][SERVER]["outcomes"] == expected
    assert _http_outcomes(tmp_path, records) == expected


NOTICE = '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"tick"}}'
OTHER_SERVER_KEY = "http://t/mcp"
PASSING: list[tuple[str, list[dict[str, Any]], dict[str, int]]] = [
    (
        "its-stream-died-then-the-server-wrote-past-the-timeout",
        [*_died(0, "p", "S"), *_get_stream(1, "g", "T"), at(11, _sse_event("g", NOTICE))],
        DIED,
    ),
    (
        "its-stream-died-then-another-server-was-asked-past-the-timeout",
        [*_died(0, "p", "S"), at(11, req("z", LIST_2, OTHER_SERVER_KEY))],
        DIED,
    ),
    (
        "its-stream-died-then-a-late-answer-elsewhere",
        [*_died(0, "p", "S"), *_get_stream(1, "g", "S"), at(11, _sse_event("g", NOTICE)), _answered(12, "g")],
        DIED,
    ),
    # guards: a late answer may still come to a client that waited, so these stay undecided
    (
        "garbage-on-its-stream-then-the-server-wrote-past-the-timeout",
        [*_garbled(0, "p", "S"), *_get_stream(1, "g", "T"), at(11, _sse_event("g", NOTICE))],
        {},
    ),
    (
        "its-stream-ended-then-the-server-wrote-past-the-timeout",
        [*_left(0, "p", "S"), *_get_stream(1, "g", "T"), at(11, _sse_event("g", NOTICE))],
        {},
    ),
    (
        "its-stream-died-then-nothing-past-the-timeout",
        [*_died(0, "p", "S"), at(9, req("z", LIST_2, OTHER_SERVER_KEY))],
        {},
    ),
]


@pytest.mark.parametrize(
    ("records", "expected"), [pytest.param(records, expected, id=name) for name, records, expected in PASSING]
)
def test_a_probe_whose_stream_died_is_counted_once_its_timeout_has_passed(
    tmp_path: Path, records: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    """A probe whose own stream died in time while its answer might still come on another flow of its
    session is `connection-died` once any record shows its timeout has passed: a later answer comes
    too late to a client that saw its stream die. The counters held it undecided until the client
    sent that server something else, which a client that gave up on the server may never do (the
    gate's count never came). Garbage, or a stream that ended cleanly, still waits: a late answer
    wins there for a client that waited. The analyzer, at the end of the same capture, agrees on the
    decided ones."""
    records = [{fmt.F_SERVER: SERVER, **r} for r in records]
    assert feed(LiveStats(), records)["servers"][SERVER]["outcomes"] == expected
    if expected:
        assert _http_outcomes(tmp_path, records, keyed=True) == expected


def _long(raw: str) -> str:
    """`raw`, a JSON object, made long with a member of padding (read in pieces by the counters)."""
    return raw[:-1] + ',"pad":"' + "x" * 70000 + '"}'


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param(
            _long('{"jsonrpc":"2.0","id":"s1","result":{"content":[],"request":{"method":"GET"}}}'),
            ANSWERED,
            id="an-answer-naming-a-method-inside",
        ),
        pytest.param(_long('{"jsonrpc":"2.0","id":7,"\\u006dethod":"tools/list"}'), NO_ANSWER, id="an-escaped-call"),
        # guards
        pytest.param(_long('{"jsonrpc":"2.0","id":7,"method":"tools/list"}'), NO_ANSWER, id="a-call"),
        pytest.param(_long('{"jsonrpc":"2.0","id":"s1","result":{}}'), ANSWERED, id="an-answer"),
    ],
)
def test_a_long_client_line_moves_on_only_when_it_is_a_call(
    tmp_path: Path, line: str, expected: dict[str, int]
) -> None:
    """A long client line (in pieces) while a probe waits is the client moving on only when it is a
    request or a notification, as the analyzer decodes it: one naming `method` anywhere counted (an
    answer to the server's request whose result holds a `method` member), and one whose `method` name
    is written with an escape did not."""
    records = [
        at(-1, event("a", fmt.EV_SPAWN)),
        *probed(at(1, _in_pieces(frame("a", fmt.C2S, line), 1000)), s2c(12, with_id("1", RELEASE))),
    ]
    assert feed(LiveStats(), records)["servers"]["srv"]["outcomes"] == expected
    assert _analyzed(tmp_path, records)["outcomes"] == expected  # the writer writes the pieces as the line
