"""The hash chain itself (`addon.chain`), the writer's use of it, and `verify` on hostile files."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
from pathlib import Path

import blake3
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon import chain
from addon import format as fmt
from addon.errors import ErascopeError
from addon.writer import CaptureWriter
from analyzer.verify import Kind, Status, verify


def write_capture(out: Path, n: int = 5, key: bytes | None = None, **kw: object) -> list[Path]:
    """`n` small frames, and one of 100 kB in the middle (sealed without copying it: `writev`)."""
    with CaptureWriter(out, transport=fmt.STDIO, server="srv", chain_key=key, **kw) as w:  # type: ignore[arg-type]
        for i in range(n):
            data = b"%d" % i if i != n // 2 else b"x" * 100_000
            w.write({fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c", fmt.F_DIR: fmt.C2S, **fmt.payload_fields(data)})
    return w.paths


def documented_digest(algorithm: str, key: bytes, data: bytes) -> bytes:
    """`H` as FORMAT.md defines it for each `chain_alg`, from the reference libraries."""
    if algorithm == chain.SHA256:
        return hashlib.sha256(data).digest()
    if algorithm == chain.HMAC_SHA256:
        return hmac.digest(key, data, "sha256")
    if algorithm == chain.BLAKE3:
        return blake3.blake3(data).digest()
    derived = blake3.blake3(key, derive_key_context="erascope 2026-12-02 capture chain key").digest()
    return blake3.blake3(data, key=derived).digest()


@pytest.mark.parametrize("algorithm", [None, chain.BLAKE3, chain.SHA256])
@pytest.mark.parametrize("keyed", [False, True])
def test_digest_is_the_documented_formula(tmp_path: Path, algorithm: str | None, keyed: bool) -> None:
    """FORMAT.md: D = H(P || B), B = the line's bytes before D, P = the previous digest (zeros first);
    the recorders' default is BLAKE3 (keyed: `blake3-keyed`), SHA-256 chains are still written on request."""
    key = b"k" * 32
    chained_key = key if keyed else None
    if algorithm is not None and keyed:
        algorithm = {chain.BLAKE3: chain.BLAKE3_KEYED, chain.SHA256: chain.HMAC_SHA256}[algorithm]
    (path,) = write_capture(tmp_path, key=chained_key, chain_alg=algorithm)
    expected_alg = algorithm or (chain.BLAKE3_KEYED if keyed else chain.BLAKE3)
    assert orjson.loads(path.read_bytes().split(b"\n", 1)[0])[fmt.F_CHAIN_ALG] == expected_alg
    previous = bytes(32)
    for line in path.read_bytes().splitlines(keepends=True):
        cut = len(line) - chain.SEAL_TAIL_LEN
        covered, written = line[:cut], line[cut : cut + chain.DIGEST_CHARS]
        expected = documented_digest(expected_alg, key, previous + covered)
        assert chain.decode(written) == expected
        previous = expected
        assert orjson.loads(line)[fmt.F_CHAIN].endswith(written.decode())
    assert max(len(line) for line in path.read_bytes().splitlines()) > 100_000


@settings(deadline=None, max_examples=200)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=10**9))
def test_sealing_keeps_the_record_and_its_payload_lossless(data: bytes, index: int) -> None:
    record = {fmt.F_TYPE: fmt.FRAME, fmt.F_DIR: fmt.S2C, **fmt.payload_fields(data)}
    line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    previous = hashlib.sha256(data).digest()
    pieces, digest = chain.seal(chain.Chainer(), previous, line, index)
    sealed = b"".join(bytes(p) for p in pieces)
    parsed = orjson.loads(sealed)
    assert fmt.payload_bytes(parsed) == data
    assert {k: v for k, v in parsed.items() if k != fmt.F_CHAIN} == record
    split = chain.split(sealed)
    assert split is not None
    got_index, written, covered = split
    assert (got_index, written) == (index, digest)
    assert chain.Chainer().digest(previous, covered) == digest


@settings(deadline=None, max_examples=60)
@given(
    st.lists(st.sampled_from([0, 1, 250, 4_096, 70_000]), min_size=1, max_size=6),
    st.integers(min_value=0, max_value=10**6),
    st.booleans(),
)
def test_sealing_a_batch_gives_the_bytes_of_sealing_line_by_line(sizes: list[int], index: int, keyed: bool) -> None:
    """The writer seals a batch in one loop (`seal_lines`): the same bytes and digests as `seal`, small
    lines (copied) and big ones (pieces) mixed."""
    chainer = chain.Chainer(b"k" * 32 if keyed else None)
    lines = [orjson.dumps({fmt.F_TYPE: fmt.FRAME, fmt.F_RAW: "x" * n}, option=orjson.OPT_APPEND_NEWLINE) for n in sizes]
    pieces, size, digest = chain.seal_lines(chainer, chain.START, lines, index)
    expected: list[bytes] = []
    previous = chain.START
    for i, line in enumerate(lines, start=index + 1):
        sealed, previous = chain.seal(chainer, previous, line, i)
        expected.append(b"".join(bytes(p) for p in sealed))
    assert b"".join(bytes(p) for p in pieces) == b"".join(expected)
    assert size == sum(len(line) for line in expected)
    assert digest == previous


@settings(deadline=None, max_examples=60)
@given(
    st.lists(st.sampled_from([0, 1, 250, 4_096, 70_000]), min_size=1, max_size=6),
    st.lists(st.integers(min_value=1, max_value=80_000), max_size=8),
    st.booleans(),
)
def test_a_line_in_pieces_is_sealed_as_the_line_it_joins_to(sizes: list[int], cuts: list[int], keyed: bool) -> None:
    """A long record the writer encodes in pieces (`chain.pieced`) is sealed to the very bytes and digest of
    the joined line, in a batch with others."""
    chainer = chain.Chainer(b"k" * 32 if keyed else None)
    lines = [orjson.dumps({fmt.F_TYPE: fmt.FRAME, fmt.F_RAW: "x" * n}, option=orjson.OPT_APPEND_NEWLINE) for n in sizes]
    given: list[bytes | chain.Pieced] = []
    for line in lines:
        bounds = sorted({c % len(line) for c in cuts} | {0, len(line)})
        given.append(chain.pieced([memoryview(line)[a:b] for a, b in itertools.pairwise(bounds)]))
    assert [isinstance(line, chain.Pieced) for line in given] == [len(line) >= 64 << 10 for line in lines]
    pieces, size, digest = chain.seal_lines(chainer, chain.START, given, 41)
    joined, joined_size, joined_digest = chain.seal_lines(chainer, chain.START, list(lines), 41)
    assert (b"".join(pieces), size, digest) == (b"".join(joined), joined_size, joined_digest)


def test_split_refuses_what_is_not_a_sealed_line() -> None:
    sealed = b"".join(bytes(p) for p in chain.seal(chain.Chainer(), chain.START, b'{"type":"frame"}\n', 7)[0])
    assert chain.split(sealed) is not None and chain.split(sealed)[0] == 7  # type: ignore[index]
    assert chain.split(sealed[:-1]) is None  # no newline
    assert chain.split(b'{"type":"frame"}\n') is None
    assert chain.split(sealed.replace(b'"7:', b'"x:')) is None
    assert chain.split(sealed.replace(b'"7:', b'"7')) is None
    assert chain.decode("!" * 43) is None and chain.decode("A" * 42) is None


def test_key_file_rules(tmp_path: Path) -> None:
    good = tmp_path / "k"
    good.write_text("  0123456789abcdef0123\n")
    assert chain.load_key(good) == b"0123456789abcdef0123"
    assert chain.key_id(b"0123456789abcdef0123") == chain.key_id(chain.load_key(good))
    short = tmp_path / "s"
    short.write_text("short\n")
    with pytest.raises(ErascopeError, match="at least 16"):
        chain.load_key(short)
    with pytest.raises(ErascopeError, match="cannot read the chain key"):
        chain.load_key(tmp_path / "missing")


def test_a_key_file_of_any_size_is_read_within_a_bound(tmp_path: Path) -> None:
    """`--key` names a file of a few random bytes: a big file given by mistake was read whole (and
    `--key /dev/zero` until memory ran out, a MemoryError traceback); it is refused after 1 MiB."""
    big = tmp_path / "big"
    big.write_bytes(b"k" * (2 << 20))
    with pytest.raises(ErascopeError, match="larger than 1 MiB"):
        chain.load_key(big)
    edge = tmp_path / "edge"
    edge.write_bytes(b"k" * (1 << 20))
    assert len(chain.load_key(edge)) == 1 << 20


def test_parts_link_and_stay_within_the_rotation_size(tmp_path: Path) -> None:
    paths = write_capture(tmp_path, n=60, rotate_bytes=1200)
    assert len(paths) > 3
    assert sum(p.stat().st_size > 1200 for p in paths) == 1  # only the part of the 100 kB record
    result = verify([tmp_path])
    assert [f.status for f in result.files] == [Status.VERIFIED] * len(paths) and result.findings == []


def test_lines_appended_after_the_closing_record(tmp_path: Path) -> None:
    (path,) = write_capture(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    # a forger without a key recomputes a valid digest for a line added after part-end
    final = chain.decode(lines[-1][-chain.SEAL_TAIL_LEN : -len(chain.TAIL)]) or b""
    pieces, _ = chain.seal(chain.Chainer(), final, b'{"type":"frame"}\n', len(lines) + 1)
    path.write_bytes(b"".join(lines) + b"".join(bytes(p) for p in pieces))
    result = verify([path])
    assert [(f.kind, f.line) for f in result.findings] == [(Kind.APPENDED, len(lines) + 1)]


@pytest.mark.parametrize(
    "content",
    [
        b"\n",
        b"garbage\n",
        b'{"type":"header","format":"erascope/9"}\n',
        b'{"type":"header","format":"erascope/1","chain_alg":["x"]}\n',
        b'{"type":"header","format":"erascope/1","chain_alg":"md5"}\n',
        b'{"type":"header","format":"erascope/1","chain_alg":"sha256","chain_prev":7,"part":"x"}\n{"a":1,"chain":"2:x"}\n',
        b'{"type":"header","format":"erascope/1","chain_alg":"sha256","previous":["x"]}\n\xff\xfe\n{}\n',
        b'{"type":"header","format":"erascope/1","chain_alg":"hmac-sha256","chain_key_id":{}}\n',
    ],
)
def test_hostile_files_never_crash_verify(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.000.jsonl"
    path.write_bytes(content)
    result = verify([path], key=b"0123456789abcdef")
    (file,) = result.files
    assert file.status in (Status.ERROR, Status.TAMPERED)
    assert file.error or file.findings


def test_an_empty_file_is_a_part_never_begun_even_under_a_key(tmp_path: Path) -> None:
    """What a recorder stopped while opening a part leaves: cut at its very start, as a part cut
    after its header is never closed (`--key` or not), not tampering."""
    path = tmp_path / "x.000.jsonl"
    path.write_bytes(b"")
    (file,) = verify([path], key=b"0123456789abcdef").files
    assert (file.status, file.header_cut, file.findings, file.error) == (Status.UNCLOSED, True, [], None)


def test_a_fifo_is_an_error_not_a_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "x.000.jsonl")
    (file,) = verify([tmp_path]).files
    assert file.status is Status.ERROR and file.error == "not a regular file"


def test_a_chainer_refuses_an_unknown_algorithm_or_a_key_that_does_not_fit_it() -> None:
    with pytest.raises(ValueError, match="unknown"):
        chain.Chainer(None, "md5")
    with pytest.raises(ValueError, match="needs"):
        chain.Chainer(None, chain.BLAKE3_KEYED)
    with pytest.raises(ValueError, match="takes no"):
        chain.Chainer(b"k" * 32, chain.SHA256)
    assert (chain.Chainer().alg, chain.Chainer(b"k" * 32).alg) == (chain.BLAKE3, chain.BLAKE3_KEYED)


def test_a_key_file_nobody_writes_to_is_refused_not_waited_for(tmp_path: Path) -> None:
    """`--key` naming a FIFO (a key meant to be piped in, by a writer not started): opening it
    waited for a writer forever, and so did `verify` and the recorders (the host's server with them)."""
    import subprocess
    import sys

    fifo = tmp_path / "audit.key"
    os.mkfifo(fifo)
    code = "import sys; from analyzer.cli import main; sys.argv[0] = 'erascope'; main()"
    # the timeout only guards the run against the hang this is about
    proc = subprocess.run(
        [sys.executable, "-c", code, "verify", str(tmp_path), "--key", str(fifo)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"the chain key {fifo} is a pipe with nothing written to it" in proc.stderr
    with pytest.raises(ErascopeError, match="a pipe with nothing written to it"):
        chain.load_key(fifo)
    # a pipe with its writer there (`--key <(pass show audit)`) is read as a file is
    r, w = os.pipe()
    os.write(w, b"0123456789abcdef0123\n")
    os.close(w)
    try:
        assert chain.load_key(f"/dev/fd/{r}") == b"0123456789abcdef0123"
    finally:
        os.close(r)
