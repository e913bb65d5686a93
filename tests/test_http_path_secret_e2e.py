"""A key in the URL path, recorded for real: `erascope record http` (with `--metrics`) and `mitmdump
-s addon/http_recorder.py` in front of real `mcp` 2.3.0 servers whose endpoints sit under a key
(`/api/<ghp_…>/mcp`, `/mcp/<sk-proj-…>/sse`), driven by the SDK's own clients.

Without a server name every flow is keyed by origin and path: the key reached the capture's
`server` and `url` fields, its file name, the metrics' labels and the analyzer's report. Now it is
hashed there as everywhere else, and the HTTP+SSE transport's POSTs still join their stream.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import sys
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client
from mcp.client.sse import sse_client

from addon import format as fmt
from addon.redact import Redactor
from analyzer.pipeline import analyze
from analyzer.report import render_json
from tests.test_http_e2e import (
    BIN,
    META,
    MODERN_HEADERS,
    RECORDER,
    Proc,
    read_capture,
    session,
    start_mitmdump,
    start_server,
)
from tests.test_metrics_e2e import era, settle

pytestmark = pytest.mark.e2e

GHP = "ghp_s3cret0123456789abcdefghijABCDEFGHIJ"
SKPROJ = "sk-proj-s3cret-Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv_Wx-YzAb1Cd2Ef3Gh4Ij5"


def hashed(token: str) -> str:
    return Redactor(b"test-key").hash(token)  # conftest's subprocess_env sets this key


def assert_no_key(capdir: Path, token: str) -> None:
    """`token`, or a piece of it, is nowhere in the capture: not in its records, not in its file names."""
    for path in capdir.glob("*.jsonl"):
        assert token[:24] not in path.name
        assert token.encode() not in path.read_bytes()


def test_record_http_hashes_a_key_in_the_upstream_path_in_records_metrics_and_report(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    path = f"/api/{GHP}/mcp"
    port = start_server(procs, clean_env, sys.executable, "--path", path)
    capdir = tmp_path / "caps"
    cli = Proc(
        [str(BIN / "erascope"), "record", "http", "--upstream", f"http://127.0.0.1:{port}{path}", "--listen",
         "127.0.0.1:0", "--out", str(capdir), "--metrics", "127.0.0.1:0"],
        clean_env,
    )  # fmt: skip
    procs.append(cli)
    listen = cli.wait_for(r"listening on (http://127\.0\.0\.1:\d+)\S* -> ").group(1) + path
    metrics = cli.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)
    got = asyncio.run(session(listen, "auto", gate=tmp_path / "gate"))
    assert got["echo"] == "hello" and got["slow"] == "done"

    key = f"http://127.0.0.1:{port}/api/{hashed(GHP)}/mcp"
    samples = settle(metrics, lambda s: era(s, key) == "modern")
    assert era(samples, key) == "modern"
    assert not any(GHP in v for _, labels in samples for _, v in labels)
    with urllib.request.urlopen(metrics, timeout=10) as resp:
        assert GHP.encode() not in resp.read()
    assert cli.stop(signal.SIGINT) == 0
    assert not [line for line in cli.lines if GHP in line]  # nor in what it printed (terminals, CI logs)

    assert_no_key(capdir, GHP)
    records = read_capture(capdir)
    assert {r["server"] for r in records if "server" in r} == {key}
    urls = {r["url"] for r in records if r["type"] == fmt.HTTP_REQUEST}
    assert urls == {f"http://127.0.0.1:{port}/api/{hashed(GHP)}/mcp"}
    report = render_json(analyze([str(capdir)]))
    assert GHP not in report
    assert [s["server"] for s in orjson.loads(report)["servers"]] == [key]


async def _sse_session(url: str) -> str:
    async with Client(sse_client(url), mode="legacy") as client:
        return (await client.call_tool("echo", {"text": "hello"})).content[0].text


def test_the_http_sse_transport_under_a_key_is_one_server_with_its_key_hashed(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    prefix = f"/mcp/{SKPROJ}"
    port = start_server(procs, clean_env, sys.executable, "--transport", "sse", "--path", prefix)
    capdir = tmp_path / "caps"
    proxy = start_mitmdump(procs, clean_env, port, capdir)
    assert asyncio.run(_sse_session(f"http://127.0.0.1:{proxy.port}{prefix}/sse")) == "hello"  # type: ignore[attr-defined]
    assert proxy.stop(signal.SIGINT) == 0

    assert_no_key(capdir, SKPROJ)
    key = f"http://127.0.0.1:{port}/mcp/{hashed(SKPROJ)}/sse"
    records = read_capture(capdir)
    # the POSTs to the endpoint the stream announced take the stream's key: one server
    assert {r["server"] for r in records if r["type"] not in (fmt.HEADER, fmt.PART_END)} == {key}
    posts = [r for r in records if r["type"] == fmt.HTTP_REQUEST and r["method"] == "POST"]
    assert posts and all(r["url"].startswith(f"http://127.0.0.1:{port}/mcp/{hashed(SKPROJ)}/messages/") for r in posts)
    (endpoint,) = [r for r in records if r["type"] == fmt.SSE_EVENT and r["sse_event"] == "endpoint"]
    assert endpoint["raw"].startswith(f"/mcp/{hashed(SKPROJ)}/messages/?session_id=hmac:")
    report = render_json(analyze([str(capdir)]))
    assert SKPROJ not in report
    (server,) = orjson.loads(report)["servers"]
    assert (server["server"], server["transport"], server["init_outcomes"]) == (key, "http+sse", {"served": 1})


def test_no_redact_records_a_key_in_the_path_as_it_is(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    path = f"/api/{GHP}/mcp"
    port = start_server(procs, clean_env, sys.executable, "--path", path)
    capdir = tmp_path / "caps"
    proxy = start_mitmdump(procs, clean_env, port, capdir, "--set", "erascope_redact=false")
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}
    headers = {**MODERN_HEADERS, "mcp-method": "server/discover"}
    url = f"http://127.0.0.1:{proxy.port}{path}"  # type: ignore[attr-defined]
    req = urllib.request.Request(url, data=orjson.dumps(body), headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
    assert proxy.stop(signal.SIGINT) == 0
    (request,) = [r for r in read_capture(capdir) if r["type"] == fmt.HTTP_REQUEST]
    assert request["url"] == f"http://127.0.0.1:{port}{path}"
    assert request["server"] == f"http://127.0.0.1:{port}{path}"


def _discover(url: str) -> int:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}
    headers = {**MODERN_HEADERS, "mcp-method": "server/discover"}
    req = urllib.request.Request(url, data=orjson.dumps(body), headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status


def _escaped(token: str, at: int) -> str:
    return token[:at] + f"%{ord(token[at]):02X}" + token[at + 1 :]


def test_a_percent_encoded_key_in_the_path_is_hashed_and_keyed_as_the_plain_one(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """The server decodes the path before routing: `/api/ghp%5F…/mcp` and `/api/%67hp_…/mcp` reach
    the endpoint at `/api/ghp_…/mcp`, and were recorded in clear (and as two more servers)."""
    path = f"/api/{GHP}/mcp"
    port = start_server(procs, clean_env, sys.executable, "--path", path)
    capdir = tmp_path / "caps"
    proxy = start_mitmdump(procs, clean_env, port, capdir)
    base = f"http://127.0.0.1:{proxy.port}"  # type: ignore[attr-defined]
    query = f"?api%5Fkey=s3cret-query-value&next={_escaped(SKPROJ, 2)}"
    for spelled in (path, f"/api/{_escaped(GHP, 3)}/mcp{query}", f"/api/{_escaped(GHP, 0)}/mcp"):
        assert _discover(base + spelled) == 200
    assert proxy.stop(signal.SIGINT) == 0

    for secret in (GHP, _escaped(GHP, 3), _escaped(GHP, 0), _escaped(SKPROJ, 2), "s3cret-query-value"):
        assert_no_key(capdir, secret)
    records = read_capture(capdir)
    key = f"http://127.0.0.1:{port}/api/{hashed(GHP)}/mcp"
    assert {r["server"] for r in records if r["type"] in (fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE)} == {key}
    assert [r["url"] for r in records if r["type"] == fmt.HTTP_REQUEST] == [
        key,
        f"{key}?api%5Fkey={hashed('s3cret-query-value')}&next={hashed(SKPROJ)}",
        key,
    ]


def test_a_forward_proxy_hashes_a_key_in_the_host_name(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """A forward (regular mode) proxy: the client names the host, here one named after a key (as
    tunnels and per-tenant gateways do), which does not resolve. The host was recorded in clear in
    `url`, `Host`, `server` and the capture's file name; the proxy's error is recorded redacted too."""
    host = f"{GHP}.invalid"
    capdir = tmp_path / "caps"
    argv = [
        str(BIN / "mitmdump"), "--listen-host", "127.0.0.1", "--listen-port", "0", "--flow-detail", "0",
        "--set", f"confdir={tmp_path / 'mitmproxy-conf'}", "-s", str(RECORDER), "--set", f"erascope_dir={capdir}",
    ]  # fmt: skip
    proxy = Proc(argv, clean_env, merge_stderr=True)
    procs.append(proxy)
    port = int(proxy.wait_for(r"listening at 127\.0\.0\.1:(\d+)").group(1))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        head = f"POST http://{host}/mcp HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
        s.sendall(head.encode() + b"{}")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert re.match(rb"HTTP/1\.1 502 ", answer)  # the proxy's own answer: the name does not resolve
    assert proxy.stop(signal.SIGINT) == 0

    assert_no_key(capdir, GHP)
    records = read_capture(capdir)
    (request,) = [r for r in records if r["type"] == fmt.HTTP_REQUEST]
    assert request["url"] == f"http://{hashed(GHP)}.invalid/mcp"
    assert ["Host", f"{hashed(GHP)}.invalid"] in request["headers"]
    (error,) = [r for r in records if r["type"] == fmt.HTTP_ERROR]
    assert {request["server"], error["server"]} == {f"http://{hashed(GHP)}.invalid/mcp"}
