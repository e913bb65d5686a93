"""The capture format `erascope/1`: one JSON object per line, a header record first in every file.

This module is the single source of the record vocabulary shared by the capture tools
(`addon/`) and the analyzer (`analyzer/`). `captures/FORMAT.md` documents every field; keep the
two in step (a test checks that every constant named here appears in FORMAT.md).

Versioning rule: the format id is `erascope/<major>`. Adding optional fields or new record types
keeps the major; readers ignore what they do not know. Renaming, removing or changing the meaning
of a field bumps the major, and readers refuse majors they do not know.
"""

from __future__ import annotations

import base64
import codecs
import json
import re
from collections.abc import Iterator
from typing import Any, Final

import orjson

FORMAT_NAME: Final = "erascope"
FORMAT_MAJOR: Final = 1
FORMAT_ID: Final = f"{FORMAT_NAME}/{FORMAT_MAJOR}"
"""Written in the `format` field of every header record."""

CAPTURE_SUFFIX: Final = ".jsonl"
"""Capture files end in this; the analyzer searches directories for it."""

# --- record types (the `type` field) -------------------------------------------------------------
HEADER: Final = "header"
"""First record of every file (and of every rotated part)."""
FRAME: Final = "frame"
"""stdio: one line (or the unterminated tail at EOF) relayed in one direction."""
STDERR: Final = "stderr"
"""stdio: one line the server wrote to its stderr."""
LIFECYCLE: Final = "lifecycle"
"""stdio: a process or stream event; the `event` field says which."""
CAPTURE_ERROR: Final = "capture-error"
"""The recorder itself failed (write errors, lost records); written when it can be."""
HTTP_REQUEST: Final = "http.request"
"""HTTP: a request as the proxy received it from the client."""
HTTP_RESPONSE: Final = "http.response"
"""HTTP: a response's status, headers and (unless streamed) body."""
SSE_EVENT: Final = "sse.event"
"""HTTP: one server-sent event of a `text/event-stream` response, as it passed."""
SSE_END: Final = "sse.end"
"""HTTP: how an event stream ended (`how`: clean / client-gone / upstream-reset / recorder-stopped / error)."""
HTTP_ERROR: Final = "http.error"
"""HTTP: a flow error (connection refused, upstream reset, timeout, client gone, recorder stopped)."""
PART_END: Final = "part-end"
"""Last record of every part the recorder closed (`reason`); its `chain` digest is the part's final one."""

RECORD_TYPES: Final = frozenset(
    {
        HEADER, FRAME, STDERR, LIFECYCLE, CAPTURE_ERROR, HTTP_REQUEST, HTTP_RESPONSE, SSE_EVENT, SSE_END, HTTP_ERROR,
        PART_END,
    }
)  # fmt: skip

# --- transports and directions -------------------------------------------------------------------
STDIO: Final = "stdio"
HTTP: Final = "http"
C2S: Final = "c2s"
"""Client to server (stdio: the server's stdin; HTTP: a request)."""
S2C: Final = "s2c"
"""Server to client (stdio: the server's stdout; HTTP: a response or an SSE event)."""

# --- lifecycle events (the `event` field of LIFECYCLE records) -----------------------------------
EV_SPAWN: Final = "spawn"
"""The server process started: `argv` (redacted), `pid`, `cwd`."""
EV_SPAWN_FAILED: Final = "spawn-failed"
"""The command could not be started: `error`."""
EV_CLIENT_EOF: Final = "client-eof"
"""The client closed the tee's stdin; the tee closes the server's stdin."""
EV_SERVER_EOF: Final = "server-eof"
"""The server closed its stdout; the tee closes its own stdout to the client."""
EV_STDIN_BROKEN: Final = "server-stdin-broken"
"""Writing to the server's stdin failed (it exited or closed it); later client bytes are only recorded."""
EV_STDOUT_BROKEN: Final = "client-stdout-broken"
"""Writing to the client (the tee's stdout) failed (it closed its end): the tee stopped reading the
server's stdout and closed it, as the client's leaving would have directly: `error`, `held`."""
EV_EXIT: Final = "exit"
"""The server process ended: `code` (int) or `signal` (name), and the tee's `status`."""
EV_SIGNAL: Final = "signal"
"""The tee received `signal` (name) and forwarded it to the server."""
ENDING_SIGNALS: Final = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
"""`signal` names by which the client's side (its host, the user's terminal) ends the server: a
server that dies after one died of the client's doing, not by itself (Ctrl-Z's SIGTSTP/SIGCONT
stop and continue it)."""
EV_LINGER_END: Final = "linger-end"
"""The linger window after the server's exit closed; no client bytes are recorded after it."""
EV_TERMINATE: Final = "terminate"
"""The server outlived the grace period after `client-eof` or a `signal`: the tee sent it `signal`."""
EV_RECORDER_END: Final = "recorder-end"
"""The tee closes the capture: the last lifecycle record, with the recorder's `counters`."""
EV_RELAY_ABANDONED: Final = "relay-abandoned"
"""Told to stop, the tee gave up relaying the server's `stream` to a client that took none of it
for `grace` seconds; `held`: bytes it had read of it and could neither relay nor record."""

LIFECYCLE_EVENTS: Final = frozenset(
    {
        EV_SPAWN, EV_SPAWN_FAILED, EV_CLIENT_EOF, EV_SERVER_EOF, EV_STDIN_BROKEN, EV_EXIT, EV_SIGNAL,
        EV_LINGER_END, EV_TERMINATE, EV_RECORDER_END, EV_RELAY_ABANDONED, EV_STDOUT_BROKEN,
    }
)  # fmt: skip

# --- fields present in every record --------------------------------------------------------------
F_TYPE: Final = "type"
F_SEQ: Final = "seq"
"""Order records were taken, from 1, across rotated parts; 0 on out-of-band records (header, capture-error)."""
F_TS: Final = "ts"
"""Wall-clock time, float seconds since the Unix epoch, when the recorder saw the event."""
F_MONO: Final = "mono"
"""Monotonic clock, float seconds (only differences within one capture are meaningful)."""
F_SERVER: Final = "server"
"""The server key: a configured name, else derived from the command line or origin+path."""
F_CONN: Final = "conn"
"""Connection id: one stdio spawn, or one HTTP client connection."""
F_CHAIN: Final = "chain"
"""`<line index>:<digest>`, the last field of every line of a chained capture (see `addon.chain`)."""

# --- the hash chain (header fields and the `part-end` record) ------------------------------------
F_CHAIN_ALG: Final = "chain_alg"
"""Header: `blake3` or `blake3-keyed` (`sha256` or `hmac-sha256` before BLAKE3); absent on captures without a chain."""
F_CHAIN_KEY_ID: Final = "chain_key_id"
"""Header of a keyed chain: a public name of the key (16 hex), to tell another key from tampering."""
F_CHAIN_PREV: Final = "chain_prev"
"""Header of part 1, 2, …: the final digest of the previous part, where this part's chain starts."""
F_REASON: Final = "reason"
"""`part-end`: `rotated` (the capture goes on in `next`) or `closed` (the capture ended here)."""
F_NEXT: Final = "next"
"""`part-end` with `rotated`: the file name of the next part."""
END_ROTATED: Final = "rotated"
END_CLOSED: Final = "closed"

# --- payload fields (frames, stderr lines, HTTP bodies, SSE event data) -------------------------
F_RAW: Final = "raw"
"""The exact payload as a JSON string, when it is valid UTF-8 (line terminator excluded)."""
F_RAW_B64: Final = "raw_b64"
"""The exact payload, base64, when it is not valid UTF-8 (then `raw` is absent)."""
F_LEN: Final = "len"
"""Payload length in bytes on the wire (line terminator excluded)."""
F_NL: Final = "nl"
"""stdio: whether the line was terminated by `\\n` (false only for a tail at EOF)."""
F_DIR: Final = "dir"
F_EVENT: Final = "event"
F_COUNTERS: Final = "counters"
"""`recorder-end`: the recorder's counters (the ones `record http --metrics` serves), see FORMAT.md."""


class Pieces:
    """Bytes kept in the pieces they were read in (`chunks`), `size` of them: a long line held so is
    never joined into one `bytes`, nor decoded into one `str`; either would hold all of it once more
    (a `str` up to four bytes a character)."""

    __slots__ = ("chunks", "size")

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.size = sum(map(len, chunks))

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.chunks)


class PieceText:
    """A payload field's text given as the payload's `Pieces`: `raw` (the pieces are UTF-8) or, with
    `b64`, `raw_b64` (their base64). The capture writer writes it as the JSON string the text would be,
    a block at a time (`addon.writer`), so that no `str` of a long payload is ever made.

    Encoding it lets the pieces go as they are encoded: it then holds `encoded` instead (what is written
    between the string's quotes, in blocks that are each a whole JSON string's content) and `pieces` is
    None, so the payload is never held twice over. `text` and `holds` read either.
    """

    __slots__ = ("b64", "encoded", "pieces")

    def __init__(self, pieces: Pieces, *, b64: bool) -> None:
        self.pieces: Pieces | None = pieces
        self.b64 = b64
        self.encoded: list[bytes | memoryview] | None = None

    def text(self) -> str:
        """The field's text as one `str`, for the rare reader that needs it whole."""
        if self.b64:
            if self.pieces is not None:
                return base64.b64encode(bytes(self.pieces)).decode("ascii")
            return b"".join(self.encoded or ()).decode("ascii")
        return b"".join(self.utf8()).decode("utf-8")

    def utf8(self) -> Iterator[bytes]:
        """The bytes of a text (not `b64`), in pieces: the pieces themselves, or each encoded block's text."""
        assert not self.b64
        if self.pieces is not None:
            yield from self.pieces.chunks
            return
        for block in self.encoded or ():
            text: str = orjson.loads(b'"%b"' % block)
            yield text.encode("utf-8")

    def holds(self, *needles: bytes) -> bool:
        """Whether the text holds one of `needles` (ASCII): searched in its UTF-8 a piece at a time, which
        is the same answer (an ASCII byte is never part of another character's encoding)."""
        assert all(needle.isascii() and needle for needle in needles)
        overlap = max(map(len, needles)) - 1
        before = b""  # the end of the pieces so far, where a needle may begin
        for chunk in self.utf8():
            seam = before + chunk[:overlap]
            if any(needle in chunk or needle in seam for needle in needles):
                return True
            before = chunk[-overlap:] if len(chunk) >= overlap else (before + chunk)[-overlap:]
        return False


def payload_fields(data: bytes | Pieces) -> dict[str, object]:
    """`raw` (or `raw_b64` when the bytes are not UTF-8) and `len` for a payload.

    Lossless by construction: `payload_bytes(payload_fields(b)) == b` for every `b`. A payload in
    `Pieces` gets a `PieceText` for its text, in the same field, checked for UTF-8 a piece at a time.
    """
    if isinstance(data, Pieces):
        return _pieces_fields(data)
    try:
        return {F_RAW: data.decode("utf-8"), F_LEN: len(data)}
    except UnicodeDecodeError:
        return {F_RAW_B64: base64.b64encode(data).decode("ascii"), F_LEN: len(data)}


def _pieces_fields(data: Pieces) -> dict[str, object]:
    decode = codecs.getincrementaldecoder("utf-8")().decode
    try:
        for chunk in data.chunks:
            decode(chunk)  # each piece's text is made and let go: the payload is never held as text
        decode(b"", True)  # a character cut short at the end
    except UnicodeDecodeError:
        return {F_RAW_B64: PieceText(data, b64=True), F_LEN: len(data)}
    return {F_RAW: PieceText(data, b64=False), F_LEN: len(data)}


def payload_bytes(record: dict[str, object]) -> bytes:
    """The exact bytes a record's payload fields stand for (inverse of `payload_fields`)."""
    raw = record.get(F_RAW)
    if isinstance(raw, str):
        return raw.encode("utf-8")
    b64 = record.get(F_RAW_B64)
    if isinstance(b64, str):
        return base64.b64decode(b64)
    return b""


SESSION_HEADER: Final = "mcp-session-id"
"""The header a Streamable HTTP session is named by (request and response)."""
_SESSION_HEADER_LENGTH: Final = len(SESSION_HEADER)
SESSION_QUERY: Final = re.compile(r"(?i)[?&]session_?id=([^&#\s]+)")
"""The session id in the HTTP+SSE transport's POST URL and `endpoint` event: `session_id` (the Python
SDK), `sessionId` (the TypeScript SDK's `SSEServerTransport`, Go servers). The analyzer reads it with
this pattern too (`analyzer.messages._SESSION_QUERY`)."""


def named_session(headers: object, url: object) -> str | None:
    """The session an HTTP record's `headers` and `url` name, as the analyzer reads it
    (`analyzer.messages`): the first `Mcp-Session-Id` field's value (Streamable HTTP), else the URL's
    `session_id` or `sessionId` (the HTTP+SSE transport's POSTs)."""
    for pair in headers if isinstance(headers, list) else ():
        if (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(name := pair[0], str)
            and len(name) == _SESSION_HEADER_LENGTH  # most names are told apart without lowering them
            and name.lower() == SESSION_HEADER
            and isinstance(pair[1], str)
        ):
            return pair[1].partition("\n")[0]
    found = SESSION_QUERY.search(url) if isinstance(url, str) else None
    return found.group(1) if found is not None else None


B64_SUFFIX: Final = "_b64"
"""`<field>_b64`: the exact bytes of a text field that were not UTF-8 (`raw_b64`, `url_b64`, `method_b64`)."""
_UNDECODED: Final = re.compile("[\udc80-\udcff]")
"""A byte that was not UTF-8, as `surrogateescape` decoding hands it over."""


def text_fields(field: str, text: str, wire: bytes | None = None) -> dict[str, str]:
    """`field` with `text`, and `<field>_b64` with the exact bytes when some of them were not UTF-8.

    mitmproxy decodes a request's method and target with `surrogateescape`: each byte that is not
    UTF-8 becomes a lone surrogate, which no capture line can hold. `field` then writes each such
    byte `%XX` (readable, and a URL stays a URL), and `<field>_b64` keeps the bytes (`wire`, else
    `text` encoded back) in base64, as `raw_b64` keeps a payload's. Lossless: the text alone where
    it is UTF-8, the base64 otherwise.
    """
    if text.isascii():  # the common case
        return {field: text}
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        exact = wire if wire is not None else text.encode("utf-8", "surrogateescape")
        return {field: utf8_text(text), field + B64_SUFFIX: base64.b64encode(exact).decode("ascii")}
    return {field: text}


def utf8_text(text: str) -> str:
    """`text` with each byte that was not UTF-8 (a lone surrogate, from `surrogateescape` decoding)
    written `%XX`, so that a record can hold it: for what the host hands over as text (a command
    line, a working directory) and is recorded to be read, not replayed."""
    return text if text.isascii() else _UNDECODED.sub(_percent, text)


_UNPRINTABLE: Final = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
"""Control characters (C0, DEL, C1) and lone surrogates."""


def printable_key(text: str) -> str:
    r"""`text` as a key every reader can encode and show: each control character, and each lone
    surrogate (a byte that was not UTF-8, as Python's `surrogateescape` decoding hands it over), is
    written `%XX` per byte, as a URL writes such bytes (`/mcp\xff\x1b` → `/mcp%FF%1B`).

    Server keys come from request targets and command lines, and go unescaped into every record (a
    lone surrogate makes a record unencodable), into Prometheus labels (which must be UTF-8) and onto
    terminals (where ESC sequences act). Not reversible (`%` stays `%`): a key names, it does not
    reproduce; records that must keep the bytes carry them in base64.
    """
    if text.isprintable():  # the common case; False for every character the pattern matches
        return text
    return _UNPRINTABLE.sub(_percent, text)


def _percent(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    data = bytes([code - 0xDC00]) if 0xDC80 <= code <= 0xDCFF else char.encode("utf-8", "surrogatepass")
    return "".join(f"%{byte:02X}" for byte in data)


_MAJOR: Final = re.compile(r"[0-9]{1,9}", re.ASCII)
"""A major version: ASCII digits only (`str.isdigit` also takes `²`, which `int` refuses, and `١`,
which it reads as 1), and few of them, so a header cannot make `int` refuse or work hard."""


def parse_format_id(value: object) -> int | None:
    """The major version named by a header's `format` field, or None when it is not erascope's (or
    names no major this module can read: not ASCII digits, or more than nine of them)."""
    if not isinstance(value, str) or not value.startswith(FORMAT_NAME + "/"):
        return None
    major = value.removeprefix(FORMAT_NAME + "/").split(".", 1)[0]
    return int(major) if _MAJOR.fullmatch(major) else None


def shown_format(value: str) -> str:
    """A header's `format` for a message: quoted, and cut, since the value is the capture's to choose."""
    return repr(value) if len(value) <= 40 else repr(value[:40]) + f"… ({len(value)} characters)"


HEADER_START: Final = b'{"' + F_TYPE.encode() + b'":"' + HEADER.encode() + b'"'
"""How every header line a recorder writes begins: the type is its first key."""


def cut_header(first: bytes) -> bool:
    """The first line is what a recorder that stopped while starting a part leaves: nothing, or the
    start of its header without the newline. Parts are opened before their header is written (so the
    previous part's `next` never names a missing file), and a crash or power loss can fall between."""
    if first.endswith(b"\n"):
        return False
    return first.startswith(HEADER_START) or HEADER_START.startswith(first)


DECIDING: Final = (F_TYPE, "format", "part")
"""The keys that decide what a line is: a record's type, a header's format and `part` (whether a
header joined after another capture goes on with it)."""
_DECIDING_AS_WRITTEN: Final = tuple(b'"%s"' % key.encode() for key in DECIDING)


def read_record(line: bytes) -> dict[str, Any] | None:
    """The JSON object on `line`, its `DECIDING` keys read as the analyzer's NDJSON reader reads them
    (the first of a key repeated); None when it is no object.

    orjson keeps the last of a key repeated: `{"type":"frame","type":"header",...}` would be a header
    to one reading and a frame to the reader that counts it. A recorder writes each key once, so only
    a line written otherwise pays for a second reading: one whose bytes repeat such a key, or hold an
    escape (a key spelled `"typ\\u0065"` is `type` to every parser). The other keys keep orjson's
    reading: a hash chain's seal is the line's last `chain` (`addon.chain.split` takes it from the
    line's end), and a line that repeats a key fails its digest whichever value is read.
    """
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(record, dict):
        return None
    if b"\\" not in line and all(line.count(key) < 2 for key in _DECIDING_AS_WRITTEN):
        return record
    try:
        first = json.loads(line, object_pairs_hook=_first_of_each)
    except (ValueError, RecursionError):  # deeper than Python reads: no record whose type can be told
        return None
    return record | {key: first[key] for key in DECIDING if key in first}


def _first_of_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out
