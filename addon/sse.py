"""An incremental parser for `text/event-stream` bodies, fed chunk by chunk as they pass the proxy.

It follows the WHATWG event-stream interpretation: lines end in CRLF, LF or a lone CR (a CR at the
end of a chunk waits for the next chunk, since the LF may follow); a blank line dispatches the
event; `event`, `data`, `id` and `retry` are the fields; lines starting with `:` are comments; a
byte order mark starting the stream is dropped (its UTF-8 decoding does so).
One deliberate difference: an event with no `data:` lines is still reported (the browser drops
it), because a capture must show what crossed the wire. Field bytes are kept as bytes so a stream
that is not UTF-8 is recorded exactly (`raw_b64`), not repaired.

The parser holds at most one partial line and one partial event; it never buffers the stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = ["EVENT_STREAM_TYPE", "SseEvent", "SseParser", "is_event_stream_type"]

_MAX_COMMENTS = 8
EVENT_STREAM_TYPE: Final = "text/event-stream"
"""The media type of an event stream, as a `Content-Type` names it."""
_HTTP_WHITESPACE = " \t"
_BOM = b"\xef\xbb\xbf"


def is_event_stream_type(content_type: str) -> bool:
    """Whether a `Content-Type` value (several fields folded with ", ") names an event stream.

    The recorder taps a response by this (`addon.http_recorder.is_event_stream`, on the header's bytes),
    and the live counters count an open stream by it (`addon.metrics`, on the header as recorded, where
    bytes that are not UTF-8 read as latin-1): only HTTP's own whitespace is stripped, and a character
    that is not ASCII never lowers to one of the name's, so both decide alike whatever bytes came.
    """
    return content_type.split(";", 1)[0].strip(_HTTP_WHITESPACE).lower() == EVENT_STREAM_TYPE


@dataclass(slots=True)
class SseEvent:
    """One dispatched server-sent event."""

    event: str = "message"
    """The `event:` field; `message` when the event named none."""
    data: bytes = b""
    """The `data:` lines joined by `\\n` (no trailing newline)."""
    id: str | None = None
    """The `id:` field when this event carried one."""
    retry: int | None = None
    """The `retry:` field when this event carried a valid one (milliseconds)."""
    comments: list[bytes] = field(default_factory=list)
    """Comment lines (`: ...`) seen since the previous event, without the colon (the latest 8)."""
    truncated: bool = False
    """`data` holds only the first `max_event` bytes of the event's data."""
    data_len: int = 0
    """The size of the event's full data (as `data` would be without the bound)."""


class SseParser:
    """Feed chunks with `feed()`; each call returns the events completed by that chunk."""

    __slots__ = (
        "_buf", "_comments", "_data", "_data_held", "_data_len", "_event", "_has_fields", "_head", "_id",
        "_line_cap", "_line_over", "_max", "_pending_cr", "_retry", "_truncated",
    )  # fmt: skip

    def __init__(self, max_event: int | None = None) -> None:
        """`max_event`: data bytes kept per event at most (None: no bound); the rest is counted only."""
        self._buf = bytearray()
        self._pending_cr = False
        self._head: bytes | None = b""
        """The stream's first bytes while they may be a byte order mark (None once past them)."""
        self._max = max_event
        # a field name and its colon fit in the bound's slack; longer lines keep only their start
        self._line_cap = None if max_event is None else max_event + 64
        self._line_over = 0
        self._reset()

    def _reset(self) -> None:
        self._event: str | None = None
        self._data: list[bytes] = []
        self._id: str | None = None
        self._retry: int | None = None
        self._comments: list[bytes] = []
        self._has_fields = False
        self._data_held = 0
        self._data_len = -1  # the joining newline before the first line is not data
        self._truncated = False

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished line or event are held (a stream cut mid-event)."""
        return bool(self._buf) or self._has_fields or bool(self._head)

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Consume one chunk; return the events it completed, in order."""
        events: list[SseEvent] = []
        if not chunk:
            return events
        if self._head is not None:
            # the stream is decoded as UTF-8, which drops a byte order mark at its start (and only there)
            head = self._head + chunk
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._head = head
                return events
            self._head = None
            chunk = head[len(_BOM) :] if head.startswith(_BOM) else head
        buf = self._buf
        start = 0
        if self._pending_cr:
            self._pending_cr = False
            if chunk[:1] == b"\n":
                start = 1  # the LF of a CRLF split between chunks: the line already ended
        n = len(chunk)
        i = start
        cap = self._line_cap
        while i < n:
            # bytes.find is C-speed; scanning per byte in Python would cost the proxy dearly
            lf = chunk.find(b"\n", i)
            cr = chunk.find(b"\r", i)
            if lf < 0 and cr < 0:
                if cap is None or len(buf) + n - i <= cap:
                    buf += chunk[i:]
                else:
                    self._append(buf, chunk, i, n)
                break
            end = lf if cr < 0 or (0 <= lf < cr) else cr
            if cap is None or len(buf) + end - i <= cap:
                buf += chunk[i:end]
            else:
                self._append(buf, chunk, i, end)
            line = bytes(buf)
            buf.clear()
            if chunk[end] == 13:  # CR
                if end + 1 < n:
                    i = end + 2 if chunk[end + 1] == 10 else end + 1
                else:
                    self._pending_cr = True
                    i = n
            else:
                i = end + 1
            ev = self._line(line)
            if ev is not None:
                events.append(ev)
        return events

    def _append(self, buf: bytearray, chunk: bytes, start: int, end: int) -> None:
        """Keep the start of a line longer than the bound; count the rest."""
        cap = self._line_cap
        assert cap is not None
        room = max(cap - len(buf), 0)
        buf += chunk[start : start + room]
        self._line_over += end - start - room

    def _line(self, line: bytes) -> SseEvent | None:
        over, self._line_over = self._line_over, 0
        if not line:
            if not self._has_fields:
                return None
            ev = SseEvent(
                event=self._event or "message",
                data=b"\n".join(self._data),
                id=self._id,
                retry=self._retry,
                comments=self._comments,
                truncated=self._truncated,
                data_len=max(self._data_len, 0),
            )
            self._reset()
            return ev
        if line[:1] == b":":
            # keep-alive comments can repeat for hours on an idle stream: hold only the latest few
            if len(self._comments) >= _MAX_COMMENTS:
                del self._comments[0]
            self._comments.append(line[1:])
            return None
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        self._has_fields = True
        if name == b"data":
            self._data_len += 1 + len(value) + over
            if self._max is None:
                self._data.append(value)
            else:
                room = self._max - self._data_held - (1 if self._data else 0)
                if over or len(value) > room:
                    self._truncated = True
                    value = value[: max(room, 0)]
                if room >= 0 or not self._data:
                    self._data.append(value)
                    self._data_held += len(value) + (1 if len(self._data) > 1 else 0)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id" and b"\x00" not in value:
            self._id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            self._retry = int(value)
        return None
