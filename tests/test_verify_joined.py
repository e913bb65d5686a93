"""`erascope verify` on captures joined into one file (`cat a.jsonl b.jsonl > both.jsonl`, `zcat
parts*.gz > x.jsonl`, a log shipper appending files): each capture in the file verifies as it does
in a file of its own, and rotated parts joined in order verify as the rotation they are.

The captures are corpus captures written again by the real `CaptureWriter` (which chains them),
whole or rotated into small parts, unkeyed and keyed. Every edit made in a joined file must be
found as it is found in the capture's own file: the same findings, on the joined file's lines.
"""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from addon import chain
from analyzer.verify import Kind, Status, Verification, verify
from tests.test_rotated_exchanges import SCENARIOS, rewrite

KEY = b"joined-captures-audit-key-0123456789"
FIRST = next(s for s in SCENARIOS if s.name == "auto-legacy-stdio")
SECOND = next(s for s in SCENARIOS if s.name == "auto-modern-http")


def written(scenario: Path, out: Path, *, rotate_bytes: int = 1 << 30, key: bytes | None = None) -> list[Path]:
    """The scenario's capture written again by the real writer (chained; keyed with `key`): its parts, in order."""
    return rewrite(next(scenario.glob("*.jsonl")), out, rotate_bytes, key)


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def join(parts: list[list[bytes]], out: Path) -> Path:
    out.write_bytes(b"".join(b"".join(p) for p in parts))
    return out


def found(result: Verification, offset: int = 0) -> list[tuple[Kind, int | None]]:
    return [(f.kind, None if f.line is None else f.line + offset) for f in result.findings]


def shifted(message: str, offset: int) -> str:
    """A finding's message with the file lines it names (not line indices) `offset` lines down."""
    return re.sub(
        r"(?<!index )\b(lines?) (\d+)(?: to (\d+))?",
        lambda m: f"{m[1]} {int(m[2]) + offset}" + (f" to {int(m[3]) + offset}" if m[3] else ""),
        message,
    )


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from analyzer.cli import main; sys.argv[0] = 'erascope'; main()"
    return subprocess.run([sys.executable, "-c", code, "verify", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path]:
    """Two single-part captures of different servers (stdio and HTTP), each in a folder of its own."""
    (a,) = written(FIRST, tmp_path / "a")
    (b,) = written(SECOND, tmp_path / "b")
    return a, b


@pytest.fixture(params=[None, KEY], ids=["unkeyed", "keyed"])
def rotated(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[list[Path], bytes | None]:
    """One capture rotated into small parts (unkeyed, and keyed with KEY)."""
    parts = written(FIRST, tmp_path / "r", rotate_bytes=1500, key=request.param)
    assert len(parts) >= 4
    return parts, request.param


# --- untouched captures, joined -------------------------------------------------------------------
def test_two_captures_joined_verify_as_they_do_apart(tmp_path: Path, two: tuple[Path, Path]) -> None:
    a, b = two
    both = join([lines(a), lines(b)], tmp_path / "both.jsonl")
    result = verify([both])
    assert result.findings == [] and result.notes == []
    (file,) = result.files
    assert file.status is Status.VERIFIED
    apart = [verify([p]).files[0] for p in (a, b)]
    assert [(c.line, c.status, c.closed_at, c.final) for c in file.captures] == [
        (1, Status.VERIFIED, apart[0].closed_at, apart[0].final),
        (len(lines(a)) + 1, Status.VERIFIED, len(lines(a)) + apart[1].closed_at, apart[1].final),  # type: ignore[operator]
    ]
    proc = cli(str(both))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{both}: 2 captures joined: verified" in proc.stdout
    assert f"line {len(lines(a)) + 1}: verified ({len(lines(b))} lines, closed" in proc.stdout
    report = orjson.loads(cli(str(both), "--format", "json").stdout)
    assert report["counts"]["verified"] == 1 and report["findings"] == []
    assert [c["line"] for c in report["files"][0]["captures"]] == [1, len(lines(a)) + 1]


def test_rotated_parts_joined_in_order_verify_as_their_rotation(
    tmp_path: Path, rotated: tuple[list[Path], bytes | None]
) -> None:
    parts, key = rotated
    joined = join([lines(p) for p in parts], tmp_path / "x.jsonl")
    result = verify([joined], key=key)
    assert result.findings == [] and result.notes == []
    (file,) = result.files
    assert file.status is Status.VERIFIED
    assert [(c.part, c.follows, c.status) for c in file.captures] == [
        (n, n > 0, Status.VERIFIED) for n in range(len(parts))
    ]
    assert file.captures[-1].final == verify([parts[-1].parent], key=key).files[-1].final
    args = [str(joined)] + (["--key", str(_key_file(tmp_path, key))] if key else [])
    proc = cli(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{joined}: {len(parts)} parts of one capture joined: verified" in proc.stdout


def _key_file(tmp_path: Path, key: bytes) -> Path:
    path = tmp_path / "audit.key"
    path.write_bytes(key)
    return path


def test_a_capture_and_a_rotation_joined_verify(tmp_path: Path, two: tuple[Path, Path]) -> None:
    """Single captures and the parts of a rotation in one stream, as a shipper appends them."""
    a, b = two
    parts = written(FIRST, tmp_path / "r", rotate_bytes=1500)
    joined = join([lines(a), *(lines(p) for p in parts), lines(b)], tmp_path / "all.jsonl")
    result = verify([joined])
    assert result.findings == [] and result.notes == []
    (file,) = result.files
    assert [c.follows for c in file.captures] == [False, False, *[True] * (len(parts) - 1), False]
    assert f"3 captures joined ({len(parts) + 2} parts): verified" in cli(str(joined)).stdout


def test_a_capture_never_closed_joined_before_another_is_unclosed_not_tampered(
    tmp_path: Path, two: tuple[Path, Path]
) -> None:
    """A crashed capture (no `part-end`) joined before another: never closed, as in a file of its own."""
    a, b = two
    crashed = lines(a)[:-3]
    result = verify([join([crashed, lines(b)], tmp_path / "both.jsonl")])
    assert result.findings == []
    (file,) = result.files
    assert [(c.status, c.intact_to) for c in file.captures] == [
        (Status.UNCLOSED, len(crashed)),
        (Status.VERIFIED, len(crashed) + len(lines(b))),
    ]


# --- edits inside a joined capture: found as in the capture's own file ---------------------------
def _frame(text: list[bytes]) -> int:
    """The 1-based number of a traffic line in the middle of a capture."""
    traffic = [n for n, line in enumerate(text, 1) if b'"type":"header"' not in line and b'"part-end"' not in line]
    return traffic[len(traffic) // 2]


def _changed(text: list[bytes]) -> list[bytes]:
    k = _frame(text)
    line = text[k - 1]
    at = line.index(b'"seq":') + len(b'"seq":')
    return [*text[: k - 1], line[:at] + b"9" + line[at:], *text[k:]]


def _removed(text: list[bytes]) -> list[bytes]:
    k = _frame(text)
    return [*text[: k - 1], *text[k:]]


def _swapped(text: list[bytes]) -> list[bytes]:
    k = _frame(text)
    return [*text[: k - 1], text[k], text[k - 1], *text[k + 1 :]]


def _copied(text: list[bytes]) -> list[bytes]:
    k = _frame(text)
    return [*text[:k], text[k - 2], *text[k:]]


def _header_copied(text: list[bytes]) -> list[bytes]:
    """The capture's own header copied into its middle: a header that starts no capture."""
    k = _frame(text)
    return [*text[:k], text[0], *text[k:]]


def _end_cut(text: list[bytes]) -> list[bytes]:
    return text[:-1]


EDITS = [_changed, _removed, _swapped, _copied, _header_copied]


@pytest.mark.parametrize("edit", EDITS, ids=lambda e: e.__name__.strip("_"))
@pytest.mark.parametrize("which", ["first", "second"])
def test_an_edit_in_a_joined_capture_is_found_as_in_its_own_file(
    tmp_path: Path, two: tuple[Path, Path], edit: object, which: str
) -> None:
    a, b = two
    text = {p: lines(p) for p in (a, b)}
    target = a if which == "first" else b
    text[target] = edit(text[target])  # type: ignore[operator]
    alone = tmp_path / "alone.jsonl"
    alone.write_bytes(b"".join(text[target]))
    expected = verify([alone])
    assert expected.findings, "the edit must be tampering in the capture's own file"
    joined = join([text[a], text[b]], tmp_path / "both.jsonl")
    result = verify([joined])
    offset = 0 if target is a else len(text[a])
    assert found(result) == found(expected, offset)
    assert [f.message for f in result.findings] == [shifted(f.message, offset) for f in expected.findings]
    (file,) = result.files
    assert file.status is Status.TAMPERED
    assert [c.status for c in file.captures] == [
        Status.TAMPERED if c is file.captures[0 if target is a else 1] else Status.VERIFIED for c in file.captures
    ]
    proc = cli(str(joined))
    assert proc.returncode == 1
    assert f"{joined}:{result.findings[0].line}: {result.findings[0].kind.value}: " in proc.stdout


def test_a_header_copied_into_a_capture_is_one_inserted_line(tmp_path: Path, two: tuple[Path, Path]) -> None:
    """A header inside a capture whose next line goes on with that capture's chain starts nothing:
    the one line is inserted, as before captures could be joined."""
    a, b = two
    text = lines(b)
    k = _frame(text)
    joined = join([lines(a), [*text[:k], text[0], *text[k:]]], tmp_path / "both.jsonl")
    result = verify([joined])
    assert found(result) == [(Kind.INSERTED, len(lines(a)) + k + 1)]
    assert len(result.files[0].captures) == 2


def test_a_capture_cut_before_the_next_one_is_never_closed_as_a_file_cut_at_its_end(
    tmp_path: Path, two: tuple[Path, Path]
) -> None:
    """What a chain cannot tell apart: a capture cut before the capture joined after it reads as a
    crash, as a file of its own cut at its end does (documented in FORMAT.md)."""
    a, b = two
    result = verify([join([_end_cut(lines(a)), lines(b)], tmp_path / "both.jsonl")])
    assert result.findings == [] and result.files[0].captures[0].status is Status.UNCLOSED


def test_captures_joined_in_a_compressed_file_cut_in_the_last_one_are_cut(
    tmp_path: Path, two: tuple[Path, Path]
) -> None:
    """`cat a.jsonl.gz b.jsonl.gz > both.jsonl.gz` cut inside the second capture: compressed whole, the
    file was cut after, and that capture's lines after the cut are lost. It read "not all were closed
    (a crash, not tampering)", exit 0."""
    a, b = two
    first, second = (gzip.compress(p.read_bytes(), mtime=0) for p in (a, b))
    both = tmp_path / "both.jsonl.gz"
    both.write_bytes(first + second[: len(second) * 2 // 3])
    proc = cli(str(both), "--format", "json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = orjson.loads(proc.stdout)
    (entry,) = report["files"]
    assert entry["status"] == "cut" and "gzip stream ends early" in entry["cut"]
    # the stream ends in the second capture: the first is whole
    assert [(c["line"], c["status"], c["cut"]) for c in entry["captures"]] == [
        (1, "verified", None),
        (len(lines(a)) + 1, "cut", entry["cut"]),
    ]
    assert {status: n for status, n in report["counts"].items() if n} == {"cut": 1}
    out = cli(str(both)).stdout.splitlines()
    assert out[0] == f"{both}: 2 captures joined: CUT: the gzip stream ends early (the file was cut short); lines lost"
    assert out[1].startswith("  line 1: verified (") and "ends early" not in out[1]
    assert out[2].startswith(f"  line {len(lines(a)) + 1}: CUT: the gzip stream ends early")


# --- headers inserted, forged or foreign ---------------------------------------------------------
def test_a_forged_header_joined_under_a_key_is_changed(tmp_path: Path) -> None:
    """A capture written with another key, its header's key id edited to the auditor's, joined after
    a keyed capture: its header does not verify under --key (a header starts a chain, never a
    pass)."""
    (a,) = written(FIRST, tmp_path / "a", key=KEY)
    (forged,) = written(SECOND, tmp_path / "f", key=b"the-forgers-own-key-0123456789")
    text = lines(forged)
    own = chain.key_id(b"the-forgers-own-key-0123456789").encode()
    text[0] = text[0].replace(own, chain.key_id(KEY).encode())
    joined = join([lines(a), text], tmp_path / "both.jsonl")
    result = verify([joined], key=KEY)
    first = len(lines(a)) + 1
    assert (Kind.CHANGED, first) in found(result)
    assert all(f.line is not None and f.line >= first for f in result.findings)
    file = result.files[0]
    assert [c.status for c in file.captures] == [Status.VERIFIED, Status.TAMPERED]
    # an unkeyed capture joined in under --key: anyone could have written it
    (plain,) = written(SECOND, tmp_path / "p")
    result = verify([join([lines(a), lines(plain)], tmp_path / "plain.jsonl")], key=KEY)
    assert found(result) == [(Kind.UNKEYED, first)]


def test_a_joined_capture_keyed_with_another_key_is_an_error_of_that_capture(tmp_path: Path) -> None:
    (a,) = written(FIRST, tmp_path / "a")
    (b,) = written(SECOND, tmp_path / "b", key=KEY)
    result = verify([join([lines(a), lines(b)], tmp_path / "both.jsonl")])
    (file,) = result.files
    assert (file.status, result.findings) == (Status.ERROR, [])
    assert [c.status for c in file.captures] == [Status.VERIFIED, Status.ERROR]
    assert file.error is not None and file.error.startswith(f"line {len(lines(a)) + 1}: the chain is keyed")


# --- joined parts that do not follow -------------------------------------------------------------
def test_a_part_removed_from_joined_parts_breaks_the_link(
    tmp_path: Path, rotated: tuple[list[Path], bytes | None]
) -> None:
    parts, key = rotated
    text = [lines(p) for p in parts]
    joined = join([text[0], *text[2:]], tmp_path / "x.jsonl")
    result = verify([joined], key=key)
    at = len(text[0]) + 1
    assert found(result) == [(Kind.PART_LINK, at)]
    assert "part 2" in result.findings[0].message and "part 0" in result.findings[0].message


def test_the_last_part_removed_from_joined_parts_is_missing(
    tmp_path: Path, rotated: tuple[list[Path], bytes | None]
) -> None:
    parts, key = rotated
    text = [lines(p) for p in parts]
    joined = join(text[:-1], tmp_path / "x.jsonl")
    result = verify([joined], key=key)
    assert found(result) == [(Kind.PART_MISSING, sum(map(len, text[:-1])))]
    assert parts[-1].name in result.findings[0].message


def test_joined_parts_out_of_order_are_tampering(tmp_path: Path, rotated: tuple[list[Path], bytes | None]) -> None:
    parts, key = rotated
    text = [lines(p) for p in parts]
    joined = join([text[0], text[2], text[1], *text[3:]], tmp_path / "x.jsonl")
    result = verify([joined], key=key)
    assert {Kind.PART_LINK} <= {f.kind for f in result.findings}
    assert result.files[0].status is Status.TAMPERED


def test_a_joined_part_whose_end_was_cut_breaks_the_link(
    tmp_path: Path, rotated: tuple[list[Path], bytes | None]
) -> None:
    """The part before a joined part lost its last lines (its `part-end` with them): the next part's
    header names its final digest, so the cut is found, as across files."""
    parts, key = rotated
    text = [lines(p) for p in parts]
    joined = join([text[0][:-2], *text[1:]], tmp_path / "x.jsonl")
    result = verify([joined], key=key)
    assert found(result) == [(Kind.PART_LINK, len(text[0]) - 1)]


def test_a_part_joined_after_another_capture_is_checked_by_its_links(
    tmp_path: Path, two: tuple[Path, Path], rotated: tuple[list[Path], bytes | None]
) -> None:
    """Parts after the first of a rotation whose first parts are gone (retention), joined after an
    unrelated capture: the parts before them are absent, as for files; the capture before them in
    the file is not taken for their previous part."""
    a, _ = two
    parts, key = rotated
    text = [lines(p) for p in parts]
    (keyed_a,) = written(FIRST, tmp_path / "ka", key=key) if key else (a,)
    joined = join([lines(keyed_a), *text[2:]], tmp_path / "x.jsonl")
    result = verify([joined], key=key)
    assert result.findings == []
    assert len(result.notes) == 1 and "absent" in result.notes[0]


@pytest.mark.parametrize("apart", ["first", "last"])
def test_joined_parts_and_a_part_apart_link_by_name(
    tmp_path: Path, rotated: tuple[list[Path], bytes | None], apart: str
) -> None:
    """Some parts of a rotation joined in a file, another beside it under its own name: the links
    between them are checked by the names the joined parts' files had, and nothing is missing."""
    parts, key = rotated
    folder = tmp_path / "mixed"
    folder.mkdir()
    alone, rest = (parts[0], parts[1:]) if apart == "first" else (parts[-1], parts[:-1])
    (folder / alone.name).write_bytes(alone.read_bytes())
    join([lines(p) for p in rest], folder / "rest.jsonl")
    result = verify([folder], key=key)
    assert result.findings == [] and result.notes == []
    assert [f.status for f in result.files] == [Status.VERIFIED, Status.VERIFIED]
    # the earlier of the two files cut at its end: the link between them is checked, not only named
    cut = folder / (alone.name if apart == "first" else "rest.jsonl")
    cut.write_bytes(b"".join(lines(cut)[:-1]))
    later = folder / ("rest.jsonl" if apart == "first" else alone.name)
    assert [(Path(f.file), f.kind, f.line) for f in verify([folder], key=key).findings] == [(later, Kind.PART_LINK, 1)]


def test_a_part_joined_into_its_previous_parts_file_links_to_that_part(
    tmp_path: Path, rotated: tuple[list[Path], bytes | None]
) -> None:
    """`cat x.001.jsonl >> x.000.jsonl`, x.001.jsonl left in place (a shipper that appends parts): the
    link from x.001.jsonl to its previous part was checked against the last part in x.000.jsonl (the
    copy of x.001 joined there), and x.001.jsonl was called tampered though nothing was changed. It
    is checked against the part of that file whose `part-end` names it, as the same bytes under
    another name (`both.jsonl` beside x.001.jsonl) are."""
    parts, key = rotated
    first, second = parts[0], parts[1]
    first.write_bytes(first.read_bytes() + second.read_bytes())
    result = verify([first.parent], key=key)
    assert result.findings == [] and result.notes == []
    assert {f.status for f in result.files} == {Status.VERIFIED}
    # the part's own end cut: the link to it is still checked, and broken
    text = lines(second)
    first.write_bytes(b"".join([*lines(parts[0])[: -len(text) - 1], *text]))
    assert (second, Kind.PART_LINK, 1) in [
        (Path(f.file), f.kind, f.line) for f in verify([first.parent], key=key).findings
    ]


def test_a_joined_parts_header_edited_to_name_no_format_is_a_changed_line(
    tmp_path: Path, rotated: tuple[list[Path], bytes | None]
) -> None:
    """Rotated parts joined in one file, the second one's header edited to name no format (its key
    renamed): that part was an error ("not an erascope capture") and the part before it said its next
    part was missing, though it is there. The header's line is changed, and its chain is checked."""
    parts, key = rotated
    text = [lines(p) for p in parts]
    at = len(text[0]) + 1
    text[1][0] = text[1][0].replace(b'"format"', b'"fcrmat"', 1)
    joined = join(text, tmp_path / "both.jsonl")
    result = verify([joined], key=key)
    assert found(result) == [(Kind.CHANGED, at)]
    assert "names no format" in result.findings[0].message
    assert result.files[0].error is None
