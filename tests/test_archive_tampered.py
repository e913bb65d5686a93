"""Archives edited by hand (or by an attacker): every entry, part and frame is attacker-controlled.

A tampered archive is refused with a clear error (exit 2, the entry or part named), never a
traceback, and it never makes a report open a file the analysis did not read as an input.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from tests.test_messages import Cap, err, init, init_result, probe

runner = CliRunner()
ERASCOPE = [sys.executable, "-c", "from analyzer.cli import main; main()"]


def _capture(out: Path) -> Path:
    cap = Cap(out, server="busy")
    for i in range(3):
        cap.c2s(probe(i))
        cap.s2c(err(i, -32601, "no such method"))
    cap.c2s(init(3))
    cap.s2c(init_result(3))
    cap.close()
    return out


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    out = tmp_path / "arch"
    result = runner.invoke(app, ["compact", str(_capture(tmp_path / "caps")), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _retarget(archive: Path, file: str) -> None:
    """Point every row and entry of the archive at `file`, as if it were the archived capture."""
    for part in archive.rglob("*.parquet"):
        frame = pl.read_parquet(part)
        if "file" in frame.columns:
            frame.with_columns(pl.lit(file).cast(frame.schema["file"]).alias("file")).write_parquet(part)
    for entry in (archive / "_sources").glob("*.json"):
        _edit_entry(entry, lambda e: e.update(file=file))


def _edit_entry(path: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    entry = orjson.loads(path.read_bytes())
    edit(entry)
    path.write_bytes(orjson.dumps(entry))


def _payloads(page: str) -> dict[str, Any]:
    from tests.test_report_html import _json_block

    return _json_block(page, "page-data")["payloads"]


# --- the html report opens only what the analysis read ------------------------------------------
def test_an_archive_naming_another_file_does_not_put_it_in_the_html_report(archive: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("".join(f"TOPSECRET-{i} password=hunter2\n" for i in range(300)))
    _retarget(archive, str(secret))
    page = tmp_path / "r.html"
    result = runner.invoke(app, ["analyze", str(archive), "-q", "-f", "html", "-o", str(page)])
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert "TOPSECRET" not in text and "hunter2" not in text
    payloads = _payloads(text)
    assert payloads and all(p["text"] == "" and "archive" in p["note"] for p in payloads.values())


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_an_archive_naming_a_fifo_or_an_endless_device_renders(archive: Path, tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        target = tmp_path / "pipe"
        os.mkfifo(target)
    else:
        target = Path("/dev/zero")
    _retarget(archive, str(target))
    page = tmp_path / "r.html"
    done = subprocess.run(
        [*ERASCOPE, "analyze", str(archive), "-q", "-f", "html", "-o", str(page)], capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
