"""Rules on traffic recorded live: the real `mcp` 2.3.0 client, the real recording tee, scripted servers.

The servers are small scripts (standard library only) that behave the way field reports describe:
one answers the probe with -32020 (HeaderMismatch) and then serves the legacy handshake, one exits
when the first request is not `initialize`. The client is `mcp.Client` as a host would use it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import orjson
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from analyzer.pipeline import analyze

pytestmark = pytest.mark.e2e

SERVER = textwrap.dedent(
    """
    import json, sys

    mode = sys.argv[1]
    first = True
    for line in sys.stdin:
        msg = json.loads(line)
        method, mid = msg.get("method"), msg.get("id")
        if first and mode == "exit-unless-initialize" and method != "initialize":
            sys.exit(1)
        first = False
        if mid is None:
            continue
        if method == "server/discover":
            reply = {"error": {"code": -32020, "message": "Header mismatch"}}
        elif method == "initialize":
            reply = {"result": {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                                "serverInfo": {"name": "scripted", "version": "1"}}}
        elif method == "tools/list":
            reply = {"result": {"tools": []}}
        else:
            reply = {"error": {"code": -32601, "message": "Method not found"}}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, **reply}) + "\\n")
        sys.stdout.flush()
    """
)


def _recorded(tmp_path: Path, clean_env: dict[str, str], mode: str, server: str) -> StdioServerParameters:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    erascope = Path(sys.executable).with_name("erascope")
    cmd = [str(erascope), "record", "stdio", "--server", server, "--out", str(tmp_path / "cap"), "--linger", "0.5"]
    return StdioServerParameters(
        command=cmd[0], args=[*cmd[1:], "--", sys.executable, str(script), mode], env=clean_env
    )


def test_mcp_client_falls_back_after_header_mismatch_is_misread_modern(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    params = _recorded(tmp_path, clean_env, "header-mismatch", "hdr")

    async def main() -> str:
        with anyio.fail_after(30):
            async with Client(params, mode="auto") as client:
                await client.list_tools()
                return client.protocol_version

    assert anyio.run(main) == "2025-11-25"  # the client did settle on the legacy handshake
    analysis = analyze([tmp_path / "cap"])
    rules = {f.rule for f in analysis.findings}
    assert "misread-modern" in rules
    [finding] = [f for f in analysis.findings if f.rule == "misread-modern"]
    assert finding.server == "hdr"
    assert finding.details["answers"] == ["modern-error -32020"]
    assert {e.note for e in finding.evidence} == {"probe", "modern answer: modern-error -32020", "initialize after it"}


def test_exit_on_probe_then_legacy_on_fresh_process_is_probe_kills_server(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    params = _recorded(tmp_path, clean_env, "exit-unless-initialize", "rusty")

    async def main() -> list[str]:
        outcomes = []
        # the host-level recovery: auto mode fails on the dead process, a fresh legacy process works
        for mode in ("auto", "legacy"):
            try:
                with anyio.fail_after(30):
                    async with Client(params, mode=mode) as client:
                        await client.list_tools()
                        outcomes.append(f"{mode}: ok")
            except Exception as exc:  # the SDK's own failure is the observation
                outcomes.append(f"{mode}: {type(exc).__name__}")
            await anyio.sleep(0.6)  # past the recorder's linger, so the two spawns do not overlap
        return outcomes

    outcomes = anyio.run(main)
    assert outcomes[1] == "legacy: ok", outcomes
    assert outcomes[0] != "auto: ok", outcomes
    analysis = analyze([tmp_path / "cap"])
    by_rule = {f.rule: f for f in analysis.findings}
    assert "probe-kills-server" in by_rule, analysis.findings
    assert "misread-crash" not in by_rule
    assert by_rule["probe-kills-server"].server == "rusty"
    assert os.listdir(tmp_path / "cap")


@pytest.mark.legacy_peer
def test_legacy_client_retrying_a_modern_only_server_is_stale_era(
    tmp_path: Path, clean_env: dict[str, str], legacy_py: Path
) -> None:
    # a genuine mcp 1.30.0 client started twice against the SDK's modern-only loop: refused twice, never probes
    root = Path(__file__).resolve().parent.parent
    peers = root / "captures" / "peers"
    erascope = Path(sys.executable).with_name("erascope")
    tee = [str(erascope), "record", "stdio", "--server", "mo", "--out", str(tmp_path / "cap"), "--linger", "0.3"]
    server = [sys.executable, str(peers / "modern_only_server.py")]
    for _ in range(2):
        done = subprocess.run(
            [str(legacy_py), str(peers / "legacy_client.py"), "--", *tee, "--", *server],
            env=clean_env,
            cwd=root,
            capture_output=True,
            timeout=120,
        )
        [session] = orjson.loads(done.stdout.splitlines()[-1])["sessions"]
        assert session["connected"] is False, session
        assert session["error"].get("code") == -32022, session
    analysis = analyze([tmp_path / "cap"])
    assert analysis.inits["outcome"].to_list() == ["refused-named", "refused-named"]
    [stale] = [f for f in analysis.findings if f.rule == "stale-era"]
    assert stale.server == "mo"
    assert stale.details["requests"] == 2
    assert "refuses it with unsupported-version" in stale.message
