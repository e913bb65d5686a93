"""`erascope rules` output: lines end where their text ends (no padding to the console width)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from analyzer.cli import app


@pytest.mark.parametrize("args", [["rules"], ["rules", "--brief"], ["rules", "probe-storm"]])
@pytest.mark.parametrize("columns", ["80", "120"])
def test_rules_lines_have_no_trailing_spaces(args: list[str], columns: str) -> None:
    result = CliRunner().invoke(app, args, env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    padded = [n for n, line in enumerate(lines, 1) if line != line.rstrip()]
    assert not padded, f"{len(padded)} of {len(lines)} lines end in spaces, e.g. line {padded[0]}"
    assert "probe-storm" in result.stdout
    assert max(len(line) for line in lines) <= int(columns)
