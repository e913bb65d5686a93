"""The command shell itself: --version, help text, and option choices, through real `erascope` processes."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.test_cli_docs import COMMANDS

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
CORPUS_CAPTURE = ROOT / "captures" / "corpus" / "auto-legacy-stdio"
PYTHON_TYPES = re.compile(r"<(bool|str|int|float|path|list)\b|\b(list|dict|tuple)\[|\b(str|int|float|bool|NoneType)\b")


def erascope(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "erascope"), *args], capture_output=True, text=True, env=env, timeout=120)


def test_version_comes_from_the_installed_distribution() -> None:
    res = erascope("--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"erascope {version('erascope')}\n"


def _home_env(tmp_path: Path) -> dict[str, str]:
    """HOME in the test's tmp dir, and none of erascope's or XDG's overrides: the defaults apply."""
    import os

    drop = ("XDG_STATE_HOME", "ERASCOPE_CAPTURE_DIR", "ERASCOPE_REDACT_KEY", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir()
    return env


def _files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_record_http_writes_only_under_the_state_dir(tmp_path: Path) -> None:
    env = _home_env(tmp_path)
    proc = subprocess.Popen(
        [str(BIN / "erascope"), "record", "http", "--upstream", "http://127.0.0.1:1/mcp", "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    try:
        seen = []
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if "writing captures to" in line:
                break
        assert any("listening on" in line for line in seen), seen
    finally:
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=60)[1]
    assert proc.returncode == 0, "".join(seen) + rest
    home = tmp_path / "home"
    assert not (home / ".mitmproxy").exists()
    written = _files_under(home)
    assert written, "the redaction key and mitmproxy's CA are written somewhere"
    assert all(f.startswith(".local/state/erascope/") for f in written), written
    assert ".local/state/erascope/redact.key" in written
    assert any(f.startswith(".local/state/erascope/mitmproxy/mitmproxy-ca") for f in written), written
    assert (home / ".local/state/erascope/mitmproxy").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("words", [[], ["record"], *COMMANDS], ids=lambda w: " ".join(w) or "erascope")
def test_help_shows_no_python_types(words: list[str]) -> None:
    import os

    res = erascope(*words, "--help", env=dict(os.environ, COLUMNS="200"))
    assert res.returncode == 0, res.stderr
    assert not PYTHON_TYPES.search(res.stdout), res.stdout


def test_analyze_choices_ignore_case() -> None:
    res = erascope("analyze", str(CORPUS_CAPTURE), "-f", "JSON", "--fail-on", "Error", "--quiet")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("{")
    bad = erascope("analyze", str(CORPUS_CAPTURE), "-f", "pdf")
    assert bad.returncode == 2
    assert "pdf" in bad.stderr and "text" in bad.stderr and "html" in bad.stderr, bad.stderr


def _start_record_http(env: dict[str, str] | None, *args: str) -> tuple[subprocess.Popen[str], list[str]]:
    """`record http` started and listening (its stderr lines so far), or exited (all its stderr)."""
    proc = subprocess.Popen(
        [str(BIN / "erascope"), "record", "http", "--upstream", "http://127.0.0.1:1/mcp", *args],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    seen: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line)
        if "writing captures to" in line:
            break
    return proc, seen


def test_record_http_bodies_choice_ignores_case(tmp_path: Path) -> None:
    proc, seen = _start_record_http(None, "--listen", "127.0.0.1:0", "--out", str(tmp_path), "--bodies", "METADATA")
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=60)[1]
    assert proc.returncode == 0, "".join(seen) + rest
    assert any("listening on" in line for line in seen), seen


def test_record_http_port_in_use_is_erascopes_own_message(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        res = subprocess.run(
            [str(BIN / "erascope"), "record", "http", "--upstream", "http://127.0.0.1:1/mcp", "--listen",
             f"127.0.0.1:{taken}", "--out", str(tmp_path / "caps")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert res.stderr == (
        f"erascope: error: cannot listen on 127.0.0.1:{taken}: port {taken} is in use; "
        "choose another with --listen HOST:PORT (port 0 picks a free one)\n"
    )


def test_cli_choices_are_the_librarys() -> None:
    from addon.redact import BODY_POLICIES
    from analyzer.cli import Bodies, FailOn, ReportFormat
    from analyzer.findings import Severity
    from analyzer.report import FORMATS

    assert tuple(ReportFormat) == (*FORMATS, "html")  # html is analyzer.html_report's, the others report.py's
    assert tuple(Bodies) == BODY_POLICIES
    assert {*FailOn} == {s.value for s in Severity} | {"never"}
