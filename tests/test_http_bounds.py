"""Resource bounds: a small compressed body that decodes to a huge one cannot exhaust the recorder.

The addon decodes bodies incrementally and keeps at most `erascope_max_body` bytes per body; the
record says `truncated`, with the wire size. The relayed bytes are never changed: checked through
mitmproxy's `taddons`/`tflow` helpers and end to end through a real `mitmdump` in front of a real
HTTP server that gets (and sends) a gzip bomb.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import brotli
import orjson
import pytest
from mitmproxy import exceptions
from mitmproxy.test import taddons, tflow, tutils

from addon import format as fmt
from addon.bodies import DEFAULT_MAX_BODY, bounded_body
from addon.http_recorder import HttpRecorder
from tests.test_http_e2e import Proc, start_mitmdump

try:
    from compression import zstd
except ImportError:
    from backports import zstd  # type: ignore[no-redef]

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _redact_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERASCOPE_REDACT_KEY", "unit-key")


def bomb(size: int) -> bytes:
    """gzip of `size` bytes of a JSON-looking body: about 1 KB per MiB."""
    return gzip.compress(b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"p":"' + b"A" * size, 9)


def read(capdir: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(capdir.glob("*.jsonl")):
        out.extend(orjson.loads(line) for line in path.read_bytes().splitlines())
    return out


# --- the bounded decoder ---------------------------------------------------------------------------
PLAIN = bytes(range(256)) * 4096  # 1 MiB that does not compress to nothing

ENCODERS = {
    "gzip": lambda b: gzip.compress(b),
    "deflate": zlib.compress,
    "deflate-raw": lambda b: zlib.compress(b, wbits=-zlib.MAX_WBITS),  # sent as "deflate" by some servers
    "br": brotli.compress,
    "zstd": zstd.compress,
}


@pytest.mark.parametrize("name", list(ENCODERS))
def test_bounded_body_decodes_each_encoding_up_to_the_bound(name: str) -> None:
    encoding = "deflate" if name == "deflate-raw" else name
    wire = ENCODERS[name](PLAIN)
    whole = bounded_body(wire, encoding.upper(), len(PLAIN))
    assert (whole.data, whole.truncated, whole.decoded_len, whole.decoded) == (PLAIN, False, len(PLAIN), True)
    cut = bounded_body(wire, encoding, 1000)
    assert (cut.data, cut.truncated, cut.decoded_len) == (PLAIN[:1000], True, None)


def test_bounded_body_plain_and_undecodable() -> None:
    assert bounded_body(PLAIN, None, 10) == bounded_body(PLAIN, "identity", 10)
    cut = bounded_body(PLAIN, None, 10)
    assert (cut.data, cut.truncated, cut.decoded_len, cut.decoded) == (PLAIN[:10], True, len(PLAIN), False)
    bad = bounded_body(b"not gzip at all", "gzip", 100)  # like mitmproxy: recorded as it came
    assert (bad.data, bad.truncated, bad.decoded) == (b"not gzip at all", False, False)
    assert bounded_body(b"", "gzip", 100).data == b""


def test_gzip_bomb_holds_no_more_than_the_bound() -> None:
    wire = bomb(256 * MIB)
    assert len(wire) < 300_000
    tracemalloc.start()
    try:
        got = bounded_body(wire, "gzip", DEFAULT_MAX_BODY)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got.truncated and len(got.data) == DEFAULT_MAX_BODY and got.decoded_len is None
    assert peak < 2 * DEFAULT_MAX_BODY + 4 * MIB, peak  # 256 MiB before the bound existed


# --- the addon -------------------------------------------------------------------------------------
@pytest.fixture
def rec(tmp_path: Path) -> Iterator[HttpRecorder]:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), erascope_max_body="1m")
        yield addon


def test_gzip_bomb_request_is_recorded_truncated_and_relayed_unchanged(rec: HttpRecorder, tmp_path: Path) -> None:
    wire = bomb(64 * MIB)
    f = tflow.tflow()
    f.request.headers["content-encoding"] = "gzip"
    f.request.raw_content = wire
    f.response = tutils.tresp(content=b"")
    f.response.headers["content-encoding"] = "gzip"
    f.response.raw_content = wire
    rec.request(f)
    rec.response(f)
    rec.done()
    assert f.request.raw_content is wire and f.response.raw_content is wire  # what is relayed
    records = read(tmp_path / "caps")
    assert records[0]["max_body"] == MIB
    req, resp = (r for r in records if r["type"] in (fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE))
    for r in (req, resp):
        assert r["truncated"] is True and r["wire_len"] == len(wire) and r["decoded_len"] is None
        assert r["len"] == MIB and r["raw"].startswith('{"jsonrpc":"2.0"') and len(r["raw"]) == MIB


def test_large_plain_body_is_truncated_with_its_size(rec: HttpRecorder, tmp_path: Path) -> None:
    body = b"x" * (3 * MIB)
    f = tflow.tflow()
    f.request.raw_content = body
    rec.request(f)
    rec.done()
    (req,) = (r for r in read(tmp_path / "caps") if r["type"] == fmt.HTTP_REQUEST)
    assert (req["truncated"], req["decoded_len"], req["wire_len"], req["len"]) == (True, 3 * MIB, 3 * MIB, MIB)
    assert f.request.raw_content == body


def test_small_bodies_carry_no_truncation_fields(rec: HttpRecorder, tmp_path: Path) -> None:
    f = tflow.tflow()
    f.request.raw_content = gzip.compress(b'{"a":1}')
    f.request.headers["content-encoding"] = "gzip"
    rec.request(f)
    rec.done()
    (req,) = (r for r in read(tmp_path / "caps") if r["type"] == fmt.HTTP_REQUEST)
    assert req["raw"] == '{"a":1}' and "truncated" not in req and "decoded_len" not in req


@pytest.mark.parametrize("value", ["0", "-1", "lots"])
def test_bad_max_body_is_an_options_error(value: str) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx, pytest.raises(exceptions.OptionsError, match="erascope_max_body"):
        tctx.configure(addon, erascope_max_body=value)


# --- end to end ------------------------------------------------------------------------------------
class _Upstream(http.server.ThreadingHTTPServer):
    received: list[bytes]
    answer: bytes


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Upstream

    def do_POST(self) -> None:
        self.server.received.append(self.rfile.read(int(self.headers["content-length"])))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-encoding", "gzip")
        self.send_header("content-length", str(len(self.server.answer)))
        self.end_headers()
        self.wfile.write(self.server.answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.e2e
def test_gzip_bomb_through_mitmdump(clean_env: dict[str, str], tmp_path: Path) -> None:
    import httpx2

    wire = bomb(64 * MIB)
    answer = bomb(32 * MIB)
    upstream = _Upstream(("127.0.0.1", 0), _Handler)
    upstream.received, upstream.answer = [], answer
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    procs: list[Proc] = []
    try:
        capdir = tmp_path / "caps"
        proxy = start_mitmdump(procs, clean_env, upstream.server_address[1], capdir, "--set", "erascope_max_body=1m")
        url = f"http://127.0.0.1:{proxy.port}/mcp"  # type: ignore[attr-defined]
        with httpx2.Client(timeout=60) as client, client.stream(
            "POST", url, content=wire, headers={"content-encoding": "gzip", "content-type": "application/json"}
        ) as resp:
            got = b"".join(resp.iter_raw())
        assert proxy.stop() == 0
    finally:
        for p in procs:
            p.stop()
        upstream.shutdown()
    # relayed byte for byte both ways
    assert [hashlib.sha256(b).hexdigest() for b in upstream.received] == [hashlib.sha256(wire).hexdigest()]
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(answer).hexdigest()
    records = read(capdir)
    req, resp_rec = (r for r in records if r["type"] in (fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE))
    assert (req["truncated"], req["wire_len"], req["len"]) == (True, len(wire), MIB)
    assert (resp_rec["truncated"], resp_rec["wire_len"], resp_rec["len"]) == (True, len(answer), MIB)
    assert max(p.stat().st_size for p in capdir.glob("*.jsonl")) < 3 * MIB


# --- server-sent events ----------------------------------------------------------------------------
def test_sse_parser_holds_at_most_the_bound_per_event() -> None:
    from addon.sse import SseParser

    parser = SseParser(max_event=1000)
    chunk = b"A" * 65536
    events = parser.feed(b"event: message\ndata: ")
    tracemalloc.start()
    try:
        for _ in range(512):  # a 32 MiB data line that never ends...
            events += parser.feed(chunk)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 * MIB, peak
    events += parser.feed(b"\ndata: tail\n\ndata: small\n\n")  # ...until it does
    big, small = events
    assert big.truncated and len(big.data) == 1000 and big.data_len == 512 * 65536 + len(b"\ntail")
    assert (small.data, small.truncated, small.data_len) == (b"small", False, 5)


def test_sse_event_over_the_bound_is_recorded_truncated(rec: HttpRecorder, tmp_path: Path) -> None:
    f = tflow.tflow()
    rec.request(f)
    f.response = tutils.tresp(headers=http_headers(), content=None)
    rec.responseheaders(f)
    body = b"data: " + b"B" * (2 * MIB) + b"\n\n"
    relayed = b"".join(f.response.stream(body[i : i + 65536]) for i in range(0, len(body), 65536))
    f.response.stream(b"")
    rec.done()
    assert relayed == body
    (ev,) = (r for r in read(tmp_path / "caps") if r["type"] == fmt.SSE_EVENT)
    assert (ev["truncated"], ev["decoded_len"], ev["len"]) == (True, 2 * MIB, MIB)


def http_headers() -> Any:
    from mitmproxy import http

    return http.Headers(((b"content-type", b"text/event-stream"),))


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd", "deflate", "compress"])
def test_a_body_that_does_not_decode_is_recorded_as_it_came_and_marked(
    rec: HttpRecorder, tmp_path: Path, encoding: str
) -> None:
    """A `Content-Encoding` the body does not hold (or one mitmproxy cannot decode): the wire bytes are
    recorded, with `undecodable` naming the encoding, so the analyzer can report it; nothing crashes."""
    wire = b"\x00\xffnot " + encoding.encode() + b" data"
    f = tflow.tflow()
    f.request.headers["content-encoding"] = encoding
    f.request.raw_content = wire
    rec.request(f)
    rec.done()
    assert f.request.raw_content is wire
    (req,) = (r for r in read(tmp_path / "caps") if r["type"] == fmt.HTTP_REQUEST)
    assert req["undecodable"] == encoding
    assert "raw_b64" in req and "wire_len" not in req


def test_a_body_that_decodes_carries_no_undecodable_marker(rec: HttpRecorder, tmp_path: Path) -> None:
    f = tflow.tflow()
    f.request.headers["content-encoding"] = "gzip"
    f.request.raw_content = gzip.compress(b'{"a":1}')
    rec.request(f)
    rec.done()
    (req,) = (r for r in read(tmp_path / "caps") if r["type"] == fmt.HTTP_REQUEST)
    assert "undecodable" not in req
