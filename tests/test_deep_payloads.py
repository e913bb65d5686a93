"""Payloads nested deeply: JSON is JSON however deep its values nest, and the MCP SDKs' clients read a
DiscoverResult whose capabilities nest 150 levels (`mcp` 2.3.0's pydantic reads 200, orjson 1,024).
polars' `json_path_match` (serde_json) reads nothing of a payload nested past 128 levels: a
DiscoverResult read so gave no versions (`unknown`), an error no code, an `initialize` no version.

Each case takes real SDK traffic from the corpus, nests a member 150 (and 600) levels deep in every
payload's result, error data or params, and analyzes both: the verdicts and findings must be the same,
as JSONL and as an archive.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from analyzer.compact import compact
from analyzer.messages import messages_from_records, shallow_payload
from analyzer.schema import RECORD_SCHEMA
from tests.test_escaped_names import CORPUS, _read, _report, edited_copy, watched

_PLACE = "<nested here>"
SCENARIOS = ["auto-modern-stdio", "auto-legacy-stdio", "auto-modern-http", "legacy-sse-http", "unsupported-retry-http",
             "unsupported-retry-stdio", "upgrade-stdio", "legacy-mode-dual-stdio"]  # fmt: skip


def nest(depth: int) -> str:
    """A value nested `depth` levels (objects, every third an array), as JSON text (orjson writes 255
    levels at most)."""
    text = "{}"
    for level in range(depth):
        text = f"[{text}]" if level % 3 == 1 else f'{{"x":{text}}}'
    return text


def deepened(payload: str, depth: int) -> str:
    """`payload` with a member `depth` levels deep in its result, its error's data (or error) or its
    params, where that is an object; else as it was."""
    message = orjson.loads(payload)
    if not isinstance(message, dict):
        return payload
    error = message.get("error")
    target = next(
        (t for t in (message.get("result"), (error or {}).get("data") if isinstance(error, dict) else None, error,
                     message.get("params")) if isinstance(t, dict)),
        None,
    )  # fmt: skip
    if target is None:
        return payload
    target["deep"] = _PLACE
    return orjson.dumps(message).decode().replace(f'"{_PLACE}"', nest(depth))


def _deep_copy(scenario: str, out: Path, depth: int) -> int:
    """The scenario's captures under `out`, every payload deepened (`edited_copy`)."""
    return edited_copy(scenario, out, lambda raw: deepened(raw, depth))


@pytest.mark.parametrize("depth", [150, 600])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_payloads_nested_deeply_read_as_the_same_messages(scenario: str, depth: int, tmp_path: Path) -> None:
    # Read before as a DiscoverResult without versions (`unknown`), an error without a code, an
    # initialize without a version: every path read of a payload past 128 levels gave nothing.
    assert _deep_copy(scenario, tmp_path / "deep", depth) > 0
    plain = _read(_report([str(CORPUS / scenario)]))
    assert _read(_report([str(tmp_path / "deep")])) == plain


def test_payloads_nested_deeply_read_as_the_same_messages_in_an_archive(tmp_path: Path) -> None:
    for scenario in ("auto-modern-stdio", "unsupported-retry-http"):
        _deep_copy(scenario, tmp_path / "deep" / scenario, 300)
    compact([str(tmp_path / "deep")], tmp_path / "archive")
    plain = _read(_report([str(CORPUS / "auto-modern-stdio"), str(CORPUS / "unsupported-retry-http")]))
    assert _read(_report([str(tmp_path / "archive")])) == plain


def _rows(payloads: list[str], **kw: Any) -> list[dict[str, Any]]:
    records = pl.LazyFrame(
        {"line": list(range(1, len(payloads) + 1)), "type": ["frame"] * len(payloads), "raw": payloads,
         "dir": ["s2c"] * len(payloads), "seq": list(range(len(payloads)))},
    ).with_columns(*(pl.lit(None, dtype).alias(name) for name, dtype in RECORD_SCHEMA.items()
                     if name not in ("type", "raw", "dir", "seq")))  # fmt: skip
    rows = messages_from_records(records, file="f", capture="c", transport="stdio", **kw).collect()
    return rows.select("kind", "id", "method", "supported_versions", "error_code").to_dicts()


@pytest.mark.parametrize("robust", [False, True])
def test_a_deep_request_and_answer_read_as_shallow_ones_in_either_reading(robust: bool) -> None:
    shallow = ['{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"a":1}}}',
               '{"jsonrpc":"2.0","id":7,"result":{"supportedVersions":["2026-07-28"],"content":[]}}',
               '{"jsonrpc":"2.0","id":8,"error":{"code":-32022,"message":"m","data":{"supported":["x"]}}}']  # fmt: skip
    deep = [deepened(p, 400) for p in shallow]
    assert _rows(deep, robust=robust, deep=True) == _rows(shallow, robust=robust)


def test_the_shallow_payload_keeps_what_is_read_and_refuses_what_is_no_json() -> None:
    payload = '{"id":1.0,"result":{"a":' + '{"x":' * 200 + "{}" + "}" * 200 + ',"b":"\\u00e9"}}'
    cut = shallow_payload(payload)
    assert cut is not None and cut.startswith('{"id":1.0,"result":{"a":{"x":') and cut.endswith(',"b":"\\u00e9"}}')
    assert orjson.loads(cut)["result"]["b"] == "é"
    assert shallow_payload('{"id":1,"result":{"a":[1,2]}}') is None  # nothing to cut
    too_deep = '{"a":' * 1100 + "1" + "}" * 1100  # past every fast parser's limit: no payload it reads
    assert shallow_payload(too_deep) is None
    unbalanced = '{"a":' * 200 + "1" + "}" * 199  # no JSON: never made into some
    assert shallow_payload(unbalanced) is None


def test_a_deep_answer_in_a_piece_read_robustly_reads_as_a_shallow_one(tmp_path: Path) -> None:
    """A request whose id is an object makes its piece be read robustly, where the id and method of a
    payload nested past 128 levels read as nothing too."""
    object_id = orjson.dumps({"type": "frame", "conn": "c9", "raw": '{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
                              "len": 46, "nl": True, "dir": "c2s", "ts": 1796002156.0, "mono": 1001.0,
                              "server": "auto-modern-stdio-server", "seq": 99})  # fmt: skip
    reports = []
    for depth in (None, 300):
        out = tmp_path / f"d{depth}"
        if depth is None:
            out.mkdir()
            (capture,) = sorted((CORPUS / "auto-modern-stdio").glob("*.jsonl"))
            (out / capture.name).write_bytes(capture.read_bytes())
        else:
            _deep_copy("auto-modern-stdio", out, depth)
        (path,) = out.iterdir()
        path.write_bytes(path.read_bytes() + object_id + b"\n")
        reports.append(_read(_report([str(out)])))
    assert reports[0]["servers"][0][1] == "modern"
    assert reports[1] == reports[0]


def test_watch_reads_deep_payloads_as_analyze_does(tmp_path: Path) -> None:
    from tests.test_watch import expected, reported

    live = tmp_path / "live"
    _deep_copy("unsupported-retry-stdio", live, 300)
    events = watched(live)
    report = _report([str(live)])
    assert _read(report) == _read(_report([str(CORPUS / "unsupported-retry-stdio")]))
    assert reported(events) == expected(report)
