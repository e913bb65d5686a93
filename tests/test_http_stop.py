"""Stopping the HTTP recorder with streams open: one capture, every flow once, the true cause.

A real `mitmdump -s addon/http_recorder.py` and a real `erascope record http` sit in front of a real
`mcp` server whose slow tool keeps an SSE stream open; the proxy gets SIGINT or SIGTERM while the
client still reads the stream. mitmproxy runs the addons' `done()` before it cancels the open
connections, whose `error` hooks then fire: those must not open a second capture file.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path

import orjson
import pytest

from addon import format as fmt
from tests.test_http_e2e import (
    BIN,
    MODERN_HEADERS,
    Proc,
    by_flow,
    read_first_event,
    slow_call,
    start_mitmdump,
    start_server,
)

pytestmark = pytest.mark.e2e




def _start_cli(procs: list[Proc], env: dict[str, str], port: int, capdir: Path) -> tuple[Proc, str]:
    cli = Proc([str(BIN / "erascope"), "record", "http", "--upstream", f"http://127.0.0.1:{port}/mcp",
                "--listen", "127.0.0.1:0", "--out", str(capdir)], env)  # fmt: skip
    procs.append(cli)
    return cli, cli.wait_for(r"listening on (http://\S+) -> ").group(1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("runner", ["mitmdump", "record-http"])
def test_stop_with_open_streams_writes_one_capture(
    procs: list[Proc],
    clean_env: dict[str, str],
    tmp_path: Path,
    sig: int,
    runner: str,
) -> None:
    import httpx2

    port = start_server(procs, clean_env, sys.executable, "--slow", "60")
    capdir = tmp_path / "caps"
    if runner == "mitmdump":
        proxy = start_mitmdump(procs, clean_env, port, capdir)
        url = f"http://127.0.0.1:{proxy.port}/mcp"  # type: ignore[attr-defined]
    else:
        proxy, url = _start_cli(procs, clean_env, port, capdir)
    headers = {**MODERN_HEADERS, "mcp-method": "tools/call", "mcp-name": "slow"}
    with contextlib.ExitStack() as stack:
        http = stack.enter_context(httpx2.Client(timeout=30))
        readers = []  # held: dropping a reader would close its stream
        for i in (1, 2):  # two streams open at once, each past its first event
            resp = stack.enter_context(http.stream("POST", url, content=slow_call(i), headers=headers))
            assert resp.headers["content-type"].startswith("text/event-stream")
            readers.append(resp.iter_raw())
            read_first_event(readers[-1])
        assert proxy.stop(sig) == 0
        stack.pop_all()  # the proxy is gone; the client side just drops its sockets

    files = sorted(capdir.glob("*.jsonl"))
    assert len(files) == 1, [f.name for f in files]
    if runner == "record-http":
        wrote = [line for line in proxy.lines if line.startswith("erascope: wrote ")]
        assert wrote == [f"erascope: wrote {files[0]}"], proxy.lines
    records = [orjson.loads(line) for line in files[0].read_bytes().splitlines()]
    assert [r["type"] for r in records].count(fmt.HEADER) == 1
    flows = list(by_flow(records).values())
    assert len(flows) == 2
    for recs in flows:
        types = [r["type"] for r in recs]
        assert types == ["http.request", "http.response", "sse.event", "sse.end", "http.error"], recs
        assert recs[-2]["how"] == "recorder-stopped", recs[-2]
        assert recs[-1]["kind"] == "recorder-stopped" and recs[-1]["phase"] == "response", recs[-1]
    assert records[-1]["type"] == fmt.PART_END and records[-1]["reason"] == "closed"  # the chain's closing record
    assert [r["seq"] for r in records[1:-1]] == list(range(1, len(records) - 1))
