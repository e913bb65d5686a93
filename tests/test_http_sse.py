"""The incremental SSE parser, fed chunk boundaries by hand and by hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.sse import SseEvent, SseParser

# What a Python MCP server sends (CRLF framing), two events.
PY_STREAM = (
    b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\r\n\r\n'
    b'event: message\r\ndata: {"jsonrpc":"2.0","id":4,"result":{}}\r\n\r\n'
)


def feed_all(chunks: list[bytes]) -> list[SseEvent]:
    parser = SseParser()
    out: list[SseEvent] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    out.extend(parser.feed(b""))
    return out


def simple(events: list[SseEvent]) -> list[tuple[str, bytes, str | None, int | None]]:
    return [(e.event, e.data, e.id, e.retry) for e in events]


def test_crlf_stream_in_one_chunk_gives_both_events_in_order() -> None:
    events = feed_all([PY_STREAM])
    assert simple(events) == [
        ("message", b'{"jsonrpc":"2.0","method":"notifications/progress"}', None, None),
        ("message", b'{"jsonrpc":"2.0","id":4,"result":{}}', None, None),
    ]


def test_lf_framing_as_typescript_servers_send_it() -> None:
    events = feed_all([b"event: message\ndata: {}\n\n"])
    assert simple(events) == [("message", b"{}", None, None)]


def test_event_split_mid_line_is_reported_only_when_complete() -> None:
    parser = SseParser()
    assert parser.feed(b"event: mess") == []
    assert parser.feed(b"age\r\ndata: {\"a\"") == []
    assert parser.pending
    events = parser.feed(b":1}\r\n\r\n")
    assert simple(events) == [("message", b'{"a":1}', None, None)]
    assert not parser.pending


def test_crlf_split_between_chunks_does_not_make_an_empty_line() -> None:
    parser = SseParser()
    # if the LF after a chunk-final CR were read as a second line end, `data: b` would be a new event
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\ndata: b\r") == []
    # a CR ends its line at once (the event is complete), the LF that follows is swallowed
    assert simple(parser.feed(b"\n\r")) == [("message", b"a\nb", None, None)]
    assert parser.feed(b"\n") == []
    assert simple(parser.feed(b"data: c\r\n\r\n")) == [("message", b"c", None, None)]


def test_several_events_in_one_chunk() -> None:
    chunk = b"data: 1\n\ndata: 2\n\nevent: ping\ndata: 3\n\n"
    assert [e.data for e in feed_all([chunk])] == [b"1", b"2", b"3"]
    assert [e.event for e in feed_all([chunk])] == ["message", "message", "ping"]


def test_comments_are_kept_on_the_next_event_and_never_dispatch_alone() -> None:
    events = feed_all([b": keep-alive\n\n: hello\ndata: x\n\n"])
    assert len(events) == 1
    assert events[0].comments == [b" keep-alive", b" hello"]
    assert events[0].data == b"x"


def test_keepalive_comments_are_bounded() -> None:
    parser = SseParser()
    for _ in range(1000):
        parser.feed(b": ping\n\n")
    (event,) = parser.feed(b"data: x\n\n")
    assert len(event.comments) == 8


def test_id_and_retry_fields() -> None:
    (event,) = feed_all([b"id: 42\nretry: 3000\nevent: message\ndata: {}\n\n"])
    assert (event.id, event.retry) == ("42", 3000)


def test_invalid_retry_is_ignored_and_id_per_event() -> None:
    first, second = feed_all([b"id: a\nretry: soon\ndata: 1\n\ndata: 2\n\n"])
    assert (first.id, first.retry) == ("a", None)
    assert second.id is None


def test_data_without_space_and_multiline_data() -> None:
    (event,) = feed_all([b"data:one\ndata: two\ndata\n\n"])
    assert event.data == b"one\ntwo\n"


def test_lone_cr_line_endings() -> None:
    (event,) = feed_all([b"data: x\r\r"])
    assert event.data == b"x"


def test_unterminated_tail_is_pending_not_dispatched() -> None:
    parser = SseParser()
    assert parser.feed(b"data: cut") == []
    assert parser.feed(b"") == []
    assert parser.pending


def test_non_utf8_data_is_kept_as_bytes() -> None:
    (event,) = feed_all([b"data: \xff\xfe\n\n"])
    assert event.data == b"\xff\xfe"


@pytest.mark.parametrize("cut", [1, 2, 3, 4, 100])
def test_a_byte_order_mark_starting_the_stream_is_not_part_of_its_first_line(cut: int) -> None:
    # it made the first line `\ufeffdata: …`, an unknown field: the probe's answer recorded empty
    stream = b"\xef\xbb\xbfdata: {\"id\":1}\n\ndata: \xef\xbb\xbfkept\n\n"
    events = feed_all([stream[:cut], stream[cut:]])
    assert [e.data for e in events] == [b'{"id":1}', b"\xef\xbb\xbfkept"]  # only the stream's first is dropped


def test_a_stream_of_only_part_of_a_byte_order_mark_is_pending() -> None:
    parser = SseParser()
    assert parser.feed(b"\xef\xbb") == [] and parser.pending
    assert parser.feed(b"x") == [] and parser.pending  # not a mark after all: the start of a line


# --- hypothesis: chunking never changes the events ---------------------------------------------

_field_value = st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
_line = st.one_of(
    _field_value.map(lambda v: b"data: " + v),
    _field_value.map(lambda v: b"data:" + v),
    st.sampled_from([b"event: message", b"event: ping", b"id: 7", b"retry: 100", b": comment", b"data"]),
)
_event = st.lists(_line, min_size=1, max_size=4)
_eol = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    out = bytearray()
    for lines in draw(st.lists(_event, max_size=6)):
        eol = draw(_eol)
        out += eol.join(lines) + eol + eol
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(stream=streams(), cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_any_chunking_gives_the_same_events(stream: bytes, cuts: list[int]) -> None:
    points = sorted({c % (len(stream) + 1) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert b"".join(chunks) == stream
    assert simple(feed_all(chunks)) == simple(feed_all([stream]))


@settings(max_examples=200, deadline=None)
@given(stream=streams())
def test_byte_by_byte_equals_whole(stream: bytes) -> None:
    whole = feed_all([stream])
    assert [(e.event, e.data, e.id, e.retry, e.comments) for e in feed_all([bytes([b]) for b in stream])] == [
        (e.event, e.data, e.id, e.retry, e.comments) for e in whole
    ]
