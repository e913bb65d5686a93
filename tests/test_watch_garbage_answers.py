"""watch and a request answered with garbage. An HTTP body that is no JSON (an HTML page, a line of
text, with status 200: a web server or a framework's catch-all in front of the path) answers its flow's
request: `analyze` decides the probe by it (rule 1 of `analyzer.probes`: no later line replaces a
request's answer), so watch decides it in the round that reads the answer. A stdio line or an event
that is no JSON-RPC message answers nothing, whatever id it holds (`{"jsonrpc":"2.0","id":1}`: the SDKs
refuse it and go on waiting, as past a banner on stdout): watch waits for the timeout, which an answer
within it still beats. What watch reports is what `analyze` gives on the final files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_messages import Cap, discover_result, init, init_result, modern_headers, probe
from tests.test_watch import CORPUS, analyzed, expected, reported, watched_rounds
from tests.test_watch_deaths import IDLE, _all, _broken_in


def _http_answered(cap: Cap, body: str, content_type: str) -> None:
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, body, headers=[["Content-Type", content_type]])


ANSWERS: dict[str, tuple[str, Any]] = {
    "an HTML page": (
        "http",
        lambda cap: _http_answered(cap, "<html><body><h1>It works!</h1></body></html>", "text/html"),
    ),
    "a line of text": ("http", lambda cap: _http_answered(cap, "OK", "text/plain")),
}
"""How a probe is answered with garbage: (transport, what the capture holds after its header)."""


def _written(out: Path, transport: str, build: Any) -> tuple[str, list[bytes]]:
    """A capture of `transport` holding what `build` writes: its file name and lines."""
    cap = Cap(out, transport=transport, server="srv")
    build(cap)
    path = cap.close()
    return path.name, path.read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("answer", sorted(ANSWERS))
def test_a_probe_answered_with_garbage_is_decided_when_the_answer_is_read(tmp_path: Path, answer: str) -> None:
    name, lines = _written(tmp_path / "src", *ANSWERS[answer])
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, name, IDLE)
    assert _broken_in(rounds) == [2], rounds  # the round that read the answer (line 3, after the header and request)
    assert rounds[-1] == []  # the timeout passing decides nothing more
    report = analyzed(live)
    assert [t["era"] for s in report["servers"] for t in s["timeline"]] == ["broken"]
    assert reported(_all(rounds)) == expected(report)


def test_garbage_on_the_answers_stream_waits_for_the_answer(tmp_path: Path) -> None:
    """An event that is no JSON on the probe's event stream is no answer (not paired with the probe):
    the answer after it, within the timeout, is the outcome, never reported `broken` before it."""

    def build(cap: Cap) -> None:
        cap.http_request("f1", probe(1), headers=modern_headers())
        cap.http_response("f1", 200, streamed=True)
        cap.sse("f1", 0, "not json")
        cap.sse("f1", 1, discover_result(1), dt=2.0)

    name, lines = _written(tmp_path / "src", "http", build)
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, name, IDLE)
    assert _broken_in(rounds) == [], rounds
    assert [[e["era"] for e in events if e["event"] == "era"] for events in rounds][4] == ["modern"]
    assert reported(_all(rounds)) == expected(analyzed(live))


# --- initialize -----------------------------------------------------------------------------------
# `analyze` has no `garbage` outcome for an `initialize` (`analyzer.probes.classify_inits`): answered
# with garbage (an HTTP body) it is `no-answer` located at that answer (the server `broken` there), so
# watch decides it in the round that reads the answer.

PLAIN_HEADERS = [["Content-Type", "application/json"]]
"""What a client sends with its `initialize` over HTTP: no protocol version header before the handshake."""


def _http_init_answered(cap: Cap, body: str, content_type: str) -> None:
    cap.http_request("f1", init(1), headers=PLAIN_HEADERS)
    cap.http_response("f1", 200, body, headers=[["Content-Type", content_type]])


INIT_ANSWERS: dict[str, tuple[str, Any]] = {
    "an HTML page": (
        "http",
        lambda cap: _http_init_answered(cap, "<html><body><h1>It works!</h1></body></html>", "text/html"),
    ),
    "a line of text": ("http", lambda cap: _http_init_answered(cap, "OK", "text/plain")),
}
"""How an `initialize` is answered with garbage: (transport, what the capture holds after its header)."""


@pytest.mark.parametrize("answer", sorted(INIT_ANSWERS))
def test_an_initialize_answered_with_garbage_is_decided_when_the_answer_is_read(tmp_path: Path, answer: str) -> None:
    name, lines = _written(tmp_path / "src", *INIT_ANSWERS[answer])
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, name, IDLE)
    assert _broken_in(rounds) == [2], rounds  # the round that read the answer (line 3)
    assert rounds[-1] == []
    report = analyzed(live)
    assert [(t["era"], t["evidence"]["line"]) for s in report["servers"] for t in s["timeline"]] == [("broken", 3)]
    assert reported(_all(rounds)) == expected(report)


UNDECODABLE_END: dict[str, Any] = {"how": "clean", "undecodable": "x-custom"}
"""A stream whose bytes stopped decoding after its first event (captures/FORMAT.md, `sse.end`)."""
NO_ANSWER: dict[str, Any] = {"jsonrpc": "2.0", "id": 1}
"""JSON holding the request's id, but neither a result nor an error: no JSON-RPC message."""
BANNER = "weather-server 1.4.2 starting on stdio"
"""Garbage that holds no id."""


def _on_stdio(request: dict[str, Any], then: Any) -> Any:
    """`request` on stdio, a line of garbage (`build`'s argument), then what `then` writes."""

    def build(garbage: Any) -> Any:
        return lambda cap: (cap.c2s(request), cap.s2c(garbage), then(cap))

    return build


def _on_its_stream(request: dict[str, Any], headers: list[list[str]], then: Any) -> Any:
    """`request` POSTed, answered by an event stream whose first event is garbage, then what `then` writes."""

    def build(garbage: Any) -> Any:
        def written(cap: Cap) -> None:
            cap.http_request("f1", request, headers=headers)
            cap.http_response("f1", 200, streamed=True, headers=[["Content-Type", "text/event-stream"]])
            cap.sse("f1", 0, garbage)
            then(cap)

        return written

    return build


def _end(**fields: Any) -> Any:
    return lambda cap: cap.record({"type": "sse.end", "flow": "f1", "dir": "s2c", "events": 1, **fields})


def _nothing(cap: Cap) -> None:
    pass


def _death(cap: Cap) -> None:
    cap.life("exit", code=1, status=1)
    cap.life("server-eof", dt=0.001)


GARBAGE_FIRST: dict[str, tuple[str, Any]] = {
    "probe-stdio-then-its-answer": ("stdio", _on_stdio(probe(1), lambda cap: cap.s2c(discover_result(1), dt=2.0))),
    "probe-stdio-then-nothing": ("stdio", _on_stdio(probe(1), _nothing)),
    "probe-stdio-then-a-death": ("stdio", _on_stdio(probe(1), _death)),
    "init-stdio-then-its-answer": ("stdio", _on_stdio(init(1), lambda cap: cap.s2c(init_result(1), dt=2.0))),
    "init-stdio-then-nothing": ("stdio", _on_stdio(init(1), _nothing)),
    "init-stdio-then-a-death": ("stdio", _on_stdio(init(1), _death)),
    "probe-stream-then-its-answer": (
        "http",
        _on_its_stream(probe(1), modern_headers(), lambda cap: cap.sse("f1", 1, discover_result(1), dt=2.0)),
    ),
    "probe-stream-ended": ("http", _on_its_stream(probe(1), modern_headers(), _end(how="clean"))),
    "probe-stream-stops-decoding": ("http", _on_its_stream(probe(1), modern_headers(), _end(**UNDECODABLE_END))),
    "probe-stream-still-open": ("http", _on_its_stream(probe(1), modern_headers(), _nothing)),
    "init-stream-then-its-answer": (
        "http",
        _on_its_stream(init(1), PLAIN_HEADERS, lambda cap: cap.sse("f1", 1, init_result(1), dt=2.0)),
    ),
    "init-stream-ended": ("http", _on_its_stream(init(1), PLAIN_HEADERS, _end(how="clean"))),
    "init-stream-reset": ("http", _on_its_stream(init(1), PLAIN_HEADERS, _end(how="upstream-reset"))),
    "init-stream-stops-decoding": ("http", _on_its_stream(init(1), PLAIN_HEADERS, _end(**UNDECODABLE_END))),
    "init-stream-still-open": ("http", _on_its_stream(init(1), PLAIN_HEADERS, _nothing)),
}
"""A request whose first server output is garbage, then its answer, nothing, a death or its stream's end."""


def _seen(tmp_path: Path, name: str, lines: list[bytes]) -> tuple[Any, ...]:
    """What watch reports round by round for `lines`, and what `analyze` gives on them."""
    tmp_path.mkdir()
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, name, IDLE)
    report = analyzed(live)
    assert reported(_all(rounds)) == expected(report)
    outcomes = [(s["probe_outcomes"], s["init_outcomes"]) for s in report["servers"]]
    eras = [[e["era"] for e in r if e["event"] == "era"] for r in rounds]
    return _broken_in(rounds), eras, outcomes, repr(expected(report)).replace(str(live), "LIVE")


@pytest.mark.parametrize("case", sorted(GARBAGE_FIRST))
def test_json_holding_the_requests_id_but_no_answer_is_garbage_like_a_banner(tmp_path: Path, case: str) -> None:
    """`{"jsonrpc":"2.0","id":1}` was the request's answer to `analyze` (paired by its id): a probe's
    `garbage` that its real answer after it did not replace, an `initialize`'s `no-answer` (its server
    `broken` there). It is read as a banner is read, in every round of watch and by `analyze`."""
    transport, build = GARBAGE_FIRST[case]
    name, lines = _written(tmp_path / "src-json", transport, build(NO_ANSWER))
    _, banner_lines = _written(tmp_path / "src-banner", transport, build(BANNER))
    seen = _seen(tmp_path / "json", name, lines)
    assert seen == _seen(tmp_path / "banner", name, banner_lines)
    if case.endswith("then-its-answer"):  # never `broken`: its answer decides
        assert seen[0] == [], seen
        assert seen[2] == ([({"discover-result": 1}, {})] if case.startswith("probe") else [({}, {"served": 1})])


@pytest.mark.parametrize(
    "case", ["probe-stdio-then-its-answer", "probe-stdio-then-nothing", "probe-stream-ended", "init-stdio-then-nothing"]
)
def test_a_line_whose_method_is_no_string_is_garbage_like_a_banner(tmp_path: Path, case: str) -> None:
    """`{"jsonrpc":"2.0","id":1,"method":5}` was a server's request to both: a line the SDKs refuse."""
    _assert_like_a_banner(tmp_path, case, '{"jsonrpc":"2.0","id":1,"method":5}')


@pytest.mark.parametrize("case", ["probe-stdio-then-its-answer", "probe-stdio-then-nothing", "probe-stream-ended"])
def test_a_refusal_without_its_message_is_garbage_like_a_banner(tmp_path: Path, case: str) -> None:
    """A -32022 without its message was the probe's `unsupported-version` to both (its server modern at
    another version): a line the SDKs refuse."""
    refusal = '{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"data":{"supported":["2025-11-25"]}}}'
    _assert_like_a_banner(tmp_path, case, refusal)


def _assert_like_a_banner(tmp_path: Path, case: str, line: str) -> None:
    """What watch and `analyze` report when `line` comes first in `case` is what they report for a banner."""
    transport, build = GARBAGE_FIRST[case]
    name, lines = _written(tmp_path / "src-json", transport, build(line))
    _, banner_lines = _written(tmp_path / "src-banner", transport, build(BANNER))
    assert _seen(tmp_path / "json", name, lines) == _seen(tmp_path / "banner", name, banner_lines)


def test_json_holding_the_id_of_an_initialize_on_the_sessions_stream_is_garbage_like_a_banner(tmp_path: Path) -> None:
    """The HTTP+SSE transport: the `initialize` POSTed (202 Accepted ends its flow), its answer due on the
    session's GET stream, which stays open: an event there holding its id but no result is no answer."""
    source = next((CORPUS / "legacy-sse-http").glob("*.jsonl"))
    lines = source.read_bytes().splitlines(keepends=True)[:10]
    at = next(i for i, line in enumerate(lines) if '\\"id\\":0,\\"result\\"' in line.decode())

    def replaced(raw: str) -> list[bytes]:
        answer = json.loads(lines[at])
        answer["raw"], answer["len"] = raw, len(raw)
        return [*lines[:at], json.dumps(answer).encode() + b"\n", *lines[at + 1 :]]

    seen = _seen(tmp_path / "json", source.name, replaced('{"jsonrpc":"2.0","id":0}'))
    assert seen == _seen(tmp_path / "banner", source.name, replaced(BANNER))
    assert seen[0] == [len(lines)], seen  # the round after the timeout, not the one that read the event
    assert seen[2] == [({}, {"no-answer": 1})]


def test_a_banner_before_an_initialize_answer_waits_for_the_answer(tmp_path: Path) -> None:
    """A stdout line that is no JSON is not the `initialize`'s answer: the answer after it, within the
    timeout, is the outcome (`legacy`), never reported `broken` before it."""

    def build(cap: Cap) -> None:
        cap.c2s(init(1))
        cap.frame("s2c", "weather-server 1.4.2 starting on stdio")
        cap.s2c(init_result(1), dt=2.0)

    name, lines = _written(tmp_path / "src", "stdio", build)
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, name, IDLE)
    assert _broken_in(rounds) == [], rounds
    assert [[e["era"] for e in events if e["event"] == "era"] for events in rounds][3] == ["legacy"]
    assert reported(_all(rounds)) == expected(analyzed(live))


def test_garbage_on_an_initialize_stream_waits_for_the_answer(tmp_path: Path) -> None:
    """An event that is no JSON on the `initialize`'s stream is not paired with it: the answer after it
    decides (`legacy`), never reported `broken` before it."""

    def build(cap: Cap) -> None:
        cap.http_request("f1", init(1), headers=PLAIN_HEADERS)
        cap.http_response("f1", 200, streamed=True, headers=[["Content-Type", "text/event-stream"]])
        cap.sse("f1", 0, "not json")
        cap.sse("f1", 1, init_result(1), dt=2.0)

    name, lines = _written(tmp_path / "src", "http", build)
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, name, IDLE)
    assert _broken_in(rounds) == [], rounds
    assert [[e["era"] for e in events if e["event"] == "era"] for events in rounds][4] == ["legacy"]
    assert reported(_all(rounds)) == expected(analyzed(live))
