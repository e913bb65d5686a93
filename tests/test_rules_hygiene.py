"""unnamed-versions, stdout-pollution, malformed-probe, rc-error-code and invalid-discover-result on tiny inline
frames."""

from __future__ import annotations

from analyzer.findings import Evidence, Severity
from analyzer.rules import run_rules
from analyzer.rules.scenario import MODERN, Scenario


def test_unnamed_versions_on_probe_and_initialize() -> None:
    s = Scenario()
    c = s.conn("api", "c1")
    probe = c.probe(0.0, "unsupported-version", version="2099-01-01", versions=None)
    init = c.init(0.1, "refused-unnamed")
    [f] = run_rules(s.analysis(), only=["unnamed-versions"])
    assert (f.rule, f.severity, f.server) == ("unnamed-versions", Severity.WARNING, "api")
    assert f.details["count"] == 2
    assert [e.line for e in f.evidence] == [probe + 1, init + 1]


def test_unnamed_versions_of_a_refused_initialize_is_timed_at_the_refusal() -> None:
    """An `initialize` refused with -32022 and no versions is both an error message and a refused
    `initialize` on the same line: the two rows were made one by whichever polars kept, the
    request's time or the answer's, so the finding's time (and its place among the findings) changed
    from run to run. It is the refusal's, as its evidence's line is."""
    s = Scenario()
    c = s.conn("api", "c1")
    init = c.init(5.0, "refused-unnamed", answer_after=0.5)
    for _ in range(20):
        [f] = run_rules(s.analysis(), only=["unnamed-versions"])
        assert [e.line for e in f.evidence] == [init + 1] and f.details["count"] == 1
        assert f.ts == s.start + 5.5


def test_named_versions_are_fine() -> None:
    s = Scenario()
    c = s.conn("api", "c1")
    c.probe(0.0, "unsupported-version", version="2099-01-01", versions=[MODERN])
    c.init(0.1, "refused-named", versions=[MODERN])
    assert run_rules(s.analysis(), only=["unnamed-versions"]) == []


def test_stdout_pollution() -> None:
    s = Scenario()
    c = s.conn("noisy", "c1")
    banner = c.stdout_line(0.0)
    c.probe(0.1, "discover-result")
    [f] = run_rules(s.analysis(), only=["stdout-pollution"])
    assert f.evidence == (Evidence("c1.jsonl", banner, "not JSON-RPC"),)


def test_invalid_http_bodies_are_not_stdout_pollution() -> None:
    s = Scenario()
    c = s.conn("web", "c1", transport="http")
    c.probe(0.0, "discover-result")
    s.add("c1.jsonl", 0.2, server="web", conn="c1", transport="http", record_type="http.response", dir="s2c",
          kind="invalid")
    assert run_rules(s.analysis(), only=["stdout-pollution"]) == []


def test_malformed_probe_over_http() -> None:
    s = Scenario()
    c = s.conn("web", "c1", client="bare", transport="http")
    line = c.probe(0.0, "malformed-probe", well_formed=False)
    [f] = run_rules(s.analysis(), only=["malformed-probe"])
    assert (f.rule, f.client) == ("malformed-probe", "bare")
    assert f.details["problems"] == ["no _meta envelope", "no mcp-method header", "no mcp-protocol-version header"]
    assert f.evidence == (Evidence("c1.jsonl", line, "malformed probe"),)


def test_well_formed_probe_is_fine() -> None:
    s = Scenario()
    s.conn("web", "c1", transport="http").probe(0.0, "discover-result")
    s.conn("cli", "c2").probe(0.0, "legacy-answer")
    assert run_rules(s.analysis(), only=["malformed-probe"]) == []


def test_rc_error_code() -> None:
    s = Scenario()
    c = s.conn("rc", "c1")
    line = c.probe(0.0, "unsupported-version", error_code=-32004, version="2099-01-01", versions=[MODERN])
    [f] = run_rules(s.analysis(), only=["rc-error-code"])
    assert f.evidence == (Evidence("c1.jsonl", line + 1, "error -32004"),)


def test_final_error_code_is_fine() -> None:
    s = Scenario()
    s.conn("final", "c1").probe(0.0, "unsupported-version", version="2099-01-01", versions=[MODERN])
    assert run_rules(s.analysis(), only=["rc-error-code"]) == []


def test_invalid_discover_result() -> None:
    s = Scenario()
    c = s.conn("half", "c1")
    c.probe(0.0, "discover-result")
    c.probe(0.2, "no-answer", id="2")  # answered below with a result that lists no versions
    line = s.add("c1.jsonl", 0.3, server="half", conn="c1", transport="stdio", record_type="frame", dir="s2c",
                 kind="response", id="2", method="server/discover", supported_versions=None)  # fmt: skip
    [f] = run_rules(s.analysis(), only=["invalid-discover-result"])
    assert (f.severity, f.server, f.client, f.details["count"]) == (Severity.WARNING, "half", None, 1)
    assert f.evidence == (Evidence("c1.jsonl", line, "result that is no DiscoverResult"),)


def test_discover_results_and_legacy_errors_are_no_invalid_discover_result() -> None:
    s = Scenario()
    c = s.conn("fine", "c1")
    c.probe(0.0, "discover-result")
    c.probe(0.1, "legacy-answer", id="2")
    c.probe(0.2, "unsupported-version", id="3", version="2099-01-01", versions=[MODERN])
    c.call(0.3, "tools/list", id="4")  # another method's result lists no versions either
    assert run_rules(s.analysis(), only=["invalid-discover-result"]) == []
