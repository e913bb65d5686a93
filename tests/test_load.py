"""Loading: inputs, headers, malformed and torn lines, versions, invariants (hypothesis)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addon import format as fmt
from addon.errors import ErascopeError
from addon.writer import CaptureWriter
from analyzer.load import LoadOptions, combine, extract_file, find_inputs
from analyzer.messages import CATEGORICAL_COLUMNS, MEMBER_SLOTS, as_categoricals, as_strings, pair_responses
from analyzer.pipeline import analyze
from analyzer.schema import MESSAGES_SCHEMA
from tests.test_messages import Cap, discover_result, probe

ERASCOPE = Path(sys.executable).parent / "erascope"
HEADER = {"type": "header", "format": "erascope/1", "tool": "erascope", "transport": "stdio", "seq": 0, "part": 0}


def write_lines(path: Path, lines: list[str], *, trailing_newline: bool = True) -> Path:
    path.write_text("\n".join(lines) + ("\n" if trailing_newline else ""), encoding="utf-8")
    return path


def frame(seq: int, raw: str, direction: str = "c2s") -> str:
    rec = {"type": "frame", "seq": seq, "ts": 1.0 + seq, "mono": 1.0, "server": "srv", "conn": "c1",
           "dir": direction, "raw": raw, "len": len(raw), "nl": True}
    return orjson.dumps(rec).decode()


def test_writer_capture_reads_on_the_fast_path(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(discover_result(1))
    facts = extract_file(str(cap.close()))
    assert (facts.records, facts.malformed, facts.torn, facts.skipped) == (3, [], None, None)
    assert facts.counts == {"header": 1, "frame": 2, "part-end": 1}  # part-end: the chain's closing record
    assert facts.transport == "stdio"
    assert facts.messages.get_column("line").to_list() == [2, 3]


def test_malformed_lines_are_located(tmp_path: Path) -> None:
    lines = [
        orjson.dumps(HEADER).decode(),
        frame(1, '{"jsonrpc":"2.0","id":1,"method":"ping"}'),
        "this is not json",
        "[1, 2, 3]",
        '{"seq": 3}',
        "",
        '{"type": "frame", "seq": "three"}',
        frame(4, '{"jsonrpc":"2.0","id":1,"result":{}}', "s2c"),
    ]
    path = str(write_lines(tmp_path / "x.jsonl", lines))
    facts = extract_file(path, LoadOptions(condense=False))  # the ping's answer would be condensed
    assert [(b.line, b.reason) for b in facts.malformed] == [
        (3, "not valid JSON"),
        (4, "not a JSON object"),
        (5, "no record type"),
        (6, "empty line"),
        (7, "field 'seq' has the wrong type (str)"),
    ]
    assert all(b.file == path for b in facts.malformed)
    assert facts.torn is None
    assert facts.messages.get_column("line").to_list() == [2, 8]
    assert facts.messages.get_column("kind").to_list() == ["request", "response"]


def test_torn_last_line(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    path = cap.close()
    # a recorder killed mid-write never wrote its closing record (part-end)
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:-1]))
    with path.open("ab") as f:
        f.write(b'{"type":"frame","seq":2,"raw":"{\\"jsonrpc')  # recorder killed mid-write
    facts = extract_file(str(path))
    assert facts.torn is not None and facts.torn.line == 3 and "torn" in facts.torn.reason
    assert facts.malformed == []
    assert facts.records == 2


def test_unknown_major_version_is_refused(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "future.jsonl", [orjson.dumps({**HEADER, "format": "erascope/2"}).decode()])
    with pytest.raises(ErascopeError, match=r"erascope/2.*not supported"):
        analyze([str(path)])


# a major must be ASCII digits: `str.isdigit` also takes `²` (which `int` refuses) and `١` (which
# `int` reads as 1), and `int` refuses more than 4300 digits
ODD_MAJORS = ["erascope/\u00b2", "erascope/\u0661", "erascope/" + "9" * 5000, "erascope/+1", "erascope/ 1", "erascope/"]
ODD_MAJOR_IDS = ["superscript", "arabic-indic", "5000-digits", "plus", "space", "empty"]


@pytest.mark.parametrize("value", ODD_MAJORS, ids=ODD_MAJOR_IDS)
def test_a_major_that_is_not_ascii_digits_names_no_version(value: str) -> None:
    assert fmt.parse_format_id(value) is None
    assert fmt.parse_format_id("erascope/1") == 1 and fmt.parse_format_id("erascope/12.3") == 12


@pytest.mark.parametrize("value", ODD_MAJORS, ids=ODD_MAJOR_IDS)
def test_a_header_with_an_odd_major_is_refused_by_the_cli(tmp_path: Path, value: str) -> None:
    path = write_lines(tmp_path / "odd.jsonl", [orjson.dumps({**HEADER, "format": value}).decode(), frame(1, "{}")])
    proc = subprocess.run([str(ERASCOPE), "analyze", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "is not supported by this erascope" in proc.stderr
    assert len(proc.stderr) < 600  # the 5000-digit value is not echoed whole


def test_non_capture_files_are_skipped_and_noted(tmp_path: Path) -> None:
    write_lines(tmp_path / "notes.jsonl", ['{"hello": "world"}'])
    write_lines(tmp_path / "other.jsonl", [orjson.dumps({**HEADER, "format": "otherformat/1"}).decode()])
    (tmp_path / "readme.txt").write_text("not even jsonl")
    cap = Cap(tmp_path / "caps")
    cap.c2s(probe(1))
    real = str(cap.close())
    a = analyze([str(tmp_path)])
    assert a.inputs.files == [real]
    assert sorted(Path(f).name for f, _ in a.inputs.skipped) == ["notes.jsonl", "other.jsonl"]
    assert all("not an erascope capture" in reason for _, reason in a.inputs.skipped)


def test_empty_input_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ErascopeError, match=r"no \*\.jsonl files under .*empty"):
        analyze([str(tmp_path / "empty")])
    write_lines(tmp_path / "junk.jsonl", ["nope"])
    with pytest.raises(ErascopeError, match=r"no capture records found in .*skipped"):
        analyze([str(tmp_path / "junk.jsonl")])


def test_missing_path_and_empty_glob(tmp_path: Path) -> None:
    with pytest.raises(ErascopeError, match="no such file or directory"):
        find_inputs([str(tmp_path / "missing.jsonl")])
    with pytest.raises(ErascopeError, match="no files match"):
        find_inputs([str(tmp_path / "*.jsonl")])


def test_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    # Permission bits do not stop root: /proc/self/mem is a regular file that cannot be read at 0.
    (tmp_path / "mem.jsonl").symlink_to("/proc/self/mem")
    with pytest.raises(ErascopeError, match="cannot read"):
        extract_file(str(tmp_path / "mem.jsonl"))


def test_globs_directories_and_duplicates(tmp_path: Path) -> None:
    paths = []
    for n in range(2):
        cap = Cap(tmp_path / f"d{n}", server=f"s{n}")
        cap.c2s(probe(1))
        paths.append(str(cap.close()))
    found = find_inputs([str(tmp_path / "d*" / "*.jsonl"), str(tmp_path / "d0"), paths[1]])
    assert found == paths


def test_rotated_parts_pair_across_files(tmp_path: Path) -> None:
    w = CaptureWriter(tmp_path, transport="stdio", server="srv", rotate_bytes=400)
    raw_req = orjson.dumps(probe(1)).decode()
    raw_resp = orjson.dumps(discover_result(1)).decode()
    w.write({"type": "frame", "conn": "c1", "dir": "c2s", "raw": raw_req, "len": len(raw_req), "nl": True})
    w.write({"type": "frame", "conn": "c1", "dir": "s2c", "raw": raw_resp, "len": len(raw_resp), "nl": True})
    w.close()
    assert len(w.paths) == 2
    a = analyze([str(tmp_path)])
    assert a.probes.get_column("outcome").to_list() == ["discover-result"]
    resp = a.messages.filter(pl.col("kind") == "response")
    assert resp.get_column("file").to_list() == [str(w.paths[1])]
    assert resp.get_column("req_line").to_list() == [2]


# --- invariants ----------------------------------------------------------------------------------
_ids = st.one_of(st.integers(-(2**40), 2**40), st.text(min_size=0, max_size=12))
_payloads = st.one_of(
    st.builds(lambda i: orjson.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {}}).decode(), _ids),
    st.builds(lambda i: orjson.dumps({"jsonrpc": "2.0", "id": i, "result": {}}).decode(), _ids),
    st.text(max_size=40),
)
_garbage = st.text(max_size=60).filter(lambda s: "\n" not in s and not _is_record(s))


def _is_record(text: str) -> bool:
    try:
        obj: Any = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and "type" in obj


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(_payloads, min_size=0, max_size=25))
def test_loading_never_drops_or_duplicates_records(
    tmp_path_factory: pytest.TempPathFactory, payloads: list[str]
) -> None:
    path = tmp_path_factory.mktemp("inv") / "c.jsonl"
    write_lines(path, [orjson.dumps(HEADER).decode()] + [frame(n + 1, raw) for n, raw in enumerate(payloads)])
    facts = extract_file(str(path))
    m = combine([facts]).messages
    assert facts.records == len(payloads) + 1
    # a row per record, or per member of a record that is a JSON-RPC batch (`[1,2]`), in order
    records = [seq // MEMBER_SLOTS for seq in m.get_column("seq").to_list()]
    assert records == sorted(records) and set(records) == set(range(1, len(payloads) + 1))
    assert m.get_column("line").to_list() == [n + 1 for n in records]
    assert facts.malformed == [] and facts.torn is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    payloads=st.lists(_payloads, min_size=1, max_size=12),
    garbage=st.lists(st.tuples(st.integers(0, 20), _garbage), min_size=1, max_size=5),
    newline_at_end=st.booleans(),
)
def test_garbage_lines_are_reported_never_fatal(
    tmp_path_factory: pytest.TempPathFactory,
    payloads: list[str],
    garbage: list[tuple[int, str]],
    newline_at_end: bool,
) -> None:
    good = [frame(n + 1, raw) for n, raw in enumerate(payloads)]
    lines: list[tuple[str, bool]] = [(g, True) for g in good]
    for pos, text in garbage:
        lines.insert(min(pos, len(lines)), (text, False))
    all_lines = [orjson.dumps(HEADER).decode()] + [t for t, _ in lines]
    bad_numbers = [n + 2 for n, (_, ok) in enumerate(lines) if not ok]
    if not newline_at_end and all_lines[-1] == "":
        newline_at_end = True  # a file cannot end in an empty line without a newline
    path = write_lines(tmp_path_factory.mktemp("garbage") / "c.jsonl", all_lines, trailing_newline=newline_at_end)
    facts = extract_file(str(path))
    reported = sorted([b.line for b in facts.malformed] + ([facts.torn.line] if facts.torn else []))
    if not newline_at_end and all_lines[-1] == "":
        bad_numbers = bad_numbers[:-1]
    assert reported == bad_numbers
    assert facts.records == len(good) + 1
    records = [seq // MEMBER_SLOTS for seq in combine([facts]).messages.get_column("seq").to_list()]
    assert records == sorted(records) and set(records) == set(range(1, len(good) + 1))


def test_headers_alone_are_empty_input(tmp_path: Path) -> None:
    write_lines(tmp_path / "only-header.jsonl", [orjson.dumps(HEADER).decode()])
    with pytest.raises(ErascopeError, match="no capture records found in"):
        analyze([str(tmp_path)])


# --- combine: pairing per batch of captures ------------------------------------------------------
def _mixed_captures(tmp_path: Path) -> list[str]:
    """A capture rotated across two parts (request in one, answer in the next) between two small ones."""
    w = CaptureWriter(tmp_path / "rot", transport="stdio", server="srv", rotate_bytes=400)
    for n, obj in enumerate((probe(1), discover_result(1))):
        raw = orjson.dumps(obj).decode()
        w.write({"type": "frame", "conn": "c1", "dir": "c2s" if n == 0 else "s2c", "raw": raw, "len": len(raw)})
    w.close()
    assert len(w.paths) == 2
    paths: list[str] = []
    for n in range(2):
        cap = Cap(tmp_path / f"small{n}", server=f"s{n}")
        cap.c2s(probe(7))
        cap.s2c(discover_result(7))
        paths.append(str(cap.close()))
    return [paths[0], *(str(p) for p in w.paths), paths[1]]


@pytest.mark.parametrize("condensed", [False, True])
def test_combine_pairs_rotated_parts_across_files(tmp_path: Path, condensed: bool) -> None:
    paths = _mixed_captures(tmp_path)
    options = LoadOptions(condense=condensed)
    as_read = pl.concat([extract_file(p, LoadOptions(keep_raw=True)).messages.drop("raw") for p in paths])
    whole = pair_responses(as_categoricals(as_read.lazy()).collect())  # flow ids as the keys an analysis holds
    facts = [extract_file(p, options) for p in paths]
    combined = combine(facts).messages
    assert combined.equals(whole)  # probes and their answers are never condensed
    assert combined.get_column("file").cast(pl.String).to_list() == [paths[0]] * 2 + paths[1:3] + [paths[3]] * 2
    # the rotated capture's answer, in the second part, was paired with the request in the first
    resp = combined.filter((pl.col("kind") == "response") & (pl.col("file") == paths[2]))
    assert resp.get_column("req_line").to_list() == [2]
    assert combined.get_column("req_line").to_list() == [None, 2, None, 2, None, 2]
    # each file keeps its own (paired) rows
    assert [f.messages.height for f in facts] == [2, 1, 1, 2]


def test_messages_hold_repetitive_strings_as_categoricals(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(discover_result(1))
    m = combine([extract_file(str(cap.close()))]).messages
    for name in CATEGORICAL_COLUMNS:
        assert m.schema[name] == pl.Categorical(), name
    assert m.schema["id"] == pl.String()
    plain = as_strings(m)
    assert dict(plain.schema) == MESSAGES_SCHEMA
    assert plain.get_column("method").to_list() == ["server/discover", "server/discover"]


def test_flows_are_held_as_keys_and_archives_keep_the_ids(tmp_path: Path) -> None:
    cap = Cap(tmp_path / "http", transport="http")
    for n, flow in enumerate(("f-one", "f-two", "f-one-b"), 1):
        cap.http_request(flow, probe(n))
        cap.http_response(flow, 200, discover_result(n))
    path = str(cap.close())
    held = extract_file(path, LoadOptions(condense=False)).messages
    # one key per flow id, never a string in the process-wide categorical cache
    assert held.schema["flow"] == pl.UInt64()
    keys = held.get_column("flow").to_list()
    assert keys[0] == keys[1] != keys[2] == keys[3] != keys[4] == keys[5]
    assert held.get_column("req_line").to_list() == [None, 2, None, 4, None, 6]  # paired by key
    assert dict(as_strings(held).schema) == MESSAGES_SCHEMA
    # what `erascope compact` archives: the ids themselves
    kept = extract_file(path, LoadOptions(keep_raw=True)).messages
    assert kept.get_column("flow").to_list() == ["f-one", "f-one", "f-two", "f-two", "f-one-b", "f-one-b"]
    stdio = Cap(tmp_path / "stdio")
    stdio.c2s(probe(1))
    assert extract_file(str(stdio.close())).messages.get_column("flow").to_list() == [None]


@pytest.mark.parametrize("order", ["capture first", "link first"])
def test_a_file_a_folder_names_twice_is_listed_under_the_name_that_sorts_first(tmp_path: Path, order: str) -> None:
    """Two names for one file in a folder (a link beside its target) were listed under whichever the
    folder listed first, which differs between file systems and runs: reports and `verify` named it
    one way or the other."""
    body = b'{"type":"header","seq":0,"ts":1.0,"server":"s","format":"erascope/1","transport":"stdio","part":0}\n'
    first, second = ("a", "b") if order == "capture first" else ("b", "a")
    (tmp_path / f"{first}.jsonl").write_bytes(body)
    (tmp_path / f"{second}.jsonl").symlink_to(f"{first}.jsonl")
    assert find_inputs([tmp_path]) == [str(tmp_path / "a.jsonl")]


def test_a_part_a_recorder_left_without_its_header_is_said_so(tmp_path: Path) -> None:
    """A crash between opening a part and writing its header leaves it empty or torn: it was skipped
    as "not an erascope capture", which sends a user looking for a wrong file."""
    cap = Cap(tmp_path / "caps")
    cap.c2s(probe(1))
    real = cap.close()
    header = real.read_bytes().splitlines()[0]
    (tmp_path / "caps" / "cut.001.jsonl").write_bytes(header[:40])
    (tmp_path / "caps" / "empty.001.jsonl").write_bytes(b"")
    a = analyze([str(tmp_path / "caps")])
    assert a.inputs.files == [str(real)]
    reasons = dict((Path(f).name, r) for f, r in a.inputs.skipped)
    assert reasons.keys() == {"cut.001.jsonl", "empty.001.jsonl"}
    assert reasons["empty.001.jsonl"].startswith("empty: the recorder stopped before writing its header")
    assert reasons["cut.001.jsonl"].startswith("its header is torn: the recorder stopped while writing it")
    assert not any("not an erascope capture" in r for r in reasons.values())
