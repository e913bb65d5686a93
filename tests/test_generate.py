"""The synthetic capture generator: deterministic, in the exact `erascope/1` format, and hiding
what its manifest says it hides (probe storm, rollout split, malformed and torn lines)."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import orjson
import polars as pl
import pytest

from addon import format as fmt
from analyzer.schema import RECORD_SCHEMA
from bench import generate as gen

SIZE = 3 << 20


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def _records(path: Path) -> tuple[list[dict], list[int]]:
    """Parsed records and the 1-based numbers of unparseable lines."""
    records, bad = [], []
    for n, line in enumerate(path.read_bytes().split(b"\n"), 1):
        if not line:
            continue
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            bad.append(n)
    return records, bad


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("gen") / "data"
    gen.generate(out, SIZE, files=3, spawns=18, seed=7)
    return out, orjson.loads((out / "manifest.json").read_bytes())


def test_deterministic_for_a_seed(tmp_path: Path, generated: tuple[Path, dict]) -> None:
    out, _ = generated
    again = tmp_path / "again"
    gen.generate(again, SIZE, files=3, spawns=18, seed=7)
    assert _digest(again) == _digest(out)
    other = tmp_path / "other"
    gen.generate(other, SIZE, files=3, spawns=18, seed=8)
    assert _digest(other) != _digest(out)


def test_size_and_counts_match_the_manifest(generated: tuple[Path, dict]) -> None:
    out, manifest = generated
    files = sorted(out.glob("*" + fmt.CAPTURE_SUFFIX))
    assert [f["name"] for f in manifest["files"]] == [p.name for p in files]
    assert len(files) == 3 + 18 + 18 // 8  # bulk + spawns + the TypeScript client's sibling spawns
    total = sum(p.stat().st_size for p in files)
    assert total == manifest["bytes"]
    assert 0.9 * SIZE < total < 1.25 * SIZE
    for entry, path in zip(manifest["files"], files, strict=True):
        assert (
            path.read_bytes().count(b"\n") + (entry["name"] in {t["file"] for t in manifest["torn"]}) == entry["lines"]
        )


def test_every_record_follows_the_format(generated: tuple[Path, dict]) -> None:
    out, _ = generated
    kinds: Counter[str] = Counter()
    for path in sorted(out.glob("*" + fmt.CAPTURE_SUFFIX)):
        records, _ = _records(path)
        header = records[0]
        assert header["type"] == fmt.HEADER and fmt.parse_format_id(header["format"]) == fmt.FORMAT_MAJOR
        assert header["seq"] == 0 and header["transport"] in {fmt.STDIO, fmt.HTTP}
        seqs = [r["seq"] for r in records[1:]]
        assert seqs == list(range(1, len(seqs) + 1)), path.name
        for r in records[1:]:
            kinds[r["type"]] += 1
            assert r["type"] in fmt.RECORD_TYPES
            assert {"ts", "mono", "server", "conn"} <= r.keys()
            if "raw" in r:
                assert r["len"] == len(r["raw"].encode()), r
            if r["type"] == fmt.FRAME:
                assert r["dir"] in {fmt.C2S, fmt.S2C} and r["nl"] is True
            if r["type"] == fmt.LIFECYCLE:
                assert r["event"] in fmt.LIFECYCLE_EVENTS
            if r["type"].startswith(("http.", "sse.")):
                assert r["flow"] and header["transport"] == fmt.HTTP
        stamps = [r["ts"] for r in records]
        assert stamps == sorted(stamps), f"{path.name}: records out of time order"
    for needed in (fmt.FRAME, fmt.STDERR, fmt.LIFECYCLE, fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE, fmt.SSE_EVENT):
        assert kinds[needed] > 0, needed


def test_clean_captures_scan_with_the_record_schema(tmp_path: Path) -> None:
    out = tmp_path / "clean"
    manifest = gen.generate(out, 1 << 20, files=2, spawns=9, seed=3, clean=True)
    assert manifest.malformed == [] and manifest.torn == []
    files = sorted(str(p) for p in out.glob("*" + fmt.CAPTURE_SUFFIX))
    counts = pl.scan_ndjson(files, schema=RECORD_SCHEMA).select(pl.len()).collect()
    assert counts.item() == sum(f["records"] for f in manifest.files)


def test_malformed_and_torn_lines_are_where_the_manifest_says(generated: tuple[Path, dict]) -> None:
    out, manifest = generated
    found_mid, found_torn = set(), set()
    for path in sorted(out.glob("*" + fmt.CAPTURE_SUFFIX)):
        _, bad = _records(path)
        lines = path.read_bytes().count(b"\n")
        for n in bad:
            (found_torn if n == lines + 1 else found_mid).add((path.name, n))
    assert found_mid == {(m["file"], m["line"]) for m in manifest["malformed"]}
    assert found_torn == {(t["file"], t["line"]) for t in manifest["torn"]}
    assert found_mid and found_torn


def _probe_answers(out: Path) -> list[tuple[dict, dict, dict | None]]:
    """(request record, decoded request, response record or None) for every HTTP probe."""
    pending: dict[str, tuple[dict, dict]] = {}
    pairs: list[tuple[dict, dict, dict | None]] = []
    for path in sorted(out.glob("*" + fmt.CAPTURE_SUFFIX)):
        for r in _records(path)[0]:
            if r["type"] == fmt.HTTP_REQUEST and r.get("raw"):
                msg = orjson.loads(r["raw"])
                if msg.get("method") == "server/discover":
                    pending[r["flow"]] = (r, msg)
            elif r["type"] in (fmt.HTTP_RESPONSE, fmt.HTTP_ERROR) and r["flow"] in pending:
                req, msg = pending.pop(r["flow"])
                pairs.append((req, msg, r if r["type"] == fmt.HTTP_RESPONSE else None))
    return pairs


def test_the_hidden_probe_storm_is_in_the_traffic(generated: tuple[Path, dict]) -> None:
    out, manifest = generated
    storm = manifest["storm"]
    assert storm["server"] == gen.API and storm["probes"] >= 40
    storm_probes = [
        req
        for req, msg, _ in _probe_answers(out)
        if msg["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]["name"] == storm["client"]
    ]
    assert len(storm_probes) == storm["probes"]
    assert len({r["conn"] for r in storm_probes}) == storm["probes"], "one new connection per probe"
    span = storm_probes[-1]["ts"] - storm_probes[0]["ts"]
    assert span / storm["probes"] < 0.5, "probes arrive several per second"
    ttls = {
        orjson.loads(resp["raw"])["result"]["ttlMs"] for req, msg, resp in _probe_answers(out) if req in storm_probes
    }
    assert ttls == {0}


def test_the_hidden_rollout_split_is_in_the_traffic(generated: tuple[Path, dict]) -> None:
    out, manifest = generated
    by_peer: dict[str, Counter[int]] = {}
    for req, _, resp in _probe_answers(out):
        if req["url"] == gen.FLEET and resp is not None:
            by_peer.setdefault(resp["peer"], Counter())[resp["status"]] += 1
    assert set(by_peer) == set(gen.FLEET_NODES)
    for node, era in gen.FLEET_NODES.items():
        assert set(by_peer[node]) == ({400} if era == "legacy" else {200}), node
    assert {p: dict(c) for p, c in manifest["fleet_probes_by_peer"].items()} == {
        p: {"legacy-answer" if gen.FLEET_NODES[p] == "legacy" else "discover-result": sum(c.values())}
        for p, c in by_peer.items()
    }


def test_probe_outcome_mix(generated: tuple[Path, dict]) -> None:
    _, manifest = generated
    probes = manifest["probes"]
    for outcome in ("discover-result", "legacy-answer", "unsupported-version", "no-answer", "connection-died"):
        assert probes.get(outcome, 0) > 0, outcome
    assert probes["discover-result"] > probes["legacy-answer"] > probes["no-answer"]


def test_cli_refuses_a_directory_with_captures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "d"
    assert gen.main(["--size", "200k", "--out", str(out), "--files", "2", "--spawns", "2"]) == 0
    assert gen.main(["--size", "200k", "--out", str(out)]) == 2
    assert "already holds captures" in capsys.readouterr().err
    assert gen.main(["--size", "lots", "--out", str(tmp_path / "e")]) == 2


@pytest.mark.parametrize(
    ("text", "expected"), [("1GB", 1 << 30), ("512MB", 512 << 20), ("300k", 300 << 10), ("77", 77)]
)
def test_parse_size(text: str, expected: int) -> None:
    assert gen.parse_size(text) == expected


def test_the_analyzer_finds_what_was_planted(generated: tuple[Path, dict]) -> None:
    from analyzer.pipeline import analyze

    out, manifest = generated
    analysis = analyze([out])
    located = {(Path(b.file).name, b.line) for b in analysis.inputs.malformed}
    assert located == {(m["file"], m["line"]) for m in manifest["malformed"]}
    assert {(Path(b.file).name, b.line) for b in analysis.inputs.torn} == {
        (t["file"], t["line"]) for t in manifest["torn"]
    }
    assert analysis.inputs.records == sum(f["records"] for f in manifest["files"])
    storms = [f for f in analysis.findings if f.rule == "probe-storm"]
    # a client is its identity (`analyzer.identity`): clientInfo name and version first
    planted = f"{manifest['storm']['client']} {manifest['storm']['client_version']}"
    assert [(f.server, (f.client or "").split(" · ")[0]) for f in storms] == [(gen.API, planted)]
    assert storms[0].details["probes"] >= manifest["storm"]["probes"]
    assert [f.server for f in analysis.findings if f.rule == "rollout-split"] == [gen.FLEET]


def test_benchmark_workloads_read_the_generated_captures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench import workloads

    out = tmp_path / "clean"
    manifest = gen.generate(out, 512 << 10, files=2, spawns=9, seed=4, clean=True)
    records = sum(f["records"] for f in manifest.files)
    results = {}
    for args in (["scan", str(out)], ["analyze", str(out), "--jobs", "2"], ["load", str(out)], ["stages", str(out)]):
        assert workloads.main(args) == 0
        results[args[0]] = orjson.loads(capsys.readouterr().out)
    assert results["scan"]["records"] == results["analyze"]["records"] == results["load"]["records"] == records
    assert results["stages"]["findings"] == results["analyze"]["findings"] > 0
    assert set(results["stages"]["stages"]) == {
        "extract_files",
        "combine",
        "classify",
        "verdicts",
        "request_view",
        "rules",
        "clients",
    }
