"""The recorders' metrics against hostile traffic and a hostile environment: a `--metrics` address
that is no address, servers whose event streams the recorder does not tap, and a writer whose
counts go back (a torn line completed later). Counters a scrape sees must never go down, the
open-stream gauge must follow the streams the recorder taps, and a bad address is an option error.

Scraped with prometheus_client's own parser. End to end (a live recorder): test_metrics_e2e.py.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Final

import orjson
import pytest
from mitmproxy import exceptions, http
from mitmproxy.test import taddons, tflow, tutils
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from addon import format as fmt
from addon import writer as writer_mod
from addon.errors import ErascopeError
from addon.http_recorder import HttpRecorder
from addon.metrics import LiveStats, MetricsEndpoint, RecorderCollector, parse_address, writer_counters
from addon.writer import CaptureWriter
from tests.test_http_e2e import BIN, Proc, start_mitmdump
from tests.test_metrics_e2e import settle, value

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""Scraped samples by name and labels (as `tests.test_metrics_e2e.scrape` reads them)."""


@pytest.fixture(autouse=True)
def _redact_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERASCOPE_REDACT_KEY", "unit-key")


@pytest.fixture
def rec(tmp_path: Path) -> Iterator[HttpRecorder]:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"))
        yield addon
        addon.done()


def scrape(registry: CollectorRegistry) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }


def registry_of(collector: RecorderCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    return registry


# --- the address --------------------------------------------------------------------------------------

BAD_ADDRESSES = [
    "127.0.0.1:\u00b2",  # `str.isdigit` takes it, `int` refuses it
    "127.0.0.1:\u0669\u0664\u0666\u0664",  # Arabic-Indic digits: `int` reads them as 9464
    "127.0.0.1:" + "1" * 5000,  # past `int`'s limit on digits
    "a" * 70 + ".example:0",  # a DNS label over 63 characters: the IDNA codec refuses it
    "..:0",
]


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_a_bad_metrics_address_is_an_erascope_error(address: str) -> None:
    with pytest.raises(ErascopeError, match="--metrics"):
        MetricsEndpoint(address, dict).close()


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_a_bad_metrics_address_is_an_option_error_of_the_addon(tmp_path: Path, address: str) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        with pytest.raises(exceptions.OptionsError, match="erascope_metrics"):
            tctx.configure(addon, erascope_dir=str(tmp_path), erascope_metrics=address)
        assert addon.metrics is None
        addon.done()


@pytest.mark.e2e
def test_record_http_with_a_bad_metrics_address_exits_with_the_reason(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """It ran on without metrics, a traceback in its output, as if the option had not been given."""
    cli = Proc(
        [str(BIN / "erascope"), "record", "http", "--upstream", "http://127.0.0.1:9/mcp", "--listen", "127.0.0.1:0",
         "--out", str(tmp_path / "caps"), "--metrics", "127.0.0.1:\u00b2"],
        clean_env,
    )  # fmt: skip
    procs.append(cli)
    assert cli.popen.wait(60) == 2
    cli.wait_for(r"--metrics must be HOST:PORT")
    assert not any("Traceback" in line for line in cli.lines)


def test_good_metrics_addresses_still_parse() -> None:
    assert parse_address("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_address("[::1]:0") == ("::1", 0)
    assert parse_address(":9464") == ("127.0.0.1", 9464)


# --- open event streams ---------------------------------------------------------------------------------


def _stream(addon: HttpRecorder, headers: tuple[tuple[bytes, bytes], ...], path: bytes = b"/sse") -> http.HTTPFlow:
    """A GET whose response another addon (or mitmproxy's `stream_large_bodies`) made streamed, through
    the recorder's hooks, left open."""
    f = tflow.tflow(req=tutils.treq(method=b"GET", path=path, host="127.0.0.1", port=8000))
    addon.request(f)
    f.response = tutils.tresp(status_code=200, headers=http.Headers(headers), content=None)
    f.response.stream = True
    addon.responseheaders(f)
    return f


def _end(addon: HttpRecorder, f: http.HTTPFlow) -> None:
    assert f.response is not None
    if callable(f.response.stream):
        f.response.stream(b"")  # mitmproxy's end-of-stream call to a tap
    addon.response(f)


def _open_streams(addon: HttpRecorder) -> int:
    assert addon.writer is not None and addon.writer.flush(10)
    return int(addon.stats.snapshot()["sse_open"])


@pytest.mark.parametrize(
    "headers",
    [
        ((b"content-type", b"text/event-stream"), (b"content-type", b"text/event-stream")),
        ((b"content-type", b"text/event-stream"), (b"content-type", b"application/json")),
        ((b"content-type", b"text/event-stream\xa0"),),  # a byte that is no UTF-8: latin-1 NBSP in the record
        ((b"content-type", b"text/event-stream\x85"),),  # and NEL
        ((b"content-type", b"text/event-stream\xc2\xa0"),),  # an NBSP in UTF-8
        ((b"Content-Type", b"text/event-stream\x0b"),),
    ],
)
def test_a_streamed_response_the_recorder_does_not_tap_is_no_open_stream(
    rec: HttpRecorder, headers: tuple[tuple[bytes, bytes], ...]
) -> None:
    f = _stream(rec, headers)
    tapped = callable(f.response.stream) if f.response else False
    _end(rec, f)
    assert _open_streams(rec) == 0, f"tapped={tapped}"  # a stream that ended is not open


def test_open_streams_count_the_tapped_streams_only(rec: HttpRecorder) -> None:
    sse = ((b"content-type", b"text/event-stream"),)
    a = _stream(rec, sse, b"/a")
    _end(rec, _stream(rec, ((b"content-type", b"text/event-stream\xa0"),), b"/odd"))
    b = _stream(rec, sse, b"/b")
    assert _open_streams(rec) == 2
    _end(rec, a)
    assert _open_streams(rec) == 1  # b is still open
    _end(rec, b)
    assert _open_streams(rec) == 0


def test_a_stream_end_without_its_open_leaves_the_other_streams_counted() -> None:
    stats = LiveStats()
    opened = {
        fmt.F_TYPE: fmt.HTTP_RESPONSE, "flow": "a", "status": 200, "streamed": True,
        "headers": [["content-type", "text/event-stream"]],
    }  # fmt: skip
    stats.observe_all([opened])
    # a stream the counters did not see open (its content type redacted by --redact-header, say)
    stats.observe_all([{fmt.F_TYPE: fmt.SSE_END, "flow": "x", "how": "clean"}])
    assert stats.snapshot()["sse_open"] == 1  # "a" is open still


# --- counters never go down -----------------------------------------------------------------------------


def test_records_lost_never_goes_down_when_a_torn_line_is_completed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short write tears a line (counted lost); the next write completes it (the writer counts it
    written again). Prometheus reads a counter that goes down as a restart: `increase()` over the
    window then adds the whole counter again."""
    real_write = os.write
    calls = {"n": 0}

    def write(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] == 2:  # the first record after the header: torn
            return real_write(fd, data[: len(data) // 2])
        if calls["n"] == 3:  # the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(writer_mod.os, "write", write)
    monkeypatch.setattr(writer_mod.os, "writev", lambda fd, pieces: write(fd, b"".join(pieces)))
    w = CaptureWriter(tmp_path, transport=fmt.STDIO, server="srv", on_error=lambda _: None)
    frame = {fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c1", fmt.F_DIR: fmt.C2S, **fmt.payload_fields(b"x" * 10)}
    stats = LiveStats()
    registry = registry_of(RecorderCollector(lambda: {**stats.snapshot(), **writer_counters(w)}))
    try:
        w.write(dict(frame))
        assert w.flush(10)
        first = scrape(registry)
        assert first[("erascope_records_lost_total", ())] == 1
        w.write(dict(frame))  # completes the torn line first
        assert w.flush(10)
        second = scrape(registry)
    finally:
        w.close()
    assert w.lost == 0  # the capture's own count: the line is whole after all
    for key, before in first.items():
        if key[0].endswith("_total"):
            assert second.get(key, 0.0) >= before, key


# --- end to end: a real mitmdump in front of a server that answers with odd content types ------------------


class _OddStreams(BaseHTTPRequestHandler):
    """Answers each GET with an event stream's body (until it closes the connection), under a content
    type the recorder reads as an event stream (`/sse`) or not (two fields; a byte that is no UTF-8)."""

    TYPES: ClassVar[dict[str, list[str]]] = {
        "/sse": ["text/event-stream"],
        "/two": ["text/event-stream", "text/event-stream"],
        "/latin1": ["text/event-stream\xa0"],  # written as the one byte 0xA0
    }

    def do_GET(self) -> None:
        self.send_response(200)
        for content_type in self.TYPES[self.path]:
            self.send_header("Content-Type", content_type)
        self.end_headers()
        self.wfile.write(b'data: {"jsonrpc":"2.0","method":"notifications/message"}\n\n')

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.e2e
def test_scraped_open_streams_are_zero_once_every_stream_ended(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """mitmproxy's `stream_large_bodies` streams every response of unknown length: the recorder taps
    only what it reads as an event stream, and the gauge must not count the others as open forever."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OddStreams)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        capdir = tmp_path / "caps"
        proxy = start_mitmdump(
            procs, clean_env, server.server_address[1], capdir,
            "--set", "stream_large_bodies=1", "--set", "erascope_metrics=127.0.0.1:0",
        )  # fmt: skip
        url = proxy.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)
        for path in _OddStreams.TYPES:
            with urllib.request.urlopen(f"http://127.0.0.1:{proxy.port}{path}", timeout=30) as resp:  # type: ignore[attr-defined]
                assert resp.read().startswith(b"data: ")

        def settled(s: Samples) -> bool:
            # a line the writer is still writing has no newline yet: left for the next look
            data = [p.read_bytes() for p in sorted(capdir.glob("*.jsonl"))]
            records = [orjson.loads(line) for d in data for line in d.split(b"\n")[:-1]]
            requests = sum(r["type"] == fmt.HTTP_REQUEST for r in records)
            ended = sum(r["type"] == fmt.SSE_END for r in records)
            return requests == 3 and ended == 1 and value(s, "erascope_records_written_total") == len(records)

        s = settle(url, settled)
        assert settled(s)
        assert value(s, "erascope_sse_streams_open") == 0
        assert proxy.stop(signal.SIGINT) == 0
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# --- the endpoint ---------------------------------------------------------------------------------------


def test_a_scrape_restricted_to_some_metrics_gets_them() -> None:
    """Prometheus' `/metrics?name[]=…` (prometheus_client serves it) answered nothing at all: the
    registry did not know which metrics the collector makes."""
    stats = LiveStats()
    endpoint = MetricsEndpoint("127.0.0.1:0", lambda: {**stats.snapshot(), "records": 3})
    try:
        query = "?name[]=erascope_records_written_total&name[]=erascope_sse_streams_open"
        with urllib.request.urlopen(endpoint.url + query, timeout=10) as resp:
            text = resp.read().decode()
    finally:
        endpoint.close()
    names = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}
    assert names == {"erascope_records_written_total": 3.0, "erascope_sse_streams_open": 0.0}


# --- the HTTP+SSE transport: answers on the stream of their own session -------------------------------------

SSE_SERVER = "http://127.0.0.1:8000/sse"


def _get(flow: str, session: str) -> list[dict[str, Any]]:
    """A session's GET stream opening, and its `endpoint` event naming where the session POSTs."""
    return [
        {fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": flow, "method": "GET", "url": SSE_SERVER, fmt.F_SERVER: SSE_SERVER},
        {
            fmt.F_TYPE: fmt.HTTP_RESPONSE, "flow": flow, "status": 200, "streamed": True, fmt.F_SERVER: SSE_SERVER,
            "headers": [["content-type", "text/event-stream"]],
        },
        {
            fmt.F_TYPE: fmt.SSE_EVENT, "flow": flow, "sse_event": "endpoint", fmt.F_SERVER: SSE_SERVER,
            fmt.F_RAW: f"/messages/?session_id={session}",
        },
    ]  # fmt: skip


ENVELOPE: Final = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
"""A well-formed probe's `params._meta`: a legacy answer to it is `legacy-answer` (else `malformed-probe`)."""
PROBE_HEADERS: Final = (("mcp-protocol-version", "2026-07-28"), ("mcp-method", "server/discover"))
"""And its headers."""


def _post(flow: str, session: str, message: dict[str, Any]) -> list[dict[str, Any]]:
    """A POST of the session, accepted (the answer comes on the session's stream)."""
    url = f"http://127.0.0.1:8000/messages/?session_id={session}"
    return [
        {
            fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": flow, "method": "POST", "url": url, fmt.F_SERVER: SSE_SERVER,
            fmt.F_RAW: orjson.dumps(message).decode(), "headers": [list(h) for h in PROBE_HEADERS],
        },
        {
            fmt.F_TYPE: fmt.HTTP_RESPONSE, "flow": flow, "status": 202, "streamed": False, "headers": [],
            fmt.F_RAW: "Accepted", fmt.F_SERVER: SSE_SERVER,
        },
    ]  # fmt: skip


def _answer(flow: str, message: dict[str, Any]) -> dict[str, Any]:
    raw = orjson.dumps({"jsonrpc": "2.0", **message}).decode()
    return {fmt.F_TYPE: fmt.SSE_EVENT, "flow": flow, "sse_event": "message", fmt.F_SERVER: SSE_SERVER, fmt.F_RAW: raw}


@pytest.mark.parametrize("method", ["initialize", "tools/list"])
def test_an_answer_on_another_sessions_stream_does_not_settle_a_probe(method: str) -> None:
    """Two sessions of one HTTP+SSE server, each numbering its requests from 1: the answer to the second
    session's request came on its own stream, and was taken for the answer to the first session's
    probe (a `discover-result`), or settled the second's `initialize` in place of the probe, whose own
    answer then went uncounted."""
    stats = LiveStats()
    probe = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": ENVELOPE}}
    other = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"protocolVersion": "2024-11-05"}}
    stats.observe_all(
        [
            *_get("g1", "hmac:aaa"),
            *_get("g2", "hmac:bbb"),
            *_post("p1", "hmac:aaa", probe),
            *_post("p2", "hmac:bbb", other),
            _answer("g2", {"id": 1, "result": {"protocolVersion": "2024-11-05"}}),  # session 2's answer
        ]
    )
    assert stats.snapshot()["servers"][SSE_SERVER]["outcomes"] == {}  # session 1's probe awaits its answer
    stats.observe_all([_answer("g1", {"id": 1, "error": {"code": -32601, "message": "Method not found"}})])
    assert stats.snapshot()["servers"][SSE_SERVER] == {"era": "legacy", "outcomes": {"legacy-answer": 1}}


def test_the_recorders_sessions_keep_their_answers_apart(rec: HttpRecorder) -> None:
    """As above through the recorder itself: the session ids of the POST URLs and of the `endpoint`
    events are hashed alike, so the counters still join them."""

    def stream(session: str) -> http.HTTPFlow:
        f = _stream(rec, ((b"content-type", b"text/event-stream"),))
        assert f.response is not None and callable(f.response.stream)
        f.response.stream(f"event: endpoint\r\ndata: /messages/?session_id={session}\r\n\r\n".encode())
        return f

    def post(session: str, message: dict[str, Any]) -> None:
        headers = [(k.encode(), v.encode()) for k, v in PROBE_HEADERS] if message["method"] == "server/discover" else []
        f = tflow.tflow(
            req=tutils.treq(
                method=b"POST", path=f"/messages/?session_id={session}".encode(), host="127.0.0.1", port=8000,
                headers=http.Headers(((b"content-type", b"application/json"), *headers)), content=orjson.dumps(message),
            )
        )  # fmt: skip
        rec.request(f)
        f.response = tutils.tresp(status_code=202, headers=http.Headers(()), content=b"Accepted")
        rec.response(f)

    def answer(f: http.HTTPFlow, message: dict[str, Any]) -> None:
        assert f.response is not None and callable(f.response.stream)
        f.response.stream(b"event: message\r\ndata: " + orjson.dumps({"jsonrpc": "2.0", **message}) + b"\r\n\r\n")

    g1, g2 = stream("aaaa1111"), stream("bbbb2222")
    post("aaaa1111", {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": ENVELOPE}})
    post("bbbb2222", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    answer(g2, {"id": 1, "result": {"tools": []}})
    assert rec.writer is not None and rec.writer.flush(10)
    (server,) = rec.stats.snapshot()["servers"].values()
    assert server["outcomes"] == {}
    answer(g1, {"id": 1, "error": {"code": -32601, "message": "Method not found"}})
    assert rec.writer.flush(10)
    (server,) = rec.stats.snapshot()["servers"].values()
    assert server == {"era": "legacy", "outcomes": {"legacy-answer": 1}}


# --- end to end: ids past 64 bits and server keys that hide characters ----------------------------------------

BIG = 2**64 + 1
"""An id orjson reads as a float (beyond 64 bits): the same float as `BIG - 1`."""
MODERN_RESULT = '"result":{"supportedVersions":["2026-07-28"],"capabilities":{},"resultType":"complete"}'


class _HostileMcp(BaseHTTPRequestHandler):
    """Answers each POSTed `server/discover` with a DiscoverResult; the probe numbered `BIG` in an event
    stream whose first event answers `BIG - 1` (another request: -32022) and whose second answers it."""

    def do_POST(self) -> None:
        ident = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["id"]  # integers of any size
        result = f'{{"jsonrpc":"2.0","id":{json.dumps(ident)},{MODERN_RESULT}}}'.encode()
        self.send_response(200)
        if ident == BIG:
            other = f'{{"jsonrpc":"2.0","id":{BIG - 1},"error":{{"code":-32022,"message":"Unsupported"}}}}'.encode()
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"event: message\ndata: " + other + b"\n\nevent: message\ndata: " + result + b"\n\n")
        else:
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(result)))
            self.end_headers()
            self.wfile.write(result)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _probe_raw(port: int, target: bytes, ident: int) -> bytes:
    """POST a probe numbered `ident` to the request target `target`, bytes as they are (a client may send any:
    urllib refuses an id beyond 64 bits in orjson and a target that is not ASCII), and read the answer."""
    body = b'{"jsonrpc":"2.0","id":%d,"method":"server/discover","params":{}}' % ident
    head = b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" % target
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        answer = b""
        while chunk := sock.recv(1 << 16):
            answer += chunk
    return answer


@pytest.fixture
def hostile_mcp() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostileMcp)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(5)


def _outcomes(s: Samples) -> dict[tuple[str, str], float]:
    return {
        (labels["server"], labels["outcome"]): v
        for (name, pairs), v in s.items()
        if name == "erascope_probe_outcomes_total" and (labels := dict(pairs))
    }


@pytest.mark.e2e
def test_an_answer_to_another_id_past_64_bits_does_not_settle_the_probe(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path, hostile_mcp: int
) -> None:
    """orjson reads an integer beyond 64 bits as a float: 2**64 + 1 and 2**64 were one id, and the event
    answering 2**64 (-32022) was counted as the probe's outcome, its era `modern-other-version`."""
    proxy = start_mitmdump(procs, clean_env, hostile_mcp, tmp_path / "caps", "--set", "erascope_metrics=127.0.0.1:0")
    url = proxy.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)
    answer = _probe_raw(proxy.port, b"/mcp", BIG)  # type: ignore[attr-defined]
    assert b'"id":%d,"result"' % BIG in answer
    s = settle(url, lambda s: sum(_outcomes(s).values()) >= 1)
    key = f"http://127.0.0.1:{hostile_mcp}/mcp"
    assert _outcomes(s) == {(key, "discover-result"): 1.0}
    assert value(s, "erascope_server_era", server=key, era="modern") == 1.0
    assert proxy.stop(signal.SIGINT) == 0


@pytest.mark.e2e
def test_scraped_server_labels_show_hidden_characters_and_keep_keys_apart(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path, hostile_mcp: int
) -> None:
    r"""A client chooses the path, and the path is part of the server key: a right-to-left override made
    a dashboard show `/mcp\u202elive.exe` as `/mcpexe.evil`, and a zero-width space made two servers read
    alike. Each is written as the reports write it (`\u202e`), and a key that holds that text itself (a
    backslash, then `u202e`) keeps a label of its own."""
    proxy = start_mitmdump(procs, clean_env, hostile_mcp, tmp_path / "caps", "--set", "erascope_metrics=127.0.0.1:0")
    url = proxy.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)
    paths = {
        "/mcp\u202elive.exe": "/mcp\\u202elive.exe",
        "/mcp\u200b": "/mcp\\u200b",
        "/mcp": "/mcp",
        "/mcp\\u202elive.exe": "/mcp\\\\u202elive.exe",
    }
    for i, path in enumerate(paths, 1):
        assert b'"resultType":"complete"' in _probe_raw(proxy.port, path.encode(), i)  # type: ignore[attr-defined]
    s = settle(url, lambda s: sum(_outcomes(s).values()) >= len(paths))
    origin = f"http://127.0.0.1:{hostile_mcp}"
    assert _outcomes(s) == {(origin + label, "discover-result"): 1.0 for label in paths.values()}
    with urllib.request.urlopen(url, timeout=10) as resp:
        exposition = resp.read().decode()
    assert "\u202e" not in exposition and "\u200b" not in exposition
    assert proxy.stop(signal.SIGINT) == 0
