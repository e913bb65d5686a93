r"""The recorders' own health and what they see live: counters for the operator's monitoring.

`LiveStats.observe_all` is given every record a recorder takes, batch by batch, on the capture writer's
thread (never on a relay thread or the proxy's event loop), and keeps counters from them. `record http --metrics
HOST:PORT` (the addon's `erascope_metrics`) serves them to Prometheus through the standard client
library, from a registry and an HTTP server of their own; `record stdio` writes the same counters into
the `recorder-end` record that closes its capture (see captures/FORMAT.md).

What is counted:

- flows (HTTP requests recorded; stdio: spawns), records and bytes written, records lost, write
  errors (from the capture writer), open SSE streams (HTTP), upstream errors by kind (HTTP:
  `http.error` kinds but `recorder-stopped`; stdio: `spawn-failed`, `server-stdin-broken`), and the
  retention work (parts compressed, compression failures, parts and bytes removed);
- per server, the outcome of every `server/discover` probe (the analyzer's outcome names:
  `discover-result`, `unsupported-version`, `modern-error`, `legacy-answer`, `malformed-probe` (a
  legacy-looking answer to a probe without its envelope or, over HTTP, its version and method
  headers), `cross-era-refusal` (stdio: -32600 to a probe on a connection a served `initialize`
  opened), `garbage`, `connection-died`, and for HTTP `auth-required`, `rate-limited`, `redirected`,
  `gateway-error`, `undecodable`, and `no-answer`), and the server's current era.

Probes are timed as the analyzer times them, by the records' own `ts` and `LiveStats.probe_timeout`
(the recorders' `--probe-timeout`, by default the analyzer's 10 s): garbage and a death count only
within the timeout, and an answer after it only for a client that waited (it sent that server
nothing else since the probe, on any connection or flow, and did not close the connection); else the
probe had no answer. An outcome is counted once nothing that comes later could change it:
`no-answer` when the connection dies after the timeout, when the client left before the server died,
or when the client sends that server something else after the timeout; a probe whose HTTP flow ended
without an answer waits for that (a resumed stream may still bring its answer). `garbage` is counted
when the connection or stream it came on ends without an answer, or when the client moves on after
the timeout. The analyzer also decides what is still open when its input ends (garbage once the
timeout ran out, else `no-answer`), and so does a scrape (`LiveStats.snapshot(now)`) for the probes
whose timeout ran out `SCRAPE_LAG` before it: a server that never answers and never closes the
connection writes no record that would decide its probe. Before then, and in a `recorder-end` record
(`snapshot()` without a time), a probe the counters hold undecided is in no count yet. A client that
waits longer than the timeout may still take a late answer after such a scrape: the count stays
`no-answer`, where the analyzer, reading the capture later, has the answer.

An answer on another HTTP flow than its request's (the HTTP+SSE transport's GET stream, a
Streamable HTTP server's standalone or resumed stream, another POST's stream) is paired as the
analyzer pairs it: only within one session (the request's `Mcp-Session-Id`, or its POST URL's
`session_id`; a flow's session is the first one named in it, by its request, its response or an
`endpoint` event), with the session's latest request of its id, and never when it answers its own
flow's request. A request of no session takes no answer elsewhere. Garbage or a death on the
request's own stream does not settle a probe that may still be answered elsewhere: an answer in time
wins over both, as the analyzer's first rule has it. A death is counted once any record shows the
timeout has passed (a later answer comes too late to a client that saw its stream die); garbage waits
for the client to move on (a late answer still wins for a client that waited).

A JSON-RPC batch is read as its members, as the analyzer reads it: a probe in one is counted, an
answer in one settles its request, and a member (or a line) that is JSON but no JSON-RPC message (`{}`,
an id without a result, a result without an id, `"error": null`, an error without an integer code
or a string message, any message whose id is an array,
an object or a boolean) is garbage, in a POST's JSON body too (elsewhere it answers no request whatever
id it holds: an answer after it still can), and one holding a method is a request
or notification whatever else it holds (`_kind`: no answer, as the SDKs read it); over HTTP an answer
in an event's batch settles the request of its id, and a body's first member that answers (or is no
message) is the answer to the flow's request, a body that is a request none. A
POSTed batch's probes and `initialize` requests are each awaited apart (`_Batch`): an answer pairs with
the member of its id, else the member at its index in the body, else the batch's first request; an
error on its stream without an id answers that first request; one error to the whole array that names
none of its ids (a 400 refusing batches, a plain-text 4xx/5xx) answers every member; garbage, the
stream's death or the flow's end concerns each member still awaiting its answer.

The current era is a live hint, not the analyzer's verdict: it is the era the latest decisive answer
implies, nothing more (a dual-era server shows the era of whatever was asked last):

| answer seen | era |
|---|---|
| a DiscoverResult whose `supportedVersions` names a modern version | `modern` |
| a DiscoverResult naming handshake versions only | `legacy` |
| -32022 / -32004 (UnsupportedProtocolVersion) to a probe or an `initialize` | `modern-other-version` |
| -32020 / -32021 to a probe | `modern` |
| a legacy error to a well-formed probe (-32601, -32602, -32600, -32000; HTTP 4xx without one) | `legacy` |
| a result to `initialize` | `legacy` |

An error answers even beside a `"result": null`, and a code written as an integral float (`-32022.0`),
or as a string holding an integer's JSON text (`"-32022"`, which the Python SDK's client reads so), is
its integer. Other answers (garbage, a dead connection, a gateway's answer, a legacy error to a malformed
probe, which a dual-era server's legacy side gives, another error code or a 5xx, a DiscoverResult naming no
version either era knows, a result without an array `supportedVersions` of strings alone and an object
`capabilities`, which is no DiscoverResult, a cross-era refusal) leave the era as it was; a server
not yet decided is `unknown`.

Label cardinality stays bounded: labels are server keys, outcome names, error kinds and eras, never
ids or paths. Server keys come from the traffic (in forward mode, from the request's host and path),
so an attacker could invent any number of them: the first `max_servers` distinct keys (default 64)
get a label of their own, longer keys are cut to 200 characters, and every later key is counted
under the server label `<other>` (`erascope_server_labels_folded_total` counts those observations);
an empty key is labelled `<empty>`. Control characters and bytes that were not UTF-8 are written
`%XX` in a label (`format.printable_key`), bidi controls and what is drawn as nothing as the reports
write them (`\u202e`, `\u200b`), a backslash `\\` and a leading `<` `\x3c`: no key is labelled as
another key or as `<other>` (`server_label`).

Request and answer are matched by id as JSON-RPC says: a string is no number (`"1"` is not `1`), an
integer is its exact value (2**64 is not 2**64 + 1), and a number written with a fraction or an exponent
is the double it reads as, to the analyzer as to JavaScript and Python's `json` (`1.0` is `1`, `-0.0` is
`0`, `9007199254740993.0` is 9007199254740992).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

import orjson

from addon import format as fmt
from addon import jsontext
from addon.characters import HIDDEN_CHARS, JOINER_CHARS, SELECTOR_CHARS
from addon.errors import ErascopeError
from addon.redact import ENDPOINT_URI_MAX
from addon.sse import EVENT_STREAM_TYPE, is_event_stream_type

MODERN_VERSIONS: Final = frozenset({"2026-07-28"})
"""The modern protocol revisions (the analyzer's `analyzer.schema.MODERN_VERSIONS`)."""
HANDSHAKE_VERSIONS: Final = frozenset({"2024-10-07", "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
"""The revisions of the `initialize` handshake (the analyzer's `analyzer.schema.HANDSHAKE_VERSIONS`): a
DiscoverResult naming these alone advertises the legacy era."""
UNSUPPORTED_CODES: Final = (-32022, -32004)
LEGACY_CODES: Final = (-32601, -32602, -32600, -32000)
"""The errors a legacy server gives a probe (the analyzer's `analyzer.probes.LEGACY_CODES`): another
code, or a 5xx without one, answers the probe as a legacy answer but proves no era."""
MODERN_ERROR_CODES: Final = (-32020, -32021)
AUTH_STATUSES: Final = (401, 403, 407)
GATEWAY_STATUSES: Final = (502, 503, 504)

ERA_UNKNOWN: Final = "unknown"
ERA_MODERN: Final = "modern"
ERA_MODERN_OTHER: Final = "modern-other-version"
ERA_LEGACY: Final = "legacy"
ERAS: Final = (ERA_UNKNOWN, ERA_MODERN, ERA_MODERN_OTHER, ERA_LEGACY)

DISCOVER_RESULT: Final = "discover-result"
UNSUPPORTED_VERSION: Final = "unsupported-version"
MODERN_ERROR: Final = "modern-error"
LEGACY_ANSWER: Final = "legacy-answer"
GARBAGE: Final = "garbage"
CONNECTION_DIED: Final = "connection-died"
NO_ANSWER: Final = "no-answer"
"""No answer before the client gave up (`PROBE_TIMEOUT`), told once nothing can change that any more."""
UNDECODABLE: Final = "undecodable"
"""An answer the recorder could not decode (its `undecodable` field): answered, unread."""
MALFORMED_PROBE: Final = "malformed-probe"
"""A legacy-looking answer to a probe that was not well formed (`_well_formed`): it proves nothing."""
CROSS_ERA: Final = "cross-era-refusal"
"""-32600 to a stdio probe sent on a connection a served `initialize` opened (`analyzer.probes.CROSS_ERA`):
a dual-era server serves a connection in the era of its first request, so it says nothing of the server."""
LIVE_OUTCOMES: Final = (
    DISCOVER_RESULT, UNSUPPORTED_VERSION, MODERN_ERROR, LEGACY_ANSWER, MALFORMED_PROBE, CROSS_ERA, GARBAGE,
    CONNECTION_DIED, NO_ANSWER, "auth-required", "rate-limited", "redirected", "gateway-error", UNDECODABLE,
)  # fmt: skip
"""Probe outcomes the recorders tell live (a subset of the analyzer's `PROBE_OUTCOMES`)."""

DEFAULT_MAX_SERVERS: Final = 64
PROBE_TIMEOUT: Final = 10.0
"""Seconds a client waits for a probe's answer: the analyzer's default `--probe-timeout`
(`analyzer.probes.DEFAULT_PROBE_TIMEOUT`, the `mcp` 2.3.0 client's)."""
SCRAPE_LAG: Final = 1.0
"""Seconds a scrape leaves a probe past its deadline before deciding it (`LiveStats.snapshot(now)`): a
record reaches the writer's thread a little after the recorder stamped it, and an answer stamped in time
must not be beaten to the count by a scrape."""
OTHER_SERVER: Final = "<other>"
"""The server label of the servers past the cap, which no server key is written as (`server_label`)."""
EMPTY_SERVER: Final = "<empty>"
"""The server label of an empty key (Prometheus takes a label whose value is empty for no label)."""
MAX_LABEL: Final = 200
MAX_PENDING: Final = 4096
"""Probes and `initialize` requests awaiting their answer that are remembered; at this many, the oldest
eighth is forgotten (`_oldest`; a flood of unanswered requests must not grow the recorder). So many HTTP
flows that may carry events are followed too."""
MAX_KEPT_REQUEST: Final = 4096
"""An HTTP request's text is kept while its flow may carry events when no longer than this, to tell an
answer to it there from an answer to another request of its session (`_Flow.answers`)."""

_TYPE: Final = fmt.F_TYPE
_FRAME: Final = fmt.FRAME
_DIR: Final = fmt.F_DIR
_C2S: Final = fmt.C2S
_RAW: Final = fmt.F_RAW
_SSE_EVENT: Final = fmt.SSE_EVENT
_SSE_END: Final = fmt.SSE_END
_HTTP_REQUEST: Final = fmt.HTTP_REQUEST
_DISCOVER: Final = "server/discover"
_INITIALIZE: Final = "initialize"
_DISCOVER_TAIL: Final = 'discover"'
"""The end of `"server/discover"` however its slash is written (`\\/`, `\\u002f`)."""
_ESCAPE: Final = "\\u"
"""What a method name holds when any of its letters is escaped (`"server/discove\\u0072"`): a message
that holds neither this, nor `discover"`, nor `initialize` is neither a probe nor an `initialize`."""
_META_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
_META_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
_PROBE_HEADERS: Final = frozenset({"mcp-protocol-version", "mcp-method"})
_PROBE_HEADER_LENGTHS: Final = frozenset(map(len, _PROBE_HEADERS))
_HTTP_DEATHS: Final = frozenset({"connection-refused", "upstream-reset", "timeout", "other"})
_SSE_DEATHS: Final = frozenset({"upstream-reset", "error"})
_STDIO_DEATHS: Final = frozenset({fmt.EV_EXIT, fmt.EV_SERVER_EOF, fmt.EV_STDIN_BROKEN})
_STDIO_ERRORS: Final = frozenset({fmt.EV_SPAWN_FAILED, fmt.EV_STDIN_BROKEN})
_NOT_UPSTREAM: Final = "recorder-stopped"
_ENDPOINT: Final = "endpoint"
_AFTER_REQUEST: Final = frozenset({fmt.HTTP_RESPONSE, fmt.SSE_EVENT, fmt.SSE_END})
_SCAN_LIMIT: Final = 32 << 10
"""Client messages shorter than this are searched for the two method names outright; longer ones are
first read for their top-level members (`_method_may_match`), once, mostly by `str.find` of a quote."""
_WS: Final = re.compile(r"[ \t\n\r]*")
_SCALAR: Final = re.compile(r"[-+.0-9A-Za-z]*")
_BRACKET_OR_QUOTE: Final = re.compile(r'["{}\[\]]')
_WINDOW: Final = 256
"""Characters searched at most for the next bracket or quote inside a nested value (else: give up)."""
_NOT_OBJECT: Final = frozenset('["-0123456789tfn')
"""How a JSON text that is not an object starts."""
_LONGEST_TOKEN: Final = 6 * len(_DISCOVER) + 2
"""A JSON string longer than this (quotes included) cannot decode to either name: `\\uXXXX` is the
longest way to write a character."""
_MAX_STEPS: Final = 64
"""Members, brackets and strings read at most (else: give up). A tool call or a result with its
content is about 10 to 20; each step costs about a microsecond, against 0.6-1 ms to search a megabyte
for both names."""
_MAX_ESCAPED: Final = 16
"""Escaped quotes followed at most within one string (else: give up)."""


def _json(raw: object) -> Any:
    if isinstance(raw, fmt.PieceText):  # a long line's text (`raw`: UTF-8), which decodes as its bytes do
        raw = b"".join(raw.utf8())
    elif not isinstance(raw, str):
        return None
    try:
        # a lone surrogate's escape, and a number beyond a double, read as the analyzer reads them
        return jsontext.loads(raw, message=True)
    except ValueError:
        return None


_NOTHING: Final = object()
"""No value: no member of a batch answers, or a message was not decoded yet."""


def _members(msg: Any) -> list[tuple[int | None, Any]]:
    """The messages the decoded JSON `msg` holds, each with its index for `_id`: a batch's members, or
    `msg` itself (index None)."""
    return list(enumerate(msg)) if isinstance(msg, list) else [(None, msg)]


_INVALID: Final = "invalid"
_CALLS: Final = ("request", "notification")
_ANSWERS: Final = ("response", "error")


def _allowed_id(ident: object) -> bool:
    """Whether `ident` (decoded JSON, not null) is an id JSON-RPC allows: a string or a number."""
    return isinstance(ident, str | int | float) and not isinstance(ident, bool)


def _kind(msg: Any) -> str:
    """The kind of JSON-RPC message `msg` (decoded JSON) is, as `analyzer.messages` tells it: `invalid`
    without `"jsonrpc": "2.0"`, with an id JSON-RPC does not allow (an array, an object, a boolean: no
    string, number or null) or a method that is no string; a `request` or `notification` when it has
    a method (a result or an error beside it makes no answer: the SDKs read such a line as a request),
    else an `error` when its error is an object of a code and a string message, a `response` when its
    result is an object and it has an id; `invalid` when it is none of those (`{}`, a result without an
    id, `"error": null`, `"error": "x"`, an error without its message)."""
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        return _INVALID
    ident = msg.get("id")
    if ident is not None and not _allowed_id(ident):
        return _INVALID
    method = msg.get("method")
    if method is not None:
        if not isinstance(method, str):
            return _INVALID  # JSON-RPC wants a string: the SDKs refuse the line
        return "notification" if ident is None else "request"
    error = msg.get("error")
    # JSON-RPC's error is an object of an integer code and a string message: the SDKs refuse a line
    # with another one (a code is read as `_code` reads one)
    if isinstance(error, dict) and _code(msg) is not None and isinstance(error.get("message"), str):
        return "error"
    # MCP's results are objects: the SDKs refuse a line whose result is another value, null too
    return "response" if isinstance(msg.get("result"), dict) and ident is not None else _INVALID


def _answer_id(msg: Any, kind: str, raw: object, index: int | None) -> bytes | None:
    """The id (`_id`) by which `msg`, of `kind`, answers a request: that of a result or an error. JSON that
    is no message answers nothing whatever id it holds (`{"id":1}`, `"error": null`): the SDKs refuse
    it and go on waiting, as the analyzer pairs it."""
    return _id(msg, raw, index) if kind in _ANSWERS else None


def _unaddressed_error(msg: Any, kind: str) -> bool:
    """Whether `msg` (decoded JSON, of `kind`) is an error without an id (`"id": null`, or none)."""
    return kind == "error" and msg.get("id") is None


def _is_message(msg: Any) -> bool:
    """Whether `msg` (decoded JSON) is a JSON-RPC message as the analyzer tells one from what is none
    (`_kind`): a request or notification, an error, a result with an id."""
    return _kind(msg) != _INVALID


def _code(msg: dict[str, Any]) -> int | None:
    """The error code of `msg`, as the analyzer reads it: an integral number however written, or a string
    holding its JSON text (`"-32022"`: JSON-RPC wants an integer, but the Python SDK's client reads it so
    and acts on it; the server refused in the modern era's words), else None."""
    err = msg.get("error")
    code = err.get("code") if isinstance(err, dict) else None
    if isinstance(code, str) and _NUMBER_TEXT.fullmatch(code):
        code = float(code)  # read as the analyzer reads it, a double (`"1e400"` is none)
    if isinstance(code, float) and code.is_integer():
        return int(code)  # `-32022.0` is -32022: JSON has one number type, as the analyzer reads it
    return code if isinstance(code, int) and not isinstance(code, bool) else None


_NUMBER_TEXT: Final = re.compile(jsontext.NUMBER_TEXT)
"""A number's JSON text, as the analyzer tells a string error code that reads as one."""


def gate_outcome(status: int | None, code: int | None) -> str | None:
    """The outcome of an HTTP answer from what stands in front of the server (an auth gate, a rate
    limiter, a redirect, a gateway without a JSON-RPC error), else None: as the analyzer's
    `non_era_outcome`. Such an answer says nothing about the server's era."""
    if status is None:
        return None
    if status in AUTH_STATUSES:
        return "auth-required"
    if status == 429:
        return "rate-limited"
    if 300 <= status <= 399:
        return "redirected"
    if status in GATEWAY_STATUSES and code is None:
        return "gateway-error"
    return None


def answer_outcome(method: str, msg: Any, status: int | None = None) -> tuple[str | None, str | None]:
    """The probe outcome (None for `initialize`) and the era (None: no change) an answer implies.

    `msg` is the decoded JSON-RPC answer (None when the body was not JSON); `status` the HTTP status
    (None for stdio). Pure; see the module docstring for the table.
    """
    kind = _kind(msg)
    refused = status is not None and status >= 400
    # the analyzer reads a refusal's JSON that is no message (an odd id, no id) as an HTTP error with
    # its error's code, if it has no method; a request or notification answers nothing
    failed = kind == "error" or (
        refused and kind == _INVALID and isinstance(msg, dict) and msg.get("method") is None and "error" in msg
    )
    code = _code(msg) if failed else None
    gate = gate_outcome(status, code)
    if gate is not None:
        return (gate if method == _DISCOVER else None), None
    if kind == _INVALID and isinstance(msg, dict) and not refused:
        # an id JSON-RPC does not allow, a result without one: no answer a client reads
        return (GARBAGE if method == _DISCOVER else None), None
    if code in UNSUPPORTED_CODES:
        return (UNSUPPORTED_VERSION if method == _DISCOVER else None), ERA_MODERN_OTHER
    # an error answers even beside a result (`"result": null`, as encoders that write every member do)
    if method == _INITIALIZE:
        return None, (ERA_LEGACY if kind == "response" else None)
    if kind == "response":
        result = msg["result"]
        # MCP's DiscoverResult has an array `supportedVersions` of strings and an object `capabilities`:
        # the SDK's client falls back to `initialize` after another result, an answer that proves no era
        versions = result.get("supportedVersions")
        if (
            isinstance(versions, list)
            and all(isinstance(v, str) for v in versions)
            and isinstance(result.get("capabilities"), dict)
        ):
            return DISCOVER_RESULT, _advertised_era(versions)
        return LEGACY_ANSWER, None
    client_error = status is not None and 400 <= status <= 499
    if failed:
        if code in MODERN_ERROR_CODES:
            return MODERN_ERROR, ERA_MODERN
        return LEGACY_ANSWER, (ERA_LEGACY if code in LEGACY_CODES or (code is None and client_error) else None)
    # no JSON-RPC answer: text, or JSON of another shape
    if status is not None and 400 <= status <= 599:
        # a legacy HTTP server's bare 400 (or middleware's), or a 5xx but a gateway's: an answer other
        # than the probe's, which the client falls back to legacy on, as the analyzer reads it (a 4xx
        # the legacy era's way of refusing the modern probe, a 5xx no proof of either era)
        return LEGACY_ANSWER, (ERA_LEGACY if client_error else None)
    return GARBAGE, None


def _advertised_era(versions: list[str]) -> str | None:
    """The era a DiscoverResult's `supportedVersions` advertises: modern when it names a modern
    revision, legacy when it names handshake revisions alone, else none (a later revision, none at
    all: the analyzer's verdict stays unknown)."""
    if not versions:
        return None
    if any(v in MODERN_VERSIONS for v in versions):
        return ERA_MODERN
    return ERA_LEGACY if all(v in HANDSHAKE_VERSIONS for v in versions) else None


_LABEL_ESCAPED: Final = re.compile(f"[\\\\{HIDDEN_CHARS}{JOINER_CHARS}{SELECTOR_CHARS}]|^<")


def server_label(server: object) -> str:
    r"""The label value of the server key `server`, cut to `MAX_LABEL` characters.

    Prometheus labels must be UTF-8 (a lone surrogate failed every scrape) and dashboards show them as
    they are: control characters and bytes that were not UTF-8 are written `%XX` (`format.printable_key`,
    as in the records), and what a terminal or a browser acts on or draws as nothing as the reports write
    it (`\u202e`, `\u200b`: `characters.HIDDEN_CHARS`); a backslash is doubled and a leading `<` written
    `\x3c`, so that two keys never get one label and none gets `OTHER_SERVER` or `EMPTY_SERVER`."""
    if not isinstance(server, str) or not server:
        return EMPTY_SERVER
    key = fmt.printable_key(server)
    if not (key.isascii() and "\\" not in key and not key.startswith("<")):
        key = _LABEL_ESCAPED.sub(_escape, key)
    return key[:MAX_LABEL]


def _escape(match: re.Match[str]) -> str:
    # as `analyzer.terminal.visible` writes a character (`\U000e0041`, never `\ue0041`)
    char = match[0]
    code = ord(char)
    if char == "\\":
        return "\\\\"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


@dataclass(slots=True)
class _Pending:
    method: str
    id: bytes
    server: str
    answer: tuple[str, bytes] | None = None
    """HTTP: (session, id), by which an answer on another flow of its session is looked up in
    `_answers`; None for a request of no session (the analyzer pairs none of its answers elsewhere)."""
    well_formed: bool = True
    """A probe's: `_well_formed`."""
    order: int = 0
    """stdio: which request of the recorder's this was (`LiveStats._opened`)."""
    garbage: bool = False
    """The server wrote what is no JSON-RPC message since this was sent, within the timeout: a line that
    is no JSON object (stdio), an event with data that is none on the request's own stream (HTTP)."""
    deadline: float = math.inf
    """A probe's: when its timeout ran out (the request's `ts` + the timeout); never for a record
    without a time, nor for an `initialize` (clients wait for it)."""
    moved: bool = False
    """A probe in a batch: the batch sends its server another request or notification after it (a
    later move of the client's is told by `seq`, `LiveStats._has_moved`)."""
    seq: int = 0
    """A probe's: which probe of the counters' this was (`LiveStats._taken`), from 1."""
    died: float | None = None
    """HTTP: when the request's own flow died (-inf: a record without a time), for a probe kept because
    its answer may still come on another flow of its session: an answer in time still wins, a later
    one comes too late (the client saw the connection die)."""


@dataclass(slots=True)
class _Batch:
    """An HTTP flow whose request was a JSON-RPC batch holding a probe or an `initialize`: the analyzer
    reads each member as a request of its own (`analyzer.messages.batch_members`), so each is awaited
    under a key of its own, ("f", flow, id as JSON)."""

    requests: list[tuple[int | None, bytes]]
    """The batch's requests (members with a method and an id): their member index and id, in order, by
    which an answer is paired (`LiveStats._target`)."""
    keys: dict[str, tuple[str, ...]]
    """Id as JSON → the pending key of the probe or `initialize` of that id (the first of it)."""

    def ids(self) -> list[bytes]:
        """The ids of the batch's requests, in order."""
        return [ident for _, ident in self.requests]


class _Flow:
    """An HTTP flow that may still carry events: one may answer a request of its session on another flow."""

    __slots__ = ("_named", "_request_headers", "_response_headers", "_url", "request", "unread")

    def __init__(self, request: dict[str, Any]) -> None:
        # the session is read from the headers when first asked for (`session`): most flows end
        # without anyone asking
        self._request_headers: object = request.get("headers")
        self._url: object = request.get("url")
        self._response_headers: object = None
        raw = request.get(fmt.F_RAW)
        self._named: str | _Unread | None = _UNREAD
        self.request = raw if isinstance(raw, str) and len(raw) <= MAX_KEPT_REQUEST else None
        """The flow's request, when it had a body no longer than `MAX_KEPT_REQUEST`."""
        self.unread = self.request is None and raw is not None and raw != ""
        """The request had a longer body (not kept)."""

    @property
    def session(self) -> str | None:
        """The session first named in the flow (the request's `Mcp-Session-Id` or POST URL's
        `session_id`, the response's `Mcp-Session-Id`, an `endpoint` event), as the analyzer gives a
        flow its session; None while none is."""
        if isinstance(self._named, _Unread):
            self._named = fmt.named_session(self._request_headers, self._url)
            if self._named is None and self._response_headers is not None:
                self._named = fmt.named_session(self._response_headers, None)
            self._request_headers = self._url = self._response_headers = None
        return self._named

    def respond(self, headers: object) -> None:
        """The flow's response (an event stream) came with `headers`."""
        if isinstance(self._named, _Unread):
            self._response_headers = headers
        elif self._named is None:
            self._named = fmt.named_session(headers, None)

    def name(self, session: str | None) -> None:
        """`session` is named later in the flow: the flow's session unless one was named before."""
        if self.session is None:
            self._named = session

    def answers(self, ident: bytes) -> bool:
        """Whether an answer with id `ident` on this flow is its own request's (the analyzer pairs it
        there, not with another flow's): a request too long to be kept is taken to hold it."""
        return self.unread or ident in _request_ids(self.request)


def _request_ids(raw: object) -> list[bytes]:
    """The ids of the requests the client message `raw` holds (a batch: each member's)."""
    return [ident for _, ident in _requests(_json(raw), raw)]


def _requests(msg: Any, raw: object) -> list[tuple[int | None, bytes]]:
    """The index (`_members`) and id of each request the decoded client message `msg` (of `raw`) holds:
    a member of `"jsonrpc": "2.0"`, a method and an id (`_kind`'s request, written out: it runs for every
    HTTP request)."""
    return [
        (index, ident)
        for index, member in _members(msg)
        if isinstance(member, dict)
        and member.get("jsonrpc") == "2.0"
        and isinstance(member.get("method"), str)
        and (ident := _id(member, raw, index)) is not None
    ]


def _oldest(table: dict[Any, Any]) -> list[Any]:
    """The keys of the oldest eighth of the full `table` (`MAX_PENDING` entries), which are let go to
    make room: the oldest are most likely over. An eighth at a time, since finding the oldest walks the
    slots of the keys deleted before it (a dict compacts them only when it grows): one at a time, a
    table kept full walked hundreds of them for every key added."""
    return list(itertools.islice(table, max(1, MAX_PENDING // 8)))


def _drop_oldest(table: dict[Any, Any]) -> None:
    for key in _oldest(table):
        del table[key]


class _Unread:
    """Not read yet."""


_UNREAD: Final = _Unread()


def _ts(record: dict[str, Any]) -> float | None:
    """When the recorder took `record` (None without a time: such a record is never late)."""
    ts = record.get(fmt.F_TS)
    return float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else None


def _in_time(pending: _Pending, record: dict[str, Any]) -> bool:
    ts = _ts(record)
    return ts is None or ts <= pending.deadline


def _calls(msg: Any) -> bool:
    """Whether `msg` (decoded JSON) is a request or a notification."""
    return _kind(msg) in _CALLS


def _is_call(msg: Any) -> bool:
    """Whether the decoded client message `msg` is a request or a notification (a batch holding one
    counts), the analyzer's "anything else sent to that server"."""
    return _calls(msg) or (isinstance(msg, list) and any(_calls(m) for m in msg))


def _well_formed(msg: dict[str, Any], headers: object) -> bool:
    """Whether a probe is well formed as the analyzer reads it (`analyzer.probes`): its `params._meta`
    names a protocol version and client capabilities, and over HTTP (`headers` not None) its headers
    name a version and a method. A dual-era server routes a probe without them to its legacy side
    (WIRE-FACTS: one SDK routes on the version header alone), so a legacy error to it says nothing."""
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or meta.get(_META_VERSION) is None or meta.get(_META_CAPABILITIES) is None:
        return False
    if headers is None:
        return True
    names = {
        name.lower()
        for pair in (headers if isinstance(headers, list) else ())
        if isinstance(pair, list)
        and len(pair) == 2
        and isinstance(name := pair[0], str)
        and len(name) in _PROBE_HEADER_LENGTHS  # a name lowered to one of them is as long
        and isinstance(pair[1], str)
    }
    return names >= _PROBE_HEADERS


class LiveStats:
    """Counters kept from the records a recorder takes (call `observe_all` or `observe` on the writer thread).

    Thread-safe: `snapshot()` may run on any thread (the metrics server's) while records arrive.
    """

    def __init__(self, max_servers: int = DEFAULT_MAX_SERVERS, probe_timeout: float = PROBE_TIMEOUT) -> None:
        self.max_servers = max_servers
        self.probe_timeout = probe_timeout
        self._lock = threading.Lock()
        self.flows = 0
        self._streams: set[str] = set()
        """HTTP: the flows of the event streams open, each counted from its streamed response until its
        `sse.end`; a set, so that an end whose opening was not counted takes no other stream's count."""
        self.upstream_errors: dict[str, int] = {}
        self.outcomes: dict[str, dict[str, int]] = {}
        """Per server label, probe outcome → count."""
        self.eras: dict[str, str] = {}
        """Per server label, the current era."""
        self.folded = 0
        self._labels: set[str] = set()
        self._pending: dict[tuple[str, ...], _Pending] = {}
        """HTTP: ("f", flow), a batch's member ("f", flow, id as JSON); stdio: ("c", conn, id as JSON)."""
        self._probes: dict[str, set[tuple[str, ...]]] = {}
        """Per server label, the pending keys of its probes: the client's next message to that server
        times them (`_moved`)."""
        self._taken = 0
        """Probes taken so far (`_Pending.seq`)."""
        self._moves: dict[str, int] = {}
        """Per server label, `_taken` when the client last sent that server a request or notification:
        the probes of it taken by then have seen the client move on (`_has_moved`). Kept as a number,
        not marked on each probe, as a hung server's probes wait by the thousand while traffic to it
        goes on."""
        self._due: dict[str, float] = {}
        """Per server label with probes pending, no deadline of them comes before this (`_moved` looks
        for probes past their deadline only after it)."""
        self._by_conn: dict[str, set[tuple[str, ...]]] = {}
        """stdio: the pending keys of each connection."""
        self._batches: dict[str, _Batch] = {}
        """HTTP flows whose batch holds a probe or an `initialize` still pending (their keys: ("f", flow,
        id)); what ends or answers the flow concerns each of them (`_flow_keys`)."""
        self._client_closed: set[str] = set()
        self._requests = 0
        self._opened: dict[str, int] = {}
        """stdio connections a served `initialize` opened → that request's `_Pending.order`: a probe
        sent after it and refused -32600 is `CROSS_ERA`."""
        self._answers: dict[str, dict[bytes, tuple[str, ...]]] = {}
        """HTTP: per session, id → the pending key of the session's latest request with that id, for an
        answer that comes on another flow of the session, as the analyzer pairs them: the HTTP+SSE
        transport accepts a POST (202) and answers on the session's GET stream, a Streamable HTTP server
        may answer on the standalone GET stream or a resumed one. Every session numbers its requests
        from the same start, so an id alone does not tell one session's answer from another's."""
        self._flows: dict[str, _Flow | dict[str, Any] | tuple[dict[str, Any], object]] = {}
        """HTTP flows that may still carry events: their request record (with the headers of a response
        that opened a stream) until it is read (`_flow`)."""
        self._dying: set[tuple[str, ...]] = set()
        """HTTP: probes whose own flow died in time, kept because an answer may still come on another flow
        (`_flow_over`): the first record after a deadline decides them, whatever it is (a later answer
        comes too late to a client that saw its stream die), so that a client that never sends that
        server anything again still has its probe counted."""
        self._dying_from = math.inf
        """The earliest deadline of the probes of `_dying`: no record before it decides one."""

    # --- labels ---------------------------------------------------------------------------------
    def _label(self, server: object) -> str:
        key = server_label(server)
        if key in self._labels:
            return key
        if len(self._labels) < self.max_servers:
            self._labels.add(key)
            self.eras.setdefault(key, ERA_UNKNOWN)
            return key
        self.folded += 1
        self.eras.setdefault(OTHER_SERVER, ERA_UNKNOWN)
        return OTHER_SERVER

    def _known_label(self, server: object) -> str:
        """`server`'s label as `_label` gave it, without taking a new one."""
        label = server_label(server)
        return label if label in self._labels else OTHER_SERVER

    # --- observing --------------------------------------------------------------------------------
    def observe(self, record: dict[str, Any]) -> None:
        """Take one record into the counters (records of every type may come; unknown ones are ignored)."""
        self.observe_all((record,))

    def observe_all(self, records: Sequence[dict[str, Any]]) -> None:
        """`observe` each of `records`, in order: what the capture writer calls with each batch it
        takes, so a record that changes nothing costs no call of its own."""
        # never replaced; added to on this thread only (a scrape decides probes, under the lock)
        by_conn, awaiting, flows, probes, dying = self._by_conn, self._pending, self._flows, self._probes, self._dying
        answers, streams = self._answers, self._streams
        for record in records:
            if dying and (ts := _ts(record)) is not None and ts > self._dying_from:
                with self._lock:
                    self._past(ts)
            rtype = record.get(_TYPE)
            if rtype == _FRAME:
                # the common case, decided without the lock and with module-level names only (this runs
                # for every line): a line that is neither a probe, nor an initialize, nor a possible
                # answer to one (only this thread adds to `_by_conn`), nor, while a probe awaits its
                # answer, a client message that may time it out
                if record.get(_DIR) == _C2S:
                    if probes:
                        pass
                    elif (raw := record.get(_RAW)).__class__ is not str:
                        if raw.__class__ is not fmt.PieceText or not _long_may_call(raw):
                            continue
                    elif len(raw) < _SCAN_LIMIT:
                        # a backslash first: searching one character is a `memchr`, a fifth of `\u`'s cost
                        if (
                            _DISCOVER_TAIL not in raw
                            and _INITIALIZE not in raw
                            and ("\\" not in raw or _ESCAPE not in raw)
                        ):
                            continue
                    elif not _may_call(raw):
                        continue
                elif not by_conn:
                    continue
            elif rtype == _HTTP_REQUEST:
                # most requests are neither a probe nor an `initialize`, and while no probe awaits the
                # client's next move and no answer is awaited on another flow, such a request only
                # opens its flow (the counters and `_flows` change on this thread only)
                if not probes and not answers:
                    raw = record.get(_RAW)
                    if raw is None or (
                        raw.__class__ is str
                        and len(raw) <= MAX_KEPT_REQUEST
                        and _DISCOVER_TAIL not in raw
                        and _INITIALIZE not in raw
                        and ("\\" not in raw or _ESCAPE not in raw)
                    ):
                        self.flows += 1
                        if len(flows) >= MAX_PENDING:
                            _drop_oldest(flows)
                        flows[str(record.get("flow"))] = record
                        continue
            elif not awaiting and rtype in _AFTER_REQUEST:
                # nothing to settle when no request awaits its answer, and no stream opens without
                # `streamed`; a stream's `endpoint` event names its session, for the answers to come
                if rtype == _SSE_EVENT:
                    if record.get("sse_event") != _ENDPOINT:
                        continue
                elif rtype == _SSE_END:
                    flow = str(record.get("flow"))
                    streams.discard(flow)  # `_ended`: nothing of the flow is pending
                    flows.pop(flow, None)
                    continue
                elif not record.get("streamed"):
                    flows.pop(str(record.get("flow")), None)  # no events come on it
                    continue
                else:
                    self._streamed(str(record.get("flow")), record.get("headers"))
                    continue
            with self._lock:
                if rtype == fmt.FRAME:
                    self._frame(record)
                elif rtype == fmt.HTTP_REQUEST:
                    self.flows += 1
                    flow = str(record.get("flow"))
                    headers = record.get("headers", [])
                    raw = record.get(fmt.F_RAW)
                    if len(self._flows) >= MAX_PENDING:
                        _drop_oldest(self._flows)
                    # read when asked for (most flows end without that), but a long body is let go now
                    short = raw is None or (raw.__class__ is str and len(raw) <= MAX_KEPT_REQUEST)
                    self._flows[flow] = record if short else _Flow(record)
                    if self._answers and (session := self._flow(flow).session) in self._answers:  # type: ignore[union-attr]
                        self._take_ids(session, raw)  # type: ignore[arg-type]
                    if isinstance(raw, str):
                        self._client_message(("f", flow), record, raw, headers)
                elif rtype == fmt.HTTP_RESPONSE:
                    self._response(record)
                elif rtype == fmt.SSE_EVENT and record.get("sse_event") == _ENDPOINT:
                    self._announce(record)
                elif rtype == fmt.SSE_EVENT:
                    flow = str(record.get("flow"))
                    pending = self._pending.get(("f", flow))
                    if pending is not None:
                        self._event_on_own_stream(("f", flow), pending, record)
                    elif (batch := self._batches.get(flow)) is not None:
                        self._event_on_batch_stream(batch, record)
                    elif self._answers and flow in self._flows:
                        self._stream_answer(record)
                elif rtype == fmt.SSE_END:
                    for key in self._flow_keys(str(record.get("flow"))):
                        if key in self._pending and record.get("undecodable") is not None:
                            self._died(key, UNDECODABLE, _ts(record))  # settled without an era, like a death
                        else:
                            self._flow_over(key, record.get("how") in _SSE_DEATHS, _ts(record))
                        self._ended(key)
                elif rtype == fmt.HTTP_ERROR:
                    kind = str(record.get("kind"))
                    if kind != _NOT_UPSTREAM:
                        self.upstream_errors[kind] = self.upstream_errors.get(kind, 0) + 1
                    for key in self._flow_keys(str(record.get("flow"))):
                        self._flow_over(key, kind in _HTTP_DEATHS, _ts(record))
                        self._ended(key)  # whether or not its stream's end came
                elif rtype == fmt.LIFECYCLE:
                    self._lifecycle(record)

    def _client_message(
        self, key: tuple[str, ...], record: dict[str, Any], raw: object, headers: object = None
    ) -> None:
        """A message from the client (`raw`, of `record`): the move that times out its server's pending
        probes (`_moved`) when it is a request or a notification, and remembered when it is a probe or
        an `initialize` (`_request`). `headers`: an HTTP request's (None on stdio)."""
        msg: Any = _NOTHING
        server = record.get(fmt.F_SERVER)
        if self._probes and (label := self._known_label(server)) in self._probes and self._may_move(label, record):
            # a long line is decoded for this only when it may name a `method` member (plainly, or with
            # an escape): most hold neither
            if raw.__class__ is not fmt.PieceText or raw.holds(b'"method"', b"\\u"):  # type: ignore[attr-defined]
                msg = _json(raw)
            if _is_call(msg):
                self._moved(label, _ts(record))
        long = raw.__class__ is fmt.PieceText
        if _long_may_call(raw) if long else raw.__class__ is str and _may_call(raw):  # type: ignore[arg-type]
            self._request(key, raw, server, _ts(record), headers, msg)  # type: ignore[arg-type]

    def _request(
        self,
        key: tuple[str, ...],
        raw: str | fmt.PieceText,
        server: object,
        ts: float | None,
        headers: object = None,
        msg: Any = _NOTHING,
    ) -> None:
        """Remember `raw` (`msg`: decoded, when it was) when it is a probe or an `initialize` (the
        caller found `_may_call(raw)`), or each one a batch holds, under a key of its own (over HTTP,
        the flow's `_Batch`)."""
        msg = _json(raw) if msg is _NOTHING else msg
        if not isinstance(msg, list):
            ident = _id(msg, raw) if isinstance(msg, dict) else None
            self._take(key, msg, ident, server, ts, headers)
            return
        batch = None
        if key[0] == "f":
            batch = self._batches[key[1]] = _Batch(_requests(msg, raw), {})
        taken: list[_Pending] = []
        for index, member in enumerate(msg):
            if taken and _calls(member):
                for pending in taken:
                    pending.moved = True  # sent after those probes, as the batch's order has it
            ident = _id(member, raw, index) if isinstance(member, dict) else None
            if (pending := self._take(key, member, ident, server, ts, headers, batch)) is not None:
                taken.append(pending)
        if batch is not None and not batch.keys:
            del self._batches[key[1]]

    def _take(
        self,
        key: tuple[str, ...],
        msg: Any,
        ident: bytes | None,
        server: object,
        ts: float | None,
        headers: object,
        batch: _Batch | None = None,
    ) -> _Pending | None:
        """Remember the message `msg` (its id `ident`) when it is a probe or an `initialize` (`batch`:
        a member of the HTTP batch of the flow `key` names)."""
        if (
            not isinstance(msg, dict)
            or msg.get("jsonrpc") != "2.0"  # no request (`_kind`): a server refuses it
            or msg.get("method") not in (_DISCOVER, _INITIALIZE)
            or ident is None
        ):
            return None
        if key[0] == "c" or batch is not None:
            key = (*key, ident.decode())
        if batch is not None:
            if key[2] in batch.keys:
                return None  # an id twice in one batch: an answer of that id is the first one's
            batch.keys[key[2]] = key
        if len(self._pending) >= MAX_PENDING:
            for oldest in _oldest(self._pending):
                self._forget(oldest)
        pending = self._pending[key] = _Pending(msg["method"], ident, self._label(server))
        if pending.method == _DISCOVER:
            pending.well_formed = _well_formed(msg, headers)
            if ts is not None:
                pending.deadline = ts + self.probe_timeout
            self._probes.setdefault(pending.server, set()).add(key)
            self._taken += 1
            pending.seq = self._taken
            self._due[pending.server] = min(self._due.get(pending.server, math.inf), pending.deadline)
        flow = self._flow(key[1]) if key[0] == "f" else None
        session = flow.session if flow is not None else None
        if session is not None:
            pending.answer = (session, ident)
            self._answers.setdefault(session, {})[ident] = key
        if key[0] == "c":
            self._by_conn.setdefault(key[1], set()).add(key)
            self._requests += 1
            pending.order = self._requests
        return pending

    def _event_on_own_stream(self, key: tuple[str, ...], pending: _Pending, record: dict[str, Any]) -> None:
        """An event on the stream of the request `key` awaits: its answer (by id, or an error without one,
        as a server's "Server not initialized" is: the analyzer pairs that with the stream's request; in a
        batch, a member), or garbage if no answer comes before the stream ends (an event without data, a
        resumable stream's priming one, is none); an answer with another id may be another request's
        of its session (`_stream_answer`)."""
        raw = record.get(fmt.F_RAW)
        msg = _json(raw)
        members = _members(msg)
        garbage = raw != "" and not members  # `[]` holds no message
        for index, member in members:
            kind = _kind(member)
            # an error without an id the analyzer pairs with the stream's request
            if _unaddressed_error(member, kind) or _answer_id(member, kind, raw, index) == pending.id:
                self._settle(key, member, None, _ts(record))
                break
            if raw != "" and kind == _INVALID:
                garbage = True
        else:
            if garbage and _in_time(pending, record):
                pending.garbage = True
        if self._answers:
            self._stream_answer(record, msg)

    def _event_on_batch_stream(self, batch: _Batch, record: dict[str, Any]) -> None:
        """An event on the stream of a batch's POST, as the analyzer pairs it: an answer with the member
        of its id, an error without an id with the batch's first request; what is no message is garbage
        for every member still awaiting its answer (`_event_on_own_stream`)."""
        raw = record.get(fmt.F_RAW)
        msg = _json(raw)
        members = _members(msg)
        garbage = raw != "" and not members  # `[]` holds no message
        ids = batch.ids()
        for index, member in members:
            kind = _kind(member)
            ident = _answer_id(member, kind, raw, index)
            if ident is None or ident not in ids:
                ident = ids[0] if _unaddressed_error(member, kind) else None
            key = batch.keys.get(ident.decode()) if ident is not None else None
            if key is not None:
                self._settle(key, member, None, _ts(record))
            elif raw != "" and kind == _INVALID:
                garbage = True
        if garbage:
            for key in batch.keys.values():
                if _in_time(self._pending[key], record):
                    self._pending[key].garbage = True
        if self._answers:
            self._stream_answer(record, msg)

    def _target(self, batch: _Batch, ident: bytes | None, index: int) -> tuple[str, ...] | None:
        """The pending key of the batch's request an answer with id `ident`, at `index` of the body's
        members, answers, as the analyzer pairs a body with a batch: the request of its id, else the
        member at its index, else the first request (None: it answers no probe or `initialize`)."""
        ids = batch.ids()
        if ident is None or ident not in ids:
            ident = next((i for m, i in batch.requests if m == index), ids[0] if ids else None)
        return batch.keys.get(ident.decode()) if ident is not None else None

    def _batch_response(self, batch: _Batch, msg: Any, raw: object, status: int | None, ts: float | None) -> None:
        """The body `msg` (decoded from `raw`) answering a batch: a batch of answers pairs member by
        member (`_target`); one error naming none of the batch's ids (a server that takes no batches
        refuses the whole array with one 400, an empty or plain-text 4xx/5xx) answers every member; any
        other single answer answers one. A member the body does not answer stays pending (`_ended`)."""
        answers: dict[tuple[str, ...], Any] = {}
        if isinstance(msg, list) and msg:
            for index, member in enumerate(msg):
                if _kind(member) in _CALLS:
                    continue  # requests and notifications answer nothing
                ident = _id(member, raw, index) if isinstance(member, dict) else None
                if (key := self._target(batch, ident, index)) is not None:
                    answers.setdefault(key, member)
        else:
            ident = _id(msg, raw) if isinstance(msg, dict) else None
            refused = status is not None and status >= 300 and not _is_message(msg)
            whole = refused or _kind(msg) == "error"
            if whole and ident not in batch.ids():
                answers = dict.fromkeys(batch.keys.values(), msg)
            elif (key := self._target(batch, ident, 0)) is not None:
                answers[key] = msg
        for key in list(batch.keys.values()):
            if key in answers:
                self._settle(key, answers[key], status, ts)
            else:
                self._ended(key)

    def _response(self, record: dict[str, Any]) -> None:
        streamed = bool(record.get("streamed"))
        key = ("f", str(record.get("flow")))
        if streamed:
            self._streamed(key[1], record.get("headers"))
        else:
            self._flows.pop(key[1], None)  # no events come: only an event stream ends with sse.end
        batch = self._batches.get(key[1])
        if key not in self._pending and batch is None:
            return
        status = record.get("status")
        status = status if isinstance(status, int) else None
        if streamed and gate_outcome(status, None) is None:
            return  # the answer comes in the stream's events
        if status == 202:
            return  # accepted (the SDK's body is `Accepted`): HTTP+SSE answers on the server's stream
        if record.get("undecodable") is not None and (status is None or status < 300):
            for member in self._flow_keys(key[1]):
                self._died(member, UNDECODABLE, _ts(record))  # the status alone says nothing of the era
            return
        raw = record.get(fmt.F_RAW)
        if not raw and status is not None and 200 <= status < 300:
            for member in self._flow_keys(key[1]):
                self._ended(member)  # answers nothing
            return
        msg = _json(raw)
        if batch is not None:
            self._batch_response(batch, msg, raw, status, _ts(record))
            return
        if _kind(msg) in _CALLS:
            self._ended(key)  # a request or notification answers nothing, as the analyzer pairs a body
            return
        if isinstance(msg, list) and msg:
            # a batch: its first member that answers, or is no message, is the answer (requests and
            # notifications answer nothing), as the analyzer pairs a body with its flow's request
            msg = next((m for m in msg if _kind(m) not in _CALLS), _NOTHING)
            if msg is _NOTHING:
                self._ended(key)
                return
        self._settle(key, msg, status, _ts(record))

    def _frame(self, record: dict[str, Any]) -> None:
        conn = str(record.get(fmt.F_CONN))
        raw = record.get(fmt.F_RAW)
        if record.get(fmt.F_DIR) == fmt.C2S:
            self._client_message(("c", conn), record, raw)
            return
        keys = self._by_conn.get(conn)
        if not keys:
            return
        members = _members(_json(raw))
        garbage = not members  # `[]` holds no message
        for index, member in members:
            kind = _kind(member)
            ident = _answer_id(member, kind, raw, index)
            key = ("c", conn, ident.decode()) if ident is not None else None
            if key is not None and key in self._by_conn.get(conn, ()):
                self._settle(key, member, None, _ts(record))
            elif kind == _INVALID:
                garbage = True  # a line that is no JSON, or JSON that is no JSON-RPC message
        if garbage:
            # garbage for the requests it came after, if no answer comes before the connection dies
            for key in self._by_conn.get(conn, ()):
                if _in_time(self._pending[key], record):
                    self._pending[key].garbage = True

    def _lifecycle(self, record: dict[str, Any]) -> None:
        event = record.get(fmt.F_EVENT)
        conn = str(record.get(fmt.F_CONN))
        if event == fmt.EV_SPAWN:
            self.flows += 1
        if event in _STDIO_ERRORS:
            self.upstream_errors[event] = self.upstream_errors.get(event, 0) + 1
        # the client left (it reads no answer), or its host or terminal stops the server
        client_ended = event == fmt.EV_SIGNAL and record.get("signal") in fmt.ENDING_SIGNALS
        if client_ended or event in (fmt.EV_CLIENT_EOF, fmt.EV_STDOUT_BROKEN):
            self._client_closed.add(conn)
        if event in _STDIO_DEATHS:
            self._opened.pop(conn, None)
            for key in list(self._by_conn.get(conn, ())):
                if self._pending[key].garbage:
                    self._died(key, GARBAGE, None)  # what the server wrote says it, whoever left first
                elif conn in self._client_closed:
                    self._unanswered(key)  # the client left first: the death proves nothing
                else:
                    self._died(key, CONNECTION_DIED, _ts(record))

    def _stream_answer(self, record: dict[str, Any], msg: Any = _NOTHING) -> None:
        """An event on a flow of a session answering a request of that session on another flow (the
        HTTP+SSE transport; a Streamable HTTP server's GET stream; the answer may come before or after
        the POST's 202). `msg`: the event's data decoded, when it was. An answer to the flow's own
        request is not looked for: it settled that request (`_event_on_own_stream`), which left
        `_answers`, or the flow's request holds its id (`_Flow.answers`)."""
        flow = self._flow(str(record.get("flow")))
        if flow is None or flow.session is None or not (waiting := self._answers.get(flow.session)):
            return
        raw = record.get(fmt.F_RAW)
        for index, member in _members(_json(raw) if msg is _NOTHING else msg):  # a batch's answers, each
            ident = _answer_id(member, _kind(member), raw, index)
            key = waiting.get(ident) if ident is not None else None
            if key is not None and not flow.answers(ident):  # type: ignore[arg-type]
                self._settle(key, member, None, _ts(record))

    def _announce(self, record: dict[str, Any]) -> None:
        """An `endpoint` event: the session of its flow (the session whose POSTs the HTTP+SSE transport
        answers on it), unless one was named before."""
        flow = str(record.get("flow"))
        raw = record.get(fmt.F_RAW)
        named = self._flow(flow)
        if not isinstance(raw, str) or len(raw) > ENDPOINT_URI_MAX or named is None:
            return  # longer is no endpoint the recorder keeps as one, and a session kept must be small
        found = fmt.SESSION_QUERY.search(raw)
        if found is not None:
            named.name(found.group(1))

    def _flow_keys(self, flow: str) -> list[tuple[str, ...]]:
        """The pending keys of the HTTP flow `flow`: a batch's members', else the flow's own."""
        batch = self._batches.get(flow)
        return [("f", flow)] if batch is None else list(batch.keys.values())

    def _flow(self, flow: str) -> _Flow | None:
        """The HTTP flow `flow`, if it may still carry events."""
        found = self._flows.get(flow)
        if found is None or found.__class__ is _Flow:
            return found  # type: ignore[return-value]
        if found.__class__ is tuple:
            read = _Flow(found[0])  # type: ignore[index]
            read.respond(found[1])  # type: ignore[index]
        else:
            read = _Flow(found)  # type: ignore[arg-type]
        self._flows[flow] = read
        return read

    def _streamed(self, flow: str, headers: object) -> None:
        """The HTTP flow `flow`'s response came streamed with `headers`. An event stream the recorder taps
        is open until its `sse.end`, and its headers wait beside the request's record until the flow is
        read (`_Flow.respond`; most flows end unread); no events come on any other stream."""
        if not _is_event_stream(headers):
            self._flows.pop(flow, None)
            return
        self._streams.add(flow)
        found = self._flows.get(flow)
        if found is None:
            return
        if found.__class__ is _Flow:
            found.respond(headers)  # type: ignore[union-attr]
        else:
            self._flows[flow] = (found[0] if found.__class__ is tuple else found, headers)  # type: ignore[index]

    def _take_ids(self, session: str, raw: object) -> None:
        """A request of `session` (`raw`) takes the ids it names from the session's requests before it
        that await an answer on another flow: an answer with that id is this one's (the analyzer pairs
        such an answer with the session's latest request of its id)."""
        waiting = self._answers[session]
        for ident in _request_ids(raw):
            key = waiting.pop(ident, None)
            if key is not None:
                self._pending[key].answer = None
        if not waiting:
            del self._answers[session]

    # --- deciding ---------------------------------------------------------------------------------
    def _flow_over(self, key: tuple[str, ...], death: bool, ts: float | None) -> None:
        """The HTTP flow `key` ended (`death`: it died) without its request's answer: garbage on its
        stream says it, whoever ended the flow, else a death in time does. A probe whose answer may
        still come on another flow of its session stays pending: an answer in time wins over both."""
        pending = self._pending.get(key)
        if pending is None:
            return
        late = death and ts is not None and ts > pending.deadline  # nothing after it comes in time
        if pending.answer is not None and (pending.garbage or death) and not late:
            if death:
                pending.died = -math.inf if ts is None else ts
                self._dying.add(key)
                self._dying_from = min(self._dying_from, pending.deadline)
            return
        if pending.garbage:
            self._died(key, GARBAGE, None)
        elif death:
            self._died(key, CONNECTION_DIED, ts)

    def _settle(self, key: tuple[str, ...], msg: Any, status: int | None, ts: float | None) -> None:
        if self._gave_up(key, ts):
            self._unanswered(key)
            return
        pending = self._forget(key)
        if pending is None:
            return
        outcome, era = answer_outcome(pending.method, msg, status)
        if outcome == LEGACY_ANSWER and not pending.well_formed:
            outcome, era = MALFORMED_PROBE, None  # a modern answer to it still proves modern
        elif key[0] == "c":
            conn = key[1]
            if pending.method == _INITIALIZE and era == ERA_LEGACY:
                self._opened[conn] = min(self._opened.get(conn, pending.order), pending.order)
            elif (
                outcome == LEGACY_ANSWER
                and _code(msg) == -32600
                and self._opened.get(conn, pending.order) < pending.order
            ):
                outcome, era = CROSS_ERA, None
        self._count(pending, outcome, era)

    def _died(self, key: tuple[str, ...], outcome: str, ts: float | None) -> None:
        """Settle `key` without an era: `outcome` when it came at `ts` in time (a death after the
        timeout is none, a late undecodable answer is none when the client gave up)."""
        pending = self._pending.get(key)
        if pending is None:
            return
        late_death = outcome == CONNECTION_DIED and ts is not None and ts > pending.deadline
        if late_death or (outcome == UNDECODABLE and self._gave_up(key, ts)):
            self._unanswered(key)  # the client had given up by then
            return
        self._forget(key)
        self._count(pending, outcome if pending.method == _DISCOVER else None, None)

    def _gave_up(self, key: tuple[str, ...], ts: float | None) -> bool:
        """Whether what came for `key` at `ts` came after its probe's timeout to a client that had moved
        on (sent that server something else, or closed the connection's stdin or stdout): no answer to
        it then. A client that waits longer (the TypeScript client's 60 s) still takes a late answer."""
        pending = self._pending.get(key)
        return (
            pending is not None
            and ts is not None
            and ts > pending.deadline
            and (
                self._has_moved(pending)
                or pending.died is not None
                or (key[0] == "c" and key[1] in self._client_closed)
            )
        )

    def _has_moved(self, pending: _Pending) -> bool:
        """Whether the client has sent the server of the probe `pending` another request or notification
        since the probe (on any connection or flow): an answer after its deadline then comes too late."""
        return pending.moved or 0 < pending.seq <= self._moves.get(pending.server, 0)

    def _unanswered(self, key: tuple[str, ...]) -> None:
        """Settle `key` as no answer came to it: `garbage` if the server wrote some in time, else
        `connection-died` if its flow died in time, else `no-answer` (for a probe: an `initialize` has
        no outcome counted)."""
        pending = self._forget(key)
        if pending is not None and pending.method == _DISCOVER:
            died = pending.died is not None and pending.died <= pending.deadline
            self._count(pending, GARBAGE if pending.garbage else CONNECTION_DIED if died else NO_ANSWER, None)

    def _may_move(self, label: str, record: dict[str, Any]) -> bool:
        """Whether the client message `record` to server `label` may change what `_moved` noted: not when
        the client has moved on since that server's latest probe and `record` comes by the earliest
        deadline of its probes. Behind a hung server every message the client goes on sending would
        otherwise be decoded again while its probes await their answers."""
        if self._moves.get(label, -1) != self._taken:
            return True
        ts = _ts(record)
        return ts is not None and ts > self._due.get(label, math.inf)

    def _moved(self, label: str, ts: float | None) -> None:
        """The client sent server `label` a request or notification at `ts`: its probes still pending
        take no late answer any more, and those past their deadline are decided now."""
        self._moves[label] = self._taken
        if ts is None or ts <= self._due.get(label, math.inf):
            return
        for key in [key for key in self._probes.get(label, ()) if ts > self._pending[key].deadline]:
            self._unanswered(key)
        waiting = self._probes.get(label)
        if waiting:
            self._due[label] = min(self._pending[key].deadline for key in waiting)

    def _past(self, ts: float) -> None:
        """A record came at `ts`: the probes of `_dying` whose deadline it is past are decided."""
        for key in [key for key in self._dying if ts > self._pending[key].deadline]:
            self._unanswered(key)
        self._dying_from = min((self._pending[key].deadline for key in self._dying), default=math.inf)

    def _expire(self, now: float) -> None:
        """Decide the probes whose deadline is `SCRAPE_LAG` before `now` as the analyzer decides what its
        input leaves open (`_unanswered`: garbage written in time, else a death in time, else no answer).
        Without this a silent hung server's probe waited for a record that never comes."""
        due = now - SCRAPE_LAG
        for keys in list(self._probes.values()):
            for key in [key for key in keys if self._pending[key].deadline < due]:
                self._unanswered(key)

    def _ended(self, key: tuple[str, ...]) -> None:
        """`key`'s flow ended: nothing more comes on it (its stream, if any, is closed). A probe stays
        pending: its answer may still come on a stream that resumes it (`_stream_answer`), and `_moved`
        decides it."""
        self._streams.discard(key[1])
        self._flows.pop(key[1], None)
        pending = self._pending.get(key)
        if pending is not None and pending.method != _DISCOVER:
            self._forget(key)

    def _count(self, pending: _Pending, outcome: str | None, era: str | None) -> None:
        if outcome is not None:
            per = self.outcomes.setdefault(pending.server, {})
            per[outcome] = per.get(outcome, 0) + 1
        if era is not None:
            self.eras[pending.server] = era

    def _forget(self, key: tuple[str, ...]) -> _Pending | None:
        pending = self._pending.pop(key, None)
        if pending is not None and pending.died is not None:
            self._dying.discard(key)
        if pending is not None and pending.answer is not None:
            session, ident = pending.answer
            waiting = self._answers.get(session)
            if waiting is not None and waiting.get(ident) == key:
                del waiting[ident]
                if not waiting:
                    del self._answers[session]
        if pending is not None and pending.method == _DISCOVER:
            probes = self._probes.get(pending.server)
            if probes is not None:
                probes.discard(key)
                if not probes:
                    del self._probes[pending.server]
                    self._due.pop(pending.server, None)
        if key[0] == "c":
            keys = self._by_conn.get(key[1])
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_conn[key[1]]
        elif len(key) == 3 and (batch := self._batches.get(key[1])) is not None and batch.keys.get(key[2]) == key:
            del batch.keys[key[2]]
            if not batch.keys:
                del self._batches[key[1]]
        return pending

    # --- reading ----------------------------------------------------------------------------------
    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """The live counters as plain data (copies); `now` (a scrape's time, on the clock of the records'
        `ts`) first decides the probes whose timeout ran out by then (`_expire`)."""
        with self._lock:
            if now is not None and self._probes:
                self._expire(now)
            servers = {
                label: {"era": self.eras.get(label, ERA_UNKNOWN), "outcomes": dict(self.outcomes.get(label, {}))}
                for label in sorted(set(self.eras) | set(self.outcomes))
            }
            return {
                "flows": self.flows,
                "sse_open": len(self._streams),
                "upstream_errors": dict(self.upstream_errors),
                "servers": servers,
                "server_labels_folded": self.folded,
            }


def _may_call(raw: str) -> bool:
    """Whether the client message `raw` may be a probe or an `initialize`: False when it names neither
    method, and (for long messages) when it provably does not decode to an object whose `method` is one
    of them. What `observe` counts is exactly what testing the names and then decoding gave when every
    message was searched for both names: a long message is read once by `_method_may_match`, and
    searched for the names only when that cannot rule it out."""
    if len(raw) >= _SCAN_LIMIT and not _method_may_match(raw):
        return False
    return _DISCOVER in raw or _INITIALIZE in raw or _names_escaped(raw)


def _names_escaped(raw: str) -> bool:
    """Whether `raw` may name either method with escapes, which the analyzer reads as the method: the
    slash (`server\\/discover`, PHP's `json_encode` writes every slash so; `server\\u002fdiscover`) or
    any letter (`server/discove\\u0072`, `initializ\\u0065`: no encoder writes those, but a client that
    did would otherwise hide its probes from the counters and not from `analyze`)."""
    return "\\" in raw and (_ESCAPE in raw or _DISCOVER_TAIL in raw)  # a backslash first: a `memchr`


def _long_may_call(raw: fmt.PieceText) -> bool:
    """`_may_call` for a long line's text: made a `str` only when it names a method `_may_call` looks for,
    which a long client message hardly ever does."""
    # a backslash before `\u`: one character is a `memchr`, two cost as much as the three names together
    names = raw.holds(_DISCOVER.encode(), _INITIALIZE.encode(), _DISCOVER_TAIL.encode())
    return (names or (raw.holds(b"\\") and raw.holds(_ESCAPE.encode()))) and _may_call(raw.text())


def _method_may_match(raw: str) -> bool:
    """False when the JSON text `raw` does not decode to an object whose `method` member is
    `server/discover` or `initialize`; True when it may (or when telling would cost too much).

    Reads the top-level members from the start: each name (decoded when it holds escapes), and each
    value skipped by `str.find` of the quote that ends a string and by the brackets that end a nested
    value; every `method` member's string value is compared. A megabyte of tool arguments or of a
    result is thus mostly one `memchr` pass instead of two substring searches. Only valid JSON has to
    be read right: invalid JSON never decodes to a message, so any answer is exact for it. Anything
    unusual (too many members or escaped quotes, a long run without a bracket inside a nested value, a
    torn text) answers True, and the caller searches and decodes the message as before.
    """
    n = len(raw)
    i = _WS.match(raw).end()
    if i >= n:
        return False  # blank: not JSON
    if raw[i] == "[":
        return True  # a batch: a member may be either (stdio reads them)
    if raw[i] != "{":
        return raw[i] not in _NOT_OBJECT  # JSON that is no object is no message (and a BOM is left to orjson)
    ws = _WS.match
    find = raw.find
    bracket_or_quote = _BRACKET_OR_QUOTE.search
    steps = _MAX_STEPS
    i = ws(raw, i + 1).end()
    if raw.startswith("}", i):
        return False  # `{}`
    while steps > 0:
        steps -= 1
        # a member's name
        if not raw.startswith('"', i):
            return True
        end = _string_end(raw, i)
        if end < 0:
            return True
        name = raw[i + 1 : end] if end - i <= _LONGEST_TOKEN else None  # longer never decodes to `method`
        if name is not None and "\\" in name:
            name = _json(raw[i : end + 1])  # None when not a string: then not JSON either
        i = ws(raw, end + 1).end()
        if not raw.startswith(":", i):
            return True
        i = ws(raw, i + 1).end()
        if i >= n:
            return True
        # its value
        c = raw[i]
        if c == '"':
            end = _string_end(raw, i)
            if end < 0:
                return True
            if name == "method" and end - i <= _LONGEST_TOKEN:  # every one: of several, orjson keeps the last
                value = raw[i + 1 : end]
                if "\\" in value:
                    value = _json(raw[i : end + 1])
                if value in (_DISCOVER, _INITIALIZE):
                    return True
            i = end + 1
        elif c == "{" or c == "[":  # skipped by its brackets (a `method` that is no string is neither name)
            depth = 0
            while True:
                steps -= 1
                if steps < 0:
                    return True
                found = bracket_or_quote(raw, i, i + _WINDOW)
                if found is None:
                    return True
                i = found.start()
                c = raw[i]
                if c == '"':
                    end = find('"', i + 1)
                    i = end if end > 0 and raw[end - 1] != "\\" else _string_end(raw, i)  # the common case inline
                    if i < 0:
                        return True
                elif c == "{" or c == "[":
                    depth += 1
                else:
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
            i += 1
        else:
            i = _SCALAR.match(raw, i).end()  # a number, true, false or null
        i = ws(raw, i).end()
        if raw.startswith(",", i):
            i = ws(raw, i + 1).end()
            continue
        return not raw.startswith("}", i)  # the object's end: every member was read
    return True


def _string_end(raw: str, i: int) -> int:
    """Where the JSON string that opens at `raw[i]` ends (its closing quote), or -1 (not found, or
    more escaped quotes or longer runs of backslashes than are worth following)."""
    find = raw.find
    j = find('"', i + 1)
    for _ in range(_MAX_ESCAPED):
        if j < 0 or raw[j - 1] != "\\":
            return j
        k = j - 2  # count the backslashes before the quote: an even number escape each other
        low = max(i, j - 66)
        while k > low and raw[k] == "\\":
            k -= 1
        if raw[k] == "\\":
            return -1
        if (j - 1 - k) % 2 == 0:
            return j
        j = find('"', j + 1)
    return -1


def _id(msg: dict[str, Any], raw: object, index: int | None = None) -> bytes | None:
    """The id of the message `msg` (decoded from `raw`, or its member `index` when `raw` is a batch) as
    a key: a string as JSON text, a number as `_number_id` writes it, so that `1` and `"1"` stay two
    ids and one number written two ways is one."""
    ident = msg.get("id")
    if not _allowed_id(ident):
        return None
    if isinstance(ident, float):
        return _number_id(raw, index)
    if isinstance(ident, int):
        return str(ident).encode()  # as orjson writes one, also past 64 bits (`jsontext.loads` reads those)
    if _SURROGATE.search(ident):
        # as the analyzer reads such an id: each lone surrogate as its escape's text
        ident = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", ident)
    return orjson.dumps(ident)


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _number_id(raw: object, index: int | None = None) -> bytes | None:
    """The id of the JSON text `raw` when orjson read it as a float, as the number it is.

    orjson reads a fraction, an exponent and an integer beyond 64 bits as a float: 2**64 and 2**64 + 1
    are then one id, and an answer to the one settled the other. The standard library's `json` reads
    integers of any size, kept exact, and fractions as `Decimal` here, each read as the double it is
    (beyond a double's range, exact); an integral one (`1.0`, `1e2`, `-0.0`) is written as its digits,
    as orjson writes an int (the analyzer's `id` reads them alike), any other number as its digits
    without trailing zeros and its exponent. Rare (ids are integers within 64 bits and strings), so off
    the common path."""
    text = b"".join(raw.utf8()) if isinstance(raw, fmt.PieceText) else raw
    if not isinstance(text, str | bytes):
        return None
    try:
        msg = json.loads(text, parse_float=Decimal)
    except (ValueError, RecursionError, ArithmeticError):  # an integer too long for `int`, an exponent for `Decimal`
        return None
    if index is not None:  # a batch's member
        msg = msg[index] if isinstance(msg, list) and index < len(msg) else None
    ident = msg.get("id") if isinstance(msg, dict) else None
    if isinstance(ident, int) and not isinstance(ident, bool):
        return str(ident).encode()
    if not isinstance(ident, Decimal):
        return None
    double = float(ident)
    if math.isfinite(double):
        # a number written with a fraction or an exponent is the double it reads as, to the analyzer's
        # `id` as to JavaScript and Python's `json`: `9007199254740993.0` is 9007199254740992 (what a
        # TypeScript server answers it with), not the integer 9007199254740993; `-0.0` is 0
        ident = Decimal(repr(double))
    text = jsontext.exact_number_text(ident)
    return None if text is None else text.encode()


def _is_event_stream(headers: object) -> bool:
    """Whether a response record's headers make it a stream the recorder taps: as it decides, every
    `Content-Type` field folded into one value (two such fields name no event stream)."""
    if not isinstance(headers, list):
        return False
    # This runs for every streamed response: the recorder's pairs are lists of two strings, and most
    # names are told apart by their length alone, so a stream's response usually leaves one field to
    # read, named `content-type` as HTTP/2 and most servers write it.
    found = None
    try:
        for pair in headers:
            name, value = pair
            if len(name) == 12:
                if pair.__class__ is not list or name != "content-type" or found is not None:
                    return _names_event_stream(headers)
                found = value
    except (TypeError, ValueError):  # a pair of another length, a name without one
        return _names_event_stream(headers)
    return found == EVENT_STREAM_TYPE or (found is not None and _names_event_stream(headers))


def _names_event_stream(headers: list[Any]) -> bool:
    """`_is_event_stream` for any pairs (names in any case, pairs of other types)."""
    values = [
        str(pair[1])
        for pair in headers
        if isinstance(pair, list | tuple)
        and len(pair) == 2
        and len(name := str(pair[0])) == 12  # most fields are told apart without lowering their name
        and _ascii_lower(name) == "content-type"
    ]
    return bool(values) and is_event_stream_type(", ".join(values))


def _ascii_lower(text: str) -> str:
    # as the recorder lowers a header's name (bytes): `str.lower` turns the Kelvin sign into `k`
    return text.lower() if text.isascii() else text


# --- recorder counters: the writer's and the keeper's, with the live ones -------------------------------

WRITER_COUNTERS: Final = ("records", "bytes", "lost", "write_errors")
RETENTION_COUNTERS: Final = ("parts_compressed", "compress_failures", "parts_removed", "bytes_removed")


def writer_counters(writer: Any) -> dict[str, int]:
    """The counters of a `CaptureWriter` (and its keeper) under the names the metrics use."""
    out = {
        "records": writer.written,
        "bytes": writer.bytes_written,
        "lost": writer.lost,
        "write_errors": writer.write_errors,
    }
    keeper = writer.keeper
    kept = keeper.counters if keeper is not None else None
    out["parts_compressed"] = kept.compressed if kept else 0
    out["compress_failures"] = kept.compress_failures if kept else 0
    out["parts_removed"] = kept.removed if kept else 0
    out["bytes_removed"] = kept.removed_bytes if kept else 0
    return out


def add_counters(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    """Key-wise sum (the counters of closed writers and of the open one)."""
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


# --- Prometheus ---------------------------------------------------------------------------------------

_COUNTERS: Final = (
    ("flows", "erascope_flows", "HTTP requests recorded (stdio: server spawns)."),
    ("records", "erascope_records_written", "Capture records written (part headers included)."),
    ("bytes", "erascope_bytes_written", "Bytes written to capture parts."),
    ("lost", "erascope_records_lost", "Records that could not be written (the traffic was relayed)."),
    ("write_errors", "erascope_write_errors", "Failed attempts to write or encode a capture record."),
    ("parts_compressed", "erascope_parts_compressed", "Closed capture parts compressed to *.jsonl.zst."),
    ("compress_failures", "erascope_compress_failures", "Closed parts that could not be compressed (kept plain)."),
    ("parts_removed", "erascope_parts_removed", "Closed parts removed by the retention bound."),
    ("bytes_removed", "erascope_part_bytes_removed", "Bytes of the parts removed by the retention bound."),
    ("server_labels_folded", "erascope_server_labels_folded", "Observations of servers past the label cap."),
)


class RecorderCollector:
    """A Prometheus collector over a recorder's counters (`snapshot()` as `LiveStats.snapshot` plus the
    writer counters), read afresh at every scrape.

    A counter never goes down from one scrape to the next (Prometheus reads a drop as a restart, and
    `increase()` then adds the whole count again): the writer's `lost` does, when a line a short write
    tore is completed later, so each counter is served as the most it has been.
    """

    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self._snapshot = snapshot
        self._lock = threading.Lock()  # the endpoint answers each scrape on a thread of its own
        self._most: dict[str, float] = {}

    def _rising(self, key: str, value: float) -> float:
        with self._lock:
            most = self._most[key] = max(self._most.get(key, 0), value)
        return most

    def collect(self) -> Iterator[Any]:
        """Metric families for one scrape."""
        return self._families(self._snapshot(), self._rising)

    def describe(self) -> Iterator[Any]:
        """The metric families without their counts: what the registry knows the collector by (a scrape
        for some metrics, `/metrics?name[]=…`, reads only the collectors that name them)."""
        return self._families({"sse_open": 0, "upstream_errors": {}, "servers": {}}, lambda _, value: value)

    @staticmethod
    def _families(s: dict[str, Any], rising: Callable[[str, float], float]) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for key, name, doc in _COUNTERS:
            yield CounterMetricFamily(name, doc, value=rising(key, s.get(key, 0)))
        yield GaugeMetricFamily("erascope_sse_streams_open", "SSE streams open through the proxy.", value=s["sse_open"])
        errors = CounterMetricFamily(
            "erascope_upstream_errors", "Flow failures by kind (HTTP: http.error; stdio: lifecycle).", labels=["kind"]
        )
        for kind, n in sorted(s["upstream_errors"].items()):
            errors.add_metric([kind], n)
        yield errors
        outcomes = CounterMetricFamily(
            "erascope_probe_outcomes", "server/discover probes by server and outcome.", labels=["server", "outcome"]
        )
        era = GaugeMetricFamily(
            "erascope_server_era",
            "1 for the era the server's latest decisive answer implies.",
            labels=["server", "era"],
        )
        for server, info in s["servers"].items():
            for outcome, n in sorted(info["outcomes"].items()):
                outcomes.add_metric([server, outcome], n)
            for name in ERAS:
                era.add_metric([server, name], 1.0 if info["era"] == name else 0.0)
        yield outcomes
        yield era


_PORT: Final = re.compile(r"[0-9]{1,5}", re.ASCII)
"""A port: ASCII digits only (`str.isdigit` also takes `²`, which `int` refuses, and `٩`, which it reads
as 9), and few of them, so `int` neither refuses nor works hard."""


def checked_probe_timeout(value: object, what: str = "--probe-timeout") -> float:
    """`value` (a number, or the addon option's text) as the seconds of a probe timeout, or an
    `ErascopeError` naming `what` unless it is a positive finite number."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise ErascopeError(f"{what} must be a positive number of seconds, not {value!r}")
    return seconds


def parse_address(text: str, what: str = "--metrics", example: str = "127.0.0.1:9464") -> tuple[str, int]:
    """`HOST:PORT` (`[v6]:PORT`; `:PORT` for 127.0.0.1) as (host, port); `what` and `example` word the error."""
    host, sep, port = text.rpartition(":")
    if not sep or not _PORT.fullmatch(port) or int(port) > 65535:
        raise ErascopeError(f"{what} must be HOST:PORT (e.g. {example}), not {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


class MetricsEndpoint:
    """A Prometheus `/metrics` HTTP server (prometheus_client's own) on its own registry and thread."""

    def __init__(self, listen: str, snapshot: Callable[[], dict[str, Any]]) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        host, port = parse_address(listen)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(RecorderCollector(snapshot))  # type: ignore[arg-type]
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ErascopeError(f"cannot serve metrics on {listen}: {exc.strerror or exc}") from exc
        except ValueError as exc:  # a host name the IDNA codec refuses (a label over 63 characters, `..`)
            raise ErascopeError(f"--metrics host is not a host name: {listen!r} ({exc})") from exc
        bound = self._server.server_address
        self.address: tuple[str, int] = (str(bound[0]), int(bound[1]))
        """The bound address (port 0 picks a free one)."""

    @property
    def url(self) -> str:
        """`http://HOST:PORT/metrics`."""
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)
