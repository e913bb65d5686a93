"""HAR files and mitmproxy dumps: written by mitmproxy's own writers (`FlowWriter`, the `savehar`
addon's HAR export), read by the real loader and pipeline.

The flows are mitmproxy test flows (`mitmproxy.test.tflow`) carrying real MCP bodies: a probe
answered over an event stream, a legacy initialize answered in JSON.
"""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import orjson
import pytest
from mitmproxy import http
from mitmproxy.addons.savehar import SaveHar
from mitmproxy.io import FlowWriter, tnetstring
from mitmproxy.test import tflow
from typer.testing import CliRunner

from addon import format as fmt
from addon.errors import ErascopeError
from analyzer.cli import app
from analyzer.foreign import convert
from analyzer.load import extract_file
from analyzer.pipeline import analyze
from analyzer.report import render, render_text, report_dict
from analyzer.sources import foreign_kind
from tests.test_messages import discover_result, err, init, init_result, probe

URL = "http://127.0.0.1:8931/mcp"
ERASCOPE = Path(sys.executable).parent / "erascope"


def _flow(body: dict[str, Any], answer: dict[str, Any], *, sse: bool, start: float) -> http.HTTPFlow:
    f = tflow.tflow(resp=True)
    f.request = http.Request.make("POST", URL, orjson.dumps(body), {"content-type": "application/json"})
    f.request.timestamp_start, f.request.timestamp_end = start, start + 0.01
    data = b"event: message\ndata: " + orjson.dumps(answer) + b"\n\n" if sse else orjson.dumps(answer)
    ctype = "text/event-stream" if sse else "application/json"
    f.response = http.Response.make(200, data, {"content-type": ctype})
    f.response.timestamp_start, f.response.timestamp_end = start + 0.02, start + 0.03
    f.server_conn.peername = ("127.0.0.1", 8931)
    return f


def _flows() -> list[http.HTTPFlow]:
    return [
        _flow(probe(1), discover_result(1), sse=True, start=1796000000.0),
        _flow(init(2), init_result(2), sse=False, start=1796000001.0),
    ]


def _dump(path: Path, flows: list[Any]) -> Path:
    with open(path, "wb") as f:
        writer = FlowWriter(f)
        for flow in flows:
            writer.add(flow)
    return path


def _har(flows: list[http.HTTPFlow]) -> dict[str, Any]:
    return SaveHar().make_har(flows)


def _outcomes(paths: list[Path]) -> tuple[dict[str, Any], dict[str, Any]]:
    report = report_dict(analyze([str(p) for p in paths]))
    return report["totals"]["probe_outcomes"], report["totals"]["init_outcomes"]


def test_a_dump_reads_as_its_flows(tmp_path: Path) -> None:
    path = _dump(tmp_path / "dump.flows", _flows())
    facts = extract_file(str(path))
    assert facts.unit == "flow" and facts.transport == "http"
    assert facts.counts == {"header": 1, "http.request": 2, "http.response": 2, "sse.end": 1, "sse.event": 1}
    assert _outcomes([path]) == ({"discover-result": 1}, {"served": 1})


def test_a_har_reads_as_its_entries_and_gzip_too(tmp_path: Path) -> None:
    har = orjson.dumps(_har(_flows()))
    plain, packed = tmp_path / "x.har", tmp_path / "y.har.gz"
    plain.write_bytes(har)
    packed.write_bytes(gzip.compress(har))
    for path in (plain, packed):
        assert extract_file(str(path)).unit == "entry"
        assert _outcomes([path]) == ({"discover-result": 1}, {"served": 1})
    report = report_dict(analyze([str(plain)]))
    assert {c["identity"]["address"] for c in report["clients"]} == {None}  # a HAR names no client address
    (server,) = report["servers"]
    assert server["peers"] and server["server"] == URL
    assert {e["at"] for e in server["evidence"]} == {f"{plain}#entry=1", f"{plain}#entry=2"}


def test_a_har_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Windows tools save HAR files with a UTF-8 BOM; the kind was told past it, the reader refused it."""
    har = b"\xef\xbb\xbf" + orjson.dumps(_har(_flows()))
    plain, packed = tmp_path / "bom.har", tmp_path / "bom.har.gz"
    plain.write_bytes(har)
    packed.write_bytes(gzip.compress(har))
    for path in (plain, packed):
        proc = subprocess.run([str(ERASCOPE), "analyze", str(path), "-q", "-f", "json"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        report = orjson.loads(proc.stdout)
        assert report["inputs"]["files"] == [str(path)] and "errors" not in report["inputs"]
        assert report["totals"]["probe_outcomes"] == {"discover-result": 1}


def _probes_answer_noted(path: Path, doc: dict[str, Any]) -> None:
    """`doc` written to `path` reads as `_flows()` does, but for its first entry (the probe's), noted."""
    path.write_bytes(orjson.dumps(doc))
    report = report_dict(analyze([str(path)]))
    assert report["totals"]["probe_outcomes"] == {}  # not `no-answer`: the answer is unknown
    assert report["totals"]["init_outcomes"] == {"served": 1}
    (note,) = report["inputs"]["malformed"]
    assert note["line"] == 1 and "not in the HAR" in note["reason"]


def test_a_har_without_the_event_stream_body_notes_it_and_never_says_no_answer(tmp_path: Path) -> None:
    doc = _har(_flows())
    content = doc["log"]["entries"][0]["response"]["content"]
    del content["text"]  # what browsers export for an event stream
    content["size"] = 0
    path = tmp_path / "browser.har"
    _probes_answer_noted(path, doc)
    assert "[1]#entry=1: the response body is not in the HAR" in render_text(analyze([str(path)]), width=200)


@pytest.mark.parametrize("sse", [True, False], ids=["event-stream", "sized-json"])
def test_mitmproxys_har_export_of_a_body_it_streamed_is_noted_not_read_as_empty(tmp_path: Path, sse: bool) -> None:
    """mitmproxy keeps no body it streamed (an event stream a loaded addon taps, `stream_large_bodies`),
    and its HAR export writes such a body as an empty text of size 0, as it writes an empty body: the
    entry was read as an event stream without events (its probe `no-answer`, its server `broken`), or
    as a JSON answer with no body, where its dump notes the flow as not read. An event stream answering
    a request always carries its answer (one that carried nothing cannot be told from one not kept);
    a body its `Content-Length` sizes was not empty."""
    streamed = _flows()[0] if sse else _flow(probe(1), discover_result(1), sse=False, start=1796000000.0)
    assert streamed.response is not None
    streamed.response.headers["content-length"] = str(len(streamed.response.raw_content or b""))
    streamed.response.raw_content = None
    doc = _har([streamed, _flows()[1]])
    assert doc["log"]["entries"][0]["response"]["content"]["text"] == ""  # what mitmproxy exports
    _probes_answer_noted(tmp_path / "streamed.har", doc)


def test_a_har_entry_of_an_empty_body_is_still_read(tmp_path: Path) -> None:
    """A body that was empty: a 202 to a notification, a client's own event stream (`GET`) that carried nothing."""
    empty = _flows()[1]
    assert empty.response is not None
    empty.response.content = b""
    empty.response.headers["content-length"] = "0"
    listening = tflow.tflow(resp=True)
    listening.request = http.Request.make("GET", URL, b"", {"accept": "text/event-stream"})
    listening.response = http.Response.make(200, b"", {"content-type": "text/event-stream"})
    path = tmp_path / "empty.har"
    path.write_bytes(orjson.dumps(_har([empty, listening])))
    facts = extract_file(str(path))
    assert facts.malformed == [] and facts.counts["http.response"] == 2 and facts.counts["sse.end"] == 1


def test_a_har_without_the_request_body_notes_it(tmp_path: Path) -> None:
    # mitmproxy streaming bodies (`stream_large_bodies`) exports `postData.text: null`
    doc = _har(_flows())
    doc["log"]["entries"][0]["request"]["postData"]["text"] = None
    path = tmp_path / "streamed.har"
    path.write_bytes(orjson.dumps(doc))
    report = report_dict(analyze([str(path)]))
    assert report["totals"]["init_outcomes"] == {"served": 1}
    (note,) = report["inputs"]["malformed"]
    assert note["line"] == 1
    assert note["reason"] == "the request body is not in the HAR (the exporter left it out): not read, never guessed"


def test_a_failed_har_entry_is_an_error_not_an_answer(tmp_path: Path) -> None:
    f = _flows()[0]
    f.response = None
    f.error = tflow.terr("Connection refused")
    path = tmp_path / "failed.har"
    path.write_bytes(orjson.dumps(_har([f])))
    facts = extract_file(str(path))
    assert facts.counts.get("http.error") == 1 and "http.response" not in facts.counts
    assert facts.malformed == []


def _failed_probe(writer: str, time_ms: Any, timings: dict[str, float]) -> dict[str, Any]:
    """A HAR with one probe that failed (status 0, Chrome's `_error`), as `writer` writes its times."""
    f = _flows()[0]
    f.response = None
    f.error = tflow.terr("timed out")
    doc = _har([f])
    doc["log"]["creator"]["name"] = writer
    (entry,) = doc["log"]["entries"]
    entry["response"]["_error"] = "net::ERR_TIMED_OUT"
    entry["timings"] = timings
    if time_ms is None:
        del entry["time"]
    else:
        entry["time"] = time_ms
    return doc


_NOT_TIMED: Final = {"blocked": -1, "dns": -1, "connect": -1, "ssl": -1, "send": 0, "wait": 0, "receive": 0}


@pytest.mark.parametrize(
    ("writer", "time_ms", "timings", "failed_after"),
    [
        # Firefox before its HAR summed the timings: `time` is the request's end less its start, the
        # timings of a failed request empty
        ("Firefox", 30000, {}, 30.0),
        # a writer whose timings hold no phase for the failure, `time` its elapsed time
        ("some-gateway", 30000, _NOT_TIMED, 30.0),
        ("some-gateway", 2000, _NOT_TIMED, 2.0),
        # Chrome: a request that failed before any response has no network timing, all of it is `blocked`
        ("WebInspector", 30000, {**_NOT_TIMED, "blocked": 30000}, 30.0),
        # no `time`, or one shorter than the timings: the timings' own layout, as before
        ("some-gateway", None, {**_NOT_TIMED, "wait": 30000}, 30.0),
        ("some-gateway", 5, {**_NOT_TIMED, "wait": 30000}, 30.0),
        # mitmproxy writes no failure time: its `time` is its timings' sum, their `connect` beside the
        # request (the upstream connection may predate it), wait and receive 0
        ("mitmproxy", 30010, {**_NOT_TIMED, "connect": 30000, "send": 10}, 0.01),
    ],
)
def test_a_failed_har_entry_fails_when_its_time_says(
    tmp_path: Path, writer: str, time_ms: Any, timings: dict[str, float], failed_after: float
) -> None:
    """A failed entry's error was put when its response would have begun (its timings but `receive`),
    where the writer's `time` says how long it ran: a probe that failed after 30 s of waiting read as
    failing at once, the connection dying (`connection-died`), not the timeout it cost the client."""
    path = tmp_path / "failed.har"
    path.write_bytes(orjson.dumps(_failed_probe(writer, time_ms, timings)))
    report = report_dict(analyze([str(path)]))
    (failure,) = [f for f in report["findings"] if f["rule"] == "upstream-unreachable"]
    assert failure["ts"] - 1796000000.0 == pytest.approx(failed_after)
    timeouts = [f["details"] for f in report["findings"] if f["rule"] == "probe-timeout"]
    if failed_after > 10:  # the probe timeout
        assert report["totals"]["probe_outcomes"] == {"no-answer": 1}
        assert [(d["cost_s_total"], d["cost_s_max"]) for d in timeouts] == [pytest.approx((failed_after,) * 2)]
    else:
        assert report["totals"]["probe_outcomes"] == {"connection-died": 1}
        assert timeouts == []


@pytest.mark.parametrize("time_ms", ["30000", None, True, [1], {"ms": 1}, "soon"])
def test_an_entry_whose_time_is_no_number_is_read_by_its_timings(tmp_path: Path, time_ms: Any) -> None:
    # mitmproxy's reader divides `time`: a text or an object there made the entry "not read", and the
    # probe it held was lost from the analysis. HAR says `time` is a number; any other is no time, and
    # the entry is read by its timings, as one without `time` is.
    answered = _har(_flows())
    for entry in answered["log"]["entries"]:
        entry["time"] = time_ms
    path = tmp_path / "odd.har"
    path.write_bytes(orjson.dumps(answered))
    facts = extract_file(str(path))
    assert facts.malformed == [] and facts.counts["http.request"] == 2
    assert _outcomes([path]) == ({"discover-result": 1}, {"served": 1})
    failed = tmp_path / "failed.har"
    failed.write_bytes(orjson.dumps(_failed_probe("some-gateway", time_ms, {**_NOT_TIMED, "wait": 30000})))
    report = report_dict(analyze([str(failed)]))
    assert report["totals"]["probe_outcomes"] == {"no-answer": 1}
    (failure,) = [f for f in report["findings"] if f["rule"] == "upstream-unreachable"]
    assert failure["ts"] - 1796000000.0 == pytest.approx(30.0)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ("net::ERR_TIMED_OUT", "timeout"),
        ("net::ERR_CONNECTION_TIMED_OUT", "timeout"),
        ("net::ERR_CONNECTION_REFUSED", "connection-refused"),
        ("net::ERR_NAME_NOT_RESOLVED", "connection-refused"),
        ("net::ERR_ADDRESS_UNREACHABLE", "connection-refused"),
        ("net::ERR_CONNECTION_RESET", "upstream-reset"),
        ("net::ERR_CONNECTION_CLOSED", "upstream-reset"),
        ("net::ERR_EMPTY_RESPONSE", "upstream-reset"),
        # guards: what names no failure of the server's stays `other`
        ("net::ERR_FAILED", "other"),
        ("net::ERR_BLOCKED_BY_CLIENT", "other"),
    ],
)
def test_a_failed_entry_of_chrome_is_read_as_the_failure_it_names(tmp_path: Path, error: str, kind: str) -> None:
    """Chrome writes a failed request's reason as its network error's name (`_error`,
    `net::ERR_TIMED_OUT`): each was `other` in upstream-unreachable, where the same failure recorded by
    the proxy is a timeout, a refused connection or a reset."""
    doc = _failed_probe("WebInspector", 30000, {**_NOT_TIMED, "blocked": 30000})
    doc["log"]["entries"][0]["response"]["_error"] = error
    path = tmp_path / "failed.har"
    path.write_bytes(orjson.dumps(doc))
    report = report_dict(analyze([str(path)]))
    (failure,) = [f for f in report["findings"] if f["rule"] == "upstream-unreachable"]
    assert failure["details"]["kinds"] == [f"{kind} ×1"]
    assert failure["details"]["first_error"] == error


def test_other_flows_are_noted_and_the_http_ones_read(tmp_path: Path) -> None:
    ws = _flows()[1]
    ws.websocket = tflow.twebsocketflow().websocket
    path = _dump(tmp_path / "mixed.flows", [tflow.ttcpflow(), _flows()[0], ws, tflow.tudpflow()])
    facts = extract_file(str(path))
    assert [(b.line, b.reason.split(":")[0]) for b in facts.malformed] == [
        (1, "a tcp flow"),
        (3, "a websocket flow"),
        (4, "a udp flow"),
    ]
    assert facts.counts["http.request"] == 1


def test_flows_whose_bodies_mitmproxy_streamed_are_noted(tmp_path: Path) -> None:
    # `stream_large_bodies`: mitmproxy keeps no body it streamed, the request's or the response's
    request_gone, response_gone = _flows()
    request_gone.request.raw_content = None
    response_gone.response.raw_content = None  # type: ignore[union-attr]
    path = _dump(tmp_path / "streamed.flows", [request_gone, response_gone, _flows()[1]])
    facts = extract_file(str(path))
    assert [(b.line, b.reason) for b in facts.malformed] == [
        (1, "the request body was not kept (streamed by mitmproxy): not read"),
        (2, "the response body was not kept (streamed by mitmproxy): not read"),
    ]
    assert _outcomes([path]) == ({}, {"served": 1})


def test_a_flow_whose_body_mitmproxy_failed_to_read_says_so(tmp_path: Path) -> None:
    """A plain `mitmdump -w` buffering a body the upstream cut keeps the response without its body
    and the failure as the flow's error: that body was not streamed, and the note said it was."""
    cut = _flows()[0]
    assert cut.response is not None
    cut.response.raw_content = None
    cut.error = tflow.terr("HTTP/1 protocol error: peer closed connection without sending complete message body")
    path = _dump(tmp_path / "cut.flows", [cut, _flows()[1]])
    (note,) = extract_file(str(path)).malformed
    assert note.line == 1
    assert note.reason == (
        "the response body was not kept (the flow failed before it was read whole: HTTP/1 protocol error:"
        " peer closed connection without sending complete message body): not read"
    )


def test_a_dump_in_mitmproxy_10s_flow_format_is_read(tmp_path: Path) -> None:
    """Flow format 19 (mitmproxy 10): connections carried a `state`, QUIC was spelled `QUIC`;
    mitmproxy's FlowReader migrates it, as it does every older dump."""
    out = io.BytesIO()
    for flow in _flows():
        state = flow.get_state()
        state["version"] = 19
        for conn in ("client_conn", "server_conn"):
            state[conn]["state"] = 0
        tnetstring.dump(state, out)
    path = tmp_path / "old.mitm"
    path.write_bytes(out.getvalue())
    assert _outcomes([path]) == ({"discover-result": 1}, {"served": 1})


@pytest.mark.parametrize("at", [1, 2])
def test_a_well_framed_flow_mitmproxy_refuses_is_skipped_and_the_rest_read(tmp_path: Path, at: int) -> None:
    """mitmproxy's `FlowReader.stream()` ends at the first flow it cannot build: as the first flow,
    the whole dump was refused; later, every flow after it was lost."""
    bad = _flows()[0].get_state()
    bad["response"]["status_code"] = "abc"
    flows = [tnetstring.dumps(f.get_state()) for f in _flows()]
    path = tmp_path / "bad.flows"
    path.write_bytes(b"".join([*flows[: at - 1], tnetstring.dumps(bad), *flows[at - 1 :]]))
    proc = subprocess.run([str(ERASCOPE), "analyze", str(path), "-q", "-f", "json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = orjson.loads(proc.stdout)
    (malformed,) = report["inputs"]["malformed"]
    assert (malformed["line"], malformed["reason"].split(" (")[0]) == (at, "not a flow mitmproxy can read")
    assert report["totals"]["probe_outcomes"] == {"discover-result": 1}
    assert report["totals"]["init_outcomes"] == {"served": 1}
    assert f"[1]#flow={at}: not a flow mitmproxy can read" in render_text(analyze([str(path)]))


def test_a_flow_damaged_inside_its_frame_is_skipped_and_the_rest_read(tmp_path: Path) -> None:
    """A flow whose outer length holds but whose inside does not parse (a nested length changed)
    still ends where its frame says: the flows after it are read."""
    first, second = (tnetstring.dumps(f.get_state()) for f in _flows())
    damaged = first.replace(b"4:POST,", b"9:POST,", 1)
    assert len(damaged) == len(first) and damaged != first
    path = tmp_path / "damaged.flows"
    path.write_bytes(first + damaged + second)
    facts = extract_file(str(path))
    assert [(b.line, b.reason.split(" (")[0]) for b in facts.malformed] == [(2, "not a flow mitmproxy can read")]
    assert _outcomes([path]) == ({"discover-result": 1}, {"served": 1})


def test_a_length_prefix_beyond_the_file_is_a_cut_not_an_allocation(tmp_path: Path) -> None:
    """`read(999999999999)` allocated the length given before reading: a MemoryError traceback."""
    whole = tnetstring.dumps(_flows()[0].get_state())
    path = tmp_path / "huge.flows"
    path.write_bytes(b"999999999999:abc")
    proc = subprocess.run([str(ERASCOPE), "analyze", str(path), "-q"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "not a mitmproxy flow dump mitmproxy can read (it ends inside a flow: the file was cut short)" in proc.stderr
    path.write_bytes(whole + b"999999999999:abc")
    facts = extract_file(str(path))
    assert [(b.line, b.reason) for b in facts.malformed] == [
        (2, "the dump cannot be read from here on (it ends inside a flow: the file was cut short)")
    ]


def test_a_file_of_tnetstrings_that_are_no_flows_is_not_a_dump(tmp_path: Path) -> None:
    path = tmp_path / "x.flows"
    path.write_bytes(tnetstring.dumps(b"hello") + tnetstring.dumps([1, 2]))
    with pytest.raises(ErascopeError, match="not a mitmproxy flow dump"):
        analyze([str(path)])


def test_a_dump_cut_short_keeps_the_flows_before_the_cut(tmp_path: Path) -> None:
    whole = _dump(tmp_path / "whole.flows", _flows()).read_bytes()
    first = len(_dump(tmp_path / "one.flows", _flows()[:1]).read_bytes())
    path = tmp_path / "cut.flows"
    path.write_bytes(whole[: first + 40])
    facts = extract_file(str(path))
    assert facts.counts["http.request"] == 1
    assert [b.line for b in facts.malformed] == [2]


def test_garbage_named_har_is_an_input_error_and_the_rest_is_read(tmp_path: Path) -> None:
    garbage = tmp_path / "incident.har"
    garbage.write_bytes(b"\x00\x01 not json at all")
    good = _dump(tmp_path / "dump.flows", _flows())
    runner = CliRunner()
    both = runner.invoke(app, ["analyze", str(garbage), str(good), "--format", "json"])
    assert both.exit_code == 0, both.output
    report = orjson.loads(both.stdout)
    assert report["inputs"]["files"] == [str(good)]
    (error,) = report["inputs"]["errors"]
    assert error["file"] == str(garbage) and "not a HAR file" in error["error"]
    alone = runner.invoke(app, ["analyze", str(garbage)])
    assert alone.exit_code == 2
    assert "not a HAR file" in alone.output


@pytest.mark.parametrize("name", ["capture.jsonl", "capture.bin"])
def test_the_kind_is_told_by_content(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(orjson.dumps(_har(_flows()), option=orjson.OPT_INDENT_2))
    assert extract_file(str(path)).unit == "entry"


def test_compact_keeps_what_a_har_entry_and_a_flow_are(tmp_path: Path) -> None:
    from analyzer.compact import compact

    har = tmp_path / "in" / "x.har"
    har.parent.mkdir()
    har.write_bytes(orjson.dumps(_har(_flows())))
    _dump(tmp_path / "in" / "d.flows", _flows())
    inputs = [str(har), str(tmp_path / "in" / "d.flows")]
    compact(inputs, tmp_path / "archive")
    direct = report_dict(analyze(inputs))
    archived = report_dict(analyze([str(tmp_path / "archive")]))
    assert archived["servers"] == direct["servers"] and archived["totals"] == direct["totals"]
    assert any("#flow=" in e["at"] for e in archived["servers"][0]["evidence"])


def test_an_event_stream_cut_by_an_error_ends_and_fails_as_the_recorder_writes_it(tmp_path: Path) -> None:
    f = _flows()[0]
    f.error = tflow.terr("server closed connection")
    path = _dump(tmp_path / "cut-stream.flows", [f])
    facts = extract_file(str(path))
    assert facts.counts["sse.event"] == 1 and facts.counts["sse.end"] == 1
    assert facts.counts.get("http.error") == 1  # the recorder writes both: the stream's end and the flow's error


def test_har_times_and_peer_come_from_the_entry(tmp_path: Path) -> None:
    from analyzer.load import LoadOptions

    doc = _har(_flows()[:1])
    doc["log"]["creator"] = {"name": "WebInspector", "version": "537.36"}  # a browser's: HAR's own timings
    entry = doc["log"]["entries"][0]
    entry["startedDateTime"] = "2026-11-30T01:00:00.000Z"
    entry["timings"] = {"blocked": 5, "dns": -1, "connect": -1, "ssl": -1, "send": 10, "wait": 100, "receive": 20}
    entry["serverIPAddress"] = "10.0.0.7"
    path = tmp_path / "timed.har"
    path.write_bytes(orjson.dumps(doc))
    facts = extract_file(str(path), LoadOptions(condense=False))
    start = 1796000400.0
    times = {str(k): float(t) for k, t in facts.messages.select("kind", "ts").iter_rows()}
    assert times["request"] == pytest.approx(start)
    assert times["response"] == pytest.approx(start + 0.135)  # the event arrives by the end of `receive`
    (server,) = report_dict(analyze([str(path)]))["servers"]
    assert server["peers"] == ["10.0.0.7:8931"]


def test_mitmproxys_har_times_are_its_flows_times(tmp_path: Path) -> None:
    """mitmproxy's HAR export writes `connect` (the upstream connection's setup) beside `send` and
    `wait`, which run from the request's start and end as its flow has them: the connect time was added
    again before the request was sent, and a first request's answer read that much later than its dump
    says (after the client's next request, a probe answered as if late)."""
    flow = _flows()[1]
    flow.server_conn.timestamp_start = flow.request.timestamp_start - 0.5
    flow.server_conn.timestamp_tcp_setup = flow.request.timestamp_start + 0.3
    har, dump = tmp_path / "flow.har", tmp_path / "flow.flows"
    har.write_bytes(orjson.dumps(_har([flow])))
    assert orjson.loads(har.read_bytes())["log"]["entries"][0]["timings"]["connect"] == pytest.approx(800)
    _dump(dump, [flow])
    times = {}
    for path in (har, dump):
        with open(path, "rb") as f:
            records = convert(str(foreign_kind(str(path))), f).records
        times[path.suffix] = [rec[fmt.F_TS] for _, rec in records]
    assert times[".har"] == pytest.approx(times[".flows"], abs=1e-3)
    assert times[".har"] == pytest.approx([flow.request.timestamp_start, flow.response.timestamp_start], abs=1e-3)


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/Los_Angeles"])
def test_a_start_time_without_an_offset_reads_the_same_on_every_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zone: str
) -> None:
    """HAR 1.2 says `startedDateTime` carries an offset; a tool that leaves it out wrote no zone, and
    the machine reading it must not choose one: a CI job's report would depend on where it runs."""
    import time

    from analyzer.load import LoadOptions

    doc = _har(_flows()[:1])
    doc["log"]["entries"][0]["startedDateTime"] = "2026-11-30T01:00:00.000"
    path = tmp_path / "naive.har"
    path.write_bytes(orjson.dumps(doc))
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        facts = extract_file(str(path), LoadOptions(condense=False))
    finally:
        monkeypatch.undo()
        time.tzset()
    times = {str(k): float(t) for k, t in facts.messages.select("kind", "ts").iter_rows()}
    assert times["request"] == pytest.approx(1796000400.0)  # read as UTC


def test_a_real_mitmproxy_10_dump_is_read() -> None:
    """A dump written by mitmproxy 10.4.2 itself (flow format 20; `tests/data/README.md` says how)."""
    path = Path(__file__).parent / "data" / "mitmproxy-10.4.2.flows"
    a = analyze([str(path)])
    assert [(v.era, v.modern_support) for v in a.servers] == [("modern", "yes")]
    assert a.probes.get_column("outcome").to_list() == ["discover-result"]
    assert a.inputs.malformed == [] and a.findings == []
    doc = orjson.loads(render(a, "json"))
    assert all("#flow=" in e["at"] for s in doc["servers"] for e in s["evidence"])


def test_a_lone_surrogate_escape_in_one_entry_loses_no_entry(tmp_path: Path) -> None:
    """JSON allows `\\ud800` (JavaScript's JSON.stringify writes a lone surrogate so): orjson refused
    the whole document for it, and every other entry was lost with it; then the entry holding it was.
    (tests/test_foreign_hostile.py: the other strings an entry is read from.)"""
    doc = _har(_flows())
    doc["log"]["entries"][0]["request"]["headers"].append({"name": "x-odd", "value": "SURROGATE"})
    path = tmp_path / "surrogate.har"
    path.write_bytes(orjson.dumps(doc).replace(b"SURROGATE", b"\\ud800"))
    proc = subprocess.run([str(ERASCOPE), "analyze", str(path), "-q", "-f", "json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = orjson.loads(proc.stdout)
    assert report["inputs"]["malformed"] == []
    assert report["totals"]["probe_outcomes"] == {"discover-result": 1}
    assert report["totals"]["init_outcomes"] == {"served": 1}


@pytest.mark.parametrize("text", [b'{"log": {"entries": ' + b"[" * 100_000, b'{"log": {"entries": [NaN]}}'])
def test_json_orjson_refuses_stays_refused(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "odd.har"
    path.write_bytes(text)
    proc = subprocess.run([str(ERASCOPE), "analyze", str(path), "-q"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "not a HAR file" in proc.stderr


def test_a_status_text_beyond_latin_1_does_not_lose_the_entry(tmp_path: Path) -> None:
    """A reason phrase is whatever the server sent, and a browser writes it decoded: mitmproxy's
    `reason` takes only Latin-1 text, so the probe and its answer were not read at all."""
    doc = _har(_flows())
    doc["log"]["entries"][0]["response"]["statusText"] = "OK ✓"
    path = tmp_path / "reason.har"
    path.write_bytes(orjson.dumps(doc))
    facts = extract_file(str(path))
    assert facts.malformed == []
    assert _outcomes([path]) == ({"discover-result": 1}, {"served": 1})


def _http_sse_session(
    minutes: float, base: str = URL.removesuffix("/mcp"), session: str = "abc", posted: float = 0.0
) -> list[http.HTTPFlow]:
    """The deprecated HTTP+SSE transport as a proxy keeps it whole: a `GET {base}/sse` stream open for
    `minutes`, carrying the endpoint and every answer, and the client's POSTs answered 202, the first
    `posted` seconds later than one second into the stream."""
    start = 1796000000.0
    stream = tflow.tflow(resp=True)
    stream.request = http.Request.make("GET", f"{base}/sse", b"", {"accept": "text/event-stream"})
    stream.request.timestamp_start, stream.request.timestamp_end = start, start + 0.001
    events = f"event: endpoint\ndata: {urlsplit(base).path}/messages/?session_id={session}\n\n".encode()
    events += b"event: message\ndata: " + orjson.dumps(err(1, -32601, "Method not found")) + b"\n\n"
    events += b"event: message\ndata: " + orjson.dumps(init_result(2)) + b"\n\n"
    stream.response = http.Response.make(200, events, {"content-type": "text/event-stream"})
    stream.response.timestamp_start, stream.response.timestamp_end = start + 0.002, start + minutes * 60
    flows = [stream]
    for n, body in enumerate((probe(1), init(2)), start=1):
        post = tflow.tflow(resp=True)
        headers = {"content-type": "application/json"}
        if body["method"] == "server/discover":
            headers |= {"mcp-protocol-version": "2026-07-28", "mcp-method": "server/discover"}
        post.request = http.Request.make("POST", f"{base}/messages/?session_id={session}", orjson.dumps(body), headers)
        at = start + n + posted
        post.request.timestamp_start, post.request.timestamp_end = at, at + 0.001
        post.response = http.Response.make(202, b"Accepted", {"content-type": "text/plain"})
        post.response.timestamp_start = post.response.timestamp_end = at + 0.002
        flows.append(post)
    return flows


@pytest.mark.parametrize("kind", ["har", "flows"])
def test_answers_on_a_long_http_sse_stream_are_not_taken_for_late(tmp_path: Path, kind: str) -> None:
    """A stream kept whole says when it ended, not when each event passed: every answer was stamped
    at the stream's end, so a session longer than the probe timeout read `no-answer` and its server
    `broken`, where the capture of the same traffic reads a prompt legacy answer."""
    for minutes in (0.05, 5):
        path = tmp_path / f"{minutes}.{kind}"
        if kind == "har":
            path.write_bytes(orjson.dumps(_har(_http_sse_session(minutes))))
        else:
            _dump(path, _http_sse_session(minutes))
        report = report_dict(analyze([str(path)]))
        assert report["totals"]["probe_outcomes"] == {"legacy-answer": 1}, minutes
        assert report["totals"]["init_outcomes"] == {"served": 1}, minutes
        assert [s["era"] for s in report["servers"] if s["probes"]] == ["legacy"], minutes


@pytest.mark.parametrize("kind", ["har", "flows"])
def test_answers_on_a_long_stream_are_placed_after_their_own_sessions_requests(tmp_path: Path, kind: str) -> None:
    """Clients number their requests from 1, so two HTTP+SSE sessions in one file (two servers, or two
    clients of one) send the same ids: an answer on one session's stream was placed just after the
    other session's request of its id, sent earlier, which put it before its own request (that request
    `no-answer`, its server `broken`), where the capture of the same traffic reads prompt answers."""
    base = URL.removesuffix("/mcp")
    flows = [
        *_http_sse_session(5, base + "/a", "aaa", posted=0.5),
        *_http_sse_session(5, base + "/b", "bbb"),
    ]
    path = tmp_path / f"two.{kind}"
    if kind == "har":
        path.write_bytes(orjson.dumps(_har(flows)))
    else:
        _dump(path, flows)
    report = report_dict(analyze([str(path)]))
    servers = {s["server"]: (s["era"], s["probe_outcomes"], s["init_outcomes"]) for s in report["servers"]}
    assert servers == {
        f"{base}/{name}/sse": ("legacy", {"legacy-answer": 1}, {"served": 1}) for name in ("a", "b")
    }


@pytest.mark.parametrize("kind", ["har", "flows"])
@pytest.mark.parametrize("stream_last", [False, True])
def test_the_http_sse_transports_posts_are_the_server_of_the_stream_that_announced_them(
    tmp_path: Path, kind: str, stream_last: bool
) -> None:
    """Keyed by origin and path, the POSTs to `/messages/` and the `/sse` stream answering them were
    two servers: one with the requests, the other with the answers' versions and the transport. A
    dump writes a flow when it ends, so the stream that announced the endpoint may come last."""
    flows = _http_sse_session(0.05)
    if stream_last:
        flows = [*flows[1:], flows[0]]
    path = tmp_path / f"session.{kind}"
    if kind == "har":
        path.write_bytes(orjson.dumps(_har(flows)))
    else:
        _dump(path, flows)
    (server,) = report_dict(analyze([str(path)]))["servers"]
    assert server["server"] == URL.removesuffix("/mcp") + "/sse"
    assert (server["transport"], server["era"], server["versions"]) == ("http+sse", "legacy", ["2025-11-25"])
    assert (server["probe_outcomes"], server["init_outcomes"]) == ({"legacy-answer": 1}, {"served": 1})


@pytest.mark.parametrize("stream", ["left-out", "not-in-the-file"])
@pytest.mark.parametrize("kind", ["har", "flows"])
def test_requests_answered_on_an_event_stream_the_file_does_not_hold_are_noted(
    tmp_path: Path, kind: str, stream: str
) -> None:
    """The HTTP+SSE transport answers every POST (202 Accepted) on its session's `GET /sse` stream. A
    browser's HAR leaves that stream's body out, a dump may not have kept it, a browser opened its
    tools after the stream: the POSTs were read, and with their answers gone they read `no-answer`,
    their server `broken`. A request accepted for an answer on its session's stream, of a session no
    stream in the file names, is noted as not read. The POSTs of a session whose stream the file
    holds are read as before."""
    base = URL.removesuffix("/mcp")
    flows = [*_http_sse_session(0.05, base + "/a", "aaa"), *_http_sse_session(0.05, base + "/b", "bbb")]
    lost = flows[0]
    assert lost.response is not None
    if stream == "not-in-the-file":
        flows = flows[1:]
    path = tmp_path / f"lost.{kind}"
    if kind == "har":
        doc = _har(flows)
        if stream == "left-out":
            del doc["log"]["entries"][0]["response"]["content"]["text"]  # what browsers export
        path.write_bytes(orjson.dumps(doc))
    else:
        lost.response.raw_content = None
        _dump(path, flows)
    report = report_dict(analyze([str(path)]))
    assert {s["server"]: (s["era"], s["probe_outcomes"], s["init_outcomes"]) for s in report["servers"]} == {
        f"{base}/b/sse": ("legacy", {"legacy-answer": 1}, {"served": 1})
    }
    notes = {m["line"]: m["reason"] for m in report["inputs"]["malformed"]}
    posts = [2, 3] if stream == "left-out" else [1, 2]
    assert sorted(notes) == ([1] if stream == "left-out" else []) + posts
    assert all("its answer comes on an event stream this file does not hold" in notes[n] for n in posts)


def test_mitmproxys_har_export_of_bytes_that_are_no_utf_8_is_read_as_its_dump_is(tmp_path: Path) -> None:
    """mitmproxy's HAR export (`save.har`, `hardump`) writes a header byte that is no UTF-8 as a lone
    surrogate (`caf\\udce9`): the whole file was refused, then the entry, where the dump of the same
    flows is read whole."""
    flows = _flows()
    flows[0].request.headers[b"user-agent"] = b"caf\xe9-client/1"
    flows[1].response.headers[b"x-served-by"] = b"n\xf6de-2"  # type: ignore[union-attr]
    har = tmp_path / "export.har"
    SaveHar().export_har(flows, str(har))
    assert b"\\udce9" in har.read_bytes()
    dump = _dump(tmp_path / "same.flows", flows)
    facts = extract_file(str(har))
    assert facts.malformed == []
    assert facts.counts == extract_file(str(dump)).counts
    assert _outcomes([har]) == _outcomes([dump]) == ({"discover-result": 1}, {"served": 1})


def test_mitmproxys_compressed_har_export_is_read(tmp_path: Path) -> None:
    """`hardump=FILE.zhar` (and `save.har` to such a name) makes mitmproxy write the HAR zlib
    compressed: it was skipped as not an erascope capture. Cut short, it is an input error."""
    path = tmp_path / "export.zhar"
    SaveHar().export_har(_flows(), str(path))
    assert not path.read_bytes().startswith(b"{")
    proc = subprocess.run([str(ERASCOPE), "analyze", str(path), "-q", "-f", "json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = orjson.loads(proc.stdout)
    assert report["inputs"]["files"] == [str(path)]
    assert report["totals"]["probe_outcomes"] == {"discover-result": 1}
    assert {e["at"] for s in report["servers"] for e in s["evidence"]} == {f"{path}#entry=1", f"{path}#entry=2"}
    cut = tmp_path / "cut.zhar"
    cut.write_bytes(path.read_bytes()[:-20])
    proc = subprocess.run([str(ERASCOPE), "analyze", str(cut), "-q"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "not a HAR file" in proc.stderr


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_copy_of_a_har_or_dump_is_read_once(tmp_path: Path, jobs: int) -> None:
    """A capture given twice is read once (its header names its run); a HAR file or a dump has no
    header, so a copy of one (`export (1).har`, the `.gz` a ticket holds) was read again and every
    probe, initialize and finding counted twice."""
    har = orjson.dumps(_har(_flows()))
    (tmp_path / "a.har").write_bytes(har)
    (tmp_path / "export (1).har").write_bytes(har)
    (tmp_path / "c.har.gz").write_bytes(gzip.compress(har))
    dump = _dump(tmp_path / "d.flows", _flows()).read_bytes()
    (tmp_path / "e.flows").write_bytes(dump)
    other = tmp_path / "other.har"  # the same requests, another export: not a copy
    other.write_bytes(orjson.dumps(_har(_flows()[:1])))
    names = ["a.har", "c.har.gz", "d.flows", "e.flows", "export (1).har", "other.har"]
    proc = subprocess.run(
        [str(ERASCOPE), "analyze", "-q", "-f", "json", "--jobs", str(jobs), *(str(tmp_path / n) for n in names)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = orjson.loads(proc.stdout)
    assert report["inputs"]["files"] == [str(tmp_path / n) for n in ("a.har", "d.flows", "other.har")]
    assert sorted((Path(d["file"]).name, Path(d["duplicate_of"]).name) for d in report["inputs"]["duplicates"]) == [
        ("c.har.gz", "a.har"),
        ("e.flows", "d.flows"),
        ("export (1).har", "a.har"),
    ]
    assert report["totals"]["probe_outcomes"] == {"discover-result": 3}
    assert report["totals"]["init_outcomes"] == {"served": 2}


def test_firefoxs_connection_field_is_a_port_not_a_connection(tmp_path: Path) -> None:
    """Firefox writes the server's port in an entry's `connection` (`"443"`), where Chrome writes its
    socket's id: every request of a Firefox HAR to one port read as one connection."""
    flows = [_flow(probe(1), err(1, -32601, "nf"), sse=False, start=1796000000.0 + n) for n in range(3)]
    doc = _har(flows)
    doc["log"]["creator"] = {"name": "Firefox", "version": "140.0"}
    for entry in doc["log"]["entries"]:
        entry["connection"] = "8931"
    path = tmp_path / "firefox.har"
    path.write_bytes(orjson.dumps(doc))
    (server,) = report_dict(analyze([str(path)]))["servers"]
    assert server["connections"] == 3


# --- what is read whole is bounded ---------------------------------------------------------------
class _Counted(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.given = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.given += len(data)
        return data


def test_a_har_beyond_the_bound_is_refused_before_it_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from analyzer import foreign

    har = orjson.dumps(_har(_flows()))
    monkeypatch.setattr(foreign, "MAX_WHOLE_BYTES", len(har))
    assert len(foreign.read_har(_Counted(har)).records) > 0  # at the bound: read
    padded = _Counted(har + b" " * 100_000)
    with pytest.raises(foreign.ForeignError, match=f"a HAR document larger than {len(har)} bytes"):
        foreign.read_har(padded)
    assert padded.given <= len(har) + 1


def test_a_flow_beyond_the_bound_is_noted_and_the_others_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from analyzer import foreign

    small = _flows()
    big = _flow(probe(7), discover_result(7), sse=False, start=1796000000.5)
    big.response.content = b" " * 200_000 + big.response.content  # type: ignore[union-attr]
    path = _dump(tmp_path / "dump.flows", [small[0], big, small[1]])
    monkeypatch.setattr(foreign, "MAX_WHOLE_BYTES", 100_000)
    facts = extract_file(str(path))
    assert [(b.line, b.reason) for b in facts.malformed] == [
        (2, "a flow larger than 100000 bytes: not read (erascope reads a flow whole)")
    ]
    assert _outcomes([path]) == ({"discover-result": 1}, {"served": 1})


def test_a_compressed_har_bomb_is_a_clear_error_in_bounded_memory(tmp_path: Path) -> None:
    """A few megabytes of gzip holding a HAR document of twice the bound in blanks: read whole (before
    the bound), it took 2.2 GB of memory at 1 GiB."""
    import os
    import zlib

    from analyzer.foreign import MAX_WHOLE_BYTES

    packer = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: the gzip format
    path = tmp_path / "bomb.har.gz"
    with open(path, "wb") as f:
        f.write(packer.compress(b'{"log":{"entries":['))
        blanks = b" " * (1 << 20)
        for _ in range(2 * MAX_WHOLE_BYTES // len(blanks)):
            f.write(packer.compress(blanks))
        f.write(packer.compress(b"]}}") + packer.flush())
    proc = subprocess.Popen([str(ERASCOPE), "analyze", str(path), "-q"], stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert f"a HAR document larger than {MAX_WHOLE_BYTES} bytes" in err
    assert usage.ru_maxrss < (MAX_WHOLE_BYTES + (256 << 20)) // 1024  # KiB: what the bound lets in, not the document


@pytest.mark.parametrize(
    ("name", "keep"),
    [("export.zhar", 6), ("export.zhar", -20), ("export.har.gz", 12), ("export.har.gz", -20), ("export.flows.gz", 12)],
)
def test_a_compressed_har_or_dump_cut_short_says_so(tmp_path: Path, name: str, keep: int) -> None:
    """A compressed HAR file cut short was "not a HAR file (… unexpected end of data)", or, cut
    within its first bytes, like a dump, "not an erascope capture": the cut went unsaid. (A dump
    cut later keeps the flows before the cut, noted at the next: `test_a_dump_cut_short_…`.)"""
    whole = tmp_path / f"whole-{name}"  # mitmproxy compresses what it names .zhar
    if name.endswith(".zhar"):
        SaveHar().export_har(_flows(), str(whole))
    elif ".har" in name:
        whole.write_bytes(gzip.compress(orjson.dumps(_har(_flows()))))
    else:
        whole.write_bytes(gzip.compress(_dump(tmp_path / "d.flows", _flows()).read_bytes()))
    path = tmp_path / name
    path.write_bytes(whole.read_bytes()[:keep])
    proc = subprocess.run([str(ERASCOPE), "analyze", str(path), "-q"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "stream ends early (the file was cut short)" in proc.stderr, proc.stderr
    assert "not an erascope capture" not in proc.stderr


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_base64_body_is_read_exactly_or_not_at_all(tmp_path: Path, wrapped: bool) -> None:
    """mitmproxy's HAR reader decodes `encoding: base64` leniently: characters outside the alphabet
    were dropped and the rest read as the body, a body the file does not hold. Whitespace (line
    wrapping) is no such guess."""
    import base64

    doc = _har(_flows())
    content = doc["log"]["entries"][1]["response"]["content"]
    text = base64.b64encode(orjson.dumps(init_result(2))).decode()
    if wrapped:
        text = "\n".join(text[i : i + 16] for i in range(0, len(text), 16))
    content.update(text=text, encoding="base64")
    good = tmp_path / "good.har"
    good.write_bytes(orjson.dumps(doc))
    assert _outcomes([good]) == ({"discover-result": 1}, {"served": 1})
    content["text"] = text[:8] + "*!" + text[8:]
    bad = tmp_path / "bad.har"
    bad.write_bytes(orjson.dumps(doc))
    facts = extract_file(str(bad))
    assert [(b.line, b.reason) for b in facts.malformed] == [
        (2, "the response body is not valid base64 (its encoding says it is): not read, never guessed")
    ]
    assert _outcomes([bad]) == ({"discover-result": 1}, {})


def _spelled(flows: list[http.HTTPFlow], spellings: dict[bytes, bytes]) -> list[http.HTTPFlow]:
    """`flows` with their bodies' text respelled (`"id":1,` → `"id":"r\\ud800",`): text orjson would
    not write (a lone surrogate's escape), as a client or server may send it."""
    for flow in flows:
        for message in (flow.request, flow.response):
            if message is not None and message.content:
                for old, new in spellings.items():
                    message.content = message.content.replace(old, new)
    return flows


@pytest.mark.parametrize(
    ("escape", "text"),
    [(b"\\ud800", "\\ud800"), (b"\\udc00", "\\udc00"), (b"\\ud800\\u0041", "\\ud800A")],
    ids=["high", "low", "high-before-other"],
)
@pytest.mark.parametrize("kind", ["har", "flows"])
def test_answers_holding_a_lone_surrogate_escape_are_placed_on_a_long_stream(
    tmp_path: Path, kind: str, escape: bytes, text: str
) -> None:
    """JSON allows `\\ud800` inside a message (a probe's id so spelled, an error message, a client's
    name), and the analyzer reads it as its escape's text: the answers' ids were read with orjson,
    which refuses the escape, so such an answer kept the stream's end, minutes late, and the probe
    read `no-answer`, where the same traffic spelled otherwise reads a prompt legacy answer. A low
    surrogate's escape alone, or a high one's before another escape, read so too: the analyzer
    refused those messages as well."""
    lone = {
        b'"id":1,': b'"id":"r' + escape + b'",',
        b'"id":2,': b'"id":"r\\u0000",',
        b"Method not found": b"Method " + escape + b" not found",
        b'"name":"test-client"': b'"name":"c' + escape + b'"',
    }
    plain = {b'"id":1,': b'"id":"r1",', b'"id":2,': b'"id":"r2",'}
    reports = {}
    for name, spellings in (("lone", lone), ("plain", plain)):
        flows = _spelled(_http_sse_session(5), spellings)
        path = tmp_path / f"{name}.{kind}"
        if kind == "har":
            path.write_bytes(orjson.dumps(_har(flows)))
        else:
            _dump(path, flows)
        reports[name] = report_dict(analyze([str(path)]))
    for report in reports.values():
        assert report["inputs"]["malformed"] == []
        assert report["totals"]["probe_outcomes"] == {"legacy-answer": 1}
        assert report["totals"]["init_outcomes"] == {"served": 1}
        assert [s["era"] for s in report["servers"] if s["probes"]] == ["legacy"]
    assert "c" + text in {c["identity"]["name"] for c in reports["lone"]["clients"]}
