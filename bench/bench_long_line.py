"""What one long line in a compressed capture costs the reading: linear in the line's length.

A `.jsonl.gz` holding one answer of L bytes (a tool's huge result, or a hostile line) is read in
pieces (`analyzer.sources.pieces`); the line spans many of them until its newline comes. The CPU time
of reading it whole at L and at 4L is measured in the same run (fastest of a few runs each), and the
ratio reported: about 4 when the cost is linear, about 16 when every piece copies the line so far.

    python -m bench.bench_long_line [--quick]

Target: time(4L) / time(L) at most 6 (linear, with room for a loaded machine's page faults).
"""

from __future__ import annotations

import gzip
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from analyzer.sources import open_stream, pieces
from bench._standalone import module_main

_PIECE = 8 << 20
"""The piece size `analyzer.load` reads compressed files in."""


def _capture(path: Path, size: int) -> None:
    header = {"type": "header", "format": "erascope/1", "transport": "stdio", "server": "x", "seq": 0}
    raw = '{"jsonrpc":"2.0","id":1,"result":{"t":"' + "a" * size + '"}}'
    frame = {"type": "frame", "seq": 1, "ts": 1796000000.0, "conn": "c", "dir": "s2c", "raw": raw}
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(orjson.dumps(header) + b"\n" + orjson.dumps(frame) + b"\n")


def _read_cpu(path: Path) -> float:
    started = time.process_time()
    with open_stream(str(path)) as f:
        for _ in pieces(f, _PIECE):
            pass
    return time.process_time() - started


def run(quick: bool = False) -> dict[str, Any]:
    size, runs = (25 << 20, 3) if quick else (50 << 20, 5)
    with tempfile.TemporaryDirectory(prefix="erascope-bench-") as tmp:
        paths = {n: Path(tmp) / f"line{n}.jsonl.gz" for n in (1, 4)}
        for n, path in paths.items():
            _capture(path, n * size)
        best = {n: min(_read_cpu(path) for _ in range(runs)) for n, path in paths.items()}
    ratio = best[4] / best[1]
    cpu = {"L": best[1], "4L": best[4]}
    return {"line_bytes": size, "cpu_s": cpu, "ratio": ratio, "targets": {"ratio<=6": ratio <= 6}}


def describe(result: dict[str, Any]) -> list[str]:
    mb = result["line_bytes"] >> 20
    cpu = result["cpu_s"]
    return [
        f"one long line in a .jsonl.gz, read in {_PIECE >> 20} MiB pieces (CPU, fastest runs):",
        f"  {mb} MiB {cpu['L']:.3f} s, {4 * mb} MiB {cpu['4L']:.3f} s: ratio {result['ratio']:.2f}",
    ]


def main() -> None:
    module_main(__doc__.splitlines()[0], run, describe)


if __name__ == "__main__":
    main()
