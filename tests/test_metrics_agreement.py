"""Answers the recorders' live counters read otherwise than the analyzer reads the same records: an
error that also writes `"result": null`, a DiscoverResult naming no version either era knows, a probe
written with escaped slashes (PHP's `json_encode`), and an error without an id on the probe's own event
stream. The counters must say what `analyze` later says (`addon/metrics.py`'s module docstring)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest

from addon import format as fmt
from addon.metrics import LiveStats
from addon.writer import CaptureWriter
from tests.test_metrics import _analyzed, event, feed, frame

PROBE: Final = (
    '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{'
    '"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
)
T0: Final = 1796002155.0
SERVER: Final = "http://s/mcp"


def _stdio(answer: str, probe: str = PROBE) -> list[dict[str, Any]]:
    return [frame("a", fmt.C2S, probe), frame("a", fmt.S2C, answer)]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        # an error beside `"result": null`: the error answers
        ('{"jsonrpc":"2.0","id":1,"result":null,"error":{"code":-32601,"message":"Method not found"}}',
         {"era": "legacy", "outcomes": {"legacy-answer": 1}}),
        ('{"jsonrpc":"2.0","id":1,"result":null,"error":{"code":-32020,"message":"x"}}',
         {"era": "modern", "outcomes": {"modern-error": 1}}),
        # a DiscoverResult naming no version either era knows (a later revision), none, or an empty list
        ('{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2027-01-01"],"capabilities":{}}}',
         {"era": "unknown", "outcomes": {"discover-result": 1}}),
        ('{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":[],"capabilities":{}}}',
         {"era": "unknown", "outcomes": {"discover-result": 1}}),
        # a result without `supportedVersions` and `capabilities` is no DiscoverResult: the SDK's client
        # falls back to `initialize` after it, an answer that proves no era
        ('{"jsonrpc":"2.0","id":1,"result":{}}', {"era": "unknown", "outcomes": {"legacy-answer": 1}}),
        # a legacy answer proves the legacy era by the codes a legacy server gives a probe alone
        ('{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error"}}',
         {"era": "unknown", "outcomes": {"legacy-answer": 1}}),
        ('{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}',
         {"era": "unknown", "outcomes": {"legacy-answer": 1}}),
        # guards: those codes, and handshake versions alone (a legacy advertisement)
        ('{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}',
         {"era": "legacy", "outcomes": {"legacy-answer": 1}}),
        ('{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"}}',
         {"era": "legacy", "outcomes": {"legacy-answer": 1}}),
        ('{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2025-11-25"],"capabilities":{}}}',
         {"era": "legacy", "outcomes": {"discover-result": 1}}),
    ],
)  # fmt: skip
def test_the_counters_read_an_answer_as_the_analyzer(tmp_path: Path, answer: str, expected: dict[str, Any]) -> None:
    records = _stdio(answer)
    assert _analyzed(tmp_path, records) == expected
    assert feed(LiveStats(), records)["servers"].get("srv") == expected


def test_an_initialize_answered_by_an_error_beside_a_null_result_is_no_legacy_proof(tmp_path: Path) -> None:
    init = '{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}'
    answer = '{"jsonrpc":"2.0","id":2,"result":null,"error":{"code":-32600,"message":"no"}}'
    records = [frame("a", fmt.C2S, init), frame("a", fmt.S2C, answer)]
    assert _analyzed(tmp_path, records)["era"] == "unknown"
    assert feed(LiveStats(), records)["servers"].get("srv", {"era": "unknown"})["era"] == "unknown"


@pytest.mark.parametrize(
    "probe",
    [
        PROBE.replace("/", "\\/"),
        PROBE.replace("server/discover", "server\\u002fdiscover"),
        PROBE.replace("server/discover", "server/discove\\u0072"),
        PROBE.replace("server/discover", "\\u0073erver\\/\\u0064iscover"),
    ],
    ids=["php-escaped-slashes", "unicode-escaped-slash", "unicode-escaped-letter", "every-way-escaped"],
)
def test_a_probe_written_with_escapes_is_counted(tmp_path: Path, probe: str) -> None:
    records = _stdio('{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}', probe)
    expected = {"era": "modern", "outcomes": {"discover-result": 1}}
    assert _analyzed(tmp_path, records) == expected
    assert feed(LiveStats(), records)["servers"].get("srv") == expected


def _probe_post(*answer: dict[str, Any]) -> list[dict[str, Any]]:
    """An HTTP probe (flow `f1`) and the records of its `answer`, each given the flow's fields."""
    headers = [["content-type", "application/json"], ["mcp-protocol-version", "2026-07-28"],
               ["mcp-method", "server/discover"]]  # fmt: skip
    common = {"conn": "c", "flow": "f1", fmt.F_SERVER: SERVER}
    request = {**common, "type": fmt.HTTP_REQUEST, "dir": fmt.C2S, "method": "POST", "url": SERVER,
               "headers": headers, "raw": PROBE, "client": "127.0.0.1:1", "ts": T0}  # fmt: skip
    return [request, *({**common, "dir": fmt.S2C, **record} for record in answer)]


def _live(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    live = LiveStats()
    live.observe_all(records)
    return live.snapshot()["servers"].get(SERVER)


def _http(tmp_path: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    from analyzer.pipeline import analyze
    from analyzer.report import report_dict

    with CaptureWriter(tmp_path / "cap", transport=fmt.HTTP, server=SERVER) as w:
        for r in records:
            w.write({k: v for k, v in r.items() if k != fmt.F_SERVER})
    (server,) = report_dict(analyze([str(tmp_path)]))["servers"]
    return {"era": server["era"], "outcomes": server["probe_outcomes"]}


def _on_its_stream(*raws: str) -> list[dict[str, Any]]:
    """An HTTP probe answered by the events `raws` on its event stream, which then ends."""
    return _probe_post(
        {"type": fmt.HTTP_RESPONSE, "status": 200, "streamed": True, "ts": T0 + 0.01,
         "headers": [["content-type", "text/event-stream"]]},
        *({"type": fmt.SSE_EVENT, "index": i, "sse_event": "message", "raw": raw, "ts": T0 + 0.02 + i / 1000}
          for i, raw in enumerate(raws)),
        {"type": fmt.SSE_END, "how": "clean", "events": len(raws), "incomplete": False, "ts": T0 + 0.03},
    )  # fmt: skip


def _in_its_body(raw: str, status: int = 200) -> list[dict[str, Any]]:
    """An HTTP probe answered by the JSON body `raw`."""
    return _probe_post({"type": fmt.HTTP_RESPONSE, "status": status, "ts": T0 + 0.01, "raw": raw,
                        "headers": [["content-type", "application/json"]]})  # fmt: skip


def test_an_error_without_an_id_on_the_probes_own_stream_answers_it(tmp_path: Path) -> None:
    """A server's -32000 "Server not initialized" with `"id": null` on the probe's event stream: the
    analyzer pairs an event error without an id with its flow's request; the counters waited for the id."""
    error = '{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Server not initialized"}}'
    records = _on_its_stream(error)
    expected = {"era": "legacy", "outcomes": {"legacy-answer": 1}}
    assert _http(tmp_path, records) == expected
    assert _live(records) == expected


@pytest.mark.parametrize("code", ["-32022.0", "-3.2022e4", "-32022E0"])
def test_an_error_code_written_as_a_float_is_its_integer(tmp_path: Path, code: str) -> None:
    """JSON has one number type: `-32022.0` is -32022 to a JavaScript client (and passes the TypeScript
    SDK's integer check), so the server said "unsupported version". Both sides read it as no code (a
    legacy answer): the mission's modern error read as legacy."""
    answer = '{"jsonrpc":"2.0","id":1,"error":{"code":CODE,"message":"x","data":{"supported":["2026-07-28"]}}}'
    records = _stdio(answer.replace("CODE", code))
    # as the integer reads on each side (the counters' era gauge names the other version apart)
    assert _analyzed(tmp_path / "float", records) == {"era": "modern", "outcomes": {"unsupported-version": 1}}
    assert _analyzed(tmp_path / "int", _stdio(answer.replace("CODE", "-32022")))["era"] == "modern"
    expected = {"era": "modern-other-version", "outcomes": {"unsupported-version": 1}}
    assert feed(LiveStats(), records)["servers"].get("srv") == expected


@pytest.mark.parametrize("code", ["-32022.5", "1e400"])
def test_an_error_code_that_is_no_integer_makes_no_error(tmp_path: Path, code: str) -> None:
    """JSON-RPC wants an integer code: the SDKs refuse the line, garbage on the server's stdout (the
    counters decide garbage when the client moves on: here, when the server dies)."""
    answer = '{"jsonrpc":"2.0","id":1,"error":{"code":' + code + ',"message":"x"}}'
    records = _died(*_stdio(answer))
    assert _analyzed(tmp_path, records) == {"era": "broken", "outcomes": {"garbage": 1}}
    # the counters' era gauge names no broken server: garbage proves no era
    assert feed(LiveStats(), records)["servers"].get("srv") == {"era": "unknown", "outcomes": {"garbage": 1}}


@pytest.mark.parametrize(("status", "era"), [(500, "unknown"), (400, "legacy"), (405, "legacy")])
def test_a_plain_http_refusal_proves_the_era_by_its_status(tmp_path: Path, status: int, era: str) -> None:
    records = _probe_post(
        {"type": fmt.HTTP_RESPONSE, "status": status, "ts": T0 + 0.01, "headers": [["content-type", "text/plain"]],
         "raw": "no"},
    )  # fmt: skip
    expected = {"era": era, "outcomes": {"legacy-answer": 1}}
    assert _http(tmp_path, records) == expected
    assert _live(records) == expected


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ('"-32022"', {"era": "modern", "outcomes": {"unsupported-version": 1}}),
        ('"-32022.0"', {"era": "modern", "outcomes": {"unsupported-version": 1}}),
        ('"-32601"', {"era": "legacy", "outcomes": {"legacy-answer": 1}}),
        # no integer's JSON text: no code, so no error (the SDKs refuse all but the Python SDK's lax
        # ` -32601` and `+32601`): garbage on the server's stdout
        ('" -32601"', {"era": "broken", "outcomes": {"garbage": 1}}),
        ('"+32601"', {"era": "broken", "outcomes": {"garbage": 1}}),
        ('"-32022.5"', {"era": "broken", "outcomes": {"garbage": 1}}),
        ('"code"', {"era": "broken", "outcomes": {"garbage": 1}}),
        ('"1e400"', {"era": "broken", "outcomes": {"garbage": 1}}),
        ('"' + "9" * 5000 + '"', {"era": "broken", "outcomes": {"garbage": 1}}),
        # digits of other scripts (Arabic-Indic, fullwidth `12`): no JSON number, which the SDK refuses;
        # the counters' `\d` and `float` read them as 12
        ('"\u0661\u0662"', {"era": "broken", "outcomes": {"garbage": 1}}),
        ('"\uff11\uff12"', {"era": "broken", "outcomes": {"garbage": 1}}),
    ],
    ids=[
        "integer", "integral-fraction", "legacy-code", "space", "plus", "fraction", "word", "beyond-double", "long",
        "arabic-indic", "fullwidth",
    ],
)
def test_an_error_code_written_as_a_string_is_read_alike(tmp_path: Path, code: str, expected: dict[str, Any]) -> None:
    """JSON-RPC wants an integer code, and the TypeScript SDK's schema refuses a string; the Python SDK's
    client (`code: int`, lax) reads `"-32022"` as -32022 and acts on it as on the integer, and the server
    that wrote it refused the version in the modern era's words. The analyzer read it so, the counters
    as no code: both read a string holding an integer's JSON text as that code, any other as none."""
    answer = '{"jsonrpc":"2.0","id":1,"error":{"code":CODE,"message":"x","data":{"supported":["2026-07-28"]}}}'
    records = _stdio(answer.replace("CODE", code))
    if "garbage" in expected["outcomes"]:
        records = _died(*records)  # the counters decide garbage when the client moves on
    assert _analyzed(tmp_path, records) == expected
    # the counters' era gauge names the other version apart, and no broken server (garbage proves no era)
    live_eras = {"modern": "modern-other-version", "broken": "unknown"}
    live = {**expected, "era": live_eras.get(expected["era"], expected["era"])}
    assert feed(LiveStats(), records)["servers"].get("srv") == live


_ODD_IDS: Final = ["[1]", "{}", '{"n":1}', "true", "false", "[]"]
"""Ids JSON-RPC does not allow (a string, a number or null): a message holding one is no request and
answers nothing, to the analyzer as to the counters."""


def _died(*records: dict[str, Any]) -> list[dict[str, Any]]:
    """`records` of a stdio connection whose server then died."""
    return [*records, event("a", fmt.EV_SERVER_EOF), event("a", fmt.EV_EXIT)]


def _outcomes(tmp_path: Path, records: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, int]]:
    """The probe outcomes the analyzer and the counters read in `records`."""
    live = feed(LiveStats(), records)["servers"].get("srv", {"outcomes": {}})
    return _analyzed(tmp_path, records)["outcomes"], live["outcomes"]


@pytest.mark.parametrize("ident", _ODD_IDS)
def test_a_probe_whose_id_is_no_string_or_number_is_no_probe(tmp_path: Path, ident: str) -> None:
    """`{"id":[1],"method":"server/discover"}` is an invalid request (a server answers -32600 with a null
    id, or nothing): no probe of the server's. The analyzer read it as one and the server as broken when
    that answer came or none, and an answer with the id `"[1]"` as its answer (`[1]` was read as that string)."""
    probe = PROBE.replace('"id":1', f'"id":{ident}')
    invalid = '{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}'
    assert _outcomes(tmp_path / "a", _died(frame("a", fmt.C2S, probe))) == ({}, {})
    assert _outcomes(tmp_path / "b", _died(frame("a", fmt.C2S, probe), frame("a", fmt.S2C, invalid))) == ({}, {})
    quoted = '{"jsonrpc":"2.0","id":' + json.dumps(ident) + "," + _RESULT + "}"
    assert _outcomes(tmp_path / "c", _died(frame("a", fmt.C2S, probe), frame("a", fmt.S2C, quoted))) == ({}, {})


_RESULT: Final = '"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}'
_SERVER_MEMBERS: Final = [_RESULT, '"method":"notifications/x"', '"error":{"code":-32601,"message":"x"}']


# a null id is allowed but beside a result (a request with one is read as a notification, an error with
# one answers no id)
@pytest.mark.parametrize(("ident", "member"), [(i, m) for m in _SERVER_MEMBERS for i in _ODD_IDS] + [("null", _RESULT)])
def test_a_server_message_whose_id_is_no_string_or_number_is_garbage(tmp_path: Path, ident: str, member: str) -> None:
    """A result, error or request from the server with an id JSON-RPC does not allow is no JSON-RPC message (a
    client's parser refuses it as it refuses a banner): garbage instead of the probe's answer. A result
    with a null id was garbage to the analyzer and a message to the counters."""
    answer = f'{{"jsonrpc":"2.0","id":{ident},{member}}}'
    records = _died(frame("a", fmt.C2S, PROBE), frame("a", fmt.S2C, answer))
    assert _outcomes(tmp_path, records) == ({"garbage": 1}, {"garbage": 1})
    # the answer that comes after it still settles the probe
    later = '{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'
    records = _died(frame("a", fmt.C2S, PROBE), frame("a", fmt.S2C, answer), frame("a", fmt.S2C, later))
    assert _outcomes(tmp_path / "later", records) == ({"discover-result": 1}, {"discover-result": 1})


_HTTP_MEMBERS: Final = [
    _RESULT,
    '"error":{"code":-32000,"message":"x"}',
    '"error":{"code":-32022,"message":"x","data":{"supported":["2026-07-28"],"requested":"2099-01-01"}}',
]


# a null id beside a result alone (an error with one answers its flow's request)
@pytest.mark.parametrize(("ident", "member"), [(i, m) for m in _HTTP_MEMBERS for i in _ODD_IDS] + [("null", _RESULT)])
@pytest.mark.parametrize("streamed", [False, True], ids=["json", "event-stream"])
def test_an_http_answer_whose_id_is_no_string_or_number_is_garbage(
    tmp_path: Path, ident: str, member: str, streamed: bool
) -> None:
    """The answer in a POST's JSON body answers its request whatever its id says, as the analyzer pairs
    it, but one with an id JSON-RPC does not allow (or a result with a null id) is no JSON-RPC message
    to the analyzer: garbage. The counters read it as the DiscoverResult or error it also holds."""
    body = f'{{"jsonrpc":"2.0","id":{ident},{member}}}'
    records = _on_its_stream(body) if streamed else _in_its_body(body)
    assert _http(tmp_path, records)["outcomes"] == {"garbage": 1}
    assert (_live(records) or {"outcomes": {}})["outcomes"] == {"garbage": 1}


@pytest.mark.parametrize(
    ("probe_id", "answer_id"),
    [("1e400", "1E400"), ("10e399", "1e400"), ("1e400", "1e401"), ("-1e400", "-1.0e400"), ("1e400", "1" + "0" * 400)],
)
def test_an_id_beyond_a_double_is_one_id_however_written(tmp_path: Path, probe_id: str, answer_id: str) -> None:
    """`1E400` and `10e399` are the number `1e400`: the counters paired them, the analyzer read each as its text."""
    probe = PROBE.replace('"id":1', f'"id":{probe_id}')
    answer = f'{{"jsonrpc":"2.0","id":{answer_id},"result":{{"supportedVersions":["2026-07-28"],"capabilities":{{}}}}}}'
    analyzed, live = _outcomes(tmp_path, _died(frame("a", fmt.C2S, probe), frame("a", fmt.S2C, answer)))
    assert analyzed == live


@pytest.mark.parametrize(
    ("answer", "outcomes"),
    [
        # an error member that is null is no error: no JSON-RPC message (a client's parser refuses it)
        ('{"jsonrpc":"2.0","id":1,"error":null}', {"garbage": 1}),
        ('{"jsonrpc":"2.0","error":null,"id":2}', {"garbage": 1}),
        # a method beside a result or an error makes a request, as the SDKs read it (no answer)
        ('{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}},"method":"notifications/x"}',
         {"connection-died": 1}),
        ('{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"x","data":{"supported":["2026-07-28"]}},'
         '"method":"ping"}', {"connection-died": 1}),
        ('{"jsonrpc":"2.0","method":"ping","error":{"code":-32601,"message":"x"}}', {"connection-died": 1}),
        # guards: a null method is none, and an error beside a null result answers
        ('{"jsonrpc":"2.0","id":1,"method":null,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}',
         {"discover-result": 1}),
        ('{"jsonrpc":"2.0","id":1,"result":null,"error":{"code":-32601,"message":"x"}}', {"legacy-answer": 1}),
    ],
)  # fmt: skip
def test_a_server_line_is_the_kind_of_message_the_analyzer_reads(
    tmp_path: Path, answer: str, outcomes: dict[str, int]
) -> None:
    """The counters took any line with an `error` member for an error and any with a result or an error
    for an answer; the analyzer reads a null error as none, and a line with a method as a request."""
    records = _died(frame("a", fmt.C2S, PROBE), frame("a", fmt.S2C, answer))
    assert _outcomes(tmp_path, records) == (outcomes, outcomes)


@pytest.mark.parametrize(
    ("status", "body", "outcomes"),
    [
        # a request or notification in the body answers nothing (the counters took it for the answer)
        (200, '{"jsonrpc":"2.0","id":1,"method":"ping","result":{"supportedVersions":["2026-07-28"]}}', {}),
        (200, '{"jsonrpc":"2.0","method":"notifications/x","error":{"code":-32022,"message":"x"}}', {}),
        (500, '{"jsonrpc":"2.0","method":"ping","params":{}}', {}),
        # a refusal's JSON that is no message is an HTTP error (its result no DiscoverResult)
        (400, '{"jsonrpc":"2.0","id":{},"result":{"supportedVersions":["2025-11-25"]}}', {"legacy-answer": 1}),
        (500, '{"jsonrpc":"2.0","id":[],"result":{"supportedVersions":["2026-07-28"]}}', {"legacy-answer": 1}),
        (400, '{"jsonrpc":"2.0","id":[],"error":{"code":-32022,"message":"x"}}', {"unsupported-version": 1}),
        (400, '{"jsonrpc":"2.0","id":[],"method":"x","error":{"code":-32022,"message":"x"}}', {"legacy-answer": 1}),
    ],
)
def test_a_json_body_is_the_kind_of_message_the_analyzer_reads(
    tmp_path: Path, status: int, body: str, outcomes: dict[str, int]
) -> None:
    records = _in_its_body(body, status)
    assert {k: v for k, v in _http(tmp_path, records)["outcomes"].items() if k != "no-answer"} == outcomes
    assert (_live(records) or {"outcomes": {}})["outcomes"] == outcomes


@pytest.mark.parametrize(
    "body",
    [
        '{"jsonrpc":"2.0","result":{"protocolVersion":"2025-11-25"}}',
        '{"jsonrpc":"2.0","id":[2],"result":{"protocolVersion":"2025-11-25"}}',
        '{"jsonrpc":"2.0","id":2,"method":"x","result":{"protocolVersion":"2025-11-25"}}',
    ],
)
def test_an_initialize_answered_by_no_json_rpc_answer_is_no_probe_outcome(tmp_path: Path, body: str) -> None:
    """The counters counted a probe outcome, `garbage`, for an `initialize` answered by JSON that is no
    answer; the analyzer counts probes' outcomes alone (and, like the counters, no legacy era from it)."""
    init = '{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}'
    records = _in_its_body(body)
    records[0] = {**records[0], "raw": init, "headers": [["content-type", "application/json"]]}
    analyzed, live = _http(tmp_path, records), _live(records) or {"era": "unknown", "outcomes": {}}
    assert analyzed["outcomes"] == live["outcomes"] == {}
    assert analyzed["era"] != "legacy" and live["era"] != "legacy"


_NO_ANSWER_WITH_ITS_ID: Final = ['{"jsonrpc":"2.0","id":1}', '{"jsonrpc":"2.0","id":1,"error":null}', '{"id":1,"x":2}']
"""Server JSON holding the probe's id but no JSON-RPC message: the SDKs refuse it and go on waiting for
the answer, as they wait past a banner line."""
_LATER: Final = '{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'


@pytest.mark.parametrize("line", [*_NO_ANSWER_WITH_ITS_ID, f"[{_NO_ANSWER_WITH_ITS_ID[0]}]"])
def test_a_server_line_holding_the_probes_id_but_no_answer_is_garbage_an_answer_replaces(
    tmp_path: Path, line: str
) -> None:
    """`analyze` paired such a line with the probe by its id, as its answer: `garbage`, and the answer after
    it none. The counters read it as garbage a later answer replaces, as the SDKs read it."""
    records = _died(frame("a", fmt.C2S, PROBE), frame("a", fmt.S2C, line), frame("a", fmt.S2C, _LATER))
    assert _outcomes(tmp_path, records) == ({"discover-result": 1}, {"discover-result": 1})
    alone = _died(frame("a", fmt.C2S, PROBE), frame("a", fmt.S2C, line))
    assert _outcomes(tmp_path / "alone", alone) == ({"garbage": 1}, {"garbage": 1})


@pytest.mark.parametrize("raw", _NO_ANSWER_WITH_ITS_ID)
def test_an_event_holding_the_probes_id_but_no_answer_is_garbage_an_answer_replaces(tmp_path: Path, raw: str) -> None:
    """The same on the probe's event stream."""
    records = _on_its_stream(raw, _LATER)
    assert _http(tmp_path, records)["outcomes"] == {"discover-result": 1}
    assert (_live(records) or {"outcomes": {}})["outcomes"] == {"discover-result": 1}
    alone = _on_its_stream(raw)
    assert _http(tmp_path / "alone", alone)["outcomes"] == {"garbage": 1}
    assert (_live(alone) or {"outcomes": {}})["outcomes"] == {"garbage": 1}


def test_json_holding_the_id_of_a_servers_own_request_is_no_answer_to_it(tmp_path: Path) -> None:
    """A server's request on the probe's event stream (a `ping`, a sampling request) is answered by the
    client in a POST, never on the stream: JSON there holding its id answers none of the client's
    requests. The analyzer paired `{"id":2}` with the server's request 2 (garbage that then was none)."""
    ping = '{"jsonrpc":"2.0","id":2,"method":"ping"}'
    records = _on_its_stream(ping, '{"jsonrpc":"2.0","id":2}')
    assert _http(tmp_path, records)["outcomes"] == {"garbage": 1}
    assert (_live(records) or {"outcomes": {}})["outcomes"] == {"garbage": 1}
