"""The real `mcp` 2.3.0 dual-era stdio server, recorded through `erascope record stdio`, driven by a
scripted client line by line, and analyzed: what a dual-era server's per-connection era lock and a
host that stops a server look like on the wire, and how they are read.

A dual-era stdio server decides a connection's era by its first request and refuses cross-era
requests on it afterwards (-32022 to `initialize` on a connection a probe opened modern, -32600 to an
enveloped request on one `initialize` opened legacy). Those refusals say what the connection serves,
not what the server serves.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from addon import format as fmt
from tests.peers.capture_tools import capture_files, lifecycle, read_records

pytestmark = pytest.mark.e2e

PEERS = Path(__file__).parent / "peers"
ERASCOPE = Path(sys.executable).parent / "erascope"
MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "scripted", "version": "1.0"},
}
_SILENT = "import sys, time\nfor line in sys.stdin:\n    pass\ntime.sleep(60)\n"
"""A server that reads everything and answers nothing (exits at stdin EOF after a while)."""


def probe(id_: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "server/discover", "params": {"_meta": ENVELOPE}}


def initialize(id_: int) -> dict[str, Any]:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "scripted", "version": "1"}}
    return {"jsonrpc": "2.0", "id": id_, "method": "initialize", "params": params}


def call_add(id_: int) -> dict[str, Any]:
    params = {"name": "add", "arguments": {"a": 1, "b": 2}, "_meta": ENVELOPE}
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params}


class Spawn:
    """One spawn of a server through the tee, as a host would start it, written to line by line."""

    def __init__(self, out: Path, env: dict[str, str], server_cmd: list[str]) -> None:
        cmd = [str(ERASCOPE), "record", "stdio", "--out", str(out), "--server", "dual", "--linger", "0.3"]
        self.proc = subprocess.Popen([*cmd, "--", *server_cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps(message) + b"\n")
        self.proc.stdin.flush()

    def answer(self, id_: int, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (line := self.lines.get(timeout=max(0.01, deadline - time.monotonic()))) is not None:
            message = orjson.loads(line)
            if message.get("id") == id_ and ("result" in message or "error" in message):
                return message
        raise AssertionError(f"no answer to {id_}")

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)


def analyze(out: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([str(ERASCOPE), "analyze", str(out), "-f", "json"], capture_output=True, env=env, check=True)
    return orjson.loads(done.stdout)


def dual_server(modern_py: Path) -> list[str]:
    return [str(modern_py), str(PEERS / "mcp_stdio_server.py")]


def test_initialize_refused_on_a_connection_a_probe_opened_modern_leaves_the_server_dual_era(
    tmp_path: Path, clean_env: dict[str, str], modern_py: Path
) -> None:
    # A legacy client is served on its own connection; on another, a client that probes and then
    # sends `initialize` anyway is refused -32022 (the connection is modern). It was `modern-only`.
    out = tmp_path / "captures"
    legacy = Spawn(out, clean_env, dual_server(modern_py))
    legacy.send(initialize(1))
    assert "result" in legacy.answer(1)
    assert legacy.close() == 0
    mixed = Spawn(out, clean_env, dual_server(modern_py))
    mixed.send(probe(1))
    assert "supportedVersions" in mixed.answer(1)["result"]
    mixed.send(initialize(2))
    assert mixed.answer(2)["error"]["code"] == -32022  # the connection's era lock
    assert mixed.close() == 0

    report = analyze(out, clean_env)
    (server,) = report["servers"]
    assert (server["era"], server["modern_support"], server["legacy_support"]) == ("dual-era", "yes", "yes")
    # the client that fell back after a modern answer is still told so
    assert [f["rule"] for f in report["findings"]] == ["misread-modern"]


def test_a_probe_refused_on_a_legacy_connection_is_counted_as_the_analyzer_counts_it(
    tmp_path: Path, clean_env: dict[str, str], modern_py: Path
) -> None:
    # A client that opened its connection legacy probes on it anyway: -32600, the connection's era
    # lock. The tee's closing record counted it `legacy-answer`; the analyzer calls it
    # `cross-era-refusal`, no era evidence.
    out = tmp_path / "captures"
    legacy = Spawn(out, clean_env, dual_server(modern_py))
    legacy.send(initialize(1))
    assert "result" in legacy.answer(1)
    legacy.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    legacy.send(probe(2))
    assert legacy.answer(2)["error"]["code"] == -32600
    assert legacy.close() == 0

    end = lifecycle(read_records(out), fmt.EV_RECORDER_END)
    (server,) = analyze(out, clean_env)["servers"]
    assert end[fmt.F_COUNTERS]["servers"]["dual"]["outcomes"] == server["probe_outcomes"] == {"cross-era-refusal": 1}


def _modern_spawn(out: Path, env: dict[str, str], modern_py: Path, *, call: bool = False) -> None:
    """A spawn a modern client opens with a probe (and one tool call)."""
    spawn = Spawn(out, env, dual_server(modern_py))
    spawn.send(probe(1))
    assert "supportedVersions" in spawn.answer(1)["result"]
    if call:
        spawn.send(call_add(2))
        assert "result" in spawn.answer(2)
    assert spawn.close() == 0


def test_enveloped_requests_refused_on_a_legacy_connection_are_no_rollout_split(
    tmp_path: Path, clean_env: dict[str, str], modern_py: Path
) -> None:
    # Modern clients get results; a client that opened its connection legacy and then sends
    # enveloped calls is refused -32600 ("this connection serves the handshake protocol era"). One
    # server, one version: it was reported as a `rollout-split` and a `stale-era` (b).
    out = tmp_path / "captures"
    _modern_spawn(out, clean_env, modern_py, call=True)
    legacy = Spawn(out, clean_env, dual_server(modern_py))
    legacy.send(initialize(1))
    legacy.answer(1)
    legacy.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    for id_ in (2, 3):
        legacy.send(call_add(id_))
        refused = legacy.answer(id_)["error"]
        assert refused["code"] == -32600 and "session" not in refused["message"].lower()
    assert legacy.close() == 0
    _modern_spawn(out, clean_env, modern_py, call=True)

    report = analyze(out, clean_env)
    (server,) = report["servers"]
    assert server["era"] == "dual-era"
    rules = {f["rule"] for f in report["findings"]}
    assert not rules & {"rollout-split", "stale-era"}, report["findings"]


def _wait_until_recorded(out: Path, wanted: Callable[[dict[str, Any]], bool], timeout: float = 30) -> None:
    """Wait until a complete line of the capture in `out` holds a record `wanted` picks."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [line for path in capture_files(out) for line in path.read_bytes().splitlines(keepends=True)]
        if any(line.endswith(b"\n") and wanted(orjson.loads(line)) for line in lines):
            return
        time.sleep(0.02)
    raise AssertionError(f"no such record in {out} within {timeout} s")


def test_a_server_the_host_stops_before_it_answers_the_probe_did_not_crash(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    # The host (a user quitting, the TypeScript client ending its probe sibling) stops the tee with
    # SIGTERM, which it forwards: the server dies of the client's doing, as when the client closes
    # stdin first. It was read as the server crashing on the probe (`connection-died`, `broken`).
    out = tmp_path / "captures"
    spawn = Spawn(out, clean_env, [sys.executable, "-c", _SILENT])
    spawn.send(probe(1))
    # the host stops it once the probe went through (a fixed pause let the signal come first under load)
    _wait_until_recorded(out, lambda r: r["type"] == fmt.FRAME and r.get("dir") == "c2s")
    spawn.proc.send_signal(signal.SIGTERM)
    assert spawn.proc.wait(timeout=30) == 128 + signal.SIGTERM
    records = read_records(capture_files(out))
    assert lifecycle(records, fmt.EV_SIGNAL)["forwarded"] is True
    # recorded where it came, before the death it caused (it was recorded after the server's EOF)
    order = [r["event"] for r in records if r["type"] == fmt.LIFECYCLE]
    # (`exit` and `server-eof` in either order: the tee reaps the server and reads its EOF on two
    # threads, and FORMAT.md places `exit` when the tee notices it)
    assert order.index(fmt.EV_SIGNAL) < min(order.index(fmt.EV_SERVER_EOF), order.index(fmt.EV_EXIT))

    report = analyze(out, clean_env)
    (server,) = report["servers"]
    assert server["probe_outcomes"] == {"no-answer": 1}  # silent until the host stopped it: not a crash
    assert "misread-crash" not in {f["rule"] for f in report["findings"]}


def test_a_reprobe_on_a_connection_initialize_opened_is_no_legacy_evidence(
    tmp_path: Path, clean_env: dict[str, str], modern_py: Path
) -> None:
    # A host whose cached legacy verdict expired probes again on the live connection `initialize`
    # opened: the server refuses the probe -32600 ("this connection serves the handshake protocol
    # era"), about the connection. Read as a legacy answer, the server beside modern spawns was
    # `inconsistent` with a `rollout-split`.
    out = tmp_path / "captures"
    _modern_spawn(out, clean_env, modern_py)
    legacy = Spawn(out, clean_env, dual_server(modern_py))
    legacy.send(initialize(1))
    assert "result" in legacy.answer(1)
    legacy.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    legacy.send(probe(2))
    assert legacy.answer(2)["error"]["code"] == -32600
    assert legacy.close() == 0
    _modern_spawn(out, clean_env, modern_py)

    report = analyze(out, clean_env)
    (server,) = report["servers"]
    assert (server["era"], server["modern_support"], server["legacy_support"]) == ("dual-era", "yes", "yes")
    assert server["probe_outcomes"] == {"discover-result": 2, "cross-era-refusal": 1}
    assert report["findings"] == []
