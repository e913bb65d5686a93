"""What the HTTP recorder costs: requests/s through mitmdump with the addon vs plain mitmdump, and
first-SSE-event latency through the recording proxy vs direct.

All sides run in the same run against the same tiny asyncio upstream (a separate process), with
batches interleaved (plain, addon, plain, addon …) so machine load hits both alike; medians.

    python -m bench.bench_addon [--quick] [--json]

Targets: the addon adds ≤ 15% to mitmproxy's own per-flow cost (1/rps), and the first SSE event
arrives within 10 ms of when it arrives without the proxy.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Final

import orjson

from bench._standalone import module_main

ROOT: Final = Path(__file__).resolve().parent.parent
BIN: Final = Path(sys.executable).parent
RECORDER: Final = ROOT / "addon" / "http_recorder.py"

BODY: Final = orjson.dumps(
    {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "add",
            "arguments": {"a": 1, "b": 2},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
)

UPSTREAM: Final = r'''
import asyncio, sys
RESULT = (b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"3"}],'
          b'"isError":false,"resultType":"complete"}}')
JSON = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nserver: bench\r\ncontent-length: "
        + str(len(RESULT)).encode() + b"\r\n\r\n" + RESULT)
EVENT = b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\r\n\r\n'
LAST = b'event: message\r\ndata: ' + RESULT + b'\r\n\r\n'
def chunk(b): return b"%x\r\n" % len(b) + b + b"\r\n"
async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            if head.startswith(b"POST /sse"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n" + chunk(EVENT))
                await writer.drain()
                await asyncio.sleep(0.2)
                writer.write(chunk(LAST) + b"0\r\n\r\n")
            else:
                writer.write(JSON)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=512)
    print("PORT", server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
'''


class _Child:
    def __init__(self, argv: list[str], pattern: str) -> None:
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
        self.lines: list[str] = []
        rx = re.compile(pattern)
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            line = raw.decode("utf-8", "replace")
            self.lines.append(line)
            if m := rx.search(line):
                self.port = int(m.group(1))
                break
        else:
            raise RuntimeError(f"{argv[0]} did not start:\n{''.join(self.lines)}")
        # keep draining so a chatty child never blocks on a full pipe
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.popen.stdout is not None
        for _ in self.popen.stdout:
            pass

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def _mitmdump(upstream: int, capdir: Path | None, confdir: Path) -> _Child:
    argv = [
        str(BIN / "mitmdump"), "--mode", f"reverse:http://127.0.0.1:{upstream}",
        "--listen-host", "127.0.0.1", "--listen-port", "0", "--flow-detail", "0",
        "--set", f"confdir={confdir}", "--set", "termlog_verbosity=info",
    ]  # fmt: skip
    if capdir is not None:
        argv += ["-s", str(RECORDER), "--set", f"erascope_dir={capdir}"]
    return _Child(argv, r"listening at 127\.0\.0\.1:(\d+)")


async def _load(port: int, requests: int, conns: int) -> float:
    """Requests per second over `conns` keep-alive connections, each sending one request at a time."""
    req = (
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n"
        b"mcp-method: tools/call\r\nmcp-name: add\r\ncontent-length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
    )
    per_conn = requests // conns

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(per_conn):
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length: *(\d+)", head)
            assert m, head
            await reader.readexactly(int(m.group(1)))
        writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conns)))
    return per_conn * conns / (time.perf_counter() - t0)


async def _first_event_ms(port: int) -> float:
    """Milliseconds from sending a request to the first SSE event's last byte arriving."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    req = (
        b"POST /sse HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"accept: text/event-stream\r\ncontent-length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
    )
    t0 = time.perf_counter()
    writer.write(req)
    buf = b""
    while b"\r\n\r\n" not in buf.partition(b"\r\n\r\n")[2]:  # past the headers, up to the event's blank line
        data = await reader.read(65536)
        if not data:
            raise RuntimeError("stream ended before the first event")
        buf += data
    elapsed = (time.perf_counter() - t0) * 1000
    writer.close()
    return elapsed


def tool_call_flows(n: int, answer: int = 0) -> list[Any]:
    """`n` mitmproxy test flows, each one `tools/call` POST and its JSON answer, whose text result is
    `answer` bytes long (0: the one character `3`)."""
    from mitmproxy import http
    from mitmproxy.test import tflow, tutils

    req_headers = http.Headers(
        [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
         (b"accept", b"application/json, text/event-stream"), (b"mcp-protocol-version", b"2026-07-28"),
         (b"mcp-method", b"tools/call"), (b"mcp-name", b"add"), (b"content-length", str(len(BODY)).encode())]
    )  # fmt: skip
    resp_headers = http.Headers([(b"content-type", b"application/json"), (b"server", b"bench")])
    text = b"x" * answer if answer else b"3"
    result = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"%b"}],"resultType":"complete"}}'
    result %= text
    flows = []
    for _ in range(n):
        f = tflow.tflow(req=tutils.treq(method=b"POST", path=b"/mcp", host="127.0.0.1", port=8000,
                                        headers=req_headers.copy(), content=BODY))  # fmt: skip
        f.response = tutils.tresp(headers=resp_headers.copy(), content=result)
        flows.append(f)
    return flows


def drive_hooks(addon: Any, flows: list[Any]) -> None:
    """Run the recorder's hooks over `flows` as mitmproxy would, then wait for its writer to catch up."""
    for f in flows:
        addon.requestheaders(f)
        addon.request(f)
        addon.responseheaders(f)
        addon.response(f)
    assert addon.writer is not None and addon.writer.flush(60)


def _hook_cost_us(flows: int, capdir: Path) -> float:
    """Microseconds per flow the recorder's hooks take in-process (request, response headers,
    response), the capture writer's thread included (the clock stops when it has written all)."""
    import os

    from mitmproxy.test import taddons

    from addon.http_recorder import HttpRecorder

    os.environ.setdefault("ERASCOPE_REDACT_KEY", "bench")
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(capdir))
        batch = tool_call_flows(flows)
        t0 = time.perf_counter()
        drive_hooks(addon, batch)
        elapsed = time.perf_counter() - t0
        addon.done()
    return elapsed / flows * 1e6


def run(quick: bool = False) -> dict[str, Any]:
    """Measure the recorder against plain mitmdump (rps) and direct (first SSE event); numbers and targets."""
    runs = 6 if quick else 16
    requests = 300 if quick else 800
    conns = 8
    sse_samples = 5 if quick else 15
    tmp = Path(tempfile.mkdtemp(prefix="erascope-bench-addon-"))
    children: list[_Child] = []
    try:
        upstream = _Child([sys.executable, "-c", UPSTREAM], r"^PORT (\d+)")
        children.append(upstream)
        plain = _mitmdump(upstream.port, None, tmp / "conf")
        children.append(plain)
        rec = _mitmdump(upstream.port, tmp / "caps", tmp / "conf")
        children.append(rec)

        async def measure() -> dict[str, list[float]]:
            out: dict[str, list[float]] = {"direct": [], "plain": [], "addon": [], "sse_direct": [], "sse_proxy": []}
            for port in (upstream.port, plain.port, rec.port):  # warm-up: connections, imports, first flows
                await _load(port, 80, conns)
            for i in range(runs):
                # short batches in alternating order (plain/addon, addon/plain): drift in the load
                # other processes put on the machine then hits both sides of each pair alike
                out["direct"].append(await _load(upstream.port, requests, conns))
                order = [("plain", plain.port), ("addon", rec.port)]
                for name, port in order if i % 2 == 0 else reversed(order):
                    out[name].append(await _load(port, requests, conns))
            for _ in range(sse_samples):
                out["sse_direct"].append(await _first_event_ms(upstream.port))
                out["sse_proxy"].append(await _first_event_ms(rec.port))
            return out

        m = asyncio.run(measure())
        hook_us = statistics.median(_hook_cost_us(500 if quick else 2000, tmp / f"hooks{i}") for i in range(3))
        for child in reversed(children):
            child.stop()
        captured = sum(p.stat().st_size for p in (tmp / "caps").glob("*.jsonl"))
        lines = sum(p.read_bytes().count(b"\n") for p in (tmp / "caps").glob("*.jsonl"))
    finally:
        for child in children:
            child.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    plain_rps, addon_rps = statistics.median(m["plain"]), statistics.median(m["addon"])
    plain_us, addon_us = 1e6 / plain_rps, 1e6 / addon_rps
    # per pair, then the median: one noisy batch cannot swing the result
    pair_cost = [(p / a - 1) * 100 for p, a in zip(m["plain"], m["addon"], strict=True)]
    sse_direct, sse_proxy = statistics.median(m["sse_direct"]), statistics.median(m["sse_proxy"])
    result: dict[str, Any] = {
        "name": "http-addon",
        "quick": quick,
        "runs": runs,
        "requests_per_run": requests,
        "connections": conns,
        "rps_direct": round(statistics.median(m["direct"])),
        "rps_plain_mitmdump": round(plain_rps),
        "rps_with_addon": round(addon_rps),
        "flow_us_plain": round(plain_us, 1),
        "flow_us_addon": round(addon_us, 1),
        "addon_cost_pct": round(statistics.median(pair_cost), 1),
        "addon_cost_pct_pairs": [round(c, 1) for c in sorted(pair_cost)],
        "hooks_us_per_flow": round(hook_us, 1),
        "hooks_pct_of_plain_flow": round(hook_us / plain_us * 100, 1),
        "sse_first_event_ms_direct": round(sse_direct, 2),
        "sse_first_event_ms_proxy": round(sse_proxy, 2),
        "sse_added_ms": round(sse_proxy - sse_direct, 2),
        "capture_bytes": captured,
        "capture_records": lines,
    }
    result["targets"] = {
        "addon_cost_pct<=15": result["addon_cost_pct"] <= 15,
        "sse_added_ms<=10": result["sse_added_ms"] <= 10,
    }
    return result


def describe(r: dict[str, Any]) -> list[str]:
    return [
        f"HTTP recorder (medians of {r['runs']} interleaved runs, {r['requests_per_run']} requests over"
        f" {r['connections']} connections, same machine, same run)",
        f"  requests/s: direct {r['rps_direct']}, plain mitmdump {r['rps_plain_mitmdump']},"
        f" mitmdump + addon {r['rps_with_addon']}",
        f"  per flow: plain {r['flow_us_plain']} µs, with addon {r['flow_us_addon']} µs"
        f" -> addon costs {r['addon_cost_pct']}% of mitmproxy's own per-flow cost (median of pairs;"
        f" pairs ranged {r['addon_cost_pct_pairs'][0]}% .. {r['addon_cost_pct_pairs'][-1]}%)",
        f"  in-process hooks + writer: {r['hooks_us_per_flow']} µs per flow"
        f" = {r['hooks_pct_of_plain_flow']}% of a plain mitmdump flow (steadier than the rps pairs)",
        f"  first SSE event: direct {r['sse_first_event_ms_direct']} ms, through the recording proxy"
        f" {r['sse_first_event_ms_proxy']} ms (+{r['sse_added_ms']} ms)",
        f"  capture: {r['capture_records']} records, {r['capture_bytes']} bytes",
    ]


def main() -> None:
    module_main(__doc__.splitlines()[0], run, describe)


if __name__ == "__main__":
    main()
