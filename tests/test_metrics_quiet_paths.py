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
from tests.test_metrics import SERVER, _http_outcomes, _in_session, _sse_end, _sse_event, probe, req, resp

SESSION: Final = "hmac:5e55"
WAITING: Final = req("o1", probe(9), server="http://other/mcp")
"""A probe of another server awaiting its answer: records are then read under the lock."""


def _named_by_the_response() -> list[dict[str, Any]]:
    """A stream opened by a request that names no session, whose response names it (`Mcp-Session-Id`);
    a probe of that session POSTed on another flow, accepted, and answered on the first flow's stream."""
    discovered = {"supportedVersions": ["2026-07-28"], "capabilities": {}}
    result = orjson.dumps({"jsonrpc": "2.0", "id": 7, "result": discovered}).decode()
    return [
        req("g1", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        _in_session(resp("g1", 200, sse=True), SESSION),
        _in_session(req("p1", probe(7)), SESSION),
        resp("p1", 202),
        {**_sse_event("g1", result), fmt.F_SERVER: SERVER},
    ]


@pytest.mark.parametrize("pending_elsewhere", [False, True], ids=["nothing-pending", "a-probe-pending"])
def test_a_session_named_by_a_streams_response_pairs_an_answer_on_it(tmp_path: Path, pending_elsewhere: bool) -> None:
    records = _named_by_the_response()
    stats = LiveStats()
    stats.observe_all([WAITING, *records] if pending_elsewhere else records)
    counted = stats.snapshot()["servers"][SERVER]["outcomes"]
    assert counted == {"discover-result": 1}
    assert counted == _http_outcomes(tmp_path, records)


def test_the_open_streams_are_counted_alike_read_beside_the_lock_or_under_it() -> None:
    for before in ([], [WAITING]):
        stats = LiveStats()
        stats.observe_all([*before, *_named_by_the_response()[:2]])  # the stream opened, nothing else awaited
        assert stats.snapshot()["sse_open"] == 1
        stats.observe_all([_sse_end("g1", "clean")])
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
