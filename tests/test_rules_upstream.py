"""upstream-unreachable: failures on the recorder's side of an HTTP exchange are not the client's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from analyzer.eras import server_verdicts
from analyzer.findings import Severity
from analyzer.rules import run_rules
from analyzer.rules.scenario import Scenario
from tests.test_messages import Cap, discover_result, err, init_result, modern_headers, probe, run

REFUSED = "Multiple exceptions: [Errno 111] Connect call failed ('127.0.0.1', 8000)"


def dead_upstream() -> Scenario:
    """The corpus' crash-on-start-http: probe and fallback initialize both get the proxy's 502."""
    s = Scenario()
    probe_conn = s.conn("api", "c1", client="mcp", version="0.1.0", transport="http")
    probe_conn.probe(0.0, "connection-died", upstream_error="connection-refused")
    s.conn("api", "c2", client="mcp", version="0.1.0", transport="http").init(
        0.1, "connection-died", upstream_error="connection-refused"
    )
    return s


def test_positive_a_refused_upstream_is_its_own_finding_with_evidence() -> None:
    [finding] = run_rules(dead_upstream().analysis(), only=["upstream-unreachable"])
    assert finding.severity is Severity.ERROR
    assert finding.server == "api" and finding.client is None
    assert finding.details["failures"] == 2
    assert finding.details["kinds"] == ["connection-refused ×2"]
    assert "[Errno 111] Connect call failed" in finding.message
    assert "server/discover" in finding.message and "initialize" in finding.message
    assert {(e.file, e.line) for e in finding.evidence} >= {("c1.jsonl", 2), ("c2.jsonl", 2)}
    assert any("connection-refused" in e.note for e in finding.evidence)


def test_negative_a_client_hanging_up_is_not_an_upstream_failure() -> None:
    s = Scenario()
    c = s.conn("api", "c1", transport="http")
    c.call(0.0, answer=False)
    c.upstream_error(0.5, "client-gone", "Client disconnected.")
    c.call(1.0, "notifications/x", answer=False)
    c.upstream_error(1.5, "recorder-stopped", "the recorder stopped while the flow was open")
    s.conn("weather", "spawn").probe(0.0, "connection-died")  # a stdio server that exits: its own crash
    assert run_rules(s.analysis(), only=["upstream-unreachable"]) == []


def test_upstream_reset_and_timeout_count_too() -> None:
    s = Scenario()
    c = s.conn("api", "c1", transport="http")
    c.call(0.0, answer=False)
    c.upstream_error(0.5, "upstream-reset", "peer closed connection without sending complete message body")
    c.call(1.0, answer=False)
    c.upstream_error(1.5, "timeout", "Client disconnected.")
    [finding] = run_rules(s.analysis(), only=["upstream-unreachable"])
    assert finding.details["kinds"] == ["timeout ×1", "upstream-reset ×1"]


def test_a_dead_upstream_is_not_a_misread_crash() -> None:
    rules = {f.rule for f in run_rules(dead_upstream().analysis())}
    assert "misread-crash" not in rules
    assert "probe-kills-server" not in rules
    assert "upstream-unreachable" in rules


def test_the_same_crash_on_a_real_server_is_still_a_misread_crash() -> None:
    # negative control: the server answered nothing because it died, not because the proxy could not reach it
    s = Scenario()
    s.conn("api", "c1", transport="http").probe(0.0, "connection-died")
    s.conn("api", "c2", transport="http").init(0.1, "connection-died")
    assert "misread-crash" in {f.rule for f in run_rules(s.analysis())}


def test_client_findings_caused_by_upstream_failures_say_so() -> None:
    # a client that keeps probing a dead upstream storms: the finding names the proxy's failures
    s = Scenario()
    for i in range(12):
        s.conn("api", f"c{i}", client="agent", transport="http").probe(
            i * 1.0, "connection-died", upstream_error="connection-refused"
        )
    findings = [f for f in run_rules(s.analysis()) if f.client is not None]
    assert findings, "expected a client finding (probe-storm)"
    for f in findings:
        assert "upstream failure" in f.message, f.message
        assert f.details["upstream_failures"] >= 1


def test_the_verdict_why_line_names_the_upstream_failure() -> None:
    a = dead_upstream().analysis()
    [verdict] = server_verdicts(a.messages, a.probes, a.inits)
    assert verdict.era == "broken"
    assert verdict.evidence
    for ev in verdict.evidence:
        assert "upstream unreachable" in ev.note and "[Errno 111] Connect call failed" in ev.note, ev.note


def _reset_after(cap: Cap, flow: str, body: dict[str, Any], answer: dict[str, Any] | None) -> None:
    """A flow whose event stream the server resets: after `answer` when given, else before any."""
    headers = modern_headers(str(body["method"]))
    cap.http_request(flow, body, headers=headers)
    cap.http_response(flow, 200, streamed=True)
    if answer is not None:
        cap.sse(flow, 0, answer)
    reset = "HTTP/1 protocol error: peer closed connection without sending complete message body"
    cap.record({"type": "sse.end", "flow": flow, "how": "upstream-reset", "events": int(answer is not None)})
    cap.record({"type": "http.error", "flow": flow, "kind": "upstream-reset", "error": reset, "phase": "response"})


def test_a_request_answered_before_the_stream_was_reset_is_not_listed_as_cut(tmp_path: Path) -> None:
    # as `record http` wrote it: the answer came as an event, then the server reset the stream
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
    cap = Cap(tmp_path, transport="http")
    _reset_after(cap, "f1", probe(1), discover_result(1))
    _reset_after(cap, "f2", call, err(3, -32603, "boom"))  # an error answer stays uncondensed, as a probe's
    # controls: reset before any answer
    _reset_after(cap, "f3", probe(2), None)
    _reset_after(cap, "f4", call, None)
    analysis = run(cap.close())
    assert analysis.probes.get_column("outcome").to_list() == ["discover-result", "connection-died"]
    [finding] = [f for f in analysis.findings if f.rule == "upstream-unreachable"]
    assert finding.details["failures"] == 4
    assert finding.details["requests"] == ["server/discover ×1", "tools/call ×1"], finding.message
    assert "left without the server's answer: server/discover ×1, tools/call ×1." in finding.message
    cut = sorted(e.line for e in finding.evidence if e.note.startswith("request "))
    assert cut == [12, 16], finding.evidence  # f3's and f4's; f1's (line 2) and f2's (line 7) were answered


def _idle_cut(cap: Cap, flow: str, method: str, body: dict[str, Any] | None) -> None:
    """A flow the proxy closed after `--idle-timeout` without traffic, as `record http` writes it."""
    raw = "" if body is None else orjson.dumps(body).decode()
    cap.record({"type": "http.request", "flow": flow, "dir": "c2s", "method": method, "url": "http://127.0.0.1/mcp",
                "headers": [], "raw": raw, "len": len(raw)})  # fmt: skip
    cap.http_response(flow, 200, streamed=True)
    cap.record({"type": "sse.end", "flow": flow, "how": "error", "events": 0, "error": "Client disconnected."}, 3600)
    cap.record({"type": "http.error", "flow": flow, "kind": "timeout", "error": "Client disconnected.",
                "phase": "response", "idle_s": 3600.0})  # fmt: skip


def test_a_quiet_stream_the_proxy_closed_when_idle_is_no_upstream_failure(tmp_path: Path) -> None:
    # A legacy client's GET stream that the server had nothing to send on for `--idle-timeout`: the
    # recorder's own timer closed it, with the server up all along; it was an error finding.
    cap = Cap(tmp_path / "quiet", transport="http")
    cap.http_request("f1", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    cap.http_response("f1", 200, init_result(1))
    _idle_cut(cap, "f2", "GET", None)
    assert not [f for f in run(cap.close()).findings if f.rule == "upstream-unreachable"]
    # a request the server left unanswered that long is its failure, as before
    cap = Cap(tmp_path / "hung", transport="http")
    _idle_cut(cap, "f1", "GET", None)
    _idle_cut(cap, "f2", "POST", {"jsonrpc": "2.0", "id": 3, "method": "tools/call"})
    [finding] = [f for f in run(cap.close()).findings if f.rule == "upstream-unreachable"]
    assert (finding.details["failures"], finding.details["requests"]) == (1, ["tools/call ×1"]), finding.message


def test_a_request_of_the_server_in_the_cut_stream_is_not_a_client_request_left_unanswered(tmp_path: Path) -> None:
    # the server asked the client something on the call's stream (sampling), then the stream was reset
    cap = Cap(tmp_path, transport="http")
    _reset_after(cap, "f1", {"jsonrpc": "2.0", "id": 3, "method": "tools/call"},
                 {"jsonrpc": "2.0", "id": "s-1", "method": "sampling/createMessage", "params": {}})  # fmt: skip
    [finding] = [f for f in run(cap.close()).findings if f.rule == "upstream-unreachable"]
    assert finding.details["requests"] == ["tools/call ×1"], finding.message


PROBE_LINE = orjson.dumps(
    {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}
)  # fmt: skip


def _spawn_failed(tmp_path: Path, command: list[str]) -> tuple[dict[str, Any], Path]:
    """The JSON report of a capture of `record stdio` told to run a command that cannot start."""
    import subprocess
    import sys

    from analyzer.pipeline import analyze
    from analyzer.report import render_json

    out = tmp_path / "caps"
    erascope = Path(sys.executable).parent / "erascope"
    run_ = subprocess.run([erascope, "record", "stdio", "--out", out, "--server", "files", "--", *command],
                          input=PROBE_LINE + b"\n", capture_output=True, timeout=60, check=False)  # fmt: skip
    assert run_.returncode in (126, 127), run_.stderr
    [capture] = out.glob("*.jsonl")
    return orjson.loads(render_json(analyze([str(out)]))), capture


def test_a_stdio_server_that_cannot_start_is_unreachable_as_an_http_one_is(tmp_path: Path) -> None:
    # The tee records `spawn-failed` and its live counters count it among the upstream errors, but the
    # analysis said only "no deciding evidence": a host configured with a wrong command passed a CI gate.
    report, capture = _spawn_failed(tmp_path, [str(tmp_path / "no-such-server"), "--stdio"])
    [finding] = [f for f in report["findings"] if f["rule"] == "upstream-unreachable"]
    assert finding["severity"] == "error" and finding["server"] == "files"
    assert finding["details"]["kinds"] == ["spawn-failed ×1"]
    assert "No such file or directory" in finding["message"] and "--upstream" not in finding["message"]
    assert [(e["file"], e["line"]) for e in finding["evidence"]] == [(str(capture), 2)]
    assert finding["message"].startswith("the recorder could not start the server 1 time(s)")
    assert "Check the server command" in finding["message"]
    counters = orjson.loads(capture.read_bytes().splitlines()[2])["counters"]
    assert counters["upstream_errors"] == {"spawn-failed": 1}


def test_a_stdio_command_that_is_no_program_is_unreachable_too(tmp_path: Path) -> None:
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\nexit 0\n")  # not executable: 126
    report, _ = _spawn_failed(tmp_path, [str(script)])
    assert [f["rule"] for f in report["findings"]] == ["upstream-unreachable"]
    assert "Permission denied" in report["findings"][0]["message"]


def test_a_stdio_server_that_cannot_start_is_broken_with_why_as_its_evidence(tmp_path: Path) -> None:
    # The finding said the server could not start, but its verdict read `unknown` ("no deciding evidence:
    # nothing probed or initialized"), where the same failure over HTTP (the probe's connection died) is
    # `broken`: the verdicts table of a fleet report sent a reader looking for a server never reached.
    report, capture = _spawn_failed(tmp_path, [str(tmp_path / "no-such-server"), "--stdio"])
    [verdict] = report["servers"]
    assert (verdict["server"], verdict["era"]) == ("files", "broken")
    [evidence] = verdict["evidence"]
    assert (evidence["file"], evidence["line"]) == (str(capture), 2)
    assert evidence["note"].startswith("server could not start (spawn-failed: ENOENT No such file or directory")
    assert [t["era"] for t in verdict["timeline"]] == ["broken"]


def test_a_server_that_starts_after_a_failed_start_is_judged_by_its_answers(tmp_path: Path) -> None:
    import subprocess
    import sys

    # the host's command fixed: the next spawn starts and answers the probe with a DiscoverResult
    answer = {"jsonrpc": "2.0", "id": 1, "result": {"supportedVersions": ["2026-07-28"], "capabilities": {},
              "serverInfo": {"name": "files", "version": "1"}}}  # fmt: skip
    server = f"import sys; sys.stdin.readline(); sys.stdout.write({orjson.dumps(answer).decode()!r} + '\\n')"
    _, failed = _spawn_failed(tmp_path, [str(tmp_path / "no-such-server")])
    erascope = Path(sys.executable).parent / "erascope"
    ran = subprocess.run([erascope, "record", "stdio", "--out", tmp_path / "caps", "--server", "files", "--",
                          sys.executable, "-c", server], input=PROBE_LINE + b"\n", capture_output=True,
                         timeout=60, check=True)  # fmt: skip
    assert b"supportedVersions" in ran.stdout
    from analyzer.pipeline import analyze
    from analyzer.report import render_json

    [verdict] = orjson.loads(render_json(analyze([str(tmp_path / "caps")])))["servers"]
    assert verdict["era"] == "modern"
    assert [t["era"] for t in verdict["timeline"]] == ["broken", "modern"]
    assert verdict["timeline"][0]["evidence"]["file"] == str(failed)
