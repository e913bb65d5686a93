"""A `method` that is no string: JSON-RPC wants one, and both SDKs refuse a line whose method is a
number, a boolean, an array or an object (the Python SDK's `JSONRPCMessage` validation fails; the client
logs it and goes on waiting). Such a line is no request or notification but JSON that is no message,
as an id JSON-RPC does not allow makes one; a string that looks like one of those values (`"5"`,
`"true"`, `"[x]"`) is a method like any other.

The analyzer reads methods without parsing most payloads (`analyzer.messages`): these tests hold the
kinds it reads, on pieces read every way the loader reads them, to a parse of each payload."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import polars as pl
import pytest

from addon import format as fmt
from addon.metrics import LiveStats
from tests.test_messages import Cap, messages_of
from tests.test_metrics import _analyzed, event, feed, frame
from tests.test_metrics_agreement import _http, _live, _on_its_stream

ODD_METHODS: Final = [
    '{"jsonrpc":"2.0","id":1,"method":5}',
    '{"jsonrpc":"2.0","id":1,"method":1.5}',
    '{"jsonrpc":"2.0","id":1,"method":-0e1}',
    '{"jsonrpc":"2.0","id":1,"method":true}',
    '{"jsonrpc":"2.0","id":1,"method":false,"params":{}}',
    '{"jsonrpc":"2.0","method":7}',
    '{"jsonrpc":"2.0","id":1,"method":5,"params":{"method":"x"}}',
    '{"jsonrpc":"2.0","id":1,"method" : 5, "params":{"ref":{"method" :"y"}}}',
    '{"jsonrpc":"2.0","id":1,"method":5,"method":"x"}',
]
"""Payloads whose own method is no string (the fast reading decodes each as text)."""
ODD_SHAPES: Final = [
    '{"jsonrpc":"2.0","id":1,"method":["tools/call"]}',
    '{"jsonrpc":"2.0","id":1,"method":{"name":"x"}}',
]
"""Methods the fast reading refuses to decode: the piece is read the robust way."""
STRING_METHODS: Final = [
    '{"jsonrpc":"2.0","id":1,"method":"5"}',
    '{"jsonrpc":"2.0","id":1,"method":"true"}',
    '{"jsonrpc":"2.0","id":1,"method":"[x]"}',
    '{"jsonrpc":"2.0","id":1,"method":"{}"}',
    '{"jsonrpc":"2.0","id":1,"params":{"method":6},"method":"6"}',
    '{"jsonrpc":"2.0","id":1,"method":"x","method":5}',
    '{"jsonrpc":"2.0","method":"1e3"}',
    '{"jsonrpc":"2.0","id":1,"method":null,"result":{}}',
]
"""Payloads whose own method is a string (or null, beside a result: a response)."""


def _first_of_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(reversed(pairs))


def _model(raw: str) -> str:
    """The kind of the payload by a parse (its first of a key written twice, as the readings read it)."""
    msg = json.loads(raw, object_pairs_hook=_first_of_each)
    method = msg.get("method")
    if method is not None:
        if not isinstance(method, str):
            return "invalid"
        return "request" if msg.get("id") is not None else "notification"
    return "response" if "result" in msg and msg.get("id") is not None else "invalid"


def read_rows(tmp_path: Path, payloads: list[str], *columns: str) -> list[tuple[Any, ...]]:
    """The `columns` of each payload's messages row, the payloads written as frames of one stdio capture
    (by turns from the server and the client) and read as `analyze` reads it."""
    cap = Cap(tmp_path)
    for n, payload in enumerate(payloads):
        (cap.c2s if n % 2 else cap.s2c)(payload)
    frames = messages_of(cap.close()).filter(pl.col("record_type") == fmt.FRAME)
    return frames.select(columns).rows()


def _kinds(tmp_path: Path, payloads: list[str]) -> list[str]:
    return [kind for (kind,) in read_rows(tmp_path, payloads, "kind")]


@pytest.mark.parametrize(
    "payloads",
    [
        pytest.param(ODD_METHODS + STRING_METHODS, id="fast"),
        pytest.param(ODD_SHAPES + ODD_METHODS + STRING_METHODS, id="robust"),
        # a `\u` escape in the piece: it is read with the rare reading from the start
        pytest.param([*ODD_METHODS, *STRING_METHODS, '{"jsonrpc":"2.0","id":1,"method":"\\u0035"}'], id="rare"),
    ],
)
def test_a_method_that_is_no_string_makes_the_line_no_message(tmp_path: Path, payloads: list[str]) -> None:
    """The analyzer read `"method": 5` as a request of method `5` (and `["tools/call"]` as one of that
    text): a line a client refuses was a server's request, not the garbage it is."""
    assert _kinds(tmp_path, payloads) == [_model(p) for p in payloads]
    assert {_model(p) for p in ODD_METHODS + ODD_SHAPES} == {"invalid"}
    assert "invalid" not in {_model(p) for p in STRING_METHODS}


def test_a_batch_member_whose_method_is_no_string_is_no_message(tmp_path: Path) -> None:
    batch = f"[{ODD_METHODS[0]},{STRING_METHODS[0]},{ODD_SHAPES[0]}]"
    assert _kinds(tmp_path, [batch]) == ["invalid", "request", "invalid"]


PROBE: Final = (
    '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{'
    '"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
)
LATER: Final = '{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'


_DIED: Final = [event("a", fmt.EV_SERVER_EOF), event("a", fmt.EV_EXIT)]


def outcomes_after(tmp_path: Path, *lines: str) -> tuple[dict[str, int], dict[str, int]]:
    """The probe outcomes the analyzer and the counters read when a stdio server answers the probe with
    `lines` and then dies."""
    records = [frame("a", fmt.C2S, PROBE), *(frame("a", fmt.S2C, line) for line in lines), *_DIED]
    return _analyzed(tmp_path, records)["outcomes"], feed(LiveStats(), records)["servers"]["srv"]["outcomes"]


def assert_garbage_before_an_answer(tmp_path: Path, line: str) -> None:
    """After a probe, `line` is garbage to the analyzer and the counters alike, as the SDKs read it: an
    answer after it decides, and without one the probe is `garbage`."""
    assert outcomes_after(tmp_path / "answered", line, LATER) == ({"discover-result": 1}, {"discover-result": 1})
    assert outcomes_after(tmp_path / "alone", line) == ({"garbage": 1}, {"garbage": 1})


def assert_garbage_on_its_stream(tmp_path: Path, raw: str) -> None:
    """An HTTP probe's event stream holding only the event `raw`: garbage to the analyzer and the counters."""
    records = _on_its_stream(raw)
    assert _http(tmp_path, records)["outcomes"] == {"garbage": 1}
    assert (_live(records) or {"outcomes": {}})["outcomes"] == {"garbage": 1}


@pytest.mark.parametrize("line", [ODD_METHODS[0], ODD_METHODS[3], ODD_SHAPES[0], ODD_METHODS[5]])
def test_a_server_line_whose_method_is_no_string_is_garbage(tmp_path: Path, line: str) -> None:
    """It was a server's request to both: the probe it follows `connection-died`."""
    assert_garbage_before_an_answer(tmp_path, line)


def test_a_string_method_that_looks_like_a_number_is_a_request(tmp_path: Path) -> None:
    """The server's request of method `"5"` is a message: the probe it follows then dies unanswered."""
    assert outcomes_after(tmp_path, STRING_METHODS[0]) == ({"connection-died": 1}, {"connection-died": 1})
