"""Synthetic `erascope/1` captures of any size, for benchmarks and scale tests.

The output looks like a real capture directory: a few large files (HTTP proxy runs and long stdio
sessions) that carry the bulk, plus many small stdio spawn captures. Records follow
`captures/FORMAT.md` exactly and the traffic follows `/work/shared/WIRE-FACTS.md`: modern servers
answer `server/discover` with a DiscoverResult, Python 1.x legacy servers with -32602, TypeScript
ones with -32601, legacy HTTP servers with 400 + -32600, a release-candidate server with -32022
(the client re-probes), a slow server never answers, a Rust one exits, a chatty one prints a banner.

Hidden inside, for the analyzer to find:
- a probe storm: one client opening a new connection, and probing, before every tool call;
- a rollout split: one HTTP server behind a load balancer whose nodes disagree about the era;
- malformed lines in the middle of files and torn last lines.

Everything is deterministic for a given (size, files, spawns, seed): same bytes, same names.
`manifest.json` next to the captures records what was planted (counts, lines, names) so tests can
check the analyzer against it.

    python -m bench.generate --size 1GB --out bench/data/1g [--files N] [--seed S]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson

from addon import format as fmt
from addon.writer import DEFAULT_ROTATE_BYTES

MODERN: Final = "2026-07-28"
LEGACY: Final = "2025-11-25"
DRAFT: Final = "2026-12-draft"
"""A version no server knows: the release-candidate server answers it with -32022."""
BASE_TS: Final = datetime(2026, 11, 28, 22, 0, tzinfo=UTC).timestamp()
"""Captures start late on one UTC day and run into the next, so day partitions are exercised."""
HOST: Final = "bench-host"
_DUMP: Final = orjson.OPT_APPEND_NEWLINE
_ENV_PV: Final = "io.modelcontextprotocol/protocolVersion"
_ENV_CAPS: Final = "io.modelcontextprotocol/clientCapabilities"
_ENV_INFO: Final = "io.modelcontextprotocol/clientInfo"
_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"

# HTTP servers (server key = origin + path, as the proxy derives it)
API: Final = "https://api.example.test/mcp"
"""Modern-only; the probe-storm target."""
FLEET: Final = "https://fleet.example.test/mcp"
"""Behind a load balancer; node 10.0.0.13 was never upgraded (the rollout split)."""
LEGACY_HTTP: Final = "https://legacy.example.test/mcp"
RC: Final = "https://rc.example.test/mcp"
"""Answers unknown versions with -32022 naming 2026-07-28; the client re-probes."""
SLOW: Final = "https://slow.example.test/mcp"
"""Never answers the probe (timeout), serves `initialize`."""
FLEET_NODES: Final = {"10.0.0.11:8080": "modern", "10.0.0.12:8080": "modern", "10.0.0.13:8080": "legacy"}
STORM_CLIENT: Final = ("agent-x", "0.9.1")
"""The client that creates a new MCP client (and so a new probe) for every tool call."""

# stdio servers (server key = --server name)
WEATHER: Final = "weather"  # mcp 2.3.0 dual-era: DiscoverResult
FILES: Final = "files-legacy"  # mcp 1.30 FastMCP: -32602 for server/discover
NOTES: Final = "ts-notes"  # TypeScript SDK 1.x: -32601
RUSTY: Final = "rusty"  # exits when the first request is not initialize
SLEEPY: Final = "sleepy"  # never answers unknown methods
CHATTY: Final = "chatty"  # prints a non-JSON banner on stdout first, then -32601

CLIENTS: Final = (("mcp-python", "2.3.0"), ("ide-plugin", "4.2.0"), ("batch-runner", "1.7.3"))
TS_CLIENT: Final = ("ts-agent", "2.0.1")
"""Probes stdio servers on a throwaway sibling process (probe id is a string)."""

_WORDS: Final = [
    "forecast",
    "temperature",
    "humidity",
    "pressure",
    "wind",
    "gust",
    "station",
    "reading",
    "sensor",
    "archive",
    "record",
    "file",
    "directory",
    "listing",
    "content",
    "summary",
    "token",
    "chunk",
    "result",
    "value",
    "error",
    "retry",
    "session",
    "cache",
]


def parse_size(text: str) -> int:
    """'1GB', '512MB', '300k', '2 GiB' or a plain byte count -> bytes (powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 1GB, 512MB, 300k)")
    power = " kmgt".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * 1024**power)


def _uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass
class Manifest:
    """What the generator planted; written as manifest.json next to the captures."""

    seed: int
    size_target: int
    clean: bool = False
    files: list[dict[str, Any]] = field(default_factory=list)
    probes: Counter[str] = field(default_factory=Counter)
    """Intended probe outcome class -> count (schema.PROBE_OUTCOMES vocabulary)."""
    probes_by_server: dict[str, Counter[str]] = field(default_factory=dict)
    fleet_probes_by_peer: dict[str, Counter[str]] = field(default_factory=dict)
    storm: dict[str, Any] = field(default_factory=dict)
    malformed: list[dict[str, Any]] = field(default_factory=list)
    """Unparseable lines that are not a file's last line: {file, line, kind}."""
    torn: list[dict[str, Any]] = field(default_factory=list)
    """Files whose last line is torn: {file, line}."""

    def probe(self, server: str, outcome: str, peer: str | None = None) -> None:
        self.probes[outcome] += 1
        self.probes_by_server.setdefault(server, Counter())[outcome] += 1
        if peer is not None and server == FLEET:
            self.fleet_probes_by_peer.setdefault(peer, Counter())[outcome] += 1

    def to_json(self) -> bytes:
        records = sum(f["records"] for f in self.files)
        lines = sum(f["lines"] for f in self.files)
        return orjson.dumps(
            {
                "generator": "bench.generate",
                "format": fmt.FORMAT_ID,
                "seed": self.seed,
                "clean": self.clean,
                "size_target": self.size_target,
                "bytes": sum(f["bytes"] for f in self.files),
                "records": records,
                "lines": lines,
                "files": self.files,
                "probes": dict(sorted(self.probes.items())),
                "probes_by_server": {k: dict(sorted(v.items())) for k, v in sorted(self.probes_by_server.items())},
                "fleet_probes_by_peer": {
                    k: dict(sorted(v.items())) for k, v in sorted(self.fleet_probes_by_peer.items())
                },
                "storm": self.storm,
                "malformed": self.malformed,
                "torn": self.torn,
            },
            option=orjson.OPT_INDENT_2,
        )


class CaptureFile:
    """One capture part being written: header first, `seq` stamped, bytes and lines counted."""

    def __init__(self, out: Path, *, transport: str, server: str, start: float, rng: random.Random) -> None:
        stamp = datetime.fromtimestamp(start, UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", server).strip("-.")[:40] or "server"
        pid = rng.randrange(1000, 400000)
        self.path = out / f"{stamp}_{slug}_{pid}_{rng.getrandbits(24):06x}.000{fmt.CAPTURE_SUFFIX}"
        self.transport = transport
        self.server = server
        self._fh = self.path.open("wb", buffering=1 << 20)
        self.seq = 0
        self.lines = 0
        self.records = 0
        self.bytes = 0
        self._mono0 = 5000.0 + rng.random() * 1e5
        self._start = start
        header = {
            "type": fmt.HEADER,
            "seq": 0,
            "ts": start,
            "mono": self._mono0,
            "server": server,
            "format": fmt.FORMAT_ID,
            "tool": "erascope",
            "tool_version": "0.1.0",
            "started": datetime.fromtimestamp(start, UTC).isoformat(),
            "host": HOST,
            "transport": transport,
            "part": 0,
            "previous": None,
            "recorder_pid": pid,
            "redaction": {"mode": "default", "headers": ["authorization", "cookie", "set-cookie", "mcp-session-id"]},
        }
        self._write(orjson.dumps(header, option=_DUMP))
        self.records += 1

    def _write(self, line: bytes) -> None:
        self._fh.write(line)
        self.lines += 1
        self.bytes += len(line)

    def emit(self, rec: dict[str, Any]) -> None:
        """Write a traffic record (`ts` set by the caller; `seq` and `mono` stamped here)."""
        if rec["seq"] is None:
            self.seq += 1
            rec["seq"] = self.seq
        rec["mono"] = round(self._mono0 + (rec["ts"] - self._start), 6)
        rec.setdefault("server", self.server)
        self._write(orjson.dumps(rec, option=_DUMP))
        self.records += 1

    def raw_line(self, data: bytes) -> int:
        """Write bytes as a line as they are (a malformed line); returns its 1-based line number."""
        self._write(data + b"\n")
        return self.lines

    def close(self, torn_tail: bytes | None = None) -> None:
        """Close; with `torn_tail`, end the file with a truncated record and no newline."""
        if torn_tail is not None:
            self._fh.write(torn_tail)
            self.lines += 1
            self.bytes += len(torn_tail)
        self._fh.close()


class Gen:
    """Builders for the records of realistic sessions. All randomness comes from `rng`."""

    def __init__(self, rng: random.Random, manifest: Manifest) -> None:
        self.rng = rng
        self.m = manifest
        self.clean = False
        self.fleet_sessions = 0
        """No malformed lines (the torn tails are decided by `generate`)."""
        # A vocabulary of a few thousand made-up words plus numbers: text that compresses about as
        # well as real tool output (a handful of words would make archives look unrealistically small).
        letters = "abcdefghijklmnopqrstuvwxyz"
        vocab = list(_WORDS) + ["".join(rng.choices(letters, k=rng.randrange(3, 11))) for _ in range(4000)]
        words = [
            rng.choice(vocab) if rng.random() < 0.85 else f"{rng.uniform(-1000, 1000):.{rng.randrange(4)}f}"
            for _ in range(200_000)
        ]
        self.filler = " ".join(words)  # ~1.5 MB; payloads are slices of it
        while len(self.filler) < (1 << 20) + 10:
            self.filler += " " + self.filler

    # --- payload shapes ----------------------------------------------------------------------
    def payload_size(self) -> int:
        """Tool result text size: mostly small, a long tail up to 1 MB."""
        u = self.rng.random()
        if u < 0.85:
            lo, hi = 30, 200
        elif u < 0.989:
            lo, hi = 200, 2000
        elif u < 0.9999:
            lo, hi = 2000, 65536
        else:
            lo, hi = 65536, 1 << 20
        return int(math.exp(self.rng.uniform(math.log(lo), math.log(hi))))

    def text(self, n: int) -> str:
        start = self.rng.randrange(0, len(self.filler) - n - 1)
        return self.filler[start : start + n]

    @staticmethod
    def envelope(client: tuple[str, str], version: str = MODERN) -> dict[str, Any]:
        return {
            _ENV_PV: version,
            _ENV_CAPS: {"sampling": {}},
            _ENV_INFO: {"name": client[0], "version": client[1]},
        }

    @staticmethod
    def request(rid: int | str, method: str, params: dict[str, Any]) -> bytes:
        return orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})

    @staticmethod
    def result(rid: int | str, result: dict[str, Any]) -> bytes:
        return orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result})

    @staticmethod
    def error(rid: int | str | None, code: int, message: str, data: Any = None) -> bytes:
        err: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            err["data"] = data
        return orjson.dumps({"jsonrpc": "2.0", "id": rid, "error": err})

    def discover_result(self, rid: int | str, name: str, versions: list[str], ttl: int) -> bytes:
        return self.result(
            rid,
            {
                "supportedVersions": versions,
                "capabilities": {"tools": {"listChanged": False}, "resources": {}},
                "resultType": "complete",
                "ttlMs": ttl,
                "cacheScope": "public",
                "_meta": {_SERVER_INFO: {"name": name, "version": "2.3.0"}},
            },
        )

    def tool_result(self, rid: int | str, modern: bool) -> bytes:
        res: dict[str, Any] = {"content": [{"type": "text", "text": self.text(self.payload_size())}], "isError": False}
        if modern:
            res["resultType"] = "complete"
        return self.result(rid, res)

    def tool_call(self, rid: int | str, client: tuple[str, str] | None, tool: str) -> bytes:
        params: dict[str, Any] = {"name": tool, "arguments": {"query": self.text(self.rng.randrange(8, 60))}}
        if client is not None:
            params["_meta"] = {**self.envelope(client), "progressToken": rid}
        return self.request(rid, "tools/call", params)

    def initialize(self, rid: int, client: tuple[str, str]) -> bytes:
        return self.request(
            rid,
            "initialize",
            {
                "protocolVersion": LEGACY,
                "capabilities": {"sampling": {}},
                "clientInfo": {"name": client[0], "version": client[1]},
            },
        )

    def init_result(self, rid: int, name: str) -> bytes:
        return self.result(
            rid,
            {
                "protocolVersion": LEGACY,
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": name, "version": "1.30.0"},
            },
        )

    def think(self) -> float:
        return self.rng.uniform(0.005, 0.4)

    def latency(self) -> float:
        return self.rng.uniform(0.002, 0.25)


# --- stdio -------------------------------------------------------------------------------------------
def _frame(conn: str, ts: float, direction: str, data: bytes) -> dict[str, Any]:
    return {
        "type": fmt.FRAME,
        "seq": None,
        "ts": ts,
        "conn": conn,
        "dir": direction,
        "raw": data.decode(),
        "len": len(data),
        "nl": True,
    }


def _stderr(conn: str, ts: float, text: str) -> dict[str, Any]:
    data = text.encode()
    return {"type": fmt.STDERR, "seq": None, "ts": ts, "conn": conn, "raw": text, "len": len(data), "nl": True}


def _life(conn: str, ts: float, event: str, **extra: Any) -> dict[str, Any]:
    return {"type": fmt.LIFECYCLE, "seq": None, "ts": ts, "conn": conn, "event": event, **extra}


def stdio_session(
    g: Gen,
    server: str,
    t: float,
    *,
    client: tuple[str, str],
    more: Callable[[], bool],
    probe: bool = True,
    throwaway: bool = False,
) -> Iterator[dict[str, Any]]:
    """One spawn of `server`, driven by `client` in auto mode, tool calls while `more()`."""
    rng = g.rng
    conn = _uuid(rng)
    pid = rng.randrange(1000, 400000)
    argv = {
        WEATHER: ["python", "-m", "weather_server"],
        FILES: ["uvx", "files-mcp", "--root", "/srv/data"],
        NOTES: ["npx", "-y", "notes-mcp"],
        RUSTY: ["/usr/local/bin/rusty-mcp", "--token=hmac:3f1a9c0b7d2e"],
        SLEEPY: ["node", "sleepy.js"],
        CHATTY: ["ruby", "chatty_mcp.rb"],
    }[server]
    yield _life(conn, t, fmt.EV_SPAWN, argv=argv, pid=pid, cwd="/home/user/project")
    modern = server == WEATHER
    legacy_py = server == FILES
    rid: int | str = 1
    t += rng.uniform(0.05, 0.6)  # interpreter start-up before the client's first line
    if probe:
        probe_id: int | str = "server-discover-probe-1" if client == TS_CLIENT else 1
        yield _frame(conn, t, fmt.C2S, g.request(probe_id, "server/discover", {"_meta": g.envelope(client)}))
        t += g.latency()
        if server == CHATTY:
            # a banner line before the answer: clients skip it, the answer still decides
            yield _frame(conn, t, fmt.S2C, b"chatty-mcp 0.4 starting, listening on stdio")
            g.m.probe(server, "legacy-answer")
            t += 0.001
            yield _frame(conn, t, fmt.S2C, g.error(probe_id, -32601, "Method not found"))
        elif modern:
            ttl = 0 if client == TS_CLIENT else 300000
            yield _frame(conn, t, fmt.S2C, g.discover_result(probe_id, server, [MODERN, LEGACY], ttl))
            g.m.probe(server, "discover-result")
        elif legacy_py:
            yield _frame(conn, t, fmt.S2C, g.error(probe_id, -32602, "Invalid request parameters", ""))
            yield _stderr(conn, t + 0.0004, "WARNING  Failed to validate request: server/discover")
            g.m.probe(server, "legacy-answer")
        elif server == NOTES:
            yield _frame(conn, t, fmt.S2C, g.error(probe_id, -32601, "Method not found"))
            g.m.probe(server, "legacy-answer")
        elif server == RUSTY:
            yield _stderr(conn, t, "Error: expected initialize request, got server/discover")
            yield _life(conn, t + 0.001, fmt.EV_SERVER_EOF)
            yield _life(conn, t + 0.002, fmt.EV_EXIT, code=1, status=1)
            g.m.probe(server, "connection-died")
            # the client's fallback fails locally: nothing more reaches the wire
            yield _life(conn, t + 0.05, fmt.EV_CLIENT_EOF)
            yield _life(conn, t + 2.0, fmt.EV_LINGER_END)
            return
        elif server == SLEEPY:
            t += 10.0  # the client's probe timeout
            g.m.probe(server, "no-answer")
        if throwaway:
            # the TypeScript client kills the probe process; the session runs on a sibling spawn
            t += 0.01
            yield _life(conn, t, fmt.EV_SIGNAL, signal="SIGTERM")
            yield _life(conn, t + 0.02, fmt.EV_SERVER_EOF)
            yield _life(conn, t + 0.03, fmt.EV_EXIT, signal="SIGTERM", status=143)
            yield _life(conn, t + 0.04, fmt.EV_CLIENT_EOF)
            return
        rid = 2 if isinstance(probe_id, int) else 1
    if not modern:
        t += 0.001
        yield _frame(conn, t, fmt.C2S, g.initialize(int(rid), client))
        t += g.latency()
        yield _frame(conn, t, fmt.S2C, g.init_result(int(rid), server))
        rid = int(rid) + 1
        yield _frame(conn, t + 0.001, fmt.C2S, b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        t += 0.002
    env_client = client if modern else None
    yield _frame(conn, t, fmt.C2S, g.request(rid, "tools/list", {"_meta": g.envelope(client)} if modern else {}))
    t += g.latency()
    tools = {"tools": [{"name": f"tool_{i}", "inputSchema": {"type": "object"}} for i in range(6)]}
    if modern:
        tools["resultType"] = "complete"
    yield _frame(conn, t, fmt.S2C, g.result(rid, tools))
    rid = int(rid) + 1
    while more():
        t += g.think()
        yield _frame(conn, t, fmt.C2S, g.tool_call(rid, env_client, f"tool_{rng.randrange(6)}"))
        if legacy_py:
            yield _stderr(conn, t + 0.0003, "INFO     Processing request of type CallToolRequest")
        t += g.latency()
        if rng.random() < 0.08:
            note = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": rid, "progress": 0.5},
            }
            yield _frame(conn, t, fmt.S2C, orjson.dumps(note))
            t += g.latency()
        yield _frame(conn, t, fmt.S2C, g.tool_result(rid, modern))
        rid += 1
    t += g.think()
    yield _life(conn, t, fmt.EV_CLIENT_EOF)
    yield _life(conn, t + 0.01, fmt.EV_SERVER_EOF)
    yield _life(conn, t + 0.02, fmt.EV_EXIT, code=0, status=0)


# --- HTTP ----------------------------------------------------------------------------------------
@dataclass
class HttpConn:
    conn: str
    client_addr: str
    server: str
    user_agent: str


def _req_headers(c: HttpConn, n: int, extra: list[list[str]]) -> list[list[str]]:
    host = c.server.split("/")[2]
    return [
        ["host", host],
        ["user-agent", c.user_agent],
        ["accept", "application/json, text/event-stream"],
        ["content-type", "application/json"],
        ["content-length", str(n)],
        *extra,
    ]


def http_exchange(
    g: Gen,
    c: HttpConn,
    t: float,
    body: bytes,
    extra_headers: list[list[str]],
    *,
    status: int,
    answer: bytes | None,
    peer: str,
    sse: list[bytes] | None = None,
    resp_headers: list[list[str]] | None = None,
    method: str = "POST",
    error: str | None = None,
) -> Iterator[dict[str, Any]]:
    """One flow: request, then a JSON response, an SSE stream, or an `http.error`."""
    flow = _uuid(g.rng)
    yield {
        "type": fmt.HTTP_REQUEST,
        "seq": None,
        "ts": t,
        "server": c.server,
        "conn": c.conn,
        "flow": flow,
        "method": method,
        "url": c.server,
        "http_version": "HTTP/1.1",
        "headers": _req_headers(c, len(body), extra_headers),
        "raw": body.decode(),
        "len": len(body),
        "body_policy": "full",
        "client": c.client_addr,
        "sni": c.server.split("/")[2],
    }
    t1 = t + g.latency()
    if error is not None:
        t1 = t + 10.0 + g.latency() / 10  # the client gave up after its 10 s probe timeout
        yield {
            "type": fmt.HTTP_ERROR,
            "seq": None,
            "ts": t1,
            "server": c.server,
            "conn": c.conn,
            "flow": flow,
            "kind": error,
            "error": "Client disconnected." if error == "client-gone" else "Upstream timed out.",
            "phase": "response",
        }
        return
    headers = [["date", "Sat, 28 Nov 2026 22:00:00 GMT"], ["server", "uvicorn"], *(resp_headers or [])]
    rec: dict[str, Any] = {
        "type": fmt.HTTP_RESPONSE,
        "seq": None,
        "ts": t1,
        "server": c.server,
        "conn": c.conn,
        "flow": flow,
        "status": status,
        "reason": {200: "OK", 202: "Accepted", 400: "Bad Request", 404: "Not Found"}.get(status, ""),
        "http_version": "HTTP/1.1",
        "peer": peer,
        "t_request": t,
        "t_headers": t1,
    }
    if sse is None:
        data = answer or b""
        rec["headers"] = [*headers, ["content-type", "application/json"], ["content-length", str(len(data))]]
        rec.update(raw=data.decode(), len=len(data), streamed=False, t_end=t1)
        yield rec
        return
    rec["headers"] = [*headers, ["content-type", "text/event-stream"], ["cache-control", "no-cache"]]
    rec.update(streamed=True, t_end=None)
    yield rec
    for i, data in enumerate(sse):
        t1 += g.latency() / 4
        yield {
            "type": fmt.SSE_EVENT,
            "seq": None,
            "ts": t1,
            "server": c.server,
            "conn": c.conn,
            "flow": flow,
            "index": i,
            "sse_event": "message",
            "raw": data.decode(),
            "len": len(data),
        }
    yield {
        "type": fmt.SSE_END,
        "seq": None,
        "ts": t1,
        "server": c.server,
        "conn": c.conn,
        "flow": flow,
        "how": "clean",
        "events": len(sse),
    }


class Clock:
    """A session's current time, shared with the sub-generators that advance it."""

    def __init__(self, t: float) -> None:
        self.t = t

    def run(self, it: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for rec in it:
            self.t = rec["ts"]
            yield rec


def http_session(
    g: Gen,
    server: str,
    t: float,
    *,
    client: tuple[str, str],
    more: Callable[[], bool],
    calls: int | None = None,
) -> Iterator[dict[str, Any]]:
    """One client connection to `server` in auto mode: probe, fall back if told to, tool calls."""
    rng = g.rng
    c = HttpConn(
        _uuid(rng), f"127.0.0.1:{rng.randrange(30000, 61000)}", server, f"{client[0]}/{client[1]} python-httpx/0.28"
    )
    ck = Clock(t)
    node = "10.0.0.5:8080"
    first = [True]

    def peer() -> str:
        if server != FLEET:
            return node
        if first[0]:
            # new connections go to the nodes in turn, so every node sees probes
            first[0] = False
            g.fleet_sessions += 1
            return list(FLEET_NODES)[g.fleet_sessions % len(FLEET_NODES)]
        return rng.choice(list(FLEET_NODES))  # later flows land wherever the balancer sends them

    modern_h = [["mcp-protocol-version", MODERN]]
    version = DRAFT if server == RC else MODERN
    probe = g.request(1, "server/discover", {"_meta": g.envelope(client, version)})
    hdrs = [["mcp-protocol-version", version], ["mcp-method", "server/discover"]]
    p = peer()
    era = FLEET_NODES.get(p, "modern") if server == FLEET else "modern"
    rid = 2
    if server == LEGACY_HTTP or (server == FLEET and era == "legacy"):
        body = g.error("server-error", -32600, "Bad Request: Missing session ID")
        yield from ck.run(
            http_exchange(
                g,
                c,
                ck.t,
                probe,
                hdrs,
                status=400,
                answer=body,
                peer=p,
                resp_headers=[["mcp-session-id", "hmac:" + f"{rng.getrandbits(48):012x}"]],
            )
        )
        g.m.probe(server, "legacy-answer", p)
        modern = False
    elif server == SLOW:
        yield from ck.run(http_exchange(g, c, ck.t, probe, hdrs, status=0, answer=None, peer=p, error="client-gone"))
        g.m.probe(server, "no-answer")
        modern = False
    elif server == RC:
        body = g.error(1, -32022, "Unsupported protocol version", {"supported": [MODERN], "requested": DRAFT})
        yield from ck.run(http_exchange(g, c, ck.t, probe, hdrs, status=400, answer=body, peer=p))
        g.m.probe(server, "unsupported-version")
        ck.t += 0.002
        probe = g.request(2, "server/discover", {"_meta": g.envelope(client)})
        body = g.discover_result(2, "rc-server", [MODERN], 60000)
        yield from ck.run(
            http_exchange(
                g, c, ck.t, probe, [*modern_h, ["mcp-method", "server/discover"]], status=200, answer=body, peer=p
            )
        )
        g.m.probe(server, "discover-result")
        rid = 3
        modern = True
    else:
        ttl = 0 if server == API else 300000
        body = g.discover_result(1, server.split("/")[2], [MODERN, LEGACY] if server == FLEET else [MODERN], ttl)
        yield from ck.run(http_exchange(g, c, ck.t, probe, hdrs, status=200, answer=body, peer=p))
        g.m.probe(server, "discover-result", p)
        modern = True
    session: list[list[str]] = []
    if not modern:
        ck.t += 0.003
        sid = "hmac:" + f"{rng.getrandbits(48):012x}"
        init = g.initialize(rid, client)
        yield from ck.run(
            http_exchange(
                g,
                c,
                ck.t,
                init,
                [],
                status=200,
                answer=None,
                peer=peer(),
                sse=[g.init_result(rid, "legacy")],
                resp_headers=[["mcp-session-id", sid]],
            )
        )
        rid += 1
        session = [["mcp-session-id", sid], ["mcp-protocol-version", LEGACY]]
        note = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
        yield from ck.run(http_exchange(g, c, ck.t + 0.001, note, session, status=202, answer=b"", peer=peer()))
    n = 0
    while (calls is None and more()) or (calls is not None and n < calls):
        n += 1
        ck.t += g.think()
        tool = f"tool_{rng.randrange(6)}"
        if modern:
            body = g.tool_call(rid, client, tool)
            hdrs = [*modern_h, ["mcp-method", "tools/call"], ["mcp-name", tool]]
            if rng.random() < 0.1:
                progress = orjson.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/progress",
                        "params": {"progressToken": rid, "progress": 0.5},
                    }
                )
                yield from ck.run(
                    http_exchange(
                        g,
                        c,
                        ck.t,
                        body,
                        hdrs,
                        status=200,
                        answer=None,
                        peer=peer(),
                        sse=[progress, g.tool_result(rid, True)],
                    )
                )
            else:
                yield from ck.run(
                    http_exchange(g, c, ck.t, body, hdrs, status=200, answer=g.tool_result(rid, True), peer=peer())
                )
        else:
            body = g.tool_call(rid, None, tool)
            yield from ck.run(
                http_exchange(
                    g, c, ck.t, body, session, status=200, answer=None, peer=peer(), sse=[g.tool_result(rid, False)]
                )
            )
        rid += 1
    if session:
        yield from ck.run(
            http_exchange(g, c, ck.t + 0.01, b"", session, status=200, answer=b"", peer=peer(), method="DELETE")
        )


def storm(g: Gen, t: float, count: int) -> Iterator[dict[str, Any]]:
    """`count` connections to API, each a fresh client: probe (ttlMs 0) + one tool call.

    The connections overlap in time, so their records are merged by timestamp.
    """
    sessions = []
    for _ in range(count):
        sessions.append(http_session(g, API, t, client=STORM_CLIENT, more=lambda: False, calls=1))
        t += g.rng.uniform(0.05, 0.35)
    return heapq.merge(*sessions, key=lambda r: r["ts"])


# --- files ---------------------------------------------------------------------------------------
class Merger:
    """Interleaves concurrent sessions by timestamp, the way a proxy sees overlapping flows."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, dict[str, Any], Iterator[dict[str, Any]]]] = []
        self._n = 0

    def add(self, it: Iterator[dict[str, Any]]) -> None:
        rec = next(it, None)
        if rec is not None:
            self._n += 1
            heapq.heappush(self._heap, (rec["ts"], self._n, rec, it))

    def __len__(self) -> int:
        return len(self._heap)

    def pop(self) -> tuple[dict[str, Any], bool]:
        """Next record by time, and whether its session just ended."""
        _, _, rec, it = heapq.heappop(self._heap)
        nxt = next(it, None)
        if nxt is not None:
            self._n += 1
            heapq.heappush(self._heap, (nxt["ts"], self._n, nxt, it))
        return rec, nxt is None


def _malformed_lines(g: Gen) -> list[tuple[str, bytes]]:
    return [
        ("truncated", b'{"type":"frame","seq":' + str(g.rng.randrange(10**6)).encode() + b',"ts":1796'),
        ("garbage", b"Traceback (most recent call last): disk full while writing capture"),
        ("nul", b"\x00" * 64),
    ]


def write_bulk_http(g: Gen, cf: CaptureFile, budget: int, *, fleet_file: bool) -> None:
    """A proxy run seeing several servers; the first one also hides the storm."""
    rng = g.rng
    m = Merger()
    t = cf._start + 0.5
    servers = [API, FLEET, LEGACY_HTTP, RC, SLOW]
    weights = [45, 25, 18, 7, 5]

    def full() -> bool:
        return cf.bytes >= budget

    storm_at = budget * 0.4 if fleet_file else None
    malformed_at = [] if g.clean else sorted(rng.uniform(0.1, 0.9) * budget for _ in range(3))
    concurrency = 4
    while True:
        while len(m) < concurrency and not full():
            server = rng.choices(servers, weights)[0]
            t += rng.uniform(0.01, 0.5)
            calls = rng.randrange(3, 60)
            m.add(http_session(g, server, t, client=rng.choice(CLIENTS), more=lambda: False, calls=calls))
        if not len(m):
            break
        rec, _ = m.pop()
        t = max(t, rec["ts"])
        cf.emit(rec)
        if storm_at is not None and cf.bytes >= storm_at:
            storm_at = None
            count = min(600, max(40, budget // 40_000)) + rng.randrange(20)
            g.m.storm = {
                "server": API,
                "client": STORM_CLIENT[0],
                "client_version": STORM_CLIENT[1],
                "probes": count,
                "file": cf.path.name,
                "start_ts": t + 0.1,
            }
            m.add(storm(g, t + 0.1, count))
        while malformed_at and cf.bytes >= malformed_at[0]:
            malformed_at.pop(0)
            kind, data = rng.choice(_malformed_lines(g))
            line = cf.raw_line(data)
            g.m.malformed.append({"file": cf.path.name, "line": line, "kind": kind})


def write_bulk_stdio(g: Gen, cf: CaptureFile, budget: int, server: str) -> None:
    """One long-lived spawn doing many tool calls."""
    rng = g.rng
    malformed_at = [] if g.clean else sorted(rng.uniform(0.1, 0.9) * budget for _ in range(2))
    session = stdio_session(g, server, cf._start + 0.01, client=CLIENTS[0], more=lambda: cf.bytes < budget)
    for rec in session:
        cf.emit(rec)
        while malformed_at and cf.bytes >= malformed_at[0]:
            malformed_at.pop(0)
            kind, data = rng.choice(_malformed_lines(g))
            g.m.malformed.append({"file": cf.path.name, "line": cf.raw_line(data), "kind": kind})


def write_spawn(
    g: Gen,
    out: Path,
    t: float,
    server: str,
    client: tuple[str, str],
    *,
    throwaway: bool,
    probe: bool = True,
    calls: int | None = None,
) -> CaptureFile:
    rng = g.rng
    cf = CaptureFile(out, transport=fmt.STDIO, server=server, start=t, rng=rng)
    calls = rng.randrange(1, 25) if calls is None else calls
    left = [calls]

    def more() -> bool:
        left[0] -= 1
        return left[0] >= 0

    for rec in stdio_session(g, server, t + 0.001, client=client, more=more, probe=probe, throwaway=throwaway):
        cf.emit(rec)
    return cf


def generate(
    out: Path,
    size: int,
    *,
    files: int | None = None,
    spawns: int | None = None,
    seed: int = 1,
    clean: bool = False,
) -> Manifest:
    """Write captures totalling about `size` bytes into `out` (created), plus manifest.json.

    `files` bulk files (default: one per 256 MiB, the recorder's rotation size, at least 2; a third
    of them stdio sessions, the rest HTTP proxy runs) carry the volume; `spawns` small stdio spawn
    captures (default 24, plus one per 64 MiB) carry the stdio probe-outcome mix. The first HTTP
    file hides the probe storm.
    `clean` leaves out malformed and torn lines (a bare `scan_ndjson` baseline cannot read those).
    """
    out.mkdir(parents=True, exist_ok=True)
    if any(out.glob("*" + fmt.CAPTURE_SUFFIX)):
        raise FileExistsError(f"{out} already holds captures; generate into an empty directory")
    rng = random.Random(seed)
    manifest = Manifest(seed=seed, size_target=size, clean=clean)
    g = Gen(rng, manifest)
    g.clean = clean
    n_files = files if files is not None else max(2, math.ceil(size / DEFAULT_ROTATE_BYTES))
    n_spawns = spawns if spawns is not None else 24 + size // (64 << 20)
    small = n_spawns * 6000  # rough share of the spawn captures
    per_file = max(20_000, (size - small) // max(1, n_files))
    n_stdio = n_files // 3
    span = 4.5 * 3600  # files start across 4.5 hours from 22:00 UTC: two days
    done = 0

    def finish(cf: CaptureFile, kind: str) -> None:
        # closed as soon as written: hundreds of spawn captures must not hold hundreds of descriptors
        nonlocal done
        torn = None
        if done % 3 == 1 and not clean:  # every third file ends in a torn line, as a killed recorder leaves
            torn = b'{"type":"frame","seq":' + str(cf.seq + 1).encode() + b',"ts":17964'
            manifest.torn.append({"file": cf.path.name, "line": cf.lines + 1})
        done += 1
        cf.close(torn)
        manifest.files.append(
            {
                "name": cf.path.name,
                "kind": kind,
                "transport": cf.transport,
                "bytes": cf.bytes,
                "lines": cf.lines,
                "records": cf.records,
            }
        )

    for i in range(n_files):
        start = BASE_TS + span * i / max(1, n_files) + rng.uniform(0, 60)
        if i % 3 == 2 and i // 3 < n_stdio:
            server = WEATHER if (i // 3) % 2 == 0 else FILES
            cf = CaptureFile(out, transport=fmt.STDIO, server=server, start=start, rng=rng)
            write_bulk_stdio(g, cf, per_file, server)
            finish(cf, "stdio-session")
        else:
            cf = CaptureFile(out, transport=fmt.HTTP, server="proxy", start=start, rng=rng)
            write_bulk_http(g, cf, per_file, fleet_file=(i == 0))
            finish(cf, "http-proxy")
    spawn_mix = [WEATHER, WEATHER, WEATHER, FILES, FILES, NOTES, RUSTY, SLEEPY, CHATTY]
    for j in range(n_spawns):
        t = BASE_TS + span * j / max(1, n_spawns) + rng.uniform(0, 30)
        server = spawn_mix[j % len(spawn_mix)]
        if j % 8 == 7:  # the TypeScript client: throwaway probe spawn, then the session spawn
            finish(write_spawn(g, out, t, WEATHER, TS_CLIENT, throwaway=True), "stdio-spawn")
            finish(write_spawn(g, out, t + 0.2, WEATHER, TS_CLIENT, throwaway=False, probe=False), "stdio-spawn")
            continue
        finish(write_spawn(g, out, t, server, rng.choice(CLIENTS), throwaway=False), "stdio-spawn")
    manifest.files.sort(key=lambda f: f["name"])
    (out / "manifest.json").write_bytes(manifest.to_json())
    return manifest


def generate_spawns(out: Path, count: int, *, seed: int = 1, calls: int | None = None) -> Manifest:
    """`count` small stdio captures, one per spawn: a host that spawns its server per call fills a
    capture directory this way. By default each is a probe spawn the client kills once answered
    (about 2.2 kB, 8 lines); with `calls`, a session of that many tool calls (1: about 4 kB)."""
    out.mkdir(parents=True, exist_ok=True)
    if any(out.glob("*" + fmt.CAPTURE_SUFFIX)):
        raise FileExistsError(f"{out} already holds captures; generate into an empty directory")
    rng = random.Random(seed)
    manifest = Manifest(seed=seed, size_target=0, clean=True)
    g = Gen(rng, manifest)
    g.clean = True
    mix = [WEATHER, WEATHER, FILES, NOTES, CHATTY]
    for j in range(count):
        t = BASE_TS + 86400 * j / max(1, count)
        server, client = mix[j % len(mix)], rng.choice(CLIENTS)
        cf = write_spawn(g, out, t, server, client, throwaway=calls is None, calls=calls or 0)
        cf.close()
        manifest.files.append(
            {
                "name": cf.path.name,
                "kind": "stdio-spawn",
                "transport": cf.transport,
                "bytes": cf.bytes,
                "lines": cf.lines,
                "records": cf.records,
            }
        )
    (out / "manifest.json").write_bytes(manifest.to_json())
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.generate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", required=True, help="total size, e.g. 1GB, 512MB, 300k")
    ap.add_argument("--out", required=True, type=Path, help="directory to create (must hold no captures)")
    ap.add_argument("--files", type=int, default=None, help="bulk files (default: one per 256 MiB, at least 2)")
    ap.add_argument("--spawns", type=int, default=None, help="small stdio spawn captures (default 24 + 1 per 64 MiB)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--clean", action="store_true", help="no malformed or torn lines")
    args = ap.parse_args(argv)
    try:
        size = parse_size(args.size)
        m = generate(args.out, size, files=args.files, spawns=args.spawns, seed=args.seed, clean=args.clean)
    except (ValueError, FileExistsError) as exc:
        print(f"bench.generate: error: {exc}", file=sys.stderr)
        return 2
    total = sum(f["bytes"] for f in m.files)
    records = sum(f["records"] for f in m.files)
    print(f"wrote {len(m.files)} files, {total / 2**20:.1f} MiB, {records} records to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
