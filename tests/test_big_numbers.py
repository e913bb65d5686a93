"""JSON numbers past what the readers hold: an id of forty digits or more, a number beyond a double's
range (`1e400`, four hundred digits) anywhere in a payload.

JSON sets no bound on a number, JSON-RPC none on an integer id, and the SDKs' parsers read them (Python
exactly, JavaScript as a double or `Infinity`). The record reader (simd-json) refuses an integer of
forty digits or more and a number beyond a double; `json_path_match` (serde_json) reads every field of
such a payload as null. An id of forty to 309 digits made the robust reading raise, and both lines of
the exchange were called malformed and lost; a number beyond a double made a payload no message, and a
probe answered so `garbage`, its server `broken`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import orjson
import pytest

from analyzer.compact import compact
from analyzer.pipeline import analyze
from analyzer.report import render_json

CAPTURE: Final = next((Path(__file__).parent.parent / "captures/corpus/auto-modern-stdio").glob("*.jsonl"))
PROBE_ID: Final = '"id":1,'


def _capture(
    tmp_path: Path, *, probe_id: str | None = None, in_answer: str | None = None, answer_id: str | None = None
) -> Path:
    """The corpus' modern stdio capture with the probe's id (request and answer) written `probe_id`
    (the answer's `answer_id` when given), and a field `big` holding `in_answer` added to the probe's
    answer."""
    out = []
    for line in CAPTURE.read_bytes().splitlines():
        record = orjson.loads(line)
        raw = record.get("raw")
        if record.get("type") == "frame" and isinstance(raw, str) and PROBE_ID in raw:
            if in_answer is not None and record["dir"] == "s2c":
                raw = raw.replace('"result":{', f'"result":{{"big":{in_answer},', 1)
            if probe_id is not None:
                written = answer_id if answer_id is not None and record["dir"] == "s2c" else probe_id
                raw = raw.replace(PROBE_ID, f'"id":{written},', 1)
            record["raw"], record["len"] = raw, len(raw.encode())
        out.append(orjson.dumps(record))
    path = tmp_path / "in" / CAPTURE.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\n".join(out) + b"\n")
    return path


def _report(paths: list[str]) -> dict[str, Any]:
    return orjson.loads(render_json(analyze(paths)))


def _read_as_answered(report: dict[str, Any]) -> None:
    assert report["inputs"]["malformed"] == [] and report["inputs"]["records"] == 13, report["inputs"]
    (server,) = report["servers"]
    assert server["era"] == "modern", server
    assert list(server["probe_outcomes"]) == ["discover-result"], server["probe_outcomes"]


@pytest.mark.parametrize("digits", [40, 100, 309, 400])
def test_an_id_of_many_digits_pairs_its_answer(tmp_path: Path, digits: int) -> None:
    _read_as_answered(_report([str(_capture(tmp_path, probe_id="7" * digits))]))


@pytest.mark.parametrize("number", ["1e400", "-1.5E+309", "9" * 400])
def test_an_id_beyond_a_double_pairs_its_answer(tmp_path: Path, number: str) -> None:
    _read_as_answered(_report([str(_capture(tmp_path, probe_id=number))]))


@pytest.mark.parametrize("number", ["1e400", "-1.5E+309", "9" * 400, "7" * 60])
def test_a_number_beyond_the_readers_in_an_answer_is_read(tmp_path: Path, number: str) -> None:
    _read_as_answered(_report([str(_capture(tmp_path, in_answer=number))]))


@pytest.mark.parametrize(("probe_id", "answer_id"), [("7" * 100, None), ("1e400", "10E399")])
def test_the_archive_reads_them_as_the_jsonl(tmp_path: Path, probe_id: str, answer_id: str | None) -> None:
    path = _capture(tmp_path, probe_id=probe_id, answer_id=answer_id, in_answer="1e400")
    compact([str(path)], tmp_path / "archive", jobs=1)
    jsonl, archive = _report([str(path)]), _report([str(tmp_path / "archive")])
    _read_as_answered(jsonl)
    assert archive["servers"] == jsonl["servers"] and archive["findings"] == jsonl["findings"]


def test_a_long_id_keeps_every_digit(tmp_path: Path) -> None:
    """Two ids that differ in their last digit only are two requests: the answer of one is no answer
    of the other (a double holds 17 digits)."""
    path = _capture(tmp_path, probe_id="7" * 45, answer_id="7" * 44 + "8")
    (server,) = _report([str(path)])["servers"]
    assert server["era"] != "modern" and "discover-result" not in server["probe_outcomes"], server


BEYOND: Final = ["1e400", "-1.5E+309", "9" * 400]
RELEASE: Final = '"supportedVersions":["2026-07-28"],"capabilities":{}}}'


@pytest.mark.parametrize(
    ("probe_id", "answer"),
    [
        *[("1", '{"jsonrpc":"2.0","id":1,"result":{"big":' + n + "," + RELEASE) for n in BEYOND],
        *[(n, '{"jsonrpc":"2.0","id":' + n + ',"result":{' + RELEASE) for n in BEYOND],
        ("7" * 60, '{"jsonrpc":"2.0","id":' + "7" * 60 + ',"result":{' + RELEASE),
    ],
)  # fmt: skip
def test_the_live_counters_read_them_as_the_analyzer(tmp_path: Path, probe_id: str, answer: str) -> None:
    """The recorders' counters read a message as the analyzer later does: such an answer was garbage."""
    from addon import format as fmt
    from addon.metrics import LiveStats
    from tests.test_metrics import PROBE, _analyzed, feed, frame, with_id

    records = [frame("a", fmt.C2S, with_id(probe_id, PROBE)), frame("a", fmt.S2C, answer)]
    expected = {"era": "modern", "outcomes": {"discover-result": 1}}
    assert feed(LiveStats(), records)["servers"].get("srv") == expected
    assert _analyzed(tmp_path, records) == expected


def test_a_number_of_more_digits_than_python_reads_by_default_is_read(tmp_path: Path) -> None:
    from addon import format as fmt
    from addon.metrics import LiveStats
    from tests.test_metrics import PROBE, _analyzed, feed, frame, with_id

    versions = '"supportedVersions":["2026-07-28"],"capabilities":{}'
    answer = '{"jsonrpc":"2.0","id":1,"result":{"big":' + "9" * 5000 + "," + versions + "}}"
    records = [frame("a", fmt.C2S, with_id("1", PROBE)), frame("a", fmt.S2C, answer)]
    expected = {"era": "modern", "outcomes": {"discover-result": 1}}
    assert feed(LiveStats(), records)["servers"].get("srv") == expected
    assert _analyzed(tmp_path, records) == expected


@pytest.mark.parametrize(
    ("probe_id", "answer_id"),
    [
        ("1e400", "1E400"),
        ("1e400", "10e399"),
        ("1e400", "1.0e+400"),
        ("-1.5E+309", "-15e308"),
        ("1e400", "1" + "0" * 400),
    ],
)
def test_an_id_beyond_a_double_pairs_its_answer_however_written(tmp_path: Path, probe_id: str, answer_id: str) -> None:
    """One number written two ways is one id, as the live counters key it (an integral one as its digits),
    beyond a double's range too: `1E400` answered `1e400` was read as no answer."""
    _read_as_answered(_report([str(_capture(tmp_path, probe_id=probe_id, answer_id=answer_id))]))


@pytest.mark.parametrize(("probe_id", "answer_id"), [("1e400", "1e401"), ("1e400", "2e400"), ("-1e400", "1e400")])
def test_ids_beyond_a_double_of_other_values_stay_apart(tmp_path: Path, probe_id: str, answer_id: str) -> None:
    report = _report([str(_capture(tmp_path, probe_id=probe_id, answer_id=answer_id))])
    (server,) = report["servers"]
    assert "discover-result" not in server["probe_outcomes"], server["probe_outcomes"]
