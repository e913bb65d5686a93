"""Shared fixtures: paths to the project's Pythons and the legacy MCP peer environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".peers"
LEGACY_MCP = "mcp==1.30.0"


def legacy_python() -> Path:
    """A Python with `mcp` 1.x (a genuine legacy peer), created on first use under .peers/legacy.

    The dual-era SDK (mcp 2.3.0) lives in the project venv; 1.x cannot share it, so it gets its own.
    """
    env_dir = PEERS / "legacy"
    py = env_dir / "bin" / "python"
    stamp = env_dir / ".installed"
    if stamp.exists():
        return py
    finder = subprocess.run(["sh", str(ROOT / ".ci" / "find-python")], capture_output=True, text=True)
    base = finder.stdout.strip() or sys.executable
    subprocess.run([base, "-m", "venv", str(env_dir)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", LEGACY_MCP], check=True)
    stamp.touch()
    return py


@pytest.fixture(scope="session")
def legacy_py() -> Path:
    return legacy_python()


@pytest.fixture(scope="session")
def modern_py() -> Path:
    """The project's Python, which has `mcp` 2.3.0 (dual-era server and client)."""
    return Path(sys.executable)


@pytest.fixture(scope="session", autouse=True)
def _state_outside_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """erascope's state directory (captures, redaction key, mitmproxy's confdir) in a tmp dir for the
    whole run: code under test, in-process or in a subprocess, never writes into the real HOME."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
        yield


def subprocess_env(base: Path) -> dict[str, str]:
    """An environment for subprocesses: HOME, captures and redaction key kept inside `base`."""
    env = dict(os.environ)
    env["HOME"] = str(base / "home")
    env["XDG_STATE_HOME"] = str(base / "state")
    env["ERASCOPE_REDACT_KEY"] = "test-key"
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """`subprocess_env` inside the test's tmp dir."""
    return subprocess_env(tmp_path)


@pytest.fixture
def procs() -> Iterator[list[Any]]:
    """Processes a test starts (`tests.test_http_e2e.Proc`), stopped (terminated, then killed) when it ends."""
    started: list[Any] = []
    yield started
    for p in reversed(started):
        p.stop()
