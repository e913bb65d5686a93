"""The erascope mitmproxy addon: records MCP Streamable HTTP traffic into an erascope capture.

Load it into any mitmproxy tool and mode:

    mitmdump -s addon/http_recorder.py --mode reverse:http://127.0.0.1:8000 --set erascope_dir=caps

or let `erascope record http --upstream URL` run it. Per flow it writes `http.request`,
`http.response`, one `sse.event` per server-sent event as it passes (the stream is teed, never
buffered), `sse.end` and `http.error`; see captures/FORMAT.md, "HTTP records".

The pure part (flow → record dict) is the module-level `*_record` functions; the `HttpRecorder`
class only holds state, options and the capture writer. Hooks run on mitmproxy's event loop;
recording never raises into the proxy: a failure is logged once at error level and traffic flows on.
"""

from __future__ import annotations

import logging
import re
import secrets
import sys
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urljoin, urlsplit

from mitmproxy import ctx, exceptions, flowfilter, http
from mitmproxy.proxy.mode_specs import ReverseMode
from mitmproxy.utils import human

try:
    from addon import format as fmt
except ModuleNotFoundError:  # loaded by path (`mitmdump -s`) from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from addon import format as fmt
from addon import chain
from addon.bodies import DECODE_ERRORS, DEFAULT_MAX_BODY, StreamDecoder, bounded_body, undecodable_name
from addon.errors import ErascopeError
from addon.metrics import (
    PROBE_TIMEOUT,
    LiveStats,
    MetricsEndpoint,
    add_counters,
    checked_probe_timeout,
    writer_counters,
)
from addon.redact import (
    BODIES_FULL,
    BODY_POLICIES,
    ENDPOINT_URI_MAX,
    HttpRedaction,
    Redactor,
    without_secret_path_params,
)
from addon.retention import Retention, parse_duration, parse_size
from addon.sse import SseEvent, SseParser, is_event_stream_type
from addon.writer import DEFAULT_ROTATE_BYTES, CaptureWriter, default_capture_dir

logger = logging.getLogger("erascope")
retention_logger = logging.getLogger("erascope.retention")
"""What retention removed (info level): shown by mitmdump, and by `record http` on stderr."""

# --- HTTP-specific fields (see captures/FORMAT.md, "HTTP records") -------------------------------
F_FLOW: Final = "flow"
"""The mitmproxy flow id: one request/response exchange."""
F_HEADERS: Final = "headers"
"""Headers in wire order as [name, value] pairs, secrets redacted."""
F_BODY_POLICY: Final = "body_policy"
"""`full` or `metadata` (see addon/redact.py)."""
F_STREAMED: Final = "streamed"
"""http.response: the body went by as a stream (SSE events are separate records)."""
F_PEER: Final = "peer"
"""http.response: upstream `ip:port` that answered (the node behind a load balancer)."""
F_TRUNCATED: Final = "truncated"
"""Bodies and SSE events: present (true) when the payload was longer than `max_body`: only its
first `max_body` (decoded) bytes are recorded."""
F_UNDECODABLE: Final = "undecodable"
"""The `Content-Encoding` a body named but does not decode with: the wire bytes are recorded."""
_MAX_ENCODING: Final = 64
"""Characters of a client's `Content-Encoding` value kept in `undecodable`."""
F_DECODED_LEN: Final = "decoded_len"
"""With `truncated`: the full decoded size, null when decoding stopped at the bound."""
F_MAX_BODY: Final = "max_body"
"""Header: the bound on recorded bytes per body or event."""

# `how` values of sse.end, `kind` values of http.error
HOW_CLEAN: Final = "clean"
HOW_CLIENT_GONE: Final = "client-gone"
HOW_UPSTREAM_RESET: Final = "upstream-reset"
HOW_ERROR: Final = "error"
HOW_RECORDER_STOPPED: Final = "recorder-stopped"
KIND_REFUSED: Final = "connection-refused"
KIND_UPSTREAM_RESET: Final = "upstream-reset"
KIND_TIMEOUT: Final = "timeout"
KIND_CLIENT_GONE: Final = "client-gone"
KIND_OTHER: Final = "other"
KIND_RECORDER_STOPPED: Final = "recorder-stopped"
"""The recorder shut down while the flow was open: the end of the observation, not a failure of a peer."""
ERROR_KINDS: Final = (
    KIND_REFUSED, KIND_UPSTREAM_RESET, KIND_TIMEOUT, KIND_CLIENT_GONE, KIND_OTHER, KIND_RECORDER_STOPPED
)  # fmt: skip
STOPPED_MESSAGE: Final = "erascope: the recorder stopped while the flow was open"

# mitmproxy reports flow errors as text only; these fragments come from its HTTP/1, HTTP/2 and
# connection layers (and the OS messages they wrap), checked against real failures in the tests.
# The `err_…` ones are Chrome's network error names (`net::ERR_TIMED_OUT`), which a HAR file it wrote
# gives as a failed request's `_error` (`analyzer.foreign` reads it through `error_record`).
_ERROR_PATTERNS: Final = (
    (KIND_REFUSED, ("connection refused", "connect call failed", "errno 111", "no route to host",
                    "name or service not known", "nodename nor servname", "err_connection_refused",
                    "err_name_not_resolved", "err_address_unreachable")),
    (KIND_TIMEOUT, ("timeout", "timed out", "timed_out")),
    (KIND_CLIENT_GONE, ("client disconnected", "reset by client", "client closed", "killed")),
    (KIND_UPSTREAM_RESET, ("server closed connection", "connection reset", "unexpected server response",
                           "peer closed", "server disconnected", "http/1 protocol error",
                           "http/2 connection closed", "http/2 protocol error", "cannot parse http response",
                           "stream reset by server", "err_connection_reset", "err_connection_closed",
                           "err_empty_response")),
)  # fmt: skip


_SIDELESS: Final = ("peer closed", "http/1 protocol error", "http/2 protocol error", "http/2 connection closed")
"""Fragments mitmproxy words the same for either peer: its HTTP/1 body reader and its HTTP/2
connection serve the client's side and the server's alike (e.g. `HTTP/1 protocol error: peer closed
connection without sending complete message body`). `_ERROR_PATTERNS` reads them as the upstream's;
`error_record` corrects that from the flow's state."""


def classify_error(message: str) -> str:
    """The `kind` of a mitmproxy flow error message (`other` when it is not recognised)."""
    low = message.lower()
    for kind, fragments in _ERROR_PATTERNS:
        if any(f in low for f in fragments):
            return kind
    return KIND_OTHER


def failed_reading_request(flow: http.HTTPFlow) -> bool:
    """Whether an error whose words name no side (`_SIDELESS`) came from the client's side: the
    proxy was still reading the request and nothing of it had gone upstream.

    mitmproxy holds a request until its last byte has come (unless it is streamed: `request.stream`,
    never set by `erascope record http`), so before that no server reader runs for the flow. Once
    the request is complete, or streamed, or a response has begun, the words stay the upstream's.
    """
    return flow.response is None and flow.request.timestamp_end is None and not flow.request.stream


def stream_end_how(kind: str) -> str:
    """How an event stream ended, given the kind of the flow error that cut it."""
    if kind == KIND_CLIENT_GONE:
        return HOW_CLIENT_GONE
    if kind == KIND_UPSTREAM_RESET:
        return HOW_UPSTREAM_RESET
    return HOW_ERROR


def _text(value: bytes) -> str:
    # headers are nearly always ASCII; latin-1 keeps any other byte without loss
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


def _fields(headers: http.Headers) -> list[tuple[str, str]]:
    fields = headers.fields
    try:  # one pass for the common all-UTF-8 case: this runs twice per flow on the proxy's loop
        return [(k.decode(), v.decode()) for k, v in fields]
    except UnicodeDecodeError:
        return [(_text(k), _text(v)) for k, v in fields]


def _address(addr: Any) -> str | None:
    return human.format_address(addr) if addr else None


def header(headers: http.Headers, name: bytes) -> str | None:
    """`headers.get(name)` (`name` in lower case): the values folded with ", ", or None.

    mitmproxy's `get` goes through three generic mapping layers and lower-cases each field's name in
    a method call: about 1 µs a lookup, paid three times per flow on the proxy's loop.
    """
    values = [v for k, v in headers.fields if k.lower() == name]
    if not values:
        return None
    return ", ".join(v.decode("utf-8", "surrogateescape") for v in values)


def is_event_stream(response: http.Response) -> bool:
    """Whether a response is a server-sent event stream (by its content type)."""
    return is_event_stream_type(header(response.headers, b"content-type") or "")


_PATH_END: Final = re.compile(r"[?#]")
"""Where the path of a request target ends: at its query, or at a fragment a client sent anyway."""


def server_key(flow: http.HTTPFlow, redaction: HttpRedaction) -> str:
    """Origin + path of the server a flow talks to: in reverse mode the configured upstream's origin.

    Taken from the mode rather than the request so that a balancing addon rewriting host/port per
    flow does not split one logical server into several keys. The query and the fragment are left
    out, and secret-named path parameters (`;jsessionid=…`): they hold tokens (`#access_token=…`)
    and sessions, and the key is written unredacted into every record and into the metrics' labels.
    Control bytes and bytes that are not UTF-8 are written `%XX`
    (`fmt.printable_key`): a client chooses the path, and the key must stay text for every reader.
    A well-known credential in the host or the path (`/mcp/sk-proj-…/sse`), plain or percent-encoded,
    is hashed as `redaction` hashes it in `url`: the same token gives the same key on every flow.
    """
    return _key(flow, without_secret_path_params(_PATH_END.split(flow.request.path, 1)[0]), redaction)


def _key(flow: http.HTTPFlow, path: str, redaction: HttpRedaction) -> str:
    """The server key of `path` on the flow's origin, as `server_key` makes it."""
    return redaction.tokens(_origin(flow) + fmt.printable_key(path))


def _origin(flow: http.HTTPFlow) -> str:
    req = flow.request
    mode = flow.client_conn.proxy_mode
    if isinstance(mode, ReverseMode):
        host, port = mode.address
        scheme = "https" if mode.scheme == "https" else "http"
    else:
        host, port, scheme = req.host, req.port, req.scheme
    default = 443 if scheme == "https" else 80
    return f"{scheme}://" + (f"[{host}]" if ":" in host else host) + ("" if port == default else f":{port}")


class EndpointKeys:
    """The server key of the HTTP+SSE transport's POSTs, told by the `endpoint` events of its streams.

    The deprecated transport takes a client's messages at a URL its `GET` stream announces
    (`event: endpoint`, `data: /messages/?session_id=…`) and answers them on that stream. Keyed by
    origin and path alone, the POSTs and the stream would be two servers: one with the requests,
    the other with their answers and the transport. A flow to an announced endpoint gets the key of
    the stream that announced it. Only an endpoint on the stream's own origin counts (the data is
    the server's to choose; it names no other server's paths), and the table is bounded: a server
    may announce a path per session.
    """

    # a plain class: mitmproxy executes `-s` scripts outside sys.modules, where @dataclass fails
    __slots__ = ("_keys",)
    LIMIT: Final = 4096

    def __init__(self) -> None:
        self._keys: OrderedDict[str, str] = OrderedDict()

    def announce(self, flow: http.HTTPFlow, data: bytes, stream_key: str, redaction: HttpRedaction) -> None:
        """Note the endpoint an `endpoint` event's `data` names on `flow`, a stream keyed `stream_key`.

        The endpoint's key is made as `server_key` makes the key of a POST to it, under the same
        `redaction`, or a token in the endpoint's path would keep the two apart."""
        if len(data) > ENDPOINT_URI_MAX:
            return
        try:
            base = urlsplit(flow.request.url)
            target = urlsplit(urljoin(flow.request.url, data.decode("utf-8").strip()))
        except (UnicodeDecodeError, ValueError):  # not a URL: no endpoint
            return
        if (target.scheme, target.netloc) != (base.scheme, base.netloc):
            return
        key = _key(flow, target.path, redaction)
        if key != stream_key:
            self._keys[key] = stream_key
            self._keys.move_to_end(key)
            if len(self._keys) > self.LIMIT:
                self._keys.popitem(last=False)

    def key(self, key: str) -> str:
        """The server key of a flow keyed `key` by its origin and path."""
        return self._keys.get(key, key)


def _body(msg: http.Message, redaction: HttpRedaction, max_body: int) -> dict[str, Any]:
    raw = msg.raw_content
    if raw is None:  # streamed or not yet received
        return {}
    out: dict[str, Any] = {}
    encoding = header(msg.headers, b"content-encoding")
    if encoding is None and len(raw) <= max_body:
        data = raw  # the common case: no decoding, nothing to bound
    else:
        # decoded incrementally and cut at the bound: a small gzip body can decode to gigabytes
        bounded = bounded_body(raw, encoding, max_body)
        data = bounded.data
        if bounded.decoded:
            out["wire_len"] = len(raw)  # Content-Encoding was decoded for the capture
        if bounded.truncated:
            out[F_TRUNCATED] = True
            out["wire_len"] = len(raw)
            out[F_DECODED_LEN] = bounded.decoded_len
        if bounded.undecodable:
            # the client's or server's bytes: no UTF-8 needed (a lone surrogate lost the whole record)
            out[F_UNDECODABLE] = fmt.printable_key(encoding)[:_MAX_ENCODING]
    body, policy = redaction.body(data)
    out.update(fmt.payload_fields(body))
    if policy != BODIES_FULL:
        out["len"] = len(data)
    out[F_BODY_POLICY] = policy
    return out


def request_record(
    flow: http.HTTPFlow, redaction: HttpRedaction, max_body: int = DEFAULT_MAX_BODY
) -> dict[str, Any]:
    """The `http.request` record of a flow (pure: no I/O)."""
    req = flow.request
    rec: dict[str, Any] = {
        fmt.F_TYPE: fmt.HTTP_REQUEST,
        fmt.F_CONN: flow.client_conn.id,
        F_FLOW: flow.id,
        fmt.F_DIR: fmt.C2S,
        # the method and target are the client's bytes: any of them may be no UTF-8
        **fmt.text_fields("method", req.method, req.data.method),
        **fmt.text_fields("url", redaction.url(req.url)),
        "http_version": req.http_version,
        F_HEADERS: redaction.headers(_fields(req.headers)),
        "client": _address(flow.client_conn.peername),
        "sni": redaction.tokens(flow.client_conn.sni) if flow.client_conn.sni else None,  # the host's name
        "t_request": req.timestamp_start,
    }
    rec.update(_body(req, redaction, max_body))
    return rec


def response_record(
    flow: http.HTTPFlow, redaction: HttpRedaction, *, streamed: bool, max_body: int = DEFAULT_MAX_BODY
) -> dict[str, Any]:
    """The `http.response` record of a flow; without body when `streamed` (pure: no I/O)."""
    resp = flow.response
    assert resp is not None
    rec: dict[str, Any] = {
        fmt.F_TYPE: fmt.HTTP_RESPONSE,
        fmt.F_CONN: flow.client_conn.id,
        F_FLOW: flow.id,
        fmt.F_DIR: fmt.S2C,
        "status": resp.status_code,
        "reason": resp.reason,
        "http_version": resp.http_version,
        F_HEADERS: redaction.headers(_fields(resp.headers)),
        F_STREAMED: streamed,
        F_PEER: _address(flow.server_conn.peername),
        "t_request": flow.request.timestamp_start,
        "t_headers": resp.timestamp_start,
        "t_end": None if streamed else resp.timestamp_end,
    }
    if not streamed:
        rec.update(_body(resp, redaction, max_body))
    return rec


def sse_event_record(flow: http.HTTPFlow, index: int, event: SseEvent, redaction: HttpRedaction) -> dict[str, Any]:
    """One `sse.event` record (pure: no I/O)."""
    data, policy = redaction.sse_data(event.event, event.data)
    rec: dict[str, Any] = {
        fmt.F_TYPE: fmt.SSE_EVENT,
        fmt.F_CONN: flow.client_conn.id,
        F_FLOW: flow.id,
        fmt.F_DIR: fmt.S2C,
        "index": index,
        "sse_event": event.event,
        **fmt.payload_fields(data),
        F_BODY_POLICY: policy,
    }
    if policy != BODIES_FULL:
        rec["len"] = len(event.data)
    if event.truncated:
        rec[F_TRUNCATED] = True
        rec[F_DECODED_LEN] = event.data_len
    if event.id is not None:
        rec["sse_id"] = event.id
    if event.retry is not None:
        rec["sse_retry"] = event.retry
    return rec


def sse_end_record(
    flow: http.HTTPFlow, how: str, events: int, *, incomplete: bool = False, error: str | None = None
) -> dict[str, Any]:
    """The `sse.end` record: how a stream ended and how many events passed (pure: no I/O)."""
    rec: dict[str, Any] = {
        fmt.F_TYPE: fmt.SSE_END,
        fmt.F_CONN: flow.client_conn.id,
        F_FLOW: flow.id,
        "how": how,
        "events": events,
        "incomplete": incomplete,
        "t_end": time.time(),
    }
    if error is not None:
        rec["error"] = error
    return rec


def error_record(
    flow: http.HTTPFlow,
    redaction: HttpRedaction,
    *,
    last_activity: float | None = None,
    idle_timeout: float | None = None,
    now: float,
) -> dict[str, Any]:
    """The `http.error` record of a failed flow (pure: no I/O).

    mitmproxy closes a client connection idle for `tcp_timeout` seconds and reports that as
    "Client disconnected.", the same words as a client hanging up. When the flow had been idle
    (no request or stream bytes since `last_activity`) for at least `idle_timeout`, the proxy's own
    timeout is the likelier cause: `kind` is then `timeout` and `idle_s` says how long it was idle.

    Words that name no side (`_SIDELESS`) are the client's when the request was still being read
    (`failed_reading_request`): `kind` is then `client-gone`, not `upstream-reset`.

    The message is recorded redacted (`HttpRedaction.text`): mitmproxy's words may quote the host or
    the URL, with what they carry.
    """
    message = flow.error.msg if flow.error else "unknown error"
    kind = classify_error(message)
    if kind == KIND_UPSTREAM_RESET and any(f in message.lower() for f in _SIDELESS) and failed_reading_request(flow):
        kind = KIND_CLIENT_GONE  # the client hung up mid-request (or sent a body the proxy dropped it for)
    rec: dict[str, Any] = {
        fmt.F_TYPE: fmt.HTTP_ERROR,
        fmt.F_CONN: flow.client_conn.id,
        F_FLOW: flow.id,
        "kind": kind,
        "error": redaction.text(message),
        "phase": "response" if flow.response is not None else "request",
        F_PEER: _address(flow.server_conn.peername),
    }
    if kind == KIND_CLIENT_GONE and last_activity is not None and idle_timeout:
        idle = now - last_activity
        if idle >= idle_timeout - _IDLE_SLACK_S:
            rec["kind"] = KIND_TIMEOUT
            rec["idle_s"] = round(idle, 3)
    return rec


_IDLE_SLACK_S: Final = 0.25
"""The watchdog fires a little after the timeout; a client leaving just before it still counts as one."""


def stopped_record(flow: http.HTTPFlow) -> dict[str, Any]:
    """The `http.error` of a flow still open when the recorder stopped (pure: no I/O)."""
    return {
        fmt.F_TYPE: fmt.HTTP_ERROR,
        fmt.F_CONN: flow.client_conn.id,
        F_FLOW: flow.id,
        "kind": KIND_RECORDER_STOPPED,
        "error": STOPPED_MESSAGE,
        "phase": "response" if flow.response is not None else "request",
        F_PEER: _address(flow.server_conn.peername),
    }


def connect_error_record(client: Any, server: Any, redaction: HttpRedaction) -> dict[str, Any]:
    """An `http.error` of phase `connect`: the upstream could not be reached before any request
    (no `flow`; pure: no I/O). Its `peer` is the address tried, a host's name that may hold a token."""
    message = server.error or "cannot connect"
    peer = _address(server.address)
    return {
        fmt.F_TYPE: fmt.HTTP_ERROR,
        fmt.F_CONN: client.id,
        F_FLOW: None,
        "kind": classify_error(message),
        "error": redaction.text(message),
        "phase": "connect",
        F_PEER: redaction.tokens(peer) if peer else peer,
        "client": _address(client.peername),
    }


class SseTap:
    """The `flow.response.stream` callable for an event stream: returns every chunk unchanged and
    records each event as soon as its last byte has passed."""

    __slots__ = (
        "decoder", "done", "events", "flow", "inner", "key", "last_chunk", "parser", "recorder", "undecodable"
    )  # fmt: skip

    def __init__(self, recorder: HttpRecorder, flow: http.HTTPFlow, key: str, inner: Any = None) -> None:
        self.recorder = recorder
        self.inner = inner
        """The stream callable an earlier addon set (None: relay the chunks as they come): what it
        returns is what the client gets, and so what is recorded."""
        self.flow = flow
        self.key = key
        self.parser = SseParser(max_event=recorder.max_body)
        self.events = 0
        self.done = False
        self.last_chunk: float | None = None
        """Wall-clock time the last chunk passed (to tell an idle timeout from a client leaving)."""
        assert flow.response is not None
        # A server may compress its event stream; the chunks pass as they came, the events are read
        # from what they decode to.
        encoding = header(flow.response.headers, b"content-encoding")
        self.decoder = None if encoding is None else StreamDecoder.for_encoding(encoding)
        self.undecodable: str | None = None
        """The `Content-Encoding` the stream does not decode with: its events are not read past there."""
        if encoding is not None and undecodable_name(encoding):
            self.undecodable = encoding

    def __call__(self, chunk: bytes) -> Any:
        if self.inner is None:
            return self._tee(chunk)
        out = self.inner(chunk)
        pieces = [out] if isinstance(out, bytes) else list(out)
        for piece in pieces:
            if piece:
                self._tee(piece)
        if not chunk:
            self._tee(b"")  # the end of the stream
        return out if isinstance(out, bytes) else pieces

    def _tee(self, chunk: bytes) -> bytes:
        try:
            if chunk:
                self.last_chunk = time.time()
                if self.undecodable is not None:
                    return chunk
                if self.decoder is None:
                    self._parse(chunk)
                else:
                    try:
                        for piece in self.decoder.feed(chunk):
                            self._parse(piece)
                    except DECODE_ERRORS:
                        self.undecodable = self.decoder.name
            else:  # mitmproxy's end-of-stream call
                self.finish(HOW_CLEAN)
        except Exception as exc:  # recording must never break the stream it watches
            self.recorder.report(f"erascope: recording an SSE stream failed: {exc!r}; the stream is relayed")
        return chunk

    def _parse(self, data: bytes) -> None:
        for event in self.parser.feed(data):
            if event.event == "endpoint":
                self.recorder.endpoints.announce(self.flow, event.data, self.key, self.recorder.redaction)
            self.recorder.emit(sse_event_record(self.flow, self.events, event, self.recorder.redaction), self.key)
            self.events += 1

    def finish(self, how: str, error: str | None = None) -> None:
        """Write `sse.end` once."""
        if self.done:
            return
        self.done = True
        rec = sse_end_record(self.flow, how, self.events, incomplete=self.parser.pending, error=error)
        if self.undecodable is not None:
            rec[F_UNDECODABLE] = fmt.printable_key(self.undecodable)[:_MAX_ENCODING]
        self.recorder.emit(rec, self.key)


class _FlowState:
    # a plain class: mitmproxy executes `-s` scripts outside sys.modules, where @dataclass fails
    __slots__ = ("key", "recorded_request", "response_written", "skip", "tap")

    def __init__(self, key: str, skip: bool) -> None:
        self.key = key
        """The server key of every record of this flow."""
        self.skip = skip
        self.recorded_request = False
        self.response_written = False
        self.tap: SseTap | None = None


class HttpRecorder:
    """mitmproxy addon writing an erascope capture of every HTTP flow (one capture per proxy run)."""

    def __init__(self) -> None:
        self.writer: CaptureWriter | None = None
        self.redaction: HttpRedaction = HttpRedaction(Redactor(b"unconfigured"), enabled=True)
        self.filter: flowfilter.TFilter | None = None
        self.out_dir: Path | None = None
        self.capture_server: str = ""
        self.server_name: str = ""
        """`erascope_server`, cached: option lookups are slow on the per-flow path."""
        self.endpoints = EndpointKeys()
        """Without `erascope_server`: which flows are the POSTs of an HTTP+SSE stream's server."""
        self.max_body: int = DEFAULT_MAX_BODY
        """`erascope_max_body` in bytes, cached."""
        self.chain_key: bytes | None = None
        """The key of `erascope_chain_key`, read once: the capture's chain is keyed with it."""
        self.flows: dict[str, _FlowState] = {}
        self.open: dict[str, http.HTTPFlow] = {}
        """Flows whose request headers arrived and that have not ended: `done()` ends them."""
        self.stopped = False
        """`done()` ran: hooks of flows the proxy cancels afterwards must not open a new capture."""
        self.clients_with_requests: set[str] = set()
        """Client connections that sent a request: a later connect error belongs to a flow."""
        self.failures = 0
        """Capture problems reported (each is logged at error level)."""
        self.paths: list[Path] = []
        """Capture files written by closed writers."""
        self.records = 0
        """Records written by closed writers (headers included)."""
        self.lost = 0
        """Records closed writers could not write."""
        self.rotate_bytes: int = DEFAULT_ROTATE_BYTES
        self.rotate_age: float | None = None
        self.retention = Retention()
        self.stats = LiveStats()
        """Live counters kept from every record (on the writer's thread), for `erascope_metrics`."""
        self._counted: tuple[dict[str, int], CaptureWriter | None] = ({}, None)
        """Writer and retention counters of closed writers, and the open writer whose counters are
        added when read: one tuple, replaced whole, so a scrape never counts a writer twice or not at
        all while it is being closed."""
        self.metrics: MetricsEndpoint | None = None
        """The Prometheus endpoint, while `erascope_metrics` names an address."""
        self._metrics_listen = ""

    # --- options ------------------------------------------------------------------------------
    def load(self, loader: Any) -> None:
        loader.add_option(
            "erascope_dir", str, "", "Capture directory (default: $ERASCOPE_CAPTURE_DIR or the state dir)."
        )
        loader.add_option(
            "erascope_server", str, "", "Server key for every record (default: upstream origin + request path)."
        )
        loader.add_option(
            "erascope_redact", bool, True, "Hash credentials, secret query values and session ids (default on)."
        )
        loader.add_option(
            "erascope_bodies",
            str,
            BODIES_FULL,
            "full: record bodies exactly; metadata: keep the JSON-RPC envelope, hash arguments and contents.",
            choices=BODY_POLICIES,
        )
        loader.add_option(
            "erascope_redact_headers", Sequence[str], [], "Extra header names whose values are hashed."
        )
        loader.add_option(
            "erascope_max_body",
            str,
            "16m",
            "Record at most this much of each body (decoded) and SSE event, e.g. 16m, 512k; the rest is"
            " relayed but not recorded, and the record says `truncated`.",
        )
        loader.add_option(
            "erascope_filter",
            str,
            "",
            "Record only flows matching this mitmproxy filter expression (evaluated when the request is"
            " complete, so response filters such as ~c never match).",
        )
        loader.add_option(
            "erascope_metrics",
            str,
            "",
            "Serve Prometheus metrics (flows, records, losses, probe outcomes and eras per server) on this"
            " HOST:PORT at /metrics; empty: off.",
        )
        loader.add_option(
            "erascope_probe_timeout",
            str,
            repr(PROBE_TIMEOUT),
            "Seconds a client waits for a probe's answer, for the live probe outcomes the metrics count"
            " (as `erascope analyze --probe-timeout`).",
        )
        loader.add_option(
            "erascope_rotate_size", str, "256m", "Start a new capture part when the open one would pass this size."
        )
        loader.add_option(
            "erascope_rotate_age",
            str,
            "",
            "Also start a new part once the open one is this old (e.g. 1h, 30m, 1d); empty: by size only.",
        )
        loader.add_option(
            "erascope_compress", bool, False, "Compress closed capture parts to *.jsonl.zst (off the relay's path)."
        )
        loader.add_option(
            "erascope_keep_bytes",
            str,
            "",
            "Remove the oldest closed parts while the capture directory holds more than this (e.g. 10g);"
            " empty: no bound.",
        )
        loader.add_option(
            "erascope_keep_days",
            str,
            "",
            "Remove closed parts whose last record is older than this many days (e.g. 14, 0.5); empty: no bound.",
        )
        loader.add_option(
            "erascope_chain_key",
            str,
            "",
            "File holding a key (at least 16 bytes) for the capture's hash chain: keyed BLAKE3 digests that"
            " only holders of the key can forge (default: unkeyed BLAKE3). Check with `erascope verify --key`.",
        )

    def configure(self, updated: set[str]) -> None:
        opts = ctx.options
        if "erascope_filter" in updated:
            if opts.erascope_filter:
                try:
                    self.filter = flowfilter.parse(opts.erascope_filter)
                except ValueError as exc:
                    raise exceptions.OptionsError(f"erascope_filter: {exc}") from exc
            else:
                self.filter = None
        if "erascope_bodies" in updated and opts.erascope_bodies not in BODY_POLICIES:
            raise exceptions.OptionsError(
                f"erascope_bodies must be one of {', '.join(BODY_POLICIES)}, not {opts.erascope_bodies!r}"
            )
        if "erascope_redact_headers" in updated:
            bad = [h for h in opts.erascope_redact_headers if not h or any(c in h for c in " :\t\r\n")]
            if bad:
                raise exceptions.OptionsError(f"erascope_redact_headers: not header names: {bad!r}")
        if "erascope_max_body" in updated:
            try:
                size = human.parse_size(opts.erascope_max_body)
            except ValueError as exc:
                raise exceptions.OptionsError(f"erascope_max_body: {exc}") from exc
            if not size or size <= 0:
                raise exceptions.OptionsError(
                    f"erascope_max_body must be a positive size (e.g. 16m), not {opts.erascope_max_body!r}"
                )
            self.max_body = size
        if updated & _RETENTION_OPTIONS:
            self._configure_retention(opts)
        if "erascope_metrics" in updated:
            self._configure_metrics(opts.erascope_metrics)
        if "erascope_probe_timeout" in updated:
            try:
                timeout = checked_probe_timeout(opts.erascope_probe_timeout, "erascope_probe_timeout")
            except ErascopeError as exc:
                raise exceptions.OptionsError(str(exc)) from None
            self.stats.probe_timeout = timeout  # read by the writer's thread as each probe is taken
        if "erascope_chain_key" in updated:
            try:
                self.chain_key = chain.load_key(opts.erascope_chain_key) if opts.erascope_chain_key else None
            except ErascopeError as exc:
                raise exceptions.OptionsError(f"erascope_chain_key: {exc}") from exc
        if "erascope_dir" in updated and opts.erascope_dir:
            path = Path(opts.erascope_dir).expanduser()
            if path.exists() and not path.is_dir():
                raise exceptions.OptionsError(f"erascope_dir: {path} exists and is not a directory")
        relevant = {
            "erascope_dir", "erascope_server", "erascope_redact", "erascope_bodies", "erascope_redact_headers", "mode",
            "erascope_max_body", "erascope_chain_key", *_RETENTION_OPTIONS,
        }  # fmt: skip
        if updated & relevant:
            # a new policy or place starts a new capture: one header must describe all its records
            self._close_writer()
            try:
                # the host's key only when something is hashed: `--no-redact` with whole bodies hashes
                # nothing, and a key of this run (never written) keeps it so
                hashes = opts.erascope_redact or opts.erascope_bodies != BODIES_FULL
                redactor = Redactor() if hashes else Redactor(secrets.token_hex(32).encode())
            except ErascopeError as exc:
                raise exceptions.OptionsError(str(exc)) from exc
            self.redaction = HttpRedaction(
                redactor,
                enabled=opts.erascope_redact,
                bodies=opts.erascope_bodies,
                extra_headers=list(opts.erascope_redact_headers),
            )
            self.out_dir = Path(opts.erascope_dir).expanduser() if opts.erascope_dir else default_capture_dir()
            # an operator's command line need not be UTF-8, nor free of control bytes: a key is text;
            # `record http` names the server by its upstream URL, whose path may hold a token
            self.server_name = self.redaction.tokens(fmt.printable_key(opts.erascope_server))
            # the reverse upstream names the capture (its header, its file name): a token in its host is hashed
            self.capture_server = self.server_name or self.redaction.tokens(_mode_server(opts.mode) or "") or "http"

    def _configure_retention(self, opts: Any) -> None:
        try:
            rotate_bytes = parse_size(opts.erascope_rotate_size, "erascope_rotate_size")
            age = opts.erascope_rotate_age
            rotate_age = parse_duration(age, "erascope_rotate_age") if age else None
            keep = opts.erascope_keep_bytes
            keep_bytes = parse_size(keep, "erascope_keep_bytes") if keep else None
            keep_days = _days(opts.erascope_keep_days) if opts.erascope_keep_days else None
        except ErascopeError as exc:
            raise exceptions.OptionsError(str(exc)) from exc
        self.rotate_bytes = rotate_bytes
        self.rotate_age = rotate_age
        self.retention = Retention(compress=opts.erascope_compress, keep_bytes=keep_bytes, keep_days=keep_days)

    def _configure_metrics(self, listen: str) -> None:
        if listen == self._metrics_listen and self.metrics is not None:
            return
        self._close_metrics()
        if listen:
            try:
                self.metrics = MetricsEndpoint(listen, self.counters)
            except ErascopeError as exc:
                raise exceptions.OptionsError(f"erascope_metrics: {exc}") from exc
            self._metrics_listen = listen
            logger.info("erascope: serving metrics on %s", self.metrics.url)

    def _close_metrics(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
            self._metrics_listen = ""

    def counters(self) -> dict[str, Any]:
        """Every counter the metrics serve: the live ones (a probe whose timeout ran out decided now, as
        the records' `ts` tells time), the writers' and retention's."""
        out: dict[str, Any] = self.stats.snapshot(time.time())
        closed, writer = self._counted
        out.update(add_counters(closed, writer_counters(writer) if writer is not None else {}))
        return out

    # --- I/O ----------------------------------------------------------------------------------
    def emit(self, record: dict[str, Any], key: str) -> None:
        """Hand a record of server `key` to the capture writer, opening the capture on first use."""
        if self.stopped:
            return  # the capture is closed; every open flow was ended in it
        if self.writer is None:
            assert self.out_dir is not None, "configure() runs before any hook"
            self.writer = CaptureWriter(
                self.out_dir,
                transport=fmt.HTTP,
                server=self.capture_server,
                header_extra={"redaction": self.redaction.describe(), F_MAX_BODY: self.max_body},
                on_error=self.report,
                rotate_bytes=self.rotate_bytes,
                rotate_age=self.rotate_age,
                retention=self.retention,
                on_retention=retention_logger.info,
                observer=self.stats.observe_all,
                chain_key=self.chain_key,
            )
            self._counted = (self._counted[0], self.writer)
        record[fmt.F_SERVER] = key
        self.writer.write(record)

    def report(self, message: str) -> None:
        """Report a capture failure at error level (the writer reports each problem once)."""
        self.failures += 1
        logger.error(message)

    def _close_writer(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.paths.extend(self.writer.paths)
            self.records += self.writer.written
            self.lost += self.writer.lost
            self._counted = (add_counters(self._counted[0], writer_counters(self.writer)), None)
            self.writer = None

    def _state(self, flow: http.HTTPFlow) -> _FlowState:
        st = self.flows.get(flow.id)
        if st is None:
            try:
                key = self.server_name or self.endpoints.key(server_key(flow, self.redaction))
            except Exception:  # an odd flow must not fail in a hook; the capture's key will do
                key = self.capture_server
            st = self.flows[flow.id] = _FlowState(key=key, skip=self.filter is not None and not self.filter(flow))
            self.open[flow.id] = flow
        return st

    def _record_request(self, flow: http.HTTPFlow, st: _FlowState) -> None:
        if not st.recorded_request:
            st.recorded_request = True
            self.emit(request_record(flow, self.redaction, self.max_body), st.key)

    def _guard(self, what: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # never let a recorder bug fail a flow
            self.report(f"erascope: recording {what} failed: {exc!r}; traffic is relayed unaffected")

    # --- hooks --------------------------------------------------------------------------------
    def requestheaders(self, flow: http.HTTPFlow) -> None:
        self.clients_with_requests.add(flow.client_conn.id)
        self.open[flow.id] = flow

    def client_disconnected(self, client: Any) -> None:
        self.clients_with_requests.discard(client.id)

    def server_connect_error(self, data: Any) -> None:
        # With connection_strategy=eager (mitmproxy's default) a reverse proxy connects upstream
        # as soon as a client connects; when that fails the client is disconnected before any
        # HTTP flow exists, so no `error` hook fires. Record it here, flow-less, or it is lost.
        if data.client.id in self.clients_with_requests:
            return  # a flow's own connect: its `error` hook records it
        # A regular or upstream proxy connects where the client's CONNECT says, to any host: the
        # filter decides on that request as on any other (`~d host` matches, `~u /mcp` does not).
        reverse = isinstance(data.client.proxy_mode, ReverseMode)
        if self.filter is not None and not reverse and not self._connect_matches(data):
            return
        self._guard("a connect error", self._write_connect_error, data)

    def _connect_matches(self, data: Any) -> bool:
        """Whether `erascope_filter` takes the CONNECT to the address `data` failed to reach."""
        try:
            host, port = data.server.address
            now = time.time()
            target = (f"[{host}]" if ":" in host else host) + f":{port}"
            request = http.Request(
                host, port, b"CONNECT", b"", target.encode(), b"", b"HTTP/1.1", http.Headers(), b"", None, now, now
            )
            flow = http.HTTPFlow(data.client, data.server)
            flow.request = request
            return bool(self.filter is not None and self.filter(flow))
        except Exception:  # an odd address must not fail the hook; without a match nothing is recorded
            return False

    def _write_connect_error(self, data: Any) -> None:
        mode = data.client.proxy_mode
        key = self.server_name or self.redaction.tokens(
            mode.data.rstrip("/") if isinstance(mode, ReverseMode) else f"http://{_address(data.server.address)}"
        )
        self.emit(connect_error_record(data.client, data.server, self.redaction), key)

    def request(self, flow: http.HTTPFlow) -> None:
        st = self._state(flow)
        if not st.skip:
            self._guard("a request", self._record_request, flow, st)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        st = self._state(flow)
        if st.skip or flow.response is None or not is_event_stream(flow.response):
            return
        # Tee the stream: chunks pass on at once and events are recorded as they complete. The
        # response record goes first so a flow's records stay in order: response, events, end.
        # An addon loaded before this one may already stream it (`stream = True`, the usual way to
        # keep mitmproxy from buffering SSE, or a callable): the tap takes its place, or wraps it.
        prior = flow.response.stream
        st.tap = SseTap(self, flow, st.key, prior if callable(prior) else None)
        flow.response.stream = st.tap
        self._guard("response headers", self._write_response, flow, st, True)

    def response(self, flow: http.HTTPFlow) -> None:
        if self.stopped:
            return
        st = self._state(flow)
        del self.flows[flow.id]
        self.open.pop(flow.id, None)
        if st.skip:
            return
        if st.tap is not None:
            # an event stream whose headers came with end-of-stream never calls the tap
            self._guard("a stream end", st.tap.finish, HOW_CLEAN)
            return
        streamed = bool(flow.response is not None and flow.response.stream)
        self._guard("a response", self._write_response, flow, st, streamed)

    def _write_response(self, flow: http.HTTPFlow, st: _FlowState, streamed: bool) -> None:
        self._record_request(flow, st)
        if not st.response_written:
            st.response_written = True
            self.emit(response_record(flow, self.redaction, streamed=streamed, max_body=self.max_body), st.key)

    def error(self, flow: http.HTTPFlow) -> None:
        if self.stopped:
            return  # mitmproxy cancels open flows after `done()`; they were ended there
        st = self._state(flow)
        del self.flows[flow.id]
        self.open.pop(flow.id, None)
        if st.skip:
            return
        self._guard("a flow error", self._write_error, flow, st)

    def _write_error(self, flow: http.HTTPFlow, st: _FlowState) -> None:
        self._record_request(flow, st)  # a request refused before the `request` hook is still traffic
        activity = [t for t in (flow.request.timestamp_end, flow.response and flow.response.timestamp_start) if t]
        if st.tap is not None and st.tap.last_chunk is not None:
            activity.append(st.tap.last_chunk)
        idle_timeout = getattr(ctx.options, "tcp_timeout", None)  # declared by the proxyserver addon
        rec = error_record(
            flow, self.redaction, last_activity=max(activity, default=None), idle_timeout=idle_timeout, now=time.time()
        )
        if st.tap is not None:
            tap_how = stream_end_how(rec["kind"])
            st.tap.finish(tap_how, rec["error"])
        self.emit(rec, st.key)

    def done(self) -> None:
        # mitmproxy runs `done()` before it cancels the open connections, whose `error` hooks then
        # fire: end every open flow here, into this capture, with its true cause, and ignore those.
        for flow in list(self.open.values()):
            self._guard("a stopped flow", self._write_stopped, flow)
        self.open.clear()
        self.flows.clear()
        self.stopped = True
        self._close_writer()
        self._close_metrics()

    def _write_stopped(self, flow: http.HTTPFlow) -> None:
        st = self._state(flow)
        if st.skip:
            return
        self._record_request(flow, st)
        if st.tap is not None:
            st.tap.finish(HOW_RECORDER_STOPPED, STOPPED_MESSAGE)
        self.emit(stopped_record(flow), st.key)


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = 0.0
    if not 0 < days < float("inf"):
        raise ErascopeError(f"erascope_keep_days must be a positive number of days (e.g. 14 or 0.5), not {text!r}")
    return days


_RETENTION_OPTIONS: Final = frozenset(
    {"erascope_rotate_size", "erascope_rotate_age", "erascope_compress", "erascope_keep_bytes", "erascope_keep_days"}
)


def _mode_server(modes: Sequence[str]) -> str | None:
    """The upstream of a single reverse-mode proxy as a server key, else None."""
    from mitmproxy.proxy.mode_specs import ProxyMode

    if len(modes) != 1:
        return None
    try:
        mode = ProxyMode.parse(modes[0])
    except ValueError:
        return None
    if not isinstance(mode, ReverseMode):
        return None
    return fmt.printable_key(mode.data.rstrip("/"))


addons = [HttpRecorder()]
