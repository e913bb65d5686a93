"""What the recorders' live counters (addon/metrics.py) cost the capture writer.

The counters are kept on the writer thread from every record it takes, so their cost shows as writer
throughput: the same stream of records is written by a `CaptureWriter` with and without
`LiveStats.observe_all`, interleaved run for run, and the ratio of the two is reported (fastest runs
and medians). Two streams: stdio frames (small JSON-RPC requests and answers, a probe now and then),
and HTTP flows of a Streamable HTTP session (a POST with the headers a client sends, answered by a
JSON body or, every other flow, by an event stream of one event; a probe now and then). `--instructions`
also counts a probe storm's flows (a probe before every tool call) and the requests to a hung upstream
(none answered). Measured in
CPU time of the process (the producing thread and the writer thread), which a shared, loaded machine
blurs less than wall time.

    python -m bench.bench_counters [--quick]
    python -m bench.bench_counters --instructions      # needs valgrind; about 2 minutes

Target: the writer with counters within 10 % of the CPU of the writer without (fastest runs); the relay
threads and the proxy's event loop do none of this work. CPU time of two threads handing records over
moves by a third between runs of one variant on a shared machine (the fastest run of nine included),
which hides a 10 % difference: `--instructions` counts instead (valgrind's cachegrind, every thread of a
child process that writes the stream: its instructions less those of a child that only builds it), the
same figure within about 1 % from run to run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from addon import format as fmt
from addon.metrics import LiveStats
from addon.writer import CaptureWriter
from bench._standalone import targets_line
from bench.bench_chain import _cachegrind, _instructions_in

ROOT = Path(__file__).resolve().parent.parent

_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def _records(n: int) -> list[dict[str, Any]]:
    params = {"name": "add", "arguments": {"a": 2}, "_meta": _META}
    call = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).decode()
    answer = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "5"}]}}).decode()
    probe = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": _META}}).decode()
    out = []
    for i in range(n):
        raw = probe if i % 200 == 0 else (call if i % 2 == 0 else answer)
        direction = fmt.C2S if i % 2 == 0 else fmt.S2C
        out.append({fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c", fmt.F_DIR: direction, fmt.F_RAW: raw, fmt.F_LEN: len(raw)})
    return out


def _http_records(n: int, probe_every: int = 100) -> list[dict[str, Any]]:
    params = {"name": "add", "arguments": {"a": 2}, "_meta": _META}
    call = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).decode()
    answer = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "5"}]}}).decode()
    probe = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": _META}}).decode()
    session = ["mcp-session-id", "hmac:0123456789abcdef"]
    headers = [
        ["host", "127.0.0.1:8000"],
        ["user-agent", "python-httpx/0.28.1"],
        ["accept", "application/json, text/event-stream"],
        ["content-type", "application/json"],
        ["mcp-protocol-version", "2026-07-28"],
        ["mcp-method", "tools/call"],
        session,
        ["content-length", str(len(call))],
    ]
    out: list[dict[str, Any]] = []
    flow = 0
    while len(out) < n:
        flow += 1
        f = {"conn": "c", "flow": f"f{flow}"}
        raw = probe if flow % probe_every == 0 else call
        out.append({fmt.F_TYPE: fmt.HTTP_REQUEST, **f, "method": "POST", "url": "http://127.0.0.1:8000/mcp",
                    "headers": headers, fmt.F_RAW: raw})  # fmt: skip
        if flow % 2:
            body = {fmt.F_RAW: answer, "headers": [["content-type", "application/json"], session]}
            out.append({fmt.F_TYPE: fmt.HTTP_RESPONSE, **f, "status": 200, "streamed": False, **body})
        else:
            sse = [["content-type", "text/event-stream"], session]
            out.append({fmt.F_TYPE: fmt.HTTP_RESPONSE, **f, "status": 200, "streamed": True, "headers": sse})
            out.append({fmt.F_TYPE: fmt.SSE_EVENT, **f, "index": 0, "sse_event": "message", fmt.F_RAW: answer})
            out.append({fmt.F_TYPE: fmt.SSE_END, **f, "how": "clean", "events": 1, "incomplete": False})
    return out[:n]


def _storm_records(n: int) -> list[dict[str, Any]]:
    """`_http_records` of a client in a probe storm: a probe before every tool call (every other flow)."""
    return _http_records(n, probe_every=2)


def _hung_records(n: int) -> list[dict[str, Any]]:
    """`_http_records`' requests alone: a hung upstream that answers none, while the proxy takes more
    (the counters' table of open flows stays full)."""
    return [r for r in _http_records(3 * n) if r[fmt.F_TYPE] == fmt.HTTP_REQUEST][:n]


def _write(records: list[dict[str, Any]], counted: bool, transport: str = fmt.STDIO) -> float:
    out = Path(tempfile.mkdtemp(prefix="erascope-bench-"))
    try:
        w = CaptureWriter(
            out, transport=transport, server="bench", observer=LiveStats().observe_all if counted else None
        )
        start = time.process_time()
        for rec in records:
            w.write(dict(rec))
        w.close()
        return time.process_time() - start
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _compare(records: list[dict[str, Any]], runs: int, transport: str) -> dict[str, Any]:
    plain: list[float] = []
    counted: list[float] = []
    for _ in range(runs):
        plain.append(_write(records, False, transport))
        counted.append(_write(records, True, transport))
    n = len(records)
    return {
        "us_per_record_plain": round(min(plain) / n * 1e6, 2),
        "us_per_record_counted": round(min(counted) / n * 1e6, 2),
        "ratio_best": round(min(counted) / min(plain), 3),
        "ratio_median": round(statistics.median(counted) / statistics.median(plain), 3),
    }


def run(quick: bool = False) -> dict[str, Any]:
    """Interleaved runs of both variants, for each stream; CPU seconds per record and the ratios."""
    n, runs = (20_000, 5) if quick else (100_000, 9)
    stdio = _compare(_records(n), runs, fmt.STDIO)
    http = _compare(_http_records(n), runs, fmt.HTTP)
    return {
        "records": n,
        "runs": runs,
        **stdio,
        "http": http,
        "targets": {
            "counters within 10 % (fastest runs)": stdio["ratio_best"] <= 1.10,
            "HTTP: counters within 10 % (fastest runs)": http["ratio_best"] <= 1.10,
        },
    }


def describe(r: dict[str, Any]) -> list[str]:
    """Lines for a person."""
    lines = [f"live counters: {r['records']} records x {r['runs']} runs"]
    for name, c in (("stdio frames", r), ("HTTP flows", r["http"])):
        lines += [
            f"  {name}: {c['us_per_record_plain']} us/record without, {c['us_per_record_counted']} us/record with"
            f" counters; with/without {c['ratio_best']}x (fastest runs), {c['ratio_median']}x (medians)",
        ]
    return lines


STREAMS = {
    "stdio": (_records, fmt.STDIO),
    "http": (_http_records, fmt.HTTP),
    "http-storm": (_storm_records, fmt.HTTP),
    "http-hung": (_hung_records, fmt.HTTP),
}


def _child(stream: str, variant: str, n: int) -> None:
    """Build `n` records of `stream`, then write them (`variant` plain or counted) or not (`none`)."""
    make, transport = STREAMS[stream]
    records = make(n)
    if variant != "none":
        _write(records, variant == "counted", transport)


def run_instructions(n: int = 100_000) -> dict[str, Any]:
    """Instructions per record of the writer without and with the counters, for each stream."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("--instructions needs valgrind (e.g. `apt install valgrind`)")
    tmp = Path(tempfile.mkdtemp(prefix="erascope-bench-counters-"))
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dicts' layout in every child
    result: dict[str, Any] = {"records": n}
    try:
        for stream in STREAMS:
            counts = {}
            for variant in ("none", "plain", "counted"):
                log = tmp / f"{stream}-{variant}.log"
                argv = [sys.executable, "-m", "bench.bench_counters", "--child", stream, variant, str(n)]
                subprocess.run([*_cachegrind(log), *argv], check=True, cwd=ROOT, env=env)
                counts[variant] = _instructions_in(log)
            plain = (counts["plain"] - counts["none"]) / n
            counted = (counts["counted"] - counts["none"]) / n
            result[stream] = {"plain": round(plain), "counted": round(counted), "ratio": round(counted / plain, 3)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["targets"] = {f"{stream}: counters within 10 % (instructions)": result[stream]["ratio"] <= 1.10
                         for stream in STREAMS}  # fmt: skip
    return result


def describe_instructions(r: dict[str, Any]) -> list[str]:
    lines = [f"live counters in instructions (cachegrind, every thread; {r['records']} records)"]
    for stream in STREAMS:
        c = r[stream]
        lines.append(f"  {stream}: {c['plain']} per record without, {c['counted']} with; {c['ratio']}x")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and runs")
    parser.add_argument("--json", action="store_true", help="print the result as JSON only")
    parser.add_argument("--instructions", action="store_true", help="count instructions (valgrind) instead")
    parser.add_argument("--child", nargs=3, metavar=("STREAM", "VARIANT", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        stream, variant, n = args.child
        _child(stream, variant, int(n))
        return
    result = run_instructions() if args.instructions else run(quick=args.quick)
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    lines = describe_instructions(result) if args.instructions else describe(result)
    sys.stdout.write("\n".join([*lines, targets_line(result)]) + "\n")


if __name__ == "__main__":
    main()
