"""Input kinds besides plain JSONL captures: what a file is (from its content) and how to stream it.

The loader (`analyzer.load`) reads every capture as a stream of lines; this module opens that
stream. A capture compressed by logrotate (`*.jsonl.gz`, `*.jsonl.zst`) is decompressed as it is
read, a piece at a time, never whole: its lines, line numbers (`file:line` evidence counts the lines
of the decompressed stream), malformed and torn lines are those of the plain file.

The kind is told by the first bytes (gzip and zstd magic numbers), so a capture compressed under
another name is still read, and a file named `.gz` that is not compressed is read as what it is.
A zlib stream has no magic number worth the name, so only a file named `*.zhar` (mitmproxy's
compressed HAR export) is read as one, when its first bytes are a zlib header.

A compressed stream can end early (a copy cut short, a disk that filled while logrotate wrote it)
or be corrupt part way. Everything before that point is read; the stream then ends, and
`CutStream.cut` says why, so the loader reports the last line as torn rather than failing.
"""

from __future__ import annotations

import codecs
import gzip
import io
import re
import sys
import zlib
from collections.abc import Iterator
from typing import Final

from analyzer.storage import RawOver, open_binary

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the backport mitmproxy already depends on (declared in pyproject.toml for these versions)
    from backports import zstd

HAR: Final = "har"
FLOWS: Final = "flows"
_HEAD: Final = 64 << 10
_TNETSTRING: Final = re.compile(rb"^\d{1,12}:")

GZIP: Final = "gzip"
ZSTD: Final = "zstd"
ZLIB: Final = "zlib"
PLAIN: Final = "plain"
ZHAR: Final = ".zhar"
"""mitmproxy's HAR export (`save.har`, `hardump`) compresses a file so named with zlib."""

_MAGIC: Final = ((b"\x1f\x8b", GZIP), (b"\x28\xb5\x2f\xfd", ZSTD))
COMPRESSED_SUFFIXES: Final = (".gz", ".zst")
"""Name endings of compressed captures: found in directories (`*.jsonl.gz`) and left out of capture ids."""


def compression_of(head: bytes, name: str = "") -> str:
    """`GZIP`, `ZSTD` or `PLAIN`, from the first bytes of a file (at least four); `ZLIB` for a zlib
    stream named `*.zhar` (its two header bytes are too common to be told by content alone)."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if name.lower().endswith(ZHAR) and len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        return ZLIB
    return PLAIN


def strip_compression(name: str) -> str:
    """`x.001.jsonl` for `x.001.jsonl.gz` or `x.001.jsonl.zst`; other names unchanged."""
    for suffix in COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


class _Inflater(RawOver):
    """A zlib stream decompressed as read, a bounded piece at a time (a small stream can inflate to
    gigabytes). Raises `EOFError` where it ends early and `zlib.error` where it is corrupt."""

    def __init__(self, raw: io.BufferedReader) -> None:
        super().__init__(raw)
        self._z = zlib.decompressobj()

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._z.eof:
            data = self._z.unconsumed_tail or self._inner.read(_READ)
            if not data:
                raise EOFError("the zlib stream ends early")
            out = self._z.decompress(data, len(buffer))
            if out:
                buffer[: len(out)] = out
                return len(out)
        return 0


_READ: Final = 64 << 10


class CutStream(RawOver):
    """A decompressing reader that ends where its stream stops making sense instead of raising.

    `cut` is None while the stream is whole, otherwise why it ended early. Reading errors of the
    file itself (`OSError` other than the decompressors' own) still raise: those are input errors.
    """

    def __init__(self, inner: io.BufferedIOBase | io.BufferedReader | zstd.ZstdFile, kind: str) -> None:
        super().__init__(inner)
        self.kind = kind
        self.cut: str | None = None

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.cut is not None:
            return 0
        try:
            # read1: at most one read of the decompressor, so a failing one loses none of the data
            # before it (a buffered read of many would drop what it gathered when the last raises)
            data = self._inner.read1(len(buffer))
            buffer[: len(data)] = data
            return len(data)
        except EOFError:
            self.cut = f"the {self.kind} stream ends early (the file was cut short)"
        except (gzip.BadGzipFile, zlib.error, zstd.ZstdError) as exc:
            self.cut = f"the {self.kind} stream is corrupt from here on ({exc})"
        return 0


def open_stream(path: str, data: bytes | None = None) -> io.BufferedReader | CutStream:
    """The file's bytes as a stream: decompressed as read when it is gzip or zstd. `path` may be
    an object's URL (`analyzer.storage.open_binary`), read as a local file is; `data`: the file's
    bytes, fetched already (`path` is then not opened).

    Raises `OSError` when the file cannot be opened or read.
    """
    # handed over to the stream returned, which closes it
    raw = open_binary(path) if data is None else io.BufferedReader(io.BytesIO(data))
    try:
        kind = compression_of(raw.peek(4)[:4], path)
    except BaseException:
        raw.close()
        raise
    if kind == GZIP:
        return CutStream(gzip.GzipFile(fileobj=raw, mode="rb"), GZIP)
    if kind == ZLIB:
        return CutStream(io.BufferedReader(_Inflater(raw)), ZLIB)
    if kind == ZSTD:
        return CutStream(zstd.ZstdFile(raw, mode="rb"), ZSTD)
    return raw


class Opened:
    """A (decompressed) file opened once for its first line and then read from its start.

    The pieces start with the bytes the first line came from: an object at a URL is not asked again
    for its first bytes (a ranged request, and the look-up that opening it costs). A plain stream
    seeks back within its buffer; a decompressor cannot go back, so the line read is handed on as
    `head`, what comes before the stream's remaining bytes. `data`: the file's bytes, fetched
    already. Raises `OSError` as `open_stream` does.
    """

    def __init__(self, path: str, limit: int = 0, data: bytes | None = None) -> None:
        self._stream = open_stream(path, data)
        self._path, self._data = path, data
        self.reader: io.BufferedReader | CutStream = self._stream
        self.first = b""
        """The first line, at most `limit` bytes (nothing read when `limit` is 0)."""
        self.head = b""
        try:
            if limit and isinstance(self._stream, CutStream):
                self.reader = io.BufferedReader(self._stream)
                self.first = self.head = self.reader.readline(limit)
            elif limit:
                assert isinstance(self.reader, io.BufferedReader)
                self.first = self.reader.readline(limit)
                self.reader.seek(0)
        except BaseException:
            self.close()
            raise

    def again(self) -> Opened:
        """The same file opened anew, from its start (from the same bytes when they were given)."""
        return Opened(self._path, 0, self._data)

    @property
    def compressed(self) -> bool:
        """Whether the file is decompressed as it is read (its pieces are `pieces(reader, size, head)`)."""
        return isinstance(self._stream, CutStream)

    @property
    def cut(self) -> str | None:
        """Why a compressed stream ended early (`CutStream.cut`); None for a whole or plain one."""
        return self._stream.cut if isinstance(self._stream, CutStream) else None

    def close(self) -> None:
        try:
            self.reader.close()
        finally:
            self._stream.close()

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def first_line(path: str, limit: int) -> bytes:
    """The first line of the (decompressed) file, at most `limit` bytes. Raises `OSError`."""
    with open_stream(path) as f:
        if isinstance(f, CutStream):
            return io.BufferedReader(f).readline(limit)
        return f.readline(limit)


def pieces(f: CutStream | io.BufferedReader, size: int, head: bytes = b"") -> Iterator[bytes]:
    """A decompressed stream in pieces of about `size` bytes, each cut after a newline (only the last
    may lack one), as `analyzer.load` reads plain files. A decompressor cannot seek back cheaply, so
    what follows the cut is carried over to the next piece instead. `head`: bytes read from the
    stream already (`Opened`), its first."""
    rest: list[bytes] = []  # what follows the last newline read: never holds a newline
    chunk = head + _read_up_to(f, size)
    while chunk:
        cut = chunk.rfind(b"\n") + 1
        if cut == 0:
            # a line longer than a piece: its blocks are joined once, at its newline (joined at each
            # block, a line of L bytes cost L²/size bytes copied and searched: 20 s at 400 MB)
            rest.append(chunk)
        else:
            yield b"".join([*rest, chunk[:cut]])
            rest = [chunk[cut:]] if cut < len(chunk) else []
        chunk = _read_up_to(f, size)
    if rest:
        yield b"".join(rest)


def _read_up_to(f: CutStream | io.BufferedReader, size: int) -> bytes:
    """`size` bytes, fewer only at the end: a decompressor hands out a block at a time."""
    parts: list[bytes] = []
    got = 0
    while got < size and (block := f.read(size - got)):
        parts.append(block)
        got += len(block)
    return b"".join(parts)


def foreign_kind(path: str) -> str | None:
    """`HAR` or `FLOWS` when the (decompressed) file looks like a HAR document or a mitmproxy dump,
    else None. Told by content: a JSON object with `"log"` near its start, a tnetstring (`123:`).
    A file named `.har` (or `.zhar`) is taken for HAR whatever it holds, so garbage under that name gets
    the HAR reader's clear error rather than a silent skip. Raises `OSError`."""
    with open_stream(path) as f:
        head = _read_up_to(f, _HEAD) if isinstance(f, CutStream) else f.read(_HEAD)
    text = head.removeprefix(codecs.BOM_UTF8).lstrip()
    name = strip_compression(path.lower())
    if (text.startswith(b"{") and b'"log"' in text) or name.endswith(".har") or name.endswith(ZHAR):
        return HAR
    if _TNETSTRING.match(head):
        return FLOWS
    return None


def separator(unit: str) -> str:
    """What joins a file and a location of `unit`: `:` for lines, `#entry=` and `#flow=` otherwise."""
    return ":" if unit == "line" else f"#{unit}="


def location(file: str, at: int, unit: str = "line") -> str:
    """Where evidence is, as a user opens it: `file:line`, `file#entry=N` (HAR), `file#flow=N` (dumps)."""
    return f"{file}{separator(unit)}{at}"
