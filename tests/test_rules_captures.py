"""The rules on the recorded corpus (`captures/corpus/`, real SDK peers): the expected rule ids per scenario.

What each scenario is, and which SDKs recorded it, is in `captures/manifest.json`.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from analyzer.pipeline import analyze

CORPUS = Path(__file__).resolve().parent.parent / "captures" / "corpus"

EXPECTED: dict[str, set[str]] = {
    "auto-modern-stdio": set(),
    "auto-modern-http": set(),
    "auto-legacy-stdio": set(),
    "auto-legacy-http": set(),
    "unsupported-retry-stdio": set(),  # re-probe with a new id and a supported version: correct
    "unsupported-retry-http": set(),
    "legacy-mode-dual-stdio": set(),
    "legacy-mode-dual-http": set(),
    "legacy-client-modern-only-stdio": set(),  # refused once, the client gives up: not stale
    "upgrade-stdio": set(),  # the client re-probes on every start, so it follows the upgrade
    "upgrade-http": set(),
    "crash-on-start-stdio": set(),  # mcp 2.3.0 fails locally after the crash: nothing misread on the wire
    # the upstream never came up: the proxy answered both probe and initialize; not a client misread
    "crash-on-start-http": {"upstream-unreachable"},
    "banner-then-work-stdio": {"stdout-pollution"},
    "banner-then-crash-stdio": {"stdout-pollution"},
    "never-answers-stdio": {"probe-timeout"},
    "probe-storm-stdio": {"probe-storm"},  # a new mcp 2.3.0 Client per tool call
    "probe-storm-http": {"probe-storm"},
    "rollout-split-http": {"rollout-split"},
    "rollout-per-request-http": {"probe-storm", "rollout-split"},
}


def _scenario(name: str) -> Path:
    path = CORPUS / name
    if not path.is_dir():
        pytest.skip(f"captures/corpus/{name} not recorded (make corpus)")
    return path


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_expected_rules(scenario: str) -> None:
    analysis = analyze([_scenario(scenario)])
    assert {f.rule for f in analysis.findings} == EXPECTED[scenario], [f.message for f in analysis.findings]
    for finding in analysis.findings:
        assert finding.evidence
        for ev in finding.evidence:
            assert Path(ev.file).is_file()
            assert ev.line >= 1


def test_probe_storm_numbers_on_the_stdio_storm() -> None:
    analysis = analyze([_scenario("probe-storm-stdio")])
    [storm] = [f for f in analysis.findings if f.rule == "probe-storm"]
    assert storm.client == "mcp 0.1.0"  # clientInfo name and version; the corpus predates host processes
    assert storm.details["probes"] == 20
    assert storm.details["connections"] == 20
    assert storm.details["answer_runs"] == 1
    assert storm.details["cost_s_total"] > 0
    assert storm.details["ttl_zero"] is True  # mcp 2.3.0's DiscoverResult says ttlMs: 0


def test_evidence_lines_point_at_the_probes() -> None:
    analysis = analyze([_scenario("probe-storm-stdio")])
    [storm] = [f for f in analysis.findings if f.rule == "probe-storm"]
    probe_notes = [e for e in storm.evidence if e.note.startswith("probe")]
    assert probe_notes
    for ev in probe_notes:
        line = Path(ev.file).read_text().splitlines()[ev.line - 1]
        assert "server/discover" in line


def test_rollout_split_names_both_peers() -> None:
    analysis = analyze([_scenario("rollout-split-http")])
    [split] = [f for f in analysis.findings if f.rule == "rollout-split"]
    eras = {p["era"] for p in split.details["peers"]}
    assert eras == {"modern", "legacy"}
    assert len({p["peer"] for p in split.details["peers"]}) == 2


def test_expectations_agree_with_the_manifest() -> None:
    manifest = CORPUS.parent / "manifest.json"
    if not manifest.is_file():
        pytest.skip("captures/manifest.json not present")
    scenarios = orjson.loads(manifest.read_bytes())["scenarios"]
    listed = {s["scenario"]: set(s.get("expected_findings", [])) for s in scenarios}
    for name, rules in listed.items():
        if name in EXPECTED:
            assert rules == EXPECTED[name], name
