"""Member names written with escapes (`"\\u006dethod"` is `"method"` to every JSON parser, the MCP
SDKs' included): a payload reads as the same message however its names are written.

Each case takes real SDK traffic from the corpus, writes every member name of every payload with its
first character escaped, and analyzes both: the verdicts and the findings must be the same, as JSONL
and as an archive.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from analyzer.compact import compact
from analyzer.pipeline import analyze
from analyzer.report import render_json

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "captures" / "corpus"
SCENARIOS = ["auto-modern-stdio", "auto-legacy-stdio", "auto-modern-http", "legacy-sse-http", "unsupported-retry-http",
             "upgrade-stdio", "never-answers-stdio"]  # fmt: skip
_NAME = re.compile(r'"([^"\\])([^"\\]*)"(\s*:)')


def escaped_names(payload: str) -> str:
    """`payload` with the first character of each member name written as a `\\u` escape."""
    return _NAME.sub(lambda m: f'"\\u{ord(m[1]):04x}{m[2]}"{m[3]}', payload)


def edited_copy(scenario: str, out: Path, edit: Callable[[str], str]) -> int:
    """The scenario's captures under `out`, same names, `edit` applied to every JSON payload; how many
    payloads changed."""
    out.mkdir(parents=True)
    changed = 0
    for capture in sorted((CORPUS / scenario).glob("*.jsonl")):
        lines = []
        for line in capture.read_bytes().splitlines():
            record = orjson.loads(line)
            raw = record.get("raw")
            if isinstance(raw, str) and raw.lstrip().startswith(("{", "[")):
                record["raw"] = edit(raw)
                changed += record["raw"] != raw
            lines.append(orjson.dumps(record))
        (out / capture.name).write_bytes(b"\n".join(lines) + b"\n")
    return changed


def _escaped_copy(scenario: str, out: Path) -> int:
    """The scenario's captures under `out`, every payload's member names escaped (`edited_copy`)."""
    return edited_copy(scenario, out, escaped_names)


def _read(report: dict[str, Any]) -> dict[str, Any]:
    """What a reader of the report decides by: each server's era and outcomes, each finding's rule,
    server, severity and evidence lines (file names without their folder)."""

    def at(e: dict[str, Any]) -> tuple[str, int]:
        return Path(e["file"]).name, e["line"]

    return {
        "servers": [(v["server"], v["era"], v["modern_support"], v["legacy_support"], v["probe_outcomes"],
                     v["init_outcomes"], v["versions"], [at(e) for e in v["evidence"]]) for v in report["servers"]],
        "findings": sorted((f["rule"], f["server"], f["severity"], [at(e) for e in f["evidence"]])
                           for f in report["findings"]),
        "totals": report["totals"],
    }  # fmt: skip


def _report(paths: list[str]) -> dict[str, Any]:
    return orjson.loads(render_json(analyze(paths)))


def test_the_escaping_helper_writes_names_only() -> None:
    text = '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"a b":"c: d"}}'
    assert escaped_names(text) == (
        '{"\\u006asonrpc":"2.0","\\u0069d":1,"\\u006dethod":"server/discover","\\u0070arams":{"\\u0061 b":"c: d"}}'
    )
    assert orjson.loads(escaped_names(text)) == orjson.loads(text)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_member_names_written_with_escapes_read_as_the_names(scenario: str, tmp_path: Path) -> None:
    # Read before as no JSON-RPC message: a DiscoverResult was garbage, a served `initialize` no
    # answer, and a dual-era server `broken`, with stdout-pollution and misread-crash findings the
    # traffic did not earn (the literal searches that pick which rows to read looked for `"result"`).
    assert _escaped_copy(scenario, tmp_path / "escaped") > 0
    plain = _read(_report([str(CORPUS / scenario)]))
    assert _read(_report([str(tmp_path / "escaped")])) == plain


def test_member_names_written_with_escapes_read_as_the_names_in_an_archive(tmp_path: Path) -> None:
    for scenario in ("auto-legacy-stdio", "auto-modern-http"):
        _escaped_copy(scenario, tmp_path / "escaped" / scenario)
    compact([str(tmp_path / "escaped")], tmp_path / "archive")
    plain = _read(_report([str(CORPUS / "auto-legacy-stdio"), str(CORPUS / "auto-modern-http")]))
    assert _read(_report([str(tmp_path / "archive")])) == plain


def watched(live: Path) -> list[dict[str, Any]]:
    """The events of `erascope watch` over `live`: a poll, and one a minute later (probe timeouts past)."""
    from analyzer.watch import Watcher

    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = [e.as_json() for e in watcher.poll()]
    clock[0] += 60
    return events + [e.as_json() for e in watcher.poll()]


def test_watch_reads_escaped_member_names_as_analyze_does(tmp_path: Path) -> None:
    from tests.test_watch import expected, reported

    live = tmp_path / "live"
    _escaped_copy("auto-legacy-stdio", live)
    events = watched(live)
    report = _report([str(live)])
    assert [(v["era"], v["init_outcomes"]) for v in report["servers"]] == [("legacy", {"served": 1})]
    assert reported(events) == expected(report)
