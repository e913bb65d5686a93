"""The live counters decide most HTTP records without the lock (`LiveStats.observe_all`: a request that is
neither a probe nor an `initialize`, a response, an event or a stream's end while no answer is awaited).
What those records leave for later must be what the full reading leaves: the open streams, and the
session a flow's stream belongs to, by which an answer on it pairs with a request of another flow."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import orjson
import pytest

from addon import format as fmt
from addon.metrics import LiveStats, _is_event_stream, _names_event_stream
from tests.test_metrics import _http_outcomes

SERVER: Final = "http://s/mcp"
ENVELOPE: Final = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
PROBE_HEADERS: Final = [["mcp-protocol-version", "2026-07-28"], ["mcp-method", "server/discover"]]
SESSION: Final = "hmac:5e55"


def _request(flow: str, body: dict[str, Any] | None, headers: list[list[str]]) -> dict[str, Any]:
    record = {fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": flow, "method": "POST" if body else "GET", "url": SERVER,
              "headers": headers, fmt.F_SERVER: SERVER}  # fmt: skip
    if body is not None:
        record[fmt.F_RAW] = orjson.dumps({"jsonrpc": "2.0", **body}).decode()
    return record


def _stream(flow: str, headers: list[list[str]]) -> dict[str, Any]:
    return {fmt.F_TYPE: fmt.HTTP_RESPONSE, "flow": flow, "status": 200, "streamed": True, "headers": headers,
            fmt.F_SERVER: SERVER}  # fmt: skip


def _accepted(flow: str) -> dict[str, Any]:
    return {fmt.F_TYPE: fmt.HTTP_RESPONSE, "flow": flow, "status": 202, "streamed": False, "headers": [],
            fmt.F_SERVER: SERVER}  # fmt: skip


def _event(flow: str, body: dict[str, Any]) -> dict[str, Any]:
    raw = orjson.dumps({"jsonrpc": "2.0", **body}).decode()
    return {fmt.F_TYPE: fmt.SSE_EVENT, "flow": flow, "index": 0, "sse_event": "message", fmt.F_RAW: raw,
            fmt.F_SERVER: SERVER}  # fmt: skip


PROBE: Final = {"id": 7, "method": "server/discover", "params": {"_meta": ENVELOPE}}
RESULT: Final = {"id": 7, "result": {"supportedVersions": ["2026-07-28"]}}


def _named_by_the_response(pending_elsewhere: bool) -> list[dict[str, Any]]:
    """A stream opened by a request that names no session, whose response names it (`Mcp-Session-Id`);
    a probe of that session POSTed on another flow, accepted, and answered on the first flow's stream.
    `pending_elsewhere`: a probe of another server awaits its answer meanwhile, so that the stream's
    response is read under the lock instead of beside it."""
    other = "http://other/mcp"
    waiting = {**_request("o1", PROBE, PROBE_HEADERS), fmt.F_SERVER: other}
    return [
        *([waiting] if pending_elsewhere else []),
        _request("g1", {"id": 1, "method": "tools/list"}, [["content-type", "application/json"]]),
        _stream("g1", [["content-type", "text/event-stream"], ["mcp-session-id", SESSION]]),
        _request("p1", PROBE, [*PROBE_HEADERS, ["mcp-session-id", SESSION]]),
        _accepted("p1"),
        _event("g1", RESULT),
    ]


@pytest.mark.parametrize("pending_elsewhere", [False, True], ids=["nothing-pending", "a-probe-pending"])
def test_a_session_named_by_a_streams_response_pairs_an_answer_on_it(tmp_path: Path, pending_elsewhere: bool) -> None:
    records = _named_by_the_response(pending_elsewhere)
    stats = LiveStats()
    stats.observe_all(records)
    counted = stats.snapshot()["servers"][SERVER]["outcomes"]
    assert counted == {"discover-result": 1}
    analyzed = _http_outcomes(tmp_path, [r for r in records if r[fmt.F_SERVER] == SERVER])
    assert counted == analyzed


def test_the_open_streams_are_counted_alike_read_beside_the_lock_or_under_it() -> None:
    for pending_elsewhere in (False, True):
        stats = LiveStats()
        stats.observe_all(_named_by_the_response(pending_elsewhere)[:-1])
        assert stats.snapshot()["sse_open"] == 1
        stats.observe_all([{fmt.F_TYPE: fmt.SSE_END, "flow": "g1", "how": "clean", "events": 1}])
        assert stats.snapshot()["sse_open"] == 0


HEADER_SHAPES: Final = [
    [["content-type", "text/event-stream"]],
    [["content-type", "text/event-stream"], ["mcp-session-id", "x"]],
    [["Content-Type", "text/event-stream"]],
    [["CONTENT-TYPE", "Text/Event-Stream; charset=utf-8"]],
    [["content-type", "text/event-stream"], ["content-type", "text/event-stream"]],
    [["content-type", "text/event-stream"], ["Content-Type", "text/plain"]],
    [["content-type", "application/json"]],
    [["x-request-id", "1"], ["content-type", "text/event-stream"]],
    [("content-type", "text/event-stream")],
    [{"content-type": 1, "text/event-stream": 2}],
    [["content-type", "text/event-stream", "x"]],
    [["content-type"]],
    [[12, "text/event-stream"]],
    [["content-type", None]],
    [["content-type", 7]],
    ["ab", ["content-type", "text/event-stream"]],
    [b"ab", ["content-type", "text/event-stream"]],
    [None, ["content-type", "text/event-stream"]],
    [["\u212a" * 12, "text/event-stream"]],
    [["content-typ\u0130", "text/event-stream"]],
    [],
    {"content-type": "text/event-stream"},
    None,
]


@pytest.mark.parametrize("headers", HEADER_SHAPES, ids=range(len(HEADER_SHAPES)))
def test_a_streams_content_type_is_read_alike_by_the_quick_look_and_the_full_one(headers: Any) -> None:
    full = _names_event_stream(headers) if isinstance(headers, list) else False
    assert _is_event_stream(headers) == full
