"""An `error` that is no object: JSON-RPC wants one, and both SDKs refuse a line whose error is a string,
a number, a boolean or an array (the Python SDK's `JSONRPCMessage` validation fails; the client logs it
and goes on waiting). Such a line is no error but JSON that is no message; beside a result it is a
response. `json_path_match` writes a string's content, so a string holding an error object's text
(`"error":"{\\"code\\":-32022}"`) must not read as that error.

These tests hold the kinds and codes the analyzer reads, on pieces read every way the loader reads
them, to a parse of each payload, and the counters to the analyzer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest

from tests.test_method_type import assert_garbage_before_an_answer, assert_garbage_on_its_stream, read_rows
from tests.test_metrics_agreement import _http, _in_its_body, _live

_REFUSED_TEXT: Final = json.dumps(
    json.dumps({"code": -32022, "message": "Unsupported protocol version", "data": {"supported": ["2025-11-25"]}})
)
ODD_ERRORS: Final = [
    '{"jsonrpc":"2.0","id":1,"error":"Method not found"}',
    '{"jsonrpc":"2.0","id":1,"error":-32601}',
    '{"jsonrpc":"2.0","id":1,"error":true}',
    '{"jsonrpc":"2.0","id":1,"error":[{"code":-32601,"message":"m"}]}',
    '{"jsonrpc":"2.0","id":1,"error":' + _REFUSED_TEXT + "}",
    '{"jsonrpc":"2.0","id":1,"error":"{}","x":{"error":{}}}',
    '{"jsonrpc":"2.0","id":null,"error":"{\\"code\\":-32700}"}',
]
"""Payloads whose own error is no object."""
OBJECT_ERRORS: Final = [
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error" : {"code":-32601,"message":"m","data":{"error":"x"}}}',
    '{"jsonrpc":"2.0","id":1,"x":{"error":"y"},"error":{"code":-32602,"message":"m"}}',
    '{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}',
    '{"jsonrpc":"2.0","id":1,"result":{},"error":"x"}',
    '{"jsonrpc":"2.0","id":1,"result":null,"error":{"code":-32020,"message":"m"}}',
]
"""Payloads whose own error is an object (or, beside a result, a response)."""


def _model(raw: str) -> tuple[str, int | None]:
    """The kind and error code of the payload by a parse (the last of a key written twice, as
    `json_path_match` reads an error)."""
    msg = json.loads(raw)
    error = msg.get("error")
    if isinstance(error, dict):
        return "error", error.get("code")
    if "result" in msg and msg.get("id") is not None:
        return "response", None
    return "invalid", None


def read_kinds_and_codes(tmp_path: Path, payloads: list[str]) -> list[tuple[Any, ...]]:
    return read_rows(tmp_path, payloads, "kind", "error_code")


every_reading = pytest.mark.parametrize(
    "beside",
    [
        pytest.param(None, id="fast"),
        # the fast reading refuses an array id: the piece is read the robust way
        pytest.param('{"jsonrpc":"2.0","id":[1],"method":"x"}', id="robust"),
        # a `\u` escape in the piece: it is read with the rare reading from the start
        pytest.param('{"jsonrpc":"2.0","id":1,"method":"\\u0035"}', id="rare"),
    ],
)
"""`beside`: a line written after the payloads that has their piece read each way the loader reads one."""


@every_reading
def test_an_error_that_is_no_object_makes_the_line_no_message(tmp_path: Path, beside: str | None) -> None:
    """The analyzer read `"error": "Method not found"` as an error without a code (a probe's
    `legacy-answer`), and a string holding a -32022's text as that -32022."""
    payloads = ODD_ERRORS + OBJECT_ERRORS
    read = read_kinds_and_codes(tmp_path, payloads + ([beside] if beside else []))
    assert read[: len(payloads)] == [_model(p) for p in payloads]
    assert {_model(p)[0] for p in ODD_ERRORS} == {"invalid"}
    assert "invalid" not in {_model(p)[0] for p in OBJECT_ERRORS}


@pytest.mark.parametrize("answer", [ODD_ERRORS[0], ODD_ERRORS[4]])
def test_a_probe_answered_with_an_error_that_is_no_object_is_garbage(tmp_path: Path, answer: str) -> None:
    assert_garbage_before_an_answer(tmp_path, answer)


def test_an_event_whose_error_is_no_object_is_garbage(tmp_path: Path) -> None:
    assert_garbage_on_its_stream(tmp_path, ODD_ERRORS[4])


@pytest.mark.parametrize("status", [200, 400])
def test_a_body_whose_error_is_a_string_holding_a_refusal_is_no_refusal(tmp_path: Path, status: int) -> None:
    """A body answers its flow's request whatever it holds, but a string is no -32022 (the analyzer read
    the one the string's text wrote, and the server as modern at another version)."""
    records = _in_its_body(ODD_ERRORS[4], status)
    analyzed = _http(tmp_path, records)
    assert analyzed["era"] != "modern-other"
    assert analyzed["outcomes"] == (_live(records) or {"outcomes": {}})["outcomes"]
    assert "unsupported-version" not in analyzed["outcomes"]

