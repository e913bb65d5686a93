"""A compressed event stream, end to end: a real `mcp` 2.3.0 server behind a front that gzips its event
streams (as nginx with `gzip_types text/event-stream` does), the real `erascope record http` in front of
that, and the real client. The recorder used to parse the compressed bytes as events: it recorded none,
and `analyze` called the modern server `broken`.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from addon import format as fmt
from analyzer.pipeline import analyze
from tests.test_http_e2e import BIN, Proc, by_flow, messages, read_capture, record_http, session, start_server

pytestmark = pytest.mark.e2e

GZIP_FRONT = """
from mitmproxy import http

def response(flow: http.HTTPFlow) -> None:
    if flow.response.headers.get("content-type", "").startswith("text/event-stream"):
        flow.response.encode("gzip")
"""


def _through_front(procs: list[Proc], env: dict[str, str], tmp_path: Path, front_script: str) -> Path:
    """The real server behind a mitmproxy front running `front_script`, the real recorder in front of
    that; the real client's session through them all, which must read as it does without them. Returns
    the capture directory."""
    port = start_server(procs, env, sys.executable)
    (tmp_path / "front.py").write_text(front_script)
    front = Proc(
        [str(BIN / "mitmdump"), "--mode", f"reverse:http://127.0.0.1:{port}", "--listen-host", "127.0.0.1",
         "--listen-port", "0", "--set", f"confdir={tmp_path / 'front-conf'}", "-s", str(tmp_path / "front.py")],
        env, merge_stderr=True,
    )  # fmt: skip
    procs.append(front)
    front_port = int(front.wait_for(r"listening at 127\.0\.0\.1:(\d+)").group(1))
    capdir = tmp_path / "caps"
    cli, via = record_http(procs, f"http://127.0.0.1:{front_port}/mcp", capdir, env)

    expected = asyncio.run(session(f"http://127.0.0.1:{port}/mcp", "auto"))
    assert asyncio.run(session(via, "auto")) == expected  # the client reads the streams alike
    assert cli.stop(signal.SIGINT) == 0
    return capdir


def test_a_gzipped_event_stream_is_recorded_as_its_events(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    capdir = _through_front(procs, clean_env, tmp_path, GZIP_FRONT)
    flows = list(by_flow(read_capture(capdir)).values())
    streamed = [f for f in flows if any(r["type"] == fmt.SSE_END for r in f)]
    assert streamed
    for f in streamed:
        resp = next(r for r in f if r["type"] == fmt.HTTP_RESPONSE)
        assert ["content-encoding", "gzip"] in resp["headers"]
        assert messages(f) and all("jsonrpc" in m for m in messages(f))
        assert "undecodable" not in f[-1] and f[-1]["events"] == len(messages(f))

    [server] = analyze([capdir]).servers
    assert (server.era, dict(server.probe_outcomes)) == ("modern", {"discover-result": 1})


MISLABELLING_FRONT = """
from mitmproxy import http

def response(flow: http.HTTPFlow) -> None:
    if flow.response.headers.get("content-type", "").startswith(("text/event-stream", "application/json")):
        flow.response.headers["content-encoding"] = "x-custom"  # a label no decoder knows; the bytes are plain
"""


def test_answers_labelled_with_an_unknown_encoding_are_read_where_they_can_be(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """A front that labels the answers (bodies and event streams) with an encoding nobody knows; the
    client (httpx skips unknown encodings) reads them and goes modern. The recorder marks them all
    `undecodable`: a body that is text is kept as text and read (the probe's DiscoverResult), an
    event stream is not parsed (its events could be compressed bytes). The probe's answer is read."""
    capdir = _through_front(procs, clean_env, tmp_path, MISLABELLING_FRONT)

    records = read_capture(capdir)
    bodies = [r for r in records if r["type"] == fmt.HTTP_RESPONSE and not r["streamed"]]
    ends = [r for r in records if r["type"] == fmt.SSE_END]
    assert bodies and ends and all(r["undecodable"] == "x-custom" for r in bodies + ends)
    assert [r["events"] for r in records if r["type"] == fmt.SSE_END] == [0]
    [server] = analyze([capdir]).servers
    assert (server.era, dict(server.probe_outcomes)) == ("modern", {"discover-result": 1})
