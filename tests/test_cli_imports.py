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

from tests.conftest import ROOT, subprocess_env

_RUN = """
import json, sys
from analyzer.cli import main
sys.argv = ["erascope", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _modules(tmp_path: Path, *args: str) -> set[str]:
    """The modules `erascope ARGS` had imported when it finished."""
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(tmp_path),
        timeout=120,
    )
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


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
