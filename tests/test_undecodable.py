"""A body the recorder could not decode (its `Content-Encoding` lies, or is unknown) is reported.

The recorder keeps such a body as it came (`raw_b64`) and marks it `undecodable`; the analyzer cannot
classify what it cannot read, so it says where those bodies are instead of guessing, and reads the rest.
"""

from __future__ import annotations

import base64
from pathlib import Path

import orjson

from analyzer.report import render
from tests.test_messages import Cap, discover_result, modern_headers, probe, run


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
