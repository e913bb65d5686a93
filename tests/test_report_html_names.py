"""The html page shows a capture's file name as the other reports do: control and bidi characters
written visibly, also in the timeline's hover data (`first at` of each probe and initialize mark),
which came straight from the analysis' rows while every other string went through `visible`."""

from __future__ import annotations

from pathlib import Path

from analyzer.html_report import render_html
from analyzer.pipeline import analyze
from tests.test_messages import Cap, err, init, init_result, probe
from tests.test_report_hostile import _raw_controls
from tests.test_report_html import _json_block, _source

NAME = "cap-\u202elnosj.exe-\x1b[31m.jsonl"


def test_a_file_name_in_the_marks_hover_is_shown_visibly(tmp_path: Path) -> None:
    cap = Cap(tmp_path, server="srv")
    cap.c2s(probe(1))
    cap.s2c(err(1, -32601, "Method not found"))
    cap.c2s(init(2))
    cap.s2c(init_result(2))
    cap.close().rename(tmp_path / NAME)
    page = render_html(analyze([str(tmp_path)]))
    marks = _source(_json_block(page, "chart-data"), "marks")
    assert len(marks["at"]) == 2
    assert all(at.startswith(str(tmp_path / "cap-\\u202elnosj.exe-\\x1b[31m.jsonl:")) for at in marks["at"])
    assert not _raw_controls(page)
