"""Capture records → the messages frame (`analyzer.schema.MESSAGES_SCHEMA`), both transports alike.

Only payloads whose `raw` starts with `{` are looked into, and only through
`str.json_path_match`, which returns null for anything it cannot read instead of raising (peers
send `error.data` as a string one time and an object the next, which makes `str.json_decode` with
a fixed dtype fail the whole column). The deeper paths (envelope, versions, error data) are read
only on the rows that can carry them.

JSON-RPC ids are kept as JSON text so that `1` and `"1"` stay distinct: `json_path_match` returns
both as `1`, so a number-looking id is taken as a string only when the payload writes its one `id`
key with a quoted value (`"id":"1"`, `"id" : "1"`, `"id":"\\u0031"`); a payload writing several (an id
nested in the params or result) is parsed to read its own top-level `id`. An array, an object or a
boolean is no id (JSON-RPC allows a string, a number or null): a message with one is `invalid`, as a
peer's parser refuses it (garbage from a server), told from a string of its text (`"[1]"`) the same way.
So is a method that is no string (a number, a boolean, an array, an object), by how the payload writes
its own `method` key, and an error or a result that is no object (a string's content may be an
object's text): MCP's results are objects, and both SDKs refuse a line with another. A payload
that does not name `"jsonrpc": "2.0"` is no message either, whatever else it holds.

A payload's lone surrogate escapes are read as their text (`lone_surrogates_as_text`), as
`analyzer.load` reads a record's: its parsers read `"c\\ud800"` as `c\\x00`, or not at all, and
`"c\\udc00"` or `"c\\ud800\\u0041"` not at all. Its `id`, `method` or `params` written twice reads
as the first for the id, method and envelope, as the fast reading (simd-json) reads them:
`json_path_match` reads the last, so the robust reading reads those from the payload without the
later copy (`_first_members`). A member name written with escapes (`"\\u006dethod"`) is the name to
every parser: the payload's names are written plainly (`plain_names`) before anything looks for them.
"""

from __future__ import annotations

import functools
import json
import math
import re
from decimal import Decimal
from typing import Any, Final

import orjson
import polars as pl

from addon import format as fmt
from addon.jsontext import BEYOND_DOUBLE, ESCAPE, MAX_DEPTH, NUMBER_TEXT, exact_number_text, refuse_constant
from analyzer.schema import MESSAGES_SCHEMA, RECORD_SCHEMA

MESSAGE_RECORD_TYPES: Final = (
    fmt.FRAME,
    fmt.LIFECYCLE,
    fmt.HTTP_REQUEST,
    fmt.HTTP_RESPONSE,
    fmt.SSE_EVENT,
    fmt.SSE_END,
    fmt.HTTP_ERROR,
)
"""Record types that become message rows (headers, stderr and capture-error are only counted)."""
HTTP_RECORD_TYPES: Final = (fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE, fmt.SSE_EVENT, fmt.SSE_END, fmt.HTTP_ERROR)
"""The message record types of the HTTP transports: a reading with `http=False` is right only on
records without them (see `messages_from_records`)."""
RARE_READS: Final = "_rare_reads"
"""The column a reading with `rare=False` adds: whether the row's payload needs the rare reading (a version
array holding an object, an array or an escape; a number-looking id quoted where the payload writes
several ids), which the caller then reads again with `rare=True` (dropped by the caller)."""
DEEP_READS: Final = "_deep_reads"
"""The column a reading without `deep` adds: whether the row's payload may nest too deep for
`json_path_match` (past 128 levels: fields it has were not read, and it holds more than `_DEEP_OPENERS`
`{` and `[`), which the caller then reads again with `deep=True` (dropped by the caller)."""
HTTP_READS: Final = "_http_reads"
"""The column a reading with `http=False` adds: the fields only the HTTP expressions read whose
type the NDJSON reader checks, read so that both readings refuse the same lines (dropped by the caller)."""

META_PV: Final = "io.modelcontextprotocol/protocolVersion"
META_CAPS: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT: Final = "io.modelcontextprotocol/clientInfo"
META_SERVER: Final = "io.modelcontextprotocol/serverInfo"

MEMBER_SLOTS: Final = 1 << 20
"""A message row's `seq` is its record's `seq` × `MEMBER_SLOTS` + its member index: the members of a
JSON-RPC batch (one record) are messages of their own, keyed apart by (capture, seq) and in the
record's place in the order; a record that is no batch is member 0. Members past this many in one
batch share the last index (a batch that large exceeds the recorder's default body bound)."""
EXTRACTION_VERSION: Final = 35
"""What archives' rows were derived by (`analyzer.archive.same_extraction`): raise it with any change
that gives a record other values in the messages rows, so that archives written before are refused
until `compact` converts their captures again. 2: JSON that is no JSON-RPC message on an HTTP
3xx/4xx/5xx is `kind` error (was invalid). 3: an answer the recorder could not decode has the `event`
`UNDECODABLE_BODY` or `UNDECODABLE_STREAM` (was `http-<status>`, `sse-end:<how>`). 4: a lone surrogate
escape in a record's string reads as its text, `\\ud800` (was U+0000; `analyzer.load`). 5: so does one
in a payload (was U+0000, or no message on the robust reading), and the robust reading reads an id
again from its payload where `json_path_match` writes it otherwise (a string `"1.0"` read as the
number `1`, a number past 2**53 a unit off). 6: a top-level key a payload writes twice reads as its
first on both readings (the robust one read the last `id`, `method` and `params._meta`, and both the
last `id`'s type: `"id":"1","id":1` read as the number `1`). 7: a low surrogate escape alone
(`"\\udc00"`) or a high one before an escape that is not a low one (`"\\ud800\\u0041"`) reads as its
text too, in a record (was a malformed line) and in a payload (was no message on either reading).
8: an SSE event without data (a resumable stream's priming event) is no message (was an invalid one,
garbage to the request whose stream it was on). 9: a payload holding a number beyond a double
(`1e400`) is read, the number as a string of its text (was no message), and an integer id of forty
digits or more is read with every digit (both lines of its exchange were malformed). 10: the HTTP+SSE
transport's session named `?sessionId=` (the TypeScript SDK) is read as `?session_id=` is (was none).
11: a number-looking string id written otherwise than `"id":"1"` or `"id": "1"` (`"id" : "1"`, a tab, an
escaped digit) is a string (was the number); a number id beside a nested string id of its digits is a
number however spaced (was the string). 12: an error code written as an integral float (`-32022.0`) is
its integer (was none). 13: a stdio server the tee could not start (`spawn-failed`) has why as its
`error_message` (was none). 14: a negative zero id written as a fraction or with an exponent (`-0.0`,
`-0e0`) is the number `0` (was `-0`, which no answer `0` paired with). 15: an error code written as a
string reads as a code only when the string is an integer's JSON text (`"-32022"`; was also `"+5"`,
`"-32022."`, as a float parser reads them). 16: a failed HAR entry's error is at its start and its
`time` when that is later than when its response would have begun (was then; `analyzer.foreign`).
17: a file named otherwise than a part whose header is of a rotated part (a renamed copy) is of the
capture of the part its header names as the previous one (was its name's; `analyzer.load.capture_id`).
18: a failed HAR entry's error named by Chrome (`net::ERR_TIMED_OUT`, `…CONNECTION_REFUSED`, `…RESET`)
is of that kind (was `other`; `addon.http_recorder.classify_error`). 19: a payload whose member names
are written with escapes (`"\\u0072esult"`) is read by its names (was no message, or a message without
the fields so named; `plain_names`). 20: the versions a DiscoverResult or a -32022's `data.supported`
lists are the array's own strings, as a parser reads them (were also the strings inside a member
object or array, and escapes as written; `_string_list`). 21: a HAR entry whose `time` is no number
(text, `true`, an object) is read by its timings (was not read; `analyzer.foreign`). 22: a file named
as a recorder's part with text put before `.jsonl` (`x.000 copy.jsonl`) whose header is of the part its
name numbers is of the recorder's capture (was its name's; `analyzer.load.capture_id`). 23: a payload
nested past 128 levels is read by its fields (was read as none: a DiscoverResult without versions, an
error without a code; `shallow_payload`). 24: a file named as a copy of part 0 whose header is of
another run (its `started` or `recorder_pid` not the name's) is a capture of its own (was the name's
capture's; `analyzer.load.capture_id`). 25: a HAR entry with an optional field of a type HAR does not
give it (a `serverIPAddress` object, a header of a null value, `timings` that are a list, no
`httpVersion`) is read without that field, and a status written as text (`"200"`) as that number (was
not read; `analyzer.foreign._mended`). 26: a message whose id is an array, an object or a boolean is
`invalid`, without an id or error code (was a request, response or error whose id was the string of
that text: `[1]` answered `"[1]"`). 27: a number id beyond a double's range is keyed by its value, as
`addon.jsontext.exact_number_text` writes it (`1E400`, `10e399` and `1e400` one id; was its text as written).
28: a message whose method is a number, a boolean, an array or an object is `invalid` (was a request or
notification of a method of that text). 29: a message whose error is a string, a number, a boolean or
an array is `invalid`, or a response beside a result (was an error, of the code a string holding an
error object's text wrote: `"error":"{\\"code\\":-32022}"` read as a -32022). 30: a message whose
own result is no object (a number, a string, an array, a boolean, null) or that has none (`"result"`
a member of another member) is `invalid` (was a response: a string holding a DiscoverResult's text
listed that result's versions). 31: a payload without `"jsonrpc": "2.0"` (none, `"1.0"`, the number
`2.0`) is `invalid` (was read by its other members). 32: a message whose error object has no integer
code (none, null, `1.5`, `"x"`) or no string message (none, null, `5`) is `invalid`, or a response
beside a result, without an error code (was an error: a -32022 without its message a refusal). 33: on
the robust reading, a payload that writes its version as the number `2.0` and quotes a `"2.0"` elsewhere
(`"params":{"jsonrpc":"2.0"}`, a listed version) is `invalid` (was read by its other members). 34: a
result without an array `supportedVersions` and an object `capabilities` (no DiscoverResult) has no
`supported_versions` (was its listed strings, and a string holding an array's text read as that array).
35: a result whose `supportedVersions` holds anything but strings (`[1]`, `["2026-07-28",null]`) is no
DiscoverResult either (was one, of the strings it listed)."""
UNDECODABLE_BODY: Final = "http-undecodable"
"""The `event` of an HTTP response whose body the recorder kept as it came (`undecodable`)."""
UNDECODABLE_STREAM: Final = "sse-end:undecodable"
"""The `event` of the end of an event stream the recorder could not decode (`undecodable`)."""
_PAYLOAD_TYPES: Final = (fmt.FRAME, fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE, fmt.SSE_EVENT)
_TOKENS: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},]')
_JSON_SPACE: Final = " \t\r\n"

_NUMBER: Final = f"^{NUMBER_TEXT}$"
_INTEGER: Final = r"^(0|-?[1-9][0-9]*)$"
_WS: Final = r"[ \t\n\r]*"
"""JSON's whitespace, as much as is written. The patterns searched in payloads name JSON's own
characters (`[0-9]`, not `\\d`): Unicode's classes made compiling them cost up to a hundred million
instructions on a piece, and a digit of another script is none of JSON's."""
_HIGH: Final = r"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW: Final = r"\\u[dD][c-fC-F]"
_LONE_HIGH: Final = _HIGH + r"(?:[^\\]|\\[^u]|\\u[^dD]|\\u[dD][^c-fC-F]|$)|\\\\u[dD][89abAB]"
"""A high surrogate's escape no low one's follows in a payload, or its text after an escaped backslash
(a low one's escape after that text is alone). With a low one's escape no high one's precedes (more
`_LOW` than pairs), the payloads `lone_surrogates_as_text` is asked about (a pair, an escaped emoji,
is not)."""
_OPENER: Final = r"[\[{]"
_DEEP_OPENERS: Final = 100
"""More `_OPENER`s than this in a payload whose fields `json_path_match` (serde_json, 128 levels at
most) did not read: it may nest too deep for it. Fewer cannot."""
_SHALLOW_DEPTH: Final = 64
"""How deep `shallow_payload` keeps a payload's values: deeper than any field read (five levels),
shallower than `json_path_match` reads."""
_QUOTED: Final = r'"((?:[^"\\]|\\.)*)"'
_PLAIN_STRINGS: Final = r'^\[(?:"[^"\\]*"(?:,"[^"\\]*")*)?\]$'
"""A JSON array of strings without escapes, as `json_path_match` writes one (no whitespace)."""
_ESCAPED_NAME: Final = r'\\u[^"]*"' + _WS + ":"
"""A `\\u` escape in what may be a member name (a string followed by `:`): `plain_names` is asked about it."""
_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"')
_BEFORE_VALUE: Final = re.compile(r"[ \t\r\n]*:")


def _first_of_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members as the fast reading (simd-json) reads them: the first of a key written twice,
    as the format has readers do (the standard library and orjson keep the last)."""
    members: dict[str, Any] = {}
    for key, value in pairs:
        members.setdefault(key, value)
    return members


def own_member_is(payload: str, key: str, kind: type, *, first: bool = True) -> bool:
    """Whether the payload's own member `key` (not one nested in its params, result or data) is a
    JSON value of `kind` (`str`, `dict`, `list`): its first when written twice, as the fast reading
    reads it, or with `first=False` its last, the one `json_path_match` reads."""
    return isinstance(_own_member(payload, key, first=first), kind)


def _own_member(payload: str, key: str, *, first: bool = True) -> Any:
    """The payload's own member `key` (its first when written twice, or with `first=False` its last),
    or None when the payload is no JSON object."""
    try:
        obj = json.loads(payload, object_pairs_hook=_first_of_each if first else None, parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        return None
    return obj.get(key) if isinstance(obj, dict) else None


class _Written(str):
    """A number's text as a payload writes it (`_written_id`)."""


def _written_id(payload: str) -> str | None:
    """The payload's own `id` as it is written when it is a number (`-0`, `1.50`, `1e2`, every digit
    of `9007199254740993.0`), or None when it is not a number."""
    try:
        obj = json.loads(payload, object_pairs_hook=_first_of_each, parse_int=_Written, parse_float=_Written)
    except (ValueError, RecursionError):
        return None
    value = obj.get("id") if isinstance(obj, dict) else None
    return str(value) if isinstance(value, _Written) else None


_BEYOND_DOUBLE: Final = BEYOND_DOUBLE.pattern
"""Where a payload may hold a number beyond a double: serde_json, which `json_path_match` parses with,
then reads none of its fields (a payload that matches but holds none is read as it is)."""
_NO_ID: Final = r"^(?:[\[{]|true$|false$)"
"""An id as `json_path_match` writes it that is no id when the payload does not quote it: an array, an
object, `true`, `false`."""
_NO_METHOD: Final = f"{_NO_ID}|{_NUMBER}"
"""A method as the readings write it that is no method when the payload does not quote it: an array,
an object, a boolean, a number."""


def _exact_beyond_double(text: str) -> str | None:
    """The number id written `text` as `exact_number_text` keys it when it is beyond a double's range
    (`1E400` and `10e399` as `1` and 400 zeros), else None (read as the double it is)."""
    try:
        value = Decimal(text)
    except ArithmeticError:
        return None
    return None if math.isfinite(float(value)) else exact_number_text(value)


_STRING_OR_NUMBER: Final = re.compile(r'"(?:[^"\\]|\\.)*"|' + NUMBER_TEXT)


def _numbers_in_double_range(payload: str) -> str | None:
    """The payload with every number beyond a double's range written as a string of its text
    (`1e400` as `"1e400"`), each other character as written; None when it holds none.

    What the robust reading reads such a payload as: JSON bounds no number, and the SDKs read one
    (Python exactly, JavaScript as `Infinity`), where serde_json refuses the whole payload. An id so
    written is still read as the number it is (a payload quoting no id is read so, see
    `messages_from_records`), with every digit."""
    out, done = [], 0
    for m in _STRING_OR_NUMBER.finditer(payload):
        text = m.group()
        if text[0] != '"' and math.isinf(float(text)):
            out += [payload[done : m.start()], '"', text, '"']
            done = m.end()
    if not out:
        return None
    out.append(payload[done:])
    return "".join(out)


def _first_members(payload: str) -> str | None:
    """The payload (a JSON object) without the later of its top-level members whose key it writes
    twice, each other character as written: what `json_path_match`, which reads the last of such a
    key, is given to read the first. None when it writes no key twice, or is no JSON (kept so)."""
    try:
        orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    seen: set[str] = set()
    dropped: list[tuple[int, int]] = []
    depth, key_next, comma, dropping = 0, False, 0, False
    for token in _TOKENS.finditer(payload):
        mark = token.group()
        if mark[0] == '"':
            if depth == 1 and key_next:
                key_next = False
                key = json.loads(mark)  # as written: `"\u0069d"` is `id` too
                dropping = key in seen  # never the first member: a comma is before it
                seen.add(key)
            continue
        if depth == 1 and mark in ",}" and dropping:
            dropped.append((comma, token.start()))
            dropping = False
        if mark in "[{":
            depth += 1
            key_next = depth == 1
        elif mark in "]}":
            depth -= 1
            if depth == 0:
                break
        elif depth == 1:
            comma, key_next = token.start(), True
    if not dropped:
        return None
    kept, at = [], 0
    for start, end in dropped:
        kept.append(payload[at:start])
        at = end
    return "".join(kept) + payload[at:]


def plain_names(payload: str) -> str:
    r"""`payload` (JSON) with every member name that holds an escape written plainly, as a parser reads
    it (`"\u006dethod"` → `"method"`; a quote, a backslash or a control character stays escaped); every
    other character as written, so ids, numbers and values read as before."""

    def plain(token: re.Match[str]) -> str:
        text = token.group()
        if "\\" not in text or not _BEFORE_VALUE.match(payload, token.end()):
            return text
        try:
            return json.dumps(json.loads(text), ensure_ascii=False)
        except ValueError:  # an escape no parser reads: the name stays as written
            return text

    return _STRING.sub(plain, payload)


def shallow_payload(payload: str) -> str | None:
    """`payload` (JSON) with each value nested deeper than `_SHALLOW_DEPTH` levels written as an empty one
    of its kind (`{}`, `[]`), every other character as written: what `json_path_match`, which reads
    nothing of a payload nested past 128 levels, is given to read. None when nothing nests that deep,
    or the payload is no JSON orjson reads (nor Python's `json`, for a number past a double's range),
    or nests past `MAX_DEPTH` levels, as orjson refuses (and the reader's `json_decode` raises on)."""
    try:
        orjson.loads(payload)
    except orjson.JSONDecodeError:
        try:  # orjson refuses a number past a double's range, which the fields read may hold
            json.loads(payload, parse_constant=refuse_constant)
        except (ValueError, RecursionError):
            return None
    kept: list[str] = []
    depth, at = 0, 0
    for token in _TOKENS.finditer(payload):
        mark = token.group()
        if mark in ("[", "{"):
            depth += 1
            if depth > MAX_DEPTH:
                return None
            if depth == _SHALLOW_DEPTH + 1:
                kept += (payload[at : token.start()], mark + ("}" if mark == "{" else "]"))
        elif mark in ("]", "}"):
            if depth == _SHALLOW_DEPTH + 1:
                at = token.end()
            depth -= 1
    if not kept:
        return None
    kept.append(payload[at:])
    return "".join(kept)


def lone_surrogates_as_text(text: str) -> str:
    r"""`text` (JSON) with every lone surrogate escape written as the escape's text: `"\ud800"` becomes
    `"\\ud800"`, in small letters (`\uD800` is the same JSON string); so does a low one alone
    (`"\udc00"`) and a high one before an escape that is not a low one (`"\ud800\u0041"` becomes
    `"\\ud800\u0041"`); a pair (`"\ud83d\ude00"`, an escaped emoji) stays. `text` itself when it
    holds none.

    Of a capture's line before the reader reads it (`analyzer.load`), and of a payload before its
    fields are read: the reader reads a lone high surrogate escape as U+0000, refuses the others, and
    `json_path_match` reads none, so names and ids that differ by one would read as one, or as nothing.
    """
    lone = _lone_escapes(text)
    if not lone:
        return text
    parts, done = [], 0
    for at in lone:
        parts += [text[done:at], "\\\\u", text[at + 2 : at + 6].lower()]
        done = at + 6
    parts.append(text[done:])
    return "".join(parts)


def _lone_escapes(text: str) -> list[int]:
    """Where each lone surrogate escape of `text` starts: a high surrogate's no low one's follows at
    once, a low one's no high one's precedes so (every escape is found from the text's start, so one
    after an escaped backslash is told from that text)."""
    surrogates = []
    for m in ESCAPE.finditer(text):
        code = m.group(1)
        if code is not None and 0xD800 <= (value := int(code, 16)) < 0xE000:
            surrogates.append((m.start(), value))
    lone, n = [], 0
    while n < len(surrogates):
        at, value = surrogates[n]
        if value < 0xDC00 and n + 1 < len(surrogates):
            after, low = surrogates[n + 1]
            if after == at + 6 and low >= 0xDC00:
                n += 2  # a pair: one character
                continue
        lone.append(at)
        n += 1
    return lone


def batch_members(text: str) -> list[str] | None:
    """The members of a JSON-RPC batch, each exactly as its text stands in `text` (ids of any size
    and number forms survive), or None when `text` is not one: not a JSON array, empty (`[]` is an
    invalid request, one message), or not valid JSON."""
    body = text.strip(_JSON_SPACE)
    if not body.startswith("["):
        return None
    try:
        value = json.loads(body)  # the standard library's: integers of any size
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, list) or not value:
        return None
    members: list[str] = []
    depth, start = 0, 1
    for token in _TOKENS.finditer(body):
        mark = token.group()
        if mark[0] == '"':
            continue
        if mark in "[{":
            depth += 1
        elif mark in "]}":
            depth -= 1
            if depth == 0:
                members.append(body[start : token.start()].strip(_JSON_SPACE))
        elif depth == 1:
            members.append(body[start : token.start()].strip(_JSON_SPACE))
            start = token.end()
    return members


def is_batch() -> pl.Expr:
    """Whether a record's payload is a JSON array (a batch, if it parses: `batch_members`)."""
    return (pl.col("type").is_in(_PAYLOAD_TYPES) & pl.col("raw").str.contains(r"^[ \t\r\n]*\[")).fill_null(False)


def _with_members(records: pl.LazyFrame) -> pl.LazyFrame:
    """A row per batch member (its text as `raw`, its index as `_member`), a row per other record
    (`_member` 0); `_batch` says which records were batches."""
    members = pl.when(is_batch()).then(pl.col("raw")).map_elements(batch_members, return_dtype=pl.List(pl.String()))
    split = pl.col("_members").is_not_null()
    return (
        records.with_columns(_members=members)
        .with_columns(
            raw=pl.when(split).then(pl.col("_members")).otherwise(pl.concat_list(pl.col("raw"))),
            _member=pl.int_ranges(0, pl.col("_members").list.len().fill_null(1)),
            _batch=split,
        )
        .explode("raw", "_member")
        .with_columns(pl.col("_member").clip(upper_bound=MEMBER_SLOTS - 1))
        .drop("_members")
    )


def spread_batch_answers(rows: pl.DataFrame) -> pl.DataFrame:
    """One HTTP error to a whole batch (not an array, naming none of its members' ids: the 400
    refusal of a server that takes no batches, id `"server-error"` or null) answers every request of
    the batch: a copy of it per request member after the first, each keyed as that member (`seq` +
    its index), right after it. An answer naming a member's id answers that member alone.

    `rows` are message rows of `messages_from_records(batches=True)` with its `_batch` and `_member`
    columns; pairing then gives each copy its member (`pair_responses`).
    """
    members = (
        rows.lazy()
        .filter((pl.col("record_type") == fmt.HTTP_REQUEST) & pl.col("_batch") & (pl.col("kind") == "request"))
        .group_by("capture", "flow")
        .agg(_m=pl.col("_member").sort().slice(1), _ids=pl.col("id"))
        .collect()
    )
    if members.is_empty():
        return rows
    rows = rows.with_row_index("_r")
    whole = (pl.col("record_type") == fmt.HTTP_RESPONSE) & ~pl.col("_batch") & (pl.col("kind") == "error")
    copies = (
        rows.filter(whole)
        .join(members, on=["capture", "flow"], how="inner")
        .filter(~pl.col("_ids").list.contains(pl.col("id")).fill_null(False))
        .drop("_ids")
        .explode("_m")
        .filter(pl.col("_m").is_not_null())
        .with_columns(seq=pl.col("seq") + pl.col("_m"), _member=pl.col("_m").cast(rows.schema["_member"]))
        .drop("_m")
    )
    if copies.is_empty():
        return rows.drop("_r")
    return pl.concat([rows, copies.select(rows.columns)]).sort("_r", "seq", maintain_order=True).drop("_r")


def _path(expr: pl.Expr, path: str) -> pl.Expr:
    return expr.str.json_path_match(path)


def _string_list(json_array_text: pl.Expr, rare: bool) -> pl.Expr:
    """The string members of a JSON array given as text (other members are ignored, never fatal), as a
    parser reads them. An array holding no object, array or escape is read by a search of its strings;
    another (`_odd_array`) in Python with `rare`, so that a string inside a member object
    (`[{"version": "…"}]`) is no member and `"\\u002d"` is `-`."""
    strings = json_array_text.str.extract_all(_QUOTED).list.eval(pl.element().str.slice(1).str.head(-1))
    if not rare:  # an odd array makes the piece be read again with `rare` (`RARE_READS`)
        return pl.when(json_array_text.str.starts_with("[")).then(strings)
    odd = _odd_array(json_array_text)
    other = pl.when(odd).then(json_array_text).map_elements(_strings_of, pl.List(pl.String()))
    return pl.when(json_array_text.str.starts_with("[") & ~odd).then(strings).otherwise(other)


def _strings_alone(json_array_text: pl.Expr, rare: bool) -> pl.Expr:
    """Whether a JSON array given as text (as `json_path_match` writes one) holds strings alone, or
    nothing. An array holding no object, array or escape is told by its text; another (`_odd_array`)
    in Python with `rare` (without it, such an array makes the piece be read again with `rare`)."""
    plain = json_array_text.str.contains(_PLAIN_STRINGS)
    if not rare:
        return plain
    odd = _odd_array(json_array_text)
    other = pl.when(odd).then(json_array_text).map_elements(_only_strings, pl.Boolean())
    return pl.when(odd).then(other.fill_null(False)).otherwise(plain)


def _only_strings(array_text: str) -> bool:
    """Whether the JSON array `array_text` holds strings alone."""
    try:
        value = json.loads(array_text, parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _odd_array(json_array_text: pl.Expr) -> pl.Expr:
    """A JSON array (as text) that holds an object, an array or an escape: its strings are not all found
    by a search for quoted text."""
    return json_array_text.str.starts_with("[") & json_array_text.str.slice(1).str.contains(r"[\[{\\]")


def _strings_of(array_text: str) -> list[str] | None:
    """The string members of the JSON array `array_text`; None when it is no JSON array."""
    try:
        value = json.loads(array_text, parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        return None
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else None


def _headers_text(headers: pl.Expr) -> pl.Expr:
    r"""All headers of a record as one `name\x00value` line each, names lowercased.

    One `list.eval` per record; each wanted header is then a cheap regex on this short text
    (seven `list.eval` lookups cost about a third of a file's whole extraction).
    """
    return headers.list.eval(
        pl.element().list.get(0, null_on_oob=True).str.to_lowercase()
        + pl.lit("\x00")
        + pl.element().list.get(1, null_on_oob=True)
    ).list.join("\n")


def _header(text: pl.Expr, name: str, *, as_json: bool = False) -> pl.Expr:
    """First value of header `name` (lowercase) from `_headers_text`, or with `as_json` from the
    headers as the NDJSON reader gives them for a `String` dtype (see `HEADERS_AS_TEXT`)."""
    if as_json:
        return text.str.extract(f'[\\[ ]\\[(?i:"{re.escape(name)}"), "([^"\\\\]*)"\\]', 1)
    return text.str.extract(f"(?m)^{re.escape(name)}\x00([^\n]*)", 1)


HEADERS_AS_TEXT: Final = r'^\[(?:\["[^"\\]*", "[^"\\]*"\](?:, \["[^"\\]*", "[^"\\]*"\])*)?\]$'
"""The shape of `headers` read with a `String` dtype when reading it as text is exact.

Polars' NDJSON reader turns a list it is asked to read as `String` into JSON-like text
(`[["name", "value"], ...]`), which costs half the time of building the lists. It writes a quote
in a value as `\"` but leaves a backslash or a tab as it is, so text with a backslash cannot be read
back exactly: only headers of this shape (pairs of strings without a backslash or a quote) are read
from the text; a piece with any other `headers` is read with the list dtype (`analyzer.load`).
"""


_CLIENT_INFO: Final = pl.Struct({"name": pl.String(), "version": pl.String()})
_FIELDS: Final = pl.Struct(  # what the fast reading decodes of every JSON payload
    {
        "jsonrpc": pl.String(),  # a number decodes as its text without a fraction (`2.0` as `2`)
        "id": pl.String(),
        "method": pl.String(),
        "params": pl.Struct(
            {
                "_meta": pl.Struct(
                    {
                        META_PV: pl.String(),
                        # only its presence is read; any object decodes, a non-object raises
                        META_CAPS: pl.Struct({"_": pl.String()}),
                        META_CLIENT: _CLIENT_INFO,
                    }
                )
            }
        ),
        # only whether it is an object is read: any object decodes, null as none, another value raises
        "result": pl.Struct({"_": pl.String()}),
    }
)


_TIMES: Final = (-62_135_596_800.0, 253_402_300_800.0)
"""The `ts` a message row keeps: from year 1 to year 9999, the dates reports can write. Any other
(a capture's field is any number) is null, like a missing one."""


def in_times(name: str) -> pl.Expr:
    """True where column `name` is null or a time a message row keeps (`bounded_time`)."""
    return pl.col(name).is_null() | pl.col(name).is_between(*_TIMES, closed="left")


def bounded_time(name: str = "ts") -> pl.Expr:
    """Column `name` where it lies in `_TIMES`, else null: a capture's `ts` as a message row keeps it
    (the archive reader bounds its rows' the same way, so a part says no more than its capture)."""
    return pl.when(pl.col(name).is_between(*_TIMES, closed="left")).then(pl.col(name)).alias(name)


_SESSION_QUERY: Final = fmt.SESSION_QUERY.pattern
"""The session id in the HTTP+SSE transport's POST URL (`/messages/?session_id=…`, `?sessionId=…`), as
the recorders' live counters and the HAR reader find it (`addon.format.SESSION_QUERY`)."""


def messages_from_records(
    records: pl.LazyFrame,
    *,
    file: str | pl.Expr,
    capture: str | pl.Expr,
    transport: str | pl.Expr | None,
    robust: bool = False,
    all_records: bool = False,
    categorical: bool = False,
    flow_ids: bool = False,
    extra: dict[str, pl.Expr] | None = None,
    batches: bool = False,
    http: bool = True,
    rare: bool = True,
    deep: bool = False,
) -> pl.LazyFrame:
    """The messages rows of one capture file's records (a `line` column plus `RECORD_SCHEMA`).

    By default `id`, `method` and the `_meta` envelope's fields come from one `json_decode`
    (`_FIELDS`: one parse instead of six). It raises on an id or method that is an object or array
    and on an envelope of another shape (`params` an array, `_meta` or `clientCapabilities` not an
    object, a version or client name that is an object); the caller then collects again with
    `robust=True`, which reads each with `json_path_match` (never raises). Both give the same values,
    numbers where strings belong too (an id `1.0` reads as `1`, `1e2` as `100`, `-0` as `0`, an
    integer beyond 64 bits with every digit).

    `records` may hold `headers` as lists (`RECORD_SCHEMA`) or as the text the NDJSON reader makes
    of them for a `String` dtype (see `HEADERS_AS_TEXT`).

    `all_records=True` keeps a row for every record (non-message ones too), so the loader can count
    records in the same single pass over the file; it then keeps only the rows of
    `MESSAGE_RECORD_TYPES`. `categorical=True` gives the in-memory dtypes (see `as_categoricals`):
    `CATEGORICAL_COLUMNS` as `pl.Categorical` and `flow` as its `flow_key`, unless `flow_ids` (the
    ids as text, for archives). `extra` adds columns computed from the records (e.g. the raw payload).
    `file`, `capture` and `transport` are the file's, or expressions giving each row's (records of
    many small files read as one text).

    `batches=True` splits JSON-RPC batches into a row per member (`MEMBER_SLOTS`; `extra` can then
    read `_batch` and `_member`); without it a batch stays one (invalid) row. Splitting costs a pass
    over every row, so the loader asks for it only for records that hold a batch (`is_batch`).

    `http=False` leaves out the expressions only HTTP and SSE records need (headers, session, user
    agent, URL, the HTTP branches of kind, event, direction and error message; 8 % of a stdio
    piece's instructions): on records of every other type its rows are the same, on records of
    `HTTP_RECORD_TYPES` wrong, so the caller checks the types it read and reads again with
    `http=True` when any is there (`analyzer.load`). It adds the column `HTTP_READS`.

    The fields are read from each payload with its lone surrogate escapes as their text
    (`lone_surrogates_as_text`), its member names written plainly (`plain_names`) and its version
    arrays read as a parser reads them (`_string_list`), in Python, on the rare payloads that need it;
    `raw` itself stays as written. `rare=False` leaves that out (a function called back from the plan
    costs a piece a few percent even when it is called on no row): it says no payload holds a `\\u`
    escape (as `analyzer.load` knows of a piece by its search for them), and it adds the column
    `RARE_READS`, true on a row that needs the rare reading all the same; the caller reads again
    with `rare=True` when any is.

    A payload nested past 128 levels is read by `json_path_match` as nothing: with `deep=True` (which
    includes `rare`) such payloads are read with their values past `_SHALLOW_DEPTH` levels left empty
    (`shallow_payload`, in Python). Without it (a search of every payload for that costs a piece about a
    percent) the reading adds the column `DEEP_READS`, true on a row whose fields were not read and that
    may nest so deep; the caller reads again with `deep=True` when any is.
    """
    as_json = records.collect_schema().get("headers") == pl.String()
    steps, columns = _plan(
        robust=robust,
        as_json=as_json,
        categorical=categorical,
        flow_ids=flow_ids,
        http=http,
        rare=rare or deep,
        deep=deep,
    )
    lf = records if all_records else records.filter(pl.col("type").is_in(MESSAGE_RECORD_TYPES))
    lf = _with_members(lf) if batches else lf.with_columns(_member=pl.lit(0, pl.Int64))
    for step in steps:
        lf = lf.with_columns(**step)
    literal = pl.Categorical() if categorical else pl.String()
    given = {"file": file, "transport": transport, "capture": capture}
    exprs = {
        name: expr if expr is not None else _label(given[name]).cast(literal) for name, expr in columns.items()
    }
    return lf.select(**exprs, **(extra or {}))


def _label(value: str | pl.Expr | None) -> pl.Expr:
    return value if isinstance(value, pl.Expr) else pl.lit(value, pl.String)


@functools.cache
def _plan(
    *,
    robust: bool,
    as_json: bool,
    categorical: bool,
    flow_ids: bool,
    http: bool = True,
    rare: bool = True,
    deep: bool = False,
) -> tuple[tuple[dict[str, pl.Expr], ...], dict[str, pl.Expr | None]]:
    """The steps (`with_columns`) and output columns of `messages_from_records`, built once per kind
    of reading: its two hundred expressions take a millisecond of Python to build, per piece read.

    `file`, `transport` and `capture` are literals of each call: None here. With `http=False` the
    HTTP and SSE expressions are left out: an HTTP-only column is a typed null, and `HTTP_READS`
    reads the record fields of other types than `String` that only the left-out expressions read.
    """
    raw = pl.col("raw")
    rtype = pl.col("type")
    is_payload = rtype.is_in((fmt.FRAME, fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE, fmt.SSE_EVENT))
    is_json = is_payload & raw.str.contains(f"^{_WS}\\{{")
    # Paths are applied to a masked input (null where not needed), never masked afterwards: a
    # `when().then(path(raw))` would still parse every row. Every field of a payload is read from
    # `_json`, the payload with its lone surrogate escapes as their text (rare rows, in Python).
    payload = pl.when(is_json).then(raw)
    if rare:
        # a low one's escape is alone unless a high one's is right before it: more of them than pairs.
        # Counted, as each pattern starts with the escape's text, which polars' regex finds fast: one
        # pattern for a low one's escape after anything but a high one's cost 10 times the search
        pairs = raw.str.count_matches(_HIGH + _LOW)
        lone = pl.when(is_json & (raw.str.contains(_LONE_HIGH) | (raw.str.count_matches(_LOW) > pairs))).then(raw)
        payload = pl.coalesce(lone.map_elements(lone_surrogates_as_text, pl.String()), payload)
        # `"\u0072esult"` is `"result"` to every parser, but the searches below that pick which rows
        # to read look for names as text: such names are written plainly first (rare rows, in Python)
        named = pl.when(payload.str.contains(_ESCAPED_NAME)).then(payload)
        payload = pl.coalesce(named.map_elements(plain_names, pl.String()), payload)
    if deep:
        # a payload nested past `json_path_match`'s limit, its deepest values left out (rare pieces)
        nested = pl.when(payload.str.count_matches(_OPENER) > _DEEP_OPENERS).then(payload)
        payload = pl.coalesce(nested.map_elements(shallow_payload, pl.String()), payload)
    body = pl.col("_json")
    steps: list[dict[str, pl.Expr]] = [{"_json": payload, "_is_json": is_json.fill_null(False)}]
    own = pl.col("_own")  # the robust reading's payload where it writes a top-level key twice
    # the payload the robust reading reads its fields from: its numbers within a double's range
    ranged = pl.col("_ranged") if robust else body
    if robust:
        # `json_path_match` reads the last of a key written twice, the fast reading the first: those
        # rare payloads (a key written twice, its names plain by now) are read without their later copies
        twice = pl.any_horizontal(body.str.count_matches(f'"{key}"{_WS}:') > 1 for key in ("id", "method", "params"))
        beyond = pl.when(body.str.contains(_BEYOND_DOUBLE)).then(body)
        steps.append({"_ranged": pl.coalesce(beyond.map_elements(_numbers_in_double_range, pl.String()), body)})
        first = pl.when(twice).then(ranged).map_elements(_first_members, pl.String())
        steps.append({"_own": pl.coalesce(first, ranged)})
        read = {"_id": "$.id", "_method": "$.method", "_read_jsonrpc": "$.jsonrpc"}
        steps.append({name: _path(own, path) for name, path in read.items()})
        # `json_path_match` writes the number `2.0` as `2.0`: a version that reads so is told from the
        # number by how the payload writes its own `jsonrpc`, as a method is (`"jsonrpc":2.0` beside
        # a `"2.0"` elsewhere names none)
        jsonrpc = pl.col("_read_jsonrpc")
        steps.append({"_version_keys": _keys_where(pl.when(jsonrpc == "2.0").then(body), "jsonrpc", '"')})
        version_keys = pl.col("_version_keys")
        named_twice = version_keys > 1
        named = _own_member_is(version_keys, body, "jsonrpc", str, rare=rare)
        # `json_path_match` writes a number as a float would (`1.0`, `100.0` for `1e2`, `-0.0` for
        # `-0`, `1.8446744073709552e+19` for an integer beyond 64 bits), reads some past 2**53 a
        # unit off (`9007199254740993.0` as ...994), and writes a string as it is (`"1.0"`, `"007"`).
        # An id it writes as an integer is one either way; any other number-looking one is read
        # again from the payload as written (rare rows, in Python), and a number then the fast way:
        # an id's text does not depend on whether another line of the piece made it be read robustly
        other = pl.col("_id").str.contains(_NUMBER) & ~pl.col("_id").str.contains(_INTEGER)
        written = pl.when(other).then(own).map_elements(_written_id, pl.String())
        # an integer as written, as the fast reading writes one (the decoding refuses forty digits and more)
        decodable = pl.when(~written.str.contains(_INTEGER)).then(written)
        decoded = (pl.lit("[") + decodable + pl.lit("]")).str.json_decode(pl.List(pl.String())).list.first()
        exact = pl.coalesce(decoded, written)
        steps.append(
            {
                "_id": pl.coalesce(exact, pl.col("_id")),
                "_jsonrpc": pl.when(named).then(jsonrpc),
                "_read_result": _path(pl.when(body.str.contains('"result"', literal=True)).then(own), "$.result"),
            }
        )
        # `json_path_match` writes an object as its text but a string as its content: an object is told
        # from a string holding such text by how the payload writes its own `result`, as an error is
        braced = pl.when(pl.col("_read_result").str.starts_with("{")).then(body)
        steps.append({"_result_keys": _keys_where(braced, "result", "{")})
        result_keys = pl.col("_result_keys")
        results = result_keys > 1
        steps.append({"_result_object": _own_member_is(result_keys, body, "result", dict, rare=rare)})
    else:
        fields = pl.col("_fields")
        meta = fields.struct.field("params").struct.field("_meta")
        steps.append({"_fields": body.str.json_decode(_FIELDS)})
        steps.append(
            {
                "_id": fields.struct.field("id"),
                "_jsonrpc": fields.struct.field("jsonrpc"),
                "_method": fields.struct.field("method"),
                "_meta_version": meta.struct.field(META_PV),
                "_meta_caps": meta.struct.field(META_CAPS).is_not_null(),
                "_meta_client": meta.struct.field(META_CLIENT).struct.field("name"),
                "_meta_client_version": meta.struct.field(META_CLIENT).struct.field("version"),
                "_result_object": fields.struct.field("result").is_not_null(),
            }
        )
        results = named_twice = pl.lit(False)
    # The error object, only where one can be: a payload without a method that mentions it.
    error_rows = pl.col("_method").is_null() & body.str.contains('"error"', literal=True)
    error_text = pl.when(error_rows).then(ranged)
    # `_errors`, `_versioned`: rows whose fields `DEEP_READS` looks for (kept from expressions these
    # steps evaluate anyway: the same expression in one step is evaluated once)
    # An error is an object: JSON-RPC wants one, and the SDKs refuse a line whose error is a string, a
    # number, a boolean or an array. `json_path_match` writes an object as its text but a string as its
    # content, so an object is told from a string holding such text (`"{\"code\":-32022}"`) by how
    # the payload writes its own `error`: one key followed by `{`, or a parse where it writes several
    steps.append({"_read_error": _path(error_text, "$.error"), "_errors": error_rows})
    braced = pl.when(pl.col("_read_error").str.starts_with("{")).then(body)
    steps.append({"_error_keys": _keys_where(braced, "error", "{")})
    error_keys = pl.col("_error_keys")
    errors = error_keys > 1
    an_object = _own_member_is(error_keys, body, "error", dict, first=False, rare=rare)
    steps.append({"_error": pl.when(an_object).then(pl.col("_read_error"))})
    # Only a number-looking id in a payload that quotes some id can be a string id. Nested objects
    # can hold ids of their own (`"params":{"ref":{"id":"1"}}`): a payload that writes one id key is
    # told by how it writes it (quoted, however spaced or escaped: `"id" : "1"`, `"id":"\u0031"`), one
    # that writes several is parsed (`own_member_is`: rare rows, never the common path). The
    # count is of an input masked to those rows (null elsewhere): on every row, it would cost a
    # search of every payload.
    # An array, an object, `true` or `false` is no id (JSON-RPC allows a string, a number or null) and
    # makes the message invalid; `json_path_match` writes such an id as the text a string of it holds
    # (`[1]`, `true`), so it is told from that string the same way.
    number = pl.col("_id").str.contains(_NUMBER)
    odd = pl.col("_id").str.contains(_NO_ID)
    steps.append(
        {
            "_code": _path(pl.col("_error"), "$.code"),
            "_emsg": _path(pl.col("_error"), "$.message"),
            "_num": number,
            "_odd": odd,
            "_maybe": (number | odd) & body.str.contains(f'"id"{_WS}:{_WS}"'),
        }
    )
    maybe = pl.col("_maybe")
    # A method is a string: JSON-RPC wants one, and the SDKs refuse a line whose method is a number, a
    # boolean, an array or an object. The readings write such a method as its text, so it is told from
    # a string holding that text as an id's type is, by whether the payload quotes its own method.
    # The payload is searched only on those rows (real methods are names like `tools/call`).
    odd_method = pl.col("_method").str.contains(_NO_METHOD)
    odd_body = pl.when(odd_method).then(body)
    # An error's message is a string: the error object's text, as `json_path_match` writes one (without
    # whitespace, its members once), writes its own `"message":"`, or a nested one too (then parsed)
    error = pl.col("_error")
    with_message = pl.when(pl.col("_emsg").is_not_null()).then(error)
    text_code = pl.col("_code")
    steps.append(
        {
            "_id_keys": pl.when(maybe).then(body).str.count_matches(f'"id"{_WS}:'),
            "_odd_method": odd_method,
            "_method_keys": _keys_where(odd_body, "method", '"'),
            "_message_keys": _keys_where(with_message, "message", '"', compact=True),
            # read once: the kind asks whether it is an integer, and `error_code` is it
            "_code_number": pl.when(text_code.str.contains(_NUMBER)).then(text_code).cast(pl.Float64, strict=False),
        }
    )
    keys = pl.col("_id_keys")  # null where not `maybe`
    several = keys > 1
    id_quoted = _own_member_is(keys, body, "id", str, rare=rare)
    method_keys = pl.col("_method_keys")
    methods = method_keys > 1
    no_method = pl.col("_odd_method") & ~_own_member_is(method_keys, body, "method", str, rare=rare)
    message_keys = pl.col("_message_keys")
    messages = message_keys > 1
    string_message = _own_member_is(message_keys, error, "message", str, rare=rare)
    as_number = pl.col("_num") & ~id_quoted
    no_id = pl.col("_odd") & ~id_quoted
    as_string = pl.when(~as_number).then(pl.col("_id"))
    number_text = pl.col("_id")
    if robust:  # the fast reading refuses a payload whose id is beyond a double
        # one number beyond a double written two ways (`1e400`, `10e399`) is one id, as the counters key it
        beyond = pl.when(as_number & pl.col("_id").str.contains(_BEYOND_DOUBLE)).then(pl.col("_id"))
        number_text = pl.coalesce(beyond.map_elements(_exact_beyond_double, pl.String()), number_text)
    id_text = (
        pl.when(pl.col("_id").is_null() | no_id)
        .then(None)
        # a negative zero (`-0.0`, `-0e0`, which the readings write `-0`) is the number 0 to every peer:
        # JavaScript's `-0 === 0` (and `JSON.stringify(-0)` answers it as `0`), Python's `-0.0 == 0`
        .when(as_number & (pl.col("_id") == "-0"))
        .then(pl.lit("0"))
        .when(as_number)
        .then(number_text)
        .otherwise(
            pl.lit('"')
            + as_string.str.replace_all("\\", "\\\\", literal=True).str.replace_all('"', '\\"', literal=True)
            + pl.lit('"')
        )
    )
    # an integral number however written (`-32022.0`, `-3.2022e4`): JSON has one number type. A string
    # holding one's text (`"-32022"`) reads as it, as the Python SDK's client reads it (`code: int`, lax),
    # and as the live counters read it; `json_path_match` writes a string's content, so any other text
    # (`"+5"`, `" -32022"`, `"-inf"`) is told by its shape, never by what a float parser makes of it
    code = pl.col("_code_number")
    integral = (code == code.round(0)) & code.is_finite()
    error_code = pl.when(integral).then(code).cast(pl.Int64, strict=False)
    status = pl.col("status")
    has_result = body.str.contains('"result"', literal=True)  # the text: where `DEEP_READS` looks
    # JSON-RPC's error has an integer code and a string message: both SDKs refuse a line whose error
    # has no code, one that is no integer (`1.5`, `"x"`, null), or no message, or one that is no string
    # (a -32022 without its message is no refusal a client read). The code is read as above: the
    # Python SDK's client also takes `true` and `"+5"` as codes, which are none here (nor to the
    # TypeScript SDK).
    has_error = error.is_not_null() & integral.fill_null(False) & string_message
    json_kind = (
        pl.when(pl.col("_no_message"))
        .then(pl.lit("invalid"))
        .when(pl.col("_method").is_not_null() & pl.col("_id_text").is_not_null())
        .then(pl.lit("request"))
        .when(pl.col("_method").is_not_null())
        .then(pl.lit("notification"))
        .when(has_error)
        .then(pl.lit("error"))
        .when(pl.col("_result_object") & pl.col("_id_text").is_not_null())
        .then(pl.lit("response"))
        .otherwise(pl.lit("invalid"))
    )
    empty_body = raw.is_null() | (raw.str.strip_chars() == "")
    http_refusal = (rtype == fmt.HTTP_RESPONSE) & ((status >= 400) | status.is_between(300, 399))
    # The HTTP+SSE transport's first event on its GET stream names the URL to POST to (and in it
    # the session): transport bookkeeping, not a message
    is_endpoint = (rtype == fmt.SSE_EVENT) & (pl.col("sse_event") == "endpoint")
    kind = (
        pl.when(rtype.is_in((fmt.LIFECYCLE, fmt.SSE_END, fmt.HTTP_ERROR)) | is_endpoint.fill_null(False))
        .then(pl.lit("lifecycle"))
        .when((rtype == fmt.HTTP_RESPONSE) & pl.col("streamed").fill_null(False))
        .then(pl.lit("lifecycle"))
        # 202 Accepted answers nothing: the answer, if any, comes on another stream (the HTTP+SSE
        # transport's GET stream, whose servers send the body "Accepted")
        .when((rtype == fmt.HTTP_RESPONSE) & (status == 202))
        .then(pl.lit("lifecycle"))
        .when(pl.col("_is_json"))
        # JSON that is no JSON-RPC message on a 3xx/4xx/5xx (a framework's `{"detail": "Not Found"}`,
        # a `--bodies metadata` marker standing for a plain-text body) is an HTTP error like plain text
        .then(pl.when(http_refusal & (json_kind == "invalid")).then(pl.lit("error")).otherwise(json_kind))
        .when(http_refusal)
        .then(pl.lit("error"))  # an empty or plain-text 3xx/4xx/5xx: an error without a JSON-RPC code
        .when(rtype.is_in((fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE)) & empty_body)
        .then(pl.lit("lifecycle"))  # GET/DELETE, 202 Accepted: HTTP-level events, not messages
        # an event without data: a resumable stream's first (an id to reconnect from), `retry:` alone;
        # no message (a browser dispatches none), so no garbage (`raw` absent: bytes that are no UTF-8)
        .when((rtype == fmt.SSE_EVENT) & (raw == ""))
        .then(pl.lit("lifecycle"))
        .otherwise(pl.lit("invalid"))
    )
    # The recorder kept as it came an answer it could not decode (`undecodable`): answered, unread.
    undecodable = pl.col("undecodable").is_not_null()
    event = (
        pl.when(rtype == fmt.LIFECYCLE)
        .then(pl.col("event"))
        .when((rtype == fmt.SSE_END) & undecodable)
        .then(pl.lit(UNDECODABLE_STREAM))
        .when(rtype == fmt.SSE_END)
        .then(pl.lit("sse-end:") + pl.col("how").fill_null("?"))
        .when(rtype == fmt.HTTP_ERROR)
        .then(pl.lit("http-error:") + pl.col("kind").fill_null("other"))
        .when(is_endpoint)
        .then(pl.lit("sse-endpoint"))
        .when((rtype == fmt.HTTP_RESPONSE) & pl.col("streamed").fill_null(False))
        .then(pl.lit("sse-start"))
        .when((rtype == fmt.HTTP_RESPONSE) & undecodable)
        .then(pl.lit(UNDECODABLE_BODY))
        .when(rtype == fmt.HTTP_REQUEST)
        .then(pl.lit("http-") + pl.col("method").fill_null("?").str.to_lowercase())
        .when(rtype == fmt.HTTP_RESPONSE)
        .then(pl.lit("http-") + status.cast(pl.String).fill_null("?"))
    )
    direction = (
        pl.when(rtype == fmt.HTTP_REQUEST)
        .then(pl.lit(fmt.C2S))
        .when(rtype.is_in((fmt.HTTP_RESPONSE, fmt.SSE_EVENT)))
        .then(pl.lit(fmt.S2C))
        .when(rtype == fmt.FRAME)
        .then(pl.col("dir"))
    )
    if not http:  # the same values on records of the other types
        kind = (
            pl.when(rtype == fmt.LIFECYCLE)
            .then(pl.lit("lifecycle"))
            .when(pl.col("_is_json"))
            .then(json_kind)
            .otherwise(pl.lit("invalid"))
        )
        event = pl.when(rtype == fmt.LIFECYCLE).then(pl.col("event"))
        direction = pl.when(rtype == fmt.FRAME).then(pl.col("dir"))
    # A message names its version `"jsonrpc": "2.0"`: the SDKs refuse a line without it, or with another
    not_2 = (pl.col("_jsonrpc") != "2.0").fill_null(True)
    no_message = no_id.fill_null(False) | no_method.fill_null(False) | not_2
    steps.append({"_id_text": id_text, "_no_message": no_message})
    # `_result`, `_init` (below): more of the rows whose fields `DEEP_READS` looks for, kept from
    # expressions their steps evaluate anyway
    steps.append({"_kind": kind, "_event": event, "_dir": direction, "_error_code": error_code, "_result": has_result})
    # Deeper paths, each only on the rows that can carry it.
    k = pl.col("_kind")
    is_req = k.is_in(("request", "notification"))
    is_init_req = is_req & (pl.col("_method") == "initialize")
    is_resp = k == "response"
    is_err = k == "error"
    # why the tee could not start the server (`ENOENT …`): upstream-unreachable quotes it
    spawn_failed = (rtype == fmt.LIFECYCLE) & (pl.col("_event") == fmt.EV_SPAWN_FAILED)
    maybe_versions = is_resp & (
        body.str.contains("supportedVersions", literal=True) | body.str.contains("protocolVersion", literal=True)
    )
    if robust:  # the fast reading decoded these with the id
        steps.append({"_meta": _path(pl.when(is_req).then(own), "$.params._meta")})
        steps.append(
            {
                "_meta_version": _path(pl.col("_meta"), f"$['{META_PV}']"),
                "_meta_caps": _path(pl.col("_meta"), f"$['{META_CAPS}']").is_not_null(),
                "_meta_client": _path(pl.col("_meta"), f"$['{META_CLIENT}'].name"),
                "_meta_client_version": _path(pl.col("_meta"), f"$['{META_CLIENT}'].version"),
            }
        )
    steps.append(
        {
            "_data": _path(pl.col("_error"), "$.data"),
            "_ptext": _path(pl.when(is_init_req).then(ranged), "$.params"),
            "_init": is_init_req,
            "_rtext": _path(pl.when(maybe_versions).then(ranged), "$.result"),
            "_versioned": maybe_versions,
        }
    )
    # the version arrays' text, read once: their strings and, without `rare`, whether they are odd
    versions, supported = _path(pl.col("_rtext"), "$.supportedVersions"), _path(pl.col("_data"), "$.supported")
    steps.append({"_versions": versions, "_supported": supported})
    data = pl.col("_data")
    ptext = pl.col("_ptext")
    rtext = pl.col("_rtext")
    # A DiscoverResult has an array `supportedVersions` and an object `capabilities`: the SDK's client
    # reads a result without them as no DiscoverResult and falls back to `initialize`, so its versions
    # are none it read. `json_path_match` writes a string's content: the array and the object are told
    # from a string holding their text by how the result writes its own members, as a method is
    # (only where the versions read as an array: an `initialize` result has capabilities too). A result
    # that has its own `capabilities` and writes one such member, an object, has its own object. The
    # versions are strings alone (MCP's schema lists strings; the SDK refuses `[1]`, `["…",null]`)
    listed = pl.when(pl.col("_versions").str.starts_with("[")).then(rtext)
    steps.append(
        {
            "_versions_keys": _keys_where(listed, "supportedVersions", "[", compact=True),
            "_caps_keys": _keys_where(listed, "capabilities", "{", compact=True),
            "_own_caps": _path(listed, "$.capabilities").is_not_null(),
        }
    )
    versions_keys, caps_keys = pl.col("_versions_keys"), pl.col("_caps_keys")
    discover_members = (versions_keys > 1) | (caps_keys > 1)
    caps = pl.col("_own_caps") & _own_member_is(caps_keys, rtext, "capabilities", dict, rare=rare)
    strings = _strings_alone(pl.col("_versions"), rare)
    discover_result = _own_member_is(versions_keys, rtext, "supportedVersions", list, rare=rare) & caps & strings
    is_http = rtype.is_in((fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE))

    def header(name: str, text: str = "_htext") -> pl.Expr:
        return _header(pl.col(text), name, as_json=as_json)

    if http:
        headers = pl.col("headers") if as_json else _headers_text(pl.col("headers"))
        steps.append({"_htext": pl.when(is_http).then(headers)})
        # A request's headers and a response's apart: each header is looked for only where it is
        # read (a regex over every row's headers costs a fifth more on an HTTP piece)
        steps.append(
            {
                "_req_h": pl.when(rtype == fmt.HTTP_REQUEST).then(pl.col("_htext")),
                "_resp_h": pl.when(rtype == fmt.HTTP_RESPONSE).then(pl.col("_htext")),
            }
        )
        steps.append({"_ua": header("user-agent", "_req_h")})
    ua = pl.col("_ua")
    node_header = pl.coalesce(*(header(name, "_resp_h") for name in ("x-served-by", "via", "server")))
    columns: dict[str, pl.Expr | None] = dict(
        file=None,
        line=pl.col("line").cast(pl.UInt32),
        server=pl.col("server"),
        transport=None,
        conn=pl.col("conn"),
        flow=pl.col("flow"),
        seq=pl.col("seq") * MEMBER_SLOTS + pl.col("_member"),
        ts=bounded_time("ts"),
        record_type=rtype,
        dir=pl.col("_dir"),
        kind=k,
        id=pl.col("_id_text"),
        method=pl.col("_method"),
        # only an error's: an invalid message's is no error's (`{"id":[1],"error":{…}}`, which a client
        # refuses unread), nor a response's beside an error object without its message
        error_code=pl.when(is_err).then(pl.col("_error_code")),
        error_message=pl.when(is_err & pl.col("_error").is_not_null())
        .then(pl.col("_emsg"))
        .when((rtype == fmt.HTTP_ERROR) | spawn_failed)
        .then(pl.col("error"))
        .when(is_err & is_http)
        .then(pl.coalesce(raw.str.slice(0, 200), pl.col("reason"))),
        meta_version=pl.when(is_req).then(pl.col("_meta_version")),
        has_envelope=pl.when(is_req).then(
            pl.col("_meta_version").is_not_null() & pl.col("_meta_caps").fill_null(False)
        ),
        supported_versions=pl.when(discover_result).then(_string_list(pl.col("_versions"), rare)),
        error_supported=_string_list(pl.col("_supported"), rare),
        error_requested=_path(data, "$.requested"),
        init_version=pl.coalesce(_path(ptext, "$.protocolVersion"), _path(rtext, "$.protocolVersion")),
        ttl_ms=_path(rtext, "$.ttlMs").cast(pl.Float64, strict=False).cast(pl.Int64, strict=False),
        header_version=header("mcp-protocol-version", "_req_h"),
        header_method=header("mcp-method", "_req_h"),
        # Streamable HTTP names the session in a header; the HTTP+SSE transport in the POST URL's
        # query, which its GET stream announces in the `endpoint` event
        session_id=pl.when(is_http)
        .then(pl.coalesce(header(fmt.SESSION_HEADER), pl.col("url").str.extract(_SESSION_QUERY, 1)))
        .when(is_endpoint)
        .then(raw.str.extract(_SESSION_QUERY, 1)),
        http_status=status,
        peer=pl.col("peer"),
        node_hint=pl.coalesce(
            _path(rtext, f"$._meta['{META_SERVER}'].name"),
            _path(rtext, "$.serverInfo.name"),
            pl.when(rtype == fmt.HTTP_RESPONSE).then(node_header),
        ),
        client_name=pl.coalesce(
            pl.when(is_req).then(pl.col("_meta_client")), _path(ptext, "$.clientInfo.name"), ua.str.slice(0, 120)
        ),
        client_version=pl.coalesce(
            pl.when(is_req).then(pl.col("_meta_client_version")), _path(ptext, "$.clientInfo.version")
        ),
        user_agent=ua,
        client_addr=pl.when(rtype == fmt.HTTP_REQUEST).then(pl.col("client")),
        host_process=pl.when(rtype == fmt.LIFECYCLE).then(pl.col("parent_argv").list.join(" ")),
        event=pl.col("_event"),
        exit_code=pl.when(rtype == fmt.LIFECYCLE).then(pl.col("code")),
        signal=pl.col("signal"),
        req_line=pl.lit(None, pl.UInt32),
        req_ts=pl.lit(None, pl.Float64),
        capture=None,
        req_seq=pl.lit(None, pl.Int64),
    )
    if not http:  # the same values on records of the other types
        nothing = pl.lit(None, pl.String)
        columns.update(
            error_message=pl.when(is_err & pl.col("_is_json"))
            .then(pl.col("_emsg"))
            .when(spawn_failed)
            .then(pl.col("error")),
            header_version=nothing,
            header_method=nothing,
            session_id=nothing,
            node_hint=pl.coalesce(_path(rtext, f"$._meta['{META_SERVER}'].name"), _path(rtext, "$.serverInfo.name")),
            client_name=pl.coalesce(pl.when(is_req).then(pl.col("_meta_client")), _path(ptext, "$.clientInfo.name")),
            user_agent=nothing,
            client_addr=nothing,
        )
    # each column in its final dtype: a cast of the whole frame would resolve the plan's schema again
    dtypes = {**MESSAGES_SCHEMA, **({name: pl.Categorical() for name in CATEGORICAL_COLUMNS} if categorical else {})}
    if categorical and not flow_ids:
        columns["flow"], dtypes["flow"] = flow_key(pl.col("flow")), FLOW_KEY_DTYPE
    typed = {name: None if expr is None else expr.cast(dtypes[name]) for name, expr in columns.items()}
    if not rare:
        # a member name written with an escape is not looked for here: a piece holding any `\u` of a
        # payload's is read with `rare` from the start (`analyzer.load`)
        odd = _odd_array(pl.col("_versions")) | _odd_array(pl.col("_supported"))
        rows = (odd, several, methods, errors, results, messages, named_twice, discover_members)
        typed[RARE_READS] = pl.any_horizontal(e.fill_null(False) for e in rows)
    if not deep:
        # A field that was not read where the payload has it: a payload nested past 128 levels reads
        # as nothing (the robust reading's id and method too; the fast reading's decoding reads those
        # at any depth the reader reads), or it has no such field. Only those rows are counted: more
        # openers than `_DEEP_OPENERS` and the piece is read again with `deep`.
        unread = (
            (pl.col("_versioned") & rtext.is_null())
            | (pl.col("_init") & ptext.is_null())
            | (pl.col("_errors") & pl.col("_read_error").is_null() & ~pl.col("_result"))
        )
        if robust:
            unread |= pl.col("_id").is_null() & pl.col("_method").is_null()
        nested = pl.when(pl.col("_is_json") & unread).then(body).str.count_matches(_OPENER) > _DEEP_OPENERS
        typed[DEEP_READS] = nested.fill_null(False)
    if not http:
        # The reader checks a field's type only when the query reads it (and any value fits a
        # String): the fields of other types only the left-out expressions read are read here.
        full = _plan(
            robust=robust,
            as_json=as_json,
            categorical=categorical,
            flow_ids=flow_ids,
            http=True,
            rare=rare,
            deep=deep,
        )
        unread = _fields(*full) - _fields(tuple(steps), typed)
        typed[HTTP_READS] = pl.struct(sorted(name for name in unread if RECORD_SCHEMA[name] != pl.String()))
    return tuple(steps), typed


def _keys_where(masked: pl.Expr, key: str, value_start: str, *, compact: bool = False) -> pl.Expr:
    """How many times the payload `masked` (null on rows not asked about) writes a member `key`, on rows
    where one such member's value starts with `value_start` (`"` a string, `{` an object); else null.
    A string value cannot hold `"key":` (its quotes are escaped), so only nested members add to it.

    `compact`: `masked` is JSON as `json_path_match` writes a value (no whitespace between tokens), so
    the member is looked for as plain text: each pattern is compiled again for every piece and file
    read, which cost analysing G more than the searches themselves."""
    if compact:
        written = masked.str.contains(f'"{key}":{value_start}', literal=True)
        return pl.when(written).then(masked).str.count_matches(f'"{key}":', literal=True)
    written = masked.str.contains(f'"{key}"{_WS}:{_WS}{re.escape(value_start)}')
    return pl.when(written).then(masked).str.count_matches(f'"{key}"{_WS}:')


def _own_member_is(
    keys: pl.Expr, body: pl.Expr, key: str, kind: type, *, first: bool = True, rare: bool
) -> pl.Expr:
    """Whether the payload's own member `key` is a value of `kind` (`_keys_where` counted the keys
    written before such a value): the one it writes, where it writes one; where it writes several, as
    a parse says (`own_member_is`: rare rows, in Python). Without `rare` those rows read false and make
    the piece be read again with it (`RARE_READS`)."""
    one = (keys == 1).fill_null(False)
    if not rare:
        return one
    several = keys > 1
    parse = functools.partial(own_member_is, key=key, kind=kind, first=first)
    parsed = pl.when(several).then(body).map_elements(parse, pl.Boolean())
    return pl.when(several).then(parsed.fill_null(False)).otherwise(one)


def _fields(steps: tuple[dict[str, pl.Expr], ...], columns: dict[str, pl.Expr | None]) -> set[str]:
    """The record fields a plan reads."""
    exprs = [e for step in steps for e in step.values()] + [e for e in columns.values() if e is not None]
    return {name for expr in exprs for name in expr.meta.root_names()} & set(RECORD_SCHEMA)


@functools.cache
def read_fields() -> frozenset[str]:
    """The record fields `messages_from_records` reads (any reading, any `headers` dtype).

    The NDJSON reader checks the type of a field only when the query reads it, so these are the
    fields whose wrong type makes the reader refuse a line (`analyzer.load` finds such lines by
    their types without asking the reader line by line).
    """
    names: set[str] = set()
    for robust in (False, True):
        for as_json in (False, True):
            names |= _fields(*_plan(robust=robust, as_json=as_json, categorical=True, flow_ids=False))
    return frozenset(names)


CATEGORICAL_COLUMNS: Final = (
    "file",
    "server",
    "transport",
    "conn",
    "record_type",
    "dir",
    "kind",
    "method",
    "meta_version",
    "error_requested",
    "init_version",
    "header_version",
    "header_method",
    "session_id",
    "peer",
    "node_hint",
    "client_name",
    "client_version",
    "user_agent",
    "client_addr",
    "host_process",
    "event",
    "signal",
    "capture",
)
"""String columns of the messages frame that are held as `pl.Categorical` while it is in memory.

They repeat (a handful of files, servers, kinds, methods per input) and most are null on most rows;
a string column costs 16 bytes per row even when null, a categorical 4. Ids and error messages stay
strings (they hardly repeat). Filters and joins between messages columns work on categoricals as
they are; `as_strings` turns a (filtered) frame back into `MESSAGES_SCHEMA` dtypes before it meets
String columns of other frames, string functions, or output.
"""


FLOW_KEY_DTYPE: Final = pl.UInt64()


def flow_key(flow: pl.Expr) -> pl.Expr:
    """The in-memory `flow`: a 64-bit hash of the HTTP flow id (null stays null).

    Flow ids are unique per exchange, so as categoricals every one of them would be interned in
    polars' process-wide string cache for as long as any categorical lives: 132 MB per million
    flows, never freed (95 MB at the 2 GB bench set). They are only ever compared, within one
    capture, so a hash does: two flows of one capture collide with a probability of about n²/2⁶⁵
    (3·10⁻⁸ for a million flows). `as_strings` gives the hash as text; archives keep the ids.
    """
    return pl.when(flow.is_not_null()).then(flow.hash())


def as_categoricals(frame: pl.LazyFrame) -> pl.LazyFrame:
    """`frame` in the in-memory messages dtypes: `CATEGORICAL_COLUMNS` (those it has) as
    `pl.Categorical`, and a text `flow` as its `flow_key`."""
    schema = frame.collect_schema()
    names = [c for c in CATEGORICAL_COLUMNS if c in schema]
    frame = frame.with_columns(pl.col(names).cast(pl.Categorical()))
    if schema.get("flow") == pl.String():
        frame = frame.with_columns(flow=flow_key(pl.col("flow")))
    return frame


def as_strings[F: (pl.DataFrame, pl.LazyFrame)](frame: F) -> F:
    """`frame` with every categorical column back to `pl.String`, and a `flow_key` as text: the
    `MESSAGES_SCHEMA` dtypes (a no-op on frames already in them)."""
    frame = frame.with_columns(pl.col(pl.Categorical).cast(pl.String))
    schema = frame.collect_schema() if isinstance(frame, pl.LazyFrame) else frame.schema
    if schema.get("flow") == FLOW_KEY_DTYPE:
        frame = frame.with_columns(pl.col("flow").cast(pl.String))
    return frame


_FLOW: Final = ("_cap", "_flow", "_srv")
"""A flow's key in pairing: its capture, flow and server key (see `pair_responses`)."""


def _code(name: str) -> pl.Expr:
    """A join key from a column: a categorical's code (4 bytes, no string built), a string as it is."""
    return pl.col(name).to_physical()


def server_code(dtype: pl.DataType) -> pl.Expr:
    """The `server` column of a frame (`dtype`: its dtype) as a join key under which rows without
    a key meet each other, as they meet no keyed row: they are one server's traffic, the server
    without a key (joins match no null key). A categorical's code, else the text's 64-bit hash
    (two keys of one input collide with a probability of about n²/2⁶⁵, as `flow_key`)."""
    if dtype == pl.String():
        return pl.col("server").hash()
    return pl.col("server").to_physical().cast(pl.Int64()).fill_null(-1)


def _pair_in_session(
    sse: pl.DataFrame, matched_sse: pl.DataFrame, http_req: pl.DataFrame, flow_session: pl.DataFrame
) -> pl.DataFrame:
    """SSE answers that are not in their request's flow, paired by (session, id) across the session's flows.

    The HTTP+SSE transport answers every POST on its GET stream; Streamable HTTP servers may answer
    on the standalone GET stream or a resumed one. A flow's session is the first one named in it
    (request header, POST URL, `endpoint` event: `flow_session`); the answer goes to the latest
    earlier request with its id in that session. A replayed event (`Last-Event-ID`) pairs with the
    same request again, and the answer that counts stays the first (`unique` on the request downstream).
    """
    unmatched = sse.join(matched_sse.select("_row"), on="_row", how="anti")
    if unmatched.is_empty():
        return matched_sse.clear()
    answers = unmatched.join(flow_session.select(*_FLOW, "_session"), on=_FLOW).sort("seq")
    session_req = (
        http_req.filter(pl.col("_session").is_not_null()).drop("_flow").with_columns(seq="_req_seq").sort("seq")
    )
    return answers.join_asof(
        session_req, on="seq", by=["_cap", "_session", "_id"], strategy="backward", check_sortedness=False
    ).select(matched_sse.columns)


def pair_responses(messages: pl.DataFrame) -> pl.DataFrame:
    """Give each response/error the `method`, `req_line`, `req_ts` and `req_seq` of its request.

    stdio: the latest earlier request with the same id, on the same connection, in the other
    direction. HTTP: an `http.response` answers the request of its flow (whatever id its body
    carries: legacy servers answer `"server-error"` or null); an SSE event answers the request of
    its flow with the same id. Over HTTP only the client's requests take answers: a server's request
    on an event stream is answered in a POST of the client's. A stdio line or an event that is no
    JSON-RPC message answers nothing, whatever id it holds (garbage, as the SDKs read it). HTTP rows
    also get the status, peer and node hint of their flow's response.

    Connections and flows are keyed by (capture, server, conn) and (capture, server, flow) as they
    are stored (categorical codes in an analysis), so pairing builds no key strings. The recorders
    write every record of a connection or flow under one server key; a record keyed apart (an
    edited capture) is another server's and answers none of this one's requests, so that every
    result stays a function of one key's traffic (`--server`, the cluster's shards and `watch`
    select rows by key before pairing). Only answers paired through their session cross keys: the
    HTTP+SSE transport answers a POST to one path on the stream of another.
    """
    if messages.is_empty():
        return messages
    df = messages.with_row_index("_row")
    srv = server_code(messages.schema["server"])
    narrow = df.lazy().select(
        "_row",
        "id",
        "kind",
        "record_type",
        "seq",
        "line",
        "ts",
        "method",
        "dir",
        _cap=_code("capture"),
        _conn=_code("conn"),
        _flow=_code("flow"),
        _srv=srv,
        _session=_code("session_id"),
        _is_c2s=pl.col("dir") == fmt.C2S,
    )
    requests = narrow.filter((pl.col("kind") == "request") & pl.col("id").is_not_null()).collect()
    answers = narrow.filter(pl.col("kind").is_in(("response", "error", "invalid")) & pl.col("dir").is_not_null())
    answers = answers.collect()

    stdio_req = (
        requests.filter(pl.col("_flow").is_null())
        .select(
            "_cap",
            "_conn",
            "_srv",
            _id=pl.col("id"),
            _answer_c2s=~pl.col("_is_c2s"),  # the answer travels the other way
            seq="seq",
            _method="method",
            _req_line="line",
            _req_ts="ts",
            _req_seq="seq",
        )
        .sort("seq")
    )
    # JSON that is no message but holds an id (`{"id":1}`, `"error": null`) answers nothing: the SDKs
    # refuse such a line or event and go on waiting for the answer, as they wait past a banner
    by_id = pl.col("id").is_not_null() & (pl.col("kind") != "invalid")
    stdio_ans = (
        answers.filter(pl.col("_flow").is_null() & by_id)
        .select("_row", "seq", "_cap", "_conn", "_srv", _id=pl.col("id"), _answer_c2s=pl.col("_is_c2s"))
        .sort("seq")
    )
    matched_stdio = stdio_ans.join_asof(
        stdio_req,
        on="seq",
        by=["_cap", "_conn", "_srv", "_id", "_answer_c2s"],
        strategy="backward",
        check_sortedness=False,
    ).select("_row", "_method", "_req_line", "_req_ts", "_req_seq")

    # a server's request (on an event stream) is answered in a POST of the client's, never on a stream
    # or in a response: only the client's requests take answers there
    http_req = requests.filter(pl.col("_flow").is_not_null() & pl.col("_is_c2s")).select(
        "_cap",
        "_flow",
        "_srv",
        "_session",
        _id=pl.col("id"),
        _method="method",
        _req_line="line",
        _req_ts="ts",
        _req_seq="seq",
    )
    by_flow = http_req.unique(_FLOW, keep="first").drop("_id", "_session")
    http_answers = answers.filter(pl.col("_flow").is_not_null())
    http_resp = http_answers.filter(pl.col("record_type") == fmt.HTTP_RESPONSE).select(
        "_row", *_FLOW, _id=pl.col("id"), _m=pl.col("seq") % MEMBER_SLOTS
    )
    # A flow holds one request, or the members of one batch: an answer pairs with the member of its
    # id (a batch's answer array), else with the member of its own index (the copies of one answer
    # to the whole batch: `spread_batch_answers`), else with the flow's first request
    member_req = http_req.with_columns(_m=pl.col("_req_seq") % MEMBER_SLOTS).drop("_id", "_session")
    matched_resp_id = http_resp.drop("_m").join(
        http_req.drop("_session").unique([*_FLOW, "_id"], keep="first"), on=[*_FLOW, "_id"]
    )
    matched_resp_member = http_resp.drop("_id").join(member_req.unique([*_FLOW, "_m"], keep="first"), on=[*_FLOW, "_m"])
    matched_resp = pl.concat(
        [
            matched_resp_id.drop(*_FLOW, "_id"),
            matched_resp_member.drop(*_FLOW, "_m"),
            http_resp.join(by_flow, on=_FLOW, how="inner").drop(*_FLOW, "_id", "_m"),
        ]
    )
    sse = http_answers.filter((pl.col("record_type") == fmt.SSE_EVENT) & by_id).select(
        "_row", "seq", *_FLOW, _id=pl.col("id")
    )
    matched_sse = sse.join(http_req.unique([*_FLOW, "_id"], keep="first"), on=[*_FLOW, "_id"], how="inner").drop(
        "seq", *_FLOW, "_id", "_session"
    )
    # An SSE error without an id (`"id": null`, e.g. -32000 "Server not initialized") answers its flow's request.
    sse_null = http_answers.filter(
        (pl.col("record_type") == fmt.SSE_EVENT) & pl.col("id").is_null() & (pl.col("kind") == "error")
    ).select("_row", *_FLOW)
    matched_sse_null = sse_null.join(by_flow, on=_FLOW, how="inner").drop(*_FLOW)
    # A flow's session, the first one named in it: the key for answers on another of the session's
    # flows, and carried on its events, so that pairing them again later (a chunk, a rotated part:
    # `analyzer.load.relink`) finds it without the row that named it. No events, nothing to carry.
    flow_session = None
    if (df.get_column("record_type") == fmt.SSE_EVENT).any():
        flow_session = (
            df.lazy()
            .filter(pl.col("flow").is_not_null() & pl.col("session_id").is_not_null())
            .select(
                _cap=_code("capture"),
                _flow=_code("flow"),
                _srv=srv,
                _session=_code("session_id"),
                _fsession="session_id",
            )
            .unique(_FLOW, keep="first")
            .collect()
        )
    matched_session = None if flow_session is None else _pair_in_session(sse, matched_sse, http_req, flow_session)
    matched = pl.concat(
        [m for m in (matched_stdio, matched_resp, matched_sse, matched_sse_null, matched_session) if m is not None],
        how="vertical_relaxed",
    ).unique("_row", keep="first")

    flow_info = (
        df.lazy()
        .filter(pl.col("record_type") == fmt.HTTP_RESPONSE)
        .select(
            _cap=_code("capture"),
            _flow=_code("flow"),
            _srv=srv,
            _status="http_status",
            _peer="peer",
            _node="node_hint",
        )
        .unique(_FLOW, keep="first")
        .collect()
    )

    # Only the columns pairing changes go through the joins (in row order); the frame's other
    # columns are reused as they are instead of being copied by each join.
    changed = ["method", "http_status", "peer", "node_hint", "session_id", "record_type"]
    updates = (
        df.select("_row", *changed, _cap=_code("capture"), _flow=_code("flow"), _srv=srv)
        .join(matched, on="_row", how="left", maintain_order="left")
        .join(flow_info, on=_FLOW, how="left", maintain_order="left")
    )
    session_id = pl.col("session_id")
    if flow_session is not None:
        updates = updates.join(flow_session.drop("_session"), on=_FLOW, how="left", maintain_order="left")
        events = pl.col("record_type") == fmt.SSE_EVENT
        session_id = pl.when(events).then(pl.coalesce("session_id", "_fsession")).otherwise(session_id)
    updates = updates.select(
        # coalesced in the frame's own dtypes (String or Categorical): no string is built per row
        method=pl.coalesce("method", "_method"),
        req_line=pl.col("_req_line").cast(pl.UInt32),
        req_ts=pl.col("_req_ts"),
        req_seq=pl.col("_req_seq"),
        http_status=pl.coalesce("http_status", "_status"),
        peer=pl.coalesce("peer", "_peer"),
        node_hint=pl.coalesce("node_hint", "_node"),
        session_id=session_id,
    )
    if updates.height != messages.height:  # a duplicate key would add rows: never expected
        raise AssertionError("pairing changed the number of messages")
    return messages.with_columns(updates.get_columns()).select(list(messages.columns))
