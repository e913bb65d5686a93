"""An error object without an integer `code` or a string `message`: JSON-RPC wants both, and both SDKs
refuse such a line (the Python SDK's `JSONRPCMessage` validation fails, as it does for an error that is
no object; the client logs it and goes on waiting). Such a line is no error but JSON that is no message;
beside a result it is a response. A -32022 without its message is then no refusal in the modern era's
words: the client never read one.

Codes are read as before (an integral number however written, or a string of an integer's JSON text,
as the Python SDK's client reads it). That client's lax reading also takes `true` and `"+5"` as codes;
the analyzer reads neither as a code, so neither makes an error (the TypeScript SDK refuses both).

These tests hold the kinds and codes the analyzer reads, on pieces read every way the loader reads
them, to the Python SDK's own validation of each payload, and the counters to the analyzer."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest
from mcp.types import JSONRPCError, JSONRPCResponse, jsonrpc_message_adapter
from pydantic import ValidationError

from tests.test_error_type import every_reading, read_kinds_and_codes
from tests.test_method_type import assert_garbage_before_an_answer, assert_garbage_on_its_stream
from tests.test_metrics_agreement import _http, _in_its_body, _live

_SUPPORTED: Final = '"data":{"supported":["2025-11-25"]}'
ODD_MEMBERS: Final = [
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32022,' + _SUPPORTED + "}}",
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":null,' + _SUPPORTED + "}}",
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":5}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":-0.5e1}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":["m"]}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":{"text":"m"}}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":true}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message" : false}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":5,"data":{"message":"m"}}}',
    '{"jsonrpc":"2.0","id":null,"error":{"data":{"message":"m"},"message":7,"code":-32700}}',
    '{"jsonrpc":"2.0","id":1,"error":{"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":null,"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":[-32601],"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{}}',
]
"""Payloads whose error object the SDK refuses."""
SOUND_ERRORS: Final = [
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"5"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"true"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"[x]"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"{}"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":""}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message" : "5"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"data":{"message":5},"code":-32601,"message":"5"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":"-32022","message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32022.0,"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-3.2022e4,"message":"m"}}',
    '{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}',
    '{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":-32601}}',
    '{"jsonrpc":"2.0","id":1,"result":{"x":1},"error":{"message":5}}',
]
"""Payloads the SDK reads as an error (or, beside a result, as a response)."""
LAX_CODES: Final = [
    '{"jsonrpc":"2.0","id":1,"error":{"code":true,"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":"+5","message":"m"}}',
]
"""Codes the Python SDK's lax reading takes (as 1 and 5) and the analyzer reads as none."""


def _sdk(raw: str) -> tuple[str, int | None]:
    """The kind and error code the Python SDK reads the payload as."""
    try:
        msg = jsonrpc_message_adapter.validate_json(raw, by_name=False)
    except ValidationError:
        return "invalid", None
    if isinstance(msg, JSONRPCError):
        return "error", msg.error.code
    assert isinstance(msg, JSONRPCResponse), raw
    return "response", None


@every_reading
def test_an_error_without_an_integer_code_or_a_string_message_makes_the_line_no_message(
    tmp_path: Path, beside: str | None
) -> None:
    """The analyzer read `{"code":-32022,"data":…}` without a message as a -32022 (its server modern at
    another version), `"message": 5` as an error, and `{"message":"m"}` as an error without a code."""
    payloads = ODD_MEMBERS + SOUND_ERRORS + LAX_CODES
    read = read_kinds_and_codes(tmp_path, payloads + ([beside] if beside else []))
    sdk = [_sdk(p) for p in ODD_MEMBERS + SOUND_ERRORS]
    assert read[: len(sdk)] == sdk
    assert {kind for kind, _ in sdk[: len(ODD_MEMBERS)]} == {"invalid"}
    assert "invalid" not in {kind for kind, _ in sdk[len(ODD_MEMBERS) :]}
    assert read[len(sdk) : len(payloads)] == [("invalid", None)] * len(LAX_CODES)
    assert [_sdk(p) for p in LAX_CODES] == [("error", 1), ("error", 5)]


@pytest.mark.parametrize("answer", [ODD_MEMBERS[0], ODD_MEMBERS[2], ODD_MEMBERS[8], ODD_MEMBERS[10], LAX_CODES[0]])
def test_a_probe_answered_with_an_error_the_sdk_refuses_is_garbage(tmp_path: Path, answer: str) -> None:
    """A -32022 without its message was the probe's `unsupported-version`: the client never read it."""
    assert_garbage_before_an_answer(tmp_path, answer)


def test_an_event_whose_error_has_no_message_is_garbage(tmp_path: Path) -> None:
    assert_garbage_on_its_stream(tmp_path, ODD_MEMBERS[0])


def test_a_body_whose_error_has_no_message_is_no_refusal(tmp_path: Path) -> None:
    """A 200 body answers its flow's request, but a -32022 without its message is no -32022 to the client."""
    records = _in_its_body(ODD_MEMBERS[0], 200)
    analyzed = _http(tmp_path, records)
    assert analyzed["era"] != "modern-other"
    assert analyzed["outcomes"] == (_live(records) or {"outcomes": {}})["outcomes"] == {"garbage": 1}


def test_a_refusal_body_is_read_by_its_code_whatever_its_message(tmp_path: Path) -> None:
    """An HTTP 4xx is an error by its status: the analyzer and the counters read the code its body
    holds, as they read one beside an id JSON-RPC does not allow."""
    records = _in_its_body(ODD_MEMBERS[0], 400)
    analyzed = _http(tmp_path, records)
    assert analyzed["outcomes"] == (_live(records) or {"outcomes": {}})["outcomes"] == {"unsupported-version": 1}
