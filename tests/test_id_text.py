"""The id text of a payload, on adversarial payloads: both JSON forms of one value, ids nested in
params or results, spacing around the colon, escapes, floats and integers beyond 64 bits.

`messages_from_records` reads ids without parsing most payloads (see its module docstring); these
tests hold its result, row by row, to a plain model of that rule (`_model`), on the fast and the
robust reading, so that no cheaper way of computing it may change an id.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addon import format as fmt
from analyzer.messages import messages_from_records, own_member_is
from analyzer.schema import RECORD_SCHEMA

_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _own_id(raw: str) -> object:
    """The payload's own top-level id (its first, when written twice), as a parser reads it."""
    try:
        obj = json.loads(raw, object_pairs_hook=lambda pairs: dict(reversed(pairs)))
    except ValueError:
        return None
    return obj.get("id") if isinstance(obj, dict) else None


def _model(raw: str, decoded: str | None) -> str | None:
    """The id text from the id as the reading decoded it (`decoded`) and the JSON type of the payload's
    own top-level id (its first, when written twice, as the fast reading reads it): a number-looking id
    is a string when that id is one, however spaced or escaped (`"id" : "1"`, `"id":"\\u0031"`); an
    array, an object or a boolean is no id (JSON-RPC allows a string, a number or null)."""
    if decoded is None or isinstance(_own_id(raw), bool | list | dict):
        return None
    if _NUMBER.fullmatch(decoded) is None or own_member_is(raw, "id", str):
        return _quote(decoded)
    return decoded


def _frames(payloads: list[str]) -> pl.LazyFrame:
    rows = [
        {"type": fmt.FRAME, "seq": n, "ts": 1.0, "conn": "c1", "dir": fmt.C2S if n % 2 else fmt.S2C, "raw": raw}
        for n, raw in enumerate(payloads)
    ]
    records = pl.DataFrame(rows, schema={name: RECORD_SCHEMA[name] for name in rows[0]})
    missing = {name: pl.lit(None, dtype) for name, dtype in RECORD_SCHEMA.items() if name not in records.columns}
    return records.lazy().with_columns(**missing).with_row_index("line", offset=1).select("line", *RECORD_SCHEMA)


def _ids(payloads: list[str], *, robust: bool) -> tuple[list[str | None], list[str | None]]:
    """The `id` column of the payloads' rows, and the ids the fast reading decodes before typing them."""
    records = _frames(payloads)
    try:
        rows = messages_from_records(records, file="f", capture="c", transport="stdio", robust=robust).collect()
    except pl.exceptions.ComputeError:
        if robust:
            raise
        # the fast reading refuses an array or object id: the loader then reads the piece the robust way
        rows = messages_from_records(records, file="f", capture="c", transport="stdio", robust=True).collect()
    # both readings decode an id as the fast one does (a number `1.0` as `1`, every digit of an integer);
    # it refuses an array or object id, which `json_path_match` writes as its text (the rule reads none)
    texts = [_decoded(raw) if raw.lstrip().startswith("{") else None for raw in payloads]
    return rows.get_column("id").to_list(), texts


def _decoded(raw: str) -> str | None:
    payload = pl.Series([raw])
    try:
        return payload.str.json_decode(pl.Struct({"id": pl.String()})).struct.field("id").item()
    except pl.exceptions.ComputeError:
        return payload.str.json_path_match("$.id").item()


ADVERSARIAL = [
    '{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
    '{"jsonrpc":"2.0","id":"1","method":"tools/list"}',
    '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}',
    '{"jsonrpc": "2.0", "id": "1", "method": "tools/list"}',
    '{"id" : "1", "method": "a"}',
    '{"id":"\\u0031","method":"a"}',
    '{"id":1,"method":"a","params":{"ref":{"id":"1"}}}',
    '{"id":"1","method":"a","params":{"ref":{"id":1}}}',
    '{"method":"a","params":{"ref":{"id":"7"}},"id":7}',
    '{"method":"a","params":{"ref":{"id":7}},"id":"7"}',
    '{"id":"7","result":{"items":[{"id":"7"},{"id":7}]}}',
    '{"id":7,"result":{"items":[{"id":"7"},{"id":7}]}}',
    '{"id":1.0,"result":{}}',
    '{"id":"1.0","result":{}}',
    '{"id":1e3,"result":{}}',
    '{"id":"1e3","result":{}}',
    '{"id":-12,"result":{}}',
    '{"id":"-12","result":{"id":-12}}',
    '{"id":123456789012345678901234567890,"result":{}}',
    '{"id":"123456789012345678901234567890","result":{"id":123456789012345678901234567890}}',
    '{"id":"a\\"b","method":"x"}',
    '{"id":"a\\\\b","method":"x"}',
    '{"id":"","method":"x"}',
    '{"id":" 1","method":"x"}',
    '{"id":null,"method":"notifications/x"}',
    '{"id":true,"result":{}}',
    '{"id":"true","result":{}}',
    '{"id":false,"error":{"code":1,"message":"m"}}',
    '{"id":"[1]","method":"x"}',
    '{"id":true,"result":{"id":"true"}}',
    '{"id":"[1]","result":{"items":[{"id":[1]}]}}',
    '{"id":"x","result":{"id":"1"}}',
    '{"result":{"id":"1"}}',
    '  {"id":"1","method":"a"}',
    '{"id":"1","id":1,"method":"dup"}',
    '{"id":1,"id":"1","method":"dup"}',
    "[1, 2]",
    "not json",
]


ARRAY_IDS = [
    '{"id":[1],"method":"x"}',
    '{"id" : [ 1 ],"method":"x"}',
    '{"id":{"a":1},"result":{}}',
    '{"id":[1],"result":{"items":[{"id":"[1]"}]}}',
]
"""Payloads the fast reading refuses (an array or object id): the robust one reads them (`_ids`)."""


@pytest.mark.parametrize("robust", [False, True])
def test_ids_of_every_shape_follow_the_rule(robust: bool) -> None:
    payloads = ADVERSARIAL + (ARRAY_IDS if robust else [])
    ids, decoded = _ids(payloads, robust=robust)
    assert ids == [
        _model(raw, d) if raw.lstrip().startswith("{") else None for raw, d in zip(payloads, decoded, strict=True)
    ]


def test_the_rule_keeps_the_json_type() -> None:
    ids, _ = _ids(ADVERSARIAL[:4] + ADVERSARIAL[6:10], robust=False)
    assert ids == ["1", '"1"', "1", '"1"', "1", '"1"', "7", '"7"']


_number_text = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["0", "1", "1.0", "1e3", "-0", "2.5E-3"]),
)
_id_value = st.one_of(
    _number_text,  # bare
    st.one_of(_number_text, st.just("007")).map(lambda t: f'"{t}"'),  # quoted
    st.text(alphabet='1"\\ a', max_size=4).map(lambda t: orjson.dumps(t).decode()),
    # no ids (arrays, objects, booleans) and strings of their text
    st.sampled_from(["true", "false", "[1]", "[]", '{"a":"1"}', '"true"', '"[1]"', '"{}"']),
)
_colon = st.sampled_from([":", ": ", " : "])


@st.composite
def _payload(draw: st.DrawFn) -> str:
    own = f'"id"{draw(_colon)}{draw(_id_value)}'
    nested = [f'{{"id"{draw(_colon)}{draw(_id_value)}}}' for _ in range(draw(st.integers(0, 2)))]
    body = f'"params":{{"refs":[{",".join(nested)}]}}'
    method = '"method":"m"' if draw(st.booleans()) else '"result":{}'
    members = [own, method, body]
    order = draw(st.permutations(members))
    return "{" + ",".join(order) + "}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_payload(), min_size=1, max_size=12))
def test_ids_of_random_payloads_follow_the_rule(payloads: list[str]) -> None:
    ids, decoded = _ids(payloads, robust=False)
    assert ids == [_model(raw, d) for raw, d in zip(payloads, decoded, strict=True)]


_NUMBER_FORMS = ["1", "1.0", "1e2", "1E+2", "-12", "-12.50", "2.5E-3", "0.1", "1e-400", "7.000", "12345678901234567890"]
_NUMBER_FORMS += ["-0", "-0.0", "1e30", "18446744073709551616", "-9223372036854775809", "1234567890123456789012345"]
# past 2**53, where a double holds every other integer: `json_path_match` (serde_json) rounds some
# halfway between two the other way
_NUMBER_FORMS += ["9007199254740993.0", "9007199254740995.0", "-9007199254740993.0", "9007199254740993e0"]


def test_both_readings_give_a_number_id_one_text() -> None:
    """A file is read the robust way when any of its lines needs it (an object id, say): a number id
    must read the same either way, or an unrelated line decides whether `1.0` answers `1`."""
    payloads = [f'{{"jsonrpc":"2.0","id":{n},"result":{{}}}}' for n in _NUMBER_FORMS]
    fast, _ = _ids(payloads, robust=False)
    robust, _ = _ids(payloads, robust=True)
    assert robust == fast
    assert fast[:4] == ["1", "1", "100", "100"]


def test_both_readings_give_a_number_looking_string_id_one_text() -> None:
    """A string id that looks like a number written another way (`"1.0"`, where the number `1.0`
    reads `1`) stays that string on both readings: the robust one read `"1.0"` as `1`, the id of
    another request, and failed its piece on `"007"` (no JSON number)."""
    strings = ["1.0", "1.50", "1e2", "-0", "-0.0", "007", "9007199254740993.0", "18446744073709551616", "12"]
    payloads = [f'{{"jsonrpc":"2.0","id":"{s}","result":{{}}}}' for s in strings]
    fast, _ = _ids(payloads, robust=False)
    robust, _ = _ids(payloads, robust=True)
    assert fast == [f'"{s}"' for s in strings]
    assert robust == fast


def test_a_probe_answered_with_id_1_0_reads_alike_beside_an_object_id(tmp_path: Path) -> None:
    """The answer `"id":1.0` to the probe `"id":1` settles it, whether or not another server's line in
    the same file holds an object id (which makes the file be read the robust way)."""
    from analyzer.pipeline import AnalyzeOptions, analyze

    def frame(raw: str, direction: str, seq: int, conn: str, server: str = "s") -> dict[str, object]:
        return {"type": fmt.FRAME, "conn": conn, "raw": raw, "dir": direction, "ts": 1796002275.0 + seq,
                "server": server, "seq": seq}  # fmt: skip

    answer = '{"jsonrpc":"2.0","id":1.0,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'
    base = [
        {"type": fmt.HEADER, "format": "erascope/1", "transport": "stdio", "seq": 0},
        frame('{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}', fmt.C2S, 1, "c1"),
        frame(answer, fmt.S2C, 2, "c1"),
    ]
    other = frame('{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}', fmt.C2S, 3, "c9", "other")
    outcomes = {}
    for name, records in (("alone", base), ("beside", [*base, other])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "cap.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
        result = analyze([str(tmp_path / name)], AnalyzeOptions())
        outcomes[name] = result.probes.filter(pl.col("server") == "s").get_column("outcome").cast(pl.String).to_list()
    assert outcomes["alone"] == ["discover-result"]
    assert outcomes["beside"] == outcomes["alone"]


_TWICE = [
    '{"jsonrpc":"2.0","id":1.0,"id":2.5,"method":"x"}',
    '{"jsonrpc":"2.0","id":2.5,"id":1.0,"method":"x"}',
    '{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}',
    '{"jsonrpc":"2.0","id":-0,"id":7,"method":"x"}',
    '{"jsonrpc":"2.0","id":"a","id":1.5,"method":"x"}',
    '{"jsonrpc":"2.0","id":1.5,"id":"1.0","method":"x"}',
    '{"jsonrpc":"2.0","id":1.5,"id":null,"method":"x"}',
    '{"jsonrpc":"2.0","id":null,"id":1.5,"method":"x"}',
    '{"jsonrpc":"2.0","id":1.5,"\\u0069d":2.5,"method":"x"}',
    '{"jsonrpc":"2.0","id":"1","id":1,"method":"x"}',
    '{"jsonrpc":"2.0","id":1,"id":"1","method":"x"}',
    '{"jsonrpc":"2.0","id":1.5,"id":2.5,"result":{}}',
    '{"jsonrpc":"2.0","id":3,"method":"x","method":"y"}',
    '{"jsonrpc":"2.0","id":4,"method":"x","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"A"}},'
    '"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"B"}}}',
]


def test_a_key_written_twice_reads_as_its_first_on_both_readings() -> None:
    """A payload may write `id` (or `method`, `params`) twice: the fast reading takes the first, as the
    format says readers do, and the robust one took the last (`json_path_match`, and the standard
    library reading a number id again), so a line elsewhere in the piece (an object id) changed which
    request an answer settles."""
    records = _frames(_TWICE)
    fast = messages_from_records(records, file="f", capture="c", transport="stdio", robust=False)
    robust = messages_from_records(records, file="f", capture="c", transport="stdio", robust=True)
    first = fast.select("id", "method", "meta_version").collect().rows()
    assert robust.select("id", "method", "meta_version").collect().rows() == first
    assert [row[:2] for row in first] == [
        ("1", "x"), ("2.5", "x"), ("1", "x"), ("0", "x"), ('"a"', "x"), ("1.5", "x"), ("1.5", "x"), (None, "x"),
        ("1.5", "x"), ('"1"', "x"), ("1", "x"), ("1.5", None), ("3", "x"), ("4", "x"),
    ]  # fmt: skip
    assert first[-1][2] == "A"


def test_the_loader_reads_the_model_ids_from_a_piece_without_escapes(tmp_path: Path) -> None:
    # A piece holding no escape is read without the rare reading, which leaves out the parse of a
    # payload writing several ids; such a payload makes the piece be read again with it (`RARE_READS`)
    from tests.test_messages import Cap, messages_of

    plain = [p for p in ADVERSARIAL + ARRAY_IDS if "\\u" not in p and p.lstrip().startswith("{")]  # one row each
    assert any(p.count('"id"') > 1 for p in plain)
    cap = Cap(tmp_path)
    for n, payload in enumerate(plain):
        (cap.c2s if n % 2 else cap.s2c)(payload)
    path = cap.close()
    assert b"\\\\u" not in path.read_bytes()
    frames = messages_of(path).filter(pl.col("record_type") == fmt.FRAME)
    assert frames.get_column("id").to_list() == [_model(p, _decoded(p)) for p in plain]
