"""The command shell itself: --version, help text, and option choices, through real `erascope` processes."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

BIN = Path(sys.executable).parent


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
    import signal

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
