"""The recording recipe: regenerate `captures/corpus/` and `captures/manifest.json` from real peers.

    .venv/bin/python captures/record.py                 # every scenario (also `make corpus`)
    .venv/bin/python captures/record.py probe-storm-http auto-legacy-stdio   # some of them
    .venv/bin/python captures/record.py --list

Each scenario runs real MCP peers (the `mcp` 2.3.0 SDK from the project venv, the `mcp` 1.30.0
legacy SDK from `.peers/legacy`, created on first use) through `erascope record stdio` or
`erascope record http`, with fixed server keys (`<scenario>-<name>`) and a fixed redaction key so
reports and hashes are stable. Servers bind 127.0.0.1 on free ports. Every process the recipe starts
gets its own process group and the recipe stops exactly those groups (never by name), also on
errors and Ctrl-C. Re-running regenerates the corpus with the same structure (timestamps, pids and
ports differ).

What each client reported (negotiated version, tool results or error) goes into the manifest next
to the expected era per server and the expected findings, so a reviewer can check the analyzer's
answer against what really happened on the wire.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path("captures", "peers")
"""Relative to ROOT, the working directory of every process, so recorded command lines are portable."""
CORPUS = ROOT / "captures" / "corpus"
MANIFEST = ROOT / "captures" / "manifest.json"
REDACT_KEY = "erascope-corpus-v1"
"""Fixed so that hashed session ids and secrets are the same on every regeneration."""
MANIFEST_VERSION = 1
Servers = dict[str, dict[str, Any]]
LINGER = "1.0"
"""Seconds the tee keeps recording client bytes after the server exits."""

sys.path.insert(0, str(ROOT))


class RecipeError(Exception):
    """A scenario could not be run (a peer failed to start, a recorder never listened)."""


# --- processes ---------------------------------------------------------------------------------


class Processes:
    """The processes one scenario started, each in its own process group, stopped in reverse order."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start a long-running process (server, recorder); its output goes to a log file."""
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child for its lifetime
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                cwd=ROOT,
            )
        finally:
            log.close()
        self._procs.append((name, proc))
        return proc

    def stop(self, proc: subprocess.Popen[bytes], first: signal.Signals = signal.SIGTERM, grace: float = 10.0) -> None:
        """Signal the process group, wait, then SIGKILL what is left of it."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, first)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
        # The group may hold children that outlived their parent (a server under a dead tee).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        self._procs = [(n, p) for n, p in self._procs if p is not proc]

    def stop_all(self) -> None:
        for _name, proc in reversed(list(self._procs)):
            self.stop(proc)

    def run_client(self, name: str, argv: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
        """Run a client to completion in its own group; its stdout is one JSON report line."""
        with open(self.logs / f"{name}.stderr.log", "ab") as err:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                start_new_session=True,
                cwd=ROOT,
            )
            self._procs.append((name, proc))
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.stop(proc)
                return {"error": {"type": "recipe-timeout", "message": f"client killed after {timeout} s"}}
            finally:
                self._procs = [(n, p) for n, p in self._procs if p is not proc]
        # The client's stdio children (tee, server) share its group. The tee may still be writing its
        # last records (server-eof, exit) after the client is gone: let it finish, then make sure
        # nothing of the group outlives the scenario.
        if not _group_gone(proc.pid, timeout=10.0):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("{")]
        if not lines:
            return {"error": {"type": "no-report", "message": f"client exited {proc.returncode} without a report"}}
        report: dict[str, Any] = orjson.loads(lines[-1])
        report["client_exit"] = proc.returncode
        return report


def _group_gone(pgid: int, timeout: float) -> bool:
    """Wait until no process of the group is left; False if some still run after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return True  # the id now names a group that is not ours: ours is gone
        time.sleep(0.05)
    return False


def free_port() -> int:
    """A port nobody listens on right now (bound and released; the race is acceptable on loopback)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 60.0) -> None:
    """Block until 127.0.0.1:port accepts connections; fail clearly if the process died first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RecipeError(f"{what} exited with status {proc.returncode} before listening on port {port}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RecipeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


# --- the run context ---------------------------------------------------------------------------


@dataclass
class Run:
    """Everything a scenario needs: interpreters, scratch space, environment, its own capture dir."""

    modern_py: str
    legacy_py: str
    erascope: str
    mitmdump: str
    scratch: Path
    out: Path
    env: dict[str, str]
    procs: Processes
    reports: list[dict[str, Any]] = field(default_factory=list)

    # stdio -------------------------------------------------------------------------------------
    def tee(self, server_key: str, server_argv: list[str]) -> list[str]:
        """The command a client spawns: the recording tee around the server command."""
        return [
            self.erascope, "record", "stdio", "--server", server_key, "--out", _rel(self.out),
            "--linger", LINGER, "--", *server_argv,
        ]  # fmt: skip

    def modern_server(self, *extra: str) -> list[str]:
        return [self.modern_py, str(PEERS / "modern_server.py"), *extra]

    def legacy_server(self, *extra: str) -> list[str]:
        return [self.legacy_py, str(PEERS / "legacy_server.py"), *extra]

    def _client(self, label: str, python: str, program: str, args: tuple[str, ...], timeout: float) -> dict[str, Any]:
        report = self.procs.run_client(label, [python, str(PEERS / program), *args], self.env, timeout)
        report["label"] = label
        self.reports.append(report)
        return report

    def modern_client(self, label: str, *args: str, timeout: float = 120.0) -> dict[str, Any]:
        """Run `modern_client.py` (mcp 2.3.0 `Client`) to completion and keep its report."""
        return self._client(label, self.modern_py, "modern_client.py", args, timeout)

    def legacy_client(self, label: str, *args: str, timeout: float = 120.0) -> dict[str, Any]:
        """Run `legacy_client.py` (mcp 1.30.0 `ClientSession`) to completion and keep its report."""
        return self._client(label, self.legacy_py, "legacy_client.py", args, timeout)

    def raw_client(self, label: str, *args: str, timeout: float = 120.0) -> dict[str, Any]:
        """Run the scripted `-32022` retry client to completion and keep its report."""
        return self._client(label, self.modern_py, "raw_probe_client.py", args, timeout)

    # http --------------------------------------------------------------------------------------
    def http_server(
        self, name: str, era: str, port: int | None = None, *extra: str, transport: str = "http"
    ) -> tuple[subprocess.Popen[bytes], int]:
        """Start a real SDK server on Streamable HTTP (`era`: modern = 2.3.0, legacy = 1.30.0).

        `transport="sse"` serves the deprecated HTTP+SSE transport instead (1.30.0 only); `extra`
        arguments go to the server program (e.g. `--auth-token`).
        """
        port = port or free_port()
        argv = (self.modern_server if era == "modern" else self.legacy_server)(
            "--transport", transport, "--port", str(port), *extra
        )
        proc = self.procs.start(name, argv, self.env)
        wait_listening(port, proc, f"{era} server {name}")
        return proc, port

    @contextlib.contextmanager
    def http_recorder(self, server_key: str, upstream_port: int, path: str = "/mcp") -> Iterator[str]:
        """`erascope record http` in reverse-proxy mode in front of 127.0.0.1:upstream_port; yields the MCP URL."""
        listen = free_port()
        argv = [
            self.erascope, "record", "http", "--upstream", f"http://127.0.0.1:{upstream_port}",
            "--listen", f"127.0.0.1:{listen}", "--server", server_key, "--out", _rel(self.out),
        ]  # fmt: skip
        proc = self.procs.start(f"recorder-{server_key}", argv, self.env)
        try:
            wait_listening(listen, proc, "erascope record http")
            yield f"http://127.0.0.1:{listen}{path}"
        finally:
            # SIGINT is mitmproxy's clean shutdown: the addon's done() flushes and closes the capture.
            self.procs.stop(proc, first=signal.SIGINT)

    @contextlib.contextmanager
    def mitmdump_recorder(self, server_key: str, upstream_port: int, *extra: str) -> Iterator[str]:
        """mitmdump in reverse mode with the recorder addon loaded by path, plus extra scripts/options."""
        listen = free_port()
        argv = [
            self.mitmdump, "-q", "--mode", f"reverse:http://127.0.0.1:{upstream_port}",
            "--listen-host", "127.0.0.1", "--listen-port", str(listen),
            "-s", str(Path("addon", "http_recorder.py")),
            "--set", f"erascope_server={server_key}", "--set", f"erascope_dir={_rel(self.out)}", *extra,
            # mitmproxy's CA goes where `erascope record http` puts it, inside the scratch state, not ~/.mitmproxy
            "--set", f"confdir={Path(self.env['XDG_STATE_HOME'], 'erascope', 'mitmproxy')}",
        ]  # fmt: skip
        proc = self.procs.start(f"mitmdump-{server_key}", argv, self.env)
        try:
            wait_listening(listen, proc, "mitmdump with the erascope recorder")
            yield f"http://127.0.0.1:{listen}/mcp"
        finally:
            self.procs.stop(proc, first=signal.SIGINT)

    def round_robin_recorder(self, server_key: str, upstream_ports: list[int], by: str) -> Any:
        """The recorder plus a round-robin script choosing the upstream node per flow or per connection."""
        upstreams = ",".join(f"127.0.0.1:{p}" for p in upstream_ports)
        script = ["-s", str(PEERS / "round_robin.py"), "--set", f"rr_upstreams={upstreams}", "--set", f"rr_by={by}"]
        return self.mitmdump_recorder(server_key, upstream_ports[0], *script)


# --- scenarios ---------------------------------------------------------------------------------

MODERN_SDK = {"sdk": "mcp (python)", "version": "2.3.0"}
LEGACY_SDK = {"sdk": "mcp (python)", "version": "1.30.0"}


@dataclass(frozen=True)
class Scenario:
    """One recorded situation: who talks to whom, how, and what the analyzer should conclude."""

    name: str
    transport: str
    description: str
    client: dict[str, Any]
    servers: dict[str, dict[str, Any]]
    """Server key → program, SDK, `actual` era (what the server really is) and `expected` verdict
    (what the capture can prove: a dual-era server only ever asked the legacy way reads as legacy)."""
    expected_findings: tuple[str, ...]
    """Rule ids the analyzer should report for this capture (sorted, unique)."""
    run: Callable[[Run], None]
    notes: tuple[str, ...] = ()


def _key(scenario: str, name: str) -> str:
    return f"{scenario}-{name}"


def _auto_modern_stdio(r: Run) -> None:
    r.modern_client(
        "client", "--mode", "auto", "--calls", "2", "--", *r.tee(_key("auto-modern-stdio", "server"), r.modern_server())
    )


def _auto_modern_http(r: Run) -> None:
    _, port = r.http_server("server", "modern")
    with r.http_recorder(_key("auto-modern-http", "server"), port) as url:
        r.modern_client("client", "--mode", "auto", "--calls", "2", "--url", url)


def _auto_legacy_stdio(r: Run) -> None:
    r.modern_client(
        "client", "--mode", "auto", "--calls", "2", "--", *r.tee(_key("auto-legacy-stdio", "server"), r.legacy_server())
    )


def _auto_legacy_http(r: Run) -> None:
    _, port = r.http_server("server", "legacy")
    with r.http_recorder(_key("auto-legacy-http", "server"), port) as url:
        r.modern_client("client", "--mode", "auto", "--calls", "2", "--url", url)


def _retry_stdio(r: Run) -> None:
    r.raw_client("client", "--", *r.tee(_key("unsupported-retry-stdio", "server"), r.modern_server()))


def _retry_http(r: Run) -> None:
    _, port = r.http_server("server", "modern")
    with r.http_recorder(_key("unsupported-retry-http", "server"), port) as url:
        r.raw_client("client", "--url", url)


def _legacy_mode_stdio(r: Run) -> None:
    key = _key("legacy-mode-dual-stdio", "server")
    r.modern_client("client", "--mode", "legacy", "--calls", "2", "--", *r.tee(key, r.modern_server()))


def _legacy_mode_http(r: Run) -> None:
    _, port = r.http_server("server", "modern")
    with r.http_recorder(_key("legacy-mode-dual-http", "server"), port) as url:
        r.modern_client("client", "--mode", "legacy", "--calls", "2", "--url", url)


def _legacy_client_modern_only(r: Run) -> None:
    key = _key("legacy-client-modern-only-stdio", "server")
    r.legacy_client("client", "--", *r.tee(key, [r.modern_py, str(PEERS / "modern_only_server.py")]))


def _legacy_client_modern_only_http(r: Run) -> None:
    port = free_port()
    server = r.procs.start("server", [r.modern_py, str(PEERS / "modern_only_server.py"), "--transport", "http",
                                      "--port", str(port)], r.env)  # fmt: skip
    wait_listening(port, server, "modern-only server")
    with r.http_recorder(_key("legacy-client-modern-only-http", "server"), port) as url:
        r.legacy_client("client", "--url", url)


def _crash_on_start_stdio(r: Run) -> None:
    key = _key("crash-on-start-stdio", "server")
    r.modern_client(
        "client",
        "--mode",
        "auto",
        "--timeout",
        "30",
        "--",
        *r.tee(key, [r.modern_py, str(PEERS / "misfit_server.py"), "crash-on-start"]),
    )


def _crash_on_start_http(r: Run) -> None:
    # The upstream never came up: nothing listens on its port. `erascope record http` connects
    # upstream per request, so the client gets a 502 and the flow error is recorded.
    key = _key("crash-on-start-http", "server")
    with r.http_recorder(key, free_port()) as url:
        r.modern_client("client", "--mode", "auto", "--timeout", "30", "--url", url)


def _banner_then_work(r: Run) -> None:
    key = _key("banner-then-work-stdio", "server")
    server = r.modern_server("--banner", "weather-server 1.4.2 starting on stdio (pid banner)")
    r.modern_client("client", "--mode", "auto", "--calls", "2", "--", *r.tee(key, server))


def _banner_then_crash(r: Run) -> None:
    key = _key("banner-then-crash-stdio", "server")
    server = r.modern_server("--banner", "weather-server 1.4.2 starting on stdio (pid banner)", "--crash-after-banner")
    r.modern_client("client", "--mode", "auto", "--timeout", "30", "--", *r.tee(key, server))


def _never_answers(r: Run) -> None:
    key = _key("never-answers-stdio", "server")
    # The 2.3.0 client waits 10 s for the probe, then sends initialize with no timeout of its own.
    r.modern_client(
        "client",
        "--mode",
        "auto",
        "--timeout",
        "16",
        "--",
        *r.tee(key, [r.modern_py, str(PEERS / "misfit_server.py"), "silent"]),
    )


def _never_answers_http(r: Run) -> None:
    port = free_port()
    server = r.procs.start("silent-http", [r.modern_py, str(PEERS / "misfit_server.py"), "silent-http",
                                           "--port", str(port)], r.env)  # fmt: skip
    wait_listening(port, server, "silent HTTP server")
    with r.http_recorder(_key("never-answers-http", "server"), port) as url:
        r.modern_client("client", "--mode", "auto", "--timeout", "16", "--url", url)


def _storm_stdio(r: Run) -> None:
    key = _key("probe-storm-stdio", "server")
    r.modern_client(
        "client",
        "--mode",
        "auto",
        "--calls",
        "20",
        "--per-call-client",
        "--",
        *r.tee(key, r.modern_server()),
        timeout=400,
    )


def _storm_http(r: Run) -> None:
    _, port = r.http_server("server", "modern")
    with r.http_recorder(_key("probe-storm-http", "server"), port) as url:
        r.modern_client("client", "--mode", "auto", "--calls", "20", "--per-call-client", "--url", url, timeout=400)


def _rollout(r: Run, scenario: str, by: str) -> None:
    _, modern_port = r.http_server("node-modern", "modern")
    _, legacy_port = r.http_server("node-legacy", "legacy")
    with r.round_robin_recorder(_key(scenario, "fleet"), [modern_port, legacy_port], by) as url:
        r.modern_client("client", "--mode", "auto", "--calls", "6", "--per-call-client", "--url", url, timeout=300)


def _rollout_by_connection(r: Run) -> None:
    _rollout(r, "rollout-split-http", "connection")


def _rollout_by_request(r: Run) -> None:
    _rollout(r, "rollout-per-request-http", "flow")


def _upgrade_stdio(r: Run) -> None:
    key = _key("upgrade-stdio", "server")
    r.modern_client("client-before", "--mode", "auto", "--calls", "1", "--", *r.tee(key, r.legacy_server()))
    r.modern_client("client-after", "--mode", "auto", "--calls", "1", "--", *r.tee(key, r.modern_server()))


def _upgrade_http(r: Run) -> None:
    port = free_port()
    legacy, _ = r.http_server("server-1.30.0", "legacy", port)
    with r.http_recorder(_key("upgrade-http", "server"), port) as url:
        r.modern_client("client-before", "--mode", "auto", "--calls", "1", "--url", url)
        r.procs.stop(legacy)
        r.http_server("server-2.3.0", "modern", port)
        r.modern_client("client-after", "--mode", "auto", "--calls", "1", "--url", url)


AUTH_TOKEN = "erascope-corpus-token"
"""The bearer token the auth-gate server accepts (recorded hashed: `Authorization` is redacted)."""


def _auth_gate_http(r: Run) -> None:
    _, port = r.http_server("server", "modern", None, "--auth-token", AUTH_TOKEN)
    with r.http_recorder(_key("auth-gate-http", "server"), port) as url:
        r.modern_client("client-without-token", "--mode", "auto", "--calls", "1", "--url", url)
        r.modern_client("client-with-token", "--mode", "auto", "--calls", "1", "--url", url, "--token", AUTH_TOKEN)


def _legacy_sse_http(r: Run) -> None:
    _, port = r.http_server("server", "legacy", transport="sse")
    with r.http_recorder(_key("legacy-sse-http", "server"), port, "/sse") as url:
        r.legacy_client("client", "--sse", "--url", url)


def _auto_probe_sse_http(r: Run) -> None:
    _, port = r.http_server("server", "legacy", transport="sse")
    with r.http_recorder(_key("auto-probe-sse-http", "server"), port, "/sse") as url:
        r.modern_client("client", "--mode", "auto", "--calls", "1", "--url", url)


def _client(program: str, sdk: dict[str, str], mode: str) -> dict[str, Any]:
    return {"program": f"captures/peers/{program}", **sdk, "mode": mode}


def _server(program: str, sdk: dict[str, str] | None, actual: str, expected: str) -> dict[str, Any]:
    out: dict[str, Any] = {"program": f"captures/peers/{program}", "actual": actual, "expected": expected}
    if sdk:
        out.update(sdk)
    return out


AUTO = _client("modern_client.py", MODERN_SDK, "auto")
AUTO_STORM = _client("modern_client.py", MODERN_SDK, "auto, one Client per tool call")
LEGACY_MODE = _client("modern_client.py", MODERN_SDK, "legacy")
RAW = {
    "program": "captures/peers/raw_probe_client.py",
    "sdk": "scripted JSON-RPC",
    "version": "-",
    "mode": "probe 2099-01-01, then 2026-07-28 with a new id",
}
LEGACY_CLIENT = _client("legacy_client.py", LEGACY_SDK, "legacy (1.x ClientSession)")
DUAL = ("modern_server.py", MODERN_SDK, "dual-era")
OLD = ("legacy_server.py", LEGACY_SDK, "legacy")


def _one(scenario: str, spec: tuple[str, dict[str, str] | None, str], expected: str, name: str = "server") -> Servers:
    return {_key(scenario, name): _server(spec[0], spec[1], spec[2], expected)}


MISFIT = ("misfit_server.py", None, "broken")
BANNER_CRASH = ("modern_server.py", MODERN_SDK, "broken")
MODERN_ONLY = ("modern_only_server.py", MODERN_SDK, "modern-only")
SWAPPED = ("legacy_server.py, then modern_server.py", None, "legacy, then dual-era")
MODERN_ONLY_NOTE = (
    "mcp 2.3.0 has no public modern-only switch; the server drives the SDK's internal modern code paths "
    "(stdio: mcp.server.runner._serve_modern_stream; HTTP: mcp.server._streamable_http_modern."
    "handle_modern_request for every request), so its answers are the SDK's own."
)
MODERN_ONLY_HTTP_NOTE = (
    "Differs from WIRE-FACTS ('a modern server answers initialize with -32022 naming its versions, HTTP 400'): "
    "the 2.3.0 modern HTTP handler answers the legacy initialize with HTTP 400 -32602 'params._meta must be an "
    "object carrying the required ... envelope keys', naming no versions; the 1.30.0 client raises HTTPStatusError. "
    "Expected era 'unknown': the capture proves the handshake is refused, not that the server is modern."
)
CRASH_HTTP_NOTE = (
    "`erascope record http` connects upstream per request (mitmproxy's `connection_strategy=lazy`), so with the "
    "upstream down the client gets a 502 and the flow error is recorded; with mitmproxy's default eager connect "
    "the client connection would be closed before any flow exists."
)
CRASH_STDIO_NOTE = (
    "As WIRE-FACTS says: the 2.3.0 client's pending probe fails with -32000 'Connection closed' and its fallback "
    "fails locally; no initialize reaches the wire (none was written during the tee's linger window)."
)
NEVER_NOTE = (
    "The 2.3.0 client sent initialize 10 s after the unanswered probe (no notifications/cancelled); the recipe "
    "bounds the client at 16 s, so the initialize waited about 6 s before the client gave up and closed stdin."
)
NEVER_HTTP_NOTE = (
    "Over HTTP the 2.3.0 client likewise gave the probe 10 s, then POSTed initialize, which the silent server "
    "never answered either; the recipe bounds the client at 16 s."
)
SPLIT_NOTE = (
    "Pinned per client connection, yet only the first client got the modern node for its session: a legacy "
    "session opens a second connection (the standalone GET stream), which the balancer sends to the other node, "
    "so clients 2-6 probe the legacy node, initialize there, and then fail with -32600 'Session not found' when "
    "a later request lands on the modern node. Real L4 balancing of legacy sessions breaks them too."
)
PER_REQUEST_NOTE = (
    "Per-request round robin with two flows per client (probe, tools/call) is deterministic here: every probe "
    "lands on the 2.3.0 node (DiscoverResult) and every tools/call on the 1.30.0 node, which refuses it with "
    "HTTP 400 -32600 'Bad Request: Missing session ID'. The clients report 2026-07-28 and then the call error."
)
AUTH_NOTE = (
    "The SDK's own bearer-auth middleware answers every unauthenticated request with HTTP 401, "
    "`WWW-Authenticate: Bearer ...` and an OAuth JSON error body (not JSON-RPC). The 2.3.0 auto client "
    "without a token reads the 401 probe as 'not modern', falls back to initialize, gets 401 again and raises "
    "(-32603); with the token it probes again and gets a DiscoverResult. A 401 says nothing about the era."
)
SSE_NOTE = (
    "The deprecated HTTP+SSE transport (1.30.0 FastMCP `sse`): GET /sse opens an event stream whose first "
    "`endpoint` event names POST /messages/?session_id=...; every POST is answered 202 with no body and each "
    "JSON-RPC answer arrives as an event on the GET stream, in another flow."
)
AUTO_SSE_NOTE = (
    "The 2.3.0 auto client POSTs its probe to the old transport's GET-only /sse endpoint (405), falls back to "
    "initialize there (405 again) and raises; it does not try the old transport's GET, as the 2025-03-26 "
    "backwards-compatibility rules would. A 405 to POST from such an endpoint marks the old, legacy transport."
)
FLEET = {
    "program": "modern_server.py and legacy_server.py behind round_robin.py",
    "actual": "inconsistent",
    "expected": "inconsistent",
    "nodes": [{**MODERN_SDK, "actual": "dual-era"}, {**LEGACY_SDK, "actual": "legacy"}],
}

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "auto-modern-stdio", "stdio", "auto client → dual-era 2.3.0 server: DiscoverResult, then tool calls",
        AUTO, _one("auto-modern-stdio", DUAL, "modern"), (), _auto_modern_stdio,
    ),
    Scenario(
        "auto-modern-http", "http", "auto client → dual-era 2.3.0 server over Streamable HTTP",
        AUTO, _one("auto-modern-http", DUAL, "modern"), (), _auto_modern_http,
    ),
    Scenario(
        "auto-legacy-stdio", "stdio",
        "auto client → legacy 1.30.0 server: -32602 to the probe, fallback to initialize",
        AUTO, _one("auto-legacy-stdio", OLD, "legacy"), (), _auto_legacy_stdio,
    ),
    Scenario(
        "auto-legacy-http", "http", "auto client → legacy 1.30.0 server: HTTP 400 -32600 to the probe, fallback",
        AUTO, _one("auto-legacy-http", OLD, "legacy"), (), _auto_legacy_http,
    ),
    Scenario(
        "unsupported-retry-stdio", "stdio",
        "scripted client probes 2099-01-01 → -32022 → re-probes 2026-07-28 with a new id",
        RAW, _one("unsupported-retry-stdio", DUAL, "modern"), (), _retry_stdio,
    ),
    Scenario(
        "unsupported-retry-http", "http", "the same -32022 retry over Streamable HTTP (HTTP 400, then 200)",
        RAW, _one("unsupported-retry-http", DUAL, "modern"), (), _retry_http,
    ),
    Scenario(
        "legacy-mode-dual-stdio", "stdio", "mode='legacy' client → dual-era 2.3.0 server: initialize only, no probe",
        LEGACY_MODE, _one("legacy-mode-dual-stdio", DUAL, "legacy"), (), _legacy_mode_stdio,
    ),
    Scenario(
        "legacy-mode-dual-http", "http", "mode='legacy' client → dual-era 2.3.0 server over HTTP (a session, no probe)",
        LEGACY_MODE, _one("legacy-mode-dual-http", DUAL, "legacy"), (), _legacy_mode_http,
    ),
    Scenario(
        "legacy-client-modern-only-stdio", "stdio",
        "1.30.0 client → modern-only 2.3.0 server: initialize refused with -32022",
        LEGACY_CLIENT, _one("legacy-client-modern-only-stdio", MODERN_ONLY, "modern-only"), (),
        _legacy_client_modern_only, (MODERN_ONLY_NOTE,),
    ),
    Scenario(
        "legacy-client-modern-only-http", "http",
        "1.30.0 client → modern-only 2.3.0 server over HTTP: initialize refused with 400 -32602 (no versions named)",
        LEGACY_CLIENT, _one("legacy-client-modern-only-http", MODERN_ONLY, "unknown"), ("unnamed-versions",),
        _legacy_client_modern_only_http, (MODERN_ONLY_NOTE, MODERN_ONLY_HTTP_NOTE),
    ),
    Scenario(
        "crash-on-start-stdio", "stdio", "auto client → a server that exits 3 before reading anything",
        AUTO, _one("crash-on-start-stdio", MISFIT, "broken"), (), _crash_on_start_stdio, (CRASH_STDIO_NOTE,),
    ),
    Scenario(
        "crash-on-start-http", "http", "auto client → proxy whose upstream never came up (connection refused)",
        AUTO, _one("crash-on-start-http", ("(nothing listening)", None, "broken"), "broken"), ("misread-crash",),
        _crash_on_start_http, (CRASH_HTTP_NOTE,),
    ),
    Scenario(
        "banner-then-work-stdio", "stdio", "auto client → 2.3.0 server that prints a banner on stdout, then serves",
        AUTO, _one("banner-then-work-stdio", DUAL, "modern"), ("stdout-pollution",), _banner_then_work,
    ),
    Scenario(
        "banner-then-crash-stdio", "stdio", "auto client → a server that prints a banner on stdout, then exits 1",
        AUTO, _one("banner-then-crash-stdio", BANNER_CRASH, "broken"), ("stdout-pollution",), _banner_then_crash,
        (CRASH_STDIO_NOTE,),
    ),
    Scenario(
        "never-answers-stdio", "stdio",
        "auto client → a server that reads and never answers (probe timeout, then initialize)",
        AUTO, _one("never-answers-stdio", MISFIT, "broken"), ("probe-timeout",), _never_answers,
        (NEVER_NOTE,),
    ),
    Scenario(
        "never-answers-http", "http",
        "auto client → an HTTP server that accepts requests and never answers (probe timeout, then initialize)",
        AUTO, _one("never-answers-http", MISFIT, "broken"), ("probe-timeout",), _never_answers_http,
        (NEVER_HTTP_NOTE,),
    ),
    Scenario(
        "probe-storm-stdio", "stdio", "a host opening a new 2.3.0 Client (new spawn and probe) per tool call, 20 calls",
        AUTO_STORM, _one("probe-storm-stdio", DUAL, "modern"), ("probe-storm",), _storm_stdio,
    ),
    Scenario(
        "probe-storm-http", "http", "a host opening a new 2.3.0 Client (new probe) per tool call, 20 calls, HTTP",
        AUTO_STORM, _one("probe-storm-http", DUAL, "modern"), ("probe-storm",), _storm_http,
    ),
    Scenario(
        "rollout-split-http", "http",
        "2.3.0 and 1.30.0 nodes behind one round-robin proxy pinning each client connection to a node",
        AUTO_STORM, {_key("rollout-split-http", "fleet"): FLEET}, ("rollout-split",), _rollout_by_connection,
        (SPLIT_NOTE,),
    ),
    Scenario(
        "rollout-per-request-http", "http",
        "the same two nodes behind a round-robin proxy that picks the node per request (sessions break)",
        AUTO_STORM, {_key("rollout-per-request-http", "fleet"): FLEET}, ("probe-storm", "rollout-split"),
        _rollout_by_request,
        (PER_REQUEST_NOTE,),
    ),
    Scenario(
        "upgrade-stdio", "stdio", "legacy 1.30.0 spawn, then a 2.3.0 spawn under the same server key",
        AUTO, _one("upgrade-stdio", SWAPPED, "modern"), (), _upgrade_stdio,
    ),
    Scenario(
        "upgrade-http", "http", "proxy stays up while the upstream on one port is swapped from 1.30.0 to 2.3.0",
        AUTO, _one("upgrade-http", SWAPPED, "modern"), (), _upgrade_http,
    ),
    Scenario(
        "auth-gate-http", "http",
        "auto client without a bearer token (401 to probe and initialize), then with one → 2.3.0 server behind "
        "the SDK's bearer auth",
        AUTO, _one("auth-gate-http", DUAL, "modern"), (), _auth_gate_http, (AUTH_NOTE,),
    ),
    Scenario(
        "legacy-sse-http", "http",
        "1.30.0 client → 1.30.0 server on the deprecated HTTP+SSE transport (answers on the GET stream)",
        _client("legacy_client.py", LEGACY_SDK, "legacy (1.x ClientSession over sse_client)"),
        _one("legacy-sse-http", OLD, "legacy"), (), _legacy_sse_http, (SSE_NOTE,),
    ),
    Scenario(
        "auto-probe-sse-http", "http",
        "auto client → 1.30.0 server on the deprecated HTTP+SSE transport: POST to the GET-only endpoint, 405",
        AUTO, _one("auto-probe-sse-http", OLD, "legacy"), (), _auto_probe_sse_http, (AUTO_SSE_NOTE,),
    ),
)  # fmt: skip


# --- driver ------------------------------------------------------------------------------------


def _rel(path: str | Path) -> str:
    """A path relative to ROOT when it lies inside it (symlinks kept: a venv's python is one)."""
    absolute = os.path.abspath(path)
    inside = absolute.startswith(str(ROOT) + os.sep)
    return os.path.relpath(absolute, ROOT) if inside else absolute


def _sdk_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return out.stdout.strip() or "unknown"


def _environment(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERASCOPE_")}
    env["ERASCOPE_REDACT_KEY"] = REDACT_KEY
    env["XDG_STATE_HOME"] = str(scratch / "state")  # no per-host key file or stray captures outside scratch
    env["ERASCOPE_CAPTURE_DIR"] = str(scratch / "stray-captures")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def record_scenario(scenario: Scenario, base: Run, corpus: Path = CORPUS) -> dict[str, Any]:
    """Run one scenario into `<corpus>/<name>/` (replacing what was there) and describe it."""
    out = corpus / scenario.name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    logs = base.scratch / "logs" / scenario.name
    logs.mkdir(parents=True, exist_ok=True)
    procs = Processes(logs)
    run = Run(base.modern_py, base.legacy_py, base.erascope, base.mitmdump, base.scratch, out, base.env, procs)
    started = time.monotonic()
    error = None
    try:
        scenario.run(run)
    except RecipeError as exc:
        error = str(exc)
    finally:
        procs.stop_all()
    files = sorted(p.name for p in out.glob("*.jsonl"))
    for path in out.glob("*.jsonl"):
        path.chmod(0o644)  # published sample data, not a live capture of someone's traffic
    return {
        "scenario": scenario.name,
        "transport": scenario.transport,
        "description": scenario.description,
        "client": scenario.client,
        "servers": scenario.servers,
        "expected_findings": sorted(set(scenario.expected_findings)),
        "client_reported": run.reports,
        "notes": list(scenario.notes),
        "recipe_error": error,
        "files": files,
        "bytes": sum((out / f).stat().st_size for f in files),
        "seconds": round(time.monotonic() - started, 1),
    }


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record the erascope sample corpus from real MCP peers.")
    parser.add_argument("scenarios", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument(
        "--out", type=Path, default=None, help="record into this folder (and its manifest.json) instead of captures/"
    )
    args = parser.parse_args(argv)
    by_name = {s.name: s for s in SCENARIOS}
    if args.list:
        for s in SCENARIOS:
            print(f"{s.name:34} {s.transport:5}  {s.description}")
        return 0
    unknown = [n for n in args.scenarios if n not in by_name]
    if unknown:
        print(f"record.py: unknown scenario(s): {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2
    chosen = [by_name[n] for n in args.scenarios] or list(SCENARIOS)

    from tests.conftest import legacy_python

    bindir = Path(_rel(sys.executable)).parent
    erascope = bindir / "erascope"
    mitmdump = bindir / "mitmdump"
    for tool in (erascope, mitmdump):
        if not (ROOT / tool).exists():
            print(f"record.py: {tool} not found; run `make` (pip install -e '.[dev]') first", file=sys.stderr)
            return 2
    legacy_py = _rel(legacy_python())
    modern_py = _rel(sys.executable)
    versions = {"modern": _sdk_version(modern_py), "legacy": _sdk_version(legacy_py)}
    if versions != {"modern": "2.3.0", "legacy": "1.30.0"}:
        print(f"record.py: unexpected mcp versions {versions}; the corpus is recorded with 2.3.0 and 1.30.0",
              file=sys.stderr)  # fmt: skip
        return 2

    corpus = args.out.resolve() if args.out else CORPUS
    manifest_path = corpus / "manifest.json" if args.out else MANIFEST
    old: dict[str, Any] = {}
    if manifest_path.exists():
        old = {s["scenario"]: s for s in orjson.loads(manifest_path.read_bytes()).get("scenarios", [])}
    scratch = Path(tempfile.mkdtemp(prefix="erascope-corpus-"))
    env = _environment(scratch)
    base = Run(modern_py, legacy_py, str(erascope), str(mitmdump), scratch, corpus, env, Processes(scratch))
    signal.signal(signal.SIGTERM, _interrupt)  # so `finally` stops our process groups on SIGTERM too
    entries = dict(old)
    failed = 0
    try:
        for scenario in chosen:
            print(f"recording {scenario.name} ...", file=sys.stderr, flush=True)
            entry = record_scenario(scenario, base, corpus)
            entries[scenario.name] = entry
            status = "FAILED: " + entry["recipe_error"] if entry["recipe_error"] else "ok"
            failed += bool(entry["recipe_error"]) or not entry["files"]
            print(f"  {status}; {len(entry['files'])} file(s), {entry['bytes']} bytes, {entry['seconds']} s",
                  file=sys.stderr)  # fmt: skip
    except KeyboardInterrupt:
        print(f"interrupted; processes stopped, manifest not updated; logs in {scratch / 'logs'}", file=sys.stderr)
        return 130
    order = [s.name for s in SCENARIOS]
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "recipe": "captures/record.py",
        "redact_key": "fixed in the recipe (ERASCOPE_REDACT_KEY), so hashes are stable across runs",
        "sdk_versions": {"mcp (project venv)": versions["modern"], "mcp (.peers/legacy)": versions["legacy"]},
        "scenarios": [entries[n] for n in order if n in entries],
    }
    manifest_path.write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n")
    if failed:
        print(f"logs in {scratch / 'logs'}", file=sys.stderr)
        return 1
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
