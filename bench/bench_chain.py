"""What the hash chain costs the recorders: the HTTP recorder's hooks, the stdio tee and the writer,
each with the chain ("chain": the recorders' default digest, BLAKE3; "keyed": its keyed form, as with
`--key`) against the recorders without it. `--chain-alg sha256` measures the chains of SHA-256 and
HMAC-SHA256 instead (what the recorders wrote before BLAKE3).

Two baselines. By default "off" is this tree's writer with the chain patched out (one `os.write` per
encoded line, no digest, no `part-end` record: `PATCH_UNCHAINED`). With `--baseline-tree PATH` it is
"base": the recorders of another checkout (e.g. `git worktree add ../base acca428`, the commit
before any chain work), run from that tree's own modules with this interpreter and these libraries,
so the ratios are the whole cost of today's recorders against those, not only the chain's.

Every variant runs in child processes (`PYTHONPATH` and working directory set to its tree), and the
variants run interleaved (base chain keyed base chain keyed …) in the same run. Costs are CPU time
(the child's own, all threads; for the tee, its own threads after start-up, from
`/proc/PID/task/*/schedstat`), which other work on a shared machine inflates far less than wall
time; the tee's wall-clock round trip (what the traffic feels) is reported beside it.

    python -m bench.bench_chain [--quick] [--json] [--baseline-tree PATH] [--chain-alg blake3|sha256]
    python -m bench.bench_chain --instructions [--baseline-tree PATH]     # needs valgrind

`--instructions` counts instructions instead of CPU time (valgrind's cachegrind, every thread of the
recorder's process): each measure runs twice with different numbers of flows or messages, and the
difference divided by the difference in count is the cost of one, start-up and warm-up cancelled out.
Counts do not move with the machine's load, so they settle a 5 % question that CPU time on a shared
machine cannot; they do not see what the kernel does (pipe copies, page faults), which is most of a
1 MB message's cost, so they are read beside the CPU times, not instead of them.

Target: each recorder's cost with the chain within 5 % of the baseline's (HTTP hooks per flow, with a
one-character answer and with an 8 kB one, tee per 250 B message and per 1 MB message, and the tee's
round trip for both). The writer's own CPU per record is reported for scale: it runs on the writer
thread, off the relay path.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import orjson

from bench._standalone import targets_line

ROOT = Path(__file__).resolve().parent.parent
KEY = b"bench-chain-key-0123456789abcdef"
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
"""This tree's writer without its chain: one `os.write` per record, unsealed (the "off" variant)."""
ALGORITHMS = {"blake3": ("blake3", "blake3-keyed"), "sha256": ("sha256", "hmac-sha256")}
"""`--chain-alg`: the digests of the "chain" and "keyed" variants."""
_PRELUDE = f"""
import os, sys
KEY = {KEY!r}
VARIANT = sys.argv[1]
if VARIANT == "off":
    exec({PATCH_UNCHAINED!r})
elif VARIANT in ("chain", "keyed") and os.environ.get("BENCH_CHAIN_ALG"):
    from addon import chain
    chain.DEFAULT, chain.DEFAULT_KEYED = os.environ["BENCH_CHAIN_ALG"].split(",")
# only the chained variants know the option: a baseline tree may predate it
CHAIN = {{"chain_key": KEY}} if VARIANT == "keyed" else {{}}
"""
TEE = (
    _PRELUDE
    + """
from pathlib import Path
from addon.stdio_tee import run_tee
sys.exit(run_tee(sys.argv[4:], out_dir=Path(sys.argv[2]), linger=0, stderr=sys.stderr.buffer, **CHAIN))
"""
)
"""The tee as `erascope record stdio --linger 0` runs it, as one variant (argv: variant, out, --, cmd)."""
WRITER = (
    _PRELUDE
    + """
import time
from pathlib import Path
from addon import format as fmt
from addon.writer import CaptureWriter
out, size, records = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
payload = fmt.payload_fields(b'{"jsonrpc":"2.0","id":1,"result":"' + b"x" * max(0, size - 36) + b'"}')
w = CaptureWriter(out, transport=fmt.STDIO, server="bench", **CHAIN)
w.write({fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c", fmt.F_DIR: fmt.S2C, **payload, fmt.F_NL: True})
w.flush()  # the part is open, its header written: what follows is the cost per record alone
t0 = time.process_time_ns()
for _ in range(records):
    w.write({fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c", fmt.F_DIR: fmt.S2C, **payload, fmt.F_NL: True})
w.flush()
print((time.process_time_ns() - t0) / records / 1000)
w.close()  # its fsync is per capture, not per record: left out
"""
)
"""CPU µs per record to stamp, encode, chain and write frames of about `size` bytes (argv: variant, out,
size, records)."""


def _hooks_script() -> str:
    from bench import bench_addon

    helpers = inspect.getsource(bench_addon.tool_call_flows) + inspect.getsource(bench_addon.drive_hooks)
    return (
        _PRELUDE
        + f"""
import os, time
from pathlib import Path
from typing import Any
from mitmproxy.test import taddons
from addon.http_recorder import HttpRecorder
BODY = {bench_addon.BODY!r}
{helpers}
out, flows, answer = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.environ.setdefault("ERASCOPE_REDACT_KEY", "bench")
options = {{"erascope_dir": str(out)}}
if VARIANT == "keyed":
    (out / "chain.key").write_bytes(KEY)
    options["erascope_chain_key"] = str(out / "chain.key")
addon = HttpRecorder()
with taddons.context(addon) as tctx:
    tctx.configure(addon, **options)
    drive_hooks(addon, tool_call_flows(50, answer))  # warm-up: the writer's part, first-call costs
    batch = tool_call_flows(flows, answer)
    t0 = time.process_time_ns()
    drive_hooks(addon, batch)
    elapsed = time.process_time_ns() - t0
    addon.done()
print(elapsed / flows / 1000)
"""
    )
    """CPU µs per flow (the hooks and the writer's thread) of the HTTP recorder for one JSON request and
    response, driven as `bench_addon` drives them (argv: variant, out, flows, the answer's text size)."""


class Variant:
    """One side of the comparison: a name and the tree whose `addon` it runs."""

    def __init__(self, name: str, tree: Path, algorithms: tuple[str, str] = ALGORITHMS["blake3"]) -> None:
        self.name = name
        self.tree = tree
        self.env = dict(
            os.environ, PYTHONPATH=str(tree), ERASCOPE_REDACT_KEY="bench", BENCH_CHAIN_ALG=",".join(algorithms)
        )

    def output(self, script: str, *args: str, prefix: tuple[str, ...] = ()) -> float:
        done = subprocess.run(
            [*prefix, sys.executable, "-c", script, self.name, *args],
            cwd=self.tree, env=self.env, capture_output=True, check=False, timeout=1800,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} ({self.tree}) failed:\n{done.stderr.decode(errors='replace')}")
        return float(done.stdout.split()[-1])

    def spawn(self, script: str, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*prefix, sys.executable, "-c", script, self.name, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=self.tree, env=self.env, bufsize=0,
        )  # fmt: skip


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


def _message(size: int) -> bytes:
    """A JSON-RPC answer of `size` bytes with its newline: one line of the tee measures."""
    return b'{"jsonrpc":"2.0","id":1,"result":"' + b"x" * max(0, size - 37) + b'"}\n'


def _tee_cpu(proc: subprocess.Popen[bytes], messages: int, size: int) -> tuple[float, float]:
    """(CPU µs of the tee process per message, median round trip µs) for `messages` lines of `size`
    bytes sent one at a time through `proc` and echoed back. Start-up is left out (a warm-up, then the
    tee's own threads' CPU time from `/proc`); the echo server is a process apart, not counted."""
    line = _message(size)
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
            chunk = os.read(fd_out, 1 << 20)
            if not chunk:
                raise RuntimeError(f"the tee ended early (exit status {proc.wait()})")
            pending += chunk
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
        raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
    return cpu / messages / 1000, statistics.median(samples[warm:])


MEASURES = (
    ("HTTP recorder hooks, CPU per flow", "hook"),
    ("HTTP recorder hooks, CPU per flow with an 8 kB answer", "hook_8k"),
    ("stdio tee, CPU per 250 B message", "tee"),
    ("stdio tee, CPU per 1 MB message", "tee_mb"),
    ("stdio tee, wall-clock round trip of a 250 B message", "rt"),
    ("stdio tee, wall-clock round trip of a 1 MB message", "rt_mb"),
    ("writer, CPU per 250 B record", "writer_250"),
    ("writer, CPU per 4 kB record", "writer_4096"),
    ("writer, CPU per 64 kB record", "writer_65536"),
)
TARGETS = ("hook", "hook_8k", "tee", "tee_mb", "rt", "rt_mb")
"""What the 5 % target applies to (the writer alone is for scale)."""
ANSWERS = {"hook": 0, "hook_8k": 8 << 10}
"""The hooks measures: the size of each one's answer text (`bench_addon.tool_call_flows`)."""
SEAL_MEASURES = (
    ("hook", "HTTP flow", 0, 2_000),
    ("hook_8k", "HTTP flow with an 8 kB answer", 0, 2_000),
    ("tee", "250 B message", 250, 2_000),
    ("tee_mb", "1 MB message", 1 << 20, 20),
)
"""(measure, its unit, tee message size or 0 for an HTTP flow, units per timing) of `_seal_cpu`."""


def _seal_cpu(lines: list[bytes], algorithm: str, units: int) -> float:
    """CPU µs per unit (a tee message, an HTTP flow) of sealing alone (`addon.chain.seal_lines`) the
    records `lines` the unit becomes. What any chain that covers every byte recorded costs at the
    least, whatever else the recorder does."""
    from addon import chain

    chainer = chain.Chainer(KEY if algorithm in chain.KEYED else None, algorithm)
    digest = chain.START
    start = time.process_time_ns()
    for i in range(units):
        _, _, digest = chain.seal_lines(chainer, digest, lines, len(lines) * i)
    return (time.process_time_ns() - start) / units / 1000


def _message_lines(size: int) -> list[bytes]:
    """The two records a tee message of `size` bytes becomes (its `c2s` frame and the echo's `s2c`
    frame), encoded as the writer encodes them."""
    raw = _message(size)[:-1].decode()
    return [
        orjson.dumps(
            {"type": "frame", "conn": "c", "raw": raw, "len": len(raw), "nl": True, "dir": d,
             "ts": 1.0e9, "mono": 1.0e3, "server": "echo", "seq": n},
            option=orjson.OPT_APPEND_NEWLINE,
        )
        for n, d in enumerate(("c2s", "s2c"), 1)
    ]  # fmt: skip


def _flow_lines(answer: int) -> list[bytes]:
    """The records one flow of a hooks measure becomes (its `http.request` and `http.response`), its
    answer's text `answer` bytes long, as this tree's HTTP recorder writes them, without their seal."""
    from mitmproxy.test import taddons

    from addon import chain
    from addon.http_recorder import HttpRecorder
    from bench.bench_addon import drive_hooks, tool_call_flows

    # as the hooks measure runs the recorder, and only while it runs here
    with tempfile.TemporaryDirectory() as out, mock.patch.dict(os.environ, {"ERASCOPE_REDACT_KEY": "bench"}):
        addon = HttpRecorder()
        with taddons.context(addon) as tctx:
            tctx.configure(addon, erascope_dir=out)
            drive_hooks(addon, tool_call_flows(1, answer))
            addon.done()
        written = [line for p in Path(out).rglob("*.jsonl") for line in p.read_bytes().splitlines(keepends=True)]
    lines = []
    for line in written:
        sealed = chain.split(line)
        if sealed is not None and line.startswith(b'{"type":"http.'):
            covered = bytes(sealed[2])
            lines.append(covered[: covered.rfind(chain.FIELD_OPEN)] + b"}\n")
    assert len(lines) == 2, f"a flow wrote {len(lines)} http records"
    return lines


def run(quick: bool = False, baseline_tree: Path | None = None, chain_alg: str = "blake3") -> dict[str, Any]:
    """Measure each recorder with and without the chain; numbers, ratios and the 5 % target."""
    from bench.bench_tee import ECHO

    runs = 3 if quick else 7
    records = 5_000 if quick else 20_000
    flows = 1_000 if quick else 3_000
    messages = 500 if quick else 2_000
    big = 20 if quick else 60
    sizes = (250, 4_096, 65_536)
    baseline = "off" if baseline_tree is None else "base"
    variants = [Variant(baseline, ROOT if baseline_tree is None else baseline_tree.resolve())]
    variants += [Variant(name, ROOT, ALGORITHMS[chain_alg]) for name in ("chain", "keyed")]
    hooks = _hooks_script()
    flow_lines = {key: _flow_lines(answer) for key, answer in ANSWERS.items()}
    tmp = Path(tempfile.mkdtemp(prefix="erascope-bench-chain-"))
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    echo = [sys.executable, "-c", ECHO]
    try:
        for _ in range(runs):
            for v in variants:
                out = tmp / v.name
                out.mkdir(exist_ok=True)
                for size in sizes:
                    add(f"writer_{size}_{v.name}", v.output(WRITER, str(out), str(size), str(records // (size // 250))))
                for key, answer in ANSWERS.items():
                    add(f"{key}_{v.name}", v.output(hooks, str(out), str(flows), str(answer)))
                cpu, rt = _tee_cpu(v.spawn(TEE, str(out), "--", *echo), messages, 250)
                add(f"tee_{v.name}", cpu)
                add(f"rt_{v.name}", rt)
                cpu, rt = _tee_cpu(v.spawn(TEE, str(out), "--", *echo), big, 1 << 20)
                add(f"tee_mb_{v.name}", cpu)
                add(f"rt_mb_{v.name}", rt)
                for p in out.glob("*.jsonl"):
                    p.unlink()
            for key, _, size, count in SEAL_MEASURES:
                lines = _message_lines(size) if size else flow_lines[key]
                add(f"seal_{key}", _seal_cpu(lines, ALGORITHMS[chain_alg][0], count // (3 if quick else 1)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result: dict[str, Any] = {
        "name": "chain",
        "quick": quick,
        "runs": runs,
        "baseline": baseline,
        "baseline_tree": None if baseline_tree is None else str(baseline_tree),
        "chain_alg": ",".join(ALGORITHMS[chain_alg]),
        "load_avg": round(os.getloadavg()[0], 2),
    }
    for key, values in samples.items():
        result[key] = round(statistics.median(values), 2)
        result[key + "_best"] = round(min(values), 2)
        result[key + "_all"] = [round(x, 2) for x in values]
    for variant in ("chain", "keyed"):
        for _, what in MEASURES:
            result[f"{what}_ratio_{variant}"] = round(result[f"{what}_{variant}"] / result[f"{what}_{baseline}"], 3)
            result[f"{what}_ratio_{variant}_best"] = round(
                result[f"{what}_{variant}_best"] / result[f"{what}_{baseline}_best"], 3
            )
    for key, _, _, _ in SEAL_MEASURES:
        # the share of the baseline's message (flow) that sealing alone adds: at or above 5 %, no
        # recorder that chains every record can be within 5 % of the baseline unless the rest of it
        # got cheaper
        result[f"seal_{key}_share"] = round(result[f"seal_{key}"] / result[f"{key}_{baseline}"], 3)
    result["targets"] = {
        f"{what}_{variant}<=1.05": result[f"{what}_ratio_{variant}"] <= 1.05
        for variant in ("chain", "keyed")
        for what in TARGETS
    }
    return result


_I_REFS = re.compile(rb"^==\d+== I\s+refs:\s+([\d,]+)", re.MULTILINE)


def _cachegrind(log: Path) -> tuple[str, ...]:
    """The command prefix that counts a process's instructions (all its threads, not its children)
    into valgrind's log `log`; `_instructions_in` reads the total back."""
    return ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", f"--log-file={log}")


def _instructions_in(log: Path) -> int:
    found = _I_REFS.search(log.read_bytes())
    if found is None:
        raise RuntimeError(f"no instruction count in {log}:\n{log.read_text(errors='replace')[-2000:]}")
    return int(found.group(1).replace(b",", b""))


INSTRUCTION_MEASURES = (
    ("HTTP recorder hooks, instructions per flow", "hook", 100, 400),
    ("stdio tee, instructions per 250 B message", "tee", 100, 600),
    ("stdio tee, instructions per 1 MB message", "tee_mb", 4, 16),
)
"""(label, key, fewer, more): each measure's two runs."""


def run_instructions(baseline_tree: Path | None = None, chain_alg: str = "blake3") -> dict[str, Any]:
    """Instructions per flow or message of each recorder with and without the chain (one run each)."""
    from bench.bench_tee import ECHO

    if shutil.which("valgrind") is None:
        raise RuntimeError("--instructions needs valgrind (e.g. `apt install valgrind`)")
    baseline = "off" if baseline_tree is None else "base"
    variants = [Variant(baseline, ROOT if baseline_tree is None else baseline_tree.resolve())]
    variants += [Variant(name, ROOT, ALGORITHMS[chain_alg]) for name in ("chain", "keyed")]
    hooks = _hooks_script()
    echo = [sys.executable, "-c", ECHO]
    tmp = Path(tempfile.mkdtemp(prefix="erascope-bench-chain-"))
    result: dict[str, Any] = {
        "name": "chain-instructions",
        "baseline": baseline,
        "baseline_tree": None if baseline_tree is None else str(baseline_tree),
        "chain_alg": ",".join(ALGORITHMS[chain_alg]),
    }
    try:
        for _, key, fewer, more in INSTRUCTION_MEASURES:
            for v in variants:
                out = tmp / v.name
                out.mkdir(exist_ok=True)
                counts = []
                for n in (fewer, more):
                    log = tmp / f"{key}-{v.name}-{n}.log"
                    if key == "hook":
                        v.output(hooks, str(out), str(n), "0", prefix=_cachegrind(log))
                    else:
                        proc = v.spawn(TEE, str(out), "--", *echo, prefix=_cachegrind(log))
                        _tee_cpu(proc, n, 250 if key == "tee" else 1 << 20)
                    counts.append(_instructions_in(log))
                    for p in out.glob("*.jsonl"):
                        p.unlink()
                result[f"{key}_{v.name}"] = round((counts[1] - counts[0]) / (more - fewer))
            for variant in ("chain", "keyed"):
                result[f"{key}_ratio_{variant}"] = round(result[f"{key}_{variant}"] / result[f"{key}_{baseline}"], 3)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["targets"] = {
        f"{key}_{variant}<=1.05": result[f"{key}_ratio_{variant}"] <= 1.05
        for variant in ("chain", "keyed")
        for _, key, _, _ in INSTRUCTION_MEASURES
    }
    return result


def _compared(r: dict[str, Any]) -> str:
    """What a result compares: the chained variants' digests and the baseline."""
    tree = f" = {r['baseline_tree']}" if r["baseline_tree"] else ": this tree, chain patched out"
    return f"chain/keyed {r['chain_alg']}; baseline {r['baseline']}{tree}"


def describe_instructions(r: dict[str, Any]) -> list[str]:
    base = r["baseline"]
    rows = [f"hash chain cost in instructions (cachegrind, the recorder's process, all threads; {_compared(r)})"]
    for label, key, _, _ in INSTRUCTION_MEASURES:
        rows.append(
            f"  {label}: {base} {r[f'{key}_{base}']:,}, chain {r[f'{key}_chain']:,}"
            f" ({r[f'{key}_ratio_chain']}x), keyed {r[f'{key}_keyed']:,} ({r[f'{key}_ratio_keyed']}x)"
        )
    return rows


def describe(r: dict[str, Any]) -> list[str]:
    base = r["baseline"]
    rows = [
        f"hash chain cost, CPU time (median of {r['runs']} interleaved runs; ratio of the fastest runs in"
        f" brackets; load average {r['load_avg']}; {_compared(r)})"
    ]
    for label, key in MEASURES:
        rows.append(
            f"  {label}: {base} {r[f'{key}_{base}']} µs, chain {r[f'{key}_chain']} µs"
            f" ({r[f'{key}_ratio_chain']}x [{r[f'{key}_ratio_chain_best']}x]), keyed {r[f'{key}_keyed']} µs"
            f" ({r[f'{key}_ratio_keyed']}x [{r[f'{key}_ratio_keyed_best']}x])"
        )
    for key, unit, size, _ in SEAL_MEASURES:
        noun, rest = ("message", "tee") if size else ("flow", "hooks")
        rows.append(
            f"  sealing alone (in this process), CPU per {unit}:"
            f" {r[f'seal_{key}']} µs, {r[f'seal_{key}_share']:.1%} of {base}'s whole {noun}"
            f" (the chain's least cost; the rest of the {rest}: {r[f'{key}_chain'] - r[f'seal_{key}']:.2f} µs"
            f" = {(r[f'{key}_chain'] - r[f'seal_{key}']) / r[f'{key}_{base}']:.3f}x {base})"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--json", action="store_true", help="print the result as JSON only")
    parser.add_argument(
        "--baseline-tree", type=Path, default=None, metavar="PATH",
        help="compare with the recorders of this checkout (e.g. the commit before chains) instead of this"
        " tree with the chain patched out",
    )  # fmt: skip
    parser.add_argument(
        "--chain-alg", choices=sorted(ALGORITHMS), default="blake3",
        help="the digests of the chained variants (default: blake3, the recorders' own)",
    )  # fmt: skip
    parser.add_argument(
        "--instructions", action="store_true",
        help="count instructions under valgrind's cachegrind instead of measuring CPU time",
    )  # fmt: skip
    args = parser.parse_args()
    if args.baseline_tree is not None and not (args.baseline_tree / "addon" / "stdio_tee.py").is_file():
        parser.error(f"--baseline-tree {args.baseline_tree}: no addon/stdio_tee.py there")
    if args.instructions:
        result = run_instructions(baseline_tree=args.baseline_tree, chain_alg=args.chain_alg)
        lines = describe_instructions(result)
    else:
        result = run(quick=args.quick, baseline_tree=args.baseline_tree, chain_alg=args.chain_alg)
        lines = describe(result)
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    sys.stdout.write("\n".join([*lines, targets_line(result)]) + "\n")


if __name__ == "__main__":
    main()
