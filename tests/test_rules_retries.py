"""retry-same-id, retry-unsupported-version and retry-loop on tiny inline frames."""

from __future__ import annotations

from analyzer.findings import Evidence, Severity
from analyzer.rules import run_rules
from analyzer.rules.scenario import MODERN, Scenario

RETRY_RULES = ["retry-same-id", "retry-unsupported-version", "retry-loop"]


def test_retry_with_the_same_id() -> None:
    s = Scenario()
    c = s.conn("api", "c1", client="host")
    first = c.probe(0.0, "unsupported-version", id="1", version="2099-01-01", versions=[MODERN])
    retry = c.probe(0.1, "discover-result", id="1")
    [f] = run_rules(s.analysis(), only=RETRY_RULES)
    assert (f.rule, f.severity, f.client) == ("retry-same-id", Severity.WARNING, "host")
    assert f.details["ids"] == ["1"]
    assert f.evidence == (
        Evidence("c1.jsonl", first, "probe"),
        Evidence("c1.jsonl", first + 1, "unsupported-version"),
        Evidence("c1.jsonl", retry, "retry"),
    )


def test_retry_with_a_version_not_offered() -> None:
    s = Scenario()
    c = s.conn("api", "c1")
    c.probe(0.0, "unsupported-version", id="1", version="2099-01-01", versions=[MODERN])
    c.probe(0.1, "unsupported-version", id="2", version="2098-01-01", versions=[MODERN])
    [f] = run_rules(s.analysis(), only=RETRY_RULES)
    assert (f.rule, f.severity) == ("retry-unsupported-version", Severity.ERROR)
    assert f.details["retried"] == ["2098-01-01"]
    assert f.details["supported"] == [MODERN]


def test_retry_loop_on_a_self_contradicting_server() -> None:
    s = Scenario()
    c = s.conn("liar", "c1")
    for i in range(4):
        c.probe(i * 0.1, "unsupported-version", id=str(i), version=MODERN, versions=[MODERN])
    [f] = run_rules(s.analysis(), only=RETRY_RULES)
    assert (f.rule, f.severity) == ("retry-loop", Severity.ERROR)
    assert f.details["retries"] == 3
    assert f.details["refused_listed_as_supported"] is True
    assert "very version it refused" in f.message


def test_one_correct_retry_is_fine() -> None:
    s = Scenario()
    c = s.conn("api", "c1")
    c.probe(0.0, "unsupported-version", id="1", version="2099-01-01", versions=[MODERN])
    c.probe(0.1, "discover-result", id="2", version=MODERN)
    c.call(0.2, id="3", modern=True)
    assert run_rules(s.analysis(), only=RETRY_RULES) == []


def test_retry_loop_threshold_is_an_option() -> None:
    s = Scenario()
    c = s.conn("liar", "c1")
    for i in range(3):
        c.probe(i * 0.1, "unsupported-version", id=str(i), version=MODERN, versions=[MODERN])
    assert [f.rule for f in run_rules(s.analysis(), only=["retry-loop"])] == ["retry-loop"]
    assert run_rules(s.analysis(), {"max_retries": 2}, only=["retry-loop"]) == []


def test_retry_loop_evidence_is_the_first_of_the_longest_loops() -> None:
    # Many loops of the same length: the evidence must not depend on the order polars groups them in.
    s = Scenario()
    c = s.conn("liar", "c1")
    firsts = []
    for n in range(40):
        t = n * 10.0
        lines = [
            c.probe(t + i * 0.1, "unsupported-version", id=f"{n}-{i}", version=MODERN, versions=[MODERN])
            for i in range(4)
        ]
        firsts.append(lines[0])
        c.call(t + 1.0, id=f"{n}-call", modern=True)
    [f] = run_rules(s.analysis(), only=["retry-loop"])
    assert f.details["loops"] == 40
    assert f.evidence[0] == Evidence("c1.jsonl", firsts[0], "probe")
