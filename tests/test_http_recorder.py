"""The mitmproxy addon, unit level: mitmproxy's own `taddons`/`tflow` helpers, no sockets.

Every record type, the SSE tee (chunks fed by hand through `flow.response.stream`), redaction as
the addon applies it, the filter, option validation and write failures. The real wiring (mitmdump,
real MCP peers) is in test_http_e2e.py.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from mitmproxy import exceptions, http
from mitmproxy.flow import Error
from mitmproxy.test import taddons, tflow, tutils

from addon import format as fmt
from addon.http_recorder import EndpointKeys, HttpRecorder, classify_error, header, server_key
from addon.redact import HttpRedaction, Redactor

PROBE = b'{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{}}}'
SSE_HEADERS = http.Headers(((b"content-type", b"text/event-stream"), (b"mcp-session-id", b"sess-1")))


@pytest.fixture(autouse=True)
def _redact_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERASCOPE_REDACT_KEY", "unit-key")


@pytest.fixture
def rec(tmp_path: Path) -> Iterator[tuple[HttpRecorder, Any]]:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"))
        yield addon, tctx


def read(tmp_path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((tmp_path / "caps").glob("*.jsonl")):
        out.extend(orjson.loads(line) for line in path.read_bytes().splitlines())
    return out


def traffic(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] not in (fmt.HEADER, fmt.PART_END)]


def post_flow(body: bytes = PROBE, headers: list[tuple[bytes, bytes]] | None = None, path: bytes = b"/mcp"):
    hdrs = headers or [
        (b"Host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"mcp-protocol-version", b"2026-07-28"),
        (b"mcp-method", b"server/discover"),
    ]
    req = tutils.treq(method=b"POST", path=path, host="127.0.0.1", port=8000, headers=http.Headers(hdrs), content=body)
    return tflow.tflow(req=req)


def json_response(body: bytes, status: int = 200, extra: tuple[tuple[bytes, bytes], ...] = ()) -> http.Response:
    headers = http.Headers(((b"content-type", b"application/json"), (b"server", b"uvicorn"), *extra))
    return tutils.tresp(status_code=status, reason=b"OK", headers=headers, content=body)


def exchange(addon: HttpRecorder, f: http.HTTPFlow) -> None:
    """`f`'s request, an empty JSON answer, and the recorder's end: one whole exchange recorded."""
    addon.request(f)
    f.response = json_response(b"{}")
    addon.response(f)
    addon.done()


def test_request_and_response_records(rec, tmp_path: Path) -> None:
    addon, _ = rec
    f = post_flow()
    addon.request(f)
    f.response = json_response(b'{"jsonrpc":"2.0","id":1,"result":{}}')
    addon.responseheaders(f)
    addon.response(f)
    addon.done()
    records = read(tmp_path)
    assert records[0]["type"] == fmt.HEADER and records[0]["transport"] == "http"
    assert records[0]["redaction"]["mode"] == "hash"
    req, resp = traffic(records)
    assert req["type"] == fmt.HTTP_REQUEST and resp["type"] == fmt.HTTP_RESPONSE
    assert (req["seq"], resp["seq"]) == (1, 2)
    assert req["conn"] == resp["conn"] == f.client_conn.id
    assert req["flow"] == resp["flow"] == f.id
    assert req["method"] == "POST"
    assert req["url"] == "http://127.0.0.1:8000/mcp"
    assert req["http_version"] == "HTTP/1.1"
    assert req["headers"][2:] == [["mcp-protocol-version", "2026-07-28"], ["mcp-method", "server/discover"]]
    assert req["raw"] == PROBE.decode() and req["len"] == len(PROBE)
    assert req["body_policy"] == "full"
    assert req["client"] == "127.0.0.1:22"
    assert req["server"] == resp["server"] == "http://127.0.0.1:8000/mcp"
    assert resp["status"] == 200 and resp["reason"] == "OK"
    assert ["server", "uvicorn"] in resp["headers"]
    assert resp["streamed"] is False
    assert resp["peer"] == "192.168.0.1:22"  # tflow server_conn.peername
    assert resp["raw"] == '{"jsonrpc":"2.0","id":1,"result":{}}'
    assert (resp["t_request"], resp["t_headers"], resp["t_end"]) == (946681200, 946681202, 946681203)


def test_binary_body_goes_to_raw_b64(rec, tmp_path: Path) -> None:
    addon, _ = rec
    f = post_flow(body=b"\xff\x00\xfe")
    addon.request(f)
    addon.done()
    req, stopped = traffic(read(tmp_path))  # the flow was still open: ended as recorder-stopped
    assert stopped["kind"] == "recorder-stopped"
    assert "raw" not in req
    assert base64.b64decode(req["raw_b64"]) == b"\xff\x00\xfe"


def test_sse_stream_is_teed_unchanged_and_recorded_per_event(rec, tmp_path: Path) -> None:
    addon, _ = rec
    f = post_flow()
    addon.request(f)
    f.response = tutils.tresp(headers=SSE_HEADERS.copy(), content=None)
    addon.responseheaders(f)
    tap = f.response.stream
    assert callable(tap)
    chunks = [
        b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress"',
        b"}\r",
        b'\n\r\nid: 9\r\nretry: 500\r\nevent: message\r\ndata: {"id":1}\r\n\r\n',
        b"",
    ]
    assert [tap(c) for c in chunks] == chunks  # the client gets exactly what the server sent
    addon.response(f)
    addon.done()
    req, resp, ev0, ev1, end = traffic(read(tmp_path))
    assert resp["streamed"] is True and "raw" not in resp and resp["t_end"] is None
    assert ["mcp-session-id", Redactor(b"unit-key").hash("sess-1")] in resp["headers"]
    assert (ev0["type"], ev0["index"], ev0["sse_event"]) == (fmt.SSE_EVENT, 0, "message")
    assert ev0["raw"] == '{"jsonrpc":"2.0","method":"notifications/progress"}'
    assert (ev1["index"], ev1["sse_id"], ev1["sse_retry"], ev1["raw"]) == (1, "9", 500, '{"id":1}')
    assert "sse_id" not in ev0
    assert end["type"] == fmt.SSE_END and end["how"] == "clean" and end["events"] == 2
    assert end["incomplete"] is False
    assert {r["flow"] for r in (req, resp, ev0, ev1, end)} == {f.id}


def _sse_stream(addon: HttpRecorder, chunk: bytes, path: bytes = b"/sse") -> http.HTTPFlow:
    f = tflow.tflow(req=tutils.treq(method=b"GET", path=path, host="127.0.0.1", port=8000, content=b""))
    addon.request(f)
    f.response = tutils.tresp(headers=SSE_HEADERS.copy(), content=None)
    addon.responseheaders(f)
    assert callable(f.response.stream) and f.response.stream(chunk) == chunk
    return f


@pytest.mark.parametrize(
    ("endpoint", "key"),
    [
        (b"/messages?session_id=abc", "http://127.0.0.1:8000/sse"),  # as the mcp SDKs announce it
        (b"messages?session_id=abc", "http://127.0.0.1:8000/sse"),  # relative to the stream's URL
        (b"http://127.0.0.1:8000/messages?session_id=abc", "http://127.0.0.1:8000/sse"),
        (b"http://10.9.9.9:8000/messages?session_id=abc", "http://127.0.0.1:8000/messages"),  # another origin
        (b"http://[::1/messages", "http://127.0.0.1:8000/messages"),  # no URL
        (b"/messages\xff", "http://127.0.0.1:8000/messages"),  # no text
    ],
)
def test_a_post_to_the_endpoint_a_stream_announced_is_the_streams_server(
    rec, tmp_path: Path, endpoint: bytes, key: str
) -> None:
    """Without a server name, flows are keyed by origin and path: the HTTP+SSE transport's POSTs and
    the stream carrying their answers were two servers (tests/test_http_metadata_e2e.py records it)."""
    addon, _ = rec
    _sse_stream(addon, b"event: endpoint\ndata: " + endpoint + b"\n\n")
    exchange(addon, post_flow(path=b"/messages?session_id=abc"))
    post = [r for r in traffic(read(tmp_path)) if r["type"] == fmt.HTTP_REQUEST and r["method"] == "POST"]
    assert [r["server"] for r in post] == [key]


def test_a_server_name_keys_every_flow_whatever_a_stream_announces(rec, tmp_path: Path) -> None:
    addon, tctx = rec
    tctx.configure(addon, erascope_server="legacy-sse")
    _sse_stream(addon, b"event: endpoint\ndata: /messages?session_id=abc\n\n")
    exchange(addon, post_flow(path=b"/messages?session_id=abc"))
    assert {r["server"] for r in traffic(read(tmp_path))} == {"legacy-sse"}


def test_the_announced_endpoints_are_bounded_oldest_first() -> None:
    keys = EndpointKeys()
    stream = tflow.tflow(req=tutils.treq(method=b"GET", path=b"/sse", host="127.0.0.1", port=8000, content=b""))
    for n in range(EndpointKeys.LIMIT + 1):  # a server may announce a path per session
        keys.announce(stream, b"/messages/%d" % n, "stream", HttpRedaction(Redactor(b"unit-key")))
    assert keys.key("http://127.0.0.1:8000/messages/0") == "http://127.0.0.1:8000/messages/0"
    assert keys.key("http://127.0.0.1:8000/messages/1") == "stream"
    assert keys.key(f"http://127.0.0.1:8000/messages/{EndpointKeys.LIMIT}") == "stream"


def test_event_is_recorded_when_its_last_byte_passes_not_later(rec, tmp_path: Path) -> None:
    addon, _ = rec
    f = post_flow()
    addon.request(f)
    f.response = tutils.tresp(headers=SSE_HEADERS.copy(), content=None)
    addon.responseheaders(f)
    f.response.stream(b"data: 1\n\n")
    assert addon.writer is not None and addon.writer.flush(5)
    # the stream is still open, yet the event is already on disk
    assert [r["type"] for r in traffic(read(tmp_path))] == ["http.request", "http.response", "sse.event"]
    addon.done()


def test_sse_response_without_body_still_ends(rec, tmp_path: Path) -> None:
    addon, _ = rec
    f = post_flow()
    addon.request(f)
    f.response = tutils.tresp(headers=SSE_HEADERS.copy(), content=b"")
    addon.responseheaders(f)
    addon.response(f)  # headers came with end-of-stream: mitmproxy never calls the tap
    addon.done()
    assert [r["type"] for r in traffic(read(tmp_path))] == ["http.request", "http.response", "sse.end"]


def _compressed(encoding: str, events: list[bytes]) -> bytes:
    """`events` as a server compressing its event stream sends them: flushed after each event."""
    import zlib

    import brotli
    from backports import zstd

    if encoding in ("gzip", "deflate"):
        z = zlib.compressobj(wbits=31 if encoding == "gzip" else 15)
        return b"".join(z.compress(e) + z.flush(zlib.Z_SYNC_FLUSH) for e in events) + z.flush()
    if encoding == "br":
        b = brotli.Compressor()
        return b"".join(b.process(e) + b.flush() for e in events) + b.finish()
    c = zstd.ZstdCompressor()
    return b"".join(c.compress(e, zstd.ZstdCompressor.FLUSH_BLOCK) for e in events) + c.flush()


def _stream(addon: HttpRecorder, encoding: str, chunks: list[bytes]) -> http.HTTPFlow:
    f = post_flow()
    addon.request(f)
    headers = SSE_HEADERS.copy()
    headers["content-encoding"] = encoding
    f.response = tutils.tresp(headers=headers, content=None)
    addon.responseheaders(f)
    assert [f.response.stream(c) for c in [*chunks, b""]] == [*chunks, b""]  # relayed as it came
    addon.response(f)
    addon.done()
    return f


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
@pytest.mark.parametrize("cut", [1, 7, 1 << 20], ids=["byte-by-byte", "7-byte-chunks", "one-chunk"])
def test_a_compressed_event_stream_is_recorded_decoded(rec, tmp_path: Path, encoding: str, cut: int) -> None:
    # Its compressed bytes were parsed as events: none recorded (or empty ones), the probe unanswered.
    addon, _ = rec
    events = [b'event: message\r\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\r\n\r\n', b"data: \xff\xfe\n\n"]
    wire = _compressed(encoding, events)
    _stream(addon, encoding.upper() if cut == 7 else encoding, [wire[i : i + cut] for i in range(0, len(wire), cut)])
    *_, ev0, ev1, end = traffic(read(tmp_path))
    assert (ev0["type"], ev0["raw"]) == (fmt.SSE_EVENT, '{"jsonrpc":"2.0","id":1,"result":{}}')
    assert base64.b64decode(ev1["raw_b64"]) == b"\xff\xfe"
    assert (end["how"], end["events"], end["incomplete"]) == ("clean", 2, False) and "undecodable" not in end


@pytest.mark.parametrize("encoding", ["compress", "gzip, br", "br"])
def test_an_event_stream_that_does_not_decode_is_not_read_as_events(rec, tmp_path: Path, encoding: str) -> None:
    # an encoding the recorder does not know, or bytes that are not what the header says: the events
    # parsed from them would be the compressed bytes' (empty or garbage), so none are recorded past there
    addon, _ = rec
    garbage = b"data: not what br gives\n\n" * 3
    _stream(addon, encoding, [garbage[:10], garbage[10:]])
    *_, resp, end = traffic(read(tmp_path))
    assert resp["type"] == fmt.HTTP_RESPONSE, "no event recorded"
    assert (end["type"], end["events"], end["undecodable"]) == (fmt.SSE_END, 0, encoding)


def test_a_stream_that_stops_decoding_keeps_the_events_before(rec, tmp_path: Path) -> None:
    addon, _ = rec
    wire = _compressed("gzip", [b"data: 1\n\n"])
    _stream(addon, "gzip", [wire[:-8], b"\x00" * 64, _compressed("gzip", [b"data: 2\n\n"])])
    *_, ev, end = traffic(read(tmp_path))
    assert (ev["type"], ev["raw"]) == (fmt.SSE_EVENT, "1")
    assert (end["events"], end["undecodable"]) == (1, "gzip")


@pytest.mark.parametrize(
    ("message", "kind", "how"),
    [
        ("Client disconnected.", "client-gone", "client-gone"),
        ("stream reset by client (CANCEL)", "client-gone", "client-gone"),
        ("server closed connection", "upstream-reset", "upstream-reset"),
        ("HTTP/1 protocol error: peer closed connection without sending complete message body", "upstream-reset",
         "upstream-reset"),
        ("something odd", "other", "error"),
    ],
)  # fmt: skip
def test_stream_cut_by_error_ends_with_how(rec, tmp_path: Path, message: str, kind: str, how: str) -> None:
    addon, _ = rec
    f = post_flow()
    addon.request(f)
    f.response = tutils.tresp(headers=SSE_HEADERS.copy(), content=None)
    addon.responseheaders(f)
    f.response.stream(b"data: 1\n\ndata: par")
    f.error = Error(message)
    addon.error(f)
    addon.done()
    *_, ev, end, err = traffic(read(tmp_path))
    assert ev["type"] == fmt.SSE_EVENT
    assert (end["type"], end["how"], end["events"], end["incomplete"]) == (fmt.SSE_END, how, 1, True)
    assert end["error"] == message
    assert (err["type"], err["kind"], err["phase"], err["error"]) == (fmt.HTTP_ERROR, kind, "response", message)


def test_connection_refused_records_request_then_error(rec, tmp_path: Path) -> None:
    addon, _ = rec
    f = post_flow()
    addon.request(f)
    f.error = Error("Multiple exceptions: [Errno 111] Connect call failed ('127.0.0.1', 1)")
    addon.error(f)
    addon.done()
    req, err = traffic(read(tmp_path))
    assert req["type"] == fmt.HTTP_REQUEST
    assert (err["kind"], err["phase"], err["flow"]) == ("connection-refused", "request", f.id)


def test_error_before_request_hook_still_records_the_request(rec, tmp_path: Path) -> None:
    addon, _ = rec
    f = post_flow()
    f.error = Error("Client disconnected.")
    addon.error(f)
    addon.done()
    assert [r["type"] for r in traffic(read(tmp_path))] == ["http.request", "http.error"]


def test_open_flows_at_shutdown_end_as_recorder_stopped(rec, tmp_path: Path) -> None:
    addon, _ = rec
    f = post_flow()
    addon.request(f)
    f.response = tutils.tresp(headers=SSE_HEADERS.copy(), content=None)
    addon.responseheaders(f)
    waiting = post_flow()  # request headers in, body still uploading
    addon.requestheaders(waiting)
    addon.done()
    # mitmproxy cancels the open connections after done(): their hooks must not open a new capture
    f.error = Error("Client disconnected.")
    addon.error(f)
    waiting.error = Error("Client disconnected.")
    addon.error(waiting)
    assert len(list((tmp_path / "caps").glob("*.jsonl"))) == 1
    recs = traffic(read(tmp_path))
    assert [r["type"] for r in recs if r["flow"] == f.id] == ["http.request", "http.response", "sse.end", "http.error"]
    end, err = recs[2:4]
    assert (end["how"], err["kind"], err["phase"]) == ("recorder-stopped", "recorder-stopped", "response")
    assert [(r["type"], r.get("kind"), r.get("phase")) for r in recs if r["flow"] == waiting.id] == [
        ("http.request", None, None),
        ("http.error", "recorder-stopped", "request"),
    ]
    assert not addon.flows and not addon.open


def test_redaction_in_records(rec, tmp_path: Path) -> None:
    addon, _ = rec
    hdrs = [(b"Authorization", b"Bearer tok-123"), (b"mcp-session-id", b"abc"), (b"X-Api-Key", b"k")]
    f = post_flow(headers=hdrs, path=b"/mcp?token=qs-secret&x=1")
    addon.request(f)
    addon.done()
    req, stopped = traffic(read(tmp_path))  # the flow was still open: ended as recorder-stopped
    assert stopped["kind"] == "recorder-stopped"
    text = orjson.dumps(req)
    assert b"tok-123" not in text and b"qs-secret" not in text and b'"k"' not in text
    h = Redactor(b"unit-key").hash
    assert req["headers"] == [["Authorization", f"Bearer {h('tok-123')}"], ["mcp-session-id", h("abc")],
                              ["X-Api-Key", h("k")]]  # fmt: skip
    assert req["url"] == f"http://127.0.0.1:8000/mcp?token={h('qs-secret')}&x=1"
    assert req["server"] == "http://127.0.0.1:8000/mcp"


def test_no_redaction_switch_keeps_everything(tmp_path: Path) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), erascope_redact=False)
        f = post_flow(headers=[(b"Authorization", b"Bearer tok-123")], path=b"/mcp?token=t")
        addon.request(f)
        addon.done()
    records = read(tmp_path)
    assert records[0]["redaction"]["mode"] == "off"
    assert records[1]["headers"] == [["Authorization", "Bearer tok-123"]]
    assert records[1]["url"].endswith("?token=t")


def test_metadata_bodies_in_requests_and_events(tmp_path: Path) -> None:
    addon = HttpRecorder()
    call = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"private"}}}'
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), erascope_bodies="metadata")
        f = post_flow(body=call)
        addon.request(f)
        f.response = tutils.tresp(headers=SSE_HEADERS.copy(), content=None)
        addon.responseheaders(f)
        f.response.stream(b'data: {"jsonrpc":"2.0","id":2,"result":{"content":[{"text":"private"}]}}\n\n')
        f.response.stream(b"")
        addon.response(f)
        addon.done()
    records = read(tmp_path)
    assert records[0]["redaction"]["bodies"] == "metadata"
    req, _, ev, _ = traffic(records)
    assert b"private" not in orjson.dumps(records)
    assert req["body_policy"] == ev["body_policy"] == "metadata"
    assert req["len"] == len(call)
    assert orjson.loads(req["raw"])["params"]["name"] == "echo"
    assert "$redacted" in orjson.loads(ev["raw"])["result"]["content"]


def test_filter_records_only_matching_flows(tmp_path: Path) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), erascope_filter="~u /mcp")
        keep, drop = post_flow(), post_flow(path=b"/health")
        for f in (keep, drop):
            addon.request(f)
            f.response = json_response(b"{}")
            addon.response(f)
        addon.done()
    assert {r["flow"] for r in traffic(read(tmp_path))} == {keep.id}


@pytest.mark.parametrize(
    ("option", "key"),
    [
        ("weather", "weather"),
        # the command line is decoded with lone surrogates, which no record can hold, and may hold ESC
        ("we\udcffather\x1b", "we%FFather%1B"),
    ],
)
def test_server_option_names_every_record(tmp_path: Path, option: str, key: str) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), erascope_server=option)
        f = post_flow()
        addon.request(f)
        f.error = Error("server closed connection")
        addon.error(f)
        addon.done()
    assert addon.failures == 0
    records = read(tmp_path)
    assert {r["server"] for r in records} == {key}
    assert [r["type"] for r in traffic(records)] == [fmt.HTTP_REQUEST, fmt.HTTP_ERROR]


def test_method_and_target_that_are_not_utf8_are_recorded_exactly(rec, tmp_path: Path) -> None:
    # mitmproxy hands such bytes over as lone surrogates, which no capture line can hold
    addon, _ = rec
    f = post_flow(path=b"/mcp?token=s3\xffcret&x=\xff")
    f.request.data.method = b"P\xffsT"
    exchange(addon, f)
    assert addon.failures == 0
    request, response = traffic(read(tmp_path))
    assert (request["type"], response["type"]) == (fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE)
    hashed = Redactor().hash("s3\udcffcret")  # the value's bytes, as for any secret query value
    assert request["url"] == f"http://127.0.0.1:8000/mcp?token={hashed}&x=%FF"
    assert base64.b64decode(request["url_b64"]) == f"http://127.0.0.1:8000/mcp?token={hashed}&x=".encode() + b"\xff"
    assert request["method"] == "P%FFST"  # upper-cased as mitmproxy reports every method
    assert base64.b64decode(request["method_b64"]) == b"P\xffsT"  # the bytes as they came
    assert {r["server"] for r in (request, response)} == {"http://127.0.0.1:8000/mcp"}


def test_utf8_method_and_target_have_no_b64_twin(rec, tmp_path: Path) -> None:
    addon, _ = rec
    f = post_flow(path="/caf\u00e9/mcp?q=\u00fc".encode())
    exchange(addon, f)
    request, _ = traffic(read(tmp_path))
    assert request["url"] == "http://127.0.0.1:8000/caf\u00e9/mcp?q=\u00fc" and request["method"] == "POST"
    assert "url_b64" not in request and "method_b64" not in request


def test_a_content_encoding_that_is_not_utf8_does_not_lose_the_request(rec, tmp_path: Path) -> None:
    addon, _ = rec
    f = post_flow(body=b"{}")
    f.request.headers[b"content-encoding"] = b"gz\xff\x1bip"
    exchange(addon, f)
    assert addon.failures == 0
    request, _ = traffic(read(tmp_path))
    assert request["type"] == fmt.HTTP_REQUEST and request["raw"] == "{}"
    assert request["undecodable"] == "gz%FF%1Bip"  # named, printable; the header itself is in `headers`


def test_server_key_default_is_origin_and_path() -> None:
    f = post_flow(path=b"/a/mcp?x=1")
    assert server_key(f, HttpRedaction(Redactor(b"unit-key"))) == "http://127.0.0.1:8000/a/mcp"


@pytest.mark.parametrize("target", [b"/mcp#access_token=s3cret", b"/mcp#/cb?code=s3cret", b"/mcp?x=1#token=s3cret"])
def test_server_key_leaves_out_the_fragment(target: bytes) -> None:
    # a request target should hold no fragment, but a client can send one, with a token in it
    assert server_key(post_flow(path=target), HttpRedaction(Redactor(b"unit-key"))) == "http://127.0.0.1:8000/mcp"


@pytest.mark.parametrize(
    ("target", "key"),
    [
        (b"/mcp\xff", "/mcp%FF"),  # not UTF-8: mitmproxy hands it over as a lone surrogate
        (b"/mcp\x1b[2J\x7f?q=\xff", "/mcp%1B[2J%7F"),  # control bytes would reach terminals and labels
        (b"/caf\xc3\xa9/mcp", "/caf\u00e9/mcp"),  # UTF-8 stays as it is
    ],
)
def test_server_key_is_printable_text(target: bytes, key: str) -> None:
    got = server_key(post_flow(path=target), HttpRedaction(Redactor(b"unit-key")))
    assert got == "http://127.0.0.1:8000" + key
    assert orjson.loads(orjson.dumps(got)) == got  # a capture line can hold it


@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("erascope_filter", "~q ~~(", "erascope_filter"),
        ("erascope_bodies", "everything", "erascope_bodies|Invalid choice|everything"),
        ("erascope_redact_headers", ["x-ok", "bad name"], "erascope_redact_headers"),
        ("erascope_probe_timeout", "0", "erascope_probe_timeout"),
        ("erascope_probe_timeout", "soon", "erascope_probe_timeout"),
        ("erascope_probe_timeout", "nan", "erascope_probe_timeout"),
    ],
)
def test_bad_options_raise_options_error(option: str, value: Any, match: str) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx, pytest.raises(exceptions.OptionsError, match=match):
        tctx.configure(addon, **{option: value})


def test_capture_dir_that_is_a_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    addon = HttpRecorder()
    with taddons.context(addon) as tctx, pytest.raises(exceptions.OptionsError, match="not a directory"):
        tctx.configure(addon, erascope_dir=str(tmp_path / "file"))


def test_write_failure_is_reported_once_and_never_breaks_the_flow(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_text("x")
    addon = HttpRecorder()
    with taddons.context(addon) as tctx, caplog.at_level(logging.ERROR, logger="erascope"):
        tctx.configure(addon, erascope_dir=str(tmp_path / "file" / "caps"))  # mkdir will fail
        tap_out = []
        for _ in range(3):
            f = post_flow()
            addon.request(f)
            f.response = tutils.tresp(headers=SSE_HEADERS.copy(), content=None)
            addon.responseheaders(f)
            tap_out.append(f.response.stream(b"data: x\n\n"))
            f.response.stream(b"")
            addon.response(f)
        addon.done()
    assert tap_out == [b"data: x\n\n"] * 3
    assert addon.lost == 12
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len([e for e in errors if "cannot write capture" in e]) == 1
    assert any("12 record(s) lost" in e for e in errors)


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("Multiple exceptions: [Errno 111] Connect call failed ('127.0.0.1', 9)", "connection-refused"),
        ("[Errno 111] Connection refused", "connection-refused"),
        ("Client disconnected.", "client-gone"),
        ("killed", "client-gone"),
        ("server closed connection", "upstream-reset"),
        ("HTTP/2 connection closed: <ConnectionTerminated>", "upstream-reset"),
        ("Connection timed out", "timeout"),
        ("mystery", "other"),
    ],
)
def test_classify_error(message: str, kind: str) -> None:
    assert classify_error(message) == kind


def test_connect_error_before_any_request_is_recorded_without_flow(rec, tmp_path: Path) -> None:
    from mitmproxy.proxy.server_hooks import ServerConnectionHookData

    addon, _ = rec
    client, server = tflow.tclient_conn(), tflow.tserver_conn()
    server.error = "Multiple exceptions: [Errno 111] Connect call failed ('127.0.0.1', 9)"
    addon.server_connect_error(ServerConnectionHookData(server=server, client=client))
    # once the client has sent a request, its connect errors belong to that flow's `error` hook
    f = post_flow()
    addon.requestheaders(f)
    addon.server_connect_error(ServerConnectionHookData(server=server, client=f.client_conn))
    addon.done()
    (err,) = [r for r in traffic(read(tmp_path)) if r["flow"] is None]
    assert (err["type"], err["flow"], err["phase"], err["kind"]) == (fmt.HTTP_ERROR, None, "connect",
                                                                     "connection-refused")  # fmt: skip
    assert err["conn"] == client.id and err["peer"] == "address:22"  # the address it tried


def test_every_field_written_is_documented_and_in_the_analyzer_schema(rec, tmp_path: Path) -> None:
    from mitmproxy.proxy.server_hooks import ServerConnectionHookData

    from analyzer.schema import RECORD_SCHEMA, UNREAD_FIELDS

    addon, tctx = rec
    tctx.configure(addon, erascope_max_body="4k")
    big = post_flow(body=b"x" * 5000)  # recorded truncated
    addon.request(big)
    f = post_flow(body=b"\xff")
    f.request.encode("gzip")  # recorded decoded, with the encoded size in wire_len
    addon.request(f)
    f.response = tutils.tresp(headers=SSE_HEADERS.copy(), content=None)
    addon.responseheaders(f)
    f.response.stream(b"id: 1\nretry: 5\ndata: x\n\ndata: y")
    f.error = Error("Client disconnected.")
    addon.error(f)
    g = post_flow(path=b"/mcp?\xff")
    g.request.data.method = b"P\xffST"
    addon.request(g)
    g.response = json_response(b"{}")
    addon.response(g)
    server = tflow.tserver_conn()
    server.error = "Connect call failed"
    addon.server_connect_error(ServerConnectionHookData(server=server, client=tflow.tclient_conn()))
    addon.done()
    records = traffic(read(tmp_path))
    assert {r["type"] for r in records} == {fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE, fmt.SSE_EVENT, fmt.SSE_END,
                                            fmt.HTTP_ERROR}  # fmt: skip
    doc = (Path(__file__).resolve().parent.parent / "captures" / "FORMAT.md").read_text()
    fields = {k for r in records for k in r}
    assert {"sse_id", "sse_retry", "raw_b64", "wire_len", "phase", "incomplete", "truncated", "decoded_len",
            "url_b64", "method_b64"} <= fields  # fmt: skip
    assert sorted(k for k in fields if f"`{k}`" not in doc) == []
    assert sorted(k for k in fields if k not in RECORD_SCHEMA and k not in UNREAD_FIELDS) == []
    header = read(tmp_path)[0]
    assert sorted(k for k in header if f"`{k}`" not in doc) == []
    (encoded,) = [r for r in records if "wire_len" in r and not r.get("truncated")]
    assert base64.b64decode(encoded["raw_b64"]) == b"\xff" and encoded["len"] == 1 and encoded["wire_len"] > 1


RED = HttpRedaction(Redactor(b"unit-key"))


def test_client_disconnected_after_idle_timeout_is_a_timeout() -> None:
    from addon.http_recorder import error_record

    f = post_flow()
    f.error = Error("Client disconnected.")
    idle = error_record(f, RED, last_activity=1000.0, idle_timeout=600, now=1600.1)
    assert (idle["kind"], idle["idle_s"]) == ("timeout", 600.1)
    left = error_record(f, RED, last_activity=1000.0, idle_timeout=600, now=1010.0)
    assert left["kind"] == "client-gone" and "idle_s" not in left
    f.error = Error("server closed connection")
    assert error_record(f, RED, last_activity=1000.0, idle_timeout=600, now=1700.0)["kind"] == "upstream-reset"


@pytest.mark.parametrize(
    ("message", "request_done", "streamed", "response", "kind"),
    [
        # words that fit either peer: the client's while its request was still being read
        ("HTTP/1 protocol error: peer closed connection without sending complete message body (received 46 bytes, "
         "expected 1000)", False, False, False, "client-gone"),
        ("HTTP/1 protocol error: illegal chunk header: bytearray(b'zz\\r\\n')", False, False, False, "client-gone"),
        ("peer closed connection", False, False, False, "client-gone"),
        # ... the server's once the request was complete, streamed upstream, or answered
        ("HTTP/1 protocol error: peer closed connection without sending complete message body", True, False, True,
         "upstream-reset"),
        ("peer closed connection", True, False, False, "upstream-reset"),
        ("peer closed connection", False, True, False, "upstream-reset"),
        ("HTTP/1 protocol error: peer closed connection without sending complete message body", False, False, True,
         "upstream-reset"),
        # words that name the server stay its own
        ("server closed connection", False, True, False, "upstream-reset"),
        ("Client disconnected.", True, False, False, "client-gone"),
    ],
)  # fmt: skip
def test_error_side_from_the_flow_when_the_words_fit_either_peer(
    message: str, request_done: bool, streamed: bool, response: bool, kind: str
) -> None:
    from addon.http_recorder import error_record

    f = post_flow()
    f.request.timestamp_end = f.request.timestamp_start + 0.1 if request_done else None
    f.request.stream = streamed
    f.response = json_response(b"{}") if response else None
    f.error = Error(message)
    assert error_record(f, RED, now=1.0)["kind"] == kind


@pytest.mark.parametrize("bodies", ["full", "metadata"])
def test_legacy_endpoint_event_and_secret_headers_never_reach_the_capture(tmp_path: Path, bodies: str) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), erascope_bodies=bodies)
        f = tflow.tflow()
        f.request.path = "/sse?jwt=jwt-secret"
        f.request.headers["Private-Token"] = "pat-secret"
        f.request.headers["Referer"] = "https://app/cb?code=code-secret"
        addon.request(f)
        f.response = tutils.tresp(headers=http.Headers(((b"content-type", b"text/event-stream"),)), content=None)
        addon.responseheaders(f)
        chunk = b"event: endpoint\r\ndata: /messages/?session_id=sid-secret\r\n\r\n"
        assert f.response.stream(chunk) == chunk
        f.response.stream(b"")
        addon.response(f)
        addon.done()
    text = b"".join(p.read_bytes() for p in (tmp_path / "caps").glob("*.jsonl"))
    for secret in (b"jwt-secret", b"pat-secret", b"code-secret", b"sid-secret"):
        assert secret not in text
    (ev,) = [r for r in traffic(read(tmp_path)) if r["type"] == fmt.SSE_EVENT]
    if bodies == "full":
        assert ev["raw"] == "/messages/?session_id=" + Redactor(b"unit-key").hash("sid-secret")


@pytest.mark.parametrize(
    "fields",
    [
        (),
        ((b"Content-Encoding", b"gzip"),),
        ((b"content-type", b"text/event-stream; charset=utf-8"), (b"CONTENT-TYPE", b"x")),  # folded like mitmproxy
        ((b"content-encoding", b"gz\xffip"), (b"host", b"a")),  # not UTF-8: surrogate-escaped like mitmproxy
        ((b"content-encodings", b"br"), (b"x-content-encoding", b"br")),  # near misses
        ((b"Content-Encoding", b""),),
    ],
)
@pytest.mark.parametrize("name", [b"content-encoding", b"content-type"])
def test_header_lookup_is_mitmproxys_get(fields: tuple[tuple[bytes, bytes], ...], name: bytes) -> None:
    headers = http.Headers(fields)
    assert header(headers, name) == headers.get(name.decode())


@pytest.mark.parametrize(("timeout", "outcomes"), [("0.2", {"no-answer": 1}), (None, {})])
def test_probe_timeout_option_times_the_live_outcomes(tmp_path: Path, timeout: str | None, outcomes: dict) -> None:
    """`erascope_probe_timeout` (`record http --probe-timeout`) is the timeout the live counters time
    probes by: a client that sends its server something else half a second after an unanswered probe
    gave up on it past 0.2 s; within the default 10 s it may still take a late answer (undecided)."""
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(
            addon, erascope_dir=str(tmp_path / "caps"), **({"erascope_probe_timeout": timeout} if timeout else {})
        )
        addon.request(post_flow())  # never answered
        time.sleep(0.5)
        addon.request(post_flow(b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}'))
        addon.done()
    (server,) = addon.stats.snapshot()["servers"].values()
    assert server["outcomes"] == outcomes
