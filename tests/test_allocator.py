"""The allocator settings `erascope` gives polars, and the bench harness's heap reading."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from analyzer import ALLOCATOR_CONF

ROOT = Path(__file__).resolve().parent.parent
_SHOW = "import analyzer, os, polars; print(os.environ.get('_RJEM_MALLOC_CONF', ''))"


def _conf_after_import(env_value: str | None, code: str = _SHOW) -> str:
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    if env_value is not None:
        env["_RJEM_MALLOC_CONF"] = env_value
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def test_importing_the_analyzer_first_hands_its_settings_to_polars() -> None:
    # polars puts its own defaults first and appends what it finds in the environment
    assert _conf_after_import(None).endswith("," + ALLOCATOR_CONF)


def test_a_setting_from_the_environment_wins() -> None:
    assert ALLOCATOR_CONF not in _conf_after_import("")
    assert _conf_after_import("narenas:1").endswith(",narenas:1")


def test_polars_imported_first_keeps_its_own_settings() -> None:
    polars_first = "import polars, analyzer, os; print(os.environ['_RJEM_MALLOC_CONF'])"
    assert ALLOCATOR_CONF not in _conf_after_import(None, polars_first)


def test_the_harness_reads_heap_apart_from_rss() -> None:
    from bench.__main__ import _memory_mb

    rss, anon = _memory_mb(os.getpid())
    assert 0 < anon <= rss
    assert _memory_mb(2**22 + 12345) == (0.0, 0.0)  # no such process: zeros, no error


def test_the_harness_reads_each_childs_own_cpu_time(tmp_path: Path) -> None:
    from bench.__main__ import run_child, summary
    from bench.generate import generate

    generate(tmp_path, 256 << 10, files=2, spawns=2, seed=5, clean=True)
    runs = [run_child("scan", str(tmp_path)) for _ in range(2)]
    for run in runs:
        assert run.user_s > 0 and run.sys_s >= 0 and run.minflt > 0
    s = summary(runs)
    assert s["min_cpu_s"] == round(min(r.user_s + r.sys_s for r in runs), 3)
    assert s["min_cpu_s"] <= s["median_cpu_s"]
