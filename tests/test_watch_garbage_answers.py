"""watch and a probe whose answer is garbage: an HTTP body that is no JSON (an HTML page, a line of
text, with status 200: a web server or a framework's catch-all in front of the path), or a stdio line
paired with the probe that is no JSON-RPC answer. `analyze` decides such a probe by that answer (rule 1
of `analyzer.probes`: no later line replaces a request's answer), so watch decides it in the round
that reads the answer: it waited for the probe timeout, as for garbage that is no answer (a banner
on stdout, an event on the answer's stream that is no JSON), which an answer within the timeout still
replaces. An `initialize` answered with garbage is decided the same way, but for an answer on its
own event stream, which the stream's end can still replace (below). What watch reports is what
`analyze` gives on the final files."""

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
    "a stdio line that is no answer": ("stdio", lambda cap: (cap.c2s(probe(1)), cap.s2c({"jsonrpc": "2.0", "id": 1}))),
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
    assert _broken_in(rounds) == [2], rounds  # the round that read the answer (line 3, after the header and probe)
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
# with garbage it is `no-answer` located at that answer (the server `broken` there), unless something
# read later on its connection or flow says otherwise: a death makes it `connection-died` (the same
# era, at the same line), and the end of the answer's event stream marked `undecodable` makes it
# `undecodable` (no era at all). So watch decides it in the round that reads the answer where nothing
# can replace it (a stdio line, an HTTP body), and on an event stream once the stream has ended.

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
    "a stdio line that is no answer": ("stdio", lambda cap: (cap.c2s(init(1)), cap.s2c({"jsonrpc": "2.0", "id": 1}))),
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


def test_an_initialize_answered_with_garbage_then_dying_is_decided_at_the_answer(tmp_path: Path) -> None:
    """The death read later makes `analyze`'s outcome `connection-died`, still located at the answer:
    the era reported at the answer is the one it gives."""

    def build(cap: Cap) -> None:
        cap.c2s(init(1))
        cap.s2c({"jsonrpc": "2.0", "id": 1})
        cap.life("exit", code=1, status=1)
        cap.life("server-eof", dt=0.001)

    name, lines = _written(tmp_path / "src", "stdio", build)
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, name, IDLE)
    assert _broken_in(rounds) == [2], rounds
    assert [e for e in _all(rounds) if e["event"] == "withdrawn"] == []
    report = analyzed(live)
    assert [s["init_outcomes"] for s in report["servers"]] == [{"connection-died": 1}]
    assert reported(_all(rounds)) == expected(report)


def _streamed_answer(request: dict[str, Any], headers: list[list[str]], end: dict[str, Any] | None) -> Any:
    """`request` answered on its event stream by an event that is no JSON-RPC answer (paired with it
    by its id), then the stream's end `end` (none: still open)."""

    def build(cap: Cap) -> None:
        cap.http_request("f1", request, headers=headers)
        cap.http_response("f1", 200, streamed=True, headers=[["Content-Type", "text/event-stream"]])
        cap.sse("f1", 0, {"jsonrpc": "2.0", "id": 1})
        if end is not None:
            cap.record({"type": "sse.end", "flow": "f1", "dir": "s2c", "events": 1, **end})

    return build


UNDECODABLE_END: dict[str, Any] = {"how": "clean", "undecodable": "x-custom"}
"""A stream whose bytes stopped decoding after its first event (captures/FORMAT.md, `sse.end`)."""


def test_an_initialize_answered_with_garbage_on_a_stream_that_stops_decoding_is_never_broken(tmp_path: Path) -> None:
    """`analyze` reads the `initialize` as `undecodable` (no era): watch reported `broken` at the event
    and withdrew it a round later."""
    name, lines = _written(tmp_path / "src", "http", _streamed_answer(init(1), PLAIN_HEADERS, UNDECODABLE_END))
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, name, IDLE)
    assert [e for e in _all(rounds) if e["era"] is not None] == [], rounds
    report = analyzed(live)
    assert [s["init_outcomes"] for s in report["servers"]] == [{"undecodable": 1}]
    assert reported(_all(rounds)) == expected(report)


@pytest.mark.parametrize(
    "end", [{"how": "clean"}, {"how": "upstream-reset"}, None], ids=["clean", "upstream-reset", "still-open"]
)
def test_an_initialize_answered_with_garbage_on_a_stream_is_decided_when_the_stream_ends(
    tmp_path: Path, end: dict[str, Any] | None
) -> None:
    """Decided in the round that reads the stream's end (line 5), or once the timeout has passed while
    it stays open, then `broken` at the event (line 4) as `analyze` gives it."""
    name, lines = _written(tmp_path / "src", "http", _streamed_answer(init(1), PLAIN_HEADERS, end))
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, name, IDLE)
    ended = [i for i, line in enumerate(lines) if json.loads(line)["type"] == "sse.end"]
    assert _broken_in(rounds) == (ended or [len(lines)]), rounds  # the round after the timeout: len(lines)
    assert [e for e in _all(rounds) if e["event"] == "withdrawn"] == []
    report = analyzed(live)
    assert [(t["era"], t["evidence"]["line"]) for s in report["servers"] for t in s["timeline"]] == [("broken", 4)]
    assert reported(_all(rounds)) == expected(report)


@pytest.mark.parametrize("end", [UNDECODABLE_END, None], ids=["stops-decoding", "still-open"])
def test_a_probe_answered_with_garbage_on_a_stream_is_decided_at_the_event(
    tmp_path: Path, end: dict[str, Any] | None
) -> None:
    """A probe's garbage answer is its outcome whatever its stream does next (`garbage`, rule 1)."""
    name, lines = _written(tmp_path / "src", "http", _streamed_answer(probe(1), modern_headers(), end))
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, name, IDLE)
    assert _broken_in(rounds) == [3], rounds
    assert [e for e in _all(rounds) if e["event"] == "withdrawn"] == []
    report = analyzed(live)
    assert [s["probe_outcomes"] for s in report["servers"]] == [{"garbage": 1}]
    assert reported(_all(rounds)) == expected(report)


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


def test_an_initialize_answered_with_garbage_on_the_sessions_stream_is_decided_at_the_answer(tmp_path: Path) -> None:
    """The HTTP+SSE transport: the `initialize` POSTed (202 Accepted ends its flow), its answer an event
    on the session's GET stream, which stays open. Nothing can replace that answer any more (`analyze`
    looks for an undecodable answer on the request's flow): decided in the round that reads it."""
    source = next((CORPUS / "legacy-sse-http").glob("*.jsonl"))
    lines = source.read_bytes().splitlines(keepends=True)[:10]
    at = next(i for i, line in enumerate(lines) if '\\"id\\":0,\\"result\\"' in line.decode())
    answer = json.loads(lines[at])
    answer["raw"] = '{"jsonrpc":"2.0","id":0}'  # the initialize's id, but no result nor error
    answer["len"] = len(answer["raw"])
    lines[at] = json.dumps(answer).encode() + b"\n"
    live = tmp_path / "live"
    rounds = watched_rounds(lines, live, source.name, IDLE)
    assert _broken_in(rounds) == [at], rounds
    report = analyzed(live)
    assert [s["init_outcomes"] for s in report["servers"]] == [{"no-answer": 1}]
    assert reported(_all(rounds)) == expected(report)
