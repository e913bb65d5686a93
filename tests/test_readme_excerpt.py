"""The README's excerpt of the corpus report is generated, and is what `erascope analyze captures/`
prints at 100 columns (the width of a piped report): `python -m tests.goldens` rewrites the block
between its markers, and this test fails when the block has drifted from the real report."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from tests import goldens


@pytest.fixture(scope="module")
def printed() -> str:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(goldens.ROOT)
        result = CliRunner().invoke(app, ["analyze", "captures/"], env={"COLUMNS": str(goldens.EXCERPT_WIDTH)})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_readme_excerpt_is_up_to_date(printed: str) -> None:
    readme = (goldens.ROOT / "README.md").read_text(encoding="utf-8")
    assert goldens.EXCERPT_START in readme and goldens.EXCERPT_END in readme
    block = readme.split(goldens.EXCERPT_START, 1)[1].split(goldens.EXCERPT_END, 1)[0]
    assert block == goldens.excerpt_block(printed), "README excerpt is stale: run `python -m tests.goldens`"


def test_the_excerpt_is_cut_from_the_real_report(printed: str) -> None:
    """Every line of the excerpt is a line of the report, in the report's order (`…` marks cuts)."""
    real = iter(printed.splitlines())
    excerpt = goldens.report_excerpt(printed).splitlines()
    assert len(excerpt) > 20
    for line in excerpt:
        if line == "…":
            continue
        assert any(line == r for r in real), f"not in the report (or out of order): {line!r}"
    for server in goldens.EXCERPT_SERVERS:
        assert any(line.startswith(server) for line in excerpt), server
