"""HAR files and mitmproxy dumps as someone else's files: what they hold never reaches a report
unredacted through a note about why an entry or flow was not read, and a small compressed dump
cannot make the analysis hold gigabytes.

The notes (`inputs.malformed`, and the input error when nothing could be read) are written to every
report format and to stderr; the records themselves go through the recorder's redaction, so a note
quoting the data it failed on (mitmproxy's tnetstring parser quotes the rest of a damaged flow, its
headers as they were sent) bypassed it.
"""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from mitmproxy import http
from mitmproxy.io import FlowWriter
from mitmproxy.test import tflow
from typer.testing import CliRunner

from analyzer.cli import app
from tests.test_foreign import _flows, _har
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
