"""`erascope verify` on lines holding a lone surrogate escape (`"server":"s\\ud800"`).

Recorders never write one, but a capture is what its writer made it, and the analyzer reads such a
line (the escape as its text, `analyzer.load.read_line`). orjson refuses the escape, and verify read
two kinds of line with it: a line whose seal no longer ends it (its claimed seal), so a reformatted
first line of a part whose header was removed made the file "not an erascope capture", and one
inside the chain was called inserted and its index removed; and a `part-end` record, so its `next`
was lost and a missing next part went unsaid. Each verdict is the one for the same files without
the escape: the chain covers the line's bytes, whatever its values read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson
import pytest

from addon import chain
from addon import format as fmt
from analyzer.verify import Verification, verify
from tests.test_load_header_surrogates import resealed
from tests.test_verify_joined import FIRST, join, lines, written

LONE: Final = b'"server":"s\\ud800"'

REFORMATS: Final = {
    "crlf": lambda line: line[:-1] + b"\r\n",
    "trailing-space": lambda line: line[:-1] + b" \n",
}


def verdict(result: Verification, *folders: Path) -> tuple[list[Any], list[str]]:
    """What verify says of every capture it checked and of their links, with the folders they are in
    left out: the same files elsewhere get the same verdict."""

    def bare(text: str) -> str:
        for folder in folders:
            text = text.replace(f"{folder}/", "")
        return text

    units = [
        (
            bare(c.file),
            c.line,
            c.status,
            c.error,
            c.next,
            c.follows,
            [(bare(f.file), f.kind, f.line, bare(f.message)) for f in c.findings],
        )
        for r in result.files
        for c in r.units
    ]
    return units, [bare(note) for note in result.notes]


def holding_the_escape(part: Path, out: Path) -> list[bytes]:
    """A chained part sealed again with its server written `s\\ud800` on every line: its lines."""
    lone = resealed(part, out / part.name)
    assert b"\\ud800" in lines(lone)[1]
    return lines(lone)


@pytest.mark.parametrize("reformat", REFORMATS.values(), ids=REFORMATS.keys())
def test_a_part_whose_header_was_removed_is_said_so(tmp_path: Path, reformat: Callable[[bytes], bytes]) -> None:
    """Its first line, a sealed record whose seal no longer ends it: "not an erascope capture" when
    the line held the escape, as if the file were something else, not a capture that lost its header."""
    (part,) = written(FIRST, tmp_path / "w")
    verdicts = []
    for name, text in (("plain", lines(part)), ("lone", holding_the_escape(part, tmp_path / "l"))):
        path = tmp_path / name / part.name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(reformat(text[1]) + b"".join(text[2:]))
        assert chain.split(reformat(text[1])) is None
        verdicts.append(verdict(verify([path]), path.parent))
    assert verdicts[1] == verdicts[0]
    ((_, _, status, error, _, _, findings),), _ = verdicts[1]
    assert (status.value, error) == ("tampered", None)
    assert [(kind.value, line) for _, kind, line, _ in findings] == [("removed", 1)]
    assert "sealed as line index 2, not with its header" in findings[0][3]


@pytest.mark.parametrize("reformat", REFORMATS.values(), ids=REFORMATS.keys())
def test_a_reformatted_line_is_one_changed_line(tmp_path: Path, reformat: Callable[[bytes], bytes]) -> None:
    """A line inside the chain whose seal no longer ends it: called inserted ("without a chain
    digest") and its line index removed when it held the escape, where it is one changed line."""
    (part,) = written(FIRST, tmp_path / "w")
    verdicts = []
    for name, text in (("plain", lines(part)), ("lone", holding_the_escape(part, tmp_path / "l"))):
        path = tmp_path / name / part.name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"".join([*text[:2], reformat(text[2]), *text[3:]]))
        verdicts.append(verdict(verify([path]), path.parent))
    assert verdicts[1] == verdicts[0]
    ((_, _, _, _, _, _, findings),), _ = verdicts[1]
    assert [(kind.value, line) for _, kind, line, _ in findings] == [("changed", 3)]


def rotation_sealed_again(parts: list[Path], out: Path, edit: Callable[[bytes], bytes]) -> list[Path]:
    """The parts of a rotation with `edit` made to each `part-end` record and the chain sealed anew
    across them (as the recorder would have sealed those bytes): each header's `chain_prev` the
    previous part's new final digest."""
    out.mkdir(parents=True)
    previous = chain.START
    paths = []
    for part in parts:
        bodies = [line[: line.rindex(chain.FIELD_OPEN)] + b"}\n" for line in lines(part)]
        header = orjson.loads(bodies[0])
        if fmt.F_CHAIN_PREV in header:
            field = b'"%s":' % fmt.F_CHAIN_PREV.encode()
            was = field + orjson.dumps(header[fmt.F_CHAIN_PREV])
            bodies[0] = bodies[0].replace(was, field + b'"%s"' % chain.encode(previous))
        assert bodies[-1].startswith(b'{"type":"part-end"')
        bodies[-1] = edit(bodies[-1])
        pieces, _, previous = chain.seal_lines(chain.Chainer(), previous, bodies, 0)
        paths.append(out / part.name)
        paths[-1].write_bytes(b"".join(bytes(p) for p in pieces))
    return paths


@pytest.mark.parametrize("removed", [None, 1], ids=["whole", "middle-part-removed"])
@pytest.mark.parametrize("how", ["apart", "joined"])
def test_a_part_end_holding_the_escape_links_its_next_part(tmp_path: Path, removed: int | None, how: str) -> None:
    """Its `next` was lost (orjson refuses the line): the part read as the rotation's last, so a
    missing next part went unsaid."""
    parts = written(FIRST, tmp_path / "w", rotate_bytes=5000)
    assert len(parts) >= 3
    # sealed again unedited, the parts are the recorder's bytes: the chain is sealed as it was
    assert [p.read_bytes() for p in rotation_sealed_again(parts, tmp_path / "same", lambda body: body)] == [
        p.read_bytes() for p in parts
    ]
    server = b'"server":' + orjson.dumps(orjson.loads(lines(parts[0])[0])["server"])
    lone = rotation_sealed_again(parts, tmp_path / "lone", lambda body: body.replace(server, LONE))
    verdicts = []
    for files in (parts, lone):
        kept = [p for n, p in enumerate(files) if n != removed]
        if how == "joined":
            path = join([lines(p) for p in kept], files[0].parent / "joined.jsonl")
            for p in kept:
                p.unlink()
            verdicts.append(verdict(verify([path]), path.parent))
        else:
            if removed is not None:
                files[removed].unlink()
            verdicts.append(verdict(verify([files[0].parent]), files[0].parent))
    assert verdicts[1] == verdicts[0]
    units, _ = verdicts[1]
    assert all(next_ is not None for _, _, _, _, next_, _, _ in units[:-1])
    findings = [(kind.value, line) for *_, found in units for _, kind, line, _ in found]
    if removed is None:
        assert findings == []
    elif how == "apart":
        assert findings == [("part-missing", len(lines(lone[0])))]
    else:
        assert "part-link" in {kind for kind, _ in findings}
