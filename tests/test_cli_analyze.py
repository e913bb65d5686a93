"""`erascope analyze`: formats, --output, exit statuses (typer's CliRunner), and one real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

import analyzer.pipeline
from analyzer.cli import app
from analyzer.findings import Evidence, Finding, Severity
from tests.test_messages import Cap, err, init, init_result, probe

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


@pytest.fixture
def caps(tmp_path: Path) -> Path:
    cap = Cap(tmp_path / "caps", server="weather")
    cap.c2s(probe(1))
    cap.s2c(err(1, -32602, "Invalid request parameters", ""))
    cap.c2s(init(2))
    cap.s2c(init_result(2))
    cap.close()
    return tmp_path / "caps"


@pytest.fixture
def one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    finding = Finding("probe-storm", Severity.WARNING, "weather", "too many probes", (Evidence("x.jsonl", 2),), ts=1.0)
    monkeypatch.setattr(analyzer.pipeline, "run_rules", lambda analysis, options=None: [finding])


def test_text_is_the_default(caps: Path) -> None:
    result = runner.invoke(app, ["analyze", str(caps)])
    assert result.exit_code == 0, result.output
    assert "weather" in result.stdout and "legacy" in result.stdout


def test_json_and_markdown(caps: Path) -> None:
    result = runner.invoke(app, ["analyze", str(caps), "--format", "json"])
    assert result.exit_code == 0
    doc = orjson.loads(result.stdout)
    assert doc["servers"][0]["era"] == "legacy"
    result = runner.invoke(app, ["analyze", str(caps), "-f", "markdown"])
    assert result.exit_code == 0 and result.stdout.startswith("# erascope report")


def test_output_file(caps: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = runner.invoke(app, ["analyze", str(caps), "--format", "json", "--output", str(out)])
    assert result.exit_code == 0 and result.stdout == ""
    assert orjson.loads(out.read_bytes())["schema"] == "erascope-report/2"


@pytest.mark.usefixtures("one_warning")
@pytest.mark.parametrize(("fail_on", "code"), [("warning", 1), ("info", 1), ("error", 0), ("never", 0)])
def test_fail_on(caps: Path, fail_on: str, code: int) -> None:
    result = runner.invoke(app, ["analyze", str(caps), "--fail-on", fail_on, "--quiet"])
    assert result.exit_code == code, result.output
    assert "too many probes" in result.stdout


def test_no_findings_never_fails(caps: Path) -> None:
    assert runner.invoke(app, ["analyze", str(caps), "--fail-on", "info"]).exit_code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "pdf"], "Invalid value for '--format'"),
        (["--fail-on", "fatal"], "Invalid value for '--fail-on'"),
        (["--probe-timeout", "0"], "--probe-timeout"),
    ],
)
def test_bad_options_exit_2(caps: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["analyze", str(caps), *args])
    assert result.exit_code == 2
    assert message in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "--probe-timeout", "nan"], ["analyze", "--probe-timeout", "inf"],
        ["analyze", "--probe-timeout", "1e300"], ["watch", "--interval", "1e300"], ["watch", "--probe-timeout", "nan"],
    ],
    ids=lambda args: " ".join(args),
)  # fmt: skip
def test_a_number_option_that_is_not_finite_or_too_large_is_a_usage_error(caps: Path, args: list[str]) -> None:
    script = Path(sys.executable).parent / "erascope"
    env = {**os.environ, "COLUMNS": "300"}  # typer's error box would wrap the message
    proc = subprocess.run([str(script), *args, str(caps)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"Invalid value for '{args[1]}'" in proc.stderr and "a finite number of at most 1e9" in proc.stderr


def test_input_errors_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["analyze", str(tmp_path / "nope.jsonl")])
    assert (result.exit_code, "no such file or directory" in result.stderr) == (2, True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "export.har").write_text("{}")  # not searched for: the message says so
    result = runner.invoke(app, ["analyze", str(tmp_path / "empty")])
    assert (result.exit_code, "no *.jsonl files under" in result.stderr) == (2, True)
    assert "*.jsonl.zst" in result.stderr and "HAR files and mitmproxy dumps are read when named" in result.stderr
    future = tmp_path / "future.jsonl"
    future.write_text('{"type":"header","format":"erascope/7","seq":0}\n')
    result = runner.invoke(app, ["analyze", str(future)])
    assert (result.exit_code, "erascope/7" in result.stderr) == (2, True)


def test_malformed_input_is_reported_not_fatal(caps: Path) -> None:
    path = next(caps.glob("*.jsonl"))
    with path.open("a") as f:
        f.write("oops\n{}\n{\"type\":")
    result = runner.invoke(app, ["analyze", str(caps)])
    assert result.exit_code == 0
    # a complete last line is malformed like any other; only a last line without its newline is torn
    # (line 6 is the part-end record the writer closed the capture with)
    assert "2 malformed line(s)" in result.stdout and ":7: not valid JSON" in result.stdout
    assert ":8: no record type" in result.stdout
    assert "torn last line" in result.stdout and ":9 " in result.stdout


def test_readme_documents_analyze() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "## Analyzing captures" in readme and "erascope analyze" in readme


@pytest.mark.e2e
def test_console_script_subprocess(caps: Path, tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "erascope"
    assert script.exists(), "the erascope console script is installed with the package"
    ok = subprocess.run([str(script), "analyze", str(caps), "--format", "json"], capture_output=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert orjson.loads(ok.stdout)["servers"][0]["era"] == "legacy"
    missing = str(tmp_path / "missing")
    bad = subprocess.run([str(script), "analyze", missing], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert "erascope: error: no such file or directory" in bad.stderr and "Traceback" not in bad.stderr
