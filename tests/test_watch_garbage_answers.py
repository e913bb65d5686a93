"""watch and a probe whose answer is garbage: an HTTP body that is no JSON (an HTML page, a line of
text, with status 200: a web server or a framework's catch-all in front of the path), or a stdio line
paired with the probe that is no JSON-RPC answer. `analyze` decides such a probe by that answer (rule 1
of `analyzer.probes`: no later line replaces a request's answer), so watch decides it in the round
that reads the answer: it waited for the probe timeout, as for garbage that is no answer (a banner
on stdout, an event on the answer's stream that is no JSON), which an answer within the timeout still
replaces. What watch reports is what `analyze` gives on the final files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_messages import Cap, discover_result, modern_headers, probe
from tests.test_watch import analyzed, expected, reported, watched_rounds
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
