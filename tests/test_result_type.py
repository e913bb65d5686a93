"""A `result` that is no object, or none of the payload's own: MCP's results are objects, and both SDKs
refuse a line whose result is a number, a string, an array, a boolean or null (the Python SDK's
`JSONRPCMessage` validation fails; the client logs it and goes on waiting). Such a line is JSON that
is no message. `json_path_match` writes a string's content, so a string holding a DiscoverResult's
text must not read as that result, and a `result` member nested in another member is none.

These tests hold the kinds and versions the analyzer reads, on pieces read every way the loader reads
them, to a parse of each payload, and the counters to the analyzer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest

from tests.test_method_type import assert_garbage_before_an_answer, assert_garbage_on_its_stream, read_rows
from tests.test_metrics_agreement import _http, _in_its_body, _live

_MODERN_TEXT: Final = json.dumps(json.dumps({"supportedVersions": ["2026-07-28"], "capabilities": {}}))
ODD_RESULTS: Final = [
    '{"jsonrpc":"2.0","id":1,"result":5}',
    '{"jsonrpc":"2.0","id":1,"result":"ok"}',
    '{"jsonrpc":"2.0","id":1,"result":true}',
    '{"jsonrpc":"2.0","id":1,"result":[{"supportedVersions":["2026-07-28"],"capabilities":{}}]}',
    '{"jsonrpc":"2.0","id":1,"result":' + _MODERN_TEXT + "}",
    '{"jsonrpc":"2.0","id":1,"result":"{}","x":{"result":{}}}',
]
"""Payloads whose own result is no object (the fast reading refuses to decode them)."""
NO_RESULT: Final = [
    '{"jsonrpc":"2.0","id":1,"result":null}',
    '{"jsonrpc":"2.0","id":1,"x":{"result":{}}}',
    '{"jsonrpc":"2.0","id":2,"x":{"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}}',
]
"""Payloads without a result object of their own that the fast reading decodes."""
OBJECT_RESULTS: Final = [
    '{"jsonrpc":"2.0","id":1,"result":{}}',
    '{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"result":42}}}',
    '{"jsonrpc":"2.0","id":1,"x":{"result":5},"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}',
    '{"jsonrpc":"2.0","id":1,"result" : {"a":"\\"result\\":1"}}',
]
"""Payloads whose own result is an object."""


def _model(raw: str) -> tuple[str, list[str] | None]:
    """The kind of the payload and the versions its result lists, by a parse."""
    msg = json.loads(raw)
    result = msg.get("result")
    if isinstance(result, dict) and msg.get("id") is not None:
        return "response", result.get("supportedVersions")
    return "invalid", None


def _read(tmp_path: Path, payloads: list[str]) -> list[tuple[Any, ...]]:
    return read_rows(tmp_path, payloads, "kind", "supported_versions")


@pytest.mark.parametrize(
    ("payloads", "beside"),
    [
        pytest.param(NO_RESULT + OBJECT_RESULTS, None, id="fast"),
        pytest.param(ODD_RESULTS + NO_RESULT + OBJECT_RESULTS, None, id="robust"),
        # a `\u` escape in the piece: it is read with the rare reading from the start
        pytest.param(NO_RESULT + OBJECT_RESULTS, '{"jsonrpc":"2.0","id":1,"method":"\\u0035"}', id="rare"),
        pytest.param(ODD_RESULTS + NO_RESULT + OBJECT_RESULTS, '{"id":1,"method":"\\u0035"}', id="robust-rare"),
    ],
)
def test_a_result_that_is_no_object_of_its_own_makes_the_line_no_message(
    tmp_path: Path, payloads: list[str], beside: str | None
) -> None:
    """The analyzer read any payload holding the text `"result"` with an id as a response: `"result": 5`,
    a `result` nested in another member, and a string holding a DiscoverResult's text as that result."""
    read = _read(tmp_path, payloads + ([beside] if beside else []))
    assert read[: len(payloads)] == [_model(p) for p in payloads]
    assert {_model(p)[0] for p in ODD_RESULTS + NO_RESULT} == {"invalid"}
    assert {_model(p)[0] for p in OBJECT_RESULTS} == {"response"}


@pytest.mark.parametrize("answer", [ODD_RESULTS[0], ODD_RESULTS[4], NO_RESULT[0], NO_RESULT[1]])
def test_a_probe_answered_with_a_result_that_is_no_object_is_garbage(tmp_path: Path, answer: str) -> None:
    assert_garbage_before_an_answer(tmp_path, answer)


def test_an_event_whose_result_is_a_string_is_garbage(tmp_path: Path) -> None:
    assert_garbage_on_its_stream(tmp_path, ODD_RESULTS[4])


def test_a_body_whose_result_is_a_string_holding_a_discover_result_is_none(tmp_path: Path) -> None:
    """A body answers its flow's request whatever it holds, but a string is no DiscoverResult (the analyzer
    read the versions the string's text listed, and the server as modern): garbage, as JSON of another
    shape is."""
    records = _in_its_body(ODD_RESULTS[4])
    analyzed = _http(tmp_path, records)
    assert (analyzed["era"], analyzed["outcomes"]) == ("broken", {"garbage": 1})
    assert (_live(records) or {"outcomes": {}})["outcomes"] == {"garbage": 1}
