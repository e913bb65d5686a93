"""A dead upstream is the recorder's problem to name, not the client's fault.

The real `erascope record http` in front of a port nothing listens on: it warns at start, the
real `mcp` 2.3.0 client's probe and fallback `initialize` both get the proxy's 502, and the
analysis reports `upstream-unreachable` (not `misread-crash`) with the recorded
`[Errno 111] Connect call failed` in the finding and in the verdict's why-line.
"""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import orjson
import pytest

from analyzer.pipeline import analyze
from tests.test_http_e2e import Proc, record_http, start_server

pytestmark = pytest.mark.e2e



ROOT = Path(__file__).resolve().parent.parent
MODERN_CLIENT = ROOT / "captures" / "peers" / "modern_client.py"
WARNING = r"erascope: WARNING: upstream (\S+) does not answer"


def closed_port() -> int:
    with socket.socket() as s:  # bound, never listening, then closed: nothing answers there
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_dead_upstream_is_warned_about_and_reported_as_upstream_unreachable(
    procs: list[Proc],
    tmp_path: Path,
    clean_env: dict[str, str],
    modern_py: Path,
) -> None:
    port = closed_port()
    capdir = tmp_path / "caps"
    cli, listen = record_http(procs, f"http://127.0.0.1:{port}/mcp", capdir, clean_env)
    warning = cli.wait_for(WARNING)
    assert warning.group(1) == f"127.0.0.1:{port}"
    assert "Connect call failed" in warning.string or "refused" in warning.string.lower(), warning.string

    client = subprocess.run(
        [str(modern_py), str(MODERN_CLIENT), "--calls", "1", "--timeout", "20", "--url", listen],
        capture_output=True, env=clean_env, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert client.returncode == 0, client.stderr
    report = orjson.loads(client.stdout.splitlines()[-1])
    assert report["sessions"][0]["connected"] is False  # the client saw the failure too
    assert cli.stop(signal.SIGINT) == 0

    analysis = analyze([capdir])
    rules = {f.rule for f in analysis.findings}
    assert "upstream-unreachable" in rules
    assert "misread-crash" not in rules
    [finding] = [f for f in analysis.findings if f.rule == "upstream-unreachable"]
    assert "[Errno 111] Connect call failed" in finding.message
    assert finding.evidence
    [verdict] = analysis.servers
    why = "; ".join(e.note for e in verdict.evidence)
    assert "upstream unreachable" in why and "[Errno 111]" in why, why


def test_live_upstream_gives_no_warning(
    procs: list[Proc],
    tmp_path: Path,
    clean_env: dict[str, str],
) -> None:
    port = start_server(procs, clean_env)
    cli, _listen = record_http(procs, f"http://127.0.0.1:{port}/mcp", tmp_path / "caps", clean_env)
    cli.wait_for(r"writing captures to")
    assert cli.stop(signal.SIGINT) == 0
    assert not any("does not answer" in line for line in cli.lines), cli.lines


def test_a_token_in_the_upstream_host_is_masked_in_the_warning(
    procs: list[Proc],
    tmp_path: Path,
    clean_env: dict[str, str],
) -> None:
    """The start line masks a well-known credential in the upstream's host name; the warning that the
    upstream does not answer printed that host as it was, to terminals and CI logs."""
    token = "ghp_" + "A1b2" * 9
    cli, _listen = record_http(procs, f"http://{token}.invalid:9/mcp", tmp_path / "caps", clean_env)
    warning = cli.wait_for(WARNING)
    assert warning.group(1) == "***.invalid:9"
    assert cli.stop(signal.SIGINT) == 0
    assert not any(token in line for line in cli.lines), cli.lines
