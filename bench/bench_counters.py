"""What the recorders' live counters (addon/metrics.py) cost the capture writer.

The counters are kept on the writer thread from every record it takes, so their cost shows as writer
throughput: the same stream of stdio frames (small JSON-RPC requests and answers, a probe now and then)
is written by a `CaptureWriter` with and without `LiveStats.observe`, interleaved run for run, and
the ratio of the two is reported (fastest runs and medians). Measured in CPU time of the process
(the producing thread and the writer thread), which a shared, loaded machine blurs less than wall
time.

    python -m bench.bench_counters [--quick]

Target: the writer with counters within 10 % of the CPU of the writer without (fastest runs); the relay
threads and the proxy's event loop do none of this work.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from addon import format as fmt
from addon.metrics import LiveStats
from addon.writer import CaptureWriter
from bench._standalone import module_main

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


def _write(records: list[dict[str, Any]], counted: bool) -> float:
    out = Path(tempfile.mkdtemp(prefix="erascope-bench-"))
    try:
        w = CaptureWriter(
            out, transport=fmt.STDIO, server="bench", observer=LiveStats().observe_all if counted else None
        )
        start = time.process_time()
        for rec in records:
            w.write(dict(rec))
        w.close()
        return time.process_time() - start
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run(quick: bool = False) -> dict[str, Any]:
    """Interleaved runs of both variants; CPU seconds per run and the ratios."""
    n, runs = (20_000, 5) if quick else (100_000, 9)
    records = _records(n)
    plain: list[float] = []
    counted: list[float] = []
    for _ in range(runs):
        plain.append(_write(records, False))
        counted.append(_write(records, True))
    best = min(counted) / min(plain)
    return {
        "records": n,
        "runs": runs,
        "us_per_record_plain": round(min(plain) / n * 1e6, 2),
        "us_per_record_counted": round(min(counted) / n * 1e6, 2),
        "ratio_best": round(best, 3),
        "ratio_median": round(statistics.median(counted) / statistics.median(plain), 3),
        "targets": {"counters within 10 % (fastest runs)": best <= 1.10},
    }


def describe(r: dict[str, Any]) -> list[str]:
    """Lines for a person."""
    return [
        f"live counters: {r['records']} stdio frames x {r['runs']} runs",
        f"  CPU: {r['us_per_record_plain']} us/record without, {r['us_per_record_counted']} us/record with counters",
        f"  with/without: {r['ratio_best']}x (fastest runs), {r['ratio_median']}x (medians)",
    ]


def main() -> None:
    module_main(__doc__.splitlines()[0], run, describe)


if __name__ == "__main__":
    main()
