"""The hash chain that makes a capture tamper-evident (see "Hash chain" in `captures/FORMAT.md`).

Every line the writer produces ends with `,"chain":"<n>:<D>"}` and its newline: `n` counts the
lines of the part from 1 (the header), and `D` is the digest, 43 characters of unpadded base64,
of the previous line's digest followed by every byte of this line before `D` itself. So the
digest covers the record exactly as written (no re-encoding is needed to check it), its place in
the part, and everything before it. The recorders write BLAKE3 (`blake3`), or BLAKE3 in its keyed
mode with a key (`blake3-keyed`), so that only the key holder can compute a chain that verifies.
Chains of SHA-256 (`sha256`) and HMAC-SHA256 (`hmac-sha256`), what the recorders wrote before,
verify as they always did (and can still be written, `Chainer(algorithm=...)`). BLAKE3 because every
byte recorded is hashed: on a CPU with SHA instructions BLAKE3 (AVX2) hashes a megabyte in about
half of SHA-256's time, which is what a recorder of megabyte messages pays (bench/README.md).

Both sides use this module: the writer seals lines, `analyzer.verify` checks them.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import os
import stat
from pathlib import Path
from typing import Final

import blake3

from addon.errors import ErascopeError

SHA256: Final = "sha256"
"""`chain_alg` of an unkeyed chain: anyone can recompute it (detects edits, not forgers)."""
HMAC_SHA256: Final = "hmac-sha256"
"""`chain_alg` of a keyed chain: only holders of the key can compute digests that verify."""
BLAKE3: Final = "blake3"
"""`chain_alg` of an unkeyed BLAKE3 chain (what the recorders write without a key)."""
BLAKE3_KEYED: Final = "blake3-keyed"
"""`chain_alg` of a BLAKE3 chain in its keyed mode (what the recorders write with a key); the 32-byte
BLAKE3 key is derived from the key file's bytes (`blake3_key`)."""
ALGORITHMS: Final = frozenset({SHA256, HMAC_SHA256, BLAKE3, BLAKE3_KEYED})
KEYED: Final = frozenset({HMAC_SHA256, BLAKE3_KEYED})
"""The algorithms that need a key."""
DEFAULT: Final = BLAKE3
"""What a writer chains with when it is not told otherwise and has no key."""
DEFAULT_KEYED: Final = BLAKE3_KEYED
"""What a writer chains with when it is not told otherwise and has a key."""
BLAKE3_KEY_CONTEXT: Final = "erascope 2026-12-02 capture chain key"
"""BLAKE3's key-derivation context: `blake3-keyed`'s key is BLAKE3-derive_key(this, the key file's bytes)."""

DIGEST_SIZE: Final = 32
DIGEST_CHARS: Final = 43
"""Length of a digest in base64 without padding."""
START: Final = bytes(DIGEST_SIZE)
"""The "previous digest" of the first line of a capture's first part."""
FIELD_OPEN: Final = b',"chain":"'
"""What precedes the line index in every sealed line."""
TAIL: Final = b'"}\n'
"""What follows the digest: the end of the record and of the line."""
SEAL_TAIL_LEN: Final = DIGEST_CHARS + len(TAIL)
"""Bytes at the end of a sealed line that the digest does not cover (the digest and `TAIL`)."""
MIN_KEY_BYTES: Final = 16
MAX_KEY_BYTES: Final = 1 << 20
"""A key file is a few random bytes; a file beyond this was given by mistake."""
_BLOCK: Final = 64
"""SHA-256's block size: HMAC pads the key to it."""
_COPY_LIMIT: Final = 64 << 10
_KEY_ID_LABEL: Final = b"erascope chain key id"


def encode(digest: bytes) -> bytes:
    """A digest as it is written: base64 (standard alphabet) without its `=` padding."""
    return binascii.b2a_base64(digest, newline=False)[:DIGEST_CHARS]


def decode(text: str | bytes) -> bytes | None:
    """The 32 bytes a written digest stands for, or None when it is not one."""
    if isinstance(text, str):
        text = text.encode("ascii", "replace")
    if len(text) != DIGEST_CHARS:
        return None
    try:
        raw = binascii.a2b_base64(text + b"=", strict_mode=True)
    except binascii.Error:
        return None
    return raw if len(raw) == DIGEST_SIZE else None


def load_key(path: str | Path) -> bytes:
    """The chain key in `path`: the file's bytes, surrounding whitespace removed (so a key written by
    `openssl rand -base64 32 > FILE` works as is); a pipe is read to its end. Raises `ErascopeError`
    when it is unreadable, shorter than 16 bytes or longer than 1 MiB, or a pipe nothing was written to."""
    try:
        # Opened without waiting: opening a FIFO no writer has open waits for one, forever when none
        # comes. Then read as usual: a pipe whose writer is there (`--key <(pass show audit)`) is read
        # whole, and one without a writer reads as empty.
        fd = os.open(Path(path).expanduser(), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            os.set_blocking(fd, True)
            fifo = stat.S_ISFIFO(os.fstat(fd).st_mode)
            with open(fd, "rb", closefd=False) as f:
                # read within a bound: a big file given by mistake (or /dev/zero) must not be held whole
                key = f.read(MAX_KEY_BYTES + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise ErascopeError(f"cannot read the chain key {path}: {exc.strerror or exc}") from exc
    if fifo and not key:
        raise ErascopeError(
            f"the chain key {path} is a pipe with nothing written to it: give the key file itself,"
            " or start what writes the key first"
        )
    if len(key) > MAX_KEY_BYTES:
        raise ErascopeError(
            f"the chain key {path} is larger than 1 MiB: not a key file; use 16 or more random bytes"
            " (e.g. `openssl rand -base64 32 > FILE`)"
        )
    key = key.strip()
    if len(key) < MIN_KEY_BYTES:
        raise ErascopeError(
            f"the chain key {path} holds {len(key)} byte(s); use at least {MIN_KEY_BYTES} random bytes"
            " (e.g. `openssl rand -base64 32 > FILE`)"
        )
    return key


def key_id(key: bytes) -> str:
    """A short public name of a key (`chain_key_id`), so a verifier can tell "another key" from "tampered".

    An HMAC of a fixed label: it reveals nothing about the key beyond what any digest does.
    """
    return hmac.digest(key, _KEY_ID_LABEL, "sha256")[:8].hex()


def blake3_key(key: bytes) -> bytes:
    """The 32-byte BLAKE3 key of a `blake3-keyed` chain, derived from the key file's bytes."""
    return blake3.blake3(key, derive_key_context=BLAKE3_KEY_CONTEXT).digest()


class Chainer:
    """Computes a chain's digests with `algorithm` (one of `ALGORITHMS`; by default BLAKE3, keyed when
    given a key). Raises `ValueError` for an unknown algorithm, or a key given or missing for it."""

    __slots__ = ("_inner", "_outer", "alg", "key_id")

    def __init__(self, key: bytes | None = None, algorithm: str | None = None) -> None:
        if algorithm is None:
            algorithm = DEFAULT if key is None else DEFAULT_KEYED
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown chain algorithm {algorithm!r}")
        if (key is not None) != (algorithm in KEYED):
            raise ValueError(f"chain algorithm {algorithm} {'needs' if key is None else 'takes no'} key")
        self.alg: str = algorithm
        self.key_id: str | None = None if key is None else key_id(key)
        # A prepared state copied per line (`seal_lines`): hashlib's SHA-256 and blake3's hasher both copy.
        self._inner: hashlib._Hash | blake3.blake3 = hashlib.sha256()
        self._outer: hashlib._Hash | None = None
        if algorithm == BLAKE3:
            self._inner = blake3.blake3()
        elif algorithm == BLAKE3_KEYED:
            assert key is not None
            self._inner = blake3.blake3(key=blake3_key(key))
        elif key is not None:
            # HMAC (RFC 2104) from two prepared SHA-256 states, copied per line: the key schedule is paid
            # once, and a line costs a few C calls instead of the `hmac` module's Python-level copy.
            block = (hashlib.sha256(key).digest() if len(key) > _BLOCK else key).ljust(_BLOCK, b"\0")
            self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
            self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    def digest(self, previous: bytes, *covered: bytes | memoryview) -> bytes:
        """The digest of a line: `previous` (32 bytes) then the covered bytes, in order."""
        h = self._inner.copy()
        h.update(previous)
        for piece in covered:
            h.update(piece)
        if self._outer is None:
            return h.digest()
        outer = self._outer.copy()
        outer.update(h.digest())
        return outer.digest()

    def header_fields(self, previous: bytes | None) -> dict[str, str | None]:
        """The fields a part's header declares its chain with (`chain_prev` only after a rotation)."""
        fields: dict[str, str | None] = {"chain_alg": self.alg}
        if self.key_id is not None:
            fields["chain_key_id"] = self.key_id
        if previous is not None:
            fields["chain_prev"] = encode(previous).decode("ascii")
        return fields


class Pieced:
    """An encoded record in pieces (`pieces`, `size` bytes in all; the last ends with `}` and the
    newline): a long line, never joined. Made by `pieced`, so it is at least `_COPY_LIMIT` bytes long,
    and sealed like a big line, its pieces written as they are."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: list[bytes | memoryview], size: int) -> None:
        self.pieces = pieces
        self.size = size

    def __len__(self) -> int:
        return self.size


def pieced(pieces: list[bytes | memoryview]) -> bytes | Pieced:
    """An encoded record given in `pieces`: as `Pieced` when long, else joined (cheap, and `seal_lines`
    seals a short line as one `bytes`)."""
    size = sum(map(len, pieces))
    return Pieced(pieces, size) if size >= _COPY_LIMIT else b"".join(pieces)


def seal(
    chainer: Chainer, previous: bytes, line: bytes | Pieced, index: int
) -> tuple[list[bytes | memoryview], bytes]:
    """Seal one encoded record (`line`: a JSON object and its newline, as orjson writes it).

    Returns the pieces to write in one system call, and the new digest. A line is one piece (one
    `os.write`: the cheapest call) unless it is big, when copying it would cost more than `writev`.
    """
    if isinstance(line, Pieced):
        body = line.pieces[:-1]
        body.append(memoryview(line.pieces[-1])[:-2])
        opening = b"%b%d:" % (FIELD_OPEN, index)
        digest = chainer.digest(previous, *body, opening)
        return [*body, opening, encode(digest) + TAIL], digest
    if len(line) < _COPY_LIMIT:
        head = b"%b%b%d:" % (line[:-2], FIELD_OPEN, index)  # the object without its closing `}` and newline
        # `Chainer.digest` inlined: this runs once per record, and every call counts at this size
        h = chainer._inner.copy()
        h.update(previous)
        h.update(head)
        digest = h.digest()
        if chainer._outer is not None:
            outer = chainer._outer.copy()
            outer.update(digest)
            digest = outer.digest()
        return [head + binascii.b2a_base64(digest, newline=False)[:DIGEST_CHARS] + TAIL], digest
    body = memoryview(line)[:-2]
    opening = b"%b%d:" % (FIELD_OPEN, index)
    digest = chainer.digest(previous, body, opening)
    return [body, opening, encode(digest) + TAIL], digest


_HEAD: Final = b"%.*b" + FIELD_OPEN + b"%d:"
"""A line's covered bytes: the encoded object without its closing `}` and newline, then `,"chain":"<n>:`."""
_SEALED: Final = b'%b%.43b"}\n'
"""The covered bytes, the digest (its base64 without the padding `=`), and `TAIL`."""


def seal_lines(
    chainer: Chainer, previous: bytes, lines: list[bytes | Pieced], index: int
) -> tuple[list[bytes | memoryview], int, bytes]:
    """Seal `lines` (encoded records, numbered from `index + 1` in their part) after `previous`.

    Returns the pieces to write in one system call, their total size, and the last line's digest.
    Same bytes as `seal` line by line; this loop runs once per record written, so it is `seal`'s
    small-line path inlined, in as few calls and copies as Python allows.
    """
    copy = chainer._inner.copy
    outer = chainer._outer
    b2a = binascii.b2a_base64
    pieces: list[bytes | memoryview] = []
    size = 0
    digest = previous
    for line in lines:
        index += 1
        n = len(line)
        if n < _COPY_LIMIT:
            head = _HEAD % (n - 2, line, index)
            h = copy()
            h.update(digest + head)  # one call into the hashing library instead of two (~2,000 instructions each)
            digest = h.digest()
            if outer is not None:
                h = outer.copy()
                h.update(digest)
                digest = h.digest()
            sealed = _SEALED % (head, b2a(digest))  # `_SEALED` keeps 43 characters: no padding, no newline
            pieces.append(sealed)
            size += len(sealed)
        else:
            big, digest = seal(chainer, digest, line, index)
            pieces += big
            for piece in big:
                size += len(piece)
    return pieces, size, digest


def split(line: bytes) -> tuple[int, bytes, memoryview] | None:
    """A sealed line's (index, written digest, covered bytes), or None when the line is not sealed."""
    if not line.endswith(TAIL) or len(line) < SEAL_TAIL_LEN + len(FIELD_OPEN) + 3:
        return None
    cut = len(line) - SEAL_TAIL_LEN
    start = line.rfind(FIELD_OPEN, 0, cut)
    if start < 0:
        return None
    number = line[start + len(FIELD_OPEN) : cut]
    seal = parse_seal(number[:-1], line[cut : cut + DIGEST_CHARS]) if number.endswith(b":") else None
    if seal is None:
        return None
    return seal[0], seal[1], memoryview(line)[:cut]


def parse_seal(number: bytes, digest: bytes) -> tuple[int, bytes] | None:
    """A seal's (index, digest) from its written parts, `<n>` and `<D>` of `<n>:<D>`, or None when they
    are not one (ASCII digits, at most 20 of them; a digest `decode` reads)."""
    if not number.isdigit() or len(number) > 20:
        return None
    written = decode(digest)
    return None if written is None else (int(number), written)
