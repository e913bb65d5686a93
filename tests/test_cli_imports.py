"""Process start: each command imports what it uses, and no more (issue 20).

Every `erascope` run pays for its imports before it does anything; a command that prints the version
or writes a JSON report has no use for the recorder's writer or the text renderer's terminal library.
The command runs in a subprocess, as the installed script runs it, and reports the modules it loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, subprocess_env

_RUN = """
import gc, json, sys
from analyzer.cli import main
sys.argv = ["erascope", *sys.argv[1:]]
status = 0
try:
    main()
except SystemExit as exc:
    status = exc.code
print(json.dumps({"modules": sorted(sys.modules), "status": status, "frozen": gc.get_freeze_count()}), file=sys.stderr)
"""

HEAVY: tuple[str, ...] = (
    # typer coerces parameters through pydantic unless analyzer.cli_values does (issue 20)
    "pydantic",
    "typer._adapters",
    # the text renderer, the html page, other engines and stores, the recorders, the watcher
    "rich.console",
    "typer.rich_utils",
    "jinja2",
    "bokeh",
    "analyzer.html_report",
    "fsspec",
    "dask",
    "distributed",
    "analyzer.cluster",
    "mitmproxy",
    "blake3",
    "prometheus_client",
    "addon.writer",
    "addon.chain",
    "addon.retention",
    "analyzer.watch",
    # the request view of one analysis is sorted by polars; numpy sorts `watch`'s, round after round
    "numpy",
)
"""Modules `analyze --format json` of local captures or a local archive has no use for."""


def _run(tmp_path: Path, *args: str) -> dict[str, object]:
    """`erascope ARGS` in a subprocess, as the script runs it: the modules it had imported when it
    finished, its exit status and how many objects were frozen for the exit."""
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(tmp_path),
        timeout=120,
    )
    return json.loads(proc.stderr.strip().splitlines()[-1])


def _modules(tmp_path: Path, *args: str) -> set[str]:
    """The modules `erascope ARGS` had imported when it finished."""
    return set(_run(tmp_path, *args)["modules"])  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def corpus_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus compacted into an archive, by the command."""
    base = tmp_path_factory.mktemp("archive")
    out = base / "corpus.archive"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from analyzer.cli import main; main()",
            "compact",
            str(ROOT / "captures"),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
        env=subprocess_env(base),
        timeout=300,
    )
    return out


@pytest.mark.parametrize("source", ["jsonl", "archive"])
def test_json_report_imports_only_what_it_uses(tmp_path: Path, corpus_archive: Path, source: str) -> None:
    path = ROOT / "captures" if source == "jsonl" else corpus_archive
    out = tmp_path / "report.json"
    loaded = _modules(tmp_path, "analyze", str(path), "-q", "--format", "json", "--output", str(out))
    assert json.loads(out.read_text())["servers"], "the analysis ran"
    assert sorted(m for m in HEAVY if m in loaded) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--jobs", "0"), "Invalid value for '--jobs' / '-j': Input should be greater than or equal to 1"),
        (("--format", "xml"), "Invalid value for '--format' / '-f': Value error, 'xml' is not one of 'text', 'json',"),
        (("--probe-timeout", "abc"), "Invalid value for '--probe-timeout': Input should be a valid number, unable to"),
    ],
)
def test_bad_values_still_get_typers_messages(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    """Values the plain coercion (analyzer/cli_values.py) does not take go to typer's own, which names the problem."""
    proc = subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", "analyze", "captures", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(tmp_path),
        timeout=120,
    )
    assert proc.returncode == 2
    assert message in " ".join(proc.stderr.replace("│", " ").split())


def test_exit_skips_collecting_what_lives_to_the_end(tmp_path: Path) -> None:
    """The interpreter's exit would run full garbage collections over every object still alive (0.2 s of
    CPU after a 1 GB archive's report): the script freezes them once the command is done. What must
    happen at the end still does: the report is whole, the temporary directory gone, the status right."""
    out, temp = tmp_path / "report.json", tmp_path / "temp"
    temp.mkdir()
    run = _run(tmp_path, "analyze", str(ROOT / "captures"), "-q", "-f", "json", "-o", str(out), "--temp-dir", str(temp))
    assert run["status"] == 0
    assert json.loads(out.read_text())["servers"]
    assert list(temp.iterdir()) == []
    assert run["frozen"] > 10_000  # type: ignore[operator]  # a few hundred without the freeze
    failing = _run(tmp_path, "analyze", str(ROOT / "captures"), "-q", "-f", "json", "-o", str(out), "--fail-on", "info")
    assert failing["status"] == 1


@pytest.mark.parametrize(
    "command", [(), ("analyze",), ("compact",), ("rules",)], ids=lambda c: " ".join(c) or "erascope"
)
def test_help_imports_no_engine(tmp_path: Path, command: tuple[str, ...]) -> None:
    """`--help` is typer's alone: polars, the analysis and whatever it reads with are imported by the
    commands that run, not by the ones that describe themselves."""
    loaded = _modules(tmp_path, *command, "--help")
    engine = ("polars", "orjson", "analyzer.pipeline", "analyzer.load", "analyzer.archive", "analyzer.rules")
    assert sorted(m for m in (*engine, *HEAVY) if m in loaded and m not in ("rich.console", "typer.rich_utils")) == []


def test_version_does_not_import_the_recorder(tmp_path: Path) -> None:
    loaded = _modules(tmp_path, "--version")
    assert "addon.writer" not in loaded
    assert "polars" not in loaded


def test_json_report_does_not_import_the_terminal_renderer(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    loaded = _modules(tmp_path, "analyze", str(ROOT / "captures"), "-q", "-f", "json", "-o", str(out))
    assert json.loads(out.read_text())["servers"], "the analysis ran"
    assert "rich.console" not in loaded
    assert "typer.rich_utils" not in loaded


def test_text_report_still_renders_with_rich(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    loaded = _modules(tmp_path, "analyze", str(ROOT / "captures"), "-q", "-f", "text", "-o", str(out))
    assert out.read_text().startswith("erascope: ")
    assert "rich.console" in loaded


def test_python_m_runs_the_command() -> None:
    """`python -m analyzer.cli` ran nothing and exited 0: it defined the command and stopped."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "analyzer.cli", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip(), (proc.stdout, proc.stderr)
