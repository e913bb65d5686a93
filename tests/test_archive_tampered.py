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
    # the messages come from the archive's own rows, which say what the capture held
    assert payloads and all("no such method" in p["text"] or "protocolVersion" in p["text"] for p in payloads.values())


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


# --- a tampered archive is a clear error --------------------------------------------------------
def _refused(result: Any, *names: str) -> None:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # an error said, no traceback
    for name in names:
        assert name in result.stderr, result.stderr


@pytest.mark.parametrize(
    "edit",
    [
        lambda e: e.pop("file"),
        lambda e: e.update(file=5),
        lambda e: e.update(file=None),
        lambda e: e.update(records="x"),
        lambda e: e.update(records=-1),
        lambda e: e.update(lost="x"),
        lambda e: e.update(skipped=5),
        lambda e: e.update(capture=["x"]),
        lambda e: e.update(transport=7),
        lambda e: e.update(counts={"frame": "x"}),
        lambda e: e.update(malformed=[["x", 5]]),
        lambda e: e.update(torn=[1, 2, 3]),
        lambda e: e.update(unit=5),
        lambda e: e.update(parts=[5]),
        lambda e: e.update(captures="x"),
        lambda e: e.update(captures=[{"lines": [1], "identity": [], "counts": {}, "lost": 0, "undecodable": 0}]),
    ],
    ids=[
        "no-file", "file-int", "file-null", "records-str", "records-negative", "lost-str", "skipped-int",
        "capture-list", "transport-int", "counts-str", "malformed-types", "torn-three", "unit-int", "parts-int",
        "captures-str", "captures-one-line",
    ],
)  # fmt: skip
@pytest.mark.parametrize("selected", [False, True], ids=["everything", "selection"])
def test_a_malformed_entry_is_named(archive: Path, edit: Callable[[dict[str, Any]], Any], selected: bool) -> None:
    (entry,) = (archive / "_sources").glob("*.json")
    _edit_entry(entry, edit)
    selection = ["--server", "busy"] if selected else []
    _refused(runner.invoke(app, ["analyze", str(archive), "-q", *selection]), "malformed archive entry", entry.name)


def test_a_part_with_repeated_rows_is_named(archive: Path) -> None:
    part = next(archive.glob("day=*/server=*/*.parquet"))
    rows = pl.read_parquet(part)
    pl.concat([rows, rows]).write_parquet(part)
    result = runner.invoke(app, ["analyze", str(archive), "-q", "--server", "busy"])
    _refused(result, "malformed archive", part.name)


def test_an_out_of_range_time_reads_as_in_the_capture(archive: Path, tmp_path: Path) -> None:
    """A `ts` no report can write (1e300) is read as missing, in a capture and in its archive's parts alike."""
    (capture,) = (tmp_path / "caps").glob("*.jsonl")
    lines = capture.read_bytes().splitlines(keepends=True)
    record = orjson.loads(lines[1])  # the first probe
    lines[1] = orjson.dumps({**record, "ts": 1e300}) + b"\n"
    capture.write_bytes(b"".join(lines))
    for part in archive.glob("day=*/server=*/*.parquet"):
        rows = pl.read_parquet(part)
        rows.with_columns(ts=pl.when(pl.col("line") == 2).then(1e300).otherwise("ts")).write_parquet(part)
    reports = []
    for source in (capture.parent, archive):
        result = runner.invoke(app, ["analyze", str(source), "-q", "-f", "json", "--server", "busy"])
        assert result.exit_code == 0, result.output
        reports.append(result.stdout)
    assert reports[0] == reports[1]


def test_a_condensed_frame_with_an_out_of_range_time_is_named(archive: Path) -> None:
    (frame,) = archive.glob("_condensed/*.messages.parquet")
    pl.read_parquet(frame).with_columns(ts=pl.lit(1e300)).write_parquet(frame)
    _refused(runner.invoke(app, ["analyze", str(archive), "-q"]), frame.name)


def test_a_condensed_frame_with_repeated_rows_is_named(archive: Path) -> None:
    (frame,) = archive.glob("_condensed/*.messages.parquet")
    rows = pl.read_parquet(frame)
    pl.concat([rows, rows]).write_parquet(frame)
    (entry,) = (archive / "_sources").glob("*.json")
    _edit_entry(entry, lambda e: e["condensed"]["frames"]["messages"].__setitem__(1, 2 * rows.height))
    _refused(runner.invoke(app, ["analyze", str(archive), "-q"]), frame.name)


def test_an_archive_report_shows_the_archived_messages(archive: Path, tmp_path: Path) -> None:
    """The page's evidence shows each cited message read back from the archive's own rows (its `raw`
    column), never from the file an entry names: the messages are the ones the capture's page shows,
    and the archive is all that is read for them."""
    (entry,) = (archive / "_sources").glob("*.json")
    named = Path(orjson.loads(entry.read_bytes())["file"])
    pages = {}
    for name, source in (("jsonl", named.parent), ("archive", archive)):
        if name == "archive":
            named.unlink()  # what the entry names is gone: only the archive can say what was captured
        page = tmp_path / f"{name}.html"
        result = runner.invoke(app, ["analyze", str(source), "-q", "-f", "html", "-o", str(page)])
        assert result.exit_code == 0, result.output
        pages[name] = _payloads(page.read_text(encoding="utf-8"))
    message = {
        name: {p["at"]: p["text"].split("\n\n— record —")[0] for p in got.values()} for name, got in pages.items()
    }
    assert message["archive"] == message["jsonl"]
    assert any("no such method" in text for text in message["archive"].values())
    assert all("archive" in p["note"] for p in pages["archive"].values())


@pytest.mark.parametrize(
    "edit",
    [
        pl.lit(None).alias("line"),
        pl.lit(None).alias("method"),
    ],
    ids=["line-null", "method-null"],
)
def test_a_part_with_rows_no_capture_gives_is_named(archive: Path, edit: pl.Expr) -> None:
    # A row without its place (file, line, seq) or a request without its method, read through a
    # selection (the parts, not the condensed frames): a traceback, or rules reading what no capture gives.
    part = next(archive.glob("day=*/server=*/*.parquet"))
    rows = pl.read_parquet(part)
    rows.with_columns(edit.cast(rows.schema[edit.meta.output_name()])).write_parquet(part)
    result = runner.invoke(app, ["analyze", str(archive), "-q", "--server", "busy"])
    _refused(result, "malformed archive", part.name)


def test_records_without_a_seq_archive_and_read_as_in_the_capture(tmp_path: Path) -> None:
    # A capture's records are the sender's to shape: one without `seq` is read (at its line) from the
    # JSONL, and its archive must read alike. The check for rows no capture gives refused it.
    cap = Cap(tmp_path / "caps", server="busy")
    cap.c2s(probe(1))
    cap.s2c(err(1, -32601, "no such method"))
    (path,) = cap.close().parent.glob("*.jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    record = orjson.loads(lines[2])
    del record["seq"]
    path.write_bytes(b"".join([*lines[:2], orjson.dumps(record) + b"\n", *lines[3:]]))
    compacted = runner.invoke(app, ["compact", str(tmp_path / "caps"), "--out", str(tmp_path / "arch")])
    assert compacted.exit_code == 0, compacted.output
    for selection in ([], ["--server", "busy"]):
        jsonl, archived = (
            runner.invoke(app, ["analyze", str(tmp_path / source), "-f", "json", "-q", *selection])
            for source in ("caps", "arch")
        )
        assert jsonl.exit_code == 0, jsonl.output
        assert (archived.exit_code, archived.stdout) == (jsonl.exit_code, jsonl.stdout), archived.output


def test_an_entry_claiming_more_lines_than_its_rows_is_read_in_a_few_windows(archive: Path) -> None:
    """A big file is read in ranges of lines up to the count its entry gives; an entry claiming 2**62
    lines had the reader scan 46 trillion empty ranges (it never ended). Only ranges holding rows are read."""
    entry = next((archive / "_sources").glob("*.json"))
    expected = subprocess.run([*ERASCOPE, "analyze", str(archive), "--server", "busy", "--format", "json"],
                              capture_output=True, timeout=120)  # fmt: skip
    assert expected.returncode == 0, expected.stderr
    _edit_entry(entry, lambda e: e.update(records=1 << 62))
    cmd = [*ERASCOPE, "analyze", str(archive), "--server", "busy", "--format", "json"]
    proc = subprocess.run(cmd, capture_output=True, timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    report, before = orjson.loads(proc.stdout), orjson.loads(expected.stdout)
    assert report["servers"] == before["servers"] and report["findings"] == before["findings"]
