"""Reports: json schema and documentation, text and markdown content and layout, ordering, relative paths.

The text layout tests render the real bundled corpus (long paths and server names) as well as small
captures written here, and check the promises of the layout: no line wider than the console, every
cited file numbered once in the legend, every `[n]:line` resolving to the evidence it stands for.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from addon.errors import ErascopeError
from analyzer.cli import app
from analyzer.findings import Evidence, Finding, Severity
from analyzer.pipeline import Analysis, analyze
from analyzer.report import REPORT_SCHEMA, render, report_dict
from tests.test_messages import Cap, discover_result, err, init, init_result, probe

ROOT = Path(__file__).resolve().parent.parent
REPORT_DOC = ROOT / "analyzer" / "REPORT.md"
CORPUS = ROOT / "captures" / "corpus"
LONG_DIR = Path("captures") / "incident-2026-11-30-rollout-of-the-weather-fleet" / "node-b"
REF = re.compile(r"\[(\d+)\]:(\d+(?:,\d+)*)")


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
    # line 7 is the part-end record the writer closed the capture with; the garbage was appended after it
    assert [(m["line"], m["reason"]) for m in doc["inputs"]["malformed"]] == [(8, "not valid JSON")]
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


@pytest.fixture(scope="module")
def corpus() -> Analysis:
    return analyze([str(CORPUS)])


@pytest.fixture
def long_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Analysis:
    """A server with a long name under a deep directory: every path is longer than 100 columns."""
    monkeypatch.chdir(tmp_path)
    cap = Cap(LONG_DIR, server="legacy-client-modern-only-stdio-server")
    cap.c2s(probe(1))
    cap.s2c(err(1, -32602, "Invalid request parameters", ""))
    cap.c2s(init(2))
    cap.s2c(init_result(2))
    cap.close()
    return analyze(["captures"])


def _legend(text: str) -> dict[int, str]:
    """`{n: path}` from the text report's "Files" section (`dir/` lines, then `  [n] name`)."""
    legend: dict[int, str] = {}
    directory = ""
    for line in text.split("\nFiles\n", 1)[1].splitlines():
        if m := re.fullmatch(r" +\[(\d+)\] (\S+)", line):
            assert int(m[1]) not in legend, f"[{m[1]}] listed twice"
            legend[int(m[1])] = directory + m[2]
        elif line.endswith("/"):
            directory = line.strip()
    return legend


def _resolve(refs: str, legend: dict[int, str]) -> set[tuple[str, int]]:
    """`[1]:3,5 [2]:4` → {(path 1, 3), (path 1, 5), (path 2, 4)}."""
    return {(legend[int(n)], int(line)) for n, lines in REF.findall(refs) for line in lines.split(",")}


def _entry(lines: list[str], start: int) -> str:
    """Line `start` with its wrapped continuation lines (indented), joined."""
    end = start + 1
    while end < len(lines) and lines[end].startswith(" "):
        end += 1
    return " ".join(line.strip() for line in lines[start:end])


def _why(text: str, server: str) -> str:
    lines = text.split("\nWhy each verdict", 1)[1].split("\nFindings", 1)[0].splitlines()
    return _entry(lines, next(i for i, line in enumerate(lines) if line.startswith(server + " ")))


def _too_wide(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if cell_len(line) > width]


def test_text_report(analysis: Analysis) -> None:
    text = render(analysis, "text", width=200)
    assert text.startswith("erascope: 2 files, 10 records, 2 servers; findings: ")
    assert "Servers" in text and "weather" in text and "legacy" in text and "modern-srv" in text
    m = re.search(r"^  \[(\d+)\]:8: not valid JSON$", text, re.M)  # files by number, as evidence
    assert "1 malformed line(s)" in text and m
    assert _legend(text)[int(m[1])].startswith("caps/")
    assert "2 file(s), 10 record(s)" in text


@pytest.mark.parametrize("width", [100, 80])
def test_text_lines_fit_the_width(corpus: Analysis, long_paths: Analysis, width: int) -> None:
    for analysis in (corpus, long_paths):
        text = render(analysis, "text", width=width)
        assert not _too_wide(text, width), _too_wide(text, width)
        assert "Files" in text and REF.search(text)
    coloured = render(corpus, "text", width=width, color=True)
    assert "\x1b[" in coloured
    assert not _too_wide(re.sub(r"\x1b\[[0-9;]*m", "", coloured), width)


def test_legend_numbers_every_cited_file_once(corpus: Analysis) -> None:
    text = render(corpus, "text", width=100)
    body, _ = text.split("\nFiles\n", 1)
    legend = _legend(text)
    assert sorted(legend) == list(range(1, len(legend) + 1))
    assert len(set(legend.values())) == len(legend), "a file has two numbers"
    cited = {int(n) for n, _ in REF.findall(body)}
    assert cited == set(legend), "a number is cited without a legend entry, or listed but never cited"
    assert set(legend.values()) <= set(corpus.inputs.files)
    assert not any(f in body for f in corpus.inputs.files), "a full path outside the legend"


def test_long_paths_stay_whole_in_the_legend(long_paths: Analysis) -> None:
    text = render(long_paths, "text", width=100)
    [path] = long_paths.inputs.files
    assert len(path) > 100
    assert _legend(text) == {1: path}
    assert f"{LONG_DIR}/" in text.splitlines()


def test_evidence_references_resolve_to_file_and_line(corpus: Analysis) -> None:
    a, b = corpus.inputs.files[:2]
    finding = Finding(
        "cross-file", Severity.ERROR, corpus.servers[0].server, "spans two files",
        (Evidence(a, 98), Evidence(b, 4), Evidence(a, 100)), client="mcp", ts=corpus.servers[0].first_seen,
    )
    analysis = replace(corpus, findings=[finding, *corpus.findings])
    text = render(analysis, "text", width=100)
    legend = _legend(text)
    lines = text.splitlines()
    for f in analysis.findings:
        head = next(i for i, line in enumerate(lines) if f" {f.rule}  server {f.server}" in line)
        at = next(i for i in range(head, len(lines)) if lines[i].startswith("    evidence:"))
        assert _resolve(_entry(lines, at), legend) == {(e.file, e.line) for e in f.evidence[:12]}, f.rule
    assert f"evidence: [{_number(legend, a)}]:98,100 [{_number(legend, b)}]:4" in text
    for v in analysis.servers:
        why = _why(text, v.server)
        expected = {(e.file, e.line) for e in v.evidence}
        if len(v.timeline) > 1:
            expected |= {(t.evidence.file, t.evidence.line) for t in v.timeline}
        assert _resolve(why, legend) == expected, v.server


def _number(legend: dict[int, str], path: str) -> int:
    return next(n for n, p in legend.items() if p == path)


def test_why_lines_say_what_each_line_was_and_when_the_era_changed(corpus: Analysis) -> None:
    text = render(corpus, "text", width=100)
    legend = _legend(text)
    upgrade = next(v for v in corpus.servers if v.server == "upgrade-stdio-server")
    old, new = upgrade.timeline
    why = _why(text, "upgrade-stdio-server")
    n_old, n_new = _number(legend, old.evidence.file), _number(legend, new.evidence.file)
    assert f"[{n_new}]:{new.evidence.line} probe discover-result" in why
    assert "era legacy from " in why and f"([{n_old}]:{old.evidence.line}) → modern at " in why


def test_text_keeps_every_server_finding_and_malformed_line(corpus: Analysis, analysis: Analysis) -> None:
    for a in (corpus, analysis):
        text = render(a, "text", width=100)
        for v in a.servers:
            assert re.search(rf"^{re.escape(v.server)} ", text, re.M), v.server
        for f in a.findings:
            assert f"{f.severity.value.upper()}  {f.rule}  server {f.server}" in text
        cited = _resolve(text.split("\nFiles\n", 1)[0], _legend(text))
        for b in a.inputs.malformed + a.inputs.torn:
            assert (b.file, b.line) in cited
    assert f"Findings: {len(corpus.findings)}" in render(corpus, "text", width=100)


def test_names_from_captures_are_not_markup(analysis: Analysis) -> None:
    odd = "[bold]weather[/bold]"
    servers = [replace(v, server=odd, clients=["[red]host"]) for v in analysis.servers]
    text = render(replace(analysis, servers=servers, clients=None), "text", width=100)
    assert f"\n{odd}  " in text and "[red]host" in text


def test_cli_text_report_follows_columns(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["analyze", "-q", str(CORPUS)], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert not _too_wide(result.stdout, 100)
    assert "\nFiles\n" in result.stdout


def test_markdown_report(analysis: Analysis) -> None:
    md = render(analysis, "markdown")
    assert md.startswith("# erascope report\n")
    assert "| `weather` | stdio | **legacy** | no | yes |" in md
    assert "## Findings" in md and "## Inputs" in md


def test_markdown_cites_files_by_number_with_the_legend_last(corpus: Analysis) -> None:
    md = render(corpus, "markdown")
    body, legend_text = md.split("\n## Files\n", 1)
    legend = {int(n): p for n, p in re.findall(r"^- \[(\d+)\] `([^`]+)`$", legend_text, re.M)}
    assert len(legend) == len(legend_text.strip().splitlines()) == len(set(legend.values()))
    assert {int(n) for n, _ in REF.findall(body)} == set(legend)
    assert not any(f in body for f in corpus.inputs.files)
    for f in corpus.findings:
        head = f"- **{f.severity.value}** `{f.rule}` on `{f.server}`"
        block = body.split(head, 1)[1].split("\n- ", 1)[0]
        evidence = next(line for line in block.splitlines() if line.startswith("  - evidence: "))
        assert _resolve(evidence, legend) == {(e.file, e.line) for e in f.evidence[:12]}, f.rule


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
