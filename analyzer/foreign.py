"""Traffic recorded by other tools, as the records erascope's HTTP recorder writes.

Two kinds, told from the content (`analyzer.sources.foreign_kind`), plain or compressed:

- mitmproxy flow dumps (`mitmdump -w`, mitmproxy 10 to 12): read one tnetstring at a time, each
  made a flow as mitmproxy's own `FlowReader` makes it (`compat.migrate_flow` upgrades older dumps to
  the running version's flows, `Flow.from_state`). Each flow is flow number N (1-based, in file
  order); websocket, TCP, UDP and DNS flows, and flows mitmproxy cannot build, are noted and not read.
- HAR 1.2 (`mitmdump --set hardump=FILE`, browsers, gateways): each entry (number N, 1-based) is
  turned into a mitmproxy flow by mitmproxy's own `mitmproxy.io.har.request_to_flow`, then its
  times, upstream peer and connection are set from the entry itself (`startedDateTime`, `timings`,
  `serverIPAddress`, the URL's port, Chrome's `connection`; Firefox writes the port there), which
  that function leaves out (mitmproxy's own export lays `timings` out as its flow's times, the
  upstream's `connect` beside them). A failed entry fails at its start and its `time` (the elapsed
  time its writer gives it) when that is later than when its response would have begun, else then
  (`_failed_at`: mitmproxy's export writes no failure time). It takes an ASCII URL only: a
  target that is not (`?name=café`, mitmproxy's export's `\\udce9` for a byte) is set on the flow
  apart, as the recorder would have seen it, and a host written as text (`café.example`) is given in
  its IDNA form (`_ascii_url`). That function reads every field it knows whatever its type: it is given
  a copy of the entry without the optional fields of a type HAR does not give them (`_mended`: a
  `serverIPAddress` object, a header of a null value), a status written as text (`"200"`) as that
  number; an entry whose method, URL, start, bodies, status or the headers its messages are read by
  (`_READ_HEADERS`) cannot be used is noted as not read.

Both then go through `flow_records`, one function: the recorder's own pure flow → record functions
(`addon.http_recorder`), so redaction and body bounds apply exactly as when recording. An event-stream
body is split into `sse.event` records by the recorder's SSE parser. A flow that failed gives its
`http.error`. A stream kept whole says when it ended, not when each event passed: an event answering
another flow's request of its session (the HTTP+SSE transport's `GET /sse` stream) is placed just after
that request (`_place_events`), the others keep the stream's end.

An entry or flow whose response body was not kept (browsers drop event streams and large bodies;
`mitmdump` with `stream_large_bodies`) is not guessed at: none of its records are read (its request
would look unanswered, a false `no-answer`), and it is noted as a location that could not be used.
Every record of entry or flow N carries N where a capture line carries its line number, so evidence
points at `file#entry=N` or `file#flow=N` (see analyzer/REPORT.md). A file has no header naming it:
`Converted.digest` of its content does, so that the loader reads a copy of it once.
"""

from __future__ import annotations

import base64
import bisect
import codecs
import contextlib
import datetime as dt
import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Final
from urllib.parse import urlsplit, urlunsplit

import orjson
from mitmproxy import connection, http
from mitmproxy import flow as mflow
from mitmproxy.io import compat, tnetstring
from mitmproxy.io.har import request_to_flow

from addon import format as fmt
from addon.bodies import DEFAULT_MAX_BODY
from addon.http_recorder import (
    HOW_CLEAN,
    EndpointKeys,
    error_record,
    is_event_stream,
    request_record,
    response_record,
    server_key,
    sse_end_record,
    sse_event_record,
    stream_end_how,
)
from addon.redact import HttpRedaction, Redactor
from addon.sse import SseParser
from analyzer.messages import lone_surrogates_as_text
from analyzer.sources import FLOWS, HAR

MAX_WHOLE_BYTES: Final = 1 << 29
"""The most a HAR document or a dump's flow may hold (decompressed): each is read and parsed whole
(a 512 MiB document takes a few times that in memory), and a compressed file of a few megabytes can
hold gigabytes. Beyond it a HAR file is refused and a flow noted as not read, before either is held."""

MAX_DUMP_BYTES: Final = 1 << 29
"""The most the flows of one dump may hold together (decompressed): every flow's records are held
until the file is read (a few times its size in memory), and a dump of many flows compresses as
well as one large HAR document. Beyond it the dump is refused, as a HAR file beyond
`MAX_WHOLE_BYTES` is, before more is held."""

UNITS: Final = {HAR: "entry", FLOWS: "flow"}
"""What a location in each kind counts: `file#entry=N`, `file#flow=N`."""


@dataclass
class Converted:
    """One foreign file as capture records: `(location, record)` pairs, and the locations not read."""

    records: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    unread: list[tuple[int, str]] = field(default_factory=list)
    """(location, why) of each entry or flow that gives no records."""
    server: str = "http"
    streams: list[_Stream] = field(default_factory=list)
    """The event streams among the records, kept whole: their events' times are placed by `lines`."""
    digest: bytes = b""
    """A digest of what was read (the decompressed file): a copy of the file has the same one."""
    endpoints: EndpointKeys = field(default_factory=EndpointKeys)
    """The HTTP+SSE endpoints its streams announced: the POSTs to one are the stream's server's."""
    stream_sessions: set[str] = field(default_factory=set)
    """The sessions named by the event streams read (`_flow_session`)."""


@dataclass
class _Stream:
    """An event stream a HAR entry or dump flow holds whole: when it began and ended, not when each
    event passed. Its events are stamped at its end until `_place_events` places them."""

    start: float
    end: float
    own: frozenset[bytes]
    """The ids its own request sent (JSON text): an answer to one of them ends the stream."""
    events: list[dict[str, Any]]
    session: str | None
    """The session first named in its flow (`_flow_session`): the session whose requests it may answer."""


class ForeignError(Exception):
    """The file is not a readable file of its kind (garbage named `.har`, a dump mitmproxy refuses)."""


def flow_records(
    flow: http.HTTPFlow,
    redaction: HttpRedaction,
    max_body: int = DEFAULT_MAX_BODY,
    endpoints: EndpointKeys | None = None,
) -> list[dict[str, Any]]:
    """The records the recorder writes for a finished flow, each with its `ts`.

    The response of an event stream is written `streamed` with its events after it, as the recorder
    tees a live stream; its end (`sse.end`) is clean unless the flow failed. The records are keyed by
    the flow's origin and path; an HTTP+SSE `endpoint` event is noted in `endpoints`, as the recorder
    notes it (a dump writes a flow when it ends, after the POSTs of a stream's session: the keys are
    set once every flow is read, in `lines`).
    """
    key = server_key(flow, redaction)
    req = flow.request
    out = [{**request_record(flow, redaction, max_body), fmt.F_TS: req.timestamp_start}]
    resp = flow.response
    if resp is not None:
        start = resp.timestamp_start or req.timestamp_end or req.timestamp_start
        end = resp.timestamp_end or start
        if is_event_stream(resp):
            out.append({**response_record(flow, redaction, streamed=True, max_body=max_body), fmt.F_TS: start})
            parser = SseParser(max_event=max_body)
            events = parser.feed(resp.get_content(strict=False) or b"")
            for n, event in enumerate(events):
                if endpoints is not None and event.event == "endpoint":
                    endpoints.announce(flow, event.data, key, redaction)
                out.append({**sse_event_record(flow, n, event, redaction), fmt.F_TS: end})
            how, message = HOW_CLEAN, None
            if flow.error is not None:
                failed = error_record(flow, redaction, now=end)
                how, message = stream_end_how(failed["kind"]), failed["error"]
            sse_end = sse_end_record(flow, how, len(events), incomplete=parser.pending, error=message)
            out.append({**sse_end, "t_end": end, fmt.F_TS: end})
        else:
            out.append({**response_record(flow, redaction, streamed=False, max_body=max_body), fmt.F_TS: start})
    if flow.error is not None:  # after the stream's end, as the recorder writes a stream cut by an error
        when = flow.error.timestamp or req.timestamp_end or req.timestamp_start
        out.append({**error_record(flow, redaction, now=when), fmt.F_TS: when})
    for rec in out:
        rec[fmt.F_SERVER] = key
    return out


_QUOTED: Final = re.compile(r"b?'(?:[^'\\]|\\.)*'|b?\"(?:[^\"\\]|\\.)*\"", re.S)
"""A Python literal (`'…'`, `b'…'`, `"…"`) inside an exception's message: the data it failed on."""
_MAX_WHY: Final = 200


def _why(exc: BaseException) -> str:
    """Why a flow could not be read, for a note in the report: never the data it failed on. A
    `UnicodeError` holds the whole string it failed on (a URL's query, a header's value: credentials);
    other errors quote it (mitmproxy's tnetstring parser quotes the rest of the flow, headers and
    bodies as they were sent; urllib quotes a port that is a URL password's first part), so what
    any message quotes is left out."""
    if isinstance(exc, UnicodeError):
        return f"{type(exc).__name__}: {getattr(exc, 'reason', 'cannot be encoded')}"
    return f"{type(exc).__name__}: {_unquoted(str(exc))}"


def _unquoted(text: str) -> str:
    """A message for a note: what it quotes left out (see `_why`), at most `_MAX_WHY` characters."""
    text = _QUOTED.sub("'…'", text)
    return text if len(text) <= _MAX_WHY else text[: _MAX_WHY - 1] + "…"


def _redaction() -> HttpRedaction:
    return HttpRedaction(Redactor(), enabled=True)


# --- mitmproxy dumps -------------------------------------------------------------------------------
def read_flows(stream: BinaryIO) -> Converted:
    """Every HTTP flow of a mitmproxy dump as records; other flows are noted as not read.

    A dump cut short ends with what was read before the cut, noted at the next flow's number.
    """
    out = Converted()
    redaction = _redaction()
    digest = hashlib.blake2b(digest_size=16)
    n = held = 0
    seen: dict[str, int] = {}  # flow id → the flow number it was read at
    # Not `FlowReader.stream()`: that generator ends at the first flow it cannot build, so one bad
    # value in a well-framed flow lost every flow after it. Only broken framing ends the reading.
    while True:
        try:
            framed = _frame(stream)
        except _BrokenFrame as exc:
            if n == 0:
                raise ForeignError(f"not a mitmproxy flow dump mitmproxy can read ({exc})") from None
            out.unread.append((n + 1, f"the dump cannot be read from here on ({exc})"))
            break
        if framed is None:
            break
        n += 1
        if isinstance(framed, int):
            digest.update(b"%d:" % framed)  # a copy of the file still has the same digest
            why = f"a flow larger than {MAX_WHOLE_BYTES} bytes: not read (erascope reads a flow whole)"
            out.unread.append((n, why))
            continue
        held += len(framed[1])
        if held > MAX_DUMP_BYTES:
            raise ForeignError(
                f"a mitmproxy dump whose flows hold more than {MAX_DUMP_BYTES} bytes (decompressed), which"
                " erascope converts in memory: not read; split it into smaller dumps"
            )
        digest.update(b"%d:%c" % (len(framed[1]), framed[0]))
        digest.update(framed[1])
        try:
            state = tnetstring.parse(*framed)
        except Exception as exc:  # attacker-controlled: any damage inside the frame
            state = exc
        if not isinstance(state, dict):
            why = _why(state) if isinstance(state, Exception) else "a tnetstring that is no dictionary"
            if n == 1:  # framed like a dump, but the first item is no flow: some other file
                raise ForeignError(f"not a mitmproxy flow dump mitmproxy can read ({why})")
            out.unread.append((n, f"not a flow mitmproxy can read ({why})"))
            continue
        try:
            flow = mflow.Flow.from_state(compat.migrate_flow(state))
        except Exception as exc:  # attacker-controlled: any value mitmproxy's flow classes refuse
            out.unread.append((n, f"not a flow mitmproxy can read ({_why(exc)})"))
            continue
        # a flow written twice (dumps appended to, or concatenated, that overlap): its records share
        # their flow id, so the copy's request would stay unanswered (a false no-answer)
        first = seen.setdefault(flow.id, n)
        if first != n:
            out.unread.append((n, f"the same flow as flow {first} (its flow id): read once"))
            continue
        if not isinstance(flow, http.HTTPFlow):
            out.unread.append((n, f"a {flow.type} flow: erascope reads HTTP flows"))
            continue
        if flow.websocket is not None:
            out.unread.append((n, "a websocket flow: erascope reads HTTP flows"))
            continue
        if flow.request.raw_content is None:
            out.unread.append((n, "the request body was not kept (streamed by mitmproxy): not read"))
            continue
        if flow.response is not None and flow.response.raw_content is None:
            # a plain `mitmdump -w` buffering a body the upstream cut, or the client left, keeps the
            # response without it
            how = "streamed by mitmproxy"
            if flow.error is not None:
                how = f"the flow failed before it was read whole: {_unquoted(flow.error.msg)}"
            out.unread.append((n, f"the response body was not kept ({how}): not read"))
            continue
        _convert(out, n, flow, redaction)
    if n:  # of every frame read (a dump without any names nothing)
        out.digest = digest.digest()
    _note_answers_not_held(out)
    return out


class _BrokenFrame(Exception):
    """The dump's framing is broken here: where the next flow starts cannot be known."""


_MAX_LENGTH_DIGITS: Final = 12
"""What mitmproxy's `tnetstring.load` takes of a length prefix."""
_READ_BLOCK: Final = 1 << 20


def _frame(stream: BinaryIO) -> tuple[int, memoryview] | int | None:
    """The next tnetstring's type byte and payload, not parsed (mitmproxy's `tnetstring.load` up to
    its `parse`), so that a flow that does not parse still ends where its length says; its length
    alone, passed over, when that is beyond `MAX_WHOLE_BYTES`; None at the end of the file. Raises
    `_BrokenFrame`."""
    c = stream.read(1)
    if not c:
        return None
    digits = b""
    while c.isdigit():
        digits += c
        if len(digits) > _MAX_LENGTH_DIGITS:
            raise _BrokenFrame("not a tnetstring: absurdly large length prefix")
        c = stream.read(1)
    if c != b":" or not digits:
        raise _BrokenFrame("not a tnetstring: missing or invalid length prefix")
    want = int(digits)
    keep = want <= MAX_WHOLE_BYTES
    # a block at a time: `read(want)` allocates the length the file claims before reading any of it
    blocks: list[bytes] = []
    got = 0
    while got < want and (block := stream.read(min(want - got, _READ_BLOCK))):
        if keep:
            blocks.append(block)
        got += len(block)
    kind = stream.read(1)
    if got < want or not kind:
        raise _BrokenFrame("it ends inside a flow: the file was cut short")
    return (kind[0], memoryview(b"".join(blocks))) if keep else want


def _convert(out: Converted, n: int, flow: http.HTTPFlow, redaction: HttpRedaction) -> None:
    try:
        records = flow_records(flow, redaction, endpoints=out.endpoints)
        for rec in records:
            orjson.dumps(rec)  # text a capture line can hold (no lone surrogates), or the flow is noted
    except Exception as exc:  # an odd flow must not fail the file: it is attacker-controlled
        out.unread.append((n, f"cannot be turned into records ({_why(exc)})"))
        return
    if out.server == "http":
        out.server = records[0][fmt.F_SERVER]
    out.records.extend((n, rec) for rec in records)
    if not any(rec[fmt.F_TYPE] == fmt.HTTP_RESPONSE and rec.get("streamed") for rec in records):
        return
    session = _flow_session(records)
    if session is not None:
        out.stream_sessions.add(session)
    events = [rec for rec in records if rec[fmt.F_TYPE] == fmt.SSE_EVENT]
    if events:
        start = next(rec[fmt.F_TS] for rec in records if rec[fmt.F_TYPE] == fmt.HTTP_RESPONSE)
        own = frozenset(_ids(records[0], answers=False))
        out.streams.append(_Stream(start, events[0][fmt.F_TS], own, events, session))


def _note_answers_not_held(out: Converted) -> None:
    """The requests a server accepted (202) to answer on their session's event stream, of a session no
    event stream read names, are noted as not read: their answers are not in the file (the stream was
    left out, or opened before the file's first entry: a browser records only while its tools are
    open), and read they would be `no-answer`, their server `broken`. The HTTP+SSE transport answers
    every POST so, on its session's `GET /sse` stream, which announced the POSTs' URL."""
    by_location: dict[int, list[dict[str, Any]]] = {}
    for n, rec in out.records:
        by_location.setdefault(n, []).append(rec)
    held = set()
    for n, records in by_location.items():
        request = records[0]
        session = fmt.named_session(request.get("headers"), request.get("url"))
        if (
            session is not None
            and session not in out.stream_sessions
            and any(rec[fmt.F_TYPE] == fmt.HTTP_RESPONSE and rec.get("status") == 202 for rec in records)
            and _ids(request, answers=False)
        ):
            held.add(n)
    if not held:
        return
    out.records = [(n, rec) for n, rec in out.records if n not in held]
    why = "its answer comes on an event stream this file does not hold: not read, never taken for a missing answer"
    out.unread = sorted([*out.unread, *((n, why) for n in held)])
    out.server = out.records[0][1][fmt.F_SERVER] if out.records else "http"


def _flow_session(records: list[dict[str, Any]]) -> str | None:
    """The session first named in a flow's records, as the analyzer gives a flow its session: by its
    request (`Mcp-Session-Id`, the POST URL's `session_id`), its response, or an `endpoint` event."""
    for rec in records:
        rtype = rec[fmt.F_TYPE]
        if rtype == fmt.HTTP_REQUEST or rtype == fmt.HTTP_RESPONSE:
            session = fmt.named_session(rec.get("headers"), rec.get("url"))
        elif rtype == fmt.SSE_EVENT and rec.get("sse_event") == "endpoint" and isinstance(rec.get(fmt.F_RAW), str):
            found = fmt.SESSION_QUERY.search(rec[fmt.F_RAW])
            session = found.group(1) if found is not None else None
        else:
            session = None
        if session is not None:
            return session
    return None


# --- HAR ---------------------------------------------------------------------------------------------
def read_har(stream: BinaryIO) -> Converted:
    """Every entry of a HAR 1.2 document as records (see the module docstring)."""
    data = _read_at_most(stream, MAX_WHOLE_BYTES)
    if data is None:
        raise ForeignError(
            f"a HAR document larger than {MAX_WHOLE_BYTES} bytes (decompressed), which erascope reads whole: not"
            " read; split its entries into smaller HAR files"
        )
    try:
        # Windows tools save HAR with a UTF-8 BOM (RFC 8259 lets a parser ignore one; orjson refuses it)
        doc = _json(data.removeprefix(codecs.BOM_UTF8))
        entries = doc["log"]["entries"]
        if not isinstance(entries, list):
            raise TypeError("log.entries is not a list")
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ForeignError(f"not a HAR file (a JSON document with log.entries): {exc}") from None
    out = Converted(digest=hashlib.blake2b(data, digest_size=16).digest())
    del data
    redaction = _redaction()
    creator = doc["log"].get("creator")
    writer = creator.get("name") if isinstance(creator, dict) else None
    # Firefox's `connection` is the server's port, not a connection: every request would share one
    connections = writer != "Firefox"
    # mitmproxy's `send` and `wait` run from its flow's request start and end, and its `connect` (the
    # upstream connection's setup) lies beside them, not before them as HAR's timings are laid out
    sequential = writer != "mitmproxy"
    for n, entry in enumerate(entries, start=1):
        if isinstance(entry, dict):
            entry = _mended(entry)
        why = _har_gap(entry)
        if why is not None:
            out.unread.append((n, why))
            continue
        try:
            flow = _har_flow(entry if connections else _without_connection(entry), sequential)
        except Exception as exc:  # attacker-controlled: any shape mitmproxy's reader refuses
            out.unread.append((n, f"not a HAR entry mitmproxy can read ({_why(exc)})"))
            continue
        _convert(out, n, flow, redaction)
    _note_answers_not_held(out)
    return out


def _read_at_most(stream: BinaryIO, limit: int) -> bytes | None:
    """What `stream` holds, or None when that is more than `limit` bytes. A block at a time: one
    `read(limit + 1)` of a compressed stream held the decompressed bytes about twice over at its
    peak, where a bomb is refused holding at most the limit and a block."""
    blocks: list[bytes] = []
    held = 0
    while block := stream.read(min(_READ_BLOCK, limit + 1 - held)):
        blocks.append(block)
        held += len(block)
        if held > limit:
            return None
    return b"".join(blocks)


def _json(data: bytes) -> Any:
    """The JSON document, also when a string in it escapes a lone surrogate (`"\\ud800"`): valid JSON
    that JavaScript's `JSON.stringify` writes and orjson refuses whole. The standard library reads it,
    and each such surrogate is then read as its text (`_surrogates_as_text`): the entry holding it is
    read like any other. Raises `orjson.JSONDecodeError`."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        try:
            doc = json.loads(data, parse_constant=_no_constant)
        except (ValueError, RecursionError):  # what orjson refused for its own reason (depth, NaN, syntax)
            raise exc from None
    # only a document orjson refused can hold one: the strings of a clean one are not searched
    _surrogates_as_text(doc)
    return doc


_SURROGATE: Final = re.compile("[\ud800-\udfff]")
"""A lone surrogate in a string the standard library read (it reads an escaped pair as one character)."""
_NOT_A_BYTE: Final = re.compile("[\ud800-\udc7f\udd00-\udfff]")
"""One but U+DC80–U+DCFF: mitmproxy's HAR export writes a byte that is no UTF-8 so (`surrogateescape`),
and the fields that stand for the wire's bytes (headers, reason phrase, method, bodies) are read back
as that byte, as its dump of the same flow is read."""
_TEXT_FIELDS: Final = frozenset({"_error", "serverIPAddress", "connection"})
"""The strings of an entry that a record holds as text, not as the wire's bytes: no surrogate stays in them."""


def _escaped(surrogate: re.Match[str]) -> str:
    return f"\\u{ord(surrogate.group()):04x}"


def _surrogates_as_text(doc: Any) -> None:
    """Each lone surrogate in the strings of `doc` written as the text of its escape, in small letters
    (`"\\uD800"` reads `\\ud800`), as the analyzer reads one in a capture (`lone_surrogates_as_text`):
    no capture line can hold the surrogate itself, and the entry holding it was not read. A byte
    mitmproxy's export wrote stays (`_NOT_A_BYTE`), but in the fields that are text (`_TEXT_FIELDS`).
    In place, one node at a time: a document nested as deep as the standard library reads would
    exceed Python's recursion limit."""
    nodes = [doc]
    while nodes:
        node = nodes.pop()
        if not isinstance(node, dict | list):
            continue
        for key in node.keys() if isinstance(node, dict) else range(len(node)):
            value = node[key]
            if isinstance(value, str):
                if not value.isascii():
                    node[key] = (_SURROGATE if key in _TEXT_FIELDS else _NOT_A_BYTE).sub(_escaped, value)
            else:
                nodes.append(value)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _without_connection(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "connection"}


def _har_gap(entry: Any) -> str | None:
    """Why an entry (`_mended`) cannot be read faithfully (it is not an entry, a body was dropped, a
    field the reading depends on cannot be used)."""
    if not isinstance(entry, dict):
        return "not a HAR entry (not an object)"
    response = entry.get("response")
    if not isinstance(response, dict):
        return "not a HAR entry (no response object)"
    request = entry.get("request")
    if not isinstance(request, dict):
        return "not a HAR entry (no request object)"
    post = request.get("postData")
    # mitmproxy exports a streamed body as a text of null; a `postData` of null says as little (one
    # left out is a request without a body, a GET)
    if ("postData" in request and post is None) or (isinstance(post, dict) and post.get("text") is None):
        return "the request body is not in the HAR (the exporter left it out): not read, never guessed"
    why = _headers_gap("request", request)
    if why is not None:
        return why
    status = response.get("status")
    if not status:
        return None  # a failed request: read as an error
    if isinstance(status, bool) or not isinstance(status, int):
        return "the response status is no number (HAR gives a number): not read"
    why = _headers_gap("response", response)
    if why is not None:
        return why
    content = response.get("content")
    if not isinstance(content, dict):
        return "the response has no content object"
    text = content.get("text")
    sizes = [v for v in (content.get("size"), response.get("bodySize"), response.get("_transferSize")) if v]
    sse = _event_stream_type(content.get("mimeType"))
    sized = any(isinstance(v, int | float) and v > 0 for v in sizes) or _declared_body(request, response)
    # No text where a body was (its size, its `Content-Length`), or for an event stream (browsers leave
    # those out). mitmproxy writes a body it streamed (and so kept none of) as an empty text of size 0,
    # as it writes an empty body: an event stream answering a request (whose answer it carries) is
    # taken for one not kept; a client's own stream (a `GET`, which may carry nothing) for empty.
    if (text is None and (sse or sized)) or (text == "" and (sized or (sse and _asks(post)))):
        return "the response body is not in the HAR (the exporter left it out): not read, never guessed"
    if content.get("encoding") == "base64" and isinstance(text, str) and not _is_base64(text):
        return "the response body is not valid base64 (its encoding says it is): not read, never guessed"
    return None


def _event_stream_type(value: object) -> bool:
    return str(value or "").split(";", 1)[0].strip().lower() == "text/event-stream"


def _asks(post: Any) -> bool:
    """Whether a HAR request's body (`postData`) holds a JSON-RPC request, which its answer answers."""
    text = post.get("text") if isinstance(post, dict) else None
    return isinstance(text, str) and bool(_ids({fmt.F_RAW: text}, answers=False))


def _declared_body(request: Any, response: dict[str, Any]) -> bool:
    """Whether the response's `Content-Length` promises a body (none for a `HEAD` request, a 204 or a 304)."""
    if (isinstance(request, dict) and request.get("method") == "HEAD") or response.get("status") in (204, 304):
        return False
    headers = response.get("headers")
    return any(
        isinstance(h, dict)
        and str(h.get("name", "")).lower() == "content-length"
        and str(h.get("value", "")).strip().isdigit()
        and int(str(h.get("value")).strip()) > 0
        for h in (headers if isinstance(headers, list) else ())
    )


_WHITESPACE: Final = re.compile(r"\s+")


def _is_base64(text: str) -> bool:
    """Whether `text` is base64 but for whitespace (line wrapping), which mitmproxy's lenient decoding
    skips like every other character outside the alphabet: those others would make another body."""
    try:
        base64.b64decode(_WHITESPACE.sub("", text), validate=True)
    except ValueError:  # binascii.Error; a non-ASCII character too
        return False
    return True


def _har_flow(entry: dict[str, Any], sequential: bool = True) -> http.HTTPFlow:
    """mitmproxy's own reading of the entry, with what it leaves out set from the entry. `sequential`:
    the request was sent after the entry's `blocked`, `dns` and `connect` times (HAR's layout)."""
    response = entry["response"]
    failed = not response.get("status")
    if failed:  # request_to_flow needs a response; the failure is the flow's error instead
        entry = {**entry, "response": {"status": 502, "httpVersion": "", "headers": [], "content": {}}}
    request = entry["request"]
    url, target = _ascii_url(request.get("url"))
    entry = {**entry, "request": {**request, "url": url}}
    text = (request.get("postData") or {}).get("text")
    if text is not None and not isinstance(text, str):
        raise TypeError("postData.text is not text")
    # mitmproxy's reader divides `time`: one that is no number (text, `true`, an object) is no time
    flow = request_to_flow({**entry, "time": _elapsed(entry) or 0})
    if target is not None:
        # the target's bytes, as the recorder would have seen them: the URL's text as UTF-8, and a byte
        # mitmproxy's export wrote `\udce9` as that byte (the path's setter encodes `surrogateescape`)
        flow.request.path = target if target.startswith("/") else "/" + target  # as mitmproxy's parse
    if (request.get("postData") or {}).get("encoding") == "base64" and text:
        flow.request.content = base64.b64decode(text)
    started = dt.datetime.fromisoformat(str(entry["startedDateTime"]).replace("Z", "+00:00"))
    # HAR requires an offset; without one the writer named no zone, and the reading machine's own
    # would make the report depend on where it runs: UTC, as the recorders write
    start = (started if started.tzinfo is not None else started.replace(tzinfo=dt.UTC)).timestamp()
    t = {k: float(v) / 1000 for k, v in (entry.get("timings") or {}).items() if isinstance(v, int | float) and v > 0}
    before_send = sum(t.get(k, 0.0) for k in ("blocked", "dns", "connect")) if sequential else 0.0  # ssl: in connect
    sent = start + before_send + t.get("send", 0.0)
    headers = sent + t.get("wait", 0.0)
    flow.request.timestamp_start, flow.request.timestamp_end = start, sent
    url = urlsplit(str(request.get("url", "")))
    port = url.port or (443 if url.scheme == "https" else 80)
    ip = entry.get("serverIPAddress")
    flow.server_conn = connection.Server(address=(ip, port) if ip else None)
    if ip:
        flow.server_conn.peername = (ip.strip("[]"), port)
    flow.client_conn.peername = None  # request_to_flow's 127.0.0.1:0 is a placeholder: a HAR has no client address
    conn = entry.get("connection")
    if isinstance(conn, str | int) and str(conn):
        flow.client_conn.id = f"har-connection-{conn}"  # Chrome's connection id: requests sharing it share one
    if failed:
        flow.response = None
        message = response.get("_error") or entry.get("_error") or "the request failed (HAR status 0)"
        flow.error = mflow.Error(str(message), timestamp=_failed_at(entry, start, headers, sequential))
    else:
        assert flow.response is not None
        flow.response.timestamp_start = headers
        flow.response.timestamp_end = headers + t.get("receive", 0.0)
        status_text = response.get("statusText")
        if isinstance(status_text, str):
            # mitmproxy's `reason` is the wire's bytes as Latin-1 (its own HAR export writes that); a
            # browser writes the phrase decoded, and any character beyond Latin-1 refused the entry
            try:
                flow.response.data.reason = status_text.encode("latin-1")
            except UnicodeEncodeError:
                flow.response.data.reason = status_text.encode("utf-8", "surrogateescape")
    return flow


def _failed_at(entry: dict[str, Any], start: float, headers: float, sequential: bool) -> float:
    """When a failed entry failed: its start and its `time` (its elapsed milliseconds), when that runs
    past when its response would have begun (`headers`). A failed request has no phase of its timings
    for the wait before its failure: older Firefox releases write `time` as its end less its start
    beside timings that may be empty; Chrome puts all of it in `blocked`, already in `headers`. The
    `time` of mitmproxy's export is no elapsed time but its timings' sum, their `connect` beside the
    request (not sequential), with `wait` and `receive` 0: it holds no time of the failure."""
    total = _elapsed(entry)
    if not sequential or total is None or not total > 0:
        return headers
    return max(headers, start + total / 1000)


def _elapsed(entry: dict[str, Any]) -> float | None:
    """The entry's `time` (milliseconds), None when it is no finite number (HAR says it is one)."""
    total = entry.get("time")
    if isinstance(total, bool) or not isinstance(total, int | float) or not math.isfinite(total):
        return None
    return float(total)


def _ascii_url(url: Any) -> tuple[Any, str | None]:
    """The URL mitmproxy's HAR reader is given, and the request target to set on its flow after it.

    That reader takes an ASCII URL only (it encodes the parsed URL strictly), where a browser or a
    tool writes an IRI's path or query value as text (`?name=café`) and mitmproxy's own export a byte
    that is no UTF-8 as `\\udce9`: it is given the origin alone, and the target is set apart. A clean
    URL is handed over as it is (one `isascii`). A host written as text (`café.example`, as mitmproxy
    itself gives and exports a host sent in its IDNA form) is given in that form, which the reader
    decodes back, as it decodes a host read off the wire; one IDNA refuses, or text in the user part,
    is left for the reader to refuse."""
    if not isinstance(url, str) or url.isascii():
        return url, None
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    if not host.isascii():
        with contextlib.suppress(UnicodeError):  # else no host name: the reader refuses it, the entry noted
            host = host.encode("idna").decode("ascii")
    origin = urlunsplit((parts.scheme, user + at + host, "", "", ""))
    return origin, urlunsplit(("", "", *parts[2:]))


class _WireText(str):
    """A HAR string that stands for bytes: encoded with `surrogateescape`, so that a byte that is no
    UTF-8, which mitmproxy's HAR export writes as a lone surrogate (`\\udce9`), is that byte again."""

    __slots__ = ()

    def encode(self, encoding: str = "utf-8", errors: str = "surrogateescape") -> bytes:
        return str.encode(self, encoding, errors)


_READ_HEADERS: Final = frozenset(
    {"content-type", "content-encoding", fmt.SESSION_HEADER, "mcp-protocol-version", "mcp-method"}
)
"""Headers whose values decide how a message is read: its body's type and encoding, its session, the
version and method it names. One of them of a value that is no text is no odd field to leave out (an
event stream read as a JSON body, a session's request read as of none): its entry is not read."""


def _mended(entry: dict[str, Any]) -> dict[str, Any]:
    """A copy of a HAR entry as mitmproxy's `request_to_flow` reads it, its optional fields of a type HAR
    does not give them left out. That reader reads every field it knows whatever it holds: a
    `serverIPAddress` that is an object, `timings` that are a list, a header of a null value or a
    missing `httpVersion` refused the entry, and the MCP messages in it were lost, for a field the
    analysis never reads (exporters slip, and anyone can write the file). A status written as text
    (`"200"`) is that number, as the analyzer reads a number written as text elsewhere. The fields the
    reading depends on (method, URL, start, bodies, status, `_READ_HEADERS`) are left as they are:
    `_har_gap` or the reader refuses them, and the entry is noted."""
    out = dict(entry)
    if not isinstance(out.get("serverIPAddress"), str):
        out.pop("serverIPAddress", None)
    conn = out.get("connection")
    if isinstance(conn, bool) or not isinstance(conn, str | int):
        out.pop("connection", None)
    timings = out.get("timings")
    out["timings"] = {k: v for k, v in timings.items() if _finite_number(v)} if isinstance(timings, dict) else {}
    request, response = out.get("request"), out.get("response")
    if isinstance(request, dict):
        out["request"] = _mended_message(request)
    if isinstance(response, dict):
        out["response"] = _mended_message(response)
        if "status" in response:
            out["response"]["status"] = _status(response["status"])
    return out


def _mended_message(message: dict[str, Any]) -> dict[str, Any]:
    """A HAR request or response as `_mended` gives it: its `httpVersion` text (the reader's HTTP/1.1
    for one it does not know, as for any text it does not know) and its headers `_mended_headers`."""
    out = dict(message)
    if not isinstance(out.get("httpVersion"), str):
        out["httpVersion"] = ""
    if isinstance(out.get("headers"), list):
        out["headers"] = _mended_headers(out["headers"])
    return out


def _mended_headers(headers: list[Any]) -> list[Any]:
    """HAR headers (`{"name": …, "value": …}`, or Slack's `[name, value]`) as mitmproxy's `fix_headers`
    reads them, their names and values text it encodes back to the wire's bytes (`_WireText`: it
    encodes strictly, and one such byte refused the entry). A value that is a whole number is its text,
    as on the wire; a header of no text name or value is left out (it refused the entry, and a text
    was read as a `[name, value]` of its first two characters), but for one of `_READ_HEADERS`, kept
    as it is for `_har_gap` to name."""
    out: list[Any] = []
    for header in headers:
        if isinstance(header, dict):
            name, value = header.get("name"), header.get("value")
        elif isinstance(header, list) and len(header) >= 2:
            name, value = header[0], header[1]
        else:
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(name, str) and isinstance(value, str):
            out.append({"name": _WireText(name), "value": _WireText(value)})
        elif isinstance(name, str) and name.lower() in _READ_HEADERS:
            out.append(header)
    return out


def _headers_gap(which: str, message: dict[str, Any]) -> str | None:
    """Why the headers of a `_mended` request or response cannot be read: they are no list (an object
    was read as headers named by its names' first characters), or one of `_READ_HEADERS` has no text."""
    headers = message.get("headers")
    if not isinstance(headers, list):
        return f"the {which} headers are no list (HAR gives a list): not read"
    for header in headers:
        if not (isinstance(header, dict) and isinstance(header.get("value"), str)):  # kept as it is
            name = header.get("name") if isinstance(header, dict) else header[0]
            return f"the {which}'s {name.lower()} header has no text value: not read"
    return None


_STATUS_TEXT: Final = re.compile(r"\s*([0-9]{1,3})\s*")
"""A status written as text: HTTP's is three digits (0, a failure, is written so too)."""


def _status(value: Any) -> Any:
    """A response's status as the number mitmproxy's reader takes: one written as text of digits
    (`"200"`) or as a whole float (`200.0`) is that number; anything else as it is (`_har_gap` names it)."""
    if isinstance(value, str) and (digits := _STATUS_TEXT.fullmatch(value)) is not None:
        return int(digits.group(1))
    if isinstance(value, float) and value.is_integer() and 0 <= value < 1000:
        return int(value)
    return value


def _finite_number(value: Any) -> bool:
    """Whether a HAR value is a number of milliseconds: a float the standard library read as infinite
    (`1e400`) or an integer beyond any float is none, and `true` is no number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond any float
        return False


def convert(kind: str, stream: BinaryIO) -> Converted:
    """The records of a foreign file of `kind` (`HAR` or `FLOWS`). Raises `ForeignError`."""
    return read_har(stream) if kind == HAR else read_flows(stream)


def lines(converted: Converted) -> Iterator[tuple[int, bytes]]:
    """(location, JSONL text) of a capture holding `converted`: a header at location 0, then the
    records in time order (as the recorder writes them as they happen), numbered `seq` from 1."""
    for _, rec in converted.records:
        rec[fmt.F_SERVER] = converted.endpoints.key(rec[fmt.F_SERVER])
    header = {
        fmt.F_TYPE: fmt.HEADER,
        "format": fmt.FORMAT_ID,
        "transport": fmt.HTTP,
        "server": converted.endpoints.key(converted.server),
        fmt.F_SEQ: 0,
    }
    yield 0, orjson.dumps(header)
    _place_events(converted)
    ordered = sorted(converted.records, key=lambda item: (item[1].get(fmt.F_TS) or 0.0))
    for seq, (n, rec) in enumerate(ordered, start=1):
        rec[fmt.F_SEQ] = seq
        yield n, orjson.dumps(rec, option=orjson.OPT_NON_STR_KEYS)


def _ids(record: dict[str, Any], *, answers: bool) -> list[bytes]:
    """The ids (JSON text) of the requests a record's message sends, or of the answers it carries, read
    as the analyzer reads them: a lone surrogate's escape (`"r\\ud800"`, which orjson refuses) as its
    text, not as no id at all."""
    raw = record.get(fmt.F_RAW)
    if not isinstance(raw, str):
        return []
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        # only a text orjson refused can hold such an escape: the search of every escape is not paid
        # by every message of a stream
        try:
            doc = orjson.loads(lone_surrogates_as_text(raw))
        except orjson.JSONDecodeError:
            return []
    out = []
    for msg in doc if isinstance(doc, list) else [doc]:
        if not isinstance(msg, dict) or msg.get("id") is None:
            continue
        if ("result" in msg or "error" in msg) if answers else "method" in msg:
            out.append(orjson.dumps(msg["id"]))
    return out


def _place_events(converted: Converted) -> None:
    """Each event of a stream kept whole at the earliest time it can have passed, where that is known.

    The deprecated HTTP+SSE transport answers every POST on one `GET /sse` stream that lasts the
    whole session: stamped at the stream's end, an answer sent at once read as minutes late (a probe
    `no-answer`, its server `broken`). An event answering a request of another flow of its session
    (the analyzer pairs such answers within a session only, and clients number their requests alike)
    came after that request, and after the events before it: it is placed just after the earliest such
    request not answered yet, and the events before it just before it. Events answering the stream's
    own request (a Streamable HTTP answer, which ends its stream), the events of a stream of no
    session, and events after the last one placed keep the stream's end.
    """
    if not converted.streams:
        return
    sent: dict[tuple[str, bytes], list[float]] = {}
    for _, rec in converted.records:
        if rec[fmt.F_TYPE] == fmt.HTTP_REQUEST and rec.get(fmt.F_TS) is not None:
            session = fmt.named_session(rec.get("headers"), rec.get("url"))
            for ident in _ids(rec, answers=False) if session is not None else ():
                sent.setdefault((session, ident), []).append(rec[fmt.F_TS])
    for times in sent.values():
        times.sort()
    taken: set[tuple[str, bytes, float]] = set()
    for stream in converted.streams:
        if stream.session is None:
            continue  # the analyzer pairs none of its answers elsewhere: its events keep its end
        at = stream.start
        placed: list[float | None] = []
        for event in stream.events:
            when = None
            for ident in _ids(event, answers=True):
                if ident in stream.own:
                    continue
                times = sent.get((stream.session, ident), [])
                after_at = itertools.islice(times, bisect.bisect_left(times, at), None)
                before_end = itertools.takewhile(lambda t, end=stream.end: t <= end, after_at)
                t = next((t for t in before_end if (stream.session, ident, t) not in taken), None)
                if t is not None:
                    taken.add((stream.session, ident, t))
                    at = max(at, min(math.nextafter(t, math.inf), stream.end))
                    when = at
            placed.append(when)
        after = stream.end
        for event, when in zip(reversed(stream.events), reversed(placed), strict=True):
            after = when if when is not None else after
            event[fmt.F_TS] = after
