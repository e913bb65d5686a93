"""A record line the NDJSON reader reads is read whatever lines surround it.

The reader (simd-json) and `str.json_path_match` (serde_json), which marks the bad lines of a piece
that holds one, do not take the same JSON: a lone high surrogate escape (`"\\ud800"`, valid JSON
grammar) or a value nested deeper than 128 levels is read by the first and refused by the second.
Such a record read fine in a piece of good lines but was called "not valid JSON", and lost, when an
unrelated malformed line sat in the same piece. Each reading path is checked: a batch of small files
(`analyze`), a file read alone in pieces, the archive (`erascope compact`) and `extract_lines`
(`erascope watch`).

The reader reads a lone surrogate escape as U+0000, as it reads `\\u0000`: keys that differ by one
(`"s\\ud800"`, `"s\\udbff"`, `"s\\u0000"`) were one server, named `s\\x00`. They stay apart now, named
as written, on every path, in every report format and in `watch`. A low surrogate escape alone
(`"s\\udc00"`) or a high one before an escape that is not a low one (`"s\\ud800\\u0041"`), which the
reader refuses, is read so too: its line, its payload, its key, as a lone high one is.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path
from typing import Any, Final

import orjson
import polars as pl
import pytest

from addon.jsontext import surrogates_read
from analyzer import load
from analyzer.compact import compact
from analyzer.load import extract_file, extract_lines
from analyzer.messages import as_strings
from analyzer.pipeline import analyze
from analyzer.report import render_json
from tests.test_concatenated import by_text
from tests.test_rotated_exchanges import SCENARIOS
from tests.test_watch import CORPUS as CORPUS_DIR
from tests.test_watch import ERASCOPE, analyzed, expected, reported, watched_line_by_line

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
        # a low surrogate alone, a high one before another escape: the reader refuses them, but reads
        # the line with them as their text, as every reading does
        ('{"type":"frame","seq":5,"raw":"\\udc00"}', True),
        ('{"type":"frame","seq":5,"raw":"\\ud800\\u0041"}', True),
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
        # nested past serde_json's 128 levels: a lone surrogate escape (a low one alone, a high one
        # before another escape too) is read as its text before `json_path_match` sees it
        # (`load._lone_surrogates_as_text`), so no longer one of these
        text.append('{"type":"frame","seq":' + str(n + 1) + ',"note":' + "[" * 200 + "]" * 200 + "}")
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


# --- a lone surrogate escape in a key ------------------------------------------------------------
LONE: Final = {b"\\ud800": "s\\ud800", b"\\udbff": "s\\udbff", b"\\u0000": "s\x00"}
"""Server keys as a capture writes them → as reports name them. The reader reads a lone high
surrogate escape as U+0000: all three were one server, `s\\x00`, which the capture never named."""
REFUSED: Final = {b"\\udc00": "s\\udc00", b"\\ud800\\u0041": "s\\ud800A", b"\\u0000": "s\x00", b"": "s"}
"""Server keys the reader refuses (a low surrogate escape alone, a high one before an escape that is not
a low one): every line holding one was malformed, the capture's records lost."""


def lone_keyed(scenario: str, folder: Path, escape: bytes, n: int) -> list[Path]:
    """The captures of `scenario` in `folder`, every record but the header keyed `s<escape>` instead
    of the header's server (the header keeps its own: only records hold the escape), each header
    another run (`n`)."""
    folder.mkdir(parents=True)
    paths = []
    for source in sorted((CORPUS_DIR / scenario).glob("*.jsonl")):
        lines = source.read_bytes().splitlines()
        header = orjson.loads(lines[0])
        was = b'"server":' + orjson.dumps(header["server"])
        header["started"] = f"{n}-{header['started']}"
        body = [line.replace(was, b'"server":"s' + escape + b'"') for line in lines[1:]]
        path = folder / f"k{n}-{source.name}"
        path.write_bytes(b"\n".join([orjson.dumps(header), *body]) + b"\n")
        paths.append(path)
    return paths


def _servers(report: dict[str, Any]) -> dict[str, Any]:
    """Each server's entry, findings and clients, with its captures' files and lines as evidence."""
    out = {}
    for entry in report["servers"]:
        key = entry["server"]
        findings = [f for f in report["findings"] if f["server"] == key]
        clients = [c for c in report["clients"] if c["server"] == key]
        out[key] = {"entry": entry, "findings": findings, "clients": clients}
    return out


@pytest.mark.parametrize("scenario", ["probe-storm-stdio", "legacy-client-modern-only-http"])
def test_lone_surrogate_keys_stay_apart(tmp_path: Path, scenario: str) -> None:
    """Three keys the reader reads alike (`s\\ud800`, `s\\udbff`, `s\\u0000`), in captures of their
    own: three servers, each named as its capture writes it (`\\ud800` as that escape's text, as
    `visible` shows a lone surrogate), each reported together as it is alone."""
    alone = {}
    for n, (escape, name) in enumerate(LONE.items()):
        paths = lone_keyed(scenario, tmp_path / f"k{n}", escape, n)
        servers = _servers(orjson.loads(render_json(analyze([str(p) for p in paths]))))
        assert list(servers) == [name]
        alone[name] = servers[name]
    together = _servers(orjson.loads(render_json(analyze([str(tmp_path)]))))
    assert together == alone


@pytest.mark.parametrize(
    ("spelled", "capitals"), [(LONE, b"\\uDBFF"), (REFUSED, b"\\uDC00")], ids=["high", "low-or-before-another"]
)
def test_lone_surrogate_keys_on_every_reading_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelled: dict[bytes, str], capitals: bytes
) -> None:
    """The keys of one file, read in pieces of any size, beside a malformed line (the line path), by
    a follower (`extract_lines`) and from an archive: the same servers and connections, each named
    as written. An escape written in capitals (`\\uDBFF`) is the same JSON string, so the same key."""
    source = sorted((CORPUS_DIR / "probe-storm-stdio").glob("*.jsonl"))[0].read_bytes().splitlines()
    header = orjson.loads(source[0])
    was = b'"server":' + orjson.dumps(header["server"])
    conn = b'"conn":' + orjson.dumps(orjson.loads(source[1])["conn"])
    lines = [source[0]]
    for escape in (*spelled, capitals):
        # the same connection under each key: four connections, told apart by their ids alone
        lines += [
            line.replace(was, b'"server":"s' + escape + b'"').replace(conn, b'"conn":"c' + escape + b'"')
            for line in source[1:]
        ]
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(b"\n".join(lines) + b"\n")
    beside = tmp_path / "beside.jsonl"
    beside.write_bytes(b"\n".join([*lines[:2], INSERTED, *lines[2:]]) + b"\n")
    conns = {(name, "c" + name[1:]) for name in spelled.values()}

    def keys(facts: Any) -> set[tuple[str, str]]:
        rows = as_strings(facts.messages)
        return set(rows.select("server", "conn").unique().iter_rows())

    for piece_bytes in (load.PIECE_BYTES, 700):
        monkeypatch.setattr(load, "PIECE_BYTES", piece_bytes)
        for path in (plain, beside):
            facts = extract_file(str(path), load.LoadOptions(condense=False))
            assert keys(facts) == conns
        assert [b.line for b in extract_file(str(beside)).malformed] == [3]
    body = b"\n".join(lines[1:]) + b"\n"
    assert keys(extract_lines(str(plain), body, 2, header, load.LoadOptions(condense=False))) == conns
    compact([str(plain)], tmp_path / "archive", jobs=1)
    archived = orjson.loads(render_json(analyze([str(tmp_path / "archive")])))
    assert {s["server"] for s in archived["servers"]} == set(spelled.values())
    assert archived["inputs"]["malformed"] == []
    assert archived == orjson.loads(render_json(analyze([str(plain)]))) | {"inputs": archived["inputs"]}


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "html"])
def test_lone_surrogate_keys_in_every_report_format(tmp_path: Path, fmt: str) -> None:
    """`erascope analyze -f FORMAT -o OUT`: written, and the three servers named apart (a NUL shown
    `\\x00`, as every control character is, where the format shows names as text)."""
    for n, escape in enumerate(LONE):
        lone_keyed("probe-storm-stdio", tmp_path / "caps" / f"k{n}", escape, n)
    out = tmp_path / f"report.{fmt}"
    done = subprocess.run(
        [str(ERASCOPE), "analyze", str(tmp_path / "caps"), "-f", fmt, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text(encoding="utf-8")
    if fmt == "json":
        assert {s["server"] for s in orjson.loads(text)["servers"]} == set(LONE.values())
    else:
        for shown in ("s\\ud800", "s\\udbff", "s\\x00"):
            assert shown in text


def test_lone_surrogate_keys_watched_as_analyzed(tmp_path: Path) -> None:
    """`erascope watch` over the three keys' captures joined in one file, a line a round: the
    findings and era changes `analyze` reports, under the three servers."""
    lines = []
    for n, escape in enumerate(LONE):
        for path in lone_keyed("probe-storm-stdio", tmp_path / f"k{n}", escape, n)[:3]:
            lines += path.read_bytes().splitlines(keepends=True)
    live = tmp_path / "live"
    events = watched_line_by_line(lines, live, "joined.jsonl", idle=3600)
    report = analyzed(live)
    assert {s["server"] for s in report["servers"]} == set(LONE.values())
    assert reported(events) == expected(report)
    assert {e["server"] for e in events} == set(LONE.values())


def test_lone_surrogates_as_text_judge_no_line_otherwise() -> None:
    """Over mutated corpus lines (escapes, backslashes, quotes): the reader reads a line written by
    `_lone_surrogates_as_text` when it read it as it was, or refused it for a lone surrogate escape
    alone (a low one, a high one before another escape), and then reads no U+0000 the line does not
    spell (`\\u0000`); a surrogate escape after an escaped backslash is text, left as it is."""
    rng = random.Random(20261205)
    pieces = ("\\ud800", "\\uDBFF", "\\udc00", "\\uDFFF", "\\ud83d\\ude00", "\\u0041", "\\\\", "\\", '"', "\\n")
    lines = [line.decode() for p in CORPUS[:6] for line in p.read_bytes().splitlines()]
    schema = {"type": pl.String(), "server": pl.String(), "conn": pl.String(), "raw": pl.String()}
    rewritten = newly = 0
    for _ in range(2000):
        text = rng.choice(lines)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(text) + 1)
            text = text[:at] + rng.choice(pieces) + text[at:]
        line = text.encode()
        written, _ = load._lone_surrogates_as_text(line)
        rewritten += written != line
        assert surrogates_read(written.decode()), text  # no escape left that the reader refuses
        try:
            pl.read_ndjson(line, schema=schema)
        except pl.exceptions.PolarsError:
            if surrogates_read(text):  # refused for another reason than its surrogate escapes: still refused
                with pytest.raises(pl.exceptions.PolarsError):
                    pl.read_ndjson(written, schema=schema)
                continue
            try:
                read = pl.read_ndjson(written, schema=schema).row(0)
            except pl.exceptions.PolarsError:  # refused for another reason too
                continue
            newly += 1
        else:
            read = pl.read_ndjson(written, schema=schema).row(0)
        if "\\u0000" not in text:
            assert not any("\x00" in value for value in read if value is not None), text
    assert rewritten > 300 and newly > 50
    assert (
        load._lone_surrogates_as_text(b'{"a":"\\\\ud800","b":"\\uD800\\udc00","c":"\\\\udc00"}')[0]
        == b'{"a":"\\\\ud800","b":"\\uD800\\udc00","c":"\\\\udc00"}'
    )
    assert load._lone_surrogates_as_text(b'{"a":"\\\\\\uD800"}\n{"b":"\\ud800\\ud800\\uDC00\\udc00"}')[0] == (
        b'{"a":"\\\\\\\\ud800"}\n{"b":"\\\\ud800\\ud800\\uDC00\\\\udc00"}'
    )


# --- a lone surrogate escape inside a payload ----------------------------------------------------
PAYLOAD_LONE: Final = {rb"\\ud800": "c\\ud800", rb"\\udbff": "c\\udbff", rb"\\u0000": "c\x00"}
"""A client name's first letters as the payload writes them (in a capture line, behind the escaped
backslash of `raw`'s text) → the name read. Both JSON parsers of the payload read a lone high
surrogate escape otherwise: the fast one as U+0000, `json_path_match` not at all (the payload was
no message on the robust reading)."""
PAYLOAD_REFUSED: Final = {
    rb"\\udc00": "c\\udc00",
    rb"\\uDFFF": "c\\udfff",
    rb"\\ud800\\u0041": "c\\ud800A",
    rb"\\\\ud800\\udc00": "c\\ud800\\udc00",
    rb"\\u0000": "c\x00",
}
"""As `PAYLOAD_LONE`, escapes both JSON parsers of the payload refuse (a low surrogate alone, also after
the text of a high one, or a high one before an escape that is not a low one): the message was invalid
on both readings, its client unnamed."""
OBJECT_ID: Final = '{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}'
"""A payload whose id is an object: its piece is read the robust way (`messages_from_records`)."""


def client_named(scenario: str, folder: Path, escape: bytes, n: int, *, robust: bool = False) -> list[Path]:
    """The captures of `scenario` in `folder`, each client's name starting `c<escape>`, each header
    another run and each connection another (`n`); with `robust`, a copy of each file's first payload
    record with an object id as its last."""
    folder.mkdir(parents=True)
    paths = []
    for source in sorted((CORPUS_DIR / scenario).glob("*.jsonl")):
        lines = source.read_bytes().splitlines()
        header = orjson.loads(lines[0])
        header["started"] = f"{n}-{header['started']}"
        body = [
            line.replace(b'clientInfo\\":{\\"name\\":\\"', b'clientInfo\\":{\\"name\\":\\"c' + escape).replace(
                b'"conn":"', f'"conn":"{n}-'.encode()
            )
            for line in lines[1:]
        ]
        if robust:
            record = orjson.loads(next(line for line in body if b'"raw":"{' in line))
            body.append(orjson.dumps(record | {"raw": OBJECT_ID, "seq": 999999}))
        path = folder / f"c{n}-{source.name}"
        path.write_bytes(b"\n".join([orjson.dumps(header), *body]) + b"\n")
        paths.append(path)
    return paths


def _clients(report: dict[str, Any]) -> dict[str, Any]:
    """The report's clients by name, those named `c…` (the ones renamed)."""
    return {c["identity"]["name"]: c for c in report["clients"] if (c["identity"]["name"] or "").startswith("c")}


@pytest.mark.parametrize("spellings", [PAYLOAD_LONE, PAYLOAD_REFUSED], ids=["high", "low-or-before-another"])
@pytest.mark.parametrize("robust", [False, True], ids=["fast", "robust"])
@pytest.mark.parametrize("scenario", ["probe-storm-stdio", "upgrade-stdio", "upgrade-http"])
def test_lone_surrogates_in_payloads_stay_apart(
    tmp_path: Path, scenario: str, robust: bool, spellings: dict[bytes, str]
) -> None:
    """Client names that differ by a lone surrogate escape (`c\\ud800`, `c\\udbff`, `c\\u0000`; `c\\udc00`,
    `c\\ud800\\u0041`) in the payload: a client each, named as its payload writes it, alike on the fast
    and the robust reading (an object id elsewhere in the file), together as alone; `\\uDBFF` is `\\udbff`."""
    alone = {}
    for n, (escape, name) in enumerate(spellings.items()):
        paths = client_named(scenario, tmp_path / "caps" / f"c{n}", escape, n, robust=robust)
        clients = _clients(orjson.loads(render_json(analyze([str(p) for p in paths]))))
        assert {c[: len(name)] for c in clients} == {name}
        alone.update(clients)
    together = _clients(orjson.loads(render_json(analyze([str(tmp_path / "caps")]))))
    assert set(together) == set(alone)
    if scenario.endswith("-stdio"):  # HTTP copies share their sessions: their clients' counts add up
        assert together == alone
    paths = client_named(scenario, tmp_path / "upper", b"\\\\uDBFF", 9, robust=robust)
    assert {c[:7] for c in _clients(orjson.loads(render_json(analyze([str(p) for p in paths]))))} == {"c\\udbff"}


def test_lone_surrogates_in_payloads_read_alike_on_every_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One file of the three names' captures, read whole, in small pieces (some robust, some not:
    an object id in one of them), beside a malformed line, by a follower (`extract_lines`) and from
    an archive: the same client names, and the archive's `raw` is the payload as written."""
    lines: list[bytes] = []
    for n, escape in enumerate(PAYLOAD_LONE):
        for path in client_named("upgrade-stdio", tmp_path / f"c{n}", escape, n, robust=n == 1)[:2]:
            lines += path.read_bytes().splitlines()
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(b"\n".join(lines) + b"\n")
    beside = tmp_path / "beside.jsonl"
    beside.write_bytes(b"\n".join([*lines[:2], INSERTED, *lines[2:]]) + b"\n")
    names = {"c\\ud800mcp", "c\\udbffmcp", "c\x00mcp"}

    def named(facts: Any) -> set[str]:
        return set(as_strings(facts.messages).get_column("client_name").drop_nulls())

    for piece_bytes in (load.PIECE_BYTES, 2000):
        monkeypatch.setattr(load, "PIECE_BYTES", piece_bytes)
        for path in (plain, beside):
            assert named(extract_file(str(path), load.LoadOptions(condense=False))) == names
    header = orjson.loads(lines[0])
    body = b"\n".join(lines[1:]) + b"\n"
    assert named(extract_lines(str(plain), body, 2, header, load.LoadOptions(condense=False))) == names
    kept = extract_file(str(plain), load.LoadOptions(condense=False, keep_raw=True)).messages
    assert (
        kept.filter(pl.col("client_name").cast(pl.String) == "c\\ud800mcp")
        .get_column("raw")
        .str.contains('clientInfo":{"name":"c\\ud800mcp"', literal=True)
        .all()
    )
    compact([str(plain)], tmp_path / "archive", jobs=1)
    archived = orjson.loads(render_json(analyze([str(tmp_path / "archive")])))
    assert set(_clients(archived)) == names
    assert archived == orjson.loads(render_json(analyze([str(plain)]))) | {"inputs": archived["inputs"]}


def _frame(raw: bytes, direction: str, seq: int) -> bytes:
    return (
        b'{"type":"frame","conn":"c1","raw":"' + raw + b'","dir":"' + direction.encode() + b'","ts":'
        + str(1796002214.0 + seq).encode() + b',"server":"s","seq":' + str(seq).encode() + b"}"
    )  # fmt: skip


@pytest.mark.parametrize("robust", [False, True], ids=["fast", "robust"])
def test_ids_and_methods_with_lone_surrogates_pair_apart(tmp_path: Path, robust: bool) -> None:
    """Requests `"a\\ud800"` and `"a\\udbff"` (methods `m\\ud800` and `m\\u0000`), then an answer to
    the first: it answers `m\\ud800`, not the later request its id read alike with."""
    header = orjson.loads(sorted((CORPUS_DIR / "probe-storm-stdio").glob("*.jsonl"))[0].read_bytes().splitlines()[0])
    lines = [
        orjson.dumps(header),
        _frame(rb"{\"jsonrpc\":\"2.0\",\"id\":\"a\\ud800\",\"method\":\"m\\ud800\"}", "c2s", 1),
        _frame(rb"{\"jsonrpc\":\"2.0\",\"id\":\"a\\udbff\",\"method\":\"m\\u0000\"}", "c2s", 2),
        _frame(rb"{\"jsonrpc\":\"2.0\",\"id\":\"a\\ud800\",\"result\":{}}", "s2c", 3),
    ]
    if robust:
        lines.append(_frame(OBJECT_ID.replace('"', '\\"').encode(), "c2s", 4))
    path = tmp_path / "ids.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    rows = as_strings(extract_file(str(path), load.LoadOptions(condense=False)).messages).sort("line")
    assert rows.select("id", "method", "kind", "req_line").rows()[:3] == [
        ('"a\\\\ud800"', "m\\ud800", "request", None),
        ('"a\\\\udbff"', "m\x00", "request", None),
        ('"a\\\\ud800"', "m\\ud800", "response", 2),
    ]


@pytest.mark.parametrize("robust", [False, True], ids=["fast", "robust"])
def test_ids_and_methods_with_low_surrogates_alone_pair_apart(tmp_path: Path, robust: bool) -> None:
    """Requests `"a\\udc00"`, `"a\\udc01"` and `"a"` (methods `m\\udc00`, `m\\ud800\\u0041`, `m`), then an
    answer to the first: each read as the escapes' text, as a lone high one is (both readings refused
    the first two, invalid messages, and the answer with them), the answer answering the first alone."""
    header = orjson.loads(sorted((CORPUS_DIR / "probe-storm-stdio").glob("*.jsonl"))[0].read_bytes().splitlines()[0])
    lines = [
        orjson.dumps(header),
        _frame(rb"{\"jsonrpc\":\"2.0\",\"id\":\"a\\udc00\",\"method\":\"m\\udc00\"}", "c2s", 1),
        _frame(rb"{\"jsonrpc\":\"2.0\",\"id\":\"a\\udc01\",\"method\":\"m\\ud800\\u0041\"}", "c2s", 2),
        _frame(rb"{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"m\"}", "c2s", 3),
        _frame(rb"{\"jsonrpc\":\"2.0\",\"id\":\"a\\udc00\",\"result\":{}}", "s2c", 4),
        # a low one after a high one's text (the escaped backslash's): alone too
        _frame(rb"{\"jsonrpc\":\"2.0\",\"id\":\"a\\\\ud800\\udc00\",\"method\":\"m\\uDFFF\\ud800\"}", "c2s", 5),
    ]
    if robust:
        lines.append(_frame(OBJECT_ID.replace('"', '\\"').encode(), "c2s", 6))
    path = tmp_path / "ids.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    rows = as_strings(extract_file(str(path), load.LoadOptions(condense=False)).messages).sort("line")
    assert rows.select("id", "method", "kind", "req_line").rows()[:5] == [
        ('"a\\\\udc00"', "m\\udc00", "request", None),
        ('"a\\\\udc01"', "m\\ud800A", "request", None),
        ('"a"', "m", "request", None),
        ('"a\\\\udc00"', "m\\udc00", "response", 2),
        ('"a\\\\ud800\\\\udc00"', "m\\udfff\\ud800", "request", None),
    ]


def test_payload_surrogates_watched_as_analyzed(tmp_path: Path) -> None:
    """`erascope watch` over the three names' captures joined in one file, a line a round: the
    findings and era changes `analyze` reports, and its three clients."""
    lines = []
    for n, escape in enumerate(PAYLOAD_LONE):
        for path in client_named("upgrade-stdio", tmp_path / f"c{n}", escape, n, robust=n == 2)[:2]:
            lines += path.read_bytes().splitlines(keepends=True)
    live = tmp_path / "live"
    events = watched_line_by_line(lines, live, "joined.jsonl", idle=3600)
    report = analyzed(live)
    assert set(_clients(report)) == {"c\\ud800mcp", "c\\udbffmcp", "c\x00mcp"}
    assert reported(events) == expected(report)


def test_a_payload_escape_behind_a_backslash_written_as_an_escape(tmp_path: Path) -> None:
    """A line may write the backslash of a payload's escape as an escape of its own (`\\u005c`, any
    JSON writer may): the payload holds the same lone surrogate escape, read as its text the same way,
    alone in its file as beside one written plainly."""
    header = orjson.loads(sorted((CORPUS_DIR / "probe-storm-stdio").glob("*.jsonl"))[0].read_bytes().splitlines()[0])
    spelled = {rb"\\ud800": "m\\ud800", rb"\u005cud800": "m\\ud800", rb"\u005Cudbff": "m\\udbff"}
    frames = [
        _frame(rb"{\"jsonrpc\":\"2.0\",\"method\":\"m" + e + rb"\"}", "c2s", n + 1) for n, e in enumerate(spelled)
    ]
    names = list(spelled.values())
    for n, (lines, methods) in enumerate([*(([f], [m]) for f, m in zip(frames, names, strict=True)), (frames, names)]):
        path = tmp_path / f"{n}.jsonl"
        path.write_bytes(b"\n".join([orjson.dumps(header), *lines]) + b"\n")
        rows = as_strings(extract_file(str(path), load.LoadOptions(condense=False)).messages).sort("line")
        assert rows.get_column("method").to_list() == methods
