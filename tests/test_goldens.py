"""The bundled corpus against its goldens and its manifest.

- `test_golden`: the analyzer's json report for `captures/corpus/<scenario>`, reduced to its stable
  parts (`tests.goldens.reduce_report`), equals `tests/goldens/<scenario>.json`. A failure means
  the analyzer's answer changed: regenerate with `python -m tests.goldens` only after checking the
  change is intended, and review the diff by hand.
- The corpus, the manifest and the goldens cover the same scenarios.
- The golden agrees with what the manifest expects (era per server, findings by rule id). Where
  the analyzer is known to disagree, the case is listed in `ANALYZER_GAPS` and marked as an
  expected failure (strict: fixing the analyzer makes it fail until the entry is removed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests import goldens

SCENARIOS = goldens.manifest_scenarios()
NAMES = [s["scenario"] for s in SCENARIOS]

ANALYZER_GAPS: dict[str, str] = {}
"""Scenario → what the analyzer gets wrong today (see the corpus report); keep in step with the goldens."""


def _expect_gap(name: str) -> list[Any]:
    if name in ANALYZER_GAPS:
        return [pytest.mark.xfail(reason=ANALYZER_GAPS[name], strict=True)]
    return []


@pytest.mark.parametrize("name", NAMES)
def test_golden(name: str) -> None:
    path = goldens.golden_path(name)
    assert path.exists(), f"no golden for {name}; run `python -m tests.goldens {name}` and review it"
    expected = orjson.loads(path.read_bytes())
    assert goldens.current(name) == expected


def test_manifest_corpus_and_goldens_cover_the_same_scenarios() -> None:
    assert len(NAMES) == len(set(NAMES)), "duplicate scenario names in the manifest"
    on_disk = {p.name for p in goldens.CORPUS.iterdir() if p.is_dir()}
    assert on_disk == set(NAMES), "corpus folders and manifest scenarios differ"
    goldens_on_disk = {p.stem for p in goldens.GOLDENS.glob("*.json")}
    assert goldens_on_disk == set(NAMES), "golden files and manifest scenarios differ"
    for scenario in SCENARIOS:
        folder = goldens.CORPUS / scenario["scenario"]
        files = sorted(p.name for p in folder.glob("*.jsonl"))
        assert files, f"{scenario['scenario']}: no capture files"
        assert files == scenario["files"], f"{scenario['scenario']}: manifest file list is stale"
        assert scenario["recipe_error"] is None, f"{scenario['scenario']}: {scenario['recipe_error']}"


def test_manifest_records_what_the_clients_reported() -> None:
    for scenario in SCENARIOS:
        reports = scenario["client_reported"]
        assert reports, f"{scenario['scenario']}: no client report"
        for report in reports:
            assert "error" in report or "sessions" in report or "steps" in report, report


@pytest.mark.parametrize(
    "scenario", [pytest.param(s, id=s["scenario"], marks=_expect_gap(s["scenario"])) for s in SCENARIOS]
)
def test_golden_matches_manifest_expectations(scenario: dict[str, Any]) -> None:
    golden = orjson.loads(goldens.golden_path(scenario["scenario"]).read_bytes())
    assert goldens.disagreements(scenario, golden) == []


def test_reduce_report_keeps_only_stable_parts() -> None:
    report = {
        "inputs": {"malformed": [{"file": "a", "line": 3, "reason": "x"}], "torn": []},
        "servers": [
            {
                "server": "s",
                "era": "legacy",
                "modern_support": "no",
                "legacy_support": "yes",
                "first_seen": 1.0,
                "timeline": [{"ts": 1.0, "era": "legacy", "evidence": {}}],
            }
        ],
        "findings": [
            {"rule": "b", "severity": "warning", "server": "s", "ts": 2.0},
            {"rule": "a", "severity": "error", "server": "s", "ts": 1.0},
        ],
    }
    assert goldens.reduce_report(report) == {
        "servers": {"s": {"era": "legacy", "modern_support": "no", "legacy_support": "yes", "timeline": ["legacy"]}},
        "findings": [["a", "error", "s"], ["b", "warning", "s"]],
        "malformed": 1,
        "torn": 0,
    }


def test_disagreements_name_era_and_findings() -> None:
    scenario = {"servers": {"s": {"expected": "modern"}}, "expected_findings": ["probe-storm"]}
    reduced = {"servers": {"s": {"era": "legacy"}}, "findings": [["misread-modern", "error", "s"]]}
    assert goldens.disagreements(scenario, reduced) == [
        "era of s: expected modern, analyzer says legacy",
        "missing finding: probe-storm",
        "unexpected finding: misread-modern",
    ]


# --- the recipe itself, end to end (real peers, real recorders) -----------------------------------

RECORDED_AGAIN = ("auto-modern-stdio", "auto-legacy-http")
"""One stdio scenario and one HTTP scenario with a legacy peer: quick, and between them they use
every moving part of the recipe (tee, proxy, both SDK environments, process groups)."""


@pytest.fixture(scope="module")
def rerecorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import legacy_python

    legacy_python()  # created outside the recipe's run so its time does not count against the timeout
    out = tmp_path_factory.mktemp("corpus")
    proc = subprocess.run(
        [sys.executable, str(goldens.ROOT / "captures" / "record.py"), "--out", str(out), *RECORDED_AGAIN],
        cwd=goldens.ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.e2e
@pytest.mark.legacy_peer
@pytest.mark.parametrize("name", RECORDED_AGAIN)
def test_rerecording_has_the_committed_structure(rerecorded: Path, name: str) -> None:
    assert goldens.structure(rerecorded / name) == goldens.structure(goldens.CORPUS / name)


@pytest.mark.e2e
@pytest.mark.legacy_peer
@pytest.mark.parametrize("name", RECORDED_AGAIN)
def test_rerecording_analyzes_like_the_golden(rerecorded: Path, name: str) -> None:
    expected = orjson.loads(goldens.golden_path(name).read_bytes())
    assert goldens.reduced_analysis(rerecorded / name) == expected


@pytest.mark.e2e
@pytest.mark.legacy_peer
def test_rerecording_manifest_says_what_the_clients_saw(rerecorded: Path) -> None:
    manifest = orjson.loads((rerecorded / "manifest.json").read_bytes())
    by_name = {s["scenario"]: s for s in manifest["scenarios"]}
    assert sorted(by_name) == sorted(RECORDED_AGAIN)
    versions = {n: by_name[n]["client_reported"][0]["sessions"][0]["protocol_version"] for n in RECORDED_AGAIN}
    assert versions == {"auto-modern-stdio": "2026-07-28", "auto-legacy-http": "2025-11-25"}
    for name in RECORDED_AGAIN:
        files = sorted(p.name for p in (rerecorded / name).glob("*.jsonl"))
        assert files == by_name[name]["files"]
        header = orjson.loads((rerecorded / name / files[0]).read_bytes().splitlines()[0])
        assert header["server"] == f"{name}-server"  # fixed keys keep reports comparable across runs
