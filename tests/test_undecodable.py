"""A body the recorder could not decode (its `Content-Encoding` lies, or is unknown) is reported.

The recorder keeps such a body as it came (`raw_b64`) and marks it `undecodable`; the analyzer cannot
classify what it cannot read, so it says where those bodies are instead of guessing, and reads the rest.
"""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest

from analyzer.report import render
from tests.test_messages import Cap, discover_result, init, modern_headers, probe, run


def _capture(tmp_path: Path) -> Path:
    cap = Cap(tmp_path, transport="http")
    wire = b"\x1f\x8b\x00not really gzip"
    cap.record({"type": "http.request", "flow": "f1", "dir": "c2s", "method": "POST", "url": "http://127.0.0.1/mcp",
                "headers": [["Content-Encoding", "gzip"], *modern_headers()],
                "raw_b64": base64.b64encode(wire).decode(), "len": len(wire), "undecodable": "gzip"})  # fmt: skip
    cap.http_response("f1", 400, "bad body")
    cap.http_request("f2", probe(2), headers=modern_headers())
    cap.http_response("f2", 200, discover_result(2))
    return cap.close()


def test_undecodable_bodies_are_located_in_the_input_notes(tmp_path: Path) -> None:
    path = _capture(tmp_path)
    a = run(path)
    assert a.inputs.undecodable == [(str(path), 2, 1)]
    assert [v.era for v in a.servers] == ["modern"]  # the readable traffic is analyzed as before
    assert a.probes.height == 1
    doc = orjson.loads(render(a, "json"))
    assert doc["inputs"]["undecodable"] == [{"file": str(path), "line": 2, "count": 1}]
    for fmt in ("text", "markdown"):
        text = " ".join(render(a, fmt, width=200).split())
        assert "1 HTTP body that does not decode with its Content-Encoding (read as captured, not classified)" in text


def test_a_clean_report_has_no_undecodable_key(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, discover_result(1))
    doc = orjson.loads(render(run(cap.close()), "json"))
    assert "undecodable" not in doc["inputs"]


def test_files_read_together_keep_their_own_lines(tmp_path: Path) -> None:
    # small captures are read in batches: each file's note still names its own line
    first = Cap(tmp_path / "a", transport="http", server="a")
    first.http_request("f1", probe(1), headers=modern_headers())
    first.http_response("f1", 200, discover_result(1))
    first.close()
    second = _capture(tmp_path / "b")
    a = run(tmp_path)
    assert a.inputs.undecodable == [(str(second), 2, 1)]


def _probe_answered_unreadably(tmp_path: Path, method: str, streamed: bool) -> Path:
    """A probe (or `initialize`) answered 200 in a `Content-Encoding` the recorder cannot decode: a
    body kept as it came, or an event stream whose events it could not parse."""
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1) if method == "server/discover" else init(1), headers=modern_headers(method))
    content_type = "text/event-stream" if streamed else "application/json"
    headers = [["Content-Type", content_type], ["Content-Encoding", "x-custom"]]
    if streamed:
        cap.http_response("f1", 200, streamed=True, headers=headers)
        cap.record({"type": "sse.end", "flow": "f1", "dir": "s2c", "how": "clean", "events": 0, "incomplete": False,
                    "undecodable": "x-custom"})  # fmt: skip
    else:
        wire = b"\x00\x01 compressed"
        cap.record({"type": "http.response", "flow": "f1", "dir": "s2c", "status": 200, "streamed": False,
                    "peer": "10.0.0.1:8000", "headers": headers, "raw_b64": base64.b64encode(wire).decode(),
                    "len": len(wire), "undecodable": "x-custom"})  # fmt: skip
    return cap.close()


@pytest.mark.parametrize("streamed", [False, True], ids=["body", "event-stream"])
@pytest.mark.parametrize("method", ["server/discover", "initialize"])
def test_an_answer_that_does_not_decode_is_answered_and_proves_no_era(
    tmp_path: Path, method: str, streamed: bool
) -> None:
    # The server answered; only the recorder cannot read it. It read as `no-answer`, and the server
    # as `broken` (silence); the client may well have read a DiscoverResult.
    a = run(_probe_answered_unreadably(tmp_path, method, streamed))
    rows = a.probes if method == "server/discover" else a.inits
    assert rows.get_column("outcome").to_list() == ["undecodable"]
    assert rows.get_column("answer_line").to_list() == [4 if streamed else 3]  # the stream's end, or the body
    [v] = a.servers
    assert v.era == "unknown"
    assert not [f for f in a.findings if f.rule in ("probe-timeout", "misread-crash")]


def test_the_archive_reports_the_undecodable_bodies_as_the_captures_do(tmp_path: Path) -> None:
    # `compact` left the count and line out of the archive's entries: its report lacked the note.
    from typer.testing import CliRunner

    from analyzer.cli import app

    _capture(tmp_path / "caps")
    runner = CliRunner()
    assert runner.invoke(app, ["compact", str(tmp_path / "caps"), "--out", str(tmp_path / "arch")]).exit_code == 0
    jsonl, archived = (
        runner.invoke(app, ["analyze", str(tmp_path / source), "-f", "json", "-q"]) for source in ("caps", "arch")
    )
    assert orjson.loads(jsonl.stdout)["inputs"]["undecodable"]
    assert archived.stdout == jsonl.stdout


def test_a_late_answer_that_does_not_decode_counts_like_a_late_answer_that_does(tmp_path: Path) -> None:
    # Answered at 12 s, the client sending nothing else before: a readable answer counts (the client
    # waited for it), so an unreadable one is `undecodable` too, not `no-answer`.
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    wire = b"\x00\x01 compressed"
    answer = {"type": "http.response", "flow": "f1", "dir": "s2c", "status": 200, "streamed": False,
              "peer": "10.0.0.1:8000", "headers": [["Content-Encoding", "x-custom"]],
              "raw_b64": base64.b64encode(wire).decode(), "len": len(wire), "undecodable": "x-custom"}  # fmt: skip
    cap.record(answer, dt=12.0)
    a = run(cap.close())
    assert a.probes.get_column("outcome").to_list() == ["undecodable"]
    assert "probe-timeout" not in {f.rule for f in a.findings}
