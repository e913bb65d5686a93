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
from typing import Final

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

_ERRORS: Final = (zlib.error, brotli.error, zstd.ZstdError, ValueError, EOFError)


def bounded_body(raw: bytes, encoding: str | None, limit: int) -> BoundedBody:
    """At most `limit` bytes of a body with `Content-Encoding` `encoding`, decoded when mitmproxy knows it.

    Like mitmproxy's `get_content(strict=False)`, a body that does not decode (or names an unknown
    encoding) is taken as it is on the wire.
    """
    name = encoding.strip().lower() if encoding else ""
    decoder = _DECODERS.get(name)
    undecodable = bool(raw) and name not in ("", "identity") and decoder is None
    if decoder is not None and raw:
        out = bytearray()
        try:
            for piece in decoder(raw):
                room = limit - len(out)
                if len(piece) > room:
                    out += piece[:room]
                    return BoundedBody(bytes(out), True, None, True)
                out += piece
        except _ERRORS:
            undecodable = True  # not what it claims: record the wire bytes
        else:
            return BoundedBody(bytes(out), False, len(out), True)
    if len(raw) > limit:
        return BoundedBody(raw[:limit], True, len(raw), False, undecodable)
    return BoundedBody(raw, False, len(raw), False, undecodable)
