"""Answers on another flow of the same session: the HTTP+SSE transport and Streamable HTTP's GET streams.

The deprecated HTTP+SSE transport (2024-11-05) answers every POST `202 Accepted` and sends the
JSON-RPC answer as an event on the GET stream that `endpoint` opened; Streamable HTTP servers may
answer on the standalone GET stream. These tests pair such answers by (session, id), and check that
what is not in the session (another session, another id) stays unpaired. The real-peer captures are
`captures/corpus/legacy-sse-http` and `auto-probe-sse-http` (goldens in `tests/goldens`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import polars as pl

from addon.writer import CaptureWriter
from analyzer.load import LoadOptions, combine, extract_file
from tests.test_messages import Cap, init, init_result, messages_of, run

SESSION = "61c928c8ebe74f5f94686cf049ab650b"
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 3}}}
CALL_RESULT = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "5"}], "isError": False}}


class SseCap(Cap):
    """A `Cap` that also writes the HTTP+SSE transport's GET stream and its session-scoped POSTs."""

    def get_stream(self, flow: str, conn: str = "get-conn", headers: list[list[str]] | None = None) -> None:
        self.record({"type": "http.request", "conn": conn, "flow": flow, "dir": "c2s", "method": "GET",
                     "url": "http://127.0.0.1/sse", "headers": headers or [["Accept", "text/event-stream"]],
                     "raw": "", "len": 0})  # fmt: skip
        self.record({"type": "http.response", "conn": conn, "flow": flow, "dir": "s2c", "status": 200,
                     "headers": [["content-type", "text/event-stream"]], "streamed": True,
                     "peer": "10.0.0.1:8000"})  # fmt: skip

    def endpoint(self, flow: str, session: str, conn: str = "get-conn") -> None:
        data = f"/messages/?session_id={session}"
        self.record({"type": "sse.event", "conn": conn, "flow": flow, "dir": "s2c", "index": 0,
                     "sse_event": "endpoint", "raw": data, "len": len(data)})  # fmt: skip

    def post(self, flow: str, session: str, body: Any) -> None:
        raw = body if isinstance(body, str) else orjson.dumps(body).decode()
        self.record({"type": "http.request", "flow": flow, "dir": "c2s", "method": "POST",
                     "url": f"http://127.0.0.1/messages/?session_id={session}",
                     "headers": [["Content-Type", "application/json"]], "raw": raw, "len": len(raw)})  # fmt: skip
        self.record({"type": "http.response", "flow": flow, "dir": "s2c", "status": 202, "headers": [],
                     "streamed": False, "peer": "10.0.0.1:8000", "raw": "Accepted", "len": 8})  # fmt: skip

    def event(self, flow: str, index: int, body: Any, conn: str = "get-conn") -> None:
        raw = orjson.dumps(body).decode()
        self.record({"type": "sse.event", "conn": conn, "flow": flow, "dir": "s2c", "index": index,
                     "sse_event": "message", "raw": raw, "len": len(raw)})  # fmt: skip


def _legacy_sse_session(cap: SseCap, session: str = SESSION) -> None:
    cap.get_stream("get")
    cap.endpoint("get", session)
    cap.post("p1", session, init(0))
    cap.event("get", 1, init_result(0))
    cap.post("p2", session, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    cap.post("p3", session, CALL)
    cap.event("get", 2, CALL_RESULT)


def _answers(messages: pl.DataFrame) -> list[tuple[str | None, int | None]]:
    answers = messages.filter(pl.col("kind").is_in(["response", "error"]))
    return list(zip(answers.get_column("method").to_list(), answers.get_column("req_line").to_list(), strict=True))


def test_http_sse_answers_on_the_get_stream_pair_with_their_posts(tmp_path: Path) -> None:
    cap = SseCap(tmp_path, transport="http")
    _legacy_sse_session(cap)
    path = cap.close()
    m = messages_of(path)
    # the 202s and the endpoint event answer nothing; the GET stream's events answer the POSTs
    assert _answers(m) == [("initialize", 5), ("tools/call", 10)]
    assert m.filter(pl.col("event") == "sse-endpoint").get_column("kind").to_list() == ["lifecycle"]
    a = run(path)
    assert a.inits.get_column("outcome").to_list() == ["served"]
    (server,) = a.servers
    assert (server.era, server.legacy_support, server.transport) == ("legacy", "yes", "http+sse")
    assert a.findings == []


def test_an_answer_in_another_sessions_stream_stays_unpaired(tmp_path: Path) -> None:
    cap = SseCap(tmp_path, transport="http")
    cap.get_stream("get-a")
    cap.endpoint("get-a", "session-a")
    cap.get_stream("get-b", conn="get-conn-b")
    cap.endpoint("get-b", "session-b", conn="get-conn-b")
    cap.post("p1", "session-a", init(0))
    cap.event("get-b", 1, init_result(0), conn="get-conn-b")  # same id, other session: not its answer
    m = messages_of(cap.close())
    assert _answers(m) == [(None, None)]


def test_a_replayed_event_does_not_answer_twice(tmp_path: Path) -> None:
    # a client that reconnects with Last-Event-ID gets the event again on a new GET flow
    cap = SseCap(tmp_path, transport="http")
    _legacy_sse_session(cap)
    cap.get_stream("get-resumed", headers=[["Accept", "text/event-stream"], ["Last-Event-ID", "2"]])
    cap.endpoint("get-resumed", SESSION)
    cap.event("get-resumed", 1, CALL_RESULT)
    a = run(cap.close())
    assert a.inits.get_column("outcome").to_list() == ["served"]
    assert a.findings == []


def test_streamable_http_answer_on_the_standalone_get_stream(tmp_path: Path) -> None:
    cap = SseCap(tmp_path, transport="http")
    session = [["mcp-session-id", "sess-1"]]
    cap.http_request("f1", init(0), headers=[["Content-Type", "application/json"]])
    cap.http_response("f1", 200, init_result(0), headers=session)
    cap.get_stream("get", headers=[["Accept", "text/event-stream"], *session])
    cap.http_request("f2", CALL, headers=[["Content-Type", "application/json"], *session])
    cap.http_response("f2", 202, "")
    cap.event("get", 0, CALL_RESULT)
    assert _answers(messages_of(cap.close())) == [("initialize", 2), ("tools/call", 6)]


def test_answers_in_a_later_rotated_part_pair_across_files(tmp_path: Path) -> None:
    cap = SseCap(tmp_path / "unused", transport="http")
    writer = CaptureWriter(tmp_path / "parts", transport="http", server="srv", rotate_bytes=1)  # a part a record
    cap.writer = writer
    _legacy_sse_session(cap)
    writer.close()
    facts = [extract_file(str(p), LoadOptions()) for p in writer.paths]
    assert len(facts) > 3
    paired = combine(facts).messages.filter(pl.col("kind") == "response")
    assert sorted(paired.get_column("method").cast(pl.String).to_list()) == ["initialize", "tools/call"]
