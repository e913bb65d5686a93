"""A line without `"jsonrpc": "2.0"`: every JSON-RPC 2.0 message names its version so, and both SDKs
refuse a line that leaves it out or names another (`"1.0"`, the number `2.0`, `null`); the Python
client logs the validation error and goes on waiting. Such a line is JSON that is no message, whatever
else it holds: a server that answers a probe without it has answered nothing a client reads.

These tests hold the kinds the analyzer reads, on pieces read every way the loader reads them, to a
parse of each payload, and the counters to the analyzer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import pytest

from addon.metrics import LiveStats
from tests.test_method_type import PROBE, assert_garbage_before_an_answer, assert_garbage_on_its_stream, read_rows
from tests.test_metrics import _analyzed, c2s, feed, s2c

_ANSWER: Final = '"id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}'
NOT_2: Final = [
    "{" + _ANSWER + "}",
    '{"jsonrpc":"1.0",' + _ANSWER + "}",
    '{"jsonrpc":2.0,' + _ANSWER + "}",
    '{"jsonrpc":2,' + _ANSWER + "}",
    '{"jsonrpc":null,' + _ANSWER + "}",
    '{"jsonrpc":"2.0 ",' + _ANSWER + "}",
    '{"id":1,"method":"tools/list"}',
    '{"jsonrpc":"2","id":1,"error":{"code":-32601,"message":"m"}}',
    # a number beside a string `"2.0"` elsewhere in the payload
    '{"jsonrpc":2.0,"id":1,"result":{"supportedVersions":["2.0"],"capabilities":{}}}',
    '{"jsonrpc":2.0,"id":1,"method":"tools/call","params":{"jsonrpc":"2.0"}}',
    '{"params":{"jsonrpc" : "2.0"},"jsonrpc":2.0,"method":"notifications/x"}',
]
"""Payloads that name no version `2.0` as a string (the fast reading decodes each)."""
ODD_SHAPE: Final = '{"jsonrpc":["2.0"],' + _ANSWER + "}"
"""A version the fast reading refuses to decode: the piece is read the robust way."""
NAMED: Final = [
    '{"jsonrpc":"2.0",' + _ANSWER + "}",
    '{' + _ANSWER + ',"jsonrpc" : "2.0"}',
    '{"jsonrpc":"2.0","method":"notifications/initialized"}',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"jsonrpc":2.0}}',
]
"""Payloads that name it."""
ESCAPED: Final = '{"jsonrpc":"\\u0032.0",' + _ANSWER + "}"
"""It, written with an escape (the piece is read with the rare reading)."""


def _model(raw: str) -> str:
    msg = json.loads(raw)
    if msg.get("jsonrpc") != "2.0":
        return "invalid"
    if msg.get("method") is not None:
        return "request" if msg.get("id") is not None else "notification"
    return "response"


def _kinds(tmp_path: Path, payloads: list[str]) -> list[str]:
    return [kind for (kind,) in read_rows(tmp_path, payloads, "kind")]


@pytest.mark.parametrize(
    "payloads",
    [
        pytest.param(NOT_2 + NAMED, id="fast"),
        pytest.param([ODD_SHAPE, *NOT_2, *NAMED], id="robust"),
        # a `\u` escape in the piece: it is read with the rare reading from the start
        pytest.param([*NOT_2, *NAMED, ESCAPED], id="rare"),
        pytest.param([ODD_SHAPE, *NOT_2, *NAMED, ESCAPED], id="robust-rare"),
    ],
)
def test_a_line_naming_no_version_2_0_is_no_message(tmp_path: Path, payloads: list[str]) -> None:
    """The analyzer read a line without `"jsonrpc": "2.0"` by its other members: a DiscoverResult a
    client refuses answered the probe."""
    assert _kinds(tmp_path, payloads) == [_model(p) for p in payloads]
    assert {_model(p) for p in [*NOT_2, ODD_SHAPE]} == {"invalid"}


@pytest.mark.parametrize("line", [NOT_2[0], NOT_2[1], NOT_2[2]])
def test_a_probe_answered_without_the_version_is_answered_by_garbage(tmp_path: Path, line: str) -> None:
    assert_garbage_before_an_answer(tmp_path, line)


def test_an_event_without_the_version_is_garbage(tmp_path: Path) -> None:
    assert_garbage_on_its_stream(tmp_path, NOT_2[0])


_ANSWER_LATE: Final = '{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'


@pytest.mark.parametrize(
    ("notification", "expected"),
    [
        pytest.param('{"jsonrpc":"2.0","method":"notifications/initialized"}', {"no-answer": 1}, id="named"),
        pytest.param('{"method":"notifications/initialized"}', {"discover-result": 1}, id="not-named"),
    ],
)
def test_a_client_line_without_the_version_moves_nothing_on(
    tmp_path: Path, notification: str, expected: dict[str, int]
) -> None:
    """A client that sends a notification after its probe has moved on: an answer after the timeout is
    none. A line without the version is no notification, so the client still waited and the late
    answer is the probe's outcome, to the analyzer and the counters alike."""
    records = [c2s(0, PROBE), c2s(1, notification), s2c(12, _ANSWER_LATE), s2c(13, "{}")]
    assert _analyzed(tmp_path, records)["outcomes"] == expected
    assert feed(LiveStats(), records)["servers"]["srv"]["outcomes"] == expected


def test_a_probe_without_the_version_is_no_probe(tmp_path: Path) -> None:
    """A server refuses it (-32600, or nothing): the analyzer read it as the server's probe."""
    records = [c2s(0, PROBE.replace('"jsonrpc":"2.0",', "")), s2c(1, _ANSWER_LATE)]
    assert _analyzed(tmp_path, records)["outcomes"] == {}
    assert feed(LiveStats(), records)["servers"].get("srv", {"outcomes": {}})["outcomes"] == {}
