"""CI gates at their edges: baselines with a selection, findings on records without a server key
(which `analyze` reports with a null server), and `watch --fail-on` on those findings."""

from __future__ import annotations

from pathlib import Path

import orjson
from typer.testing import CliRunner

from analyzer.baseline import compare, load_baseline, write_baseline
from analyzer.cli import app
from analyzer.findings import Finding, Severity
from analyzer.watch import Watcher
from tests.test_messages import Cap, err, probe

runner = CliRunner()


def _rc_error(cap: Cap) -> None:
    """A probe refused with the release candidate's -32004: one `rc-error-code` warning."""
    cap.c2s(probe(1))
    cap.s2c(err(1, -32004, "Unsupported", {"supported": ["2026-07-28"]}))


def _two_servers(root: Path) -> Path:
    for server in ("alpha", "beta"):
        cap = Cap(root, server=server)
        _rc_error(cap)
        cap.close()
    return root


def _keyless(root: Path) -> Path:
    """A capture whose records carry no `server` field (read all the same: captures/FORMAT.md)."""
    cap = Cap(root.parent / f"{root.name}-source", server="srv")  # outside root: not an input
    _rc_error(cap)
    lines = [orjson.loads(line) for line in cap.close().read_bytes().splitlines()]
    for record in lines:
        record.pop("server", None)
        record.pop("chain", None)
    root.mkdir(parents=True, exist_ok=True)
    path = root / "keyless.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines if r["type"] != "part-end"))
    return path


def test_a_selection_does_not_make_other_servers_entries_stale(tmp_path: Path) -> None:
    caps = _two_servers(tmp_path / "caps")
    baseline = tmp_path / "baseline.json"
    assert runner.invoke(app, ["analyze", str(caps), "-q", "--write-baseline", str(baseline)]).exit_code == 0
    assert runner.invoke(app, ["analyze", str(caps), "-q", "--baseline", str(baseline)]).exit_code == 0
    # only alpha's traffic is analyzed: beta's finding was not looked for, it did not vanish
    result = runner.invoke(app, ["analyze", str(caps), "-q", "--baseline", str(baseline), "--server", "alpha"])
    assert result.exit_code == 0, result.output
    assert "stale" not in result.output
    # a selected server's entry that no longer matches is still stale
    doc = orjson.loads(baseline.read_bytes())
    doc["accepted"] = [{**e, "rule": "probe-storm"} if e["server"] == "alpha" else e for e in doc["accepted"]]
    baseline.write_bytes(orjson.dumps(doc))
    result = runner.invoke(app, ["analyze", str(caps), "-q", "--baseline", str(baseline), "--server", "alpha"])
    assert result.exit_code == 1
    assert "stale baseline entry: probe-storm on alpha" in result.output
    assert "beta" not in result.output.split("stale", 1)[1]
    # under a time window no entry is stale: a finding outside the window still occurs
    window = ["--server", "alpha", "--since", "2000-01-01"]  # all of alpha's traffic, but a window
    result = runner.invoke(app, ["analyze", str(caps), "-q", "--baseline", str(baseline), *window])
    assert result.exit_code == 1, result.output  # alpha's rc-error-code is new to the edited baseline
    assert "new finding not in the baseline: warning rc-error-code on alpha" in result.output
    assert "stale" not in result.output


def test_compare_scope_limits_stale_entries(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    write_baseline(
        [Finding("probe-storm", Severity.WARNING, "a", "m"), Finding("probe-storm", Severity.WARNING, "b", "m")], path
    )
    result = compare([Finding("probe-storm", Severity.WARNING, "a", "m")], path, scope={"a"})
    assert not result.failed
    assert [e.server for e in compare([], path, scope={"a"}).stale] == ["a"]


def test_keyless_findings_write_and_read_a_baseline(tmp_path: Path) -> None:
    keyless = _keyless(tmp_path / "caps")
    keyed = Cap(tmp_path / "caps", server="srv")
    _rc_error(keyed)
    keyed.close()
    report = orjson.loads(runner.invoke(app, ["analyze", str(tmp_path / "caps"), "-q", "-f", "json"]).stdout)
    assert sorted(f["server"] or "" for f in report["findings"]) == ["", "srv"]
    baseline = tmp_path / "baseline.json"
    result = runner.invoke(app, ["analyze", str(tmp_path / "caps"), "-q", "--write-baseline", str(baseline)])
    assert result.exit_code == 0, result.output  # was a TypeError traceback, exit 1, and no baseline
    assert [e.server for e in load_baseline(baseline)] == [None, "srv"]
    result = runner.invoke(
        app, ["analyze", str(tmp_path / "caps"), "-q", "--baseline", str(baseline), "--fail-on", "warning"]
    )
    assert result.exit_code == 0, result.output  # the baseline it wrote was refused: exit 2
    # a baseline without the keyless entry: the keyless finding is new (exit 1, named), not a traceback
    only_keyed = tmp_path / "keyed.json"
    doc = orjson.loads(baseline.read_bytes())
    doc["accepted"] = [e for e in doc["accepted"] if e["server"] is not None]
    only_keyed.write_bytes(orjson.dumps(doc))
    result = runner.invoke(app, ["analyze", str(tmp_path / "caps"), "-q", "--baseline", str(only_keyed)])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "new finding not in the baseline: warning rc-error-code on -" in result.output
    # and the keyless entry goes stale like any other once its finding is gone
    keyless.unlink()
    result = runner.invoke(app, ["analyze", str(tmp_path / "caps"), "-q", "--baseline", str(baseline)])
    assert result.exit_code == 1
    assert "stale baseline entry: rc-error-code on - no longer occurs" in result.output


def test_watch_reports_findings_of_records_without_a_server_key(tmp_path: Path) -> None:
    live = tmp_path / "live"
    _keyless(live)
    report = orjson.loads(runner.invoke(app, ["analyze", str(live), "-q", "-f", "json"]).stdout)
    assert [(f["rule"], f["server"]) for f in report["findings"]] == [("rc-error-code", None)]
    watcher = Watcher([str(live)], clock=lambda: 1e10)
    events = watcher.poll()
    findings = [e for e in events if e.kind == "finding"]
    # `analyze` fails a gate on it; `watch --fail-on warning` must too
    assert [(e.rule, e.server) for e in findings] == [("rc-error-code", None)]
    assert " server=-: " in findings[0].as_text()
