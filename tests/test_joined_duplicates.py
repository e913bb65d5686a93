"""A file of joined captures given beside one of the captures it holds (`cat a.jsonl b.jsonl >
both.jsonl`, then `erascope analyze dir/` with `b.jsonl` still in it): every capture part counts once.

Copies of a capture part are told apart by the identity its header names (`analyzer.load._identity`);
a file's first header is known before the file is read, a joined capture's only once it is. The part
read is the first in input order (sorted paths): a file wholly repeated is left out (`duplicates`),
a joined file's capture read already from an earlier file is left out of it by its lines (`repeated`).
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from analyzer import load
from analyzer.pipeline import analyze
from analyzer.report import render_json, render_text
from tests.test_concatenated import join, report
from tests.test_rotated_exchanges import SCENARIOS, rewrite

CORPUS = SCENARIOS[0].parent
A, B, C = (next((CORPUS / name).glob("*.jsonl")) for name in ("auto-modern-stdio", "auto-legacy-stdio", "upgrade-http"))


def copy(src: Path, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(src.read_bytes())
    return out


def whole(*paths: Path) -> dict[str, Any]:
    return orjson.loads(render_json(analyze([str(p) for p in paths])))


def records(*paths: Path) -> int:
    return whole(*paths)["inputs"]["records"]


def test_a_capture_given_before_the_joined_file_holding_it_counts_once(tmp_path: Path) -> None:
    """The joined file's first capture is another: it is read, and the capture given apart is left out of it."""
    b = copy(B, tmp_path / "1-b.jsonl")
    both = join([A, B], tmp_path / "2-both.jsonl")
    got = whole(b, both)
    assert got["totals"]["inits"] == whole(A, B)["totals"]["inits"]
    assert report(b, both) == report(A, B)
    assert got["inputs"]["records"] == records(A, B)
    a_lines = len(A.read_bytes().splitlines())
    b_lines = len(B.read_bytes().splitlines())
    assert got["inputs"]["repeated"] == [
        {"file": str(both), "lines": [a_lines + 1, a_lines + b_lines], "duplicate_of": str(b)}
    ]
    assert "duplicates" not in got["inputs"]


def test_a_capture_given_before_the_joined_file_starting_with_it_loses_nothing(tmp_path: Path) -> None:
    """The joined file's first header names a part read already: the file is not left out whole,
    its other capture is read."""
    a = copy(A, tmp_path / "1-a.jsonl")
    both = join([A, B], tmp_path / "2-both.jsonl")
    got = whole(a, both)
    assert report(a, both) == report(A, B)
    assert got["inputs"]["records"] == records(A, B)
    assert got["inputs"]["repeated"] == [
        {"file": str(both), "lines": [1, len(A.read_bytes().splitlines())], "duplicate_of": str(a)}
    ]
    assert str(both) in got["inputs"]["files"]


def test_a_capture_given_after_the_joined_file_holding_it_is_left_out(tmp_path: Path) -> None:
    both = join([A, B], tmp_path / "1-both.jsonl")
    b = copy(B, tmp_path / "2-b.jsonl")
    got = whole(both, b)
    assert report(both, b) == report(A, B)
    assert got["inputs"]["records"] == records(A, B)
    assert got["inputs"]["duplicates"] == [{"file": str(b), "duplicate_of": str(both)}]
    assert "repeated" not in got["inputs"]
    assert str(b) not in got["inputs"]["files"]


def test_two_joined_files_sharing_a_capture_count_it_once(tmp_path: Path) -> None:
    ab = join([A, B], tmp_path / "1-ab.jsonl")
    bc = join([B, C], tmp_path / "2-bc.jsonl")
    got = whole(ab, bc)
    assert report(ab, bc) == report(A, B, C)
    assert got["inputs"]["records"] == records(A, B, C)
    assert [r["duplicate_of"] for r in got["inputs"]["repeated"]] == [str(ab)]


def test_a_compressed_copy_of_a_joined_file_is_read_for_what_it_adds(tmp_path: Path) -> None:
    """Left out before reading by its first header (the same as `1-a.jsonl`'s), the compressed joined
    file is still looked into for the captures after it."""
    a = copy(A, tmp_path / "1-a.jsonl")
    both = tmp_path / "2-both.jsonl.gz"
    both.write_bytes(gzip.compress(A.read_bytes() + B.read_bytes()))
    got = whole(a, both)
    assert got["inputs"]["records"] == records(A, B)
    assert got["totals"] == whole(A, B)["totals"]


def test_a_rotated_part_joined_after_its_previous_part_and_given_apart_counts_once(tmp_path: Path) -> None:
    """`cat x.000.jsonl x.001.jsonl > x.jsonl` beside `x.001.jsonl`: the second part's header goes on
    with the first part's capture, and is the same part as the file given apart."""
    parts = rewrite(C, tmp_path / "parts", rotate_bytes=1500)
    assert len(parts) >= 3
    joined = join(parts[:2], tmp_path / "0-joined.jsonl")
    rest = [copy(p, tmp_path / "in" / p.name) for p in parts[1:]]
    expected = whole(*parts)
    got = whole(joined, *rest)
    assert got["inputs"]["records"] == expected["inputs"]["records"]
    assert got["totals"] == expected["totals"]
    assert [r["duplicate_of"] for r in got["inputs"].get("duplicates", [])] == [str(joined)]


@pytest.mark.parametrize("piece", [0, 700])
def test_the_lines_left_out_fall_anywhere_in_a_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int
) -> None:
    """Read in pieces (not batched), a repeated capture's lines can start and end mid-piece."""
    if piece:
        monkeypatch.setattr(load, "SMALL_BYTES", 0)
        monkeypatch.setattr(load, "PIECE_BYTES", piece)
    b = copy(B, tmp_path / "1-b.jsonl")
    abc = join([A, B, C], tmp_path / "2-abc.jsonl")
    assert report(b, abc) == report(A, B, C)
    assert records(b, abc) == records(A, B, C)


def test_the_text_report_names_the_lines_left_out(tmp_path: Path) -> None:
    b = copy(B, tmp_path / "1-b.jsonl")
    both = join([A, B], tmp_path / "2-both.jsonl")
    text = render_text(analyze([str(b), str(both)]))
    a_lines = len(A.read_bytes().splitlines())
    assert f"lines {a_lines + 1}" in text
    assert "the same capture as" in text


@pytest.mark.parametrize(
    ("leave_out", "expected"),
    [
        ((), [(b"a\nb\nc\nd", 10, 4)]),
        (((10, 10),), [(b"b\nc\nd", 11, 3)]),
        (((11, 12),), [(b"a\n", 10, 1), (b"d", 13, 1)]),
        (((13, 1 << 62),), [(b"a\nb\nc\n", 10, 3)]),
        (((1, 11), (13, 20)), [(b"c\n", 12, 1)]),
        (((1, 100),), []),
        (((20, 30),), [(b"a\nb\nc\nd", 10, 4)]),
    ],
)
def test_a_piece_without_the_lines_left_out(leave_out: tuple[tuple[int, int], ...], expected: list[Any]) -> None:
    """Lines 10 to 13, the last one torn (no newline)."""
    assert list(load._kept_lines(b"a\nb\nc\nd", 10, 4, leave_out)) == expected


def test_files_of_one_capture_each_are_not_looked_into_again(monkeypatch: pytest.MonkeyPatch) -> None:
    looked: list[str] = []
    monkeypatch.setattr(load, "_headers_in", lambda path: looked.append(path) or ([], 0))
    analyze([str(CORPUS)])
    assert looked == []


def test_a_copy_left_out_is_looked_into_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = copy(A, tmp_path / "1-a.jsonl")
    again = copy(A, tmp_path / "2-a.jsonl")
    real = load._headers_in
    looked: list[str] = []
    monkeypatch.setattr(load, "_headers_in", lambda path: looked.append(path) or real(path))
    got = whole(a, again)
    assert looked == [str(again)]
    assert got["inputs"]["duplicates"] == [{"file": str(again), "duplicate_of": str(a)}]
    assert got["inputs"]["records"] == records(A)


def test_ranges_left_out_are_merged() -> None:
    assert load._merged([(1, 3), (4, 6), (8, 9), (9, 12), (20, 20)]) == ((1, 6), (8, 12), (20, 20))


def test_a_run_of_captures_left_out_is_one_note(tmp_path: Path) -> None:
    """A file of thousands of joined copies of a capture read already from another file."""
    spawn = B.read_bytes()
    one = copy(B, tmp_path / "1-one.jsonl")
    many = tmp_path / "2-many.jsonl"
    many.write_bytes(A.read_bytes() + spawn * 2000)
    got = whole(one, many)
    assert got["inputs"]["records"] == records(A, B)
    assert len(got["inputs"]["repeated"]) == 1  # the 2,000 copies, one run of lines


def test_an_archived_capture_counts_for_the_joined_file_after_it(tmp_path: Path) -> None:
    """An archive's entry is never looked into again, but the part it holds is read: a joined file
    after it leaves that part out. After it as the file the entry archives sorts (an archive's entries
    are read in the order of the files they archive, as those files are): as their JSONL reads them."""
    from analyzer.compact import compact

    compact([str(copy(B, tmp_path / "0-src" / "b.jsonl"))], tmp_path / "archive", jobs=1)
    both = join([A, B], tmp_path / "1-both.jsonl")
    got = whole(tmp_path / "archive", both)
    assert got["inputs"]["records"] == records(A, B)
    assert [r["lines"][0] for r in got["inputs"]["repeated"]] == [len(A.read_bytes().splitlines()) + 1]
    assert got["inputs"] == whole(tmp_path / "0-src" / "b.jsonl", both)["inputs"]


def test_a_copy_left_out_names_the_file_read_for_it(tmp_path: Path) -> None:
    both = join([A, B], tmp_path / "1-both.jsonl")
    b = copy(B, tmp_path / "2-b.jsonl")
    b_again = copy(B, tmp_path / "3-b.jsonl")
    got = whole(both, b, b_again)
    assert got["inputs"]["duplicates"] == [
        {"file": str(b), "duplicate_of": str(both)},
        {"file": str(b_again), "duplicate_of": str(both)},
    ]


def _with_first_line(capture: Path, first: bytes) -> bytes:
    return first + b"".join(capture.read_bytes().splitlines(keepends=True)[1:])


def _header_of(capture: Path) -> bytes:
    return capture.read_bytes().splitlines(keepends=True)[0]


def test_a_part_past_64_bits_in_a_header_with_an_escape_is_no_crash(tmp_path: Path) -> None:
    """A line holding an escape is read again by Python's decoder (`addon.format.read_record`), which
    keeps an integer of any size, where orjson gives a float: the header's identity must still be made."""
    hostile = _header_of(B).replace(b'"part":0', b'"part":%d' % 10**30).replace(b'"server":"', b'"server":"\\u0041')
    first = tmp_path / "1-first.jsonl"
    first.write_bytes(_with_first_line(B, hostile))
    assert records(first) == records(B)
    c = copy(C, tmp_path / "0-c.jsonl")
    joined = tmp_path / "2-joined.jsonl"
    joined.write_bytes(A.read_bytes() + _with_first_line(B, hostile) + C.read_bytes())
    assert records(c, joined) == records(joined)


def test_a_joined_header_whose_type_is_spelled_with_escapes_is_found(tmp_path: Path) -> None:
    """`"h\\u0065ader"` is `header` to the reader: the capture it starts is known by its header like any other."""
    escaped = _header_of(B).replace(b'"type":"header"', b'"type":"h\\u0065ader"')
    both = tmp_path / "2-both.jsonl"
    both.write_bytes(A.read_bytes() + _with_first_line(B, escaped))
    assert records(both) == records(A, B)
    a = copy(A, tmp_path / "1-a.jsonl")
    assert records(a, both) == records(A, B)  # the file starts with a part read already: B not lost
    b = copy(B, tmp_path / "1-b.jsonl")
    assert records(b, both) == records(A, B)  # nor counted twice


def test_a_joined_file_finished_with_other_small_files_is_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files of at most a piece read alone are finished in groups whose aggregates go with one file
    (`finish_pending`): a joined file read again must not leave its first reading's behind."""
    monkeypatch.setattr(load, "SMALL_BYTES", 0)
    c = copy(C, tmp_path / "0-c.jsonl")
    b = copy(B, tmp_path / "1-b.jsonl")
    both = join([A, B], tmp_path / "2-both.jsonl")
    assert whole(c, b, both)["totals"] == whole(A, B, C)["totals"]
    assert report(c, b, both) == report(A, B, C)


@pytest.mark.parametrize("small", [30_000, 0], ids=["read-in-a-batch", "finished-together"])
@pytest.mark.parametrize("names", [("2-b", "3-c"), ("3-b", "2-c")], ids=["copy-first", "copy-last"])
def test_a_copy_read_with_other_files_after_the_joined_file_holding_it_keeps_their_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small: int, names: tuple[str, str]
) -> None:
    """`both.jsonl` (`cat a.jsonl b.jsonl`, read alone) before `b.jsonl` and `c.jsonl`, read together:
    in one batch (rows and aggregates go with its first file) or finished in one group (aggregates go
    with its first file). The copy of `b` left out must neither take `c`'s along nor leave its own."""
    monkeypatch.setattr(load, "SMALL_BYTES", small)  # 0: every file read alone, the small ones finished together
    both = join([A, B], tmp_path / "1-both.jsonl")
    assert both.stat().st_size > 30_000 > max(B.stat().st_size, C.stat().st_size)
    b, c = copy(B, tmp_path / f"{names[0]}.jsonl"), copy(C, tmp_path / f"{names[1]}.jsonl")
    assert whole(both, b, c)["totals"] == whole(A, B, C)["totals"]
    assert report(both, b, c) == report(A, B, C)


def test_a_rotated_part_after_a_part_left_out_goes_on_with_that_parts_capture(tmp_path: Path) -> None:
    """`cat a.jsonl x.000.jsonl x.001.jsonl` beside a copy of `x.000.jsonl`: the second part's rows are
    the HTTP capture's, not the stdio capture's before it, as when the file is read whole."""
    parts = rewrite(C, tmp_path / "parts", rotate_bytes=1500)
    x0 = copy(parts[0], tmp_path / "in" / "1-x0.jsonl")
    joined = join([A, *parts], tmp_path / "in" / "2-joined.jsonl")
    start = len(A.read_bytes().splitlines()) + 1
    after = start + len(parts[0].read_bytes().splitlines())

    def labels(*paths: Path) -> set[tuple[str, str]]:
        rows = load.combine(load.extract_files([str(p) for p in paths])).messages
        rows = rows.filter((pl.col("file") == str(joined)) & (pl.col("line") >= after))
        return set(rows.select(pl.col("capture", "transport").cast(pl.String)).iter_rows())

    assert labels(joined) == {(f"{joined.name}@{start}", "http")}
    assert labels(x0, joined) == labels(joined)


# --- archives ------------------------------------------------------------------------------------
# Each case names its inputs as `src/1-….jsonl` and `src/2-….jsonl`; an input archived apart is the
# archive `src/N-….arc` (its entry sorts where its file does), and one archive of both is `arc`. The
# report on them must be the report on the two JSONL files, byte for byte: the inputs' notes too.
_ARCHIVED = {
    "one archive": ("arc", "arc"),
    "two archives": ("own", "own"),
    "joined file archived": ("jsonl", "own"),
    "capture apart archived": ("own", "jsonl"),
}
"""How the capture given apart and the joined file are given: both in one archive, each in an
archive of its own, or one archived and the other as its JSONL."""


def _cli_report(*args: str) -> bytes:
    from typer.testing import CliRunner

    from analyzer.cli import app

    result = CliRunner().invoke(app, ["analyze", *args, "--format", "json", "--quiet"])
    assert result.exit_code == 0, result.output
    return result.stdout_bytes


def _cli_compact(out: Path, *paths: Path) -> None:
    from typer.testing import CliRunner

    from analyzer.cli import app

    result = CliRunner().invoke(app, ["compact", *map(str, paths), "--out", str(out)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("archived", list(_ARCHIVED))
@pytest.mark.parametrize("apart", ["first", "second"], ids=["apart-is-joined-first", "apart-is-joined-second"])
@pytest.mark.parametrize("order", ["apart-before", "joined-before"])
def test_an_archive_counts_a_joined_capture_given_apart_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, archived: str, apart: str, order: str
) -> None:
    """`cat a.jsonl b.jsonl > both.jsonl` beside a copy of `a.jsonl` or `b.jsonl`, compacted: the
    archive's report is the JSONL files' (`erascope analyze both.jsonl b.jsonl`), each capture
    counted once, the repeated lines or the copy named as there."""
    monkeypatch.chdir(tmp_path)
    (Path("src")).mkdir()
    n_apart, n_joined = ("1", "2") if order == "apart-before" else ("2", "1")
    given = copy(A if apart == "first" else B, Path(f"src/{n_apart}-apart.jsonl"))
    both = join([A, B], Path(f"src/{n_joined}-both.jsonl"))
    expected = _cli_report(str(given), str(both))
    how_apart, how_joined = _ARCHIVED[archived]
    if how_apart == "arc":
        _cli_compact(Path("arc"), given, both)
        inputs = ["arc"]
    else:
        inputs = []
        for path, how in ((given, how_apart), (both, how_joined)):
            if how == "own":
                _cli_compact(path.with_suffix(".arc"), path)
                inputs.append(str(path.with_suffix(".arc")))
            else:
                inputs.append(str(path))
    got = _cli_report(*inputs)
    assert orjson.loads(got)["inputs"] == orjson.loads(expected)["inputs"]
    assert got == expected


@pytest.mark.parametrize("read", ["--since", "rows"], ids=["selection", "stale-condensed-frames"])
def test_an_archive_read_by_its_rows_counts_a_joined_capture_given_apart_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """Read from its parts (a selection, condensed frames of another erascope), an archive reads files
    together and gives their rows to one of them: a copy left out must not take the others' rows along."""
    from analyzer import archive as archive_reader

    monkeypatch.chdir(tmp_path)
    Path("src").mkdir()
    files = [join([A, B], Path("src/1-both.jsonl")), copy(B, Path("src/2-b.jsonl")), copy(C, Path("src/3-c.jsonl"))]
    _cli_compact(Path("arc"), Path("src"))
    args = ["--since", "2000-01-01"] if read == "--since" else []
    expected = _cli_report(*map(str, files), *args)
    if read == "rows":
        monkeypatch.setattr(archive_reader, "condensed_current", lambda entry: False)
    assert _cli_report("arc", *args) == expected
    duplicates = orjson.loads(expected)["inputs"]["duplicates"]
    assert duplicates == [{"file": "src/2-b.jsonl", "duplicate_of": "src/1-both.jsonl"}]


@pytest.mark.parametrize(
    "read",
    ["--since", "--server", "rows", "condensed"],
    ids=["selection", "server", "stale-condensed-frames", "condensed-frames"],
)
@pytest.mark.parametrize("order", ["joined-before", "archive-before"])
@pytest.mark.parametrize("names", [("2-b", "3-c"), ("3-b", "2-c")], ids=["copy-holds-the-rows", "other-holds-the-rows"])
def test_an_archive_beside_a_joined_file_holding_one_of_its_captures_keeps_the_others_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read: str, order: str, names: tuple[str, str]
) -> None:
    """`both.jsonl` (`cat a.jsonl b.jsonl`) given beside an archive of `b.jsonl` and `c.jsonl`: the
    archive's entries are read before `both.jsonl` is known to hold `b`, and read by their rows they
    are read together, their rows given to the first. The copy left out must neither take `c`'s rows
    along nor leave its own with `c`'s: the report is the JSONL files' (27 of the 54 messages were
    lost when `both.jsonl` sorted first)."""
    from analyzer import archive as archive_reader

    monkeypatch.chdir(tmp_path)
    # the archive's entries sort among the inputs where the files they archive sort among the JSONL
    arc, archived = ("z-arc", "zsrc") if order == "joined-before" else ("0-arc", "asrc")
    Path("src").mkdir()
    Path(archived).mkdir()
    both = join([A, B], Path("src/1-both.jsonl"))
    apart = sorted([copy(B, Path(f"{archived}/{names[0]}.jsonl")), copy(C, Path(f"{archived}/{names[1]}.jsonl"))])
    _cli_compact(Path(arc), Path(archived))
    server = orjson.loads(_header_of(C))["server"]
    args = {"--since": ["--since", "2000-01-01"], "--server": ["--server", server]}.get(read, [])
    expected = _cli_report(str(both), *map(str, apart), *args)
    if read == "rows":
        monkeypatch.setattr(archive_reader, "condensed_current", lambda entry: False)
    got = _cli_report(str(both), arc, *args)
    assert orjson.loads(got)["totals"] == orjson.loads(expected)["totals"]
    assert got == expected
    if order == "joined-before":
        duplicates = orjson.loads(expected)["inputs"]["duplicates"]
        assert duplicates == [{"file": f"{archived}/{names[0]}.jsonl", "duplicate_of": "src/1-both.jsonl"}]


def test_the_lines_left_out_of_an_archived_file_take_their_bad_lines_along(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The capture given apart has a malformed line and a torn last line; the joined file holds it
    last: left out of the archived joined file, they are named once, in the copy read."""
    monkeypatch.chdir(tmp_path)
    Path("src").mkdir()
    lines = B.read_bytes().splitlines(keepends=True)
    damaged = b"".join([*lines[:5], b"{not json\n", *lines[5:]])[:-20]  # torn: its last line cut short
    apart = Path("src/1-b.jsonl")
    apart.write_bytes(damaged)
    both = Path("src/2-both.jsonl")
    both.write_bytes(A.read_bytes() + damaged)
    expected = _cli_report(str(apart), str(both))
    inputs = orjson.loads(expected)["inputs"]
    assert [m["file"] for m in inputs["malformed"]] == [str(apart)]
    assert [t["file"] for t in inputs["torn"]] == [str(apart)]
    _cli_compact(Path("arc"), apart, both)
    assert _cli_report("arc") == expected


def _entry(archive: Path, name: str) -> Path:
    return archive / "_sources" / f"{name}.json"


def test_only_an_entry_of_joined_captures_lists_them(tmp_path: Path) -> None:
    """A file of one capture costs its entry nothing more: what names its capture part is its `identity`."""
    copy(B, tmp_path / "src" / "b.jsonl")
    join([A, B], tmp_path / "src" / "both.jsonl")
    _cli_compact(tmp_path / "arc", tmp_path / "src")
    assert "captures" not in orjson.loads(_entry(tmp_path / "arc", "b.jsonl").read_bytes())
    listed = orjson.loads(_entry(tmp_path / "arc", "both.jsonl").read_bytes())["captures"]
    a_lines = len(A.read_bytes().splitlines())
    assert [c["lines"] for c in listed] == [[1, a_lines], [a_lines + 1, a_lines + len(B.read_bytes().splitlines())]]
    assert sum(sum(c["counts"].values()) for c in listed) == records(A, B)


def test_an_entry_written_before_captures_were_listed_is_read_and_converted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archive from an erascope that named a joined file's first capture alone reads as it did
    (its later captures' copies counted twice), and the next `compact` converts that file again."""
    monkeypatch.chdir(tmp_path)
    Path("src").mkdir()
    files = [copy(B, Path("src/1-b.jsonl")), join([A, B], Path("src/2-both.jsonl"))]
    expected = _cli_report(*map(str, files))
    _cli_compact(Path("arc"), Path("src"))
    entry = _entry(Path("arc"), "2-both.jsonl")
    older = orjson.loads(entry.read_bytes())
    del older["captures"]
    entry.write_bytes(orjson.dumps(older))
    assert orjson.loads(_cli_report("arc"))["inputs"]["records"] == records(A, B) + records(B)
    from analyzer.compact import compact

    result = compact([Path("src")], Path("arc"), jobs=1)
    assert result.written == ["src/2-both.jsonl"]
    assert result.unchanged == ["src/1-b.jsonl"]
    assert _cli_report("arc") == expected


def test_an_entry_lists_the_same_captures_whatever_the_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read in pieces, a part's lines may start and end mid-piece, and a piece may hold many parts."""
    from analyzer.compact import compact

    lines = B.read_bytes().splitlines(keepends=True)
    src = tmp_path / "src" / "abc.jsonl"
    src.parent.mkdir()
    src.write_bytes(A.read_bytes() + b"".join([*lines[:5], b"{not json\n", *lines[5:]]) + C.read_bytes() * 2)
    entries = []
    for piece in (load.PIECE_BYTES, 700):
        monkeypatch.setattr(load, "PIECE_BYTES", piece)
        compact([str(src)], tmp_path / f"arc-{piece}", jobs=1)
        entries.append(orjson.loads(_entry(tmp_path / f"arc-{piece}", "abc.jsonl").read_bytes()))
    assert entries[0]["captures"] == entries[1]["captures"]
    assert len(entries[0]["captures"]) == 4
    assert sum(sum(c["counts"].values()) for c in entries[0]["captures"]) == entries[0]["records"]


def test_a_joined_header_holding_a_lone_surrogate_escape_is_compacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture joined after another, its server key holding a lone surrogate escape (`"s\\ud800"`),
    and a malformed line after it: the reader reads its header (the escape as its text), the header
    search did not (orjson refuses the escape), and `compact` stopped with a traceback when it counted
    the file's captures apart. The archive reads as the JSONL."""
    monkeypatch.chdir(tmp_path)
    Path("src").mkdir()
    server = orjson.loads(_header_of(B))["server"]
    lone = B.read_bytes().replace(f'"server":"{server}"'.encode(), b'"server":"s\\ud800"')
    assert lone != B.read_bytes()
    both = Path("src/both.jsonl")
    # the malformed line has the piece read line by line; the capture after it is one the search finds
    both.write_bytes(A.read_bytes() + lone + b"{not json\n" + C.read_bytes())
    expected = _cli_report(str(both))
    _cli_compact(Path("arc"), both)
    assert _cli_report("arc") == expected
    report = orjson.loads(expected)
    assert [bad["line"] for bad in report["inputs"]["malformed"]] == [len((A.read_bytes() + lone).splitlines()) + 1]
    assert "s\\ud800" in [s["server"] for s in report["servers"]]
