"""End to end: a real `mitmdump -s addon/http_recorder.py` (and `erascope record http`) in front of
real `mcp` Streamable HTTP servers, driven by the real `mcp` 2.3.0 client.

Every process a test starts is stopped by the test (fixtures terminate, then kill). Servers and
proxies bind 127.0.0.1 on free ports and announce them on stdout, so tests never race for ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client

from addon import format as fmt
from addon.errors import ErascopeError
from addon.http_proxy import parse_listen

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SERVER = ROOT / "tests" / "peers" / "http_mcp_server.py"
BALANCER = ROOT / "captures" / "peers" / "round_robin.py"
RECORDER = ROOT / "addon" / "http_recorder.py"
STARTUP_TIMEOUT = 60.0

pytestmark = pytest.mark.e2e


# --- process helpers ----------------------------------------------------------------------------
class Proc:
    """A child process whose output lines are collected by a thread (so pipes never fill)."""

    def __init__(self, argv: list[str], env: dict[str, str], *, merge_stderr: bool = False) -> None:
        self.argv = argv
        self.popen = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        streams = [self.popen.stdout] if merge_stderr else [self.popen.stdout, self.popen.stderr]
        for stream in streams:
            threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        for raw in iter(stream.readline, b""):
            with self._cond:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = STARTUP_TIMEOUT) -> re.Match[str]:
        rx = re.compile(pattern)
        with self._cond:
            ok = self._cond.wait_for(
                lambda: any(rx.search(line) for line in self.lines) or self.popen.poll() is not None, timeout
            )
            for line in self.lines:
                if m := rx.search(line):
                    return m
        raise AssertionError(f"{self.argv[:3]}: no {pattern!r} (alive={ok}); output:\n" + "\n".join(self.lines))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode




def start_server(procs: list[Proc], env: dict[str, str], python: Path | str = sys.executable, *args: str) -> int:
    p = Proc([str(python), str(SERVER), *args], env)
    procs.append(p)
    return int(p.wait_for(r"^PORT (\d+)$").group(1))


def record_http(procs: list[Proc], upstream: str, capdir: Path, env: dict[str, str], *args: str) -> tuple[Proc, str]:
    """`erascope record http` in front of `upstream` on a free port, writing into `capdir`: the process and
    the URL clients reach it at."""
    cli = Proc(
        [str(BIN / "erascope"), "record", "http", "--upstream", upstream, "--listen", "127.0.0.1:0", "--out",
         str(capdir), *args],
        env,
    )  # fmt: skip
    procs.append(cli)
    return cli, cli.wait_for(r"listening on (http://127\.0\.0\.1:\d+/mcp) -> ").group(1)


def start_mitmdump(procs: list[Proc], env: dict[str, str], upstream_port: int, capdir: Path, *extra: str) -> Proc:
    argv = [
        str(BIN / "mitmdump"),
        "--mode", f"reverse:http://127.0.0.1:{upstream_port}",
        "--listen-host", "127.0.0.1",
        "--listen-port", "0",
        "--flow-detail", "0",
        "--set", f"confdir={capdir.parent / 'mitmproxy-conf'}",  # its CA stays in the test's tmp dir
        *extra,
        "-s", str(RECORDER),
        "--set", f"erascope_dir={capdir}",
    ]  # fmt: skip
    p = Proc(argv, env, merge_stderr=True)
    procs.append(p)
    p.port = int(p.wait_for(r"listening at 127\.0\.0\.1:(\d+)").group(1))  # type: ignore[attr-defined]
    return p


def read_capture(capdir: Path) -> list[dict[str, Any]]:
    files = sorted(capdir.glob("*.jsonl"))
    assert files, f"no capture in {capdir}"
    out: list[dict[str, Any]] = []
    for path in files:
        assert path.stat().st_mode & 0o777 == 0o600
        out.extend(orjson.loads(line) for line in path.read_bytes().splitlines())
    return out


def by_flow(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    flows: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("flow") is not None:  # connect errors before any request have no flow
            flows.setdefault(r["flow"], []).append(r)
    return flows


def header(rec: dict[str, Any], name: str) -> str | None:
    for k, v in rec.get("headers", []):
        if k.lower() == name:
            return v
    return None


def messages(flow_records: list[dict[str, Any]]) -> list[Any]:
    """The JSON-RPC messages a flow's response carried (plain body or SSE events)."""
    out = []
    for r in flow_records:
        if r["type"] == fmt.SSE_EVENT or (r["type"] == fmt.HTTP_RESPONSE and r.get("raw")):
            out.append(orjson.loads(r["raw"]))
    return out


def request_json(flow_records: list[dict[str, Any]]) -> Any:
    req = flow_records[0]
    assert req["type"] == fmt.HTTP_REQUEST
    return orjson.loads(req["raw"]) if req.get("raw") else None


def check_flow_order(records: list[dict[str, Any]]) -> None:
    """Within every flow: request, response, events (index 0..n-1), then at most one end."""
    for recs in by_flow(records).values():
        types = [r["type"] for r in recs]
        assert types[0] == fmt.HTTP_REQUEST, types
        seqs = [r["seq"] for r in recs]
        assert seqs == sorted(seqs)
        events = [r for r in recs if r["type"] == fmt.SSE_EVENT]
        assert [e["index"] for e in events] == list(range(len(events)))
        ends = [r for r in recs if r["type"] == fmt.SSE_END]
        if ends:
            assert len(ends) == 1 and ends[0]["events"] == len(events)
        assert len({r["conn"] for r in recs}) == 1


META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
MODERN_HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2026-07-28",
}


def read_first_event(chunks: Iterator[bytes]) -> bytes:
    """Read until one whole SSE event arrived (a chunk can hold part of one)."""
    body = b""
    while b"\r\n\r\n" not in body and b"\n\n" not in body:
        body += next(chunks)
    return body


def slow_call(i: int) -> bytes:
    """A modern tools/call of the slow tool, as a raw client would send it."""
    params = {"name": "slow", "arguments": {}, "_meta": {**META, "progressToken": i}}
    return orjson.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params})


def assert_answered_stream_end(flow_records: list[dict[str, Any]]) -> None:
    """The stream of a request that got its answer ended after a whole event.

    Usually `clean`; but the SDK client may hang up as soon as it holds the result, before the
    server's end-of-body reaches the proxy, which is recorded faithfully as `client-gone` (then an
    `http.error` follows).
    """
    (end,) = [r for r in flow_records if r["type"] == fmt.SSE_END]
    assert end["how"] in ("clean", "client-gone") and not end["incomplete"], end
    if end["how"] == "client-gone":
        assert flow_records[-1]["type"] == fmt.HTTP_ERROR and flow_records[-1]["kind"] == "client-gone"
    else:
        assert flow_records[-1] is end


async def session(url: str, mode: str, gate: Path | None = None) -> dict[str, Any]:
    """Drive a real client: echo, then the slow streaming tool; what it saw."""
    seen: dict[str, Any] = {"progress": []}

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen["progress"].append(message)
        if gate is not None:
            gate.touch()  # let the server finish only once the progress event really arrived

    async with Client(url, mode=mode) as client:
        seen["version"] = client.protocol_version
        seen["echo"] = (await client.call_tool("echo", {"text": "hello"})).content[0].text
        args = {"gate": str(gate)} if gate is not None else {}
        seen["slow"] = (await client.call_tool("slow", args, progress_callback=on_progress)).content[0].text
    return seen


# --- the tests ---------------------------------------------------------------------------------
@pytest.mark.parametrize("stateless", [False, True], ids=["stateful", "stateless"])
def test_modern_server_through_mitmdump_auto_and_legacy(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path, stateless: bool
) -> None:
    port = start_server(procs, clean_env, sys.executable, *(["--stateless"] if stateless else []))
    capdir = tmp_path / "caps"
    proxy = start_mitmdump(procs, clean_env, port, capdir)
    direct = f"http://127.0.0.1:{port}/mcp"
    via = f"http://127.0.0.1:{proxy.port}/mcp"  # type: ignore[attr-defined]

    for mode in ("auto", "legacy"):
        expected = asyncio.run(session(direct, mode))
        got = asyncio.run(session(via, mode, gate=tmp_path / f"gate-{mode}"))
        assert got == {**expected}, mode  # the proxy changes nothing the client can see
        assert got["slow"] == "done"  # not "gate-timeout": progress passed before the stream ended
    assert proxy.stop(signal.SIGINT) == 0  # mitmdump's done() hook flushes the capture

    records = read_capture(capdir)
    head = records[0]
    assert head["type"] == fmt.HEADER and head["transport"] == "http" and head["redaction"]["mode"] == "hash"
    check_flow_order(records)
    flows = list(by_flow(records).values())
    assert all(r["server"] == f"http://127.0.0.1:{port}/mcp" for f in flows for r in f)

    # auto: the probe, with the modern headers, answered by a DiscoverResult naming 2026-07-28
    probes = [f for f in flows if (request_json(f) or {}).get("method") == "server/discover"]
    assert len(probes) == 1
    probe = probes[0]
    assert header(probe[0], "mcp-protocol-version") == "2026-07-28"
    assert header(probe[0], "mcp-method") == "server/discover"
    assert header(probe[0], "mcp-session-id") is None
    resp = next(r for r in probe if r["type"] == fmt.HTTP_RESPONSE)
    assert resp["status"] == 200 and resp["peer"] == f"127.0.0.1:{port}"
    (discover,) = messages(probe)
    assert "2026-07-28" in discover["result"]["supportedVersions"]

    # the slow call streamed: response marked streamed, then progress and result events, clean end
    slow = [f for f in flows if (request_json(f) or {}).get("params", {}).get("name") == "slow"]
    assert len(slow) == 2  # once per client mode
    for f in slow:
        resp = next(r for r in f if r["type"] == fmt.HTTP_RESPONSE)
        assert resp["streamed"] is True and header(resp, "content-type").startswith("text/event-stream")
        methods = [m.get("method") for m in messages(f)]
        assert methods[0] == "notifications/progress" and "result" in messages(f)[-1]
        assert_answered_stream_end(f)

    # every streamed answer to a request carries that request's result as its last event
    for f in flows:
        req = request_json(f)
        resp = next((r for r in f if r["type"] == fmt.HTTP_RESPONSE), None)
        if isinstance(req, dict) and "id" in req and resp is not None and resp["streamed"]:
            assert messages(f)[-1]["id"] == req["id"]
            assert_answered_stream_end(f)

    # legacy: initialize without a version header; a hashed session id when the server is stateful
    inits = [f for f in flows if (request_json(f) or {}).get("method") == "initialize"]
    assert len(inits) == 1
    assert header(inits[0][0], "mcp-protocol-version") is None
    init_resp = next(r for r in inits[0] if r["type"] == fmt.HTTP_RESPONSE)
    sid = header(init_resp, "mcp-session-id")
    methods = [(f[0]["method"], (request_json(f) or {}).get("method")) for f in flows]
    if stateless:
        assert sid is None
    else:
        assert sid is not None and sid.startswith("hmac:")
        later = [f[0] for f in flows if f[0]["seq"] > inits[0][0]["seq"]]
        assert {header(r, "mcp-session-id") for r in later} == {sid}  # the same hash on every request
        assert ("GET", None) in methods  # the standalone SSE stream
        assert ("DELETE", None) in methods
    assert ("POST", "notifications/initialized") in methods


@pytest.mark.legacy_peer
def test_legacy_server_answers_probe_400_then_initialize(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path, legacy_py: Path
) -> None:
    port = start_server(procs, clean_env, legacy_py)
    capdir = tmp_path / "caps"
    proxy = start_mitmdump(procs, clean_env, port, capdir)
    got = asyncio.run(session(f"http://127.0.0.1:{proxy.port}/mcp", "auto"))  # type: ignore[attr-defined]
    assert got["echo"] == "hello" and got["version"] != "2026-07-28"
    assert proxy.stop(signal.SIGTERM) == 0

    records = read_capture(capdir)
    check_flow_order(records)
    flows = list(by_flow(records).values())
    posts = [f for f in flows if f[0]["method"] == "POST"]
    first, second = posts[0], posts[1]
    assert request_json(first)["method"] == "server/discover"
    resp = next(r for r in first if r["type"] == fmt.HTTP_RESPONSE)
    assert resp["status"] == 400
    (answer,) = messages(first)
    assert answer["error"]["code"] == -32600
    assert request_json(second)["method"] == "initialize"


STREAM_SSE = """
def responseheaders(flow):
    if flow.response.headers.get("content-type", "").startswith("text/event-stream"):
        flow.response.stream = True
"""


@pytest.mark.legacy_peer
def test_sse_another_addon_streams_is_still_recorded(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path, legacy_py: Path
) -> None:
    """The usual snippet that keeps mitmproxy from buffering SSE (`stream = True`), loaded before the
    recorder: the recorder left such a stream alone and wrote none of its events, so a legacy server's
    `initialize`, answered on the POST's event stream, read as unanswered."""
    port = start_server(procs, clean_env, legacy_py)
    capdir = tmp_path / "caps"
    snippet = tmp_path / "stream_sse.py"
    snippet.write_text(STREAM_SSE)
    proxy = start_mitmdump(procs, clean_env, port, capdir, "-s", str(snippet))
    got = asyncio.run(session(f"http://127.0.0.1:{proxy.port}/mcp", "auto"))  # type: ignore[attr-defined]
    assert got["echo"] == "hello"
    assert proxy.stop(signal.SIGINT) == 0
    assert any(r["type"] == fmt.SSE_EVENT for r in read_capture(capdir))
    shown = subprocess.run(
        [str(BIN / "erascope"), "analyze", "-q", "-f", "json", str(capdir)], capture_output=True, timeout=120
    )
    (server,) = orjson.loads(shown.stdout)["servers"]
    assert (server["era"], server["init_outcomes"]) == ("legacy", {"served": 1})


def test_record_http_cli_end_to_end(procs: list[Proc], clean_env: dict[str, str], tmp_path: Path) -> None:
    port = start_server(procs, clean_env)
    capdir = tmp_path / "caps"
    upstream = f"http://127.0.0.1:{port}/mcp"
    cli, listen = record_http(procs, upstream, capdir, clean_env, "--bodies", "metadata")
    cli.wait_for(f"writing captures to {re.escape(str(capdir))}")
    got = asyncio.run(session(listen, "auto", gate=tmp_path / "gate"))
    assert got["echo"] == "hello" and got["slow"] == "done"
    assert cli.stop(signal.SIGINT) == 0
    wrote = cli.wait_for(r"erascope: wrote (\S+\.jsonl)").group(1)
    records = read_capture(capdir)
    assert str(capdir) in wrote
    assert records[0]["server"] == upstream and records[0]["redaction"]["bodies"] == "metadata"
    check_flow_order(records)
    call = next(f for f in by_flow(records).values() if (request_json(f) or {}).get("method") == "tools/call")
    assert "$redacted" in request_json(call)["params"]["arguments"]
    assert all(r["server"] == upstream for r in records)
    # the analyzer's explicit schema reads the capture as written
    import polars as pl

    from analyzer.schema import RECORD_SCHEMA

    frame = pl.read_ndjson(wrote, schema=RECORD_SCHEMA)
    assert frame.height == len(records)
    assert frame.filter(pl.col("type") == fmt.SSE_END)["events"].to_list() == [
        r["events"] for r in records if r["type"] == fmt.SSE_END
    ]


@pytest.mark.parametrize("port", ["\u00b2", "\u0669\u0664\u0666\u0664", "0" * 5000])
def test_a_listen_port_of_other_digits_is_refused_with_the_reason(clean_env: dict[str, str], port: str) -> None:
    """`str.isdigit` takes `²` (which `int` refuses: a traceback) and Arabic-Indic digits (which `int`
    reads: `٩٤٦٤` listened on 9464), and 5,000 zeros made `int` work before the range check."""
    with pytest.raises(ErascopeError, match="--listen must be HOST:PORT"):
        parse_listen(f"127.0.0.1:{port}")
    bad = subprocess.run(
        [str(BIN / "erascope"), "record", "http", "--upstream", "http://127.0.0.1:1/mcp",
         "--listen", f"127.0.0.1:{port}"],
        capture_output=True, text=True, env=clean_env, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "--listen must be HOST:PORT" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr


def test_record_http_cli_rejects_bad_input(clean_env: dict[str, str]) -> None:
    bad = subprocess.run(
        [str(BIN / "erascope"), "record", "http", "--upstream", "ftp://x/mcp", "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, env=clean_env, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "--upstream must be an http" in bad.stderr
    bad = subprocess.run(
        [str(BIN / "erascope"), "record", "http", "--upstream", "http://127.0.0.1:1/mcp", "--listen", "nowhere"],
        capture_output=True, text=True, env=clean_env, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "--listen must be HOST:PORT" in bad.stderr
    bad = subprocess.run(
        [str(BIN / "erascope"), "record", "http", "--upstream", "http://127.0.0.1:1/mcp", "--idle-timeout", "0"],
        capture_output=True, text=True, env=clean_env, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "--idle-timeout must be a positive" in bad.stderr
    bad = subprocess.run(
        [str(BIN / "erascope"), "record", "http", "--upstream", "http://127.0.0.1:1/mcp", "--max-body", "0"],
        capture_output=True, text=True, env=clean_env, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "--max-body must be a positive size" in bad.stderr
    # the addon's options by the command's flags, which the user typed
    for flag, value, said in [
        ("--max-body", "12q", "--max-body: Invalid size"),
        ("--rotate-size", "0", "--rotate-size must"),
        ("--metrics", "bogus", "error: --metrics must be HOST:PORT"),
    ]:
        bad = subprocess.run(
            [str(BIN / "erascope"), "record", "http", "--upstream", "http://127.0.0.1:1/mcp", flag, value],
            capture_output=True, text=True, env=clean_env, timeout=60,
        )  # fmt: skip
        assert bad.returncode == 2 and said in bad.stderr and "erascope_" not in bad.stderr, bad.stderr


def test_flow_errors_refused_upstream_reset_and_client_gone(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    import httpx2

    port = start_server(procs, clean_env, sys.executable, "--slow", "30")
    capdir = tmp_path / "caps"
    proxy = start_mitmdump(procs, clean_env, port, capdir)
    base = f"http://127.0.0.1:{proxy.port}/mcp"  # type: ignore[attr-defined]
    headers = MODERN_HEADERS
    call = slow_call

    # client gone: read the first event of a 30 s stream, then hang up
    with httpx2.Client(timeout=30) as http, http.stream(
        "POST", base, content=call(1), headers={**headers, "mcp-method": "tools/call", "mcp-name": "slow"}
    ) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        read_first_event(resp.iter_raw())
    # upstream reset: the server dies while the stream is open
    with httpx2.Client(timeout=30) as http, http.stream(
        "POST", base, content=call(2), headers={**headers, "mcp-method": "tools/call", "mcp-name": "slow"}
    ) as resp:
        chunks = resp.iter_raw()
        read_first_event(chunks)
        procs[0].stop(signal.SIGKILL)
        with contextlib.suppress(httpx2.HTTPError):
            for _ in chunks:
                pass
    # connection refused: nothing listens upstream any more
    with httpx2.Client(timeout=30) as http:
        try:
            refused = http.post(base, content=call(3), headers=headers).status_code
        except httpx2.HTTPError as exc:
            refused = repr(exc)
    assert proxy.stop(signal.SIGINT) == 0
    # mitmproxy's default eager strategy connects upstream when the client connects: with the
    # upstream down the client is dropped before sending anything, so there is no flow
    assert isinstance(refused, str), refused  # dropped (disconnected or reset), never an HTTP answer
    records = read_capture(capdir)
    check_flow_order(records)
    flows = [f for f in by_flow(records).values() if f and f[0].get("method") == "POST"]
    assert len(flows) == 2
    gone, reset = flows
    assert [r["type"] for r in gone] == ["http.request", "http.response", "sse.event", "sse.end", "http.error"]
    assert (gone[-2]["how"], gone[-1]["kind"]) == ("client-gone", "client-gone")
    assert reset[-2]["type"] == fmt.SSE_END and reset[-2]["how"] == "upstream-reset", reset[-2:]
    assert reset[-1]["kind"] == "upstream-reset"
    (down,) = [r for r in records if r["type"] == fmt.HTTP_ERROR and r["phase"] == "connect"]
    assert down["flow"] is None and down["kind"] == "connection-refused", down
    assert down["peer"] == f"127.0.0.1:{port}"


def test_record_http_refused_upstream_is_a_flow_error(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    import socket

    import httpx2

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    capdir = tmp_path / "caps"
    cli = Proc([str(BIN / "erascope"), "record", "http", "--upstream", f"http://127.0.0.1:{dead}/mcp", "--listen",
                "127.0.0.1:0", "--out", str(capdir)], clean_env)  # fmt: skip
    procs.append(cli)
    listen = cli.wait_for(r"listening on (http://\S+) -> ").group(1)
    with httpx2.Client(timeout=30) as http:
        assert http.post(listen, content=slow_call(1), headers=MODERN_HEADERS).status_code == 502
    assert cli.stop(signal.SIGTERM) == 0
    records = read_capture(capdir)
    (flow,) = by_flow(records).values()
    assert [r["type"] for r in flow] == ["http.request", "http.error"]
    assert (flow[1]["kind"], flow[1]["phase"]) == ("connection-refused", "request"), flow[1]


class RawUpstream:
    """A scripted HTTP/1.1 upstream on a thread: per request, by its path, `/mcp?cut` answers
    `Content-Length: 1000` with a short body and closes, `/mcp?hold` says it got the request on
    `held` and never answers. It notes every request head it receives in `heads`."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.heads: list[bytes] = []
        self.held = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                if not (chunk := conn.recv(65536)):
                    return
                data += chunk
            head = data.partition(b"\r\n")[0]
            self.heads.append(head)
            if b"?hold" in head:
                self.held.set()
                while conn.recv(65536):  # the body, if it came apart from the head; then the proxy's close
                    pass
            elif b"?cut" in head:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                             b'{"jsonrpc":"2.0","id":3,')  # fmt: skip

    def close(self) -> None:
        self.sock.close()


def send_raw(port: int, target: str, head_length: int, body: bytes) -> socket.socket:
    """A client that sends a POST head announcing `head_length` body bytes, then `body`: the open socket."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              f"Content-Length: {head_length}\r\n\r\n".encode() + body)  # fmt: skip
    return s


def test_client_leaving_mid_request_is_client_gone_not_upstream_reset(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """mitmproxy words a peer closing mid-body the same for either side ("HTTP/1 protocol error: peer
    closed connection without sending complete message body"): a client that hangs up mid-request
    is the client's doing and must not be blamed on the server, which never saw the request; an
    upstream cutting its response body stays `upstream-reset`."""
    from analyzer.pipeline import analyze

    upstream = RawUpstream()
    try:
        capdir = tmp_path / "caps"
        cli, listen = record_http(procs, f"http://127.0.0.1:{upstream.port}/mcp", capdir, clean_env)
        port = int(listen.rsplit(":", 1)[1].split("/")[0])
        # the client announces 1000 body bytes, sends 46 and hangs up
        body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
        with send_raw(port, "/mcp?abort", 1000, body) as s:
            time.sleep(0.3)
        # the client sends its whole request, then hangs up while the server is still on it
        call = b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
        with send_raw(port, "/mcp?hold", len(call), call):
            assert upstream.held.wait(30)
        # the upstream closes before its announced 1000 bytes of body
        with send_raw(port, "/mcp?cut", len(call), call) as s:
            while s.recv(65536):
                pass
        time.sleep(0.3)
        assert cli.stop(signal.SIGTERM) == 0
    finally:
        upstream.close()
    assert [h.split()[1] for h in upstream.heads] == [b"/mcp?hold", b"/mcp?cut"]  # never the aborted one
    records = read_capture(capdir)
    check_flow_order(records)
    errors = {f[0]["url"].rsplit("?", 1)[1]: f[-1] for f in by_flow(records).values()}
    got = {case: (e["type"], e["kind"], e["phase"]) for case, e in errors.items()}
    assert got == {
        "abort": (fmt.HTTP_ERROR, "client-gone", "request"),
        "hold": (fmt.HTTP_ERROR, "client-gone", "request"),
        "cut": (fmt.HTTP_ERROR, "upstream-reset", "response"),
    }, errors
    assert "peer closed connection" in errors["abort"]["error"] and "peer closed" in errors["cut"]["error"]
    # only the upstream's failure is the server's: one failed exchange, not two
    (unreachable,) = [f for f in analyze([capdir]).findings if f.rule == "upstream-unreachable"]
    assert unreachable.message.startswith("1 exchange(s) failed"), unreachable.message
    assert "upstream-reset ×1" in unreachable.message, unreachable.message


def test_many_concurrent_clients_no_cross_talk(procs: list[Proc], clean_env: dict[str, str], tmp_path: Path) -> None:
    port = start_server(procs, clean_env, sys.executable, "--stateless")
    capdir = tmp_path / "caps"
    proxy = start_mitmdump(procs, clean_env, port, capdir)
    url = f"http://127.0.0.1:{proxy.port}/mcp"  # type: ignore[attr-defined]

    async def one(i: int) -> str:
        async with Client(url, mode="auto") as client:
            return (await client.call_tool("echo", {"text": f"client-{i}"})).content[0].text

    async def many() -> list[str]:
        return await asyncio.gather(*(one(i) for i in range(16)))

    assert asyncio.run(many()) == [f"client-{i}" for i in range(16)]
    assert proxy.stop(signal.SIGINT) == 0
    records = read_capture(capdir)
    check_flow_order(records)
    echoes = 0
    for f in by_flow(records).values():
        req = request_json(f) or {}
        if req.get("params", {}).get("name") == "echo":
            echoes += 1
            (answer,) = messages(f)
            assert answer["id"] == req["id"]
            assert answer["result"]["content"][0]["text"] == req["params"]["arguments"]["text"]
    assert echoes == 16


def test_http2_client_through_reverse_tls(procs: list[Proc], clean_env: dict[str, str], tmp_path: Path) -> None:
    import httpx2

    port = start_server(procs, clean_env, sys.executable, "--stateless", "--slow", "0.2")
    capdir = tmp_path / "caps"
    proxy = start_mitmdump(procs, clean_env, port, capdir)
    # the listener speaks TLS when the client starts a handshake; ALPN offers h2
    base = f"https://127.0.0.1:{proxy.port}/mcp"  # type: ignore[attr-defined]
    headers = {**MODERN_HEADERS, "mcp-method": "tools/call", "mcp-name": "slow"}

    async def calls() -> list[str]:
        async with httpx2.AsyncClient(http2=True, verify=False, timeout=30) as http:

            async def one(i: int) -> str:
                r = await http.post(base, content=slow_call(i), headers=headers)
                assert r.http_version == "HTTP/2"
                return r.text

            return await asyncio.gather(*(one(i) for i in range(4)))

    bodies = asyncio.run(calls())
    assert all('"text":"done"' in b for b in bodies)
    assert proxy.stop(signal.SIGINT) == 0
    records = read_capture(capdir)
    check_flow_order(records)
    flows = list(by_flow(records).values())
    assert len(flows) == 4
    assert len({f[0]["conn"] for f in flows}) == 1  # four streams multiplexed on one client connection
    for f in flows:
        assert f[0]["http_version"] == "HTTP/2.0" and f[0]["sni"] is None
        req_id = request_json(f)["id"]
        assert [m.get("id") for m in messages(f)] == [None, req_id]  # progress, then its own result
        assert f[-1]["how"] == "clean"


@pytest.mark.legacy_peer
def test_round_robin_two_eras_peer_per_flow(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path, legacy_py: Path
) -> None:
    import httpx2

    modern = start_server(procs, clean_env, sys.executable, "--stateless", "--name", "modern-node")
    legacy = start_server(procs, clean_env, legacy_py, "--stateless", "--name", "legacy-node")
    capdir = tmp_path / "caps"
    fleet = f"rr_upstreams=127.0.0.1:{modern},127.0.0.1:{legacy}"
    proxy = start_mitmdump(procs, clean_env, modern, capdir, "-s", str(BALANCER), "--set", fleet)
    url = f"http://127.0.0.1:{proxy.port}/mcp"  # type: ignore[attr-defined]
    probe = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}})
    headers = {**MODERN_HEADERS, "mcp-method": "server/discover"}
    with httpx2.Client(timeout=30) as http:
        statuses = [http.post(url, content=probe, headers=headers).status_code for _ in range(4)]
    assert statuses == [200, 400, 200, 400]
    assert proxy.stop(signal.SIGINT) == 0

    records = read_capture(capdir)
    check_flow_order(records)
    answers = [(r["peer"], r["status"]) for r in records if r["type"] == fmt.HTTP_RESPONSE]
    m, lg = f"127.0.0.1:{modern}", f"127.0.0.1:{legacy}"
    assert answers == [(m, 200), (lg, 400), (m, 200), (lg, 400)]
    # one logical server key for the whole balanced fleet
    assert {r["server"] for r in records if "flow" in r} == {f"http://127.0.0.1:{modern}/mcp"}
    # the legacy node's identity is in its 400 body; the modern node's in result _meta serverInfo
    bodies = [orjson.loads(r["raw"]) for r in records if r["type"] == fmt.HTTP_RESPONSE]
    assert bodies[0]["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "modern-node"
    assert bodies[1]["error"]["code"] == -32600



def test_proxy_idle_timeout_is_recorded_as_timeout(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """mitmproxy cuts connections idle for `tcp_timeout` and calls it "Client disconnected."."""
    import httpx2

    port = start_server(procs, clean_env, sys.executable, "--slow", "5")
    capdir = tmp_path / "caps"
    proxy = start_mitmdump(procs, clean_env, port, capdir, "--set", "tcp_timeout=1")
    url = f"http://127.0.0.1:{proxy.port}/mcp"  # type: ignore[attr-defined]
    headers = {**MODERN_HEADERS, "mcp-method": "tools/call", "mcp-name": "slow"}
    with (
        httpx2.Client(timeout=30) as http,
        http.stream("POST", url, content=slow_call(1), headers=headers) as resp,
        pytest.raises(httpx2.HTTPError),
    ):
        for _ in resp.iter_raw():
            pass
    assert proxy.stop(signal.SIGINT) == 0
    (flow,) = by_flow(read_capture(capdir)).values()
    assert [r["type"] for r in flow] == ["http.request", "http.response", "sse.event", "sse.end", "http.error"]
    assert flow[-2]["how"] == "error"
    assert flow[-1]["kind"] == "timeout" and flow[-1]["idle_s"] >= 0.75, flow[-1]
