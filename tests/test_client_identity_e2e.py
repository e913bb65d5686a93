"""Two real programs that send one clientInfo stay two clients; one program run twice stays one.

The `mcp` 2.3.0 client (this venv) and the `mcp` 1.30.0 client (the legacy peer environment) both
send `{"name": "mcp", "version": "0.1.0"}`. Over stdio the real tee records the host process that
started it; over HTTP the real recorder records the User-Agent (`python-httpx2/…` against
`python-httpx/…`) and the client address. The analyzer must tell them apart by that.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from analyzer.pipeline import analyze
from tests.test_http_e2e import BIN, Proc, record_http, start_server

pytestmark = pytest.mark.e2e



ROOT = Path(__file__).resolve().parent.parent
MODERN_CLIENT = ROOT / "captures" / "peers" / "modern_client.py"
LEGACY_CLIENT = ROOT / "captures" / "peers" / "legacy_client.py"
STDIO_SERVER = ROOT / "tests" / "peers" / "mcp_stdio_server.py"


def run_client(argv: list[str], env: dict[str, str]) -> dict[str, object]:
    proc = subprocess.run(argv, capture_output=True, env=env, timeout=120, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return orjson.loads(proc.stdout.splitlines()[-1])


def clients_of(capdir: Path) -> list[dict[str, object]]:
    analysis = analyze([capdir])
    assert analysis.clients is not None
    assert len({row["server"] for row in analysis.clients.to_dicts()}) == 1
    return analysis.clients.to_dicts()


def test_stdio_two_sdks_with_one_client_info_are_two_clients(
    tmp_path: Path, clean_env: dict[str, str], modern_py: Path, legacy_py: Path
) -> None:
    capdir = tmp_path / "caps"
    tee = [str(BIN / "erascope"), "record", "stdio", "--out", str(capdir), "--", str(modern_py), str(STDIO_SERVER)]
    modern = [str(modern_py), str(MODERN_CLIENT), "--calls", "1", "--", *tee]
    legacy = [str(legacy_py), str(LEGACY_CLIENT), "--", *tee]
    for argv in (modern, legacy, modern):  # the modern program twice
        report = run_client(argv, clean_env)
        assert report.get("connected") or report["sessions"][0]["connected"], report  # type: ignore[index]
    rows = clients_of(capdir)
    assert {r["identity"]["name"] for r in rows} == {"mcp"}  # one clientInfo name for both SDKs
    by_host = {r["identity"]["host_process"]: r for r in rows}
    assert set(by_host) == {" ".join(modern), " ".join(legacy)}
    assert by_host[" ".join(modern)]["connections"] == 2
    assert by_host[" ".join(modern)]["acted_as"] == "modern"
    assert by_host[" ".join(legacy)]["connections"] == 1
    assert by_host[" ".join(legacy)]["acted_as"] == "legacy"  # no more "legacy+modern" for a merged row


def test_http_two_sdks_with_one_client_info_are_two_clients(
    procs: list[Proc],
    tmp_path: Path,
    clean_env: dict[str, str],
    modern_py: Path,
    legacy_py: Path,
) -> None:
    port = start_server(procs, clean_env)
    capdir = tmp_path / "caps"
    upstream = f"http://127.0.0.1:{port}/mcp"
    cli, listen = record_http(procs, upstream, capdir, clean_env)
    modern = [str(modern_py), str(MODERN_CLIENT), "--calls", "2", "--url", listen]
    legacy = [str(legacy_py), str(LEGACY_CLIENT), "--url", listen]
    for argv in (modern, legacy, modern):
        report = run_client(argv, clean_env)
        assert report.get("connected") or report["sessions"][0]["connected"], report  # type: ignore[index]
    assert cli.stop(signal.SIGINT) == 0
    rows = clients_of(capdir)
    assert {r["identity"]["name"] for r in rows} == {"mcp"}
    assert {r["identity"]["address"] for r in rows} == {"127.0.0.1"}
    agents = {str(r["identity"]["user_agent"]).split("/")[0]: r for r in rows}
    assert set(agents) == {"python-httpx2", "python-httpx"}
    assert agents["python-httpx2"]["acted_as"] == "modern" and agents["python-httpx2"]["probes"] == 2
    assert agents["python-httpx"]["acted_as"] == "legacy" and agents["python-httpx"]["probes"] == 0


@pytest.mark.skipif(sys.platform != "linux", reason="the host process is read from /proc")
def test_text_report_shows_the_host_process(tmp_path: Path, clean_env: dict[str, str], modern_py: Path) -> None:
    capdir = tmp_path / "caps"
    tee = [str(BIN / "erascope"), "record", "stdio", "--out", str(capdir), "--", str(modern_py), str(STDIO_SERVER)]
    run_client([str(modern_py), str(MODERN_CLIENT), "--calls", "1", "--", *tee], clean_env)
    out = subprocess.run(
        [str(BIN / "erascope"), "analyze", str(capdir), "--format", "markdown"], capture_output=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert f"mcp 0.1.0 · host: {modern_py} {MODERN_CLIENT}".encode() in out.stdout
