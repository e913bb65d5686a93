"""The fast readings of the loader give what the exact ones give.

Two shortcuts of `analyzer.load` and `analyzer.messages` must never change a value:

- HTTP `headers` read as text instead of lists (`HEADERS_AS_TEXT`): only pieces whose headers have
  the shape text carries exactly take it; any other piece is read with lists.
- id, method and the `_meta` envelope read with one `json_decode` (the fast id reading) instead of
  a `json_path_match` each (the robust reading a file falls back to).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer import load
from analyzer.load import FileFacts, LoadOptions, extract_file
from analyzer.schema import RECORD_SCHEMA
from tests.test_load import HEADER, frame, write_lines
from tests.test_messages import ENVELOPE, Cap, probe

PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
INFO = "io.modelcontextprotocol/clientInfo"
_ENVELOPE_FIELDS = ["meta_version", "has_envelope", "client_name", "client_version", "id", "method", "kind"]


def read(path: Path) -> FileFacts:
    # every message row: these tests compare reading, not condensing
    return extract_file(str(path), LoadOptions(condense=False))


def read_with_header_lists(path: Path) -> FileFacts:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(load, "_TEXT_HEADERS_SCHEMA", RECORD_SCHEMA)
        return read(path)


def http_capture(directory: Path, headers: list[list[str]]) -> Path:
    cap = Cap(directory, transport="http")
    cap.http_request("f1", probe(1), headers=headers)
    cap.http_response("f1", 200, {"jsonrpc": "2.0", "id": 1, "result": {}}, headers=headers)
    return cap.close()


def text_reading_of(path: Path) -> pl.DataFrame | None:
    """The piece read with `headers` as text: None when the loader must read them as lists."""
    facts = FileFacts(file=str(path), capture="c", transport="http")
    piece = path.read_bytes()
    read = load._read(facts, load._fast_scan(piece, 1, headers_as_text=True), None, robust=False)
    return None if read is None else read[1]


def test_plain_headers_are_read_from_text(tmp_path: Path) -> None:
    headers = [
        ["X-User-Agent", "decoy/0"],
        ["USER-AGENT", "ua-client/2 (linux; x86_64)"],
        ["user-agent", "second/9"],
        ["Mcp-Session-Id", "sha256:abc"],
        ["MCP-Protocol-Version", "2026-07-28"],
        ["mcp-method", "server/discover"],
        ["Via", "1.1 edge-7"],
    ]
    path = http_capture(tmp_path, headers)
    rows = text_reading_of(path)
    assert rows is not None  # the shortcut is taken for ordinary headers
    request = read(path).messages.row(0, named=True)
    # the first header of a name, in any case, and never one whose name merely ends like it
    assert request["user_agent"] == "ua-client/2 (linux; x86_64)"
    assert request["session_id"] == "sha256:abc"
    assert (request["header_version"], request["header_method"]) == ("2026-07-28", "server/discover")
    response = read(path).messages.row(1, named=True)
    assert response["node_hint"] == "1.1 edge-7"
    assert read(path).messages.equals(read_with_header_lists(path).messages, null_equal=True)


def test_headers_with_other_than_ascii_read_alike(tmp_path: Path) -> None:
    headers = [["X-Note", "İstanbul ſ"], ["USER-AGENT", "ua/1 ü"], ["Mcp-Method", "tools/call"]]
    path = http_capture(tmp_path, headers)
    assert text_reading_of(path) is not None
    request = read(path).messages.row(0, named=True)
    assert (request["user_agent"], request["header_method"]) == ("ua/1 ü", "tools/call")
    assert read(path).messages.equals(read_with_header_lists(path).messages, null_equal=True)


@pytest.mark.parametrize(
    "value",
    # (HTTP field values cannot hold a line break: RFC 9110 5.5)
    ['ua "quoted"/1', "back\\slash/1", "tab\there", 'both \\" mixed'],
)
def test_headers_text_cannot_carry_are_read_as_lists(tmp_path: Path, value: str) -> None:
    path = http_capture(tmp_path, [["User-Agent", value], ["Mcp-Method", "server/discover"]])
    if "\\" in value or '"' in value:
        assert text_reading_of(path) is None  # polars' text of these values is not exact
    request = read(path).messages.row(0, named=True)
    assert request["user_agent"] == value
    assert request["header_method"] == "server/discover"


def test_headers_of_another_shape_are_read_as_lists(tmp_path: Path) -> None:
    triple = [["User-Agent", "ua/1", "extra"]]
    path = http_capture(tmp_path, triple)
    assert text_reading_of(path) is None
    assert read(path).messages.equals(read_with_header_lists(path).messages, null_equal=True)


_header_name = st.sampled_from(
    ["User-Agent", "user-agent", "Mcp-Session-Id", "MCP-Protocol-Version", "Mcp-Method", "Server", "Via",
     "X-Served-By", "x-user-agent", "Content-Type"]
)
_header_value = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(headers=st.lists(st.tuples(_header_name, _header_value).map(list), max_size=6))
def test_any_headers_read_like_lists(tmp_path_factory: pytest.TempPathFactory, headers: list[list[str]]) -> None:
    path = http_capture(tmp_path_factory.mktemp("headers"), headers)
    assert read(path).messages.equals(read_with_header_lists(path).messages, null_equal=True)


_ENVELOPES: list[Any] = [
    dict(ENVELOPE),
    {PV: "2026-07-28", CAPS: {"sampling": {}}},
    {PV: "2026-07-28"},
    {PV: "2026-07-28", CAPS: None},
    {CAPS: {}},
    {PV: "2026-07-28", CAPS: {}, INFO: {"name": "only-name"}},
    {PV: "2026-07-28", CAPS: {}, INFO: {"version": "9"}},
    {PV: "2026-07-28", CAPS: {}, INFO: None},
    {},
    None,
]


def _requests(envelopes: list[Any]) -> list[str]:
    lines = []
    for n, meta in enumerate(envelopes, 1):
        params: dict[str, Any] = {"name": "x", "arguments": {"q": n}}
        if meta is not None:
            params["_meta"] = meta
        body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
        lines.append(frame(n, orjson.dumps(body).decode()))
    # a result and a notification: their envelope columns are null in both readings
    lines.append(frame(90, '{"jsonrpc":"2.0","id":1,"result":{"_meta":{"x":1}}}', "s2c"))
    lines.append(frame(91, orjson.dumps({"jsonrpc": "2.0", "method": "n", "params": {"_meta": ENVELOPE}}).decode()))
    return lines


def test_envelope_reads_the_same_in_both_id_readings(tmp_path: Path) -> None:
    header = orjson.dumps(HEADER).decode()
    lines = _requests(_ENVELOPES)
    fast = read(write_lines(tmp_path / "fast.jsonl", [header, *lines]))
    # an object id anywhere in the file sends the whole file to the robust reading
    object_id = frame(99, '{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}')
    robust = read(write_lines(tmp_path / "robust.jsonl", [header, *lines, object_id]))
    n = len(lines)
    # an object is no id (JSON-RPC allows a string, a number or null): the request is invalid
    assert robust.messages.select("id", "kind").row(-1) == (None, "invalid")
    assert fast.messages.select(_ENVELOPE_FIELDS).equals(
        robust.messages.head(n).select(_ENVELOPE_FIELDS), null_equal=True
    )
    got = fast.messages.select("has_envelope", "meta_version", "client_name", "client_version").rows()
    assert got[:4] == [
        (True, "2026-07-28", "test-client", "1.0"),
        (True, "2026-07-28", None, None),
        (False, "2026-07-28", None, None),
        (False, "2026-07-28", None, None),
    ]
    assert got[5][2:] == ("only-name", None) and got[6][2:] == (None, "9")
    assert got[-2] == (None, None, None, None)  # a result carries no request envelope
    assert got[-1][0] is True  # a notification's envelope is read like a request's


@pytest.mark.parametrize(
    "odd",
    [
        {"params": [1, 2]},
        {"params": {"_meta": "text"}},
        {"params": {"_meta": {CAPS: "text", PV: "2026-07-28"}}},
        {"params": {"_meta": {INFO: "text", PV: "2026-07-28", CAPS: {}}}},
        {"params": {"_meta": {PV: {"v": 1}, CAPS: {}}}},
    ],
)
def test_envelope_of_an_odd_shape_is_read_robustly(tmp_path: Path, odd: dict[str, Any]) -> None:
    # the one-decode reading raises on these shapes; the file is read with the path reading instead
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", **odd}
    header = orjson.dumps(HEADER).decode()
    lines = [header, *_requests([ENVELOPE]), frame(50, orjson.dumps(body).decode())]
    facts = read(write_lines(tmp_path / "odd.jsonl", lines))
    row = facts.messages.filter(pl.col("line") == 5).row(0, named=True)
    assert (row["kind"], row["id"], row["method"]) == ("request", "7", "tools/call")
    meta = odd["params"].get("_meta") if isinstance(odd["params"], dict) else None
    if isinstance(meta, dict) and meta.get(CAPS) == "text":
        assert row["has_envelope"] is True  # present, whatever its shape
    if isinstance(meta, dict) and isinstance(meta.get(PV), dict):
        assert row["meta_version"] == '{"v":1}'
    assert facts.messages.row(0, named=True)["client_name"] == "test-client"
