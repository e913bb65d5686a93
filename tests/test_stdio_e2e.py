"""`erascope record stdio` between real MCP SDK peers.

The client is the real `mcp` 2.3.0 `Client(mode="auto")`; it launches the tee command (the console
script, exactly as an MCP host config would) in place of the server. Servers: the real `mcp` 2.3.0
dual-era stdio server and the real `mcp` 1.30.0 legacy one. The server itself runs behind a shell
pipeline with coreutils `tee` on both of its pipes, an independent recording of the exact bytes it
received and sent, which the capture's reconstruction must equal byte for byte.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from addon import format as fmt
from tests.peers.capture_tools import events, jsonrpc, lifecycle, only_capture, rebuild

pytestmark = pytest.mark.e2e

PEERS = Path(__file__).parent / "peers"
ERASCOPE = Path(sys.executable).parent / "erascope"
MODERN = "2026-07-28"
PROBE_META_VERSION = "io.modelcontextprotocol/protocolVersion"


def spied(python: Path, script: Path, spy_dir: Path) -> list[str]:
    """The server command wrapped so coreutils `tee` copies its stdin and stdout to files."""
    return [
        "sh",
        "-c",
        'tee "$1" | "$2" "$3" | tee "$4"',
        "sh",
        str(spy_dir / "c2s.bin"),
        str(python),
        str(script),
        str(spy_dir / "s2c.bin"),
    ]


async def call_add(params: StdioServerParameters) -> dict[str, Any]:
    """Connect in auto mode, call `add(2, 3)`, report what the client saw."""
    with anyio.fail_after(60):
        async with Client(params, mode="auto") as client:
            result = await client.call_tool("add", {"a": 2, "b": 3})
            return {
                "protocol_version": client.protocol_version,
                "text": [getattr(c, "text", None) for c in result.content],
                "is_error": bool(result.is_error),
            }


def through_tee(server_cmd: list[str], out_dir: Path, env: dict[str, str]) -> StdioServerParameters:
    return StdioServerParameters(
        command=str(ERASCOPE),
        args=["record", "stdio", "--out", str(out_dir), "--", *server_cmd],
        env=env,
    )


def direct(server_cmd: list[str], env: dict[str, str]) -> StdioServerParameters:
    return StdioServerParameters(command=server_cmd[0], args=server_cmd[1:], env=env)


def requests(messages: list[dict[str, Any]]) -> list[tuple[Any, str]]:
    return [(m["id"], m["method"]) for m in messages if "method" in m and "id" in m]


def test_modern_server_through_tee(tmp_path: Path, clean_env: dict[str, str], modern_py: Path) -> None:
    script = PEERS / "mcp_stdio_server.py"
    spy = tmp_path / "spy"
    spy.mkdir()
    out = tmp_path / "captures"

    without = anyio.run(call_add, direct([str(modern_py), str(script)], clean_env))
    with_tee = anyio.run(call_add, through_tee(spied(modern_py, script, spy), out, clean_env))

    # The client cannot tell the tee is there.
    assert with_tee == without
    assert with_tee == {"protocol_version": MODERN, "text": ["5"], "is_error": False}

    records = only_capture(out)
    # Byte for byte what the server received and sent, per the independent coreutils recording.
    c2s, s2c = rebuild(records, fmt.C2S), rebuild(records, fmt.S2C)
    assert c2s == (spy / "c2s.bin").read_bytes()
    assert s2c == (spy / "s2c.bin").read_bytes()
    assert c2s and s2c

    sent = jsonrpc(records, fmt.C2S)
    got = jsonrpc(records, fmt.S2C)
    reqs = requests(sent)
    assert reqs[0][1] == "server/discover"
    assert sent[0]["params"]["_meta"][PROBE_META_VERSION] == MODERN
    # mcp 2.3.0 follows the call with `tools/list` (to validate the result against the output schema).
    assert [m for _, m in reqs[1:]] in (["tools/call"], ["tools/call", "tools/list"])
    assert "initialize" not in [m for _, m in reqs]
    answers = {m["id"]: m for m in got if "id" in m and "method" not in m}
    discover = answers[reqs[0][0]]["result"]
    assert MODERN in discover["supportedVersions"]
    call = answers[reqs[1][0]]["result"]
    assert call["content"][0]["text"] == "5"
    # Order on the wire: the probe's answer came back before the tool call went out.
    order = [(r[fmt.F_DIR], r[fmt.F_SEQ]) for r in records if r[fmt.F_TYPE] == fmt.FRAME]
    assert order == sorted(order, key=lambda x: x[1])

    header = records[0]
    assert header[fmt.F_TYPE] == fmt.HEADER
    assert header["argv"][:2] == ["sh", "-c"]
    assert header["redaction"]["env"] == "not recorded"
    assert header[fmt.F_SERVER] == "sh -c"
    ev = events(records)
    assert ev[0] == fmt.EV_SPAWN
    assert {fmt.EV_CLIENT_EOF, fmt.EV_SERVER_EOF, fmt.EV_EXIT} <= set(ev)
    assert ev.index(fmt.EV_CLIENT_EOF) < ev.index(fmt.EV_EXIT)
    assert lifecycle(records, fmt.EV_EXIT)["status"] == 0
    assert fmt.EV_LINGER_END not in ev  # the client closed stdin first: nothing to linger for
    assert not any(r[fmt.F_TYPE] == fmt.CAPTURE_ERROR for r in records)


@pytest.mark.legacy_peer
def test_legacy_server_through_tee(tmp_path: Path, clean_env: dict[str, str], legacy_py: Path) -> None:
    script = PEERS / "legacy_stdio_server.py"
    spy = tmp_path / "spy"
    spy.mkdir()
    out = tmp_path / "captures"

    without = anyio.run(call_add, direct([str(legacy_py), str(script)], clean_env))
    with_tee = anyio.run(call_add, through_tee(spied(legacy_py, script, spy), out, clean_env))
    assert with_tee == without
    assert with_tee["text"] == ["5"]
    assert with_tee["protocol_version"] != MODERN

    records = only_capture(out)
    assert rebuild(records, fmt.C2S) == (spy / "c2s.bin").read_bytes()
    assert rebuild(records, fmt.S2C) == (spy / "s2c.bin").read_bytes()

    sent = jsonrpc(records, fmt.C2S)
    got = jsonrpc(records, fmt.S2C)
    reqs = requests(sent)
    methods = [m for _, m in reqs]
    assert methods[0] == "server/discover"
    assert methods[1] == "initialize"
    assert "tools/call" in methods[2:]
    notes = [m["method"] for m in sent if "method" in m and "id" not in m]
    assert notes[0] == "notifications/initialized"
    answers = {m["id"]: m for m in got if "id" in m and "method" not in m}
    probe_answer = answers[reqs[0][0]]
    # mcp 1.x answers the unknown method with -32602, not -32601 (see WIRE-FACTS).
    assert probe_answer["error"]["code"] == -32602
    assert "result" in answers[reqs[1][0]]
    assert lifecycle(records, fmt.EV_EXIT)["status"] == 0


def test_banner_on_stdout_is_recorded_and_skipped(tmp_path: Path, clean_env: dict[str, str], modern_py: Path) -> None:
    """A real mcp 2.3.0 server that logs a line to stdout first: the client skips it, the capture keeps it."""
    script = PEERS / "mcp_stdio_server.py"
    out = tmp_path / "captures"
    cmd = [str(modern_py), str(script), "--banner", "starting up..."]
    result = anyio.run(call_add, through_tee(cmd, out, clean_env))
    assert result["text"] == ["5"]
    records = only_capture(out)
    assert rebuild(records, fmt.S2C).startswith(b"starting up...\n")
    assert records[0][fmt.F_SERVER] == f"{modern_py.name} mcp_stdio_server.py"
