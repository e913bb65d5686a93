"""Baselines: accepted findings by rule + server; new findings and stale entries fail CI."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from addon.errors import ErascopeError
from analyzer.baseline import BASELINE_FORMAT, BaselineEntry, compare, load_baseline, write_baseline
from analyzer.findings import Finding, Severity


def _f(rule: str, server: str, severity: Severity = Severity.WARNING) -> Finding:
    return Finding(rule=rule, severity=severity, server=server, message="m")


def test_written_baseline_accepts_the_same_findings(tmp_path: Path) -> None:
    findings = [_f("probe-storm", "a"), _f("probe-storm", "a"), _f("misread-crash", "b", Severity.ERROR)]
    path = tmp_path / "baseline.json"
    assert write_baseline(findings, path) == 2
    doc = orjson.loads(path.read_bytes())
    assert doc == {
        "format": BASELINE_FORMAT,
        "accepted": [
            {"rule": "misread-crash", "server": "b", "severity": "error", "count": 1},
            {"rule": "probe-storm", "server": "a", "severity": "warning", "count": 2},
        ],
    }
    result = compare(findings, path)
    assert not result.failed
    assert result.new == [] and result.stale == []
    assert result.accepted == findings


def test_new_finding_fails(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    write_baseline([_f("probe-storm", "a")], path)
    result = compare([_f("probe-storm", "a"), _f("probe-storm", "c")], path)
    assert result.failed
    assert result.new == [_f("probe-storm", "c")]
    assert result.messages() == ["new finding not in the baseline: warning probe-storm on c"]


def test_disappeared_finding_is_a_stale_baseline(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    write_baseline([_f("probe-storm", "a"), _f("rc-error-code", "a")], path)
    result = compare([_f("probe-storm", "a")], path)
    assert result.failed
    assert result.stale == [BaselineEntry("rc-error-code", "a")]
    assert "stale baseline entry: rc-error-code on a" in result.messages()[0]


def test_severity_gate_applies_to_new_findings_only(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    write_baseline([_f("probe-storm", "a")], path)
    result = compare([_f("probe-storm", "a"), _f("probe-kills-server", "b", Severity.INFO)], path, fail_on="warning")
    assert not result.failed
    result = compare([_f("probe-kills-server", "b", Severity.INFO)], path, fail_on="warning")
    assert result.failed and result.stale == [BaselineEntry("probe-storm", "a")]


def test_rewriting_keeps_notes(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_bytes(
        orjson.dumps(
            {"format": BASELINE_FORMAT, "accepted": [{"rule": "probe-storm", "server": "a", "note": "ISSUE-12"}]}
        )
    )
    write_baseline([_f("probe-storm", "a")], path)
    assert orjson.loads(path.read_bytes())["accepted"][0]["note"] == "ISSUE-12"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"format": "other/1", "accepted": []}', "expected format"),
        (b'{"format": "erascope-baseline/1", "accepted": {}}', "must be a list"),
        (b'{"format": "erascope-baseline/1", "accepted": [{"rule": "x"}]}', r"accepted\[0\] needs"),
    ],
)
def test_bad_baseline_is_a_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "b.json"
    path.write_bytes(content)
    with pytest.raises(ErascopeError, match=message):
        load_baseline(path)


def test_missing_baseline_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ErascopeError, match="no such file"):
        compare([], tmp_path / "missing.json")
