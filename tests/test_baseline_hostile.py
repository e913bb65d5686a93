"""A baseline is a JSON file meant to be committed, diffed and reviewed: like the json report, it
acts on nothing a server key says when shown in a terminal (C1 controls such as the CSI U+009B,
bidi overrides and isolates, line separators written as JSON escapes), and reads back the same."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from addon.errors import ErascopeError
from analyzer.baseline import MAX_BASELINE_BYTES, load_baseline
from analyzer.cli import app
from tests.test_report_hostile import SERVER, _raw_controls, hostile_dir  # noqa: F401 - the fixture is used by name


def test_a_written_baseline_acts_on_nothing_and_reads_back_the_same(
    hostile_dir: Path, tmp_path: Path  # noqa: F811
) -> None:
    baseline = tmp_path / "erascope-baseline.json"
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", "-q", str(hostile_dir), "--write-baseline", str(baseline)])
    assert result.exit_code == 0, result.output
    text = baseline.read_text(encoding="utf-8")
    assert not _raw_controls(text), _raw_controls(text)
    assert "\\u009b31m \\u202eevil" in text
    assert [e["server"] for e in orjson.loads(text)["accepted"]] == [SERVER]
    again = runner.invoke(app, ["analyze", "-q", str(hostile_dir), "--baseline", str(baseline)])
    assert again.exit_code == 0, again.output


def test_a_baseline_larger_than_any_baseline_is_refused_unread(tmp_path: Path) -> None:
    """`--baseline /dev/zero` (or a huge file) was read whole into memory: a baseline is bounded."""
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(MAX_BASELINE_BYTES + 1)  # sparse: no disk used
    for path in (huge, Path("/dev/zero")):
        with pytest.raises(ErascopeError, match="larger than"):
            load_baseline(path)
