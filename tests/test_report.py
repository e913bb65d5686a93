"""Reports: json schema and documentation, text and markdown content, ordering, relative paths."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from addon.errors import ErascopeError
from analyzer.findings import Evidence, Finding, Severity
from analyzer.pipeline import Analysis, analyze
from analyzer.report import REPORT_SCHEMA, render, report_dict
from tests.test_messages import Cap, discover_result, err, init, init_result, probe

REPORT_DOC = Path(__file__).resolve().parent.parent / "analyzer" / "REPORT.md"


@pytest.fixture
def analysis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Analysis:
    monkeypatch.chdir(tmp_path)
    cap = Cap(Path("caps"), server="weather")
    cap.c2s(probe(1))
    cap.s2c("banner on stdout")
    cap.s2c(err(1, -32602, "Invalid request parameters", ""))
    cap.c2s(init(2))
    cap.s2c(init_result(2))
    path = cap.close()
    with path.open("a") as f:
        f.write("garbage line\n")  # malformed: a well-formed record follows
        f.write('{"type":"lifecycle","seq":6,"ts":1800000001.0,"server":"weather","conn":"c1","event":"exit","code":0}\n')
    cap2 = Cap(Path("caps"), server="modern-srv", conn="m1")
    cap2.c2s(probe(1))
    cap2.s2c(discover_result(1))
    cap2.close()
    return analyze(["caps"])


def test_json_report_schema(analysis: Analysis) -> None:
    doc = orjson.loads(render(analysis, "json"))
    assert doc["schema"] == REPORT_SCHEMA
    assert [s["server"] for s in doc["servers"]] == ["modern-srv", "weather"]
    weather = doc["servers"][1]
    assert (weather["era"], weather["modern_support"], weather["legacy_support"]) == ("legacy", "no", "yes")
    assert weather["transport"] == "stdio" and weather["versions"] == ["2025-11-25"]
    assert all(e["file"].startswith("caps/") and isinstance(e["line"], int) for e in weather["evidence"])
    assert [t["era"] for t in weather["timeline"]] == ["legacy"]
    assert doc["servers"][0]["era"] == "modern"
    assert doc["inputs"]["records"] == 10
    assert [(m["line"], m["reason"]) for m in doc["inputs"]["malformed"]] == [(7, "not valid JSON")]
    assert doc["totals"]["probe_outcomes"] == {"discover-result": 1, "legacy-answer": 1}
    for f in doc["findings"]:
        assert set(f) >= {"rule", "severity", "server", "client", "message", "evidence", "details"}


def test_every_json_field_is_documented(analysis: Analysis) -> None:
    doc = report_dict(analysis)
    text = REPORT_DOC.read_text()
    documented = set(re.findall(r"`([a-z_]+)`", text))
    keys = set(doc) | set(doc["inputs"]) | set(doc["totals"]) | set(doc["servers"][0])
    keys |= {"rule", "severity", "server", "client", "ts", "message", "evidence", "details"}
    assert keys <= documented, sorted(keys - documented)


def test_text_report(analysis: Analysis) -> None:
    text = render(analysis, "text", width=200)
    assert "Servers" in text and "weather" in text and "legacy" in text and "modern-srv" in text
    assert "1 malformed line(s)" in text and re.search(r"caps/\S+\.jsonl:7: not valid JSON", text)
    assert "2 file(s), 10 record(s)" in text


def test_markdown_report(analysis: Analysis) -> None:
    md = render(analysis, "markdown")
    assert md.startswith("# erascope report\n")
    assert "| `weather` | stdio | **legacy** | no | yes |" in md
    assert "## Findings" in md and "## Inputs" in md


def test_findings_sorted_by_severity_then_time(analysis: Analysis) -> None:
    ev = (Evidence("caps/x.jsonl", 2),)
    findings = [
        Finding("b-rule", Severity.INFO, "weather", "info later", ev, ts=5.0),
        Finding("a-rule", Severity.WARNING, "weather", "warning later", ev, ts=9.0),
        Finding("c-rule", Severity.ERROR, "weather", "error", ev, ts=7.0),
        Finding("d-rule", Severity.WARNING, "weather", "warning first", ev, ts=1.0),
    ]
    doc = report_dict(replace(analysis, findings=findings))
    assert [f["message"] for f in doc["findings"]] == ["error", "warning first", "warning later", "info later"]
    assert doc["totals"]["findings"] == {"error": 1, "warning": 2, "info": 1}
    md = render(replace(analysis, findings=findings), "markdown")
    assert md.index("`c-rule`") < md.index("warning first") < md.index("warning later") < md.index("info later")


def test_unknown_format_is_an_error(analysis: Analysis) -> None:
    with pytest.raises(ErascopeError, match="unknown report format"):
        render(analysis, "html")
