"""The command shell itself: --version, help text, and option choices, through real `erascope` processes."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.test_cli_docs import COMMANDS

BIN = Path(sys.executable).parent


def erascope(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "erascope"), *args], capture_output=True, text=True, env=env, timeout=120)


def test_version_comes_from_the_installed_distribution() -> None:
    res = erascope("--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"erascope {version('erascope')}\n"
