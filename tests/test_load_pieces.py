"""Reading a capture file in pieces: any piece size gives the facts of the file read whole."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer import load
from analyzer.load import FileFacts, LoadOptions, combine, extract_file
from analyzer.messages import CATEGORICAL_COLUMNS, as_strings
from analyzer.schema import MESSAGES_SCHEMA
from tests.test_load import HEADER, frame, write_lines
from tests.test_messages import Cap, discover_result, probe

WHOLE = 16 << 20
"""A piece size no test file reaches: the file is one piece, as before pieces existed (`read` allocates it)."""


def facts_of(path: Path | str, piece_bytes: int, options: LoadOptions | None = None) -> FileFacts:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(load, "PIECE_BYTES", piece_bytes)
        # every message row: these tests compare reading, not condensing (tests/test_condense.py)
        return extract_file(str(path), options or LoadOptions(condense=False))


def pieces_of(path: Path, piece_bytes: int) -> list[bytes]:
    with path.open("rb") as f:
        return list(load._pieces(f, piece_bytes))


def assert_same_facts(a: FileFacts, b: FileFacts) -> None:
    # FileFacts holds a DataFrame, so dataclass equality cannot be used
    assert (a.file, a.capture, a.transport, a.skipped) == (b.file, b.capture, b.transport, b.skipped)
    assert (a.records, a.counts, a.lost) == (b.records, b.counts, b.lost)
    assert (a.malformed, a.torn) == (b.malformed, b.torn)
    assert a.messages.schema == b.messages.schema
    assert a.messages.equals(b.messages, null_equal=True)


def assert_piece_size_does_not_matter(path: Path, sizes: tuple[int, ...] = (1, 64, 200)) -> FileFacts:
    whole = facts_of(path, WHOLE)
    for size in sizes:
        assert_same_facts(facts_of(path, size), whole)
    return whole


def test_pieces_cut_after_newlines_and_never_split_a_line() -> None:
    data = b"a\nbb\n" + b"c" * 50 + b"\n\nd"
    pieces = list(load._pieces(io.BytesIO(data), 4))
    assert b"".join(pieces) == data
    assert all(p.endswith(b"\n") for p in pieces[:-1])
    assert pieces == [b"a\n", b"bb\n", b"c" * 50 + b"\n\n", b"d"]
    assert list(load._pieces(io.BytesIO(b""), 4)) == []
    assert list(load._pieces(io.BytesIO(b"x\n"), 1)) == [b"x\n"]
    assert list(load._pieces(io.BytesIO(b"xyz"), 1)) == [b"xyz"]


def test_writer_capture_in_many_pieces(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    for n in range(1, 6):
        cap.c2s(probe(n))
        cap.s2c(discover_result(n))
    cap.life("exit", code=0)
    path = cap.close()
    assert len(pieces_of(path, 64)) > 5
    whole = assert_piece_size_does_not_matter(path)
    assert (whole.records, whole.malformed, whole.torn) == (12, [], None)
    assert whole.messages.get_column("line").to_list() == list(range(2, 13))
    assert_same_facts(facts_of(path, 64, LoadOptions(keep_raw=True)), facts_of(path, WHOLE, LoadOptions(keep_raw=True)))


def test_bad_lines_in_many_pieces(tmp_path: Path) -> None:
    lines = [
        orjson.dumps(HEADER).decode(),
        frame(1, '{"jsonrpc":"2.0","id":1,"method":"ping"}'),
        "this is not json",
        "",
        frame(2, '{"jsonrpc":"2.0","id":1,"result":{}}', "s2c"),
        '{"type": "frame", "seq": "three"}',
        "   ",
        "[1, 2, 3]",
        frame(3, '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'),
        '{"seq": 3}',
        frame(4, '{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}', "s2c"),
        '{"type":"frame","seq":5,"raw":"{\\"jso',  # torn: the recorder was killed mid-write
    ]
    path = write_lines(tmp_path / "bad.jsonl", lines, trailing_newline=False)
    whole = assert_piece_size_does_not_matter(path)
    assert [(b.line, b.reason) for b in whole.malformed] == [
        (3, "not valid JSON"),
        (4, "empty line"),
        (6, "field 'seq' has the wrong type (str)"),
        (7, "empty line"),
        (8, "not a JSON object"),
        (10, "no record type"),
    ]
    assert whole.torn is not None and whole.torn.line == 12
    assert whole.messages.get_column("line").to_list() == [2, 5, 9, 11]


def test_bad_line_in_a_later_piece_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # only the pieces that hold a bad line take the line path; the last line (complete, but blank)
    # is not torn
    good = [frame(n, f'{{"jsonrpc":"2.0","id":{n},"method":"ping"}}') for n in range(1, 8)]
    path = write_lines(tmp_path / "late.jsonl", [orjson.dumps(HEADER).decode(), *good, "oops", frame(8, "{}"), ""])
    whole = assert_piece_size_does_not_matter(path, (64, 300, 1000))
    assert [(b.line, b.reason) for b in whole.malformed] == [(9, "not valid JSON"), (11, "empty line")]
    assert whole.torn is None
    slow: list[int] = []
    read_bad_piece = load._read_bad_piece
    monkeypatch.setattr(load, "_read_bad_piece", lambda facts, piece, first, *rest: (
        slow.append(first), read_bad_piece(facts, piece, first, *rest))[1])
    pieces = pieces_of(path, 300)
    assert len(pieces) > 3
    facts_of(path, 300)
    with_bad = [n for n, p in enumerate(pieces) if b"oops" in p or b"\n\n" in p or p.startswith(b"\n")]
    assert len(slow) == len(with_bad) < len(pieces)


def test_lines_the_reader_refuses_are_located_by_it(tmp_path: Path) -> None:
    # valid JSON with a field of the wrong type: the NDJSON reader refuses it without naming the
    # line; halving finds it, however many good lines surround it. A wrong type in a field the
    # analysis never reads (`nl`) is not read, so it is no error, in this file as in a clean one.
    good = [frame(n, f'{{"jsonrpc":"2.0","id":{n},"method":"ping"}}') for n in range(1, 40)]
    wrong = ['{"type":"frame","seq":"x"}', '{"type":"frame","ts":"noon"}', '{"type":"http.response","status":"ok"}']
    unread = '{"type":"frame","seq":99,"nl":3}'
    lines = [orjson.dumps(HEADER).decode(), *good[:10], wrong[0], *good[10:30], wrong[1], wrong[2], unread, *good[30:]]
    path = write_lines(tmp_path / "wrong.jsonl", lines)
    whole = assert_piece_size_does_not_matter(path, (1, 500, 3000))
    assert [(b.line, b.reason) for b in whole.malformed] == [
        (12, "field 'seq' has the wrong type (str)"),
        (33, "field 'ts' has the wrong type (str)"),
        (34, "field 'status' has the wrong type (str)"),
    ]
    assert whole.records == 1 + len(good) + 1
    clean = write_lines(tmp_path / "clean.jsonl", [orjson.dumps(HEADER).decode(), unread])
    assert facts_of(clean, WHOLE).records == 2


def test_a_line_longer_than_several_pieces(tmp_path: Path) -> None:
    long_raw = orjson.dumps({"jsonrpc": "2.0", "id": 2, "result": {"text": "x" * 2_000}}).decode()
    lines = [
        orjson.dumps(HEADER).decode(),
        frame(1, '{"jsonrpc":"2.0","id":2,"method":"x"}'),
        frame(2, long_raw, "s2c"),
    ]
    path = write_lines(tmp_path / "long.jsonl", [*lines, frame(3, "{}")])
    pieces = pieces_of(path, 64)
    assert any(len(p) > 10 * 64 for p in pieces)
    whole = assert_piece_size_does_not_matter(path)
    assert whole.messages.get_column("line").to_list() == [2, 3, 4]
    # the same long line torn at the end of the file
    torn = write_lines(tmp_path / "long-torn.jsonl", [*lines, frame(3, long_raw)[:-500]], trailing_newline=False)
    whole = assert_piece_size_does_not_matter(torn)
    assert whole.torn is not None and whole.torn.line == 4


def test_readings_that_depend_on_the_whole_file(tmp_path: Path) -> None:
    # An id that is an object switches the file to the robust id reading; an integer beyond 64 bits
    # reads the same either way (every digit, see `messages_from_records`), so whether pieces chose
    # their reading on their own or the file whole, the id is the same. A bad line elsewhere changes
    # nothing about the other lines: the NDJSON reader judges every record, so an object `raw` is
    # text with or without one.
    obj_raw = '{"type":"frame","seq":1,"dir":"c2s","conn":"c1","raw":{"jsonrpc":"2.0"}}'
    float_id = frame(2, '{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}')
    object_id = frame(4, '{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}')
    filler = [frame(3, '{"jsonrpc":"2.0","method":"notifications/x"}')] * 4
    header = orjson.dumps(HEADER).decode()
    cases = {
        "raw-then-bad": [header, obj_raw, *filler, "not json", *filler],
        "raw-then-torn": [header, obj_raw, *filler, '{"type":"fr'],
        "ids": [header, float_id, *filler, object_id, *filler],
        "ids-and-bad": [header, float_id, *filler, object_id, '{"type":"frame","seq":"x"}', *filler],
    }
    for name, lines in cases.items():
        path = write_lines(tmp_path / f"{name}.jsonl", lines, trailing_newline=not name.endswith("torn"))
        whole = assert_piece_size_does_not_matter(path, (1, 64, 150, 400))
        if name.startswith("raw"):
            bad = [b.line for b in whole.malformed] + ([whole.torn.line] if whole.torn else [])
            assert bad == [7]  # only the bad line itself
            row = whole.messages.filter(pl.col("line") == 2).row(0, named=True)
            assert (row["record_type"], row["kind"]) == ("frame", "invalid")
        if name.startswith("ids"):
            assert whole.messages.get_column("id").to_list()[0] == "123456789012345678901234567890"


def test_categoricals_survive_many_pieces(tmp_path: Path) -> None:
    paths = []
    for n in range(2):
        cap = Cap(tmp_path / f"d{n}", server=f"s{n}")
        for k in range(1, 4):
            cap.c2s(probe(k))
            cap.s2c(discover_result(k))
        paths.append(cap.close())
    # as read (before the per-file pairing rebuilds the frame): one chunk per piece
    assert all(facts_of(p, 64, LoadOptions(keep_raw=True)).messages.n_chunks() > 1 for p in paths)
    facts = [facts_of(p, 64) for p in paths]
    m = combine(facts).messages
    for name in CATEGORICAL_COLUMNS:
        assert m.schema[name] == pl.Categorical(), name
    plain = as_strings(m)
    assert dict(plain.schema) == MESSAGES_SCHEMA
    assert plain.get_column("server").to_list() == ["s0"] * 6 + ["s1"] * 6
    assert plain.get_column("req_line").to_list() == [None, 2, None, 4, None, 6] * 2


# --- invariant -----------------------------------------------------------------------------------
_payload = st.sampled_from(
    [
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}',
        '{"jsonrpc":"2.0","id":1,"result":{}}',
        '{"jsonrpc":"2.0","id":1.0,"result":{}}',
        '{"jsonrpc":"2.0","id":[1],"method":"x"}',
        '{"jsonrpc":"2.0","id":"1","error":{"code":-32600,"message":"no"}}',
        "not json at all",
    ]
)
_line = st.one_of(
    st.builds(lambda raw, n: frame(n, raw), _payload, st.integers(0, 99)),
    st.builds(lambda n: frame(n, "y" * n), st.integers(0, 400)),
    st.sampled_from(
        [
            "",
            "  ",
            "garbage",
            "[1]",
            '{"seq":1}',
            '{"type":null}',
            '{"type":"frame","seq":"x"}',
            '{"type":"frame","seq":2.0,"raw":"{}"}',
            '{"type":"frame","raw":5}',
            '{"type":"frame","raw":{"a":1}}',
            '{"type":"capture-error","lost":3}',
            '{"type":"stderr","raw":"boom"}',
        ]
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(_line, max_size=30),
    piece_bytes=st.integers(1, 2_000),
    end=st.sampled_from(["\n", "", '\n{"type":"frame","se']),
)
def test_any_piece_size_reads_like_the_whole_file(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str], piece_bytes: int, end: str
) -> None:
    text = "\n".join([orjson.dumps(HEADER).decode(), *lines]) + end
    path = tmp_path_factory.mktemp("pieces") / "c.jsonl"
    path.write_text(text, encoding="utf-8")
    assert_same_facts(facts_of(path, piece_bytes), facts_of(path, WHOLE))


def test_a_batch_refused_though_no_line_alone_is_never_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not seen with polars 2.1: a reader that refuses two lines together but each alone. The
    # lines are then reported (counted and located), never a traceback.
    lines = [orjson.dumps(HEADER).decode(), "oops", *(frame(n, "{}") for n in range(1, 5))]
    path = write_lines(tmp_path / "pair.jsonl", lines)
    read_lines = load._read_lines

    def picky(facts: FileFacts, good: pl.DataFrame, *rest: object) -> object:
        together = good.filter(pl.col("line").is_in([3, 4])).height == 2
        return None if together else read_lines(facts, good, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(load, "_read_lines", picky)
    facts = facts_of(path, WHOLE)
    reported = [*facts.malformed, *([facts.torn] if facts.torn else [])]
    assert sorted(b.line for b in reported) == list(range(1, 7))  # every line accounted for
    assert {b.reason for b in reported if b.line != 2} <= {
        "refused with the lines around it",
        "torn last line (refused with the lines around it)",
    }
    assert facts.records == 0
