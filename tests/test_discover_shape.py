"""A result that is no DiscoverResult: MCP's DiscoverResult has an array `supportedVersions` and an object
`capabilities`. The `mcp` 2.3.0 client in auto mode validates the result of its probe against that model
and, where it fails, falls back to `initialize` ("unparseable result → not modern evidence"), as it does
after any answer other than a DiscoverResult or a -32022. Such an answer is a `legacy-answer` that
proves no era, and its versions are none the client read: a client falling back after it acted as the
SDK does, not as one misreading a modern answer.

`json_path_match` writes a string's content, so a string holding an array's or an object's text
(`"capabilities":"{}"`) is told from the array or object by how the result writes its own member.

These tests hold the versions the analyzer reads, on pieces read every way the loader reads them, to
the SDK's own validation of each result, and the counters to the analyzer."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

import anyio
import orjson
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import DiscoverResult
from pydantic import ValidationError

from analyzer.pipeline import analyze
from analyzer.report import report_dict
from tests.peers.capture_tools import jsonrpc, only_capture
from tests.test_error_type import every_reading
from tests.test_messages import Cap, init, init_result, modern_headers, probe
from tests.test_method_type import outcomes_after, read_rows
from tests.test_stdio_e2e import PEERS, call_add, through_tee

_V: Final = '"supportedVersions":["2026-07-28"]'
NOT_DISCOVER: Final = [
    "{}",
    "{" + _V + "}",
    '{"capabilities":{}}',
    '{"supportedVersions":"2026-07-28","capabilities":{}}',
    '{"supportedVersions":"[\\"2026-07-28\\"]","capabilities":{}}',
    "{" + _V + ',"capabilities":"{}"}',
    "{" + _V + ',"capabilities":null}',
    "{" + _V + ',"capabilities":[]}',
    "{" + _V + ',"_meta":{"capabilities":{}}}',
    '{"capabilities":"{}",' + _V + ',"_meta":{"x":{"capabilities":{}}}}',
    '{"supportedVersions":"[]","capabilities":{},"_meta":{"supportedVersions":["2026-07-28"]}}',
]
"""Results the SDK refuses as a DiscoverResult."""
NOT_STRINGS: Final = [
    '{"supportedVersions":[1],"capabilities":{}}',
    '{"supportedVersions":["2026-07-28",5],"capabilities":{}}',
    '{"supportedVersions":["2026-07-28",null],"capabilities":{}}',
    '{"supportedVersions":[true,"2026-07-28"],"capabilities":{}}',
    '{"supportedVersions":["2026-07-28",["2025-11-25"]],"capabilities":{}}',
    '{"supportedVersions":[{"version":"2026-07-28"}],"capabilities":{}}',
    '{"supportedVersions":["2026-07-2\\u0038",1.5],"capabilities":{}}',
]
"""Results whose versions are an array but not of strings alone: the SDK refuses them too (its
`supportedVersions` is a list of strings), and MCP's schema lists strings."""
DISCOVER: Final = [
    "{" + _V + ',"capabilities":{}}',
    '{"capabilities":{"tools":{"listChanged":true}},' + _V + "}",
    '{"supportedVersions":[],"capabilities":{}}',
    "{" + _V + ',"capabilities" : {},"resultType":"complete","ttlMs":0}',
    "{" + _V + ',"capabilities":{},"_meta":{"x":{"capabilities":5,"supportedVersions":"x"}}}',
    '{"supportedVersions":["2026-07-2\\u0038","a\\"b","[1]"],"capabilities":{}}',
]
"""Results the SDK reads as a DiscoverResult."""


def _sdk(result: str) -> list[str] | None:
    """The versions of the result as the SDK's client reads them, None where it is no DiscoverResult."""
    try:
        return DiscoverResult.model_validate(orjson.loads(result)).supported_versions
    except ValidationError:
        return None


def _answers(results: list[str]) -> list[str]:
    return ['{"jsonrpc":"2.0","id":' + str(n) + ',"result":' + r + "}" for n, r in enumerate(results, 1)]


@every_reading
def test_a_result_that_is_no_discover_result_names_no_versions(tmp_path: Path, beside: str | None) -> None:
    """The analyzer read the versions of any result that listed some, with or without `capabilities`,
    and of a string holding an array's text."""
    results = NOT_DISCOVER + NOT_STRINGS + DISCOVER
    rows = read_rows(tmp_path, _answers(results) + ([beside] if beside else []), "kind", "supported_versions")
    assert rows[: len(results)] == [("response", _sdk(r)) for r in results]
    assert {str(_sdk(r)) for r in NOT_DISCOVER + NOT_STRINGS} == {"None"}
    assert None not in [_sdk(r) for r in DISCOVER]


@pytest.mark.parametrize("result", [NOT_DISCOVER[0], NOT_DISCOVER[1], NOT_DISCOVER[5]])
def test_a_probe_answered_with_no_discover_result_is_a_legacy_answer(tmp_path: Path, result: str) -> None:
    """It was the probe's `discover-result` to the analyzer and the counters."""
    answer = '{"jsonrpc":"2.0","id":1,"result":' + result + "}"
    assert outcomes_after(tmp_path, answer) == ({"legacy-answer": 1}, {"legacy-answer": 1})


@pytest.mark.parametrize("result", NOT_STRINGS)
def test_versions_not_all_strings_are_a_legacy_answer(tmp_path: Path, result: str) -> None:
    """An array of versions that holds a number, a boolean, null, an array or an object made the
    result a DiscoverResult to the analyzer (of the strings it listed, or none) and to the counters (of
    the era those strings advertised): the SDK's client refuses it and falls back to `initialize`."""
    answer = '{"jsonrpc":"2.0","id":1,"result":' + result + "}"
    assert outcomes_after(tmp_path, answer) == ({"legacy-answer": 1}, {"legacy-answer": 1})


def _findings(tmp_path: Path, result: str) -> tuple[dict[str, Any], list[str]]:
    """The server's report and the rules found when a client probes, gets `result`, and falls back to a
    served `initialize`, as the SDK's client does after a result it cannot read."""
    cap = Cap(tmp_path / "cap")
    cap.c2s(probe(1))
    cap.s2c('{"jsonrpc":"2.0","id":1,"result":' + result + "}")
    cap.c2s(init(2))
    cap.s2c(init_result(2))
    cap.writer.close()
    report = report_dict(analyze([str(tmp_path / "cap")]))
    (server,) = report["servers"]
    return server, [f["rule"] for f in report["findings"]]


def test_falling_back_after_no_discover_result_is_no_misread(tmp_path: Path) -> None:
    """The real client, answered `{"supportedVersions":["2026-07-28"]}` without `capabilities`, logs the
    validation error and sends `initialize`: the analyzer called that `misread-modern` (an error)."""
    server, rules = _findings(tmp_path / "odd", NOT_DISCOVER[1])
    assert server["probe_outcomes"] == {"legacy-answer": 1}
    assert "misread-modern" not in rules
    # the same fallback after a DiscoverResult is the misreading
    server, rules = _findings(tmp_path / "sound", DISCOVER[0])
    assert server["probe_outcomes"] == {"discover-result": 1}
    assert "misread-modern" in rules


def test_a_result_that_is_no_discover_result_is_the_servers_finding(tmp_path: Path) -> None:
    """Only the probe's `legacy-answer` showed a server answering the probe with a result clients cannot
    read; no finding named it. Each such answer is evidence now; a DiscoverResult and a legacy error
    are none."""
    cap = Cap(tmp_path / "cap")
    for n, result in enumerate([NOT_DISCOVER[1], NOT_STRINGS[1], DISCOVER[0]], 1):
        cap.c2s(probe(n))
        cap.s2c('{"jsonrpc":"2.0","id":' + str(n) + ',"result":' + result + "}")
    cap.c2s(probe(4))
    cap.s2c('{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"Method not found"}}')
    path = cap.close()
    report = report_dict(analyze([str(tmp_path / "cap")]))
    [finding] = [f for f in report["findings"] if f["rule"] == "invalid-discover-result"]
    assert (finding["severity"], finding["server"], finding["details"]["count"]) == ("warning", "srv", 2)
    assert [(e["file"], e["line"]) for e in finding["evidence"]] == [(str(path), 3), (str(path), 5)]


def test_a_result_that_is_no_discover_result_over_http_is_the_servers_finding(tmp_path: Path) -> None:
    """The same over Streamable HTTP: a JSON body and an event on the POST's stream."""
    cap = Cap(tmp_path / "cap", transport="http", server="http://127.0.0.1/mcp")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, '{"jsonrpc":"2.0","id":1,"result":' + NOT_DISCOVER[1] + "}")
    cap.http_request("f2", probe(2), headers=modern_headers())
    cap.http_response("f2", 200, streamed=True, headers=[["content-type", "text/event-stream"]])
    cap.sse("f2", 0, '{"jsonrpc":"2.0","id":2,"result":' + NOT_STRINGS[0] + "}")
    path = cap.close()
    report = report_dict(analyze([str(tmp_path / "cap")]))
    assert report["servers"][0]["probe_outcomes"] == {"legacy-answer": 2}
    [finding] = [f for f in report["findings"] if f["rule"] == "invalid-discover-result"]
    assert [(e["file"], e["line"]) for e in finding["evidence"]] == [(str(path), 3), (str(path), 6)]


@pytest.mark.e2e
def test_the_sdk_client_after_a_broken_discover_result(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """The real `mcp` 2.3.0 client probes a real dual-era server whose DiscoverResult lacks
    `capabilities` (`tests/peers/broken_discover.py`): it cannot read it and falls back to
    `initialize`, which the server, serving the connection in the modern era already, refuses. The
    client fails; `analyze` reads a legacy answer, no `misread-modern`, and names the server's
    broken answer."""
    server = [sys.executable, str(PEERS / "broken_discover.py"), NOT_DISCOVER[1], sys.executable,
              str(PEERS / "mcp_stdio_server.py")]  # fmt: skip
    out = tmp_path / "captures"
    refused = pytest.RaisesExc(MCPError, match="the initialize handshake is not accepted")
    with pytest.RaisesGroup(refused, flatten_subgroups=True):
        anyio.run(call_add, through_tee(server, out, clean_env))
    records = only_capture(out)
    sent = [m.get("method") for m in jsonrpc(records, "c2s")]
    assert sent[:2] == ["server/discover", "initialize"]
    report = report_dict(analyze([str(out)]))
    (verdict,) = report["servers"]
    assert verdict["probe_outcomes"] == {"legacy-answer": 1}
    rules = {f["rule"]: f for f in report["findings"]}
    assert "misread-modern" not in rules
    assert rules["invalid-discover-result"]["server"] == verdict["server"]
