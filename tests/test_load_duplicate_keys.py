"""A capture file's first line with a key written twice is judged as the analyzer's NDJSON reader
reads it, by the first of the two: whether it is a capture (`type`), of which format (`format`),
and so `analyze` and `verify` agree with the reader that counts that very line.

A recorder writes each key once; only a line written otherwise repeats one, and whatever it says
is attacker-controlled."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from analyzer.pipeline import analyze
from analyzer.report import render_json
from analyzer.verify import Status, verify_file
from tests.test_rotated_exchanges import SCENARIOS

CAPTURE = next((SCENARIOS[0].parent / "auto-modern-stdio").glob("*.jsonl"))


def with_first_line(out: Path, first: bytes) -> Path:
    lines = CAPTURE.read_bytes().splitlines(keepends=True)
    out.write_bytes(first + b"\n" + b"".join(lines[1:]))
    return out


def header_line() -> bytes:
    return CAPTURE.read_bytes().splitlines()[0]


def report(path: Path) -> dict:
    return orjson.loads(render_json(analyze([str(path)])))


def eras(got: dict) -> list[tuple[str, str, dict]]:
    return [(s["server"], s["era"], s["probe_outcomes"]) for s in got["servers"]]


def test_a_header_whose_second_type_key_says_frame_is_a_header(tmp_path: Path) -> None:
    first = header_line()[:-1] + b',"type":"frame"}'
    got = report(with_first_line(tmp_path / "x.jsonl", first))
    assert got["inputs"]["skipped"] == []
    assert got["inputs"]["records"] == report(CAPTURE)["inputs"]["records"]
    assert eras(got) == eras(report(CAPTURE))


def test_a_frame_whose_second_type_key_says_header_is_no_capture(tmp_path: Path) -> None:
    first = b'{"type":"frame",' + header_line()[1:]
    path = with_first_line(tmp_path / "x.jsonl", first)
    with pytest.raises(Exception, match="no capture record"):
        analyze([str(path)])


def test_a_format_written_twice_is_read_by_its_first(tmp_path: Path) -> None:
    first = header_line()[:-1] + b',"format":"erascope/9"}'
    got = report(with_first_line(tmp_path / "x.jsonl", first))
    assert got["inputs"].get("errors") is None
    assert eras(got) == eras(report(CAPTURE))


def test_verify_reads_a_first_line_as_the_analyzer_does(tmp_path: Path) -> None:
    """A capture to both, whatever its second `type` key says."""
    first = header_line()[:-1] + b',"type":"frame"}'
    path = with_first_line(tmp_path / "x.jsonl", first)
    result = verify_file(str(path))
    assert result.error is None
    assert result.status is Status.NO_CHAIN  # a capture, recorded before chains
