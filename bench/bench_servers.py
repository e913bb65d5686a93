"""`erascope analyze` as the number of server keys grows: `python -m bench.bench_servers [--quick]`.

One stdio capture per size whose traffic is one probe and its answer per connection, each
connection its own server key: 2,000 and 20,000 keys (`--quick`), also 100,000 otherwise; beside
each, the baseline: the same traffic under one server key. Each is analyzed by the installed
`erascope analyze --format json` as a whole process, three times (one with `--quick`), in turns;
the figures are medians. Targets: linear (the time per key at the largest size at most 1.5× that
at 2,000 keys) and small (the keyed capture within 10× of its baseline at every size: its report
holds a verdict and findings per key, the baseline's one). The verdicts once filtered every frame
once per key: 2.2-2.5 ms a key, 6× the baseline at 2,000 keys and 38× at 20,000.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench._standalone import module_main

ERASCOPE = Path(sys.executable).parent / "erascope"
_PROBE = (
    '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":'
    '{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}'
)
_ANSWER = '{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'


def write_capture(path: Path, keys: int, *, one_key: bool = False) -> None:
    """A capture of `keys` connections, each probed once and answered, each its own server key
    (with `one_key`, all under one)."""
    header = {
        "type": "header", "seq": 0, "ts": 1_800_000_000.0, "mono": 0.0, "server": "s0",
        "format": "erascope/1", "tool": "erascope", "tool_version": "0", "transport": "stdio", "part": 0,
    }  # fmt: skip
    lines = [orjson.dumps(header)]
    seq = 1
    for i in range(keys):
        for direction, raw in (("c2s", _PROBE), ("s2c", _ANSWER)):
            record = {
                "type": "frame", "seq": seq, "ts": 1_800_000_000.0 + seq / 1000, "mono": seq / 1000,
                "conn": f"c{i}", "server": "s0" if one_key else f"s{i}", "dir": direction, "raw": raw,
                "len": len(raw), "nl": True,
            }  # fmt: skip
            lines.append(orjson.dumps(record))
            seq += 1
    path.write_bytes(b"\n".join(lines) + b"\n")


def _analyze(path: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [str(ERASCOPE), "analyze", str(path), "--format", "json", "--quiet"], capture_output=True, check=False
    )
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(f"erascope analyze {path}: exit {done.returncode}: {done.stderr.decode()[-500:]}")
    return took


def run(quick: bool = False) -> dict[str, Any]:
    sizes = [2_000, 20_000] if quick else [2_000, 20_000, 100_000]
    runs = 1 if quick else 3
    keyed: dict[int, float] = {}
    base: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="erascope-bench-servers-") as tmp:
        for keys in sizes:
            many, one = Path(tmp) / f"keys-{keys}.jsonl", Path(tmp) / f"one-{keys}.jsonl"
            write_capture(many, keys)
            write_capture(one, keys, one_key=True)
            times: dict[Path, list[float]] = {many: [], one: []}
            for _ in range(runs):
                for path in (many, one):
                    times[path].append(_analyze(path))
            keyed[keys], base[keys] = statistics.median(times[many]), statistics.median(times[one])
    ratio = {k: keyed[k] / base[k] for k in sizes}
    return {
        "keyed_s": keyed,
        "one_key_s": base,
        "us_per_key": {k: keyed[k] / k * 1e6 for k in sizes},
        "ratio": ratio,
        "targets": {
            "linear (per key, largest size <= 1.5x 2,000 keys)": keyed[sizes[-1]] / sizes[-1]
            <= 1.5 * keyed[sizes[0]] / sizes[0],
            "keyed within 10x of one key": all(r <= 10.0 for r in ratio.values()),
        },
    }


def describe(result: dict[str, Any]) -> list[str]:
    lines = ["erascope analyze, whole process: a server key per connection against one key for all"]
    for keys, s in result["keyed_s"].items():
        lines.append(
            f"  {int(keys):>7,} connections: {s:.2f} s keyed ({result['us_per_key'][keys]:.0f} µs per key),"
            f" {result['one_key_s'][keys]:.2f} s one key: {result['ratio'][keys]:.2f}x"
        )
    return lines


if __name__ == "__main__":
    module_main(__doc__.splitlines()[0], run, describe)
