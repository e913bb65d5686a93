"""The capture fields a client identity is built from, read by the analyzer from real capture files:
the `spawn` record's `parent_argv` (stdio) and the `http.request`'s `client` address."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from analyzer.messages import as_strings
from tests.test_messages import Cap, messages_of, modern_headers, probe, run


def test_spawn_parent_argv_becomes_the_host_process(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.life("spawn", argv=["python", "srv.py"], pid=7, cwd="/", parent_pid=5,
             parent_argv=["/usr/bin/node", "host.js", "--api-key", "hmac:0123456789ab"])  # fmt: skip
    cap.c2s(probe(1))
    m = as_strings(messages_of(cap.close()))
    spawn = m.filter(pl.col("event") == "spawn")
    assert spawn["host_process"].to_list() == ["/usr/bin/node host.js --api-key hmac:0123456789ab"]
    assert m["host_process"].null_count() == m.height - 1


def test_http_request_client_address_is_read(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http", server="http://127.0.0.1/mcp")
    cap.record({"type": "http.request", "flow": "f1", "dir": "c2s", "method": "POST", "url": "http://x/mcp",
                "headers": modern_headers(), "raw": '{"jsonrpc":"2.0","id":1,"method":"tools/list"}', "len": 46,
                "client": "[::1]:50123"})  # fmt: skip
    m = as_strings(messages_of(cap.close()))
    assert m["client_addr"].to_list() == ["[::1]:50123"]


def test_a_parent_argv_of_the_wrong_shape_is_a_located_bad_line_not_a_crash(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.life("spawn", argv=["python", "srv.py"], pid=7, parent_argv="node host.js")  # attacker-controlled
    cap.c2s(probe(1))
    cap.life("spawn", argv=["python", "srv.py"], pid=8, parent_argv=["node", "ok.js"], conn="c2")
    analysis = run(cap.close())
    assert [bad.line for bad in analysis.inputs.malformed] == [2]
    assert "parent_argv" in analysis.inputs.malformed[0].reason
    hosts = as_strings(analysis.messages)["host_process"].drop_nulls().to_list()
    assert hosts == ["node ok.js"]
