"""Request targets and methods no HTTP client library sends, but any client can: a fragment holding a
token, bytes that are not UTF-8, control bytes. A real `mitmdump -s addon/http_recorder.py` (reverse
mode, no `erascope_server`, so the server key comes from the request) and a real `erascope record
http`, in front of the real `mcp` server, with `/metrics` scraped over HTTP. The requests are written
on a raw socket, byte for byte.
"""

from __future__ import annotations

import base64
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import orjson
import pytest

from addon import format as fmt
from tests.test_http_e2e import BIN, Proc, by_flow, read_capture, record_http, start_mitmdump, start_server
from tests.test_metrics_e2e import Samples, settle

pytestmark = pytest.mark.e2e

PROBE = orjson.dumps(
    {"jsonrpc": "2.0", "id": 1, "method": "server/discover",
     "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "io.modelcontextprotocol/clientCapabilities": {}}}}
)  # fmt: skip


def send_raw(port: int, method: bytes, target: bytes, body: bytes = PROBE, extra: bytes = b"") -> bytes:
    """One HTTP/1.1 request with exactly these method and target bytes (and `extra` header lines, each
    ending in CRLF); the status line of the answer."""
    head = (
        b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n%s"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (method, target, extra, len(body))
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head + body)
        answer = b""
        while b"\r\n" not in answer and (chunk := s.recv(4096)):
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()


def probes_counted(samples: Samples) -> float:
    return sum(v for (name, _), v in samples.items() if name == "erascope_probe_outcomes_total")


def addon_proxy(procs: list[Proc], env: dict[str, str], tmp_path: Path) -> tuple[int, Proc, str]:
    """The real MCP server and mitmdump with the addon in front of it: the server's port, the proxy and
    its metrics URL."""
    port = start_server(procs, env)
    proxy = start_mitmdump(procs, env, port, tmp_path / "caps", "--set", "erascope_metrics=127.0.0.1:0")
    return port, proxy, proxy.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)


def test_a_token_in_the_fragment_reaches_neither_the_server_key_nor_a_metric_label(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    port, proxy, url = addon_proxy(procs, clean_env, tmp_path)
    assert send_raw(proxy.port, b"POST", b"/mcp#access_token=FRAGSECRET").startswith(b"HTTP/1.1 ")  # type: ignore[attr-defined]
    settle(url, lambda s: probes_counted(s) >= 1)
    text = metrics_text(url)
    assert f'server="http://127.0.0.1:{port}/mcp"' in text
    assert "FRAGSECRET" not in text
    assert proxy.stop(signal.SIGINT) == 0

    capdir = tmp_path / "caps"
    assert not [p for p in capdir.iterdir() if b"FRAGSECRET" in p.read_bytes()]
    (flow,) = by_flow(read_capture(capdir)).values()
    assert [r["type"] for r in flow] == ["http.request", "http.response"]
    assert {r["server"] for r in flow} == {f"http://127.0.0.1:{port}/mcp"}
    assert flow[0]["url"].startswith(f"http://127.0.0.1:{port}/mcp#access_token=hmac:")


def test_undecodable_and_control_bytes_in_the_path_keep_metrics_and_keys_printable(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    port, proxy, url = addon_proxy(procs, clean_env, tmp_path)
    for target in (b"/mcp\xff", b"/mcp\x1b[2J"):
        assert send_raw(proxy.port, b"POST", target).startswith(b"HTTP/1.1 ")  # type: ignore[attr-defined]
    settle(url, lambda s: probes_counted(s) >= 2)
    text = metrics_text(url)  # was HTTP 500 from the first such request on, for every scrape
    origin = f"http://127.0.0.1:{port}"
    assert f'server="{origin}/mcp%FF"' in text and f'server="{origin}/mcp%1B[2J"' in text
    assert not any(c < " " and c != "\n" for c in text)
    assert proxy.stop(signal.SIGINT) == 0

    flows = sorted(by_flow(read_capture(tmp_path / "caps")).values(), key=lambda f: f[0]["server"])
    assert [[r["type"] for r in flow] for flow in flows] == [["http.request", "http.response"]] * 2
    assert [{r["server"] for r in flow} for flow in flows] == [{f"{origin}/mcp%1B[2J"}, {f"{origin}/mcp%FF"}]
    escaped, undecodable = (flow[0] for flow in flows)
    assert escaped["url"] == f"{origin}/mcp\x1b[2J" and "url_b64" not in escaped  # UTF-8: kept as it came
    assert undecodable["url"] == f"{origin}/mcp%FF"
    assert base64.b64decode(undecodable["url_b64"]) == f"{origin}/mcp".encode() + b"\xff"


def test_record_http_records_a_method_and_target_that_are_not_utf8(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    port = start_server(procs, clean_env)
    capdir = tmp_path / "caps"
    cli, listen = record_http(procs, f"http://127.0.0.1:{port}/mcp", capdir, clean_env)
    listen_port = int(listen.rsplit(":", 1)[1].split("/")[0])
    for method, target in ((b"POST", b"/mcp?x=\xff&token=s3cret\xfe"), (b"P\xffST", b"/mcp")):
        assert send_raw(listen_port, method, target).startswith(b"HTTP/1.1 ")
    assert send_raw(listen_port, b"POST", b"/mcp", extra=b"Content-Encoding: \xff\r\n").startswith(b"HTTP/1.1 ")
    assert cli.stop(signal.SIGINT) == 0
    assert not [line for line in cli.lines if "not encodable" in line or "lost" in line]

    records = read_capture(capdir)
    assert not [r for r in records if r["type"] == "capture-error"]
    flows = list(by_flow(records).values())
    assert [[r["type"] for r in flow] for flow in flows] == [["http.request", "http.response"]] * 3
    query, method, encoding = (flow[0] for flow in flows)
    assert encoding["undecodable"] == "%FF" and fmt.payload_bytes(encoding) == PROBE  # as it came
    origin = f"http://127.0.0.1:{port}"
    assert query["url"].startswith(f"{origin}/mcp?x=%FF&token=hmac:") and query["method"] == "POST"
    exact = base64.b64decode(query["url_b64"])
    assert exact.startswith(f"{origin}/mcp?x=".encode() + b"\xff&token=hmac:") and b"s3cret" not in exact
    assert method["method"] == "P%FFST" and base64.b64decode(method["method_b64"]) == b"P\xffST"
    assert method["url"] == f"{origin}/mcp" and "url_b64" not in method

    # and the analyzer reads the capture: no line is malformed
    done = subprocess.run(
        [str(BIN / "erascope"), "analyze", "--format", "json", str(capdir)], env=clean_env, capture_output=True
    )
    assert done.returncode in (0, 1), done.stderr
    assert orjson.loads(done.stdout)["inputs"].get("malformed") in (None, [], 0)
