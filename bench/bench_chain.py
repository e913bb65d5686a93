"""What the hash chain costs the recorders: the HTTP recorder's hooks, the stdio tee and the writer,
each with the chain (SHA-256, and HMAC-SHA256 as with `--key`) against the same code without it.

"Without it" is the writer as it was before chains: one `os.write` per encoded line, no digest,
no `part-end` record (`PATCH_UNCHAINED`, patched in for the baseline). Variants run interleaved
(off sha256 hmac off sha256 hmac …) in the same run. Costs are CPU time (the process's own, all
threads; for the tee, its own threads after start-up), which other work on a shared machine
inflates far less than wall time; the tee's wall-clock round trip is reported beside it.

    python -m bench.bench_chain [--quick]

Target: each recorder's cost with the chain within 5 % of its cost without it (HTTP hooks per flow,
tee per small message and per 1 MB message). The writer's own CPU per record is reported for
scale: it runs on the writer thread, off the relay path.
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
VARIANTS = ("off", "sha256", "hmac")
PATCH_UNCHAINED = """
import os
from addon import writer

def _write_lines(self, lines):
    done = 0
    for line in lines:
        try:
            n = os.write(self._fd, line)
        except OSError as exc:
            return done, str(exc)
        self._part_bytes += n
        if n != len(line):
            return done, f"short write ({n} of {len(line)} bytes)"
        self._part_records += 1
        done += 1
    return done, None

writer.CaptureWriter._write_lines = _write_lines
writer.CaptureWriter._end_part = lambda self, reason, next_name: None
"""
"""The writer without its chain: what it did before chains (one `os.write` per record, unsealed)."""
TEE = f"""
import sys
from pathlib import Path
if sys.argv[2] == "off":
    exec({PATCH_UNCHAINED!r})
from addon.stdio_tee import run_tee
key = {KEY!r} if sys.argv[2] == "hmac" else None
sys.exit(run_tee(sys.argv[4:], out_dir=Path(sys.argv[1]), linger=0, chain_key=key, stderr=sys.stderr.buffer))
"""
"""The tee as `erascope record stdio --linger 0` runs it, as one variant (argv: out, variant, --, cmd)."""


@contextmanager
def _variant(name: str) -> Iterator[None]:
    """The writer as `name` in this process: the unchained baseline patched in for "off"."""
    from addon import writer

    saved = writer.CaptureWriter._write_lines, writer.CaptureWriter._end_part
    if name == "off":
        exec(PATCH_UNCHAINED, {})
    try:
        yield
    finally:
        writer.CaptureWriter._write_lines, writer.CaptureWriter._end_part = saved


def _writer_cpu_us(variant: str, size: int, records: int, out: Path) -> float:
    """CPU per record to stamp, encode, chain and write `records` frames of about `size` bytes."""
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
    return elapsed / records / 1000


def _hook_cpu_us(variant: str, flows: int, out: Path) -> float:
    """CPU µs per flow (the hooks and the capture writer's thread) of the HTTP recorder for one JSON
    request and response, driven as `bench_addon._hook_cost_us` drives them."""
    from mitmproxy.test import taddons

    from addon.http_recorder import HttpRecorder
    from bench.bench_addon import drive_hooks, tool_call_flows

    os.environ.setdefault("ERASCOPE_REDACT_KEY", "bench")
    key = out / "chain.key"
    key.write_bytes(KEY)
    addon = HttpRecorder()
    with _variant(variant), taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(out), erascope_chain_key=str(key) if variant == "hmac" else "")
        batch = tool_call_flows(flows)
        t0 = time.process_time_ns()
        drive_hooks(addon, batch)
        elapsed = time.process_time_ns() - t0
        addon.done()
    for p in out.glob("*.jsonl"):
        p.unlink()
    return elapsed / flows / 1000


def _task_cpu_ns(pid: int) -> int:
    """CPU time so far of every live thread of process `pid` (Linux `schedstat`, nanoseconds)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return total


def _tee_cpu(cmd: list[str], messages: int, size: int) -> tuple[float, float]:
    """(CPU µs of the tee process per message, median round trip µs) for `messages` lines of `size`
    bytes sent one at a time through `cmd` and echoed back. Start-up is left out (a warm-up, then the
    tee's own threads' CPU time from `/proc`); the echo server is a process apart, not counted."""
    from bench.bench_tee import _spawn

    line = b'{"jsonrpc":"2.0","id":1,"result":"' + b"x" * max(0, size - 37) + b'"}\n'
    proc = _spawn(cmd)
    assert proc.stdin is not None and proc.stdout is not None
    fd_in, fd_out = proc.stdin.fileno(), proc.stdout.fileno()
    samples: list[float] = []
    pending = b""
    warm = 20
    for i in range(warm + messages):
        if i == warm:
            time.sleep(0.3)  # the writer catches up with the warm-up before the clock starts
            cpu0 = _task_cpu_ns(proc.pid)
        t0 = time.perf_counter_ns()
        view = memoryview(line)
        while view:
            view = view[os.write(fd_in, view) :]
        while b"\n" not in pending:
            pending += os.read(fd_out, 1 << 20)
        samples.append((time.perf_counter_ns() - t0) / 1000)
        got, _, pending = pending.partition(b"\n")
        if got + b"\n" != line:
            raise RuntimeError("echo returned different bytes")
    time.sleep(0.3)  # and with the measured messages before it stops
    cpu = _task_cpu_ns(proc.pid) - cpu0
    proc.stdin.close()
    proc.stdout.read()
    proc.stdout.close()
    if proc.wait(60) != 0:
        raise RuntimeError(f"{cmd!r} exited with {proc.returncode}")
    return cpu / messages / 1000, statistics.median(samples[warm:])


def run(quick: bool = False) -> dict[str, Any]:
    """Measure each recorder with and without the chain; numbers, ratios and the 5 % target."""
    from bench.bench_tee import ECHO

    runs = 3 if quick else 7
    records = 5_000 if quick else 20_000
    flows = 1_000 if quick else 3_000
    messages = 500 if quick else 2_000
    big = 20 if quick else 60
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
                    add(f"writer_{size}_{variant}", _writer_cpu_us(variant, size, records // (size // 250), out))
                add(f"hook_{variant}", _hook_cpu_us(variant, flows, out))
                tee = [sys.executable, "-c", TEE, str(out), variant, "--", *echo]
                cpu, rt = _tee_cpu(tee, messages, 250)
                add(f"tee_{variant}", cpu)
                add(f"rt_{variant}", rt)
                add(f"tee_mb_{variant}", _tee_cpu(tee, big, 1 << 20)[0])
                for p in out.glob("*.jsonl"):
                    p.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result: dict[str, Any] = {"name": "chain", "quick": quick, "runs": runs, "load_avg": round(os.getloadavg()[0], 2)}
    for key, values in samples.items():
        result[key] = round(statistics.median(values), 2)
        result[key + "_best"] = round(min(values), 2)
    for variant in ("sha256", "hmac"):
        for what in ("hook", "tee", "tee_mb", "rt", *(f"writer_{size}" for size in sizes)):
            result[f"{what}_ratio_{variant}"] = round(result[f"{what}_{variant}"] / result[f"{what}_off"], 3)
            result[f"{what}_ratio_{variant}_best"] = round(
                result[f"{what}_{variant}_best"] / result[f"{what}_off_best"], 3
            )
    result["targets"] = {
        f"{what}_{variant}<=1.05": result[f"{what}_ratio_{variant}"] <= 1.05
        for variant in ("sha256", "hmac")
        for what in ("hook", "tee", "tee_mb")
    }
    return result


def describe(r: dict[str, Any]) -> list[str]:
    rows = [
        f"hash chain cost, CPU time (median of {r['runs']} interleaved runs; ratio of the fastest runs in"
        f" brackets; load average {r['load_avg']})"
    ]
    for label, key in (
        ("HTTP recorder hooks, CPU per flow", "hook"),
        ("stdio tee, CPU per 250 B message", "tee"),
        ("stdio tee, CPU per 1 MB message", "tee_mb"),
        ("stdio tee, wall-clock round trip of a 250 B message", "rt"),
        ("writer, CPU per 250 B record", "writer_250"),
        ("writer, CPU per 4 kB record", "writer_4096"),
        ("writer, CPU per 64 kB record", "writer_65536"),
    ):
        rows.append(
            f"  {label}: off {r[f'{key}_off']} µs, sha256 {r[f'{key}_sha256']} µs"
            f" ({r[f'{key}_ratio_sha256']}x [{r[f'{key}_ratio_sha256_best']}x]), hmac {r[f'{key}_hmac']} µs"
            f" ({r[f'{key}_ratio_hmac']}x [{r[f'{key}_ratio_hmac_best']}x])"
        )
    return rows


def main() -> None:
    module_main(__doc__.splitlines()[0], run, describe)


if __name__ == "__main__":
    main()
