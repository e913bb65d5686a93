"""A capture's file name is attacker-controlled too: one that is not valid UTF-8 is read and named.

POSIX file names are bytes; Python hands a name that is not UTF-8 over with surrogate escapes
(`\\udcff`), which polars cannot hold. Such a file is read like any other, and named everywhere
with its odd bytes as `\\xNN` text (`analyzer.load.display_name`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson

from analyzer.pipeline import analyze
from analyzer.report import render

CORPUS = Path(__file__).resolve().parent.parent / "captures" / "corpus"


def _odd_named(tmp_path: Path) -> Path:
    (source,) = sorted((CORPUS / "auto-legacy-stdio").glob("*.jsonl"))
    tmp_path.mkdir(parents=True, exist_ok=True)
    odd = tmp_path / os.fsdecode(b"evil\x1b[2J\xff.jsonl")
    shutil.copy(source, odd)
    return odd


def test_a_file_name_that_is_not_utf8_is_read_and_reported(tmp_path: Path) -> None:
    _odd_named(tmp_path)
    a = analyze([str(tmp_path)])
    assert [v.era for v in a.servers] == ["legacy"]
    shown = str(tmp_path / "evil\x1b[2J\\xff.jsonl")  # the odd byte as text; the escape stays a character
    assert a.inputs.files == [shown]
    assert {e.file for v in a.servers for e in v.evidence} == {shown}
    for fmt in ("text", "markdown"):
        assert "evil\\x1b[2J\\xff.jsonl" in render(a, fmt, width=200)  # control characters shown, not sent
    doc = orjson.loads(render(a, "json"))
    assert [Path(f).name for f in doc["inputs"]["files"]] == ["evil\x1b[2J\\xff.jsonl"]


def test_the_cli_reports_it_without_a_traceback(tmp_path: Path) -> None:
    _odd_named(tmp_path)
    erascope = Path(sys.executable).with_name("erascope")
    res = subprocess.run([erascope, "analyze", str(tmp_path), "-q"], capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert b"Traceback" not in res.stderr
    assert b"legacy" in res.stdout


def test_an_archive_of_it_reports_the_same(tmp_path: Path) -> None:
    from analyzer.compact import compact

    _odd_named(tmp_path / "caps")
    result = compact([str(tmp_path / "caps")], tmp_path / "archive")
    assert len(result.written) == 1
    again = compact([str(tmp_path / "caps")], tmp_path / "archive")
    assert len(again.unchanged) == 1  # its entry is found again by its shown name
    direct, archived = analyze([str(tmp_path / "caps")]), analyze([str(tmp_path / "archive")])
    assert [(v.server, v.era) for v in archived.servers] == [(v.server, v.era) for v in direct.servers]
    assert archived.inputs.files == direct.inputs.files
