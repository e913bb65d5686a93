"""misread-crash, probe-kills-server and misread-modern on tiny inline frames."""

from __future__ import annotations

from analyzer.findings import Evidence, Severity
from analyzer.rules import run_rules
from analyzer.rules.scenario import MODERN, Scenario

CRASH_RULES = ["misread-crash", "probe-kills-server"]


def test_initialize_on_the_dead_connection_is_a_misread() -> None:
    s = Scenario()
    c = s.conn("rusty", "c1", client="host")
    probe = c.probe(0.0, "connection-died")  # the exit record is line 2
    init = c.init(0.05, "connection-died")  # written during the linger window
    [f] = run_rules(s.analysis(), only=CRASH_RULES)
    assert (f.rule, f.severity, f.server, f.client) == ("misread-crash", Severity.ERROR, "rusty", "host")
    assert f.evidence == (
        Evidence("c1.jsonl", probe, "probe (connection-died)"),
        Evidence("c1.jsonl", probe + 1, "connection-died"),
        Evidence("c1.jsonl", init, "initialize"),
    )
    assert "dead connection" in f.message


def test_garbage_then_initialize_is_a_misread() -> None:
    s = Scenario()
    c = s.conn("chatty", "c1")
    c.probe(0.0, "garbage")
    c.init(0.1, "connection-died")
    [f] = run_rules(s.analysis(), only=CRASH_RULES)
    assert f.rule == "misread-crash"
    assert f.details["outcomes"] == ["garbage"]
    assert "connection that wrote garbage was connection-died" in f.message


def test_garbage_then_initialize_served_on_that_live_connection_is_no_misread() -> None:
    # A server that writes a non-JSON line, ignores the probe and serves `initialize` on the same
    # connection is alive and legacy: the client waited out its probe timeout and fell back, as it
    # should. It was an error "initialize sent on the dead connection", of a connection that never died.
    s = Scenario()
    c = s.conn("chatty", "c1")
    c.probe(0.0, "garbage")
    c.init(10.0)
    assert run_rules(s.analysis(), only=CRASH_RULES) == []


def test_crash_then_served_initialize_on_fresh_process_is_recovery() -> None:
    s = Scenario()
    s.conn("rusty", "spawn1").probe(0.0, "connection-died")
    s.conn("rusty", "spawn2").init(0.5)
    [f] = run_rules(s.analysis(), only=CRASH_RULES)
    assert (f.rule, f.severity) == ("probe-kills-server", Severity.INFO)


def test_crash_then_legacy_on_a_server_that_answers_modern_is_a_misread() -> None:
    s = Scenario()
    s.conn("dual", "other", client="other").probe(0.0, "discover-result")
    s.conn("dual", "spawn1", client="host").probe(1.0, "connection-died")
    s.conn("dual", "spawn2", client="host").init(1.5)
    [f] = run_rules(s.analysis(), only=CRASH_RULES)
    assert (f.rule, f.client) == ("misread-crash", "host")
    assert "answers probes as modern" in f.message


def test_crash_then_reprobe_is_fine() -> None:
    s = Scenario()
    s.conn("rusty", "spawn1").probe(0.0, "connection-died")
    s.conn("rusty", "spawn2").probe(0.5, "discover-result")
    assert run_rules(s.analysis(), only=CRASH_RULES) == []


def test_fallback_after_modern_error_is_misread_modern() -> None:
    # the mcp 2.3.0 client falls back to initialize on -32020
    s = Scenario()
    c = s.conn("api", "c1", client="mcp", transport="http")
    probe = c.probe(0.0, "modern-error", error_code=-32020, http_status=400)
    init = c.init(0.1, "refused-named", versions=[MODERN])
    [f] = run_rules(s.analysis(), only=["misread-modern"])
    assert (f.rule, f.severity, f.client) == ("misread-modern", Severity.ERROR, "mcp")
    assert f.details["answers"] == ["modern-error -32020"]
    assert Evidence("c1.jsonl", probe, "probe") in f.evidence
    assert Evidence("c1.jsonl", init, "initialize after it") in f.evidence


def test_fallback_after_modern_discover_result_is_misread_modern() -> None:
    s = Scenario()
    c = s.conn("api", "c1")
    c.probe(0.0, "discover-result", versions=["2025-11-25", MODERN])
    c.init(0.1)
    [f] = run_rules(s.analysis(), only=["misread-modern"])
    assert f.details["answers"] == ["discover-result"]


def test_fallback_after_refusal_naming_another_modern_version_is_misread_modern() -> None:
    s = Scenario()
    c = s.conn("api", "c1")
    c.probe(0.0, "unsupported-version", version="2099-01-01", versions=[MODERN])
    c.init(0.1)
    assert [f.rule for f in run_rules(s.analysis(), only=["misread-modern"])] == ["misread-modern"]


def test_fallback_after_legacy_answers_is_fine() -> None:
    s = Scenario()
    c = s.conn("old", "c1")
    c.probe(0.0, "legacy-answer")
    c.init(0.1)
    d = s.conn("old2", "c2")
    # a DiscoverResult listing only handshake versions is a legacy advertisement
    d.probe(0.0, "discover-result", versions=["2025-11-25"])
    d.init(0.1)
    e = s.conn("loop", "c3")
    # refused the very version it lists: no *other* modern version to retry with
    e.probe(0.0, "unsupported-version", versions=[MODERN])
    e.init(0.1)
    assert run_rules(s.analysis(), only=["misread-modern"]) == []


def test_adopting_the_modern_answer_is_fine() -> None:
    s = Scenario()
    c = s.conn("api", "c1")
    c.probe(0.0, "discover-result")
    c.call(0.1, modern=True)
    assert run_rules(s.analysis(), only=["misread-modern"]) == []


def test_over_http_a_served_initialize_after_a_reset_probe_stream_is_the_same_finding_on_any_connection() -> None:
    # The client's HTTP connection is not the server's: an `initialize` sent on the same keep-alive
    # connection after the probe's event stream was reset is not "on the dead connection" (it was
    # an error `misread-crash` there, the info `probe-kills-server` on a new connection).
    found = []
    for same_connection in (True, False):
        s = Scenario()
        s.conn("api", "c1", transport="http").probe(0.0, "connection-died")
        s.conn("api", "c1" if same_connection else "c2", transport="http").init(0.5)
        found.append([(f.rule, f.severity) for f in run_rules(s.analysis(), only=CRASH_RULES)])
    assert found == [[("probe-kills-server", Severity.INFO)]] * 2
