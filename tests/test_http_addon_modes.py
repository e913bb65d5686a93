"""An event stream that an addon loaded before the recorder already streams (`stream = True`, the
usual snippet that keeps mitmproxy from buffering SSE, or a callable of its own) is still teed:
its events are recorded, and the client gets what it would get without the recorder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from addon import format as fmt
from addon.http_recorder import HttpRecorder

SSE_HEADERS = http.Headers(((b"content-type", b"text/event-stream"),))
CHUNKS = [
    b"event: message\r\ndata: {\"id\":1,",
    b"\"result\":{}}\r\n\r\nevent: message\r\ndata: {\"id\":2}\r\n\r\n",
    b"",
]


@pytest.fixture(autouse=True)
def _redact_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERASCOPE_REDACT_KEY", "unit-key")


@pytest.fixture
def rec(tmp_path: Path) -> Iterator[HttpRecorder]:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"))
        yield addon


def events(tmp_path: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((tmp_path / "caps").glob("*.jsonl")):
        out.extend(orjson.loads(line) for line in path.read_bytes().splitlines())
    return [r for r in out if r["type"] in (fmt.SSE_EVENT, fmt.SSE_END)]


def run(addon: HttpRecorder, prior: Any) -> tuple[http.HTTPFlow, list[Any]]:
    f = tflow.tflow(req=tutils.treq(method=b"POST", path=b"/mcp", host="127.0.0.1", port=8000, content=b"{}"))
    addon.request(f)
    f.response = tutils.tresp(headers=SSE_HEADERS.copy(), content=None)
    f.response.stream = prior  # what an addon loaded before the recorder did in its responseheaders
    addon.responseheaders(f)
    assert callable(f.response.stream)
    relayed = [f.response.stream(c) for c in CHUNKS]
    addon.response(f)
    addon.done()
    return f, relayed


def test_a_stream_another_addon_set_to_true_is_still_recorded(rec, tmp_path: Path) -> None:
    _, relayed = run(rec, True)
    assert relayed == CHUNKS  # stream = True relays every chunk unchanged; so does the tap
    ev0, ev1, end = events(tmp_path)
    assert (ev0["raw"], ev1["raw"]) == ('{"id":1,"result":{}}', '{"id":2}')
    assert (end["how"], end["events"]) == ("clean", 2)


def test_another_addons_stream_callable_still_runs_and_its_output_is_recorded(rec, tmp_path: Path) -> None:
    def upper_data(chunk: bytes) -> bytes:
        return chunk.replace(b"data:", b"data: ") if chunk else b""

    _, relayed = run(rec, upper_data)
    assert relayed == [upper_data(c) for c in CHUNKS]  # the other addon's stream is what the client gets
    ev0, ev1, end = events(tmp_path)
    assert (ev0["raw"], ev1["raw"]) == (' {"id":1,"result":{}}', ' {"id":2}')
    assert end["events"] == 2


# --- erascope_filter and the flow-less connect errors of a regular (forward) proxy -------------------
def _connect_error(addon: HttpRecorder, mode: str, address: tuple[str, int]) -> None:
    from mitmproxy.proxy.mode_specs import ProxyMode
    from mitmproxy.proxy.server_hooks import ServerConnectionHookData

    client, server = tflow.tclient_conn(), tflow.tserver_conn()
    client.proxy_mode = ProxyMode.parse(mode)
    server.address = address
    server.error = f"[Errno 111] Connect call failed ('{address[0]}', {address[1]})"
    addon.server_connect_error(ServerConnectionHookData(server=server, client=client))


def connect_errors(tmp_path: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((tmp_path / "caps").glob("*.jsonl")):
        out.extend(orjson.loads(line) for line in path.read_bytes().splitlines())
    return [r for r in out if r["type"] == fmt.HTTP_ERROR and r.get("phase") == "connect"]


@pytest.mark.parametrize("mode", ["regular", "upstream:http://127.0.0.1:3128"])
def test_a_forward_proxys_connect_error_to_a_host_the_filter_leaves_out_is_not_recorded(
    tmp_path: Path, mode: str
) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), erascope_filter="~u /mcp")
        _connect_error(addon, mode, ("telemetry.example", 443))  # a CONNECT that is no MCP traffic
        addon.done()
    assert connect_errors(tmp_path) == []


def test_a_connect_error_the_filter_takes_is_recorded(tmp_path: Path) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), erascope_filter="~d mcp.example")
        _connect_error(addon, "regular", ("mcp.example", 443))
        _connect_error(addon, "regular", ("telemetry.example", 443))
        addon.done()
    assert [r["peer"] for r in connect_errors(tmp_path)] == ["mcp.example:443"]


def test_a_reverse_proxys_connect_error_is_recorded_whatever_the_filter(tmp_path: Path) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), erascope_filter="~u /mcp")
        _connect_error(addon, "reverse:http://127.0.0.1:8000", ("127.0.0.1", 8000))  # the one upstream
        addon.done()
    assert len(connect_errors(tmp_path)) == 1


# --- live metrics: the HTTP+SSE transport answers its POSTs (202) on the server's event stream -------
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
ANSWER = {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25", "capabilities": {}}}
GET = [{fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": "get", "method": "GET", fmt.F_RAW: ""},
       {fmt.F_TYPE: fmt.HTTP_RESPONSE, "flow": "get", "status": 200, "streamed": True,
        "headers": [["content-type", "text/event-stream"]]},
       {fmt.F_TYPE: fmt.SSE_EVENT, "flow": "get", "sse_event": "endpoint", fmt.F_RAW: "/messages/?session_id=x"}]
POST = {fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": "post", "method": "POST", "url": "http://127.0.0.1:8000/messages/?session_id=x",
        fmt.F_RAW: orjson.dumps(INIT).decode()}
ACCEPTED = {fmt.F_TYPE: fmt.HTTP_RESPONSE, "flow": "post", "status": 202, fmt.F_RAW: "Accepted", "headers": []}
ON_STREAM = {fmt.F_TYPE: fmt.SSE_EVENT, "flow": "get", "sse_event": "message", fmt.F_RAW: orjson.dumps(ANSWER).decode()}


@pytest.mark.parametrize(
    "order",
    [[*GET, POST, ON_STREAM, ACCEPTED],  # the order mcp 1.x's SSE server gives: the answer before the 202
     [*GET, POST, ACCEPTED, ON_STREAM]],
    ids=["answer-then-202", "202-then-answer"],
)  # fmt: skip
def test_metrics_era_of_a_legacy_http_sse_server_whose_initialize_was_served(
    tmp_path: Path, order: list[dict[str, Any]]
) -> None:
    from addon.metrics import LiveStats
    from addon.writer import CaptureWriter
    from analyzer.pipeline import analyze
    from analyzer.report import report_dict

    key = "http://127.0.0.1:8000/sse"  # the stream's key, which the POSTs to its endpoint take too
    stats = LiveStats()
    for record in order:
        stats.observe({**record, fmt.F_SERVER: key})
    assert stats.snapshot()["servers"][key]["era"] == "legacy"
    with CaptureWriter(tmp_path / "cap", transport=fmt.HTTP, server=key) as w:
        for record in order:
            w.write(dict(record))
    assert [s["era"] for s in report_dict(analyze([str(tmp_path / "cap")]))["servers"]] == ["legacy"]
