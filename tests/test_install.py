"""A plain (non-editable) install works: the wheel holds every package and data file, and the
installed `erascope` gives the same report as the editable one.

The wheel is built from a copy of the checkout (so stale `build/` trees never leak into it) and
installed, with its dependencies resolved by pip, into a fresh venv outside the checkout. Both
`erascope`s then run from the same directory on the same relative paths, so their reports must be
byte-identical.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PACKAGES = ("addon", "analyzer")
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", ".peers", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".pytest_cache",
    ".ruff_cache", ".hypothesis",
)  # fmt: skip
_BENCH_OUTPUT = ("data", "out")
"""Benchmark inputs and results (gitignored, possibly gigabytes): never part of a build."""

pytestmark = pytest.mark.e2e


@dataclass(frozen=True, slots=True)
class Installed:
    wheel: Path
    venv: Path
    env: dict[str, str]

    @property
    def erascope(self) -> Path:
        return self.venv / "bin" / "erascope"


def _pip_env() -> dict[str, str]:
    """pip's environment: the user's (its config and cache stay in use), minus what would redirect imports."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def _env(tmp: Path) -> dict[str, str]:
    """erascope's environment: no HOME or state outside the test's tmp dir."""
    env = _pip_env()
    env["XDG_STATE_HOME"] = str(tmp / "state")
    env["HOME"] = str(tmp / "home")
    return env


def _ignore(folder: str, names: list[str]) -> set[str]:
    skip = set(_NOT_SOURCE(folder, names))
    if Path(folder) == ROOT / "bench":
        skip |= {n for n in names if n in _BENCH_OUTPUT}
    return skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=_ignore)
    pip_env = _pip_env()
    # the dev venv carries the build backend, so the build needs no index
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), "."],
        cwd=src, env=pip_env, check=True,
    )  # fmt: skip
    (wheel,) = (tmp / "dist").glob("erascope-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=pip_env, check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", str(wheel)],
        cwd=tmp, env=pip_env, check=True,
    )  # fmt: skip
    yield Installed(wheel, venv, _env(tmp))


def _package_files(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for pkg in PACKAGES
        for p in (root / pkg).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_the_wheel_holds_every_file_of_the_packages(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as whl:
        shipped = {n for n in whl.namelist() if n.split("/", 1)[0] in PACKAGES}
    assert shipped == _package_files(ROOT)


def test_installed_erascope_runs_from_the_wheel_not_the_checkout(installed: Installed) -> None:
    where = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c", "import addon, analyzer.rules; print(analyzer.rules.__file__)"],
        cwd=installed.venv, env=installed.env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(installed.venv), where


def _reports(installed: Installed, report_format: str) -> tuple[bytes, bytes]:
    """The corpus report in `report_format` from the installed wheel and from the editable checkout."""
    args = ["analyze", "captures/", "--format", report_format, "--quiet"]
    run = {"cwd": ROOT, "env": installed.env, "capture_output": True, "timeout": 600}
    fresh = subprocess.run([str(installed.erascope), *args], **run)  # type: ignore[call-overload]
    assert fresh.returncode == 0, fresh.stderr.decode()
    editable = subprocess.run([str(BIN / "erascope"), *args], **run)  # type: ignore[call-overload]
    assert editable.returncode == 0, editable.stderr.decode()
    return fresh.stdout, editable.stdout


def test_installed_report_equals_the_editable_one(installed: Installed) -> None:
    fresh, editable = _reports(installed, "json")
    assert orjson.loads(fresh)["servers"], "the corpus report names servers"
    assert fresh == editable


def test_installed_rules_and_version(installed: Installed) -> None:
    rules = subprocess.run(
        [str(installed.erascope), "rules", "--brief"], env=installed.env, capture_output=True, text=True, timeout=120
    )
    assert rules.returncode == 0, rules.stderr
    assert "probe-storm" in rules.stdout
    shown = subprocess.run(
        [str(installed.erascope), "--version"], env=installed.env, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"erascope {version('erascope')}"


def test_installed_html_report_equals_the_editable_one(installed: Installed) -> None:
    """The html page's template ships in the wheel, and the page does not depend on where it runs from."""
    fresh, editable = _reports(installed, "html")
    assert fresh.startswith(b"<!DOCTYPE html>") and b'id="timeline"' in fresh
    assert fresh == editable
