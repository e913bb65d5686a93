"""The benchmark harness: `python -m bench [--quick | --big] [--only NAME ...] [--out FILE]`.

Every workload runs in its own child process (`bench.workloads`), so its peak RSS (`wait4`'s
`ru_maxrss`) is its own and nothing is cached between runs. Peak RSS counts the pages of files
polars maps to scan them, which are page cache, not heap: the peak heap (the child's anonymous
memory, `RssAnon`, sampled every 10 ms) is reported next to it, and the memory target applies to
it. A spike shorter than the sampling interval can be missed; RSS, exact, bounds it from above.

Compared workloads run interleaved (A B A B …) and are summarized by their medians: the machines
this runs on are shared and noisy, so only ratios measured side by side in one run mean much.

Benchmarks (names for --only):
  ratio    analyzer vs a bare polars `scan_ndjson(schema=RECORD_SCHEMA)` of the same files (≤ 2×)
  stages   the pipeline stage by stage: seconds and peak RSS after each
  parquet  compaction cost, and the analyzer on the Parquet archive vs on the JSONL files, in-process
           and as whole `erascope analyze` processes
  memory   analyzer peak heap (and RSS) as the input doubles (target: flat, < 300 MB), next to the bare scan's
  jobs     analyzer with 1..N jobs, and the per-file step as threads vs processes
  malformed  loading a file whose every other line has a field of the wrong type vs all good lines
  files    analyze 100,000 small captures (one per stdio spawn): time and peak heap, flat in files
  tee      the stdio tee (bench/bench_tee.py), when present
  addon    the HTTP recorder (bench/bench_addon.py), when present

Generated captures are cached under bench/data/, results go to bench/out/results.json, the
archive the parquet benchmark compacts to bench/out/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson
import polars as pl
from rich.console import Console
from rich.table import Table

from bench import ALLOCATOR_ENV
from bench.generate import generate

ROOT: Final = Path(__file__).resolve().parent.parent
DATA: Final = ROOT / "bench" / "data"
OUT: Final = ROOT / "bench" / "out"
ERASCOPE: Final = Path(sys.executable).parent / "erascope"
"""The installed command, as a user runs it."""
MB: Final = 1 << 20
MEMORY_TARGET_MB: Final = 300
RATIO_TARGET: Final = 1.5
PARQUET_TARGET: Final = 10.0
"""analyze on an archive vs on the same JSONL files: at least this many times faster."""
BENCHMARKS: Final = ("ratio", "stages", "parquet", "memory", "jobs", "malformed", "files", "tee", "addon")

console = Console(highlight=False)


@dataclass(frozen=True)
class Profile:
    """Sizes and repetitions of one harness mode."""

    name: str
    size: int
    """Input size for ratio, parquet and jobs."""
    memory_sizes: tuple[int, ...]
    runs: int


PROFILES: Final = {
    "quick": Profile("quick", 48 * MB, (24 * MB, 48 * MB, 96 * MB), 3),
    "default": Profile("default", 256 * MB, (128 * MB, 256 * MB, 512 * MB), 5),
    "big": Profile("big", 1024 * MB, (512 * MB, 1024 * MB, 2048 * MB), 3),
}


@dataclass
class Run:
    """One child process: wall time, the workload's own time, its peak RSS and its output."""

    wall: float
    seconds: float
    rss_mb: float
    out: dict[str, Any]
    heap_mb: float = float("nan")
    """Peak anonymous memory (`RssAnon`), sampled every `SAMPLE_S`."""
    killed: bool = False
    """Stopped by the harness for going over the RSS limit (`seconds` is then NaN)."""
    user_s: float = float("nan")
    """CPU seconds in user space of the whole child (imports included), all its threads (`wait4`)."""
    sys_s: float = float("nan")
    """CPU seconds in the kernel of the whole child, all its threads: page faults, system calls."""
    minflt: int = 0
    """The child's minor page faults (`ru_minflt`): pages it touched for the first time, or again
    after the allocator handed them back."""


RSS_LIMIT_MB: Final = 8 * 1024
"""The harness kills a workload above this RSS: the machine is shared, and past it the answer is known."""


SAMPLE_S: Final = 0.01


def _memory_mb(pid: int) -> tuple[float, float]:
    """(RSS, anonymous RSS) of a process now, in MB; zeros once it is gone."""
    rss = anon = 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("RssAnon:"):
                anon = int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return rss, anon


def run_child(*args: str, rss_limit_mb: float = RSS_LIMIT_MB) -> Run:
    """Run `python -m bench.workloads ARGS` and measure it. Raises when the workload fails."""
    with tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        env = _child_env()
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.workloads", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=err, env=env
        )
        # a pidfd names this very process even after it exits, so the watchdog can never signal a recycled pid
        pidfd = os.pidfd_open(proc.pid)
        stop = threading.Event()
        killed = threading.Event()
        heap = [0.0]

        def watchdog() -> None:
            while not stop.wait(SAMPLE_S):
                rss, anon = _memory_mb(proc.pid)
                heap[0] = max(heap[0], anon)
                if rss > rss_limit_mb:
                    killed.set()
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    return

        guard = threading.Thread(target=watchdog, daemon=True)
        guard.start()
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not all children's
        stop.set()
        guard.join()
        os.close(pidfd)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        if killed.is_set():
            console.print(f"[red]killed[/red] {' '.join(args)}: RSS above {rss_limit_mb:.0f} MB")
            return Run(
                wall=wall, seconds=float("nan"), rss_mb=usage.ru_maxrss / 1024, out={}, heap_mb=heap[0], killed=True
            )
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"workload {' '.join(args)} failed (status {proc.returncode}):\n{tail}")
    result = orjson.loads(out.splitlines()[-1])
    return Run(
        wall=wall,
        seconds=result["seconds"],
        rss_mb=usage.ru_maxrss / 1024,
        out=result,
        heap_mb=heap[0],
        user_s=usage.ru_utime,
        sys_s=usage.ru_stime,
        minflt=usage.ru_minflt,
    )


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    if ALLOCATOR_ENV is not None:  # children get the environment as a user's shell would give it
        env["_RJEM_MALLOC_CONF"] = ALLOCATOR_ENV
    return env


def _command_env() -> dict[str, str]:
    """The environment of a whole `erascope` process: a user's, with the project's modules compiled once.

    An installed erascope runs from compiled bytecode (pip compiles it; an editable install writes it
    on first use). Where `PYTHONDONTWRITEBYTECODE` is set, as on the shared build machine, every run
    would compile the project's modules again (0.1–0.2 s of CPU): here they are compiled into
    bench/out/pycache before the timed runs and read from there."""
    env = _child_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(OUT / "pycache")
    return env


def compile_project() -> None:
    """Compile the project's modules for `_command_env` (not timed)."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "analyzer", "addon"], cwd=ROOT, env=_command_env(), check=True
    )


def run_command(*args: str) -> Run:
    """One whole `erascope ARGS` process, as a user runs it: `seconds` and `wall` are its wall time from
    start to exit (interpreter, imports, the work, writing the report, the exit); its CPU (all threads)
    is `user_s` + `sys_s`, as for `run_child`. Raises when it fails."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        [str(ERASCOPE), *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_command_env()
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"erascope {' '.join(args)} failed (status {proc.returncode}):\n{err.decode()[-2000:]}")
    return Run(
        wall=wall,
        seconds=wall,
        rss_mb=usage.ru_maxrss / 1024,
        out={},
        user_s=usage.ru_utime,
        sys_s=usage.ru_stime,
        minflt=usage.ru_minflt,
    )


def dataset(size: int, *, clean: bool = False, seed: int = 1, spawns: int | None = None) -> Path:
    """Generated captures of `size` bytes under bench/data/, reused while their manifest exists."""
    # v2: the current generator; bump when its output changes so stale caches are not reused
    tag = f"gen-v2-{size // MB}m-s{seed}{'-clean' if clean else ''}{f'-{spawns}spawns' if spawns else ''}"
    path = DATA / tag
    if (path / "manifest.json").is_file():
        return path
    shutil.rmtree(path, ignore_errors=True)  # an interrupted generation leaves no manifest
    console.print(f"[dim]generating {size // MB} MiB of captures into {path.relative_to(ROOT)} …[/dim]")
    generate(path, size, seed=seed, clean=clean, spawns=spawns, files=2 if spawns else None)
    return path


def interleaved(variants: dict[str, Callable[[], Run]], runs: int) -> dict[str, list[Run]]:
    """Run each variant `runs` times, alternating between them so noise hits all alike."""
    results: dict[str, list[Run]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, fn in variants.items():
            results[name].append(fn())
    return results


def summary(runs: list[Run]) -> dict[str, Any]:
    ok = [r for r in runs if not r.killed]
    return {
        "median_s": round(statistics.median(r.seconds for r in ok), 3) if ok else None,
        "min_s": round(min(r.seconds for r in ok), 3) if ok else None,
        "median_wall_s": round(statistics.median(r.wall for r in ok), 3) if ok else None,
        # CPU of the whole child: on a shared machine it moves less with the load than wall time
        "median_cpu_s": round(statistics.median(r.user_s + r.sys_s for r in ok), 3) if ok else None,
        "min_cpu_s": round(min(r.user_s + r.sys_s for r in ok), 3) if ok else None,
        "median_sys_s": round(statistics.median(r.sys_s for r in ok), 3) if ok else None,
        "median_minflt": int(statistics.median(r.minflt for r in ok)) if ok else None,
        "peak_rss_mb": round(max(r.rss_mb for r in runs), 1),
        "peak_heap_mb": round(max(r.heap_mb for r in runs), 1),
        "runs": len(runs),
        "killed_over_rss_limit": len(runs) - len(ok),
        "output": ok[-1].out if ok else {},
    }


def _table(title: str, rows: dict[str, dict[str, Any]]) -> None:
    table = Table(title=title, title_justify="left")
    cols = (
        "variant",
        "median s",
        "min s",
        "median wall s",
        "median CPU s",
        "median sys s",
        "peak RSS MB",
        "peak heap MB",
    )
    for col in cols:
        table.add_column(col, justify="left" if col == "variant" else "right")
    for name, s in rows.items():
        table.add_row(
            name,
            f"{s['median_s']:.3f}",
            f"{s['min_s']:.3f}",
            f"{s['median_wall_s']:.3f}",
            f"{s['median_cpu_s']:.2f}",
            f"{s['median_sys_s']:.2f}",
            f"{s['peak_rss_mb']:.0f}",
            f"{s['peak_heap_mb']:.0f}",
        )
    console.print(table)


def _ratio(a: dict[str, Any], b: dict[str, Any], key: str = "median_s") -> float | None:
    """a / b on medians, or with key="min_s" on the fastest runs (noise on a shared machine only adds time)."""
    if a[key] is None or not b[key]:
        return None
    return round(a[key] / b[key], 2)


# --- benchmarks ----------------------------------------------------------------------------------
def bench_ratio(p: Profile) -> dict[str, Any]:
    clean = dataset(p.size, clean=True)
    messy = dataset(p.size)
    res = interleaved(
        {
            "bare scan_ndjson (clean)": lambda: run_child("scan", str(clean)),
            "analyzer (clean)": lambda: run_child("analyze", str(clean)),
            "analyzer (with malformed/torn lines)": lambda: run_child("analyze", str(messy)),
        },
        p.runs,
    )
    s = {k: summary(v) for k, v in res.items()}
    _table(f"analyzer vs bare scan, {p.size // MB} MiB", s)
    scan_, ana, ana_messy = s.values()
    if scan_["output"].get("records") != ana["output"].get("records"):
        raise RuntimeError(f"the scan and the analyzer read different record counts: {scan_['output']} {ana['output']}")
    ratio = _ratio(ana, scan_)
    console.print(
        f"analyzer / bare scan = [bold]{ratio}×[/bold] on medians, {_ratio(ana, scan_, 'min_s')}× on the fastest"
        f" runs (target ≤ {RATIO_TARGET}×); malformed-line files cost {_ratio(ana_messy, ana)}× the clean run;"
        f" CPU of the whole processes {_ratio(ana, scan_, 'median_cpu_s')}× ({_ratio(ana, scan_, 'min_cpu_s')}×"
        " fastest)"
    )
    return {
        "size_mb": p.size // MB,
        "records": ana["output"].get("records"),
        "variants": s,
        "ratio_analyzer_vs_scan": ratio,
        "ratio_analyzer_vs_scan_min": _ratio(ana, scan_, "min_s"),
        "ratio_messy_vs_clean": _ratio(ana_messy, ana),
        "ratio_cpu_analyzer_vs_scan": _ratio(ana, scan_, "median_cpu_s"),
        "ratio_cpu_analyzer_vs_scan_min": _ratio(ana, scan_, "min_cpu_s"),
        "target": RATIO_TARGET,
        "met": ratio is not None and ratio <= RATIO_TARGET,
    }


def bench_stages(p: Profile) -> dict[str, Any]:
    clean = dataset(p.size, clean=True)
    run = run_child("stages", str(clean))
    table = Table(title=f"where the analyzer spends time and memory, {p.size // MB} MiB", title_justify="left")
    for col in ("stage", "s", "peak RSS MB after"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for name, m in run.out["stages"].items():
        table.add_row(name, f"{m['s']:.2f}", f"{m['peak_rss_mb']:.0f}")
    console.print(table)
    console.print(f"{run.out['messages']} message rows, {run.out['messages_mb']} MB in the combined frame")
    return {"size_mb": p.size // MB, **run.out}


def bench_parquet(p: Profile) -> dict[str, Any]:
    # the clean set: the bare NDJSON scan, the baseline of both, stops at the first bad line
    clean = dataset(p.size, clean=True)
    archive = OUT / f"{clean.name}.archive"  # bench/data holds inputs only; it may be shared
    OUT.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(archive, ignore_errors=True)
    compaction = run_child("compact", str(clean), str(archive))
    jsonl_bytes = sum(f.stat().st_size for f in clean.glob("*.jsonl"))
    archive_bytes = sum(f.stat().st_size for f in archive.rglob("*") if f.is_file())
    reports = {name: OUT / f"report-{name}.json" for name in ("jsonl", "archive")}
    compile_project()

    def command(source: Path, report: Path) -> Run:
        return run_command("analyze", str(source), "--quiet", "--format", "json", "--output", str(report))

    res = interleaved(
        {
            "bare scan_ndjson": lambda: run_child("scan", str(clean)),
            "bare scan_parquet (every column)": lambda: run_child("scan-parquet", str(archive)),
            "analyzer on JSONL": lambda: run_child("analyze", str(clean)),
            "analyzer on Parquet": lambda: run_child("analyze", str(archive)),
            "erascope analyze JSONL (whole process)": lambda: command(clean, reports["jsonl"]),
            "erascope analyze archive (whole process)": lambda: command(archive, reports["archive"]),
        },
        p.runs,
    )
    s = {k: summary(v) for k, v in res.items()}
    _table(f"Parquet archive vs JSONL, {p.size // MB} MiB (clean)", s)
    scan_json, scan_parquet, jsonl, parquet, whole_jsonl, whole_archive = s.values()
    if jsonl["output"].get("findings") != parquet["output"].get("findings"):
        raise RuntimeError("the Parquet archive gave a different number of findings than the JSONL files")
    if reports["jsonl"].read_bytes() != reports["archive"].read_bytes():
        raise RuntimeError(f"erascope analyze wrote different reports for the archive and the JSONL: {reports}")
    whole_cpu_jsonl, whole_cpu_archive = whole_jsonl["median_cpu_s"], whole_archive["median_cpu_s"]
    speedup = _ratio(jsonl, parquet)
    whole = _ratio(whole_jsonl, whole_archive)
    console.print(
        f"compaction: {compaction.seconds:.1f} s, {jsonl_bytes / MB:.0f} MiB JSONL"
        f" → {archive_bytes / MB:.0f} MiB Parquet"
        f"; analyze on Parquet is [bold]{speedup}×[/bold] faster"
        f" ({_ratio(jsonl, parquet, 'min_s')}× on the fastest runs; target ≥ {PARQUET_TARGET}×);"
        f" bare scans: Parquet {_ratio(scan_json, scan_parquet)}× faster than NDJSON;"
        f" analyze on Parquet = {_ratio(parquet, scan_parquet)}× its bare scan,"
        f" on JSONL = {_ratio(jsonl, scan_json)}× its bare scan"
    )
    console.print(
        f"whole processes (`erascope analyze --format json`, start to exit, reports identical):"
        f" the archive is [bold]{whole}×[/bold] faster ({_ratio(whole_jsonl, whole_archive, 'min_s')}× on the"
        f" fastest runs; median wall {whole_jsonl['median_s']:.2f} / {whole_archive['median_s']:.2f} s), CPU"
        f" {whole_cpu_jsonl:.2f} / {whole_cpu_archive:.2f} s (user + sys medians)"
    )
    return {
        "size_mb": p.size // MB,
        "compact_s": round(compaction.seconds, 3),
        "compact_rss_mb": round(compaction.rss_mb, 1),
        "jsonl_mb": round(jsonl_bytes / MB, 1),
        "parquet_mb": round(archive_bytes / MB, 1),
        "variants": s,
        "speedup_parquet_vs_jsonl": speedup,
        "speedup_parquet_vs_jsonl_min": _ratio(jsonl, parquet, "min_s"),
        "ratio_parquet_vs_its_scan": _ratio(parquet, scan_parquet),
        "ratio_jsonl_vs_its_scan": _ratio(jsonl, scan_json),
        "speedup_whole_process": whole,
        "speedup_whole_process_min": _ratio(whole_jsonl, whole_archive, "min_s"),
        "whole_process_cpu_s": {"jsonl": whole_cpu_jsonl, "archive": whole_cpu_archive},
        "target": PARQUET_TARGET,
        "met": speedup is not None and speedup >= PARQUET_TARGET,
    }


def bench_memory(p: Profile) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for size in p.memory_sizes:
        path, clean = dataset(size), dataset(size, clean=True)
        # the bare scan stops at the first bad line: it reads the clean twin of the generated set
        rows[f"scan {size // MB} MiB (clean)"] = summary([run_child("scan", str(clean))])
        rows[f"load {size // MB} MiB"] = summary([run_child("load", str(path))])
        rows[f"analyze {size // MB} MiB"] = summary([run_child("analyze", str(path))])
        rows[f"analyze-clean {size // MB} MiB"] = summary([run_child("analyze", str(clean))])
    _table(
        "peak memory as the input doubles: the bare scan, loading alone, the whole analysis (of the set with"
        " bad lines, and of its clean twin)",
        rows,
    )
    out: dict[str, Any] = {
        "sizes_mb": [s // MB for s in p.memory_sizes],
        "variants": rows,
        "target_mb": MEMORY_TARGET_MB,
    }
    for stage in ("scan", "load", "analyze", "analyze-clean"):
        of_stage = [v for k, v in rows.items() if k.split()[0] == stage]
        heaps = [v["peak_heap_mb"] for v in of_stage]
        rss = [v["peak_rss_mb"] for v in of_stage]
        killed = any(v["killed_over_rss_limit"] for v in of_stage)
        met = max(heaps) < MEMORY_TARGET_MB and not killed
        out[stage] = {
            "peak_heap_mb": heaps,
            "peak_rss_mb": rss,
            "growth": round(heaps[-1] / heaps[0], 2),
            "met": met,
            "killed": killed,
        }
        console.print(
            f"{stage}: peak heap {' → '.join(f'{x:.0f}' for x in heaps)} MB"
            f" (RSS {' → '.join(f'{x:.0f}' for x in rss)} MB) for inputs"
            f" ×{p.memory_sizes[-1] // p.memory_sizes[0]} (heap growth ×{out[stage]['growth']})"
            + (
                ""
                if stage == "scan"
                else f"; target < {MEMORY_TARGET_MB} MB: [bold]{'met' if met else 'NOT met'}[/bold]"
            )
        )
    return out


def bench_jobs(p: Profile) -> dict[str, Any]:
    messy = dataset(p.size)
    cores = os.cpu_count() or 1
    jobs = sorted({1, 2, cores} if cores > 1 else {1})
    variants: dict[str, Callable[[], Run]] = {
        f"analyze --jobs {j}": (lambda j=j: run_child("analyze", str(messy), "--jobs", str(j))) for j in jobs
    }
    # many small files (one capture per stdio spawn) are where per-file overhead shows
    small = dataset(16 * MB, spawns=600)
    variants |= {
        f"analyze --jobs {j}, 600 small captures": (lambda j=j: run_child("analyze", str(small), "--jobs", str(j)))
        for j in jobs
    }
    workers = str(max(2, cores))
    variants |= {
        "per-file step, sequential": lambda: run_child("extract", str(messy), "seq"),
        f"per-file step, {workers} threads": lambda: run_child("extract", str(messy), "threads", "--jobs", workers),
        f"per-file step, {workers} processes": lambda: run_child("extract", str(messy), "processes", "--jobs", workers),
    }
    s = {k: summary(v) for k, v in interleaved(variants, p.runs).items()}
    _table(f"scaling over files, {p.size // MB} MiB, {cores} cores", s)
    one = s["analyze --jobs 1"]
    seq = s["per-file step, sequential"]
    out: dict[str, Any] = {"size_mb": p.size // MB, "cores": cores, "variants": s}
    for key, label in (("median_s", "medians"), ("min_s", "fastest runs")):
        one_small = s["analyze --jobs 1, 600 small captures"]
        speedups = {
            k: _ratio(one_small if "small" in k else one, v, key) for k, v in s.items() if k.startswith("analyze")
        }
        step = {k: _ratio(seq, v, key) for k, v in s.items() if k.startswith("per-file")}
        console.print(f"speedup over --jobs 1 ({label}): {speedups}; per-file step over sequential: {step}")
        suffix = "" if key == "median_s" else "_min"
        out["speedup" + suffix] = speedups
        out["per_file_step_speedup" + suffix] = step
    return out


def _wrong_typed_set(lines: int, *, bad: bool) -> Path:
    """One capture of `lines` frame records; with `bad`, every other one has `seq` as a string."""
    path = DATA / f"typed-{lines}{'-bad' if bad else ''}"
    target = path / "c.jsonl"
    if target.is_file():
        return path
    path.mkdir(parents=True, exist_ok=True)
    header = {"type": "header", "format": "erascope/1", "tool": "erascope", "transport": "stdio", "seq": 0, "part": 0}
    out = [orjson.dumps(header)]
    for n in range(1, lines + 1):
        raw = orjson.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "t"}}).decode()
        rec = {"type": "frame", "seq": n, "ts": 1.8e9 + n, "server": "s", "conn": "c1", "dir": "c2s", "raw": raw}
        if bad and n % 2 == 0:
            rec["seq"] = str(n)
        out.append(orjson.dumps(rec))
    target.write_bytes(b"\n".join(out) + b"\n")
    return path


def bench_malformed(p: Profile) -> dict[str, Any]:
    """Malformed lines must cost about what good lines cost: a file whose every other line has a
    wrong-typed field against one of as many good lines (the wrong types took 16 ms a line once)."""
    lines = 20_000 if p.name == "quick" else 200_000
    good, bad = _wrong_typed_set(lines, bad=False), _wrong_typed_set(lines, bad=True)
    res = interleaved(
        {
            f"load, {lines} good lines": lambda: run_child("load", str(good)),
            f"load, {lines} lines, every other one wrong-typed": lambda: run_child("load", str(bad)),
        },
        p.runs,
    )
    s = {k: summary(v) for k, v in res.items()}
    _table(f"wrong-typed lines vs good lines, {lines} lines", s)
    ok, messy = s.values()
    ratio = _ratio(messy, ok)
    console.print(
        f"wrong-typed / good = [bold]{ratio}×[/bold] on medians, {_ratio(messy, ok, 'min_s')}× on the fastest runs"
    )
    return {"lines": lines, "variants": s, "ratio": ratio, "ratio_min": _ratio(messy, ok, "min_s")}


def bench_files(p: Profile) -> dict[str, Any]:
    """Many small captures (one probe spawn each, about 2.2 kB): time and peak heap must stay flat
    in the number of files (target for 100,000: under 60 s and 500 MB)."""
    from bench.generate import generate_spawns

    counts = (2_000, 8_000) if p.name == "quick" else (10_000, 100_000)
    rows: dict[str, dict[str, Any]] = {}
    for count in counts:
        path = DATA / f"probe-spawns-{count}"
        if not (path / "manifest.json").is_file():
            shutil.rmtree(path, ignore_errors=True)
            console.print(f"[dim]generating {count} spawn captures into {path.relative_to(ROOT)} …[/dim]")
            generate_spawns(path, count)
        rows[f"analyze {count} small captures"] = summary([run_child("analyze", str(path))])
    _table("many small captures", rows)
    big = rows[f"analyze {counts[-1]} small captures"]
    return {"counts": list(counts), "variants": rows, "seconds": big["median_s"], "peak_heap_mb": big["peak_heap_mb"]}


def bench_module(name: str, quick: bool) -> dict[str, Any] | None:
    try:
        module = importlib.import_module(f"bench.bench_{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"bench.bench_{name}":
            raise
        console.print(f"[yellow]note:[/yellow] bench/bench_{name}.py is not there yet; skipping the {name} benchmark")
        return None
    result = module.run(quick)
    console.print(f"[bold]{name}[/bold]: {orjson.dumps(result, option=orjson.OPT_INDENT_2).decode()}")
    return result


# --- main ----------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "polars": pl.__version__,
        "loadavg_start": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small inputs, 3 runs (about 1-2 minutes)")
    mode.add_argument("--big", action="store_true", help="1 GB inputs and memory at 0.5/1/2 GB (slow)")
    ap.add_argument("--only", action="append", choices=BENCHMARKS, help="run only this benchmark (repeatable)")
    ap.add_argument("--runs", type=int, default=None, help="repetitions per variant (default per mode)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "results.json")
    args = ap.parse_args(argv)
    profile = PROFILES["quick" if args.quick else "big" if args.big else "default"]
    if args.runs:
        profile = Profile(profile.name, profile.size, profile.memory_sizes, args.runs)
    selected = args.only or list(BENCHMARKS)
    started = dt.datetime.now(dt.UTC)
    results: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "profile": profile.name,
        "runs": profile.runs,
        "command": " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(),
        "benchmarks": {},
    }
    console.print(
        f"[bold]erascope benchmarks[/bold] ({profile.name}, {profile.runs} runs, {results['machine']['cores']} cores)"
    )
    table: dict[str, Callable[[Profile], dict[str, Any] | None]] = {
        "ratio": bench_ratio,
        "stages": bench_stages,
        "parquet": bench_parquet,
        "memory": bench_memory,
        "jobs": bench_jobs,
        "malformed": bench_malformed,
        "files": bench_files,
        "tee": lambda p: bench_module("tee", p.name == "quick"),
        "addon": lambda p: bench_module("addon", p.name == "quick"),
    }
    for name in BENCHMARKS:
        if name not in selected:
            continue
        console.rule(name)
        t = time.perf_counter()
        out = table[name](profile)
        if out is not None:
            out["bench_wall_s"] = round(time.perf_counter() - t, 1)
            results["benchmarks"][name] = out
    results["machine"]["loadavg_end"] = os.getloadavg()
    results["wall_s"] = round((dt.datetime.now(dt.UTC) - started).total_seconds(), 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    console.print(f"results written to {args.out} ({results['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
