"""The registry: ids, severities, documented sections, options, ordering, and the README table in sync."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import polars as pl
import pytest

from addon.errors import ErascopeError
from analyzer.findings import Finding, Severity
from analyzer.pipeline import analyze
from analyzer.rules import REGISTRY, RuleContext, RuleOptions, run_rules, sort_findings, stages_together
from analyzer.rules.base import SECTIONS
from analyzer.rules.docs import rules_markdown, sync_readme
from analyzer.rules.options import option_docs
from analyzer.rules.scenario import Scenario
from analyzer.rules.upstream import blame_upstream

ROOT = Path(__file__).resolve().parent.parent
CONTRACT_IDS = {
    "probe-storm",
    "misread-crash",
    "probe-kills-server",
    "misread-modern",
    "retry-same-id",
    "retry-unsupported-version",
    "retry-loop",
    "stale-era",
    "rollout-split",
    "unnamed-versions",
    "stdout-pollution",
    "malformed-probe",
    "rc-error-code",
    "invalid-discover-result",
    "probe-timeout",
    "upstream-unreachable",
}


def test_registry_holds_exactly_the_contract_ids() -> None:
    assert set(REGISTRY) == CONTRACT_IDS
    for rule_id, rule in REGISTRY.items():
        assert rule.id == rule_id
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", rule_id)
        assert isinstance(rule.severity, Severity)


@pytest.mark.parametrize("rule_id", sorted(CONTRACT_IDS))
def test_every_rule_documents_every_section(rule_id: str) -> None:
    rule = REGISTRY[rule_id]
    assert rule.summary
    sections = rule.sections()
    assert list(sections) == list(SECTIONS)
    for name, text in sections.items():
        assert len(text) > 30, f"{rule_id}: section {name!r} is missing or too short"


@pytest.mark.parametrize("rule_id", sorted(CONTRACT_IDS))
def test_every_rule_has_tests(rule_id: str) -> None:
    # a positive and a negative test name the rule in a `only=[...]` call or a constant list
    sources = "".join(p.read_text() for p in (ROOT / "tests").glob("test_rules_*.py") if p.name != Path(__file__).name)
    assert sources.count(f'"{rule_id}"') >= 2, f"{rule_id} has no dedicated tests"


def test_readme_rules_table_is_in_sync() -> None:
    assert not sync_readme(ROOT / "README.md", check=True), "run: python -m analyzer.rules --markdown"


def test_readme_table_names_every_rule_and_option() -> None:
    block = rules_markdown()
    for rule_id in REGISTRY:
        assert f"| `{rule_id}` |" in block
    for name, _default, doc in option_docs():
        assert f"| `{name}` |" in block
        assert doc, f"option {name} has no docstring"
    assert len(option_docs()) == len(dataclasses.fields(RuleOptions))


def test_sync_readme_rewrites_only_the_marked_block(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\nbefore\n<!-- rules:start -->\nSTALE TABLE\n<!-- rules:end -->\nafter\n")
    assert sync_readme(readme) is True
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n<!-- rules:start -->")
    assert text.endswith("<!-- rules:end -->\nafter\n")
    assert "STALE TABLE" not in text
    assert sync_readme(readme) is False
    readme.write_text("no markers")
    with pytest.raises(ErascopeError, match="markers"):
        sync_readme(readme)


def test_unknown_option_and_rule_are_errors() -> None:
    with pytest.raises(ErascopeError, match="unknown rule option"):
        run_rules(Scenario().analysis(), {"storm_min_probe": 3})
    with pytest.raises(ErascopeError, match="unknown rule id"):
        run_rules(Scenario().analysis(), only=["probe-storm", "nope"])


def test_findings_sort_by_severity_then_time() -> None:
    def f(rule: str, severity: Severity, ts: float | None) -> Finding:
        return Finding(rule=rule, severity=severity, server="s", message="m", ts=ts)

    info, late_error, early_error, warning, untimed = (
        f("probe-kills-server", Severity.INFO, 1.0),
        f("misread-crash", Severity.ERROR, 9.0),
        f("misread-modern", Severity.ERROR, 2.0),
        f("probe-storm", Severity.WARNING, 0.0),
        f("misread-crash", Severity.ERROR, None),
    )
    assert sort_findings([info, late_error, untimed, warning, early_error]) == [
        early_error,
        late_error,
        untimed,
        warning,
        info,
    ]


def test_every_finding_carries_evidence() -> None:
    # one scenario that trips many rules at once
    s = Scenario()
    for i in range(6):
        c = s.conn("weather", f"spawn{i}", client="agent")
        c.stdout_line(i * 2.0)
        c.probe(i * 2.0 + 0.1, "unsupported-version", error_code=-32004, version="2099-01-01", versions=None)
        c.init(i * 2.0 + 0.2)
        c.call(i * 2.0 + 0.3)
    findings = run_rules(s.analysis())
    assert {f.rule for f in findings} >= {"stdout-pollution", "rc-error-code", "unnamed-versions"}
    for finding in findings:
        assert finding.evidence, finding
        assert finding.details["evidence_total"] >= len(finding.evidence)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"storm_min_probes": "3"}, "must be an integer"),
        ({"storm_min_probes": 2.5}, "must be an integer"),
        ({"split_window_s": True}, "must be a number"),
        ({"max_retries": -1}, "must not be negative"),
        ({"storm_window_s": 0}, "must be positive"),
    ],
)
def test_bad_option_values_are_clear_errors(values: dict[str, object], message: str) -> None:
    with pytest.raises(ErascopeError, match=message):
        RuleOptions.from_mapping(values)


def test_option_values_of_the_right_type_are_kept() -> None:
    opts = RuleOptions.from_mapping({"storm_min_probes": 3, "split_window_s": 30, "timeout_min_wait_s": 0})
    assert (opts.storm_min_probes, opts.split_window_s, opts.timeout_min_wait_s) == (3, 30, 0)


def test_rules_run_together_find_what_they_find_one_after_the_other() -> None:
    """`run_rules` runs several rules at a time: its findings are those of each rule run in turn, in
    registry order, then sorted and blamed as always (ties in the sort keep that order)."""
    analysis = analyze([ROOT / "captures"])
    ctx = RuleContext.from_analysis(analysis, RuleOptions())
    one_by_one = [finding for rule in REGISTRY.values() for finding in rule.run(ctx)]
    assert len({f.rule for f in one_by_one}) > 3, "the corpus has findings of several rules"
    assert run_rules(analysis) == sort_findings(blame_upstream(one_by_one, ctx))
    analysis.close()


def test_stages_side_by_side_only_over_rows_in_memory() -> None:
    """Rows read from the analysis' temporary files (a LazyFrame: every JSONL analysis) are read a stage
    at a time, so two stages' reads never add up in the peak heap; rows in memory go side by side."""
    rows = pl.DataFrame({"seq": [1, 2]})
    assert stages_together(rows) is (pl.thread_pool_size() > 1)
    assert not stages_together(rows.lazy())
    assert not stages_together(None)
