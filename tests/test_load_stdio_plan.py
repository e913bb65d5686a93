"""Pieces of stdio captures are read without the HTTP expressions (`messages_from_records(http=False)`)
and give the rows of the whole plan: on records of the other types by construction, and a piece
holding an HTTP or SSE record (whatever its file's header says) is read again with the whole plan.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from addon import format as fmt
from analyzer import load
from analyzer.load import LoadOptions, extract_file
from analyzer.messages import HTTP_READS, messages_from_records
from analyzer.schema import RECORD_SCHEMA
from tests.test_id_text import ADVERSARIAL
from tests.test_load import HEADER, frame, write_lines
from tests.test_load_pieces import assert_same_facts, facts_of
from tests.test_messages import Cap, discover_result, err, init, init_result, modern_headers, probe


def _both(path: Path, monkeypatch: pytest.MonkeyPatch, piece_bytes: int = 1 << 23) -> None:
    """The file's facts with the plan chosen by its header and with the whole plan are the same."""
    chosen = facts_of(path, piece_bytes, LoadOptions(condense=False))
    with monkeypatch.context() as m:
        m.setattr(load, "_http_plan", lambda facts: True)
        whole = facts_of(path, piece_bytes, LoadOptions(condense=False))
    assert_same_facts(chosen, whole)


def _stdio_capture(tmp_path: Path) -> Cap:
    cap = Cap(tmp_path)
    cap.life("spawn", pid=4, argv=["srv"], parent_argv=["host", "--flag"])
    cap.c2s(probe(1))
    cap.s2c(discover_result(1))
    cap.c2s(init(2))
    cap.s2c(init_result(2))
    cap.c2s(probe("1"))
    cap.s2c(err("1", -32022, "unsupported", {"supported": ["2025-11-25"], "requested": "2026-07-28"}))
    cap.s2c("Starting server v1.2 ...")
    cap.c2s('[{"jsonrpc":"2.0","id":7,"method":"a"},{"jsonrpc":"2.0","id":"7","method":"b"}]')
    for n, raw in enumerate(ADVERSARIAL):
        (cap.c2s if n % 2 else cap.s2c)(raw)
    cap.record({"type": "stderr", "text": "warning"})
    cap.life("exit", code=0)
    return cap


def test_a_stdio_capture_reads_the_same_with_either_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _stdio_capture(tmp_path).close()
    _both(path, monkeypatch)
    _both(path, monkeypatch, piece_bytes=300)  # many pieces


@pytest.mark.parametrize("kind", ["request", "response", "sse", "sse-end", "http-error"])
def test_a_stdio_capture_holding_http_records_reads_them_with_the_whole_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    cap = _stdio_capture(tmp_path)
    if kind == "request":
        cap.http_request("f1", probe(9), headers=modern_headers())
    elif kind == "response":
        cap.http_response("f1", 400, "Bad Request", headers=[["Server", "node-3"]])
    elif kind == "sse":
        cap.sse("f1", 0, discover_result(9))
    elif kind == "sse-end":
        cap.record({"type": fmt.SSE_END, "flow": "f1", "how": "eof"})
    else:
        cap.record({"type": fmt.HTTP_ERROR, "flow": "f1", "kind": "reset", "error": "connection reset"})
    path = cap.close()
    _both(path, monkeypatch)
    _both(path, monkeypatch, piece_bytes=300)
    rows = facts_of(path, 1 << 23, LoadOptions(condense=False)).messages
    assert rows.filter(pl.col("record_type") == fmt.SSE_END).select(
        pl.col("event").cast(pl.String)
    ).to_series().to_list() == (["sse-end:eof"] if kind == "sse-end" else [])


def test_a_field_only_http_records_read_is_still_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame whose `streamed` is not a boolean, or whose `headers` are not a list, is refused with either plan."""
    bad = orjson.loads(frame(2, '{"jsonrpc":"2.0","id":1,"result":{}}', "s2c"))
    path = write_lines(
        tmp_path / "c.jsonl",
        [
            orjson.dumps(HEADER).decode(),
            frame(1, '{"jsonrpc":"2.0","id":1,"method":"a"}'),
            orjson.dumps({**bad, "streamed": "yes"}).decode(),
            orjson.dumps({**bad, "seq": 3, "headers": "not a list"}).decode(),
        ],
    )
    facts = extract_file(str(path), LoadOptions(condense=False))
    assert [b.line for b in facts.malformed] == [3, 4]
    _both(path, monkeypatch)


def _records(payloads: list[str]) -> pl.LazyFrame:
    rows = [
        {"type": fmt.FRAME, "seq": n, "ts": 1.0, "conn": "c1", "dir": fmt.C2S if n % 2 else fmt.S2C, "raw": raw}
        for n, raw in enumerate(payloads)
    ]
    rows += [{"type": fmt.LIFECYCLE, "seq": 90, "ts": 2.0, "conn": "c1", "event": "exit", "code": 3}]
    records = pl.DataFrame(rows, schema={name: RECORD_SCHEMA[name] for name in rows[0] | rows[-1]})
    missing = {name: pl.lit(None, dtype) for name, dtype in RECORD_SCHEMA.items() if name not in records.columns}
    return records.lazy().with_columns(**missing).with_row_index("line", offset=1).select("line", *RECORD_SCHEMA)


@pytest.mark.parametrize("robust", [False, True])
@pytest.mark.parametrize("categorical", [False, True])
def test_without_http_records_the_plans_give_the_same_rows(robust: bool, categorical: bool) -> None:
    records = _records(ADVERSARIAL)
    kw = {"file": "f", "capture": "c", "transport": "stdio", "robust": robust, "categorical": categorical}
    whole = messages_from_records(records, **kw).collect()
    stdio = messages_from_records(records, **kw, http=False).collect()
    assert stdio.get_column(HTTP_READS).struct.fields == ["headers", "streamed"]
    assert_frame_equal(stdio.drop(HTTP_READS), whole)
    assert whole.height == len(ADVERSARIAL) + 1


def test_a_bad_line_in_a_stdio_piece(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [orjson.dumps(HEADER).decode(), frame(1, '{"jsonrpc":"2.0","id":1,"method":"a"}'), "{not json"]
    lines += [frame(3, '{"jsonrpc":"2.0","id":1,"result":{}}', "s2c"), ""]
    path = write_lines(tmp_path / "c.jsonl", lines)
    _both(path, monkeypatch)
