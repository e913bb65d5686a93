"""HAR files and mitmproxy dumps as someone else's files: what they hold never reaches a report
unredacted through a note about why an entry or flow was not read, and a small compressed dump
cannot make the analysis hold gigabytes.

The notes (`inputs.malformed`, and the input error when nothing could be read) are written to every
report format and to stderr; the records themselves go through the recorder's redaction, so a note
quoting the data it failed on (mitmproxy's tnetstring parser quotes the rest of a damaged flow, its
headers as they were sent) bypassed it.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any, Final

import orjson
import pytest
from mitmproxy import http
from mitmproxy.io import FlowWriter
from mitmproxy.test import tflow
from typer.testing import CliRunner

from analyzer import foreign
from analyzer.cli import app
from analyzer.load import extract_file
from analyzer.pipeline import analyze
from analyzer.report import report_dict
from tests.test_foreign import URL, _dump, _flows, _har
from tests.test_messages import init, init_result

SECRET = "sk-live-TOPSECRET-0123456789"


def _flow(i: int) -> http.HTTPFlow:
    f = tflow.tflow(resp=True)
    headers = {"content-type": "application/json", "authorization": f"Bearer {SECRET}", "cookie": f"sid={SECRET}"}
    f.request = http.Request.make("POST", "http://127.0.0.1:8931/mcp", orjson.dumps(init(i)), headers)
    f.request.timestamp_start, f.request.timestamp_end = 1796000000.0 + i, 1796000000.01 + i
    f.response = http.Response.make(200, orjson.dumps(init_result(i)), {"content-type": "application/json"})
    f.response.timestamp_start, f.response.timestamp_end = 1796000000.02 + i, 1796000000.03 + i
    return f


def _damaged_dump(path: Path, *, flow: int) -> Path:
    """Two flows with a bearer token, one byte of `flow`'s `authorization` header name damaged."""
    out = io.BytesIO()
    writer = FlowWriter(out)
    for i in (1, 2):
        writer.add(_flow(i))
    data = out.getvalue()
    at = -1
    for _ in range(flow):
        at = data.index(b"13:authorization", at + 1)
    path.write_bytes(data[:at] + b"1x" + data[at + 2 :])
    return path


@pytest.mark.parametrize("fmt", ["json", "text", "markdown"])
def test_a_damaged_flow_is_noted_without_quoting_its_headers(tmp_path: Path, fmt: str) -> None:
    path = _damaged_dump(tmp_path / "damaged.flows", flow=2)
    result = CliRunner().invoke(app, ["analyze", str(path), "-f", fmt, "-q"])
    assert result.exit_code == 0, result.output
    assert SECRET not in result.stdout and SECRET not in result.stderr
    assert "not a flow mitmproxy can read" in result.stdout  # the flow is still named, with why


def test_a_dump_damaged_in_its_first_flow_is_refused_without_quoting_it(tmp_path: Path) -> None:
    path = _damaged_dump(tmp_path / "damaged.flows", flow=1)
    result = CliRunner().invoke(app, ["analyze", str(path), "-q"])
    assert result.exit_code == 2
    assert "not a mitmproxy flow dump mitmproxy can read" in result.stderr
    assert SECRET not in result.stderr and SECRET not in result.stdout


def test_a_har_url_whose_password_urllib_takes_for_a_port_is_noted_without_it(tmp_path: Path) -> None:
    """`http://user:pa/ss@host/` (a password with an unencoded `/`, `?` or `#`): urllib reads `pa` as
    the port and quotes it in its error."""
    doc = _har(_flows())
    doc["log"]["entries"][1]["request"]["url"] = "http://admin:hunter2-s3cret/x@127.0.0.1:8931/mcp"
    path = tmp_path / "export.har"
    path.write_bytes(orjson.dumps(doc))
    result = CliRunner().invoke(app, ["analyze", str(path), "-f", "json", "-q"])
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.stdout
    (note,) = orjson.loads(result.stdout)["inputs"]["malformed"]
    assert note["line"] == 2 and note["reason"].startswith("not a HAR entry mitmproxy can read")


def test_a_dump_whose_flows_hold_more_than_the_bound_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each flow was bounded, the dump not: every flow's records are held until the file is read,
    so 560 KB of gzip (64 flows of 8 MB) took 2.7 GB, and a few megabytes exhaust the machine."""
    from analyzer import foreign

    out = io.BytesIO()
    writer = FlowWriter(out)
    for i in range(1, 6):
        writer.add(_flow(i))
    data = out.getvalue()
    monkeypatch.setattr(foreign, "MAX_DUMP_BYTES", len(data))
    assert len(foreign.read_flows(io.BytesIO(data)).records) == 10  # at the bound: read
    writer.add(_flow(6))
    with pytest.raises(foreign.ForeignError, match="a mitmproxy dump whose flows hold more than"):
        foreign.read_flows(io.BytesIO(out.getvalue()))


def test_a_flow_written_twice_is_read_once_not_left_unanswered(tmp_path: Path) -> None:
    """Dumps appended to (`mitmdump -w +FILE`) or concatenated (`cat a.flows b.flows`) can hold a flow
    twice, with its id: the copy's request was paired with no answer, a false `no-answer` probe."""
    real = Path(__file__).parent / "data" / "mitmproxy-10.4.2.flows"
    twice = tmp_path / "twice.flows"
    twice.write_bytes(real.read_bytes() * 2)
    result = CliRunner().invoke(app, ["analyze", str(twice), "-f", "json", "-q"])
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    assert report["totals"]["probe_outcomes"] == {"discover-result": 1}
    assert report["inputs"]["malformed"] and all(
        m["reason"].startswith("the same flow as flow ") for m in report["inputs"]["malformed"]
    )


# --- a lone surrogate escape outside the payload -----------------------------------------------------
def _status_text(entry: dict[str, Any]) -> None:
    entry["response"]["statusText"] = "OKLONE"


def _response_error(entry: dict[str, Any]) -> None:  # Chrome's failed request
    entry["response"].update(status=0, statusText="", _error="net::ERR_CONNECTION_RESETLONE")


def _entry_error(entry: dict[str, Any]) -> None:
    entry["response"].update(status=0, statusText="")
    entry["_error"] = "net::ERR_CONNECTION_RESETLONE"


def _url(entry: dict[str, Any]) -> None:  # the query: the server key leaves it out
    entry["request"]["url"] += "?q=LONE"


def _request_header(entry: dict[str, Any]) -> None:
    entry["request"]["headers"].append({"name": "x-LONE", "value": "vLONE"})


def _response_header(entry: dict[str, Any]) -> None:
    entry["response"]["headers"].append({"name": "x-LONE", "value": "vLONE"})


def _server_ip(entry: dict[str, Any]) -> None:
    entry["serverIPAddress"] = "127.0.0.1LONE"


def _connection(entry: dict[str, Any]) -> None:
    entry["connection"] = "7LONE"


def _request_body(entry: dict[str, Any]) -> None:  # inside a JSON string of the message
    post = entry["request"]["postData"]
    post["text"] = post["text"].replace('"test-client"', '"test-clientLONE"')


def _response_body(entry: dict[str, Any]) -> None:
    content = entry["response"]["content"]
    content["text"] = content["text"].replace('"srv"', '"srvLONE"')


SPOTS = {
    f.__name__.lstrip("_"): f
    for f in (
        _status_text,
        _response_error,
        _entry_error,
        _url,
        _request_header,
        _response_header,
        _server_ip,
        _connection,
        _request_body,
        _response_body,
    )
}


def _har_spelled(path: Path, spot: str, escape: bytes) -> Path:
    """The probe (entry 1) and the initialize (entry 2), `escape` in one of entry 2's strings."""
    doc = _har(_flows())
    SPOTS[spot](doc["log"]["entries"][1])
    assert orjson.dumps(doc).count(b"LONE") >= 1
    path.write_bytes(orjson.dumps(doc).replace(b"LONE", escape))
    return path


def _report(path: Path) -> dict[str, Any]:
    return report_dict(analyze([str(path)]))


def _read(path: Path) -> tuple[dict[str, Any], dict[str, int], int]:
    facts = extract_file(str(path))
    return _report(path), facts.counts, facts.messages.height


def _lines(path: Path) -> bytes:
    """The capture lines the HAR file reads as."""
    return b"\n".join(line for _, line in foreign.lines(foreign.read_har(io.BytesIO(path.read_bytes()))))


@pytest.mark.parametrize("escape", [b"\\ud800", b"\\uDC00"], ids=["high", "low-capitals"])
@pytest.mark.parametrize("spot", list(SPOTS))
def test_a_lone_surrogate_escape_outside_the_payload_loses_no_message(tmp_path: Path, spot: str, escape: bytes) -> None:
    """JSON allows `\\ud800` in any string (JavaScript's JSON.stringify writes one; a gateway cutting an
    error message in the middle of a pair leaves one): the entry holding it was noted as not read, its
    MCP messages lost. It reads as the same entry without it (the same servers and messages), and as
    the entry holding the escape's text in small letters, as the analyzer reads one in a capture (in a
    body, the message then holds the escape, and reads as a capture's message holding it)."""
    as_text = b"\\" + escape.lower()
    lone = _har_spelled(tmp_path / "lone.har", spot, escape)
    plain = _har_spelled(tmp_path / "plain.har", spot, b"")
    text = _har_spelled(tmp_path / "text.har", spot, as_text)
    (report, counts, messages), (want, want_counts, want_messages) = _read(lone), _read(plain)
    assert report["inputs"]["malformed"] == want["inputs"]["malformed"] == []
    assert (counts, messages) == (want_counts, want_messages)
    assert [s["server"] for s in report["servers"]] == [s["server"] for s in want["servers"]] == [URL]
    assert report["totals"]["probe_outcomes"] == want["totals"]["probe_outcomes"] == {"discover-result": 1}
    outcomes = ("probe_outcomes", "init_outcomes")
    assert [report["totals"][k] for k in outcomes] == [_report(text)["totals"][k] for k in outcomes]
    if not spot.endswith("_body"):
        assert report["totals"]["init_outcomes"] == want["totals"]["init_outcomes"]
    assert orjson.dumps(escape.lower().decode())[1:-1] in _lines(lone)  # the text, as a record holds it


@pytest.mark.parametrize("spot", ["response_error", "entry_error", "server_ip", "connection"])
def test_a_surrogate_mitmproxy_writes_for_a_byte_reads_as_text_where_no_bytes_are(tmp_path: Path, spot: str) -> None:
    """mitmproxy's HAR export writes a byte that is no UTF-8 as U+DC80–U+DCFF (`\\udce9`), read back as
    that byte in the wire's fields; an error message, an address or a connection are text, where it
    lost the entry."""
    lone = _har_spelled(tmp_path / "lone.har", spot, b"\\udce9")
    plain = _har_spelled(tmp_path / "plain.har", spot, b"")
    (report, counts, messages), (want, want_counts, want_messages) = _read(lone), _read(plain)
    assert report["inputs"]["malformed"] == []
    assert (counts, messages) == (want_counts, want_messages)
    assert report["totals"]["init_outcomes"] == want["totals"]["init_outcomes"]
    assert b"\\\\udce9" in _lines(lone)


def test_a_lone_surrogate_beside_mitmproxys_bytes_loses_no_entry(tmp_path: Path) -> None:
    """One document, a header byte mitmproxy's export wrote (`\\udce9`, read as the byte, as its dump
    reads it) and a lone surrogate escape in another entry's reason phrase: both entries are read."""
    flows = _flows()
    flows[0].request.headers[b"user-agent"] = b"caf\xe9-client/1"
    doc = _har(flows)
    doc["log"]["entries"][1]["response"]["statusText"] = "OKLONE"
    path = tmp_path / "mixed.har"
    path.write_bytes(json.dumps(doc).encode().replace(b"LONE", b"\\ud800"))  # as mitmproxy writes it
    assert b"caf\\udce9" in path.read_bytes() and b"OK\\ud800" in path.read_bytes()
    converted = foreign.read_har(io.BytesIO(path.read_bytes()))
    assert converted.unread == []
    records = [rec for _, rec in converted.records]
    (probe_request,) = [r for r in records if r["type"] == "http.request" and "discover" in r["raw"]]
    assert ["user-agent", "café-client/1"] in [list(h) for h in probe_request["headers"]]
    assert [r["reason"] for r in records if r["type"] == "http.response"] == ["OK", "OK\\ud800"]
    report = _report(path)
    assert report["inputs"]["malformed"] == []
    assert (report["totals"]["probe_outcomes"], report["totals"]["init_outcomes"]) == (
        {"discover-result": 1},
        {"served": 1},
    )


def test_a_clean_har_is_read_by_orjson_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The standard library's parser and the surrogate search are for a document orjson refused only."""
    data = orjson.dumps(_har(_flows()))

    def refused(*_: Any, **__: Any) -> Any:
        raise AssertionError("a clean HAR went through the standard library's parser")

    monkeypatch.setattr(foreign.json, "loads", refused)
    converted = foreign.read_har(io.BytesIO(data))
    assert converted.unread == [] and len(converted.records) == 6


# --- a URL that is not ASCII -------------------------------------------------------------------------
TARGETS = {
    # name: (the request target's bytes, its ASCII twin, the server key and the `url` the recorder writes)
    "query": (b"/mcp?name=caf\xc3\xa9", b"/mcp?name=cafe", URL, URL + "?name=café"),
    "path": (b"/caf\xc3\xa9/mcp", b"/cafe/mcp", "http://127.0.0.1:8931/café/mcp", "http://127.0.0.1:8931/café/mcp"),
    "byte": (b"/mcp\xe9?name=caf\xe9", b"/mcpe?name=cafe", URL + "%E9", URL + "%E9?name=caf%E9"),
}


def _targeted(target: bytes) -> list[http.HTTPFlow]:
    flows = _flows()
    for flow in flows:
        flow.request.path = target
    return flows


def _messages(path: Path) -> list[tuple[Any, ...]]:
    """What each message is, in no order: a HAR's times are mitmproxy's export's, in milliseconds."""
    return sorted(extract_file(str(path)).messages.select("server", "dir", "kind", "id", "method").rows(), key=repr)


def _request_urls(converted: foreign.Converted) -> list[tuple[Any, ...]]:
    return [(r["server"], r["url"], r.get("url_b64")) for _, r in converted.records if r["type"] == "http.request"]


@pytest.mark.parametrize(
    ("name", "writer"),
    [("query", "escaped"), ("query", "utf-8"), ("path", "escaped"), ("path", "utf-8"), ("byte", "escaped")],
)
def test_a_har_url_that_is_not_ascii_loses_no_message(tmp_path: Path, name: str, writer: str) -> None:
    """mitmproxy's HAR reader takes only an ASCII URL: an entry whose URL held `é` (an IRI path or query
    value, as browsers and tools write one) or the `\\udce9` mitmproxy's export writes for a byte that
    is no UTF-8 was noted as not read, its messages lost. It reads as the recorder would have recorded
    the request (the URL's text as the target's UTF-8, such a byte as that byte), and as the dump of
    the same flows reads: the same server key, messages, `url` and `url_b64`. A byte has no UTF-8
    spelling: only an escape (`caf\\udce9`) writes it."""
    target, ascii_target, key, url = TARGETS[name]
    doc = _har(_targeted(target))
    har = tmp_path / "export.har"
    # the standard library escapes every character that is not ASCII (`caf\u00e9`), as mitmproxy's export does
    har.write_bytes(json.dumps(doc).encode() if writer == "escaped" else orjson.dumps(doc))
    twin = tmp_path / "twin.har"
    twin.write_bytes(orjson.dumps(_har(_targeted(ascii_target))))
    dump = _dump(tmp_path / "dump.flows", _targeted(target))

    report = _report(har)
    assert report["inputs"]["malformed"] == []
    assert [s["server"] for s in report["servers"]] == [key]
    assert report["totals"]["probe_outcomes"] == {"discover-result": 1}
    assert report["totals"]["init_outcomes"] == _report(twin)["totals"]["init_outcomes"] == {"served": 1}
    messages = _messages(har)
    assert len(messages) == len(_messages(twin)) == 6
    assert messages == _messages(dump)
    urls = _request_urls(foreign.read_har(io.BytesIO(har.read_bytes())))
    assert urls == _request_urls(foreign.read_flows(io.BytesIO(dump.read_bytes())))
    b64 = base64.b64encode(b"http://127.0.0.1:8931" + target).decode() if name == "byte" else None
    assert urls == [(key, url, b64)] * 2


@pytest.mark.parametrize("writer", ["escaped", "utf-8"])
@pytest.mark.parametrize(
    ("wire", "host"), [("xn--caf-dma.example", "café.example"), ("xn--bcher-kva.example", "bücher.example")]
)
def test_a_har_url_whose_host_is_not_ascii_is_read_as_its_wire_host(
    tmp_path: Path, writer: str, wire: str, host: str
) -> None:
    """mitmproxy gives a host sent in its IDNA form (`xn--caf-dma.example`) as text (`café.example`),
    and its HAR export writes that text in the URL, as tools that write an IRI do: such an entry was
    noted as not read, its messages lost. It reads as the recorder recorded the request, as the
    dump of the same flows reads: the same server key, messages and `url`."""
    flows = _flows()
    for flow in flows:
        flow.request.host = wire.encode().decode("idna")  # as mitmproxy reads the host's bytes off the wire
    assert flows[0].request.host == host
    doc = _har(flows)
    assert all(f"//{host}:8931/" in entry["request"]["url"] for entry in doc["log"]["entries"])
    har = tmp_path / "export.har"
    har.write_bytes(json.dumps(doc).encode() if writer == "escaped" else orjson.dumps(doc))
    dump = _dump(tmp_path / "dump.flows", flows)

    report = _report(har)
    assert report["inputs"]["malformed"] == []
    assert [s["server"] for s in report["servers"]] == [f"http://{host}:8931/mcp"] == _servers(dump)
    assert report["totals"]["probe_outcomes"] == {"discover-result": 1}
    assert report["totals"]["init_outcomes"] == {"served": 1}
    assert _messages(har) == _messages(dump)
    urls = _request_urls(foreign.read_har(io.BytesIO(har.read_bytes())))
    assert urls == _request_urls(foreign.read_flows(io.BytesIO(dump.read_bytes())))


def _servers(path: Path) -> list[str]:
    return [s["server"] for s in _report(path)["servers"]]


@pytest.mark.parametrize("url", ["https://mcp.\u00e4" + "a" * 70 + ".com/mcp", "https://z\u00f6@mcp.example.com/mcp"])
def test_a_har_url_that_no_host_can_be_made_of_is_noted(tmp_path: Path, url: str) -> None:
    """A host IDNA refuses (a label over 63 characters) stays a located entry that could not be read,
    and so does text in the URL's user part; the rest of the file is read."""
    doc = _har(_flows())
    doc["log"]["entries"][1]["request"]["url"] = "URL"
    har = tmp_path / "export.har"
    har.write_bytes(orjson.dumps(doc).replace(b'"URL"', b'"' + url.encode() + b'"'))
    report = _report(har)
    assert [m["line"] for m in report["inputs"]["malformed"]] == [2]
    assert report["totals"]["probe_outcomes"] == {"discover-result": 1}


def test_a_har_url_that_is_ascii_is_read_as_mitmproxy_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean URL goes to mitmproxy's own reader as it is: no other reading of it is paid."""
    calls: list[str] = []
    real = foreign.request_to_flow

    def seen(entry: dict[str, Any]) -> http.HTTPFlow:
        calls.append(entry["request"]["url"])
        return real(entry)

    monkeypatch.setattr(foreign, "request_to_flow", seen)
    doc = _har(_flows())
    doc["log"]["entries"][1]["request"]["url"] = URL + "?a=%C3%A9;p#f"
    converted = foreign.read_har(io.BytesIO(orjson.dumps(doc)))
    assert converted.unread == []
    assert calls == [URL, URL + "?a=%C3%A9;p#f"]
    assert _request_urls(converted)[1] == (URL, URL + "?a=%C3%A9;p#f", None)


def _set(*path: str | int, to: Any) -> Any:
    """A change to an entry: the field at `path` set `to` (removed when `to` is `_GONE`)."""

    def change(entry: dict[str, Any]) -> None:
        *parents, last = path
        node: Any = entry
        for key in parents:
            node = node[key]
        if to is _GONE:
            del node[last]
        else:
            node[last] = to

    return change


def _header(where: str, header: Any) -> Any:
    def change(entry: dict[str, Any]) -> None:
        entry[where]["headers"].append(header)

    return change


_GONE: Final = object()

ODD_OPTIONAL: Final = {
    "server-ip-object": (_set("serverIPAddress", to={"ip": "127.0.0.1"}), []),
    "server-ip-number": (_set("serverIPAddress", to=2130706433), []),
    "server-ip-list": (_set("serverIPAddress", to=["127.0.0.1"]), []),
    "timings-list": (_set("timings", to=[1, 2]), []),
    "timings-text": (_set("timings", to="fast"), []),
    "request-version-gone": (_set("request", "httpVersion", to=_GONE), []),
    "response-version-gone": (_set("response", "httpVersion", to=_GONE), []),
    "status-text": (_set("response", "status", to="200"), []),
    "status-float": (_set("response", "status", to=200.0), []),
    "status-text-spaced": (_set("response", "status", to=" 200 "), []),
    "request-header-value-null": (_header("request", {"name": "x-odd", "value": None}), []),
    "request-header-value-number": (_header("request", {"name": "x-odd", "value": 5}), [["x-odd", "5"]]),
    "request-header-name-null": (_header("request", {"name": None, "value": "x"}), []),
    "request-header-no-value": (_header("request", {"name": "x-odd"}), []),
    "request-header-null": (_header("request", None), []),
    # mitmproxy's reader takes a header that is a list as Slack's [name, value]: a text's first two
    # characters were a header ("x-odd" read as `x: -`)
    "request-header-text": (_header("request", "x-odd"), []),
    "response-header-value-null": (_header("response", {"name": "x-odd", "value": None}), []),
    "response-header-value-object": (_header("response", {"name": "x-odd", "value": {"a": 1}}), []),
    # guards: fields mitmproxy's reader never reads, or reads whatever their type
    "connection-number": (_set("connection", to=7), []),
    "cookies-null": (_set("request", "cookies", to=None), []),
    "response-cookies-null": (_set("response", "cookies", to=None), []),
    "query-string-null": (_set("request", "queryString", to=None), []),
    "request-version-number": (_set("request", "httpVersion", to=1.1), []),
    "status-text-null": (_set("response", "statusText", to=None), []),
    "redirect-null": (_set("response", "redirectURL", to=None), []),
    "sizes-text": (_set("response", "bodySize", to="221"), []),
    "cache-null": (_set("cache", to=None), []),
    "timings-null": (_set("timings", to=None), []),
}


def _kept(converted: foreign.Converted) -> list[tuple[Any, ...]]:
    """What each record holds that the analysis reads: its type, method, status, headers and body."""
    return [
        (n, r["type"], r.get("method"), r.get("status"), r.get("headers"), r.get("raw")) for n, r in converted.records
    ]


@pytest.mark.parametrize("odd", list(ODD_OPTIONAL))
def test_an_optional_har_field_of_another_type_loses_no_entry(tmp_path: Path, odd: str) -> None:
    """Every entry given a field the analysis does not need, of a type HAR does not give it (an exporter's
    slip, or anyone's file): mitmproxy's reader refused the entry for it, and the probe and the
    initialize in it were lost (noted as not read). Each reads as the clean file, the field left out."""
    change, odd_headers = ODD_OPTIONAL[odd]
    clean = _har(_flows())
    doc = _har(_flows())
    for entry in doc["log"]["entries"]:
        change(entry)
    path = tmp_path / "odd.har"
    path.write_bytes(orjson.dumps(doc))
    converted = foreign.read_har(io.BytesIO(path.read_bytes()))
    assert converted.unread == []
    expected = _kept(foreign.read_har(io.BytesIO(orjson.dumps(clean))))
    if odd_headers:
        expected = [(*r[:4], [*r[4], *odd_headers], r[5]) if r[1] == "http.request" else r for r in expected]
    assert _kept(converted) == expected
    report, counts, _ = _read(path)
    assert report["inputs"]["malformed"] == []
    assert counts["http.request"] == 2 and counts["sse.event"] == 1
    assert report["totals"]["probe_outcomes"] == {"discover-result": 1}
    assert report["totals"]["init_outcomes"] == {"served": 1}


NEEDED: Final = {
    "status-word": (_set("response", "status", to="OK"), "status is no number"),
    "status-true": (_set("response", "status", to=True), "status is no number"),
    "status-object": (_set("response", "status", to={"code": 200}), "status is no number"),
    "status-beyond-http": (_set("response", "status", to=1e30), "status is no number"),
    "status-digits-beyond-ascii": (_set("response", "status", to="２００"), "status is no number"),
    "headers-object": (_set("response", "headers", to={"content-type": "text/event-stream"}), "headers are no list"),
    "headers-null": (_set("request", "headers", to=None), "headers are no list"),
    "content-type-null": (_header("response", {"name": "Content-Type", "value": None}), "content-type header"),
    "session-null": (_header("request", {"name": "Mcp-Session-Id", "value": None}), "mcp-session-id header"),
    "post-data-null": (_set("request", "postData", to=None), "request body is not in the HAR"),
    # guards: mitmproxy's reader refuses these itself
    "method-number": (_set("request", "method", to=5), "mitmproxy can read"),
    "url-number": (_set("request", "url", to=5), "mitmproxy can read"),
    "started-number": (_set("startedDateTime", to=1796000000), "mitmproxy can read"),
    "body-number": (_set("request", "postData", "text", to=5), "mitmproxy can read"),
}


@pytest.mark.parametrize("field", list(NEEDED))
def test_a_needed_har_field_of_another_type_is_noted_at_its_entry(tmp_path: Path, field: str) -> None:
    """A field the reading depends on (the status, the headers a message is read by, the method, the
    URL, the start, a body) that cannot be used leaves its entry noted as not read, located, with why;
    never read without it (a status `true` read as 1; headers that are an object read as headers named
    by their names' first letters; a request with no body), and the other entry read."""
    change, why = NEEDED[field]
    doc = _har(_flows())
    change(doc["log"]["entries"][0])
    path = tmp_path / "needed.har"
    path.write_bytes(orjson.dumps(doc))
    report = _report(path)
    (note,) = report["inputs"]["malformed"]
    assert note["line"] == 1 and why in note["reason"], note
    assert report["totals"]["probe_outcomes"] == {}  # not `no-answer`: its answer is unknown
    assert report["totals"]["init_outcomes"] == {"served": 1}


def test_timings_beyond_any_float_lose_no_entry(tmp_path: Path) -> None:
    """A document orjson refuses (here for a lone surrogate escape) is read by the standard library,
    which reads `1e400` as infinite and an integer of 400 digits whole: such a timing is no time, and
    the entry is read by its other timings, as one of a timing that is text is."""
    doc = _har(_flows())
    doc["log"]["entries"][0]["timings"] = {"wait": "HUGE", "receive": "INFINITE", "send": 10}
    doc["log"]["entries"][1]["request"]["headers"].append({"name": "x-odd", "value": "LONE"})
    text = orjson.dumps(doc).replace(b'"HUGE"', b"1" + b"0" * 400).replace(b'"INFINITE"', b"1e400")
    path = tmp_path / "huge.har"
    path.write_bytes(text.replace(b"LONE", b"\\ud800"))
    converted = foreign.read_har(io.BytesIO(path.read_bytes()))
    assert converted.unread == []
    start = next(r["ts"] for n, r in converted.records if n == 1 and r["type"] == "http.request")
    answered = next(r["ts"] for n, r in converted.records if n == 1 and r["type"] == "http.response")
    assert answered - start == pytest.approx(0.01)  # the send alone: no wait, no receive
    assert _report(path)["totals"]["probe_outcomes"] == {"discover-result": 1}
