"""Era labels are explained where they are used: the text and markdown reports carry a short legend
of the labels they show, and the README has a table of every label with the evidence that gives it.
The labels are the ones the code produces (`analyzer.eras.ERAS`), checked against `_label` itself."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import polars as pl
import pytest

from analyzer.eras import ERAS, MIXED, NO, YES, _label
from analyzer.pipeline import Analysis, analyze
from analyzer.report import ERA_LEGEND, render

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "captures" / "corpus"


@pytest.fixture(scope="module")
def corpus() -> Analysis:
    return analyze([str(CORPUS)])


def test_eras_lists_every_label_the_code_gives() -> None:
    values = [YES, NO, None]
    combos = list(itertools.product(values, values, [True, False]))
    frame = pl.DataFrame(combos, schema={"m": pl.String, "l": pl.String, "b": pl.Boolean}, orient="row")
    labels = set(frame.select(_label(pl.col("m"), pl.col("l"), pl.col("b"))).to_series())
    assert labels | {"inconsistent"} == set(ERAS)


def test_the_report_legend_explains_every_label() -> None:
    assert set(ERA_LEGEND) == set(ERAS)
    assert all(ERA_LEGEND[label] for label in ERAS)


def _readme_labels() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n### Era labels\n", 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\| `([a-z-]+)` \|", section, re.M)


def test_readme_table_lists_exactly_the_labels_of_the_code() -> None:
    labels = _readme_labels()
    assert len(labels) == len(set(labels))
    assert set(labels) == set(ERAS)


@pytest.mark.parametrize("width", [80, 100, 120])
def test_text_legend_explains_the_labels_shown(corpus: Analysis, width: int) -> None:
    text = render(corpus, "text", width=width)
    legend = text.split("\nEras\n", 1)[1].split("\n\n", 1)[0]
    shown = {v.era for v in corpus.servers}
    for label in ERAS:
        present = re.search(rf"^  {re.escape(label)} +\S", legend, re.M) is not None
        assert present == (label in shown), label
    assert MIXED in legend  # the support values are explained too


def test_markdown_legend_explains_the_labels_shown(corpus: Analysis) -> None:
    md = render(corpus, "markdown")
    legend = md.split("\n### Eras\n", 1)[1].split("\n#", 1)[0]
    shown = {v.era for v in corpus.servers}
    for label in ERAS:
        assert (f"- **{label}**: " in legend) == (label in shown), label
    assert f"`{MIXED}`" in legend
