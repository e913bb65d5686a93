"""The analyzer's frames: explicit polars schemas, the contract between loading, rules and reports.

Capture records are read with `RECORD_SCHEMA` (never inferred: inference drops fields and fails on
ids that are sometimes strings). Loading turns them into the `MESSAGES` frame, one row per record,
both transports alike. Classification adds the `PROBES` and `INITS` frames. Rules read these.
"""

from __future__ import annotations

from typing import Final

import polars as pl

HEADERS_DTYPE: Final = pl.List(pl.List(pl.String))
"""HTTP headers in wire order: a list of [name, value] pairs."""

RECORD_SCHEMA: Final[dict[str, pl.DataType]] = {
    # every record
    "type": pl.String(),
    "seq": pl.Int64(),
    "ts": pl.Float64(),
    "mono": pl.Float64(),
    "server": pl.String(),
    "conn": pl.String(),
    # header
    "format": pl.String(),
    "transport": pl.String(),
    "tool_version": pl.String(),
    "host": pl.String(),
    "part": pl.Int64(),
    # payload (frames, stderr, http bodies, sse data)
    "dir": pl.String(),
    "raw": pl.String(),
    "raw_b64": pl.String(),
    "len": pl.Int64(),
    "nl": pl.Boolean(),
    # lifecycle
    "event": pl.String(),
    "pid": pl.Int64(),
    "code": pl.Int64(),
    "signal": pl.String(),
    "error": pl.String(),
    "lost": pl.Int64(),
    "undecodable": pl.String(),  # http bodies: the Content-Encoding they do not decode with
    "parent_argv": pl.List(pl.String()),  # spawn: the host process that started the tee, redacted
    # http
    "flow": pl.String(),
    "method": pl.String(),
    "url": pl.String(),
    "http_version": pl.String(),
    "headers": HEADERS_DTYPE,
    "status": pl.Int64(),
    "reason": pl.String(),
    "streamed": pl.Boolean(),
    "body_policy": pl.String(),
    "client": pl.String(),
    "peer": pl.String(),
    "sni": pl.String(),
    "sse_event": pl.String(),
    "sse_id": pl.String(),
    "index": pl.Int64(),
    "how": pl.String(),
    "kind": pl.String(),
    "sse_retry": pl.Int64(),
    "t_request": pl.Float64(),  # http: request start (wall clock)
    "t_headers": pl.Float64(),  # http.response: response headers received
    "t_end": pl.Float64(),  # http.response (null when streamed) / sse.end: response end
    "events": pl.Int64(),  # sse.end: events that passed
    "incomplete": pl.Boolean(),  # sse.end: the stream stopped mid-event
    "phase": pl.String(),  # http.error: connect | request | response
    "wire_len": pl.Int64(),  # http bodies: bytes on the wire when Content-Encoding was decoded
    "truncated": pl.Boolean(),  # http bodies: only the first max_body bytes were recorded
    "decoded_len": pl.Int64(),  # with truncated: the full decoded size (null: unknown, decoding stopped)
    "idle_s": pl.Float64(),  # http.error kind timeout: seconds the flow was idle before the proxy cut it
}

UNREAD_FIELDS: Final = frozenset({"chain", "method_b64", "url_b64"})
"""Record fields the analyzer deliberately leaves out of `RECORD_SCHEMA`: the hash chain is checked by
`erascope verify` (`analyzer.verify`), never by the analysis; `method_b64` / `url_b64` are the exact
bytes of a method or target that was not UTF-8, which the analysis reads as `method` / `url` write
them (`%XX`)."""

KINDS: Final = ("request", "response", "error", "notification", "invalid", "lifecycle")

# The logical columns of the messages frame. In memory, `analyzer.messages` holds the repetitive
# string columns as `pl.Categorical` (half the memory on big inputs) and `flow` as a 64-bit key
# (`messages.flow_key`; frames derived from it, such as PROBES, carry that key as text); Parquet
# archives store strings and the flow ids themselves. Code that needs string functions on the
# frame converts with `messages.as_strings`.
MESSAGES_SCHEMA: Final[dict[str, pl.DataType]] = {
    "file": pl.String(),  # capture file path as given/found
    "line": pl.UInt32(),  # 1-based line number in that file
    "server": pl.String(),
    "transport": pl.String(),  # stdio | http
    "conn": pl.String(),  # stdio spawn / http client connection
    "flow": pl.String(),  # http flow id; null on stdio
    "seq": pl.Int64(),
    "ts": pl.Float64(),
    "record_type": pl.String(),  # the capture record's `type`
    "dir": pl.String(),  # c2s | s2c; null for lifecycle
    "kind": pl.String(),  # one of KINDS
    "id": pl.String(),  # JSON-RPC id as JSON text: 1 -> "1", "a" -> "\"a\"" (keeps the type)
    "method": pl.String(),  # requests/notifications; responses get their request's method by pairing
    "error_code": pl.Int64(),
    "error_message": pl.String(),
    "meta_version": pl.String(),  # params._meta["io.modelcontextprotocol/protocolVersion"]
    "has_envelope": pl.Boolean(),  # request _meta has protocolVersion and clientCapabilities
    "supported_versions": pl.List(pl.String()),  # a DiscoverResult's supportedVersions (null: no DiscoverResult)
    "error_supported": pl.List(pl.String()),  # error data.supported
    "error_requested": pl.String(),  # error data.requested
    "init_version": pl.String(),  # initialize params/result protocolVersion
    "ttl_ms": pl.Int64(),  # DiscoverResult ttlMs
    "header_version": pl.String(),  # mcp-protocol-version request header
    "header_method": pl.String(),  # mcp-method request header
    "session_id": pl.String(),  # mcp-session-id (hashed in captures)
    "http_status": pl.Int64(),
    "peer": pl.String(),  # upstream address that answered (http)
    "node_hint": pl.String(),  # Server / Via / X-Served-By response header, or result serverInfo
    "client_name": pl.String(),  # clientInfo name (envelope or initialize), else User-Agent
    "client_version": pl.String(),
    "user_agent": pl.String(),
    "client_addr": pl.String(),  # http.request: the client's address `ip:port` as the recorder saw it
    "host_process": pl.String(),  # stdio spawn: the command line of the host that started the tee
    "event": pl.String(),  # lifecycle event; for stdio `exit` also code/signal below
    "exit_code": pl.Int64(),
    "signal": pl.String(),
    "req_line": pl.UInt32(),  # on responses/errors: line of the paired request (same conn/flow)
    "req_ts": pl.Float64(),
    "capture": pl.String(),  # capture id: file name without the part suffix (rotated parts share it)
    "req_seq": pl.Int64(),  # on responses/errors: seq of the paired request (unique within a capture)
}

PROBE_OUTCOMES: Final = (
    "discover-result",
    "unsupported-version",
    "modern-error",
    "legacy-answer",
    "no-answer",
    "connection-died",
    "garbage",
    "malformed-probe",
    "cross-era-refusal",
    "auth-required",
    "rate-limited",
    "redirected",
    "gateway-error",
    "undecodable",
)

PROBES_SCHEMA: Final[dict[str, pl.DataType]] = {
    "file": pl.String(),
    "line": pl.UInt32(),  # the probe request
    "server": pl.String(),
    "transport": pl.String(),
    "conn": pl.String(),
    "flow": pl.String(),
    "ts": pl.Float64(),
    "id": pl.String(),
    "requested_version": pl.String(),  # meta_version (or header) the probe named
    "well_formed": pl.Boolean(),  # envelope + required keys (+ http headers)
    "outcome": pl.String(),  # one of PROBE_OUTCOMES
    "answer_file": pl.String(),  # file of the deciding answer/event when not `file` (a rotated capture's next part)
    "answer_line": pl.UInt32(),  # line of the deciding answer/event; null for no-answer
    "answer_ts": pl.Float64(),
    "error_code": pl.Int64(),
    "http_status": pl.Int64(),
    "versions": pl.List(pl.String()),  # supportedVersions or data.supported
    "modern_versions": pl.Boolean(),  # versions include a modern one
    "ttl_ms": pl.Int64(),
    "peer": pl.String(),
    "node_hint": pl.String(),
    "client_name": pl.String(),
}

INIT_OUTCOMES: Final = (
    "served",
    "refused-named",
    "refused-unnamed",
    "http-refused",
    "no-answer",
    "connection-died",
    "auth-required",
    "rate-limited",
    "redirected",
    "gateway-error",
    "undecodable",
)

INITS_SCHEMA: Final[dict[str, pl.DataType]] = {
    "file": pl.String(),
    "line": pl.UInt32(),
    "server": pl.String(),
    "transport": pl.String(),
    "conn": pl.String(),
    "flow": pl.String(),
    "ts": pl.Float64(),
    "id": pl.String(),
    "requested_version": pl.String(),
    "outcome": pl.String(),  # one of INIT_OUTCOMES
    "answer_file": pl.String(),  # as in PROBES_SCHEMA
    "answer_line": pl.UInt32(),
    "error_code": pl.Int64(),
    "versions": pl.List(pl.String()),  # result protocolVersion as [v], or data.supported
    "peer": pl.String(),
    "client_name": pl.String(),
}

ERA_LABELS: Final = ("dual-era", "modern-only", "modern", "legacy", "broken", "unknown", "inconsistent")

HANDSHAKE_VERSIONS: Final = frozenset({"2024-10-07", "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
MODERN_VERSIONS: Final = frozenset({"2026-07-28"})
