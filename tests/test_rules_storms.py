"""probe-storm and probe-timeout on tiny inline frames."""

from __future__ import annotations

import pytest

from analyzer.findings import Evidence, Severity
from analyzer.rules import run_rules
from analyzer.rules.scenario import Scenario


def _spawn_per_call(s: Scenario, n: int, *, ttl_ms: int | None = 0, client: str = "agent") -> None:
    # one spawn per tool call: probe, then the call on the same process
    for i in range(n):
        c = s.conn("weather", f"spawn{i}", client=client)
        c.probe(i * 2.0, "discover-result", ttl_ms=ttl_ms)
        c.call(i * 2.0 + 0.4, modern=True)


def test_probe_storm_spawn_per_call() -> None:
    s = Scenario()
    _spawn_per_call(s, 6)
    [f] = run_rules(s.analysis(), only=["probe-storm"])
    assert (f.rule, f.severity, f.server, f.client) == ("probe-storm", Severity.WARNING, "weather", "agent")
    assert f.details["probes"] == 6
    assert f.details["connections"] == 6
    assert f.details["probes_per_request"] == 1.0
    assert f.details["answer_runs"] == 1
    assert f.details["cost_s_total"] == pytest.approx(6 * 0.4)
    assert f.details["ttl_zero"] is True
    assert "ttlMs: 0" in f.message
    # the DiscoverResult carrying ttlMs: 0 is evidence, with every probe line
    assert Evidence("spawn0.jsonl", 2, "DiscoverResult with ttlMs: 0") in f.evidence
    assert Evidence("spawn0.jsonl", 1, "probe (discover-result)") in f.evidence
    assert f.ts == s.start


def test_no_storm_when_each_probe_comes_after_the_last_verdict_expired() -> None:
    """A host that caches the DiscoverResult for its ttlMs and probes again once it has run out does
    what the spec asks (a spawn per call, a call every 2 s, ttlMs 1 s: every call probes)."""
    s = Scenario()
    _spawn_per_call(s, 8, ttl_ms=1000)
    assert run_rules(s.analysis(), only=["probe-storm"]) == []


def test_a_storm_of_probes_while_the_verdict_is_fresh_is_still_one() -> None:
    s = Scenario()
    _spawn_per_call(s, 8, ttl_ms=60_000)  # every probe inside the minute its first answer allowed
    [f] = run_rules(s.analysis(), only=["probe-storm"])
    assert f.details["probes"] == 8


def test_probe_storm_throwaway_siblings_cost_to_next_connection() -> None:
    s = Scenario()
    for i in range(5):
        probe_only = s.conn("files", f"probe{i}", client="ts-client")
        probe_only.probe(i * 10.0, "discover-result")
        session = s.conn("files", f"session{i}", client="ts-client")
        session.call(i * 10.0 + 1.5, modern=True)
    [f] = run_rules(s.analysis(), only=["probe-storm"])
    assert f.details["cost_s_total"] == pytest.approx(5 * 1.5)
    assert f.details["ttl_zero"] is False
    assert "ttlMs" not in f.message


def test_probe_storm_by_rate_alone() -> None:
    s = Scenario()
    c = s.conn("busy", "c1", client="poller")
    for i in range(10):
        c.probe(i * 1.0, "discover-result", id=str(i))
    for i in range(40):
        c.call(20.0 + i, id=str(100 + i), modern=True)
    [f] = run_rules(s.analysis(), only=["probe-storm"])
    assert f.details["max_in_window"] == 10
    assert f.details["probes_per_request"] == 0.25


def test_no_storm_when_probes_follow_verdict_changes() -> None:
    s = Scenario()
    outcomes = ["discover-result", "legacy-answer"] * 3
    for i, outcome in enumerate(outcomes):
        c = s.conn("flaky", f"c{i}")
        c.probe(i * 100.0, outcome)
        c.call(i * 100.0 + 1, modern=outcome == "discover-result")
    assert run_rules(s.analysis(), only=["probe-storm"]) == []


def test_no_storm_for_long_lived_sessions() -> None:
    s = Scenario()
    for i in range(6):
        c = s.conn("weather", f"session{i}")
        c.probe(i * 600.0, "discover-result")
        for k in range(5):
            c.call(i * 600.0 + 1 + k, id=str(10 + k), modern=True)
    assert run_rules(s.analysis(), only=["probe-storm"]) == []


def test_storm_threshold_is_an_option() -> None:
    s = Scenario()
    _spawn_per_call(s, 6)
    assert run_rules(s.analysis(), {"storm_min_probes": 7}, only=["probe-storm"]) == []


def test_probe_timeout_reports_cost() -> None:
    s = Scenario()
    c = s.conn("silent", "c1", client="agent")
    probe_line = c.probe(0.0, "no-answer")
    c.init(10.0)
    [f] = run_rules(s.analysis(), only=["probe-timeout"])
    assert (f.rule, f.server, f.client) == ("probe-timeout", "silent", "agent")
    assert f.details["cost_s_total"] == pytest.approx(10.0)
    assert f.evidence == (Evidence("c1.jsonl", probe_line, "probe without an answer"),)


def test_probe_timeout_cost_to_connection_end_when_nothing_follows() -> None:
    s = Scenario()
    c = s.conn("silent", "c1")
    c.probe(0.0, "no-answer")
    c.exit(60.0, code=0)
    [f] = run_rules(s.analysis(), only=["probe-timeout"])
    assert f.details["cost_s_max"] == pytest.approx(60.0)


def test_no_probe_timeout_when_answered() -> None:
    s = Scenario()
    c = s.conn("quick", "c1")
    c.probe(0.0, "legacy-answer")
    c.init(0.1)
    assert run_rules(s.analysis(), only=["probe-timeout"]) == []


def test_probe_abandoned_at_once_is_not_a_timeout() -> None:
    s = Scenario()
    c = s.conn("gone", "c1")
    c.probe(0.0, "no-answer")
    c.exit(0.02, code=3)
    assert run_rules(s.analysis(), only=["probe-timeout"]) == []


def _storm_at_one_instant(order: list[int]) -> Scenario:
    # a spawn per call whose probes were all written at one instant (a coarse clock), the first twelve
    # answered one way and the rest another, created in `order`: the capture is the same, only its
    # rows' order differs
    s = Scenario()
    for i in order:
        c = s.conn("weather", f"spawn{i:02d}", client="agent")
        c.probe(0.0, "discover-result" if i < 12 else "unsupported-version", ttl_ms=0)
        c.call(0.4, modern=True)
    return s


def test_probe_storm_does_not_depend_on_the_order_rows_come_in() -> None:
    """Probes tied on time are taken in capture order (file, line), not in the order their rows came
    in: that order differs between a local run and a cluster's shard (its categories, its scan), and
    so did the finding's answer runs."""
    found = []
    for order in (list(range(24)), list(reversed(range(24))), [(i * 7) % 24 for i in range(24)]):
        findings = run_rules(_storm_at_one_instant(order).analysis(), only=["probe-storm"])
        found.append([(f.details["answer_runs"], f.evidence, f.message) for f in findings])
    # spawn00..23 in file order: twelve of one answer, then twelve of another
    assert [runs for runs, _, _ in found[0]] == [2]
    assert found[1] == found[0] and found[2] == found[0]
