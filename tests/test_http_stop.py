"""Stopping the HTTP recorder with streams open: one capture, every flow once, the true cause.

A real `mitmdump -s addon/http_recorder.py` and a real `erascope record http` sit in front of a real
`mcp` server whose slow tool keeps an SSE stream open; the proxy gets SIGINT or SIGTERM while the
client still reads the stream. mitmproxy runs the addons' `done()` before it cancels the open
connections, whose `error` hooks then fire: those must not open a second capture file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from addon import format as fmt
from addon.http_proxy import quiet_cancelled_connections
from tests.test_http_e2e import (
    BIN,
    META,
    MODERN_HEADERS,
    Proc,
    by_flow,
    read_capture,
    read_first_event,
    record_http,
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


def _answered_keep_alive(port: int, headers: dict[str, str]) -> socket.socket:
    """A raw HTTP/1.1 client connection that sent one `echo` call and read its whole answer; the
    socket is returned still open, so the proxy holds an idle keep-alive connection."""
    params = {"name": "echo", "arguments": {"text": "hi"}, "_meta": META}
    body = orjson.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params})
    head = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "mcp-name": "echo"}.items())
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{head}content-length: {len(body)}\r\n\r\n".encode() + body
    )
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    status, _, rest = data.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 200 "), status
    (length,) = [int(line[15:]) for line in status.lower().split(b"\r\n") if line.startswith(b"content-length:")]
    while len(rest) < length:
        rest += sock.recv(65536)
    assert b'"hi"' in rest, rest
    return sock


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stop_with_open_connections_prints_no_traceback(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path, sig: int
) -> None:
    """A normal stop with client connections open (one idle after its answer, one reading an SSE
    stream) exits 0 with the capture right and nothing on stderr that reads like a crash: Python
    3.12's asyncio logged `CancelledError` tracebacks for every connection task cancelled at exit."""
    import httpx2

    port = start_server(procs, clean_env, sys.executable, "--slow", "60")
    capdir = tmp_path / "caps"
    proxy, url = record_http(procs, f"http://127.0.0.1:{port}/mcp", capdir, clean_env)
    proxy_port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    headers = {**MODERN_HEADERS, "mcp-method": "tools/call"}
    with contextlib.ExitStack() as stack:
        idle = stack.enter_context(_answered_keep_alive(proxy_port, headers))
        http = stack.enter_context(httpx2.Client(timeout=30))
        slow_headers = {**headers, "mcp-name": "slow"}
        resp = stack.enter_context(http.stream("POST", url, content=slow_call(1), headers=slow_headers))
        assert resp.headers["content-type"].startswith("text/event-stream")
        chunks = resp.iter_raw()  # held: dropping it would close the stream
        read_first_event(chunks)
        assert proxy.stop(sig) == 0
        assert idle.recv(1) == b""  # the idle connection was open until the proxy went away
        stack.pop_all()  # the client side just drops its sockets

    records = read_capture(capdir)
    assert records[-1]["type"] == fmt.PART_END and records[-1]["reason"] == "closed"
    flows = list(by_flow(records).values())
    assert [[r["type"] for r in recs] for recs in flows] == [
        ["http.request", "http.response"],
        ["http.request", "http.response", "sse.event", "sse.end", "http.error"],
    ], flows
    assert flows[1][-2]["how"] == "recorder-stopped" and flows[1][-1]["kind"] == "recorder-stopped", flows[1]
    assert [line for line in proxy.lines if line.startswith("erascope: wrote ")] == [
        f"erascope: wrote {sorted(capdir.glob('*.jsonl'))[0]}"
    ], proxy.lines
    assert not [line for line in proxy.lines if "Traceback" in line or "ERROR" in line], "\n".join(proxy.lines)


ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]


def _leave_connection_open(
    handler: ExceptionHandler | None, on_client: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
) -> None:
    """What `record http` does to a connection at a stop, in miniature: an asyncio server whose
    connection task is still running when the listener closes and the runner closes the loop."""

    async def main() -> None:
        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.1)  # the server's connection task runs (or fails)
        server.close()  # like mitmproxy: the listener closes, the connection does not
        writer.close()

    with asyncio.Runner() as runner:
        if handler is not None:
            runner.get_loop().set_exception_handler(handler)
        runner.run(main())


async def _wait_forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.Event().wait()


def _asyncio_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]


def test_exception_handler_drops_a_cancelled_connection_task_at_loop_close(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        _leave_connection_open(None, _wait_forever)
    if sys.version_info < (3, 13):  # the false alarm this handler is for (3.13's asyncio no longer raises it)
        assert any("StreamReaderProtocol.connection_made" in m for m in _asyncio_errors(caplog)), caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _leave_connection_open(quiet_cancelled_connections, _wait_forever)
    assert _asyncio_errors(caplog) == [], caplog.text


def test_exception_handler_still_reports_real_errors(caplog: pytest.LogCaptureFixture) -> None:
    async def crash(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise RuntimeError("connection handler crashed")

    with caplog.at_level(logging.WARNING):
        _leave_connection_open(quiet_cancelled_connections, crash)
    (message,) = _asyncio_errors(caplog)
    assert message.startswith("Unhandled exception in client_connected_cb"), caplog.text
    assert "RuntimeError: connection handler crashed" in caplog.text

    def cancelled_elsewhere() -> None:
        raise asyncio.CancelledError  # a CancelledError, but not from the stream callback

    async def other_errors() -> None:
        loop = asyncio.get_running_loop()
        loop.call_soon(cancelled_elsewhere)
        loop.call_exception_handler({"message": "no exception at all"})
        await asyncio.sleep(0.01)

    caplog.clear()
    with caplog.at_level(logging.WARNING), asyncio.Runner() as runner:
        runner.get_loop().set_exception_handler(quiet_cancelled_connections)
        runner.run(other_errors())
    errors = sorted(_asyncio_errors(caplog))
    assert len(errors) == 2, errors
    assert errors[0].startswith("Exception in callback") and "cancelled_elsewhere" in errors[0], errors
    assert errors[1].startswith("no exception at all"), errors
