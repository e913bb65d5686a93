"""Invariants over random traffic: rules never fail, and every finding points at real message lines."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.findings import Severity
from analyzer.rules import REGISTRY, run_rules
from analyzer.rules.scenario import MODERN, Scenario
from analyzer.schema import INIT_OUTCOMES, PROBE_OUTCOMES

step = st.one_of(
    st.tuples(st.just("probe"), st.sampled_from(PROBE_OUTCOMES), st.sampled_from(["1", "2"])),
    st.tuples(st.just("init"), st.sampled_from(INIT_OUTCOMES), st.just("1")),
    st.tuples(st.just("call"), st.sampled_from(["modern", "legacy", "refused"]), st.just("3")),
    st.tuples(st.just("banner"), st.just(""), st.just("")),
)
connection = st.tuples(
    st.sampled_from(["s1", "s2"]),
    st.sampled_from(["A", "B", None]),
    st.sampled_from(["stdio", "http"]),
    st.sampled_from([None, "10.0.0.1:80", "10.0.0.2:80"]),
    st.lists(step, min_size=1, max_size=5),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(connection, min_size=1, max_size=12), st.floats(min_value=0.1, max_value=30.0))
def test_rules_hold_on_random_traffic(conns: list, gap: float) -> None:
    s = Scenario()
    t = 0.0
    for n, (server, client, transport, peer, steps) in enumerate(conns):
        c = s.conn(server, f"c{n}", client=client, transport=transport)
        for kind, what, rid in steps:
            t += gap
            if kind == "probe":
                versions = [MODERN] if what in ("discover-result", "unsupported-version") else None
                c.probe(t, what, id=rid, versions=versions, peer=peer, well_formed=what != "malformed-probe",
                        ttl_ms=0 if n % 2 else None)
            elif kind == "init":
                c.init(t, what, versions=[MODERN] if what == "refused-named" else None, peer=peer)
            elif kind == "call":
                c.call(t, modern=what != "legacy", error_code=-32600 if what == "refused" else None)
            else:
                c.stdout_line(t)
    analysis = s.analysis()
    lines = set(zip(analysis.messages["file"], analysis.messages["line"], strict=True))
    findings = run_rules(analysis)
    ranks = [f.severity.rank for f in findings]
    assert ranks == sorted(ranks, reverse=True)
    for f in findings:
        assert f.rule in REGISTRY
        assert f.severity is REGISTRY[f.rule].severity
        assert isinstance(f.severity, Severity)
        assert f.evidence, f
        assert f.message
        for ev in f.evidence:
            assert (ev.file, ev.line) in lines, (f.rule, ev)
