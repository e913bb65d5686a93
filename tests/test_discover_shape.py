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

from pathlib import Path
from typing import Any, Final

import orjson
import pytest
from mcp.types import DiscoverResult
from pydantic import ValidationError

from analyzer.pipeline import analyze
from analyzer.report import report_dict
from tests.test_error_type import every_reading
from tests.test_messages import Cap, init, init_result, probe
from tests.test_method_type import outcomes_after, read_rows

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
