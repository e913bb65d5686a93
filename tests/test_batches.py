"""JSON-RPC batches: a JSON array body (legal before 2025-06-18) is several messages.

Each member is counted as its own message with its own id and method; a batch response pairs
member by member by id; one answer to the whole batch (the HTTP 400 a newer server refuses a batch
with, its id `"server-error"` or null) answers every member; a probe inside a batch is classified
like any probe.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from analyzer import messages as stage
from tests.test_messages import Cap, discover_result, err, init, init_result, messages_of, modern_headers, probe, run


def test_members_are_the_exact_texts_of_the_array() -> None:
    big = "123456789012345678901234567890"
    text = f' [ {{"id":{big},"method":"a"}} , {{"id":"x,]","method":"b","params":[1,{{"k":"}}"}}]}}, 7 ]'
    assert stage.batch_members(text) == [
        f'{{"id":{big},"method":"a"}}',
        '{"id":"x,]","method":"b","params":[1,{"k":"}"}]}',
        "7",
    ]


@pytest.mark.parametrize("text", ["[]", "[1,", "[1,]", "[1] x", "{}", '["a" "b"]', "[\"\\u12\"]"])
def test_what_is_not_a_batch_stays_one_message(text: str) -> None:
    assert stage.batch_members(text) is None


def test_stdio_batch_members_are_messages_paired_by_id(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s([probe(1), init(2), {"jsonrpc": "2.0", "method": "notifications/initialized"}])
    cap.s2c([init_result(2), discover_result(1)])
    m = messages_of(cap.close())
    assert m.select("kind", "id", "method", "line").rows() == [
        ("request", "1", "server/discover", 2),
        ("request", "2", "initialize", 2),
        ("notification", None, "notifications/initialized", 2),
        ("response", "2", "initialize", 3),
        ("response", "1", "server/discover", 3),
    ]
    assert m.get_column("seq").n_unique() == m.height  # members are keyed apart
    reqs = m.filter(pl.col("kind") == "request")
    answers = m.filter(pl.col("kind") == "response")
    assert sorted(answers.get_column("req_seq").to_list()) == sorted(reqs.get_column("seq").to_list())


def test_http_batch_response_array_pairs_member_by_member(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", [probe(1), init(2)], headers=modern_headers())
    cap.http_response("f1", 200, [init_result(2), discover_result(1)])
    m = messages_of(cap.close())
    answers = m.filter(pl.col("kind") == "response")
    assert answers.select("id", "method").rows() == [("2", "initialize"), ("1", "server/discover")]
    reqs = m.filter(pl.col("kind") == "request")
    by_id = dict(zip(reqs.get_column("id"), reqs.get_column("seq"), strict=True))
    assert [by_id[i] for i in answers.get_column("id")] == answers.get_column("req_seq").to_list()


def test_http_refusal_of_a_batch_answers_every_member(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", [probe(1), init(2)], headers=modern_headers())
    cap.http_response("f1", 400, err("server-error", -32602, "Validation error"))
    path = cap.close()
    m = messages_of(path)
    reqs = m.filter(pl.col("kind") == "request")
    answers = m.filter(pl.col("kind") == "error")
    assert reqs.height == 2
    assert sorted(answers.get_column("req_seq").to_list()) == sorted(reqs.get_column("seq").to_list())
    assert answers.select("method", "http_status", "error_code").sort("method").rows() == [
        ("initialize", 400, -32602),
        ("server/discover", 400, -32602),
    ]
    analysis = run(path)
    (probe_row,) = analysis.probes.iter_rows(named=True)
    assert (probe_row["outcome"], probe_row["error_code"], probe_row["answer_line"]) == ("legacy-answer", -32602, 3)
    (init_row,) = analysis.inits.iter_rows(named=True)
    assert init_row["outcome"] == "refused-unnamed" and init_row["answer_line"] == 3
    assert [s.era for s in analysis.servers] == ["legacy"]


def test_a_batch_in_a_piece_of_its_own_file_among_small_files(tmp_path: Path) -> None:
    """Many small files are read as one text: a batch in one of them is split like in a file read alone."""
    plain = Cap(tmp_path / "a", server="plain")
    plain.c2s(probe(1))
    plain.s2c(discover_result(1))
    batched = Cap(tmp_path / "b", server="batched")
    batched.c2s([probe(1), init(2)])
    batched.s2c([discover_result(1), init_result(2)])
    paths = [plain.close(), batched.close()]
    analysis = run(tmp_path)
    assert sorted(analysis.inputs.files) == sorted(str(p) for p in paths)
    assert analysis.inputs.records == 3 + 3  # records, not members
    outcomes = sorted(analysis.probes.select("server", "outcome").rows())
    assert outcomes == [("batched", "discover-result"), ("plain", "discover-result")]
    assert analysis.inits.select("server", "outcome").rows() == [("batched", "served")]


@pytest.mark.e2e
@pytest.mark.legacy_peer
def test_legacy_server_refuses_a_batch_with_a_probe_through_mitmdump(
    procs: list[Any], clean_env: dict[str, str], tmp_path: Path, legacy_py: Path
) -> None:
    """The real `mcp` 1.30.0 Streamable HTTP server behind real mitmdump gets a batch of a probe and
    an `initialize` from a raw HTTP client: one 400 answers the batch, and both members are answered."""
    import httpx2

    from tests.test_http_e2e import start_mitmdump, start_server

    port = start_server(procs, clean_env, legacy_py)
    capdir = tmp_path / "caps"
    proxy = start_mitmdump(procs, clean_env, port, capdir)
    envelope = dict(probe(1)["params"]["_meta"])
    batch = [probe(1), {**init(2), "params": {**init(2)["params"], "_meta": envelope}}]
    reply = httpx2.post(
        f"http://127.0.0.1:{proxy.port}/mcp",
        content=orjson.dumps(batch),
        headers={**dict(modern_headers()), "Accept": "application/json, text/event-stream"},
        timeout=30,
    )
    assert proxy.stop(signal.SIGTERM) == 0
    # what the legacy server says on the wire: one JSON-RPC error for the whole array
    assert reply.status_code == 400
    answer = reply.json()
    assert isinstance(answer, dict) and answer["error"]["code"] == -32602 and answer["id"] in ("server-error", None)

    analysis = run(capdir)
    assert analysis.message_count >= 4  # two requests, the refusal as the answer of each
    m = analysis.messages
    reqs = m.filter(pl.col("kind") == "request")
    assert sorted(reqs.get_column("method").cast(pl.String).to_list()) == ["initialize", "server/discover"]
    assert sorted(reqs.get_column("id").to_list()) == ["1", "2"]
    (probe_row,) = analysis.probes.iter_rows(named=True)
    assert (probe_row["outcome"], probe_row["http_status"], probe_row["error_code"]) == ("legacy-answer", 400, -32602)
    (init_row,) = analysis.inits.iter_rows(named=True)
    assert init_row["outcome"] == "refused-unnamed"
    assert init_row["answer_line"] == probe_row["answer_line"]  # one answer to both
    assert [s.era for s in analysis.servers] == ["legacy"]


def test_an_http_answer_naming_one_member_answers_that_member_alone(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", [probe(1), init(2)], headers=modern_headers())
    cap.http_response("f1", 200, init_result(2))  # a server that answered one member only
    cap.http_request("f2", [probe(3), init(4)], headers=modern_headers())
    cap.http_response("f2", 400, err(4, -32600, "Invalid request"))
    m = messages_of(cap.close())
    answers = m.filter(pl.col("kind").is_in(["response", "error"]))
    assert answers.select("id", "method").rows() == [("2", "initialize"), ("4", "initialize")]


@pytest.mark.parametrize("method", ["initialize", "server/discover"])
def test_a_batch_of_two_of_a_kind_after_a_probe_is_analyzed(tmp_path: Path, method: str) -> None:
    # A probe, then one line holding two `initialize`s (or two probes): the rules looked up the
    # request after a probe by file and line alone, found two outcomes, and the analysis crashed
    # (polars ShapeError) in every output format.
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(err(1, -32601, "Method not found"))
    first, second = (init(i) if method == "initialize" else probe(i) for i in (2, 3))
    cap.c2s([first, second])
    answer = init_result if method == "initialize" else discover_result
    cap.s2c([answer(2), answer(3)])
    a = run(cap.close())
    rows = a.inits if method == "initialize" else a.probes
    assert rows.height == 2 if method == "initialize" else rows.height == 3
    assert {f.rule for f in a.findings} <= {"misread-crash", "misread-modern", "probe-storm", "stale-era"}
