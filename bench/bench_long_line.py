"""What one long line in a capture costs the reading: linear in the line's length.

A capture holding one answer of L bytes (a tool's huge result, or a hostile line) is read in pieces:
`analyze` reads a `.jsonl.gz` through `analyzer.sources.pieces` and a plain `.jsonl` through
`analyzer.load._pieces`, `watch` reads what a file grew by (`Watcher._read_new`, its reads made
8 MiB here like the others' pieces: at its own 64 MiB a line of these sizes spans too few of them
to tell linear from quadratic); the line spans many reads until its newline comes. The CPU time
of each reading at L and at 4L is measured in the same run (fastest of a few runs each), and the
ratio reported: about 4 when the cost is linear, about 16 when every read copies the line so far.

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

from analyzer import load, watch
from analyzer.sources import open_stream, pieces
from bench._standalone import module_main

_PIECE = 8 << 20
"""The piece size `analyzer.load` reads compressed files in."""


def _capture(path: Path, size: int) -> None:
    header = {"type": "header", "format": "erascope/1", "transport": "stdio", "server": "x", "seq": 0}
    raw = '{"jsonrpc":"2.0","id":1,"result":{"t":"' + "a" * size + '"}}'
    frame = {"type": "frame", "seq": 1, "ts": 1796000000.0, "conn": "c", "dir": "s2c", "raw": raw}
    data = orjson.dumps(header) + b"\n" + orjson.dumps(frame) + b"\n"
    if path.suffix == ".gz":
        with gzip.open(path, "wb", compresslevel=1) as f:
            f.write(data)
    else:
        path.write_bytes(data)


def _compressed(path: Path) -> None:
    with open_stream(str(path)) as f:
        for _ in pieces(f, _PIECE):
            pass


def _plain(path: Path) -> None:
    with open(path, "rb") as f:
        for _ in load._pieces(f, _PIECE):
            pass


def _watched(path: Path) -> None:
    watcher = watch.Watcher([str(path)])
    part = watcher._part_for(str(path))
    assert part is not None
    limit, watch.READ_LIMIT = watch.READ_LIMIT, _PIECE
    try:
        # as two rounds read it: the header line (its newline ends the first read), then the long line
        part.offset = len(watcher._read_new(part))
        assert len(watcher._read_new(part)) > path.stat().st_size - part.offset - 2
    finally:
        watch.READ_LIMIT = limit


_READINGS = {"jsonl.gz": _compressed, "jsonl": _plain, "watch": _watched}


def _cpu(reading: Any, path: Path) -> float:
    started = time.process_time()
    reading(path)
    return time.process_time() - started


def run(quick: bool = False) -> dict[str, Any]:
    size, runs = (25 << 20, 3) if quick else (50 << 20, 5)
    result: dict[str, Any] = {"line_bytes": size, "cpu_s": {}, "ratio": {}, "targets": {}}
    with tempfile.TemporaryDirectory(prefix="erascope-bench-") as tmp:
        for name, reading in _READINGS.items():
            suffix = ".jsonl.gz" if name == "jsonl.gz" else ".jsonl"
            paths = {n: Path(tmp) / f"line{n}{suffix}" for n in (1, 4)}
            for n, path in paths.items():
                if not path.exists():
                    _capture(path, n * size)
            best = {n: min(_cpu(reading, path) for _ in range(runs)) for n, path in paths.items()}
            result["cpu_s"][name] = {"L": best[1], "4L": best[4]}
            result["ratio"][name] = ratio = best[4] / best[1]
            result["targets"][f"{name}<=6"] = ratio <= 6
    return result


def describe(result: dict[str, Any]) -> list[str]:
    mb = result["line_bytes"] >> 20
    lines = [f"one long line, read as analyze and watch read it (CPU, fastest runs), {mb} MiB and {4 * mb} MiB:"]
    for name, cpu in result["cpu_s"].items():
        ratio = result["ratio"][name]
        lines.append(f"  {name:9} {cpu['L']:.3f} s, {cpu['4L']:.3f} s: ratio {ratio:.2f}")
    return lines


def main() -> None:
    module_main(__doc__.splitlines()[0], run, describe)


if __name__ == "__main__":
    main()
