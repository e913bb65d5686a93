"""Probe and initialize outcomes: each class with a positive and a negative inline capture."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from analyzer.messages import as_strings
from analyzer.schema import INIT_OUTCOMES, INITS_SCHEMA, PROBE_OUTCOMES, PROBES_SCHEMA
from tests.test_messages import (
    ENVELOPE,
    MODERN,
    Cap,
    discover_result,
    err,
    init,
    init_result,
    modern_headers,
    probe,
    run,
)


def outcomes(path: Path, **opts: float) -> list[str]:
    return run(path, **opts).probes.get_column("outcome").to_list()


def test_schema_and_outcome_vocabulary(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(discover_result(1))
    a = run(cap.close())
    assert dict(a.probes.schema) == PROBES_SCHEMA
    assert dict(a.inits.schema) == INITS_SCHEMA
    assert set(a.probes.get_column("outcome")) <= set(PROBE_OUTCOMES)


def test_discover_result_modern_and_legacy_advertisement(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(discover_result(1, (MODERN, "2025-11-25"), ttl=0))
    cap.c2s(probe(2))
    cap.s2c(discover_result(2, ("2025-06-18", "2025-11-25")))
    p = run(cap.close()).probes
    assert p.get_column("outcome").to_list() == ["discover-result", "discover-result"]
    assert p.get_column("modern_versions").to_list() == [True, False]
    assert p.get_column("versions").to_list() == [[MODERN, "2025-11-25"], ["2025-06-18", "2025-11-25"]]
    assert p.get_column("ttl_ms").to_list() == [0, 0]
    assert p.get_column("answer_line").to_list() == [3, 5]


@pytest.mark.parametrize("code", [-32022, -32004])
def test_unsupported_version(tmp_path: Path, code: int) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(err(1, code, "Unsupported protocol version", {"supported": [MODERN], "requested": "2099-01-01"}))
    p = run(cap.close()).probes
    assert p.get_column("outcome").to_list() == ["unsupported-version"]
    assert p.get_column("versions").to_list() == [[MODERN]]
    assert p.get_column("error_code").to_list() == [code]


@pytest.mark.parametrize("code", [-32020, -32021])
def test_modern_error(tmp_path: Path, code: int) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(err(1, code, "modern"))
    assert outcomes(cap.close()) == ["modern-error"]


@pytest.mark.parametrize("code", [-32601, -32602, -32600, -32000])
def test_legacy_answer_stdio(tmp_path: Path, code: int) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(err(1, code, "legacy", ""))
    assert outcomes(cap.close()) == ["legacy-answer"]


def test_legacy_answer_http_400_json_body_with_other_id_and_plain_404(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 400, err("server-error", -32600, "Bad Request: Missing session ID"))
    cap.http_request("f2", probe(2), headers=modern_headers())
    cap.http_response("f2", 404, "")
    cap.http_request("f3", probe(3), headers=modern_headers())
    cap.http_response("f3", 400, err(None, -32000, "Server not initialized"))
    p = run(cap.close()).probes
    assert p.get_column("outcome").to_list() == ["legacy-answer"] * 3
    assert p.get_column("http_status").to_list() == [400, 404, 400]


def test_http_probe_without_headers_is_malformed_but_modern_error_still_counts(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=[["Content-Type", "application/json"]])
    cap.http_response("f1", 400, err("server-error", -32600, "Bad Request: Missing session ID"))
    cap.http_request("f2", probe(2), headers=[["Content-Type", "application/json"]])
    cap.http_response("f2", 400, err(2, -32020, "Header mismatch"))
    p = run(cap.close()).probes
    assert p.get_column("outcome").to_list() == ["malformed-probe", "modern-error"]
    assert p.get_column("well_formed").to_list() == [False, False]


def test_malformed_probe_stdio(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1, envelope=False))
    cap.s2c(err(1, -32602, "Invalid request parameters", ""))
    cap.c2s(probe(2, envelope=False))
    cap.s2c(err(2, -32022, "Unsupported", {"supported": [MODERN]}))
    cap.c2s(probe(3))
    cap.s2c(err(3, -32602, "Invalid request parameters", ""))
    assert outcomes(cap.close()) == ["malformed-probe", "unsupported-version", "legacy-answer"]


def test_no_answer_and_late_answer(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.c2s(init(9), dt=10.5)  # the client gave up at 10 s and fell back
    cap.s2c(discover_result(1), dt=1.5)  # after the 10 s timeout: too late
    cap.c2s(probe(2))
    cap.s2c(discover_result(2), dt=9.0)
    cap.c2s(probe(3))  # never answered, capture ends
    path = cap.close()
    assert outcomes(path) == ["no-answer", "discover-result", "no-answer"]
    assert outcomes(path, probe_timeout=15.0) == ["discover-result", "discover-result", "no-answer"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_late_answer_the_client_waited_for_is_the_answer(tmp_path: Path, transport: str) -> None:
    """A client that waits longer than the probe timeout (the TypeScript client's 60 s) gets a slow
    server's DiscoverResult at 12 s and goes on modern: it read as `no-answer`, the server `broken`."""
    cap = Cap(tmp_path, transport=transport)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    if transport == "http":
        cap.http_request("f1", probe(1), headers=modern_headers())
        cap.http_response("f1", 200, discover_result(1), dt=12.0)
        cap.http_request("f2", call, headers=modern_headers("tools/list"))
        cap.http_response("f2", 200, {"jsonrpc": "2.0", "id": 2, "result": {"tools": []}})
    else:
        cap.c2s(probe(1))
        cap.s2c(discover_result(1), dt=12.0)
        cap.c2s(call)
        cap.s2c({"jsonrpc": "2.0", "id": 2, "result": {"tools": []}})
    a = run(cap.close())
    assert a.probes.get_column("outcome").to_list() == ["discover-result"]
    assert [v.era for v in a.servers] == ["modern"]
    assert "probe-timeout" not in {f.rule for f in a.findings}


@pytest.mark.parametrize("moved_on", ["request", "answered request", "client-eof"])
def test_a_late_answer_after_the_client_moved_on_is_no_answer(tmp_path: Path, moved_on: str) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    if moved_on == "request":
        cap.c2s(probe(2), dt=10.5)  # a probe again, say: the first one was given up
    elif moved_on == "answered request":  # a request condensing moves out of the messages frame
        cap.c2s({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": ENVELOPE}}, dt=10.5)
        cap.s2c({"jsonrpc": "2.0", "id": 2, "result": {"tools": []}})
    else:
        cap.life("client-eof", dt=10.5)
    cap.s2c(discover_result(1), dt=1.5)
    assert outcomes(cap.close())[0] == "no-answer"


def test_connection_died_stdio(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.life("server-eof")
    cap.life("exit", code=1)
    p = run(cap.close()).probes
    assert p.get_column("outcome").to_list() == ["connection-died"]
    assert p.get_column("answer_line").to_list() == [3]


@pytest.mark.parametrize("gone", ["client-eof", "client-stdout-broken"])
def test_client_closing_first_is_not_a_death(tmp_path: Path, gone: str) -> None:
    """A client that closed stdin, or its end of the tee's stdout (the server then dies of EPIPE), left
    first: the death that follows proves nothing about the server."""
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.life(gone)
    cap.life("server-eof")
    cap.life("exit", signal="SIGTERM")
    assert outcomes(cap.close()) == ["no-answer"]


def test_death_after_timeout_is_no_answer(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.life("exit", code=1, dt=30.0)
    assert outcomes(cap.close()) == ["no-answer"]


def test_connection_died_http(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.record({"type": "http.error", "flow": "f1", "kind": "upstream-reset", "error": "reset"})
    cap.http_request("f2", probe(2), headers=modern_headers())
    cap.http_response("f2", 200, streamed=True)
    cap.record({"type": "sse.end", "flow": "f2", "how": "upstream-reset", "events": 0})
    cap.http_request("f3", probe(3), headers=modern_headers())
    cap.http_response("f3", 200, streamed=True)
    cap.sse("f3", 0, discover_result(3))
    cap.record({"type": "sse.end", "flow": "f3", "how": "clean", "events": 1})
    assert outcomes(cap.close()) == ["connection-died", "connection-died", "discover-result"]


def test_a_client_hanging_up_is_not_a_dead_connection(tmp_path: Path) -> None:
    """`client-gone`: the client hung up (its probe timeout cancelled the request, or its process went)
    before the answer came. The server did nothing wrong, as on stdio when the client leaves first; the
    probe was read as `connection-died`, the evidence of `misread-crash` and `probe-kills-server`."""
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.record({"type": "http.error", "flow": "f1", "kind": "client-gone", "error": "Client disconnected."}, dt=3)
    cap.http_request("f2", probe(2), headers=modern_headers())
    cap.http_response("f2", 200, streamed=True)
    cap.record({"type": "sse.end", "flow": "f2", "how": "client-gone", "events": 0}, dt=3)
    cap.record({"type": "http.error", "flow": "f2", "kind": "client-gone", "error": "Client disconnected."})
    assert outcomes(cap.close()) == ["no-answer", "no-answer"]


def test_recorder_stopping_is_not_a_dead_connection(tmp_path: Path) -> None:
    """`recorder-stopped` ends the observation of an open flow; the server did nothing wrong."""
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.record({"type": "http.error", "flow": "f1", "kind": "recorder-stopped", "error": "stopped"})
    cap.http_request("f2", probe(2), headers=modern_headers())
    cap.http_response("f2", 200, streamed=True)
    cap.record({"type": "sse.end", "flow": "f2", "how": "recorder-stopped", "events": 0})
    cap.record({"type": "http.error", "flow": "f2", "kind": "recorder-stopped", "error": "stopped"})
    assert "connection-died" not in outcomes(cap.close())


def test_garbage_only_non_json_before_death(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c("Traceback (most recent call last):")
    cap.life("server-eof")
    assert outcomes(cap.close()) == ["garbage"]


def test_banner_before_real_answer_is_not_garbage(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c("Server v1 ready")
    cap.s2c(err(1, -32602, "Invalid request parameters", ""))
    assert outcomes(cap.close()) == ["legacy-answer"]


def test_http_non_json_200_is_garbage(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, "<html>hello</html>")
    assert outcomes(cap.close()) == ["garbage"]


@pytest.mark.parametrize("ending", ["open", "upstream-reset", "clean"])
def test_an_event_without_data_on_the_probes_stream_is_not_garbage(tmp_path: Path, ending: str) -> None:
    """A server that can resume its streams first sends an event with an id and no data (2025-11-25:
    "prime the client to reconnect"); `retry:` alone and an event with no `data:` line are such events
    too, none of them a message (a browser dispatches none). It was read as garbage: the probe's outcome
    `garbage`, and `probe-kills-server` raised against a server that did nothing wrong."""
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, streamed=True)
    cap.record({"type": "sse.event", "flow": "f1", "dir": "s2c", "index": 0, "sse_id": "s1_0", "raw": "", "len": 0})
    if ending != "open":
        cap.record({"type": "sse.end", "flow": "f1", "how": ending, "events": 1})
    expected = {"open": "no-answer", "upstream-reset": "connection-died", "clean": "no-answer"}[ending]
    assert outcomes(cap.close()) == [expected]


def test_an_event_of_data_that_is_no_json_on_the_probes_stream_is_garbage(tmp_path: Path) -> None:
    # the guard: data that is there and no message still is
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, streamed=True)
    cap.sse("f1", 0, "panic: not initialized")
    assert outcomes(cap.close()) == ["garbage"]


def test_http_json_that_is_no_jsonrpc_message_reads_as_plain_text(tmp_path: Path) -> None:
    # on an error status, an HTTP error like plain text: a framework's 405, a `--bodies metadata`
    # marker standing for a plain-text body (both were `garbage`: a broken server); on a 200, garbage
    cap = Cap(tmp_path, transport="http")
    answers = [
        (405, {"detail": "Method Not Allowed"}),
        (405, {"$redacted": {"len": 18, "hash": "hmac:0123456789ab"}}),
        (200, {"detail": "ok"}),
    ]
    for n, (status, body) in enumerate(answers, start=1):
        cap.http_request(f"f{n}", probe(n), headers=modern_headers())
        cap.http_response(f"f{n}", status, body)
    a = run(cap.close())
    assert a.probes.get_column("outcome").to_list() == ["legacy-answer", "legacy-answer", "garbage"]
    refusals = as_strings(a.messages).filter((pl.col("dir") == "s2c") & (pl.col("http_status") == 405))
    assert refusals.get_column("kind").to_list() == ["error", "error"]
    assert refusals.get_column("error_message").to_list()[0] == '{"detail":"Method Not Allowed"}'


def test_initialize_outcomes(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(init(1), conn="a")
    cap.s2c(init_result(1), conn="a")
    cap.c2s(init(2), conn="b")
    cap.s2c(err(2, -32022, "Unsupported protocol version", {"supported": [MODERN]}), conn="b")
    cap.c2s(init(3), conn="c")
    cap.s2c(err(3, -32600, "Bad request"), conn="c")
    cap.c2s(init(4), conn="d")
    cap.life("exit", code=1, conn="d")
    cap.c2s(init(5), conn="e")
    inits = run(cap.close()).inits
    assert inits.get_column("outcome").to_list() == [
        "served", "refused-named", "refused-unnamed", "connection-died", "no-answer"
    ]
    assert set(inits.get_column("outcome")) <= set(INIT_OUTCOMES)
    assert inits.get_column("versions").to_list() == [["2025-11-25"], [MODERN], None, None, None]
    assert inits.get_column("requested_version").to_list() == ["2025-11-25"] * 5
    assert inits.filter(pl.col("outcome") == "served").get_column("client_name").to_list() == ["test-client"]


def test_a_probe_without_client_info_takes_the_client_named_on_its_connection(tmp_path: Path) -> None:
    # a bare probe names no client; the initialize on the same stdio connection does, and so the
    # probe belongs to that client (the first name in capture order, also across condensed rows)
    cap = Cap(tmp_path)
    cap.c2s(probe(1, envelope=False))
    cap.s2c(err(1, -32601, "Method not found"))
    cap.c2s(init(2))
    cap.s2c(init_result(2))
    p = run(cap.close()).probes
    assert p.get_column("client_name").to_list() == ["test-client"]
    assert p.get_column("outcome").to_list() == ["malformed-probe"]


OAUTH_401 = {"error": "invalid_token", "error_description": "Authentication required"}
"""The body the `mcp` SDKs' bearer-auth middleware sends with its 401 (OAuth, not JSON-RPC)."""


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (401, OAUTH_401, "auth-required"),
        (403, {"error": "insufficient_scope", "error_description": "Required scope: mcp"}, "auth-required"),
        (407, "<html><body>Proxy Authentication Required</body></html>", "auth-required"),
        # a gateway's auth failure with a JSON-RPC-looking body is still the gate's answer
        (401, err(1, -32600, "Unauthorized"), "auth-required"),
        (429, "Too Many Requests", "rate-limited"),
        (302, "", "redirected"),
        (502, "<html><h1>502 Bad Gateway</h1></html>", "gateway-error"),
        (503, "", "gateway-error"),
        (504, "upstream request timeout", "gateway-error"),
    ],
)
def test_answers_from_in_front_of_the_server_are_not_era_answers(
    tmp_path: Path, status: int, body: object, outcome: str
) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", status, body)
    cap.http_request("f2", init(2), headers=[["Content-Type", "application/json"]])
    cap.http_response("f2", status, body)
    a = run(cap.close())
    assert a.probes.get_column("outcome").to_list() == [outcome]
    assert a.inits.get_column("outcome").to_list() == [outcome]
    (server,) = a.servers
    assert (server.era, server.modern_support, server.legacy_support) == ("unknown", "unknown", "unknown")
    assert server.timeline == []
    assert a.findings == []


def test_a_json_rpc_error_behind_a_502_is_the_servers_own(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 502, err(1, -32601, "Method not found"))
    assert outcomes(cap.close()) == ["legacy-answer"]


@pytest.mark.parametrize("status", [404, 405])
def test_initialize_refused_at_the_http_level_names_no_versions_and_is_no_version_refusal(
    tmp_path: Path, status: int
) -> None:
    # the HTTP+SSE transport's /sse takes GET only: a Streamable HTTP client POSTing there gets 405
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", init(1), headers=[["Content-Type", "application/json"]])
    cap.http_response("f1", status, "Method Not Allowed")
    a = run(cap.close())
    assert a.inits.get_column("outcome").to_list() == ["http-refused"]
    assert [f.rule for f in a.findings] == []


def test_the_report_says_which_answers_came_from_in_front_of_the_server(tmp_path: Path) -> None:
    from analyzer.report import render

    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 401, OAUTH_401)
    cap.http_request("f2", init(2), headers=[["Content-Type", "application/json"]])
    cap.http_response("f2", 401, OAUTH_401)
    cap.http_request("f3", probe(3), headers=modern_headers())
    cap.http_response("f3", 200, discover_result(3))
    a = run(cap.close())
    for fmt in ("text", "markdown"):
        assert "in front of the server (no era evidence): auth-required ×2" in " ".join(render(a, fmt).split())


def test_output_ended_only_once_nothing_more_of_the_server_can_be_recorded(tmp_path: Path) -> None:
    """`output_ended` (watch decides a probe by it): after `server-eof`, or the `linger-end` /
    `recorder-end` the tee writes after it; not after an `exit` alone (frames still in the pipe are
    recorded after it), not on another connection, not for HTTP."""
    from analyzer.probes import output_ended

    cap = Cap(tmp_path)
    cap.c2s(probe(1))  # c1: server-eof (a `server-eof` behind an `exit` is c3's case)
    cap.life("server-eof")
    cap.life("exit", code=1, status=1)
    cap.c2s(probe(2), conn="c2")  # c2: exit only
    cap.life("exit", code=1, status=1, conn="c2")
    cap.c2s(probe(3), conn="c3")  # c3: its server-eof dropped behind its exit, then the tee's end
    cap.life("exit", code=1, status=1, conn="c3")
    cap.life("server-eof", conn="c3")
    cap.life("recorder-end", conn="c3")
    cap.c2s(probe(4), conn="c4")  # c4: the recorder-end is c3's
    cap.http_request("f1", probe(5), headers=modern_headers())
    cap.record({"type": "http.error", "flow": "f1", "kind": "upstream-reset", "error": "reset"})
    a = run(cap.close())
    ended = output_ended(a.messages, a.probes)
    assert dict(zip(a.probes.get_column("id"), ended, strict=True)) == {
        "1": True,
        "2": False,
        "3": True,
        "4": False,
        "5": False,
    }
    assert output_ended(a.messages, a.probes.clear()).to_list() == []
