"""Fuzzing the analyzer with mutated corpus captures: no input crashes it.

Each example takes a recorded capture (captures/corpus/*/*.jsonl), breaks it one way (bytes
flipped, cut anywhere, invalid UTF-8, a field of the wrong type, a huge or deeply nested value)
and runs the real `erascope analyze` in process next to an untouched capture. The run must end
with an exit status of 0, 1 or 2 and no traceback, and the untouched capture must be read.
Derandomized with a bounded number of examples, so CI runs the same cases every time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from analyzer.cli import app

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "captures" / "corpus").glob("*/*.jsonl"))
UNTOUCHED = CORPUS[0]
VICTIMS = [p for p in CORPUS if p != UNTOUCHED and p.stat().st_size < 200_000]
FIELDS = ["type", "seq", "ts", "conn", "server", "dir", "raw", "flow", "headers", "status", "streamed", "event",
          "code", "lost", "kind", "method", "how", "peer", "error", "reason", "signal", "format", "part"]
ODD = st.one_of(
    st.sampled_from(["", "x", "7", -1, 2**63 - 1, -(2**63), 1.5, True, False, None, [], {}, [[1, 2]], ["a"],
                     [["a", "b", "c"]], {"a": [1, {"b": None}]}]),
    st.text(max_size=20),
    st.integers(),
    st.floats(allow_nan=False),
)


def _set_field(data: bytes, line_no: int, name: str, value: Any) -> bytes:
    lines = data.split(b"\n")
    n = line_no % len(lines)
    try:
        rec = orjson.loads(lines[n])
    except orjson.JSONDecodeError:
        return data
    if not isinstance(rec, dict):
        return data
    rec[name] = value
    try:
        lines[n] = orjson.dumps(rec)
    except TypeError:  # an integer orjson cannot write: written by hand, as a hostile writer would
        rec[name] = "__V__"
        lines[n] = orjson.dumps(rec).replace(b'"__V__"', str(value).encode())
    return b"\n".join(lines)


def _splice(data: bytes, at: int, text: bytes, line_no: int | None = None) -> bytes:
    if line_no is not None:
        lines = data.split(b"\n")
        lines.insert(line_no % (len(lines) + 1), text)
        return b"\n".join(lines)
    at %= len(data) + 1
    return data[:at] + text + data[at:]


@dataclass(frozen=True)
class Case:
    """A mutated capture; its repr names the capture and the mutation, not the bytes."""

    victim: Path
    data: bytes = field(repr=False)
    kind: str


@st.composite
def mutations(draw: st.DrawFn) -> Case:
    victim = draw(st.sampled_from(VICTIMS))
    data = victim.read_bytes()
    kind = draw(st.sampled_from(["flip", "truncate", "utf8", "type", "huge", "deep", "line"]))
    at = draw(st.integers(0, max(0, len(data))))
    if kind == "flip":
        for pos in draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=8)):
            data = data[:pos] + bytes([data[pos] ^ draw(st.integers(1, 255))]) + data[pos + 1 :]
    elif kind == "truncate":
        data = data[:at]
    elif kind == "utf8":
        data = _splice(data, at, draw(st.sampled_from([b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\x80\x80"])))
    elif kind == "type":
        data = _set_field(data, draw(st.integers(0, 200)), draw(st.sampled_from(FIELDS)), draw(ODD))
    elif kind == "huge":
        big = "y" * draw(st.sampled_from([70_000, 1_200_000]))
        name = draw(st.sampled_from(["raw", "error", "conn", "method"]))
        data = _set_field(data, draw(st.integers(0, 200)), name, big)
    elif kind == "deep":
        depth = draw(st.sampled_from([200, 3_000, 100_000]))
        nested = b"[" * depth + b"]" * depth
        line = b'{"type":"frame","seq":1,"conn":"c","dir":"c2s","raw":' + nested + b"}"
        data = _splice(data, at, line, line_no=draw(st.integers(1, 50)))
    else:  # a whole line of noise
        data = _splice(data, at, draw(st.binary(max_size=80)), line_no=draw(st.integers(0, 50)))
    return Case(victim, data, kind)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=mutations())
def test_no_mutated_capture_crashes_the_analyzer(
    tmp_path_factory: pytest.TempPathFactory, case: Case
) -> None:
    victim, data, kind = case.victim, case.data, case.kind
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "mutated").mkdir()
    (folder / "mutated" / victim.name).write_bytes(data)
    result = CliRunner().invoke(
        app, ["analyze", str(folder / "mutated"), str(UNTOUCHED), "-f", "json", "-q", "-j", "1"]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), (kind, result.exception)
    assert result.exit_code in (0, 1, 2), (kind, result.output)
    assert "Traceback" not in result.output
    if result.exit_code != 2:
        report = orjson.loads(result.stdout)
        assert str(UNTOUCHED) in report["inputs"]["files"], kind
        for fmt in ("text", "markdown"):  # the formats that lay out what json only lists
            shown = CliRunner().invoke(
                app, ["analyze", str(folder / "mutated"), str(UNTOUCHED), "-f", fmt, "-q", "-j", "1"]
            )
            assert shown.exception is None or isinstance(shown.exception, SystemExit), (kind, fmt, shown.exception)
            assert shown.exit_code == result.exit_code, (kind, fmt, shown.output)
