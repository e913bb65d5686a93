"""watch and stale-era case (c): a modern request the server answers with a result does not count, so
a round that has read the request but not its answer yet cannot decide the finding. watch reported a
stale-era warning `analyze` never gives (withdrawn a round later, but `--fail-on warning` had exited
on it); it waits for the answer as it waits for a probe's, up to the probe timeout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.test_messages import Cap, discover_result, init, init_result, modern_headers, probe
from tests.test_rules_mission_cases import _call, _headers, _ok
from tests.test_watch import analyzed, expected, reported, watched_line_by_line


def _rolled_back(out: Path, answer: bool) -> Path:
    """A probes modern; 100 s later B's probe gets the legacy answer; 200 s after that A calls a tool
    (modern), answered with a result 2 s later (`answer`) or never."""
    cap = Cap(out, transport="http", server="fleet", conn="A")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, discover_result(1, ttl=600000), peer="10.0.0.1:8000")
    cap.conn = "B"
    cap.http_request("f2", probe(1), headers=_headers("server/discover", "other/1"), dt=100)
    cap.http_response(
        "f2",
        400,
        {
            "jsonrpc": "2.0",
            "id": "server-error",
            "error": {"code": -32600, "message": "Bad Request: Missing session ID"},
        },
        peer="10.0.0.2:8000",
    )
    cap.http_request("f3", init(2), headers=[["Content-Type", "application/json"], ["User-Agent", "other/1"]])
    cap.http_response("f3", 200, init_result(2), peer="10.0.0.2:8000", headers=[["mcp-session-id", "s1"]])
    cap.conn = "A"
    cap.http_request("c3", _call(3), headers=modern_headers("tools/call"), dt=200)
    if answer:
        cap.http_response("c3", 200, _ok(3), peer="10.0.0.1:8000", dt=2.0)
    return cap.close()


def _watched(tmp_path: Path, answer: bool) -> tuple[list[dict[str, Any]], Path]:
    src = _rolled_back(tmp_path / "src", answer)
    lines = src.read_bytes().splitlines(keepends=True)
    live = tmp_path / "live"
    return watched_line_by_line(lines, live, src.name, idle=60.0), live


def test_a_modern_request_answered_later_is_never_reported_stale(tmp_path: Path) -> None:
    events, live = _watched(tmp_path, answer=True)
    assert [e for e in events if e["rule"] == "stale-era"] == []
    assert reported(events) == expected(analyzed(live))
    assert expected(analyzed(live))[0] == set()


def test_a_modern_request_never_answered_is_reported_once_the_timeout_passed(tmp_path: Path) -> None:
    events, live = _watched(tmp_path, answer=False)
    assert [e["event"] for e in events if e["rule"] == "stale-era"] == ["finding"]
    assert reported(events) == expected(analyzed(live))
    assert {f[0] for f in expected(analyzed(live))[0]} == {"stale-era"}
