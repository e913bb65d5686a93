"""`erascope rules`, and `erascope analyze --baseline / --write-baseline` on a real capture file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from addon.errors import ErascopeError
from analyzer.baseline import BASELINE_FORMAT
from analyzer.cli import app
from analyzer.rules import REGISTRY
from analyzer.rules.options import RuleOptions, option_docs, parse_assignments

runner = CliRunner()
ERASCOPE = Path(sys.executable).parent / "erascope"

_PROBE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "server/discover",
    "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "host", "version": "1"},
        }
    },
}
_RESULT = {
    "jsonrpc": "2.0",
    "id": 1,
    "result": {"supportedVersions": ["2026-07-28"], "capabilities": {}, "resultType": "complete", "ttlMs": 60000},
}


def _capture(path: Path, *, banner: bool) -> Path:
    """A stdio capture in format erascope/1: optional stdout banner, a probe and its DiscoverResult."""
    base = {"server": "weather", "conn": "stdio-1"}
    frames: list[tuple[str, str]] = []
    if banner:
        frames.append(("s2c", "Weather server v1 ready"))
    frames += [("c2s", orjson.dumps(_PROBE).decode()), ("s2c", orjson.dumps(_RESULT).decode())]
    records = [
        {"type": "header", "format": "erascope/1", "tool": "erascope", "transport": "stdio", "part": 0,
         "server": "weather", "seq": 0, "ts": 1_800_000_000.0, "mono": 0.0},
        {**base, "type": "lifecycle", "event": "spawn", "argv": ["weather"], "pid": 1, "seq": 1,
         "ts": 1_800_000_000.0, "mono": 0.0},
    ]
    for i, (direction, raw) in enumerate(frames, start=2):
        records.append({**base, "type": "frame", "dir": direction, "raw": raw, "len": len(raw), "nl": True,
                        "seq": i, "ts": 1_800_000_000.0 + i / 10, "mono": i / 10})
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def test_rules_lists_every_rule_with_its_sections() -> None:
    result = runner.invoke(app, ["rules"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for rule_id in REGISTRY:
        assert rule_id in result.output
    assert result.output.count("Why it matters") == len(REGISTRY)


def test_rules_brief_and_unknown_id() -> None:
    brief = runner.invoke(app, ["rules", "--brief"], env={"COLUMNS": "200"})
    assert brief.exit_code == 0
    assert "storm_min_probes" in brief.output
    bad = runner.invoke(app, ["rules", "no-such-rule"])
    assert bad.exit_code == 2
    assert "unknown rule id(s): no-such-rule" in bad.output


@pytest.fixture
def polluted(tmp_path: Path) -> Path:
    return _capture(tmp_path / "polluted.jsonl", banner=True)


def test_baseline_round_trip(tmp_path: Path, polluted: Path) -> None:
    baseline = tmp_path / "baseline.json"
    wrote = runner.invoke(app, ["analyze", str(polluted), "-q", "--write-baseline", str(baseline)])
    assert wrote.exit_code == 0, wrote.output
    doc = orjson.loads(baseline.read_bytes())
    assert doc["format"] == BASELINE_FORMAT
    assert [(e["rule"], e["server"]) for e in doc["accepted"]] == [("stdout-pollution", "weather")]
    # the same findings pass, even with a strict gate
    same = runner.invoke(app, ["analyze", str(polluted), "-q", "--baseline", str(baseline), "--fail-on", "info"])
    assert same.exit_code == 0, same.output


def test_baseline_fails_on_new_finding(tmp_path: Path, polluted: Path) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_bytes(orjson.dumps({"format": BASELINE_FORMAT, "accepted": []}))
    result = runner.invoke(app, ["analyze", str(polluted), "-q", "--baseline", str(baseline)])
    assert result.exit_code == 1
    assert "new finding not in the baseline: warning stdout-pollution on weather" in result.output


def test_baseline_fails_when_a_baselined_finding_disappears(tmp_path: Path) -> None:
    clean = _capture(tmp_path / "clean.jsonl", banner=False)
    baseline = tmp_path / "baseline.json"
    baseline.write_bytes(
        orjson.dumps({"format": BASELINE_FORMAT, "accepted": [{"rule": "stdout-pollution", "server": "weather"}]})
    )
    result = runner.invoke(app, ["analyze", str(clean), "-q", "--baseline", str(baseline)])
    assert result.exit_code == 1
    assert "stale baseline entry: stdout-pollution on weather" in result.output


def test_bad_baseline_is_exit_2(tmp_path: Path, polluted: Path) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text("[]")
    result = runner.invoke(app, ["analyze", str(polluted), "-q", "--baseline", str(baseline)])
    assert result.exit_code == 2
    assert "expected format" in result.output


def test_rule_options_reach_the_rules(polluted: Path) -> None:
    normal = runner.invoke(app, ["analyze", str(polluted), "-q", "-f", "json"])
    capped = runner.invoke(app, ["analyze", str(polluted), "-q", "-f", "json", "--rule-option", "max_evidence=0"])
    assert normal.exit_code == capped.exit_code == 0
    [before] = orjson.loads(normal.stdout)["findings"]
    [after] = orjson.loads(capped.stdout)["findings"]
    assert len(before["evidence"]) == 1
    assert after["evidence"] == []
    assert after["details"]["evidence_total"] == 1


@pytest.mark.parametrize("option", ["nope=1", "storm_min_probes=many", "storm_min_probes"])
def test_bad_rule_option_is_exit_2(polluted: Path, option: str) -> None:
    result = runner.invoke(app, ["analyze", str(polluted), "-q", "--rule-option", option])
    assert result.exit_code == 2
    assert "rule option" in result.output


@pytest.mark.parametrize(
    "option",
    [
        "storm_window_s=nan", "storm_window_s=inf", "split_window_s=1e300", "cost_horizon_s=-inf",
        "storm_probes_per_request=nan", "timeout_min_wait_s=1e10", "max_evidence=99999999999999999999",
    ],
)  # fmt: skip
def test_a_rule_option_out_of_range_is_a_usage_error(polluted: Path, option: str) -> None:
    proc = subprocess.run([str(ERASCOPE), "analyze", str(polluted), "-q", "--rule-option", option],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    name = option.split("=")[0]
    assert f"erascope: error: rule option {name} must be a finite number" in proc.stderr
    with pytest.raises(ErascopeError, match=f"rule option {name} must be"):
        RuleOptions.from_mapping(parse_assignments([option]))


def test_the_largest_rule_options_are_read(polluted: Path) -> None:
    options = [f"--rule-option={name}=1000000000" for name, _default, _doc in option_docs()]
    result = runner.invoke(app, ["analyze", str(polluted), "-q", "-f", "json", *options])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["totals"]["probe_outcomes"] == {"discover-result": 1}


def test_bad_baseline_fails_before_any_report(tmp_path: Path, polluted: Path) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text("{broken")
    result = runner.invoke(app, ["analyze", str(polluted), "-q", "--baseline", str(baseline)])
    assert result.exit_code == 2
    assert "Findings" not in result.stdout
    assert "not valid JSON" in result.output


def test_no_evidence_lines_keep_every_finding() -> None:
    # `max_evidence=0` dropped rollout-split's findings (its evidence was joined to its totals), and
    # with them a CI gate's verdict
    corpus = str(Path(__file__).resolve().parent.parent / "captures" / "corpus")
    normal = runner.invoke(app, ["analyze", corpus, "-q", "-f", "json"])
    bare = runner.invoke(app, ["analyze", corpus, "-q", "-f", "json", "--rule-option", "max_evidence=0"])
    assert normal.exit_code == bare.exit_code == 0
    before, after = (orjson.loads(r.stdout)["findings"] for r in (normal, bare))
    assert "rollout-split" in {f["rule"] for f in before}
    keys = ("rule", "severity", "server", "client", "message")
    assert [{k: f[k] for k in keys} for f in after] == [{k: f[k] for k in keys} for f in before]
    assert all(f["evidence"] == [] and f["details"]["evidence_total"] >= 1 for f in after)
