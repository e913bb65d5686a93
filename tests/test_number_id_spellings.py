"""A number id written two ways by a request and its answer. Real peers compare ids as the numbers
their parsers make of them: JavaScript's `JSON.parse` reads `-0.0`, `-0` and `0` as one number (`-0 ===
0`; `JSON.stringify(-0)` writes `0`, so a TypeScript server answers a request `-0.0` with `"id":0`),
Python's `json` reads `-0.0` as a float equal to `0` (one dictionary key), and both read
`9007199254740993.0` as the double 9007199254740992 (which is what a TypeScript server echoes, and a
Python one `9007199254740992.0`), where `9007199254740993` is an integer to Python (and to the Python
SDK, whose ids are integers or strings: it takes a request with a fractional id for a notification).

The analyzer read a negative zero written as a fraction (`-0.0`, `-0e0`) as the id `-0`, apart from `0`:
its answer `0` paired with nothing. The live counters read a number written with a fraction or an
exponent with all its digits (`9007199254740993.0` as the integer 9007199254740993), where the analyzer
reads the double it is: the answer a TypeScript server gives paired there only, and one spelled
`9007199254740993` paired there only."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

from addon import format as fmt
from addon.metrics import LiveStats
from tests.test_metrics import _analyzed, feed, frame

PROBE: Final = (
    '{"jsonrpc":"2.0","id":ID,"method":"server/discover","params":{"_meta":{'
    '"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
)
ANSWER: Final = '{"jsonrpc":"2.0","id":ID,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'
ANSWERED: Final = {"era": "modern", "outcomes": {"discover-result": 1}}


def _records(probe_id: str, answer_id: str) -> list[dict[str, object]]:
    return [frame("a", fmt.C2S, PROBE.replace("ID", probe_id)), frame("a", fmt.S2C, ANSWER.replace("ID", answer_id))]


@pytest.mark.parametrize(
    ("probe_id", "answer_id"),
    [
        ("-0.0", "0"),  # a TypeScript server's answer
        ("-0.0", "-0"),
        ("-0e0", "0.0"),
        ("-1e-400", "0"),  # a double too small: a negative zero
        ("9007199254740993.0", "9007199254740992"),  # a TypeScript server's answer
        ("9007199254740993.0", "9007199254740992.0"),  # a Python echo (`json`)
        ("1.8446744073709551617e19", "18446744073709552000"),  # 2**64, as `JSON.stringify` writes it
        # guards
        ("-0", "0"),
        ("-0.0", "-0.0"),
        ("9007199254740993", "9007199254740993"),
        ("9007199254740993.0", "9007199254740993.0"),
        ("1.0", "1"),
    ],
)
def test_an_answer_naming_the_number_of_its_request_pairs(tmp_path: Path, probe_id: str, answer_id: str) -> None:
    records = _records(probe_id, answer_id)
    assert _analyzed(tmp_path, records) == ANSWERED
    assert feed(LiveStats(), records)["servers"].get("srv") == ANSWERED


@pytest.mark.parametrize(
    ("probe_id", "answer_id"),
    [
        ("9007199254740993.0", "9007199254740993"),  # the double 9007199254740992, and an integer past it
        ("9007199254740993", "9007199254740992"),  # a TypeScript server's answer, which a Python client drops
        # guards
        ("1.5", "1"),
        ("-0.5", "0"),
    ],
)
def test_an_answer_naming_another_number_answers_nothing(tmp_path: Path, probe_id: str, answer_id: str) -> None:
    records = _records(probe_id, answer_id)
    assert "discover-result" not in _analyzed(tmp_path, records)["outcomes"]
    assert "discover-result" not in feed(LiveStats(), records)["servers"].get("srv", {"outcomes": {}})["outcomes"]
