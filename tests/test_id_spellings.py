"""A string id that looks like a number (`"1"`) written otherwise than `"id":"1"` or `"id": "1"`: with a
space before the colon (Jackson's pretty printer writes `"id" : "1"`), a tab after it, or its digit
escaped (`"\\u0031"`). The analyzer told it from the number `1` by those two spellings alone and read it
as the number: the answer paired with no request, the probe `no-answer`, the server `broken`. The live
counters, which decode the message, paired them."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

from addon import format as fmt
from addon.metrics import LiveStats
from tests.test_metrics import _analyzed, feed, frame

PROBE: Final = (
    '{"jsonrpc":"2.0","id":"1","method":"server/discover","params":{"_meta":{'
    '"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
)
ANSWER: Final = '{"jsonrpc":"2.0","id":"1","result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'
EXPECTED: Final = {"era": "modern", "outcomes": {"discover-result": 1}}


@pytest.mark.parametrize(
    ("probe", "answer"),
    [
        (PROBE, ANSWER.replace('"id":"1"', '"id" : "1"')),
        (PROBE.replace('"id":"1"', '"id":\\t"1"'.replace("\\t", "\t")), ANSWER),
        (PROBE.replace('"id":"1"', '"id":"\\u0031"'), ANSWER),
        (PROBE, ANSWER.replace('"id":"1"', '"id"  :  "1"')),
    ],
    ids=["space-before-colon", "tab-after-colon", "escaped-digit", "spaces-around-colon"],
)
def test_a_string_id_spelled_otherwise_pairs_its_answer(tmp_path: Path, probe: str, answer: str) -> None:
    records = [frame("a", fmt.C2S, probe), frame("a", fmt.S2C, answer)]
    assert feed(LiveStats(), records)["servers"].get("srv") == EXPECTED
    assert _analyzed(tmp_path, records) == EXPECTED


def test_a_number_id_spelled_with_spaces_stays_a_number(tmp_path: Path) -> None:
    """A guard: the number `1` beside a nested string id `"1"` is no string id."""
    probe = PROBE.replace('"id":"1"', '"id" : 1').replace('"params":{', '"params":{"ref":{"id":"1"},', 1)
    answer = ANSWER.replace('"id":"1"', '"id":1')
    records = [frame("a", fmt.C2S, probe), frame("a", fmt.S2C, answer)]
    assert _analyzed(tmp_path, records) == EXPECTED
