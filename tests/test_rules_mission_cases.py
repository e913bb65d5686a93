"""The mission's cases the rules misread: a slow dual-era server, a transient 5xx to one probe, a split
fleet's pinned clients, an old stdio process after an upgrade, a retry on a fresh spawn (real
`CaptureWriter` captures through the whole pipeline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analyzer.pipeline import analyze
from tests.test_messages import ENVELOPE, MODERN, Cap, discover_result, err, init, init_result, modern_headers, probe


def _run(path: Path) -> Any:
    return analyze([str(path)])


def _call(i: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": "q", "arguments": {}, "_meta": dict(ENVELOPE)}}


def _ok(i: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "result": {"content": [], "resultType": "complete"}}


def _headers(method: str, ua: str) -> list[list[str]]:
    return [["Content-Type", "application/json"], ["MCP-Protocol-Version", MODERN], ["Mcp-Method", method],
            ["User-Agent", ua]]


def _a_modern_then_b_probes(tmp_path: Path, server: str) -> Cap:
    """Client A probes `server` over HTTP and gets a modern DiscoverResult (ttl 10 min) from node
    10.0.0.1; client B (`other/1`) then probes: the capture, on B's connection, awaiting B's answer."""
    cap = Cap(tmp_path, transport="http", server=server, conn="A")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, discover_result(1, ttl=600000), peer="10.0.0.1:8000")
    cap.conn = "B"
    cap.http_request("f2", probe(1), headers=_headers("server/discover", "other/1"))
    return cap


def test_a_late_discover_result_still_proves_modern(tmp_path: Path) -> None:
    # A slow dual-era server: the client gives up after 10 s and falls back (correct), then the
    # DiscoverResult arrives. The server speaks both eras; it was reported `legacy`.
    cap = Cap(tmp_path, server="slowdual")
    cap.life("spawn", pid=1)
    cap.c2s(probe(1))
    cap.c2s(init(2), dt=10.0)
    cap.s2c(discover_result(1), dt=0.5)
    cap.s2c(init_result(2))
    cap.close()
    [v] = _run(tmp_path).servers
    assert (v.era, v.modern_support, v.legacy_support) == ("dual-era", "yes", "yes")
    assert v.probe_outcomes == {"no-answer": 1}


def test_a_transient_500_to_a_probe_is_no_legacy_answer_for_the_rules(tmp_path: Path) -> None:
    # A modern server; one probe of another client gets a plain-text 500 (no era, as REPORT.md says).
    cap = _a_modern_then_b_probes(tmp_path, "api")
    cap.http_response("f2", 500, "Internal Server Error", peer="10.0.0.2:8000")
    cap.conn = "A"
    for i in (2, 3, 4):
        cap.http_request(f"c{i}", _call(i), headers=modern_headers("tools/call"))
        cap.http_response(f"c{i}", 200, _ok(i), peer="10.0.0.1:8000")
    cap.conn = "B"
    cap.http_request("f3", probe(2), headers=_headers("server/discover", "other/1"), dt=1.0)
    cap.http_response("f3", 200, discover_result(2), peer="10.0.0.2:8000")
    cap.close()
    a = _run(tmp_path)
    assert [v.era for v in a.servers] == ["modern"]
    assert [f.rule for f in a.findings] == []


def test_modern_requests_served_modern_are_not_stale_in_a_split_fleet(tmp_path: Path) -> None:
    # Sticky connections: A reaches the upgraded node, B the old one. A's calls all get modern results:
    # its verdict is right for what it talks to. The split is rollout-split's, not a stale client's.
    cap = _a_modern_then_b_probes(tmp_path, "fleet")
    cap.http_response("f2", 400, {"jsonrpc": "2.0", "id": "server-error",
                                  "error": {"code": -32600, "message": "Bad Request: Missing session ID"}},
                      peer="10.0.0.2:8000")
    cap.http_request("f3", init(2), headers=[["Content-Type", "application/json"], ["User-Agent", "other/1"]])
    cap.http_response("f3", 200, init_result(2), peer="10.0.0.2:8000", headers=[["mcp-session-id", "s1"]])
    cap.conn = "A"
    for i in (3, 4, 5):
        cap.http_request(f"c{i}", _call(i), headers=modern_headers("tools/call"))
        cap.http_response(f"c{i}", 200, _ok(i), peer="10.0.0.1:8000")
    cap.close()
    a = _run(tmp_path)
    assert [v.era for v in a.servers] == ["inconsistent"]
    assert [f.rule for f in a.findings] == ["rollout-split"]


def test_an_old_stdio_process_after_an_upgrade_is_not_stale(tmp_path: Path) -> None:
    # A's process was spawned from the legacy binary before the upgrade and still is that binary;
    # B's later spawn runs the upgraded one. A's session requests on its old process are not stale.
    def tools_list(i: int, meta: bool = False) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": i, "method": "tools/list", "params": {"_meta": dict(ENVELOPE)} if meta else {}}

    a = Cap(tmp_path, server="weather", conn="A")
    a.life("spawn", pid=1, parent_argv=["hostA"])
    a.c2s(probe(1))
    a.s2c(err(1, -32602, "Invalid request parameters", ""))
    a.c2s(init(2))
    a.s2c(init_result(2))
    b = Cap(tmp_path, server="weather", conn="B")
    b.t = a.t + 60
    b.life("spawn", pid=2, parent_argv=["hostB"])
    b.c2s(probe(1))
    b.s2c(discover_result(1, ttl=3600000))
    b.c2s(tools_list(2, meta=True))
    b.s2c({"jsonrpc": "2.0", "id": 2, "result": {"tools": [], "resultType": "complete"}})
    a.t = b.t + 60
    for i in (3, 4, 5):
        a.c2s(tools_list(i))
        a.s2c({"jsonrpc": "2.0", "id": i, "result": {"tools": []}})
    a.close()
    b.close()
    assert [f.rule for f in _run(tmp_path).findings] == []


def test_a_retry_on_a_fresh_stdio_process_may_reuse_the_id(tmp_path: Path) -> None:
    # Ids are per connection: the re-probe on a new spawn cannot be mistaken for the refused one's answer.
    def vprobe(i: Any, version: str) -> dict[str, Any]:
        p = probe(i)
        p["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = version
        return p

    a = Cap(tmp_path, server="api", conn="A")
    a.life("spawn", pid=1, parent_argv=["host"])
    a.c2s(vprobe(1, "2099-01-01"))
    a.s2c(err(1, -32022, "Unsupported protocol version", {"supported": [MODERN], "requested": "2099-01-01"}))
    a.life("exit", code=0)
    b = Cap(tmp_path, server="api", conn="B")
    b.t = a.t + 0.2
    b.life("spawn", pid=2, parent_argv=["host"])
    b.c2s(vprobe(1, MODERN))
    b.s2c(discover_result(1))
    a.close()
    b.close()
    assert [f.rule for f in _run(tmp_path).findings] == []
    # on the same connection the same id is still reported
    same = tmp_path / "same"
    c = Cap(same, server="api", conn="C")
    c.c2s(vprobe(1, "2099-01-01"))
    c.s2c(err(1, -32022, "Unsupported protocol version", {"supported": [MODERN], "requested": "2099-01-01"}))
    c.c2s(vprobe(1, MODERN))
    c.s2c(discover_result(1))
    c.close()
    assert [f.rule for f in _run(same).findings] == ["retry-same-id"]
