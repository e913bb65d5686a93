"""Bounded decoding of HTTP bodies for the capture: never more than the bound in memory.

A client controls a body's `Content-Encoding`: 255 KB of gzip can decode to 256 MiB. The recorder
decodes incrementally (zlib `max_length`, brotli `output_buffer_limit`, zstd `max_length`) and stops
one byte past the bound, so what it holds for recording is the bound, whatever the ratio. Decoding
also stops there: counting the rest would cost the proxy's event loop about a second per 256 MiB.
The relayed traffic is never touched: this only reads `raw_content`.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import brotli

# The standard library has zstd from 3.14 (PEP 784); before, its backport (a declared dependency)
if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

DEFAULT_MAX_BODY: Final = 16 * 1024 * 1024
"""Bytes of one body (decoded) or one SSE event recorded at most; the rest is counted, not kept."""

_STEP: Final = 256 * 1024
"""Decoded bytes produced per decoder call: the most held beyond the bound at any moment."""


@dataclass(slots=True, frozen=True)
class BoundedBody:
    """At most `limit` bytes of a body, and what is known of the rest."""

    data: bytes
    """The first bytes of the (decoded) body, at most the bound."""
    truncated: bool
    """The body was longer than the bound."""
    decoded_len: int | None
    """The full decoded size, when known (None: decoding stopped at the bound)."""
    decoded: bool
    """A Content-Encoding was decoded (else `data` is a prefix of the wire bytes)."""
    undecodable: bool = False
    """A Content-Encoding was named but the body does not decode with it (or it is one mitmproxy
    cannot decode): `data` is the wire bytes, and the capture says so."""


def _zlib(raw: bytes, wbits: int) -> Iterator[bytes]:
    d = zlib.decompressobj(wbits)
    buf = raw
    while True:
        piece = d.decompress(buf, _STEP)
        buf = d.unconsumed_tail
        if piece:
            yield piece
        if d.eof or (not piece and not buf):
            return


def _deflate(raw: bytes) -> Iterator[bytes]:
    # like mitmproxy: zlib-wrapped first, else raw deflate (servers send both as "deflate")
    it = _zlib(raw, zlib.MAX_WBITS)
    try:
        first = next(it, None)
    except zlib.error:
        yield from _zlib(raw, -zlib.MAX_WBITS)
        return
    if first is not None:
        yield first
        yield from it


def _brotli(raw: bytes) -> Iterator[bytes]:
    d = brotli.Decompressor()
    piece = d.process(raw, output_buffer_limit=_STEP)
    while True:
        if piece:
            yield piece
        if d.is_finished() or not piece:
            return
        piece = d.process(b"", output_buffer_limit=_STEP)  # what the input still holds


def _zstd(raw: bytes) -> Iterator[bytes]:
    d = zstd.ZstdDecompressor()
    piece = d.decompress(raw, _STEP)
    while True:
        if piece:
            yield piece
        if d.eof or d.needs_input:
            return
        piece = d.decompress(b"", _STEP)


_DECODERS: Final = {"gzip": lambda raw: _zlib(raw, 47), "deflate": _deflate, "br": _brotli, "zstd": _zstd}
"""mitmproxy's encodings (gzip also accepts zlib data, as mitmproxy's wbits 47 does)."""


def undecodable_name(encoding: str) -> bool:
    """Whether a `Content-Encoding` names an encoding the recorder cannot undo (not identity, and not
    one of mitmproxy's: gzip, deflate, br, zstd)."""
    return encoding.strip().lower() not in ("", "identity", *_DECODERS)


class StreamDecoder:
    """A stream's `Content-Encoding` undone as its chunks pass (an event stream the server compresses).

    `feed` yields a chunk's decoded bytes a step at a time, so a chunk that decodes to a lot is never
    held whole; it raises one of `DECODE_ERRORS` when the bytes are not what the encoding says. A
    stream of several members (gzip) or frames (zstd) is read on from one to the next.
    """

    __slots__ = ("_decoder", "_head", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._head = b""
        """deflate: the first bytes, until they tell zlib-wrapped from raw deflate."""
        self._decoder: Any = None if name == "deflate" else self._new()

    @staticmethod
    def for_encoding(encoding: str) -> StreamDecoder | None:
        """The decoder of a `Content-Encoding` the recorder knows (gzip, deflate, br, zstd), else None."""
        name = encoding.strip().lower()
        return StreamDecoder(name) if name in _DECODERS else None

    def _new(self, wbits: int | None = None) -> Any:
        if self.name == "br":
            return brotli.Decompressor()
        if self.name == "zstd":
            return zstd.ZstdDecompressor()
        return zlib.decompressobj(47 if wbits is None else wbits)  # gzip also accepts zlib data

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        if self._decoder is None:  # deflate: servers send it zlib-wrapped or raw, as mitmproxy knows
            self._head += chunk
            if len(self._head) < 2:
                return
            cmf, flg = self._head[0], self._head[1]
            wrapped = cmf & 0x0F == 8 and (cmf << 8 | flg) % 31 == 0
            self._decoder = self._new(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
            chunk, self._head = self._head, b""
        while chunk:
            d = self._decoder
            if self.name == "br":
                # called again without input while it has output left: it holds the rest meanwhile
                piece = d.process(chunk, output_buffer_limit=_STEP)
                while piece:
                    yield piece
                    piece = d.process(b"", output_buffer_limit=_STEP)
                return  # what follows the end of a brotli stream is not read (nor by clients)
            piece = d.decompress(chunk, _STEP)
            while piece:
                yield piece
                if d.eof or (self.name == "zstd" and d.needs_input):
                    break
                piece = d.decompress(b"" if self.name == "zstd" else d.unconsumed_tail, _STEP)
            if not d.eof or self.name == "deflate":
                return
            chunk = d.unused_data  # the next gzip member or zstd frame, when one follows in this chunk
            self._decoder = self._new()


DECODE_ERRORS: Final = (zlib.error, brotli.error, zstd.ZstdError, ValueError, EOFError)
"""What a decoder raises on bytes that are not in its encoding."""


def bounded_body(raw: bytes, encoding: str | None, limit: int) -> BoundedBody:
    """At most `limit` bytes of a body with `Content-Encoding` `encoding`, decoded when mitmproxy knows it.

    Like mitmproxy's `get_content(strict=False)`, a body that does not decode (or names an unknown
    encoding) is taken as it is on the wire.
    """
    name = encoding.strip().lower() if encoding else ""
    decoder = _DECODERS.get(name)
    undecodable = bool(raw) and undecodable_name(name)
    if decoder is not None and raw:
        out = bytearray()
        try:
            for piece in decoder(raw):
                room = limit - len(out)
                if len(piece) > room:
                    out += piece[:room]
                    return BoundedBody(bytes(out), True, None, True)
                out += piece
        except DECODE_ERRORS:
            undecodable = True  # not what it claims: record the wire bytes
        else:
            return BoundedBody(bytes(out), False, len(out), True)
    if len(raw) > limit:
        return BoundedBody(raw[:limit], True, len(raw), False, undecodable)
    return BoundedBody(raw, False, len(raw), False, undecodable)
