"""Era verdicts: each label with positive and negative inline captures, evidence and timelines."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import orjson
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.eras import ServerVerdict
from analyzer.schema import ERA_LABELS
from tests.test_messages import (
    ENVELOPE,
    MODERN,
    Cap,
    discover_result,
    err,
    init,
    init_result,
    modern_headers,
    probe,
    run,
)


def verdict(path: Path) -> ServerVerdict:
    servers = run(path).servers
    assert len(servers) == 1
    assert servers[0].era in ERA_LABELS
    return servers[0]


def test_dual_era(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1), conn="a")
    cap.s2c(discover_result(1, (MODERN, "2025-11-25")), conn="a")
    cap.c2s(init(1), conn="b")
    cap.s2c(init_result(1), conn="b")
    v = verdict(cap.close())
    assert (v.era, v.modern_support, v.legacy_support) == ("dual-era", "yes", "yes")
    assert v.versions == ["2025-11-25", MODERN]
    assert v.connections == 2 and v.probes == 1 and v.inits == 1
    assert {(e.line, e.note) for e in v.evidence} == {(3, "probe discover-result"), (5, "initialize served")}


def test_modern_only(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1), conn="a")
    cap.s2c(discover_result(1), conn="a")
    cap.c2s(init(1), conn="b")
    cap.s2c(err(1, -32022, "Unsupported protocol version", {"supported": [MODERN]}), conn="b")
    v = verdict(cap.close())
    assert (v.era, v.modern_support, v.legacy_support) == ("modern-only", "yes", "no")


def test_modern_only_from_initialize_refusal_alone(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(init(1))
    cap.s2c(err(1, -32022, "Unsupported protocol version", {"supported": [MODERN]}))
    assert verdict(cap.close()).era == "modern-only"


def test_modern(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(discover_result(1))
    v = verdict(cap.close())
    assert (v.era, v.modern_support, v.legacy_support) == ("modern", "yes", "unknown")


def test_legacy_advertisement_is_not_modern(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(discover_result(1, ("2025-11-25",)))
    cap.c2s(init(2))
    cap.s2c(init_result(2))
    v = verdict(cap.close())
    assert (v.era, v.modern_support, v.legacy_support) == ("legacy", "no", "yes")


def test_legacy_python_sdk_stdio(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(err(1, -32602, "Invalid request parameters", ""))
    cap.c2s(init(2))
    cap.s2c(init_result(2))
    v = verdict(cap.close())
    assert (v.era, v.modern_support, v.legacy_support) == ("legacy", "no", "yes")
    assert [e.line for e in v.evidence] == [3, 5]


def test_legacy_answer_alone_is_legacy_not_broken(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(err(1, -32601, "Method not found"))
    v = verdict(cap.close())
    assert (v.era, v.modern_support, v.legacy_support) == ("legacy", "no", "unknown")


def test_malformed_probe_proves_nothing(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1, envelope=False))
    cap.s2c(err(1, -32602, "Invalid request parameters", ""))
    v = verdict(cap.close())
    assert (v.era, v.modern_support) == ("unknown", "unknown")


def test_broken_crash_garbage_silence(tmp_path: Path) -> None:
    cap = Cap(tmp_path, conn="a")
    cap.c2s(probe(1), conn="a")
    cap.life("exit", code=1, conn="a")
    cap.c2s(probe(1), conn="b")
    cap.s2c("panic: unexpected request", conn="b")
    cap.life("server-eof", conn="b")
    cap.c2s(probe(1), conn="c")
    v = verdict(cap.close())
    assert (v.era, v.modern_support, v.legacy_support) == ("broken", "unknown", "unknown")
    assert v.probe_outcomes == {"connection-died": 1, "garbage": 1, "no-answer": 1}
    assert [e.line for e in v.evidence] == [3, 5, 7]  # exit, the non-JSON line, the unanswered probe


def test_broken_then_served_is_not_broken(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1), conn="a")
    cap.life("exit", code=1, conn="a")
    cap.c2s(init(1), conn="b")
    cap.s2c(init_result(1), conn="b")
    assert verdict(cap.close()).era == "legacy"


def test_unknown_without_evidence(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    cap.s2c({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}})
    v = verdict(cap.close())
    assert (v.era, v.modern_support, v.legacy_support, v.timeline) == ("unknown", "unknown", "unknown", [])


def test_upgrade_mid_capture_timeline(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1), conn="a")
    cap.s2c(err(1, -32602, "Invalid request parameters", ""), conn="a")
    cap.c2s(init(2), conn="a")
    cap.s2c(init_result(2), conn="a")
    cap.c2s(probe(1), conn="b", dt=3600.0)  # an hour later, after the upgrade
    cap.s2c(discover_result(1), conn="b")
    v = verdict(cap.close())
    assert v.era == "modern"  # legacy evidence from before the upgrade is forgotten
    assert [(t.era, t.evidence.line) for t in v.timeline] == [("legacy", 3), ("modern", 7)]
    assert v.timeline[1].ts - v.timeline[0].ts > 3000


def test_evidence_of_a_verdict_holds_no_answer_of_the_server_before_its_upgrade(tmp_path: Path) -> None:
    """Legacy support starts over when modern support flips (an upgrade): the `initialize` the old
    server served is forgotten by the verdict, and was still cited as its evidence."""
    cap = Cap(tmp_path)
    cap.c2s(probe(1), conn="a")
    cap.s2c(err(1, -32602, "Invalid request parameters", ""), conn="a")
    cap.c2s(init(2), conn="a")
    cap.s2c(init_result(2), conn="a")  # line 5: the old, legacy server
    cap.c2s(probe(1), conn="b", dt=3600.0)  # upgraded to a dual-era server
    cap.s2c(discover_result(1, (MODERN, "2025-11-25")), conn="b")
    cap.c2s(init(1), conn="c")
    cap.s2c(init_result(1), conn="c")
    v = verdict(cap.close())
    assert v.era == "dual-era"
    assert sorted((e.line, e.note) for e in v.evidence) == [(7, "probe discover-result"), (9, "initialize served")]


def test_inconsistent_two_peers_disagree(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    for n in range(4):
        flow = f"f{n}"
        cap.http_request(flow, probe(n), headers=modern_headers())
        if n % 2 == 0:
            cap.http_response(flow, 200, discover_result(n), peer="10.0.0.1:8000")
        else:
            cap.http_response(flow, 400, err("server-error", -32600, "Bad Request: Missing session ID"),
                              peer="10.0.0.2:8000")
    v = verdict(cap.close())
    assert v.era == "inconsistent"
    assert v.peers == ["10.0.0.1:8000", "10.0.0.2:8000"]
    assert [e.line for e in v.evidence] == [3, 5, 7, 9]
    assert [t.era for t in v.timeline] == ["modern", "inconsistent"]


def test_modern_calls_refused_as_sessionless_by_another_node(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "add", "_meta": ENVELOPE}}
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, discover_result(1), peer="10.0.0.1:8000")
    cap.http_request("f2", call, headers=modern_headers("tools/call"))
    cap.http_response("f2", 400, err("server-error", -32600, "Bad Request: Missing session ID"), peer="10.0.0.2:8000")
    v = verdict(cap.close())
    assert (v.era, v.modern_support) == ("inconsistent", "mixed")  # one node modern, the other legacy
    assert [e.line for e in v.evidence] == [3, 5]


def test_ordinary_errors_on_modern_calls_prove_nothing(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "add", "_meta": ENVELOPE}}
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, discover_result(1), peer="10.0.0.1:8000")
    cap.http_request("f2", call, headers=modern_headers("tools/call"))
    cap.http_response("f2", 400, err(2, -32602, "Invalid params: missing argument b"), peer="10.0.0.2:8000")
    assert verdict(cap.close()).era == "modern"


def test_upgrade_on_the_same_peer_is_not_inconsistent(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 400, err("server-error", -32600, "Bad Request: Missing session ID"))
    cap.http_request("f2", probe(2), headers=modern_headers(), dt=5.0)
    cap.http_response("f2", 200, discover_result(2))
    v = verdict(cap.close())
    assert v.era == "modern"
    assert [t.era for t in v.timeline] == ["legacy", "modern"]


def test_flip_back_after_the_window_is_not_inconsistent(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1), conn="a")
    cap.s2c(discover_result(1), conn="a")
    cap.c2s(probe(1), conn="b", dt=1000.0)
    cap.s2c(err(1, -32602, "Invalid request parameters", ""), conn="b")  # rolled back
    cap.c2s(probe(1), conn="c", dt=1000.0)
    cap.s2c(discover_result(1), conn="c")  # upgraded again
    v = verdict(cap.close())
    assert v.era == "modern"
    assert [t.era for t in v.timeline] == ["modern", "legacy", "modern"]


def test_support_is_mixed_while_inconsistent_and_plain_once_settled(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    for n, conn in enumerate("abc"):
        cap.c2s(probe(1), conn=conn, dt=1.0)
        if n == 1:
            cap.s2c(err(1, -32602, "Invalid request parameters", ""), conn=conn)
        else:
            cap.s2c(discover_result(1), conn=conn)
    path = cap.close()
    v = verdict(path)
    assert (v.era, v.modern_support, v.legacy_support) == ("inconsistent", "mixed", "unknown")
    cap = Cap(tmp_path / "later")
    for n, conn in enumerate("abcd"):
        cap.c2s(probe(1), conn=conn, dt=400.0 if n == 3 else 1.0)
        if n == 1:
            cap.s2c(err(1, -32602, "Invalid request parameters", ""), conn=conn)
        else:
            cap.s2c(discover_result(1), conn=conn)
    v = verdict(cap.close())
    assert (v.era, v.modern_support) == ("modern", "yes")
    assert [t.era for t in v.timeline] == ["modern", "legacy", "inconsistent", "modern"]


# --- real peers through the real stdio tee -------------------------------------------------------
PEERS = Path(__file__).parent / "peers"
ERASCOPE = Path(sys.executable).parent / "erascope"


async def _call_add(params: StdioServerParameters, mode: str) -> str | None:
    with anyio.fail_after(60):
        async with Client(params, mode=mode) as client:
            await client.call_tool("add", {"a": 2, "b": 3})
            return client.protocol_version


def _record(python: Path, script: Path, out: Path, env: dict[str, str], server: str, mode: str = "auto") -> str | None:
    params = StdioServerParameters(
        command=str(ERASCOPE),
        args=["record", "stdio", "--server", server, "--out", str(out), "--", str(python), str(script)],
        env=env,
    )
    version = anyio.run(_call_add, params, mode)
    _wait_for_exit_records(out)
    return version


def _wait_for_exit_records(out: Path, limit: float = 30.0) -> None:
    """The client may return before the tee has written its last records; wait for each `exit`."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        files = list(out.glob("*.jsonl"))
        if files and all('"event":"exit"' in f.read_text() for f in files):
            return
        time.sleep(0.05)


@pytest.mark.e2e
def test_real_dual_era_server_through_tee(tmp_path: Path, clean_env: dict[str, str], modern_py: Path) -> None:
    out = tmp_path / "caps"
    script = PEERS / "mcp_stdio_server.py"
    assert _record(modern_py, script, out, clean_env, "dual") == MODERN
    a = run(out)
    assert a.probes.select("outcome", "well_formed", "modern_versions").rows() == [("discover-result", True, True)]
    (v,) = a.servers
    assert (v.server, v.era, v.modern_support, v.legacy_support) == ("dual", "modern", "yes", "unknown")
    assert MODERN in v.versions
    # A legacy-mode client on another spawn of the same server key shows it serves both eras.
    assert _record(modern_py, script, out, clean_env, "dual", mode="legacy") != MODERN
    (v,) = run(out).servers
    assert (v.era, v.modern_support, v.legacy_support, v.connections) == ("dual-era", "yes", "yes", 2)


@pytest.mark.e2e
@pytest.mark.legacy_peer
def test_real_legacy_server_through_tee(tmp_path: Path, clean_env: dict[str, str], legacy_py: Path) -> None:
    out = tmp_path / "caps"
    assert _record(legacy_py, PEERS / "legacy_stdio_server.py", out, clean_env, "old") != MODERN
    a = run(out)
    assert a.probes.select("outcome", "error_code", "well_formed").rows() == [("legacy-answer", -32602, True)], a.probes
    assert a.inits.get_column("outcome").to_list() == ["served"]
    (v,) = a.servers
    assert (v.server, v.era, v.modern_support, v.legacy_support) == ("old", "legacy", "no", "yes")
    assert a.inputs.malformed == [] and a.inputs.torn == []


def _without_server_keys(tmp_path: Path) -> Path:
    """A capture whose header and records name no server (written by hand, or cut by an editor):
    its probe and answer are still one server's traffic, the server without a key."""
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(discover_result(1))
    path = cap.close()
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    path.write_bytes(b"".join(orjson.dumps({k: v for k, v in r.items() if k != "server"}) + b"\n" for r in lines))
    return path


def test_traffic_without_a_server_key_gets_its_own_verdict(tmp_path: Path) -> None:
    v = verdict(_without_server_keys(tmp_path))
    assert v.server is None
    assert (v.era, v.probes, v.probe_outcomes) == ("modern", 1, {"discover-result": 1})


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "html"])
def test_every_format_reports_the_server_without_a_key(tmp_path: Path, fmt: str) -> None:
    path = _without_server_keys(tmp_path)
    out = tmp_path / f"report.{fmt}"
    result = CliRunner().invoke(app, ["analyze", str(path), "-f", fmt, "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert "modern" in out.read_text()


def test_an_initialize_served_after_the_probe_timeout_is_served(tmp_path: Path) -> None:
    # Clients wait for `initialize` without a timeout (the `mcp` 2.3.0 client's fallback has
    # none): a slow start that served the session read as `no-answer` and the server as `broken`.
    cap = Cap(tmp_path)
    cap.c2s(init(1))
    cap.s2c(init_result(1), dt=12)
    cap.c2s({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    cap.s2c({"jsonrpc": "2.0", "id": 2, "result": {"tools": []}})
    v = verdict(cap.close())
    assert v.init_outcomes == {"served": 1}
    assert (v.era, v.legacy_support) == ("legacy", "yes")


@pytest.mark.parametrize("versions", [("2099-01-01",), ()])
def test_a_discover_result_without_handshake_versions_is_no_legacy_advertisement(
    tmp_path: Path, versions: tuple[str, ...]
) -> None:
    # Only a DiscoverResult listing handshake versions alone advertises legacy; unknown version
    # strings are unknown, not "newer" or "older", and an empty list names none.
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(discover_result(1, versions))
    v = verdict(cap.close())
    assert (v.era, v.modern_support) == ("unknown", "unknown")
