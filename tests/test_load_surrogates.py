"""A record line the NDJSON reader reads is read whatever lines surround it.

The reader (simd-json) and `str.json_path_match` (serde_json), which marks the bad lines of a piece
that holds one, do not take the same JSON: a lone high surrogate escape (`"\\ud800"`, valid JSON
grammar) or a value nested deeper than 128 levels is read by the first and refused by the second.
Such a record read fine in a piece of good lines but was called "not valid JSON", and lost, when an
unrelated malformed line sat in the same piece. Each reading path is checked: a batch of small files
(`analyze`), a file read alone in pieces, the archive (`erascope compact`) and `extract_lines`
(`erascope watch`).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Final

import orjson
import polars as pl
import pytest

from analyzer import load
from analyzer.compact import compact
from analyzer.load import extract_file, extract_lines
from analyzer.messages import as_strings
from analyzer.pipeline import analyze
from analyzer.report import render_json
from tests.test_concatenated import by_text
from tests.test_rotated_exchanges import SCENARIOS

CORPUS: Final = sorted(p for scenario in SCENARIOS for p in scenario.glob("*.jsonl"))
SOME: Final = [p for p in CORPUS if p.parent.name in ("auto-modern-stdio", "auto-legacy-http", "upgrade-http")]
INSERTED: Final = b"{"
"""An unrelated malformed line (not valid JSON on any reading)."""


def _raw_record(lines: list[bytes]) -> int:
    """The position of the first record that carries a `raw` string (a message)."""
    return next(n for n, line in enumerate(lines) if n and b'"raw":"' in line)


def _in_raw(line: bytes) -> bytes:
    # a lone high surrogate escape at the start of the payload text
    return line.replace(b'"raw":"', b'"raw":"\\ud800', 1)


def _extra_field(line: bytes) -> bytes:
    # a field no reading looks at: the record reads as it did before
    return line[: line.rindex(b"}")] + b',"note":"x\\ud800y"}'


def _deep(line: bytes) -> bytes:
    # deeper than serde_json's 128 levels, well within the reader's
    return line[: line.rindex(b"}")] + b',"note":' + b"[" * 200 + b"]" * 200 + b"}"


MUTATIONS: Final = {"in-raw": _in_raw, "extra-field": _extra_field, "deep": _deep}


def _variants(source: Path, folder: Path, mutate: str) -> tuple[Path, Path, int]:
    """(a) `source` with one record changed, (b) the same with `INSERTED` on a line of its own
    elsewhere; the line `INSERTED` is on in (b)."""
    lines = source.read_bytes().splitlines()
    at = _raw_record(lines)
    lines[at] = MUTATIONS[mutate](lines[at])
    # before the changed record when it can be (line 2 is the first after the header), else after it
    where = 1 if at > 1 else at + 1
    a, b = folder / "a" / source.name, folder / "b" / source.name
    a.parent.mkdir(parents=True)
    b.parent.mkdir(parents=True)
    a.write_bytes(b"\n".join(lines) + b"\n")
    b.write_bytes(b"\n".join([*lines[:where], INSERTED, *lines[where:]]) + b"\n")
    return a, b, where + 1


def _report(path: Path) -> tuple[Any, dict[str, Any]]:
    """The report with evidence as the text it names (lines move when one is inserted), and its inputs."""
    report = orjson.loads(render_json(analyze([str(path)])))
    return by_text(report), report["inputs"]


def _bad(bad: list[Any]) -> list[tuple[int, str]]:
    return [(b.line, b.reason) for b in bad]


def test_the_reader_takes_what_json_path_match_refuses() -> None:
    """The premise: both lines are read by the NDJSON reader and refused by `json_path_match`."""
    lines = ['{"type":"frame","raw":"\\ud800"}', '{"type":"frame","raw":' + "[" * 200 + "]" * 200 + "}"]
    read = pl.read_ndjson("\n".join(lines).encode(), schema={"type": pl.String()})
    assert read.get_column("type").to_list() == ["frame", "frame"]
    assert pl.Series(lines).str.json_path_match("$.type").to_list() == [None, None]


@pytest.mark.parametrize(
    ("source", "mutate"),
    [(p, "in-raw") for p in CORPUS] + [(p, m) for p in SOME for m in ("extra-field", "deep")],
    ids=lambda v: v.parent.name if isinstance(v, Path) else v,
)
def test_a_record_is_read_beside_a_malformed_line_as_without_it(tmp_path: Path, source: Path, mutate: str) -> None:
    """`analyze` (small files: one batch): the malformed line is the one more bad line, nothing else moves."""
    a, b, inserted = _variants(source, tmp_path, mutate)
    (report_a, inputs_a), (report_b, inputs_b) = _report(a), _report(b)
    assert inputs_a["malformed"] == [] and inputs_a["torn"] == []
    assert [(m["line"], m["reason"]) for m in inputs_b["malformed"]] == [(inserted, "not valid JSON")]
    assert inputs_b["torn"] == []
    assert inputs_b["records"] == inputs_a["records"] == len(a.read_bytes().splitlines())
    assert report_b == report_a


@pytest.mark.parametrize("piece_bytes", [load.PIECE_BYTES, 700])
@pytest.mark.parametrize("mutate", list(MUTATIONS))
@pytest.mark.parametrize("source", SOME, ids=lambda p: p.parent.name)
def test_a_file_read_alone_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: Path, mutate: str, piece_bytes: int
) -> None:
    """`extract_file` (a file read on its own, in pieces of any size): the same counts and rows."""
    monkeypatch.setattr(load, "PIECE_BYTES", piece_bytes)
    a, b, inserted = _variants(source, tmp_path, mutate)
    options = load.LoadOptions(condense=False)
    fa, fb = extract_file(str(a), options), extract_file(str(b), options)
    assert _bad(fa.malformed) == [] and _bad(fb.malformed) == [(inserted, "not valid JSON")]
    assert fb.torn is None and fa.torn is None
    assert (fb.records, fb.counts) == (fa.records, fa.counts)
    assert fb.records == len(a.read_bytes().splitlines())
    # the rows, their lines (and their requests' lines) read back across the inserted one
    back = {c: pl.col(c) - (pl.col(c) > inserted).cast(pl.Int64) for c in ("line", "req_line")}
    rows_a = as_strings(fa.messages).drop("file")
    rows_b = as_strings(fb.messages).with_columns(**back).cast(rows_a.schema).drop("file")
    assert rows_b.equals(rows_a)


@pytest.mark.parametrize("mutate", list(MUTATIONS))
@pytest.mark.parametrize("source", SOME, ids=lambda p: p.parent.name)
def test_an_archive_keeps_the_record(tmp_path: Path, source: Path, mutate: str) -> None:
    """`erascope compact`: the archive of (b) reads as (b) does, and as (a) does but for the one line."""
    a, b, inserted = _variants(source, tmp_path, mutate)
    for name, path in (("a", a), ("b", b)):
        compact([str(path)], tmp_path / f"archive-{name}", jobs=1)
    (report_a, inputs_a), (report_b, inputs_b) = _report(tmp_path / "archive-a"), _report(tmp_path / "archive-b")
    assert [(m["line"], m["reason"]) for m in inputs_b["malformed"]] == [(inserted, "not valid JSON")]
    assert inputs_b["records"] == inputs_a["records"] == len(a.read_bytes().splitlines())
    assert report_b == report_a
    assert render_json(analyze([str(tmp_path / "archive-b")])) == render_json(analyze([str(b)]))


@pytest.mark.parametrize("mutate", list(MUTATIONS))
@pytest.mark.parametrize("source", SOME, ids=lambda p: p.parent.name)
def test_lines_read_by_a_follower(tmp_path: Path, source: Path, mutate: str) -> None:
    """`extract_lines` (`erascope watch` reads the lines added to a file): the same records."""
    a, b, inserted = _variants(source, tmp_path, mutate)
    header = orjson.loads(a.read_bytes().splitlines()[0])
    read = []
    for path in (a, b):
        data = path.read_bytes()
        body = data[data.index(b"\n") + 1 :]
        read.append(extract_lines(str(path), body, 2, header, load.LoadOptions(condense=False)))
    fa, fb = read
    assert _bad(fa.malformed) == [] and _bad(fb.malformed) == [(inserted, "not valid JSON")]
    assert (fb.records, fb.counts) == (fa.records, fa.counts)
    assert fb.records == len(a.read_bytes().splitlines()) - 1
    assert fb.messages.height == fa.messages.height


def test_the_same_line_in_many_pieces_with_many_bad_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every third line malformed, every third a record the reader takes and `json_path_match`
    refuses: each is located on its own line, in pieces of a few lines and whole."""
    source = CORPUS[0].read_bytes().splitlines()
    header, record = source[0], _extra_field(source[_raw_record(source)])
    lines = [header]
    for n in range(300):
        lines += [b"not json" if n % 2 else b'{"type":"frame","seq":', record, b'{"no":"type"}']
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    expected_bad = [(2 + 3 * n, "not valid JSON") for n in range(300)]
    expected_bad += [(4 + 3 * n, "no record type") for n in range(300)]
    for piece_bytes in (load.PIECE_BYTES, 5000):
        monkeypatch.setattr(load, "PIECE_BYTES", piece_bytes)
        facts = extract_file(str(path), load.LoadOptions(condense=False))
        assert _bad(facts.malformed) == sorted(expected_bad)
        assert facts.records == 301


@pytest.mark.parametrize(
    ("line", "read"),
    [
        ('{"type":"frame","type":null,"seq":5}', True),  # json_path_match takes the last key, the reader the first
        ('{"type":null,"type":"frame","seq":5}', False),
        ('{"type":"frame","seq":5,"raw":"\\udc00"}', False),  # a low surrogate alone: the reader refuses it
        ('{"type":"frame","seq":5,"raw":"\\ud800\\u0041"}', False),
        ('{"type":"frame","seq":5,"raw":"\\ud800\\n"}', True),
        ('{"type":"frame","seq":5,"raw":"\\\\udc00"}', True),
        ('{"type":"frame","seq":5,"raw":"\\ud83d\\ude00"}', True),
        ('{"type":"frame","seq":"5","raw":"\\ud800"}', False),  # read, but `seq` has the wrong type
        ('{"type":"frame","seq":5,"ts":1e400}', False),
        ('{"type":"frame","seq":5,"note":' + "[" * 1023 + "]" * 1023 + "}", True),
        ('{"type":"frame","seq":5,"note":' + "[" * 1024 + "]" * 1024 + "}", False),
        ('{"type":"frame","seq":5,"note":' + "[" * 5000 + "]" * 5000 + "}", False),
    ],
)
def test_a_line_is_judged_alike_alone_and_beside_a_malformed_one(tmp_path: Path, line: str, read: bool) -> None:
    """Read alone, a line goes by the reader's reading of the piece; beside a malformed line, by the
    line path: both say the same of it, records and reasons."""
    source = CORPUS[0].read_bytes().splitlines()
    header = source[0].decode()
    alone = tmp_path / "alone.jsonl"
    alone.write_text("\n".join([header, line, *(s.decode() for s in source[1:])]) + "\n")
    beside = tmp_path / "beside.jsonl"
    beside.write_text("\n".join([header, line, "not json", *(s.decode() for s in source[1:])]) + "\n")
    fa, fb = extract_file(str(alone)), extract_file(str(beside))
    assert [b.line for b in fa.malformed] == ([] if read else [2])
    assert [b for b in _bad(fb.malformed) if b[0] == 2] == _bad(fa.malformed)
    assert (fb.records, fb.counts) == (fa.records, fa.counts)
    assert fa.records == len(source) + (1 if read else 0)


def test_lines_the_reader_refuses_are_not_each_asked_of_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A piece of many lines `json_path_match` refuses costs no reading per line: the ones certainly
    refused are never asked of the reader, the ones it may read are asked together."""
    asked: list[int] = []
    types = load._types

    def counted(lines: pl.DataFrame) -> pl.Series | None:
        asked.append(lines.height)
        return types(lines)

    monkeypatch.setattr(load, "_types", counted)
    refused = [
        "{",
        "not json",
        '{"type":"frame"} x',
        '{"type":"frame","raw":"\\udc00"}',
        '{"type":"frame","raw":"\\ud800\\ud800"}',
        '{"type":"frame","ts":NaN}',
        '{"type":"frame","ts":-Infinity}',
        '{"type":"frame","ts":1e400}',
        '{"type":"frame","seq":' + "9" * 400 + "}",
        '{"type":"frame","raw":"a\tb"}',
        '{"type":"frame","raw":' + "[" * 1100 + "]" * 1100 + "}",
        '{"type":"frame","raw":' + "[" * 5000 + "]" * 5000 + "}",
        "[1]",
    ]
    text = [CORPUS[0].read_bytes().splitlines()[0].decode()]
    for n in range(40):
        text += refused
        text.append('{"type":"frame","seq":' + str(n + 1) + ',"raw":"\\ud800"}')
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(text) + "\n")
    facts = extract_file(str(path), load.LoadOptions(condense=False))
    assert len(facts.malformed) == 40 * len(refused)
    assert facts.records == 41
    assert asked == [40]


def test_no_line_the_reader_reads_is_left_unasked() -> None:
    """`_may_be_read` only spares the reader lines it refuses: over mutated corpus lines (escapes,
    numbers, nesting, bytes of JSON's syntax), every line it says no to is refused by the reader."""
    rng = random.Random(20261203)
    pieces = [
        *("\\ud800", "\\udbff", "\\udc00", "\\udfff", "\\u0041", "\\", '"', "{", "}", "[", "]", ",", ":"),
        *("1e400", "1e308", "-0", "01", "NaN", "Infinity", "\t", "\x00", "\x7f", "\u2028", " ", "null", "9" * 320),
    ]
    lines = [line.decode() for p in CORPUS[:6] for line in p.read_bytes().splitlines()]
    spared = 0
    for _ in range(3000):
        text = rng.choice(lines)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(text) + 1)
            cut = rng.choice((0, 0, 1, 2))
            text = text[:at] + rng.choice(pieces) + text[at + cut :]
        if load._may_be_read(text):
            continue
        spared += 1
        try:
            pl.read_ndjson(text.encode(), schema={"type": pl.String()})
        except pl.exceptions.PolarsError:
            continue
        raise AssertionError(f"read by the reader, but not asked: {text!r}")
    assert spared > 1000
