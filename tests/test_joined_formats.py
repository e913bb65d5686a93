"""A capture joined into a file (`cat a.jsonl b.jsonl`) whose header this erascope does not read.

A file whose header names a format major this erascope does not know is refused (FORMAT.md,
Versioning), and one whose first line is no erascope header is not a capture. A capture joined
after another is judged by its header the same way: its lines are not read with erascope/1's
meaning, it is named with the file and line of its header, and the file's other captures are read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from analyzer import load
from analyzer.cli import app
from analyzer.compact import compact
from analyzer.pipeline import analyze
from analyzer.report import render_json
from analyzer.watch import Watcher
from tests.test_concatenated import join, report
from tests.test_rotated_exchanges import SCENARIOS
from tests.test_watch import analyzed, expected, replay, reported

CORPUS = SCENARIOS[0].parent
A, B, C = (next((CORPUS / name).glob("*.jsonl")) for name in ("upgrade-http", "auto-legacy-stdio", "upgrade-stdio"))
B_SERVER = "auto-legacy-stdio-server"


def with_format(capture: Path, out: Path, value: Any) -> Path:
    """`capture` with its header's `format` set to `value` (left out for `...`)."""
    first, rest = capture.read_bytes().split(b"\n", 1)
    header = orjson.loads(first)
    if value is ...:
        del header["format"]
    else:
        header["format"] = value
    out.write_bytes(orjson.dumps(header) + b"\n" + rest)
    return out


def lines(capture: Path) -> int:
    return len(capture.read_bytes().splitlines())


def whole(*paths: Path) -> dict[str, Any]:
    return orjson.loads(render_json(analyze([str(p) for p in paths])))


def servers(got: dict[str, Any]) -> set[str]:
    return {s["server"] for s in got["servers"]}


@pytest.fixture(params=["in-a-batch", "alone", "in-pieces"])
def reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every path a JSONL file is read by: with other small files, alone, and in many pieces."""
    if request.param != "in-a-batch":
        monkeypatch.setattr(load, "SMALL_BYTES", 0)
    if request.param == "in-pieces":
        monkeypatch.setattr(load, "PIECE_BYTES", 2_000)
    return str(request.param)


def test_a_joined_capture_of_an_unknown_major_is_not_read(tmp_path: Path, reading: str) -> None:
    b2 = with_format(B, tmp_path / "b2.jsonl", "erascope/2")
    joined = join([A, b2], tmp_path / "joined.jsonl")
    got = whole(joined)
    at = lines(A) + 1
    assert got["inputs"]["errors"] == [
        {
            "file": str(joined),
            "error": f"{joined}:{at}: capture format 'erascope/2' is not supported by this erascope (it reads"
            f" erascope/1); upgrade erascope to analyze it (lines {at}–{at + lines(B) - 1} not read)",
        }
    ]
    assert got["inputs"]["records"] == whole(A)["inputs"]["records"]
    assert B_SERVER not in servers(got)
    assert report(joined) == report(A)


def test_the_captures_after_a_refused_one_are_read(tmp_path: Path, reading: str) -> None:
    b2 = with_format(B, tmp_path / "b2.jsonl", "erascope/2.1")
    joined = join([A, b2, C], tmp_path / "joined.jsonl")
    got = whole(joined)
    at = lines(A) + 1
    assert [e["error"].split(": capture format")[0] for e in got["inputs"]["errors"]] == [f"{joined}:{at}"]
    assert f"(lines {at}–{at + lines(B) - 1} not read)" in got["inputs"]["errors"][0]["error"]
    assert got["inputs"]["records"] == whole(A, C)["inputs"]["records"]
    assert report(joined) == report(A, C)


@pytest.mark.parametrize("value", ["other/1", ..., 1], ids=["other-format", "no-format", "not-a-string"])
def test_a_joined_capture_that_names_no_erascope_format_is_not_a_capture(
    tmp_path: Path, reading: str, value: Any
) -> None:
    """As a file whose first line is no erascope header is skipped, not read as a capture."""
    other = with_format(B, tmp_path / "other.jsonl", value)
    joined = join([A, other], tmp_path / "joined.jsonl")
    got = whole(joined)
    at = lines(A) + 1
    assert got["inputs"]["skipped"] == [
        {
            "file": str(joined),
            "reason": f"lines {at}–{at + lines(B) - 1}: not an erascope capture (the header on line {at},"
            " joined after another capture, names no erascope format)",
        }
    ]
    assert "errors" not in got["inputs"]
    assert got["inputs"]["records"] == whole(A)["inputs"]["records"]
    assert report(joined) == report(A)


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args])
    return result.exit_code, result.output


def test_a_refused_joined_capture_fails_only_under_strict(tmp_path: Path) -> None:
    """The file's other captures are read: it is not an input that could not be read at all."""
    joined = join([A, with_format(B, tmp_path / "b2.jsonl", "erascope/2")], tmp_path / "joined.jsonl")
    code, out = _cli("analyze", str(joined), "--format", "json", "--quiet")
    assert code == 0, out
    code, out = _cli("analyze", str(joined), "--strict")
    assert code == 2
    assert f"{joined}:{lines(A) + 1}: capture format 'erascope/2' is not supported" in out
    assert "input files not read" not in out  # the file was read, but for that capture
    assert "inputs not read, in whole or in part (--strict)" in out


def test_a_file_of_refused_captures_alone_holds_no_records(tmp_path: Path) -> None:
    b2 = with_format(B, tmp_path / "b2.jsonl", "erascope/2")
    header = A.read_bytes().split(b"\n", 1)[0] + b"\n"
    only = tmp_path / "only.jsonl"
    only.write_bytes(header + b2.read_bytes())
    code, out = _cli("analyze", str(only))
    assert code == 2
    assert "no capture records found" in out
    assert f"{only}:2: capture format 'erascope/2' is not supported" in out


def test_an_archive_does_not_hold_the_refused_capture(tmp_path: Path) -> None:
    joined = join([A, with_format(B, tmp_path / "b2.jsonl", "erascope/2")], tmp_path / "joined.jsonl")
    result = compact([str(joined)], tmp_path / "archive", jobs=1)
    at = lines(A) + 1
    assert [(f, e.split(": capture format")[0]) for f, e in result.errors] == [(str(joined), f"{joined}:{at}")]
    from_file, from_archive = (render_json(analyze([str(p)])) for p in (joined, tmp_path / "archive"))
    assert from_archive == from_file
    assert B_SERVER not in servers(orjson.loads(from_archive))


def test_compact_names_the_refused_capture(tmp_path: Path) -> None:
    joined = join([A, with_format(B, tmp_path / "b2.jsonl", "erascope/2")], tmp_path / "joined.jsonl")
    code, out = _cli("compact", str(joined), "--out", str(tmp_path / "archive"))
    assert f"{joined}:{lines(A) + 1}: capture format 'erascope/2' is not supported" in out
    assert code == 2  # as for a file of that format alone: not all of it was archived
    code, out = _cli("compact", str(joined), "--out", str(tmp_path / "archive"))
    assert "0 file(s) compacted" in out  # unchanged: its entry still names what was not archived
    assert f"{joined}:{lines(A) + 1}: capture format 'erascope/2' is not supported" in out
    assert code == 2


def _refused_inputs(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """A directory of inputs: a whole file of an unknown major, named first; a file with a capture of
    an unknown major joined in it; a capture read whole, named after the refused file."""
    caps = tmp_path / "caps"
    caps.mkdir()
    alone = with_format(C, caps / "c2.jsonl", "erascope/2")
    joined = join([A, with_format(B, tmp_path / "b2.jsonl", "erascope/2")], caps / "joined.jsonl")
    last = join([B], caps / "z.jsonl")
    return caps, alone, joined, last


def _errors(out: str) -> list[str]:
    return [line.removeprefix("erascope: error: ") for line in out.splitlines() if line.startswith("erascope: error: ")]


@pytest.mark.parametrize("jobs", ["1", "4"])
def test_compact_names_every_refused_input_beside_a_file_of_an_unknown_major(tmp_path: Path, jobs: str) -> None:
    """A whole file of an unknown major among the inputs stopped compact with its error alone: the
    refused capture joined into another file went unnamed, as did the summary, and the inputs after
    it went unarchived. The other inputs are archived, every refused one named as `analyze` names it."""
    caps, alone, joined, last = _refused_inputs(tmp_path)
    archive = tmp_path / "archive"
    code, out = _cli("compact", str(caps), "--out", str(archive), "--jobs", jobs)
    named = [e["error"] for e in whole(caps)["inputs"]["errors"]]
    assert [e.split(": capture format")[0] for e in named] == [str(alone), f"{joined}:{lines(A) + 1}"]
    assert _errors(out) == named
    assert "erascope: 2 file(s) compacted (" in out
    assert code == 2
    from_archive, from_files = (render_json(analyze([str(p)])) for p in (archive, caps))
    read = orjson.loads(from_archive)
    assert read["servers"] == orjson.loads(from_files)["servers"]
    assert from_archive == render_json(analyze([str(joined), str(last)]))  # the archive reads all but the refused file
    assert B_SERVER in servers(read)  # from the capture after the refused file
    code, out = _cli("compact", str(caps), "--out", str(archive), "--jobs", jobs)
    assert (code, _errors(out)) == (2, named)
    assert "erascope: 0 file(s) compacted (0 rows, 0 Parquet part(s)), 2 unchanged" in out


def test_compact_of_a_file_of_an_unknown_major_alone_names_it(tmp_path: Path) -> None:
    alone = with_format(C, tmp_path / "c2.jsonl", "erascope/2")
    code, out = _cli("compact", str(alone), "--out", str(tmp_path / "archive"))
    assert _errors(out) == [e["error"] for e in whole(alone, A)["inputs"]["errors"]] != []
    assert "erascope: 0 file(s) compacted (0 rows, 0 Parquet part(s)), 0 unchanged" in out
    assert code == 2
    assert not any((tmp_path / "archive").rglob("*.json"))


def test_watch_does_not_read_the_refused_capture(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    join([A, with_format(B, tmp_path / "b2.jsonl", "erascope/2"), C], live / "joined.jsonl")
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = watcher.poll()
    clock[0] += 30
    events += watcher.poll()
    got = [e.as_json() for e in events]
    assert B_SERVER not in {e["server"] for e in got}
    assert reported(got) == expected(analyzed(live))
    assert any(f"joined.jsonl:{lines(A) + 1}: capture format 'erascope/2'" in n for n in watcher.notes)


def test_watch_leaves_the_refused_capture_out_as_it_grows(tmp_path: Path) -> None:
    """Appended in pieces, a round at a time: the refused capture's later lines are left out too."""
    (tmp_path / "src").mkdir()
    (tmp_path / "live").mkdir()
    b2 = with_format(B, tmp_path / "b2.jsonl", "erascope/2")
    joined = join([A, b2, C], tmp_path / "src" / "joined.jsonl")
    clock = [1000.0]
    watcher = Watcher([str(tmp_path / "live")], clock=lambda: clock[0])
    got = [e.as_json() for e in replay([joined], tmp_path / "live", watcher, clock, seed=3)]
    final = analyzed(tmp_path / "live")
    assert B_SERVER not in {e["server"] for e in got}
    assert reported(got) == expected(final)
    assert sum("capture format 'erascope/2'" in n for n in watcher.notes) == 1


def test_a_capture_before_a_refused_one_is_read_apart(tmp_path: Path, reading: str) -> None:
    """The refused capture last: the one joined before it still starts where its header is."""
    b2 = with_format(B, tmp_path / "b2.jsonl", "erascope/2")
    joined = join([A, C, b2], tmp_path / "joined.jsonl")
    got = whole(joined)
    at = lines(A) + lines(C) + 1
    assert [e["error"].split(": capture format")[0] for e in got["inputs"]["errors"]] == [f"{joined}:{at}"]
    assert f"(lines {at}–{at + lines(B) - 1} not read)" in got["inputs"]["errors"][0]["error"]
    assert got["inputs"]["records"] == whole(A, C)["inputs"]["records"]
    assert report(joined) == report(A, C)


def test_verify_says_a_joined_captures_format_is_not_known_as_of_its_own_file(tmp_path: Path) -> None:
    """`verify` checks each capture joined in a file as in a file of its own: it verifies none of a
    capture of an unknown major, there as alone, and checks the others. (Sealed as it is: a header
    edited to name that major after it was sealed is a changed header, `tests/test_verify.py`.)"""
    from addon import chain
    from analyzer.verify import Status, verify
    from tests.test_rotated_exchanges import rewrite
    from tests.test_verify import reseal

    (a,) = rewrite(A, tmp_path / "a", 1 << 30, None)
    (b,) = rewrite(B, tmp_path / "b", 1 << 30, None)
    b2 = with_format(b, tmp_path / "b2.jsonl", "erascope/2")
    b2.write_bytes(b"".join(reseal(b2.read_bytes().splitlines(keepends=True), chain.Chainer())))
    alone = verify([b2]).files[0]
    assert alone.status is Status.ERROR
    (file,) = verify([join([a, b2], tmp_path / "joined.jsonl")]).files
    assert [(c.line, c.status, c.error) for c in file.captures] == [
        (1, Status.VERIFIED, None),
        (lines(a) + 1, Status.ERROR, alone.error),
    ]
    assert file.findings == []


def test_refused_captures_are_named_in_the_order_of_their_lines(tmp_path: Path) -> None:
    """Each by its file, then its first line: sorted as text, line 139 came before line 29."""
    b2 = with_format(B, tmp_path / "b2.jsonl", "erascope/2")
    b3 = with_format(B, tmp_path / "b3.jsonl", "erascope/3")
    joined = join([A, b2, *[b3] * 9], tmp_path / "joined.jsonl")
    other = with_format(B, tmp_path / "b2-alone.jsonl", "erascope/2")
    got = whole(joined, other)
    firsts = [lines(A) + 1 + n * lines(B) for n in range(10)]
    named = [e["error"].split(": capture format")[0] for e in got["inputs"]["errors"]]
    assert named == [str(other), *(f"{joined}:{at}" for at in firsts)]
