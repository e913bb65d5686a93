"""Build small, consistent analysis frames by hand: for rule tests and rule examples.

A `Scenario` writes rows with exactly the `MESSAGES`, `PROBES` and `INITS` schemas, numbering lines
as a capture file would, so a probe row, its request message and its answer agree on file and line.

    s = Scenario()
    c = s.conn("weather", "c1", client="claude")
    c.probe(0.0, "discover-result", versions=["2026-07-28"])
    c.call(0.5)
    findings = run_rules(s.analysis())
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import polars as pl

from analyzer.rules.frames import frame
from analyzer.schema import INITS_SCHEMA, MESSAGES_SCHEMA, MODERN_VERSIONS, PROBES_SCHEMA

MODERN = "2026-07-28"
LEGACY = "2025-11-25"

_PROBE_ERROR_CODES = {"unsupported-version": -32022, "modern-error": -32020, "legacy-answer": -32602}
_INIT_ERROR_CODES = {"refused-named": -32022, "refused-unnamed": -32022}


@dataclass
class Scenario:
    """Rows of one analysis; `start` is the epoch second that `t=0` stands for."""

    start: float = 1_800_000_000.0
    messages: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)
    inits: list[dict[str, Any]] = field(default_factory=list)
    _lines: dict[str, int] = field(default_factory=dict)

    def conn(
        self,
        server: str,
        conn: str,
        *,
        client: str | None = "client",
        transport: str = "stdio",
        file: str | None = None,
        version: str | None = None,
        user_agent: str | None = None,
        address: str | None = None,
    ) -> Conn:
        """A connection (stdio spawn or HTTP client connection) to `server`.

        Its requests carry clientInfo `client` / `version`, and over HTTP `user_agent` and the client
        `address` (`ip:port`); `Conn.spawn` names the host process of a stdio connection.
        """
        return Conn(self, server, conn, client, transport, file or f"{conn}.jsonl", version, user_agent, address)

    def add(self, file: str, t: float, **row: Any) -> int:
        """Append one message row at `t` seconds; returns its line number."""
        line = self._lines.get(file, 0) + 1
        self._lines[file] = line
        capture = file.removesuffix(".jsonl")
        self.messages.append({"file": file, "capture": capture, "line": line, "seq": line, "ts": self.start + t, **row})
        return line

    def analysis(self) -> SimpleNamespace:
        """The frames as an object with `messages`, `probes` and `inits` (what `run_rules` reads)."""
        return SimpleNamespace(
            messages=frame(MESSAGES_SCHEMA, self.messages),
            probes=frame(PROBES_SCHEMA, self.probes),
            inits=frame(INITS_SCHEMA, self.inits),
        )

    def frames(self) -> dict[str, pl.DataFrame]:
        """The frames by name."""
        a = self.analysis()
        return {"messages": a.messages, "probes": a.probes, "inits": a.inits}


@dataclass
class Conn:
    """Adds traffic on one connection; every method returns the request's line number."""

    scenario: Scenario
    server: str
    conn: str
    client: str | None
    transport: str
    file: str
    version: str | None = None
    user_agent: str | None = None
    address: str | None = None

    def _base(self) -> dict[str, Any]:
        return {"server": self.server, "conn": self.conn, "transport": self.transport}

    def _classified(self, line: int, t: float, id: str, version: str | None) -> dict[str, Any]:
        """The request columns a probes or inits row shares with its request."""
        return {
            "file": self.file,
            "line": line,
            "server": self.server,
            "transport": self.transport,
            "conn": self.conn,
            "ts": self.scenario.start + t,
            "id": id,
            "requested_version": version,
        }

    def _request(self, t: float, method: str, id: str | None, **extra: Any) -> int:
        record_type = "http.request" if self.transport == "http" else "frame"
        return self.scenario.add(
            self.file,
            t,
            **self._base(),
            record_type=record_type,
            dir="c2s",
            kind="request",
            method=method,
            id=id,
            # as loading gives it: the clientInfo name, else the User-Agent
            client_name=self.client or self.user_agent,
            client_version=self.version,
            user_agent=self.user_agent,
            client_addr=self.address,
            **extra,
        )

    def _answer(self, t: float, req_line: int, req_t: float, method: str, id: str | None, **extra: Any) -> int:
        record_type = "http.response" if self.transport == "http" else "frame"
        kind = "error" if extra.get("error_code") is not None else "response"
        # what the SDKs say with the codes legacy servers refuse a sessionless request with
        default = {-32000: "Server not initialized", -32600: "Bad Request: Missing session ID"}
        if extra.get("error_message") is None and extra.get("error_code") in default:
            extra["error_message"] = default[extra["error_code"]]
        return self.scenario.add(
            self.file,
            t,
            **self._base(),
            record_type=record_type,
            dir="s2c",
            kind=extra.pop("kind", kind),
            method=method,
            id=id,
            req_line=req_line,
            req_seq=req_line,
            req_ts=self.scenario.start + req_t,
            **extra,
        )

    def probe(
        self,
        t: float,
        outcome: str,
        *,
        id: str = "1",
        version: str | None = MODERN,
        versions: list[str] | None = None,
        error_code: int | None = None,
        ttl_ms: int | None = None,
        well_formed: bool = True,
        peer: str | None = None,
        answer_after: float = 0.01,
        http_status: int | None = None,
        upstream_error: str | None = None,
    ) -> int:
        """A `server/discover` probe and the answer its `outcome` implies (none for no-answer).

        `connection-died` is the server's exit, or with `upstream_error` (a `kind` of `http.error`)
        the proxy failing to reach the server (see `Conn.upstream_error`)."""
        http = self.transport == "http"
        line = self._request(
            t,
            "server/discover",
            id,
            meta_version=version if well_formed else None,
            has_envelope=well_formed,
            header_version=version if http and well_formed else None,
            header_method="server/discover" if http and well_formed else None,
        )
        if error_code is None:
            error_code = _PROBE_ERROR_CODES.get(outcome)
        if versions is None and outcome == "discover-result":
            versions = [MODERN]
        answer_line = answer_ts = None
        at = t + answer_after
        if outcome in ("discover-result", "unsupported-version", "modern-error", "legacy-answer"):
            answer_line = self._answer(
                at,
                line,
                t,
                "server/discover",
                id,
                error_code=error_code if outcome != "discover-result" else None,
                supported_versions=versions if outcome == "discover-result" else None,
                error_supported=versions if outcome == "unsupported-version" else None,
                ttl_ms=ttl_ms,
                peer=peer,
                http_status=http_status,
            )
            answer_ts = self.scenario.start + at
        elif outcome == "garbage":
            answer_line = self.stdout_line(at)
            answer_ts = self.scenario.start + at
        elif outcome == "connection-died":
            answer_line = self.upstream_error(at, upstream_error) if upstream_error else self.exit(at)
            answer_ts = self.scenario.start + at
        self.scenario.probes.append(
            {
                **self._classified(line, t, id, version),
                "well_formed": well_formed,
                "outcome": outcome,
                "answer_file": None,  # one file: the answer is in the request's
                "answer_line": answer_line,
                "answer_ts": answer_ts,
                "error_code": error_code if outcome not in ("discover-result", "no-answer") else None,
                "http_status": http_status,
                "versions": versions,
                "modern_versions": bool(set(versions or ()) & MODERN_VERSIONS),
                "ttl_ms": ttl_ms,
                "peer": peer,
                "client_name": self.client,
            }
        )
        return line

    def init(
        self,
        t: float,
        outcome: str = "served",
        *,
        id: str = "1",
        version: str = LEGACY,
        error_code: int | None = None,
        versions: list[str] | None = None,
        peer: str | None = None,
        answer_after: float = 0.01,
        upstream_error: str | None = None,
    ) -> int:
        """An `initialize` request and the answer its `outcome` implies (`upstream_error`: as `probe`)."""
        line = self._request(t, "initialize", id, init_version=version)
        if error_code is None:
            error_code = _INIT_ERROR_CODES.get(outcome)
        answer_line = None
        at = t + answer_after
        if outcome == "served":
            answer_line = self._answer(at, line, t, "initialize", id, init_version=version, peer=peer)
            versions = versions or [version]
        elif outcome in ("refused-named", "refused-unnamed"):
            named = versions if outcome == "refused-named" else None
            answer_line = self._answer(
                at, line, t, "initialize", id, error_code=error_code, error_supported=named, peer=peer
            )
        elif outcome == "connection-died":
            answer_line = self.upstream_error(at, upstream_error) if upstream_error else self.exit(at)
        self.scenario.inits.append(
            {
                **self._classified(line, t, id, version),
                "outcome": outcome,
                "answer_file": None,
                "answer_line": answer_line,
                "error_code": error_code if outcome != "served" else None,
                "versions": versions,
                "peer": peer,
                "client_name": self.client,
            }
        )
        return line

    def call(
        self,
        t: float,
        method: str = "tools/call",
        *,
        id: str = "2",
        modern: bool = False,
        session: str | None = None,
        error_code: int | None = None,
        answer: bool = True,
        http_status: int | None = None,
    ) -> int:
        """A real request (modern when it carries the envelope), answered unless `answer=False`."""
        line = self._request(
            t,
            method,
            id,
            meta_version=MODERN if modern else None,
            has_envelope=modern,
            session_id=session,
        )
        if answer:
            self._answer(t + 0.01, line, t, method, id, error_code=error_code, http_status=http_status)
        return line

    def spawn(self, t: float, host: str | None = None) -> int:
        """The server process started (stdio), by the host process whose command line is `host`."""
        return self.scenario.add(
            self.file, t, **self._base(), record_type="lifecycle", kind="lifecycle", event="spawn", host_process=host
        )

    def upstream_error(self, t: float, kind: str = "connection-refused", error: str | None = None) -> int:
        """An HTTP flow error the recorder wrote (`http.error` of `kind`): by default, nothing listened."""
        message = error or "Multiple exceptions: [Errno 111] Connect call failed ('127.0.0.1', 8000)"
        return self.scenario.add(
            self.file,
            t,
            **self._base(),
            record_type="http.error",
            kind="lifecycle",
            event=f"http-error:{kind}",
            error_message=message,
        )

    def stdout_line(self, t: float) -> int:
        """A line on the server's stdout that is not JSON-RPC."""
        return self.scenario.add(self.file, t, **self._base(), record_type="frame", dir="s2c", kind="invalid")

    def exit(self, t: float, code: int = 1) -> int:
        """The server process exited."""
        return self.scenario.add(
            self.file, t, **self._base(), record_type="lifecycle", kind="lifecycle", event="exit", exit_code=code
        )
