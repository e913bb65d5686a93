"""`erascope verify` on record lines that repeat a key (`{"type":"frame","type":"header",...}`).

JSON parsers differ on a repeated key: the analyzer's NDJSON reader takes the first, orjson the
last. A recorder writes every key once, so such a line was written by someone else, and whatever it
holds, verify must read it as the analyzer does: a line the analyzer reads as a frame starts no
capture, one it reads as a header starts one (FORMAT.md, Ordering), and an edited line stays a
changed line of its chain, located file:line. A key spelled with escapes (`"typ\\u0065"`) is the
same key to both parsers.

The captures are corpus captures written again by the real `CaptureWriter` (chained; unkeyed and keyed).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from addon import chain
from analyzer.load import extract_file
from analyzer.verify import Kind, Status, Verification, verify
from tests.test_verify_joined import FIRST, KEY, SECOND, _key_file, cli, found, join, lines, written

HEADER = b'"type":"header"'
FRAME = b'"type":"frame"'
ESCAPED_HEADER = b'"typ\\u0065":"header"'
"""A second `type` key both parsers read as `type`, though its bytes are not `"type"`."""


def _own_type(line: bytes) -> re.Match[bytes]:
    head = re.match(rb'\{"type":"[a-z.-]+"', line)
    assert head is not None, line[:80]
    return head


def after(line: bytes, member: bytes) -> bytes:
    """`line` with `member` (a `type` key) after its own `type`: the analyzer reads its own."""
    end = _own_type(line).end()
    return line[:end] + b"," + member + line[end:]


def before(line: bytes, member: bytes) -> bytes:
    """`line` with `member` (a `type` key) before its own `type`: the analyzer reads `member`."""
    return b"{" + member + b"," + line[1:]


def retyped(line: bytes, member: bytes) -> bytes:
    """`line` with its one `type` replaced by `member`."""
    return b"{" + member + line[_own_type(line).end() :]


def frame_at(text: list[bytes]) -> int:
    """The 1-based number of a frame line in the middle of a capture, with lines after it."""
    frames = [n for n, line in enumerate(text, 1) if line.startswith(b'{"type":"frame"')]
    k = frames[len(frames) // 2]
    assert 1 < k < len(text) - 1
    return k


def resealed(text: list[bytes], chainer: chain.Chainer) -> list[bytes]:
    """A forger's tool that keeps every byte of every record: each line's seal computed again, in order."""
    out: list[bytes] = []
    previous = chain.START
    for n, line in enumerate(text, 1):
        record = line[: line.rindex(chain.FIELD_OPEN)] + b"}\n"
        pieces, previous = chain.seal(chainer, previous, record, n)
        out.append(b"".join(bytes(p) for p in pieces))
    return out


def starts(result: Verification) -> list[int]:
    """The lines verify starts a capture (or part) at in the one file verified."""
    (file,) = result.files
    return [c.line for c in file.units]


def analyzer_starts(path: Path) -> list[int]:
    """The lines the analyzer starts a capture at in `path` (its first line, and each joined one)."""
    facts = extract_file(str(path))
    assert facts.skipped is None and facts.error is None
    return [1, *(j.line for j in facts.joined)]


@pytest.fixture(params=[None, KEY], ids=["unkeyed", "keyed"])
def capture(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[list[bytes], bytes | None]:
    (path,) = written(FIRST, tmp_path / "a", key=request.param)
    return lines(path), request.param


# --- a line inside a capture ---------------------------------------------------------------------
@pytest.mark.parametrize("second", [HEADER, ESCAPED_HEADER], ids=["plain", "escaped"])
def test_a_frame_with_a_second_type_key_is_a_changed_line_not_a_joined_capture(
    tmp_path: Path, capture: tuple[list[bytes], bytes | None], second: bytes
) -> None:
    """The analyzer reads the line as a frame of the capture it is in; verify must too: the edit
    is one changed line, and the lines after it are still that capture's, checked by its chain."""
    text, key = capture
    k = frame_at(text)
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"".join([*text[: k - 1], after(text[k - 1], second), *text[k:]]))
    assert analyzer_starts(path) == [1]
    result = verify([path], key=key)
    assert found(result) == [(Kind.CHANGED, k)]
    assert starts(result) == [1]
    (file,) = result.files
    assert (file.status, file.closed_at) == (Status.TAMPERED, len(text))
    args = [str(path)] + (["--key", str(_key_file(tmp_path, key))] if key else [])
    proc = cli(*args)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{path}:{k}: changed: " in proc.stdout


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda line: before(line, HEADER), id="header-first"),
        pytest.param(lambda line: before(line, ESCAPED_HEADER), id="escaped-header-first"),
        pytest.param(lambda line: retyped(line, HEADER), id="only-header"),
    ],
)
def test_a_line_edited_into_a_header_is_a_changed_line_of_its_chain(
    tmp_path: Path, capture: tuple[list[bytes], bytes | None], edit: object
) -> None:
    """The analyzer reads the line as a header; but it is sealed as the next line of the chain it
    is in (a capture's header is sealed as its line 1): an edited line, which starts nothing."""
    text, key = capture
    k = frame_at(text)
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"".join([*text[: k - 1], edit(text[k - 1]), *text[k:]]))  # type: ignore[operator]
    assert analyzer_starts(path) == [1, k]
    result = verify([path], key=key)
    assert found(result) == [(Kind.CHANGED, k)]
    assert starts(result) == [1]
    assert result.files[0].status is Status.TAMPERED


def test_a_part_end_read_only_by_its_last_type_key_does_not_close_the_part(
    tmp_path: Path, capture: tuple[list[bytes], bytes | None]
) -> None:
    """A line whose seal no longer ends it (reformatted) and whose second `type` says `part-end`:
    the analyzer reads a frame, so the part is not closed there and the lines after it are not appended."""
    text, key = capture
    k = frame_at(text)
    line = after(text[k - 1], b'"type":"part-end"').replace(b"\n", b" \n")
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"".join([*text[: k - 1], line, *text[k:]]))
    result = verify([path], key=key)
    assert found(result) == [(Kind.CHANGED, k)]
    assert result.files[0].closed_at == len(text)


# --- the header of a capture joined after another ------------------------------------------------
@pytest.fixture
def two(tmp_path: Path) -> tuple[list[bytes], list[bytes]]:
    (a,) = written(FIRST, tmp_path / "a")
    (b,) = written(SECOND, tmp_path / "b")
    return lines(a), lines(b)


def test_a_joined_header_read_as_a_frame_starts_no_capture(
    tmp_path: Path, two: tuple[list[bytes], list[bytes]]
) -> None:
    a, b = two
    m = len(a) + 1
    path = join([a, [before(b[0], FRAME), *b[1:]]], tmp_path / "both.jsonl")
    assert analyzer_starts(path) == [1]
    result = verify([path])
    assert starts(result) == [1]
    assert result.files[0].status is Status.TAMPERED
    assert result.findings[0].line == m


def test_a_joined_header_read_as_a_header_starts_its_capture(
    tmp_path: Path, two: tuple[list[bytes], list[bytes]]
) -> None:
    a, b = two
    m = len(a) + 1
    path = join([a, [after(b[0], FRAME), *b[1:]]], tmp_path / "both.jsonl")
    assert analyzer_starts(path) == [1, m]
    result = verify([path])
    assert starts(result) == [1, m]
    assert found(result) == [(Kind.CHANGED, m)]
    assert [c.status for c in result.files[0].captures] == [Status.VERIFIED, Status.TAMPERED]


def test_a_joined_part_is_read_by_its_first_part_key(tmp_path: Path) -> None:
    """A rotated part joined after its previous part goes on with it (`part` above 0); with a
    `part` of 0 before its own, the analyzer reads a capture of its own there, and so does verify."""
    parts = written(FIRST, tmp_path / "r", rotate_bytes=1500)
    text = [lines(p) for p in parts]
    header = text[1][0]
    assert b',"part":1,' in header
    text[1][0] = header.replace(b',"part":1,', b',"part":0,"part":1,', 1)
    path = join(text, tmp_path / "x.jsonl")
    m = len(text[0]) + 1
    assert m in analyzer_starts(path)
    result = verify([path])
    (file,) = result.files
    assert [(c.line, c.part, c.follows) for c in file.captures[:2]] == [(1, 0, False), (m, 0, False)]
    assert (Kind.CHANGED, m) in found(result)


# --- chains that hold: what verify reads the lines as, whatever the digests say --------------------
def test_lines_with_a_second_type_key_under_a_chain_that_holds_read_as_the_analyzer_reads_them(
    tmp_path: Path, two: tuple[list[bytes], list[bytes]]
) -> None:
    """An unkeyed chain recomputed over the edited lines (anyone can): every digest holds, and the
    captures verify finds are those the analyzer reads."""
    a, b = two
    chainer = chain.Chainer()
    k = frame_at(a)
    a = resealed([*a[: k - 1], after(a[k - 1], HEADER), *a[k:]], chainer)
    b = resealed([after(b[0], FRAME), *b[1:]], chainer)
    path = join([a, b], tmp_path / "both.jsonl")
    assert analyzer_starts(path) == [1, len(a) + 1]
    result = verify([path])
    assert result.findings == []
    assert starts(result) == [1, len(a) + 1]
    assert [c.status for c in result.files[0].captures] == [Status.VERIFIED, Status.VERIFIED]
