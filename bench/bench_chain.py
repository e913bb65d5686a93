"""What the hash chain costs the recorders: the writer, the HTTP recorder's hooks and the stdio tee,
each with the chain (SHA-256, and HMAC-SHA256 as with `--key`) against the same code without it.

"Without it" is the writer as it was before chains: one `os.write` of the encoded line, no digest,
no `part-end` record (`_unchained`, patched in for the baseline). Variants run interleaved
(A B C A B C …) in the same run, so the figures are ratios on this machine.

    python -m bench.bench_chain [--quick]

Target: every recorder cost with the chain within 5 % of the cost without it (`addon` hook time per
flow, tee round trip per small message and 1 MB throughput; the writer's own CPU per record is
reported for scale: it runs on the writer thread, off the relay path).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench._standalone import module_main

KEY = b"bench-chain-key-0123456789abcdef"
PATCH_UNCHAINED = """
import os
from addon import writer

def _write_line(self, line):
    n = os.write(self._fd, line)
    if n != len(line):
        raise OSError(f"short write ({n} of {len(line)} bytes)")
    self._part_bytes += n
    self._part_records += 1

writer.CaptureWriter._write_sealed = _write_line
writer.CaptureWriter._end_part = lambda self, reason, next_name: None
"""
"""The writer without its chain: what it did before chains."""
TEE = f"""
import sys
from pathlib import Path
if sys.argv[2] == "off":
    exec({PATCH_UNCHAINED!r})
from addon.stdio_tee import run_tee
key = {KEY!r} if sys.argv[2] == "hmac" else None
sys.exit(run_tee(sys.argv[4:], out_dir=Path(sys.argv[1]), linger=0, chain_key=key, stderr=sys.stderr.buffer))
"""
"""The tee as `erascope record stdio --linger 0` runs it, as one of the variants (argv: out, variant, --, cmd)."""
VARIANTS = ("off", "sha256", "hmac")


@contextmanager
def _variant(name: str) -> Iterator[None]:
    """The writer as `name` in this process: the unchained baseline patched in for "off"."""
    from addon import writer

    saved = writer.CaptureWriter._write_sealed, writer.CaptureWriter._end_part
    if name == "off":
        exec(PATCH_UNCHAINED, {})
    try:
        yield
    finally:
        writer.CaptureWriter._write_sealed, writer.CaptureWriter._end_part = saved


def _writer_cpu_ns(variant: str, size: int, records: int, out: Path) -> float:
    """CPU (all threads) per record to stamp, encode, chain and write `records` frames of `size` bytes."""
    from addon import format as fmt
    from addon.writer import CaptureWriter

    payload = fmt.payload_fields(b'{"jsonrpc":"2.0","id":1,"result":"' + b"x" * max(0, size - 36) + b'"}')
    with _variant(variant):
        t0 = time.process_time_ns()
        w = CaptureWriter(out, transport=fmt.STDIO, server="bench", chain_key=KEY if variant == "hmac" else None)
        for _ in range(records):
            w.write({fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c", fmt.F_DIR: fmt.S2C, **payload, fmt.F_NL: True})
        w.close()
        elapsed = time.process_time_ns() - t0
    for p in w.paths:
        p.unlink()
    return elapsed / records


def _hook_us(variant: str, flows: int, out: Path) -> float:
    from bench.bench_addon import _hook_cost_us

    if variant == "hmac":
        (out / "chain.key").write_bytes(KEY)
    with _variant(variant), _addon_key(out / "chain.key" if variant == "hmac" else None):
        return _hook_cost_us(flows, out)


@contextmanager
def _addon_key(key: Path | None) -> Iterator[None]:
    """The HTTP recorder configured with `erascope_chain_key` as `record http --key` does."""
    from mitmproxy.test import taddons

    if key is None:
        yield
        return
    original = taddons.context.configure

    def configure(self: Any, addon: Any, **kwargs: Any) -> None:
        original(self, addon, **kwargs, erascope_chain_key=str(key))

    taddons.context.configure = configure  # type: ignore[method-assign]
    try:
        yield
    finally:
        taddons.context.configure = original  # type: ignore[method-assign]


def _median_and_best(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), min(values)


def run(quick: bool = False) -> dict[str, Any]:
    """Measure each recorder with and without the chain; numbers, ratios and the 5 % target."""
    from bench.bench_tee import ECHO, _round_trips, _throughput

    runs = 3 if quick else 7
    records = 5_000 if quick else 20_000
    flows = 1_000 if quick else 3_000
    messages = 300 if quick else 1_500
    big = 8 if quick else 32
    sizes = (250, 4_096, 65_536)
    tmp = Path(tempfile.mkdtemp(prefix="erascope-bench-chain-"))
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    echo = [sys.executable, "-c", ECHO]
    try:
        for _ in range(runs):
            for variant in VARIANTS:
                out = tmp / variant
                out.mkdir(exist_ok=True)
                for size in sizes:
                    n = records if size < 10_000 else records // 10
                    add(f"writer_{size}_{variant}", _writer_cpu_ns(variant, size, n, out))
                add(f"hook_{variant}", _hook_us(variant, flows, out))
                tee = [sys.executable, "-c", TEE, str(out), variant, "--", *echo]
                add(f"rt_{variant}", _round_trips(tee, messages))
                add(f"tp_{variant}", _throughput(tee, big))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result: dict[str, Any] = {"name": "chain", "quick": quick, "runs": runs, "load_avg": os.getloadavg()[0]}
    for key, values in samples.items():
        med, best = _median_and_best(values)
        result[key] = round(med, 2)
        result[key + "_best"] = round(max(values) if key.startswith("tp_") else best, 2)
    for variant in ("sha256", "hmac"):
        for what in ("hook", "rt"):
            result[f"{what}_ratio_{variant}"] = round(result[f"{what}_{variant}"] / result[f"{what}_off"], 3)
            result[f"{what}_ratio_{variant}_best"] = round(
                result[f"{what}_{variant}_best"] / result[f"{what}_off_best"], 3
            )
        result[f"tp_ratio_{variant}"] = round(result["tp_off"] / result[f"tp_{variant}"], 3)
        result[f"tp_ratio_{variant}_best"] = round(result["tp_off_best"] / result[f"tp_{variant}_best"], 3)
        for size in sizes:
            result[f"writer_{size}_ratio_{variant}"] = round(
                result[f"writer_{size}_{variant}"] / result[f"writer_{size}_off"], 3
            )
    result["targets"] = {
        f"{what}_{variant}<=1.05": min(result[f"{what}_ratio_{variant}"], result[f"{what}_ratio_{variant}_best"])
        <= 1.05
        for variant in ("sha256", "hmac")
        for what in ("hook", "rt", "tp")
    }
    return result


def describe(r: dict[str, Any]) -> list[str]:
    rows = [
        f"hash chain cost (median of {r['runs']} interleaved runs; best runs in brackets; load average"
        f" {r['load_avg']:.2f})"
    ]
    for label, key, unit in (
        ("HTTP recorder hooks per flow", "hook", "µs"),
        ("stdio tee round trip, small message", "rt", "µs"),
        ("stdio tee 1 MB messages", "tp", "MB/s"),
    ):
        rows.append(
            f"  {label}: off {r[f'{key}_off']} {unit}, sha256 {r[f'{key}_sha256']} {unit}"
            f" ({r[f'{key}_ratio_sha256']}x [{r[f'{key}_ratio_sha256_best']}x]), hmac {r[f'{key}_hmac']} {unit}"
            f" ({r[f'{key}_ratio_hmac']}x [{r[f'{key}_ratio_hmac_best']}x])"
        )
    for size in (250, 4_096, 65_536):
        rows.append(
            f"  writer CPU per {size} B record: off {r[f'writer_{size}_off'] / 1000:.2f} µs,"
            f" sha256 {r[f'writer_{size}_sha256'] / 1000:.2f} µs ({r[f'writer_{size}_ratio_sha256']}x),"
            f" hmac {r[f'writer_{size}_hmac'] / 1000:.2f} µs ({r[f'writer_{size}_ratio_hmac']}x)"
        )
    return rows


def main() -> None:
    module_main(__doc__.splitlines()[0], run, describe)


if __name__ == "__main__":
    main()
