"""Loading hostile and broken inputs: invalid UTF-8, wrong types, ids hidden in params, files that
vanish or cannot be read, FIFOs and dangling links, the same capture given twice, foreign formats.

Every case here was a crash, a hang or a wrong count before; each runs the real loader or CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson
import polars as pl
import pytest
from typer.testing import CliRunner

from addon.errors import ErascopeError
from analyzer.cli import app
from analyzer.load import LoadOptions, extract_file, extract_files, find_inputs
from analyzer.pipeline import AnalyzeOptions, analyze
from analyzer.report import render
from tests.test_load import HEADER, frame, write_lines
from tests.test_messages import Cap, discover_result, probe

ERASCOPE: Final = Path(sys.executable).parent / "erascope"


def _capture(folder: Path, server: str = "srv", answered: bool = True) -> Path:
    cap = Cap(folder, server=server)
    cap.c2s(probe(1))
    if answered:
        cap.s2c(discover_result(1))
    return cap.close()


# --- invalid UTF-8 -------------------------------------------------------------------------------
def test_invalid_utf8_in_a_middle_line_is_malformed_and_the_rest_is_read(tmp_path: Path) -> None:
    path = _capture(tmp_path / "a")
    lines = path.read_bytes().split(b"\n")
    bad = b'{"type":"frame","seq":9,"conn":"c1","dir":"c2s","raw":"caf\xc3"}'
    path.write_bytes(b"\n".join([*lines[:2], bad, *lines[2:]]))
    other = _capture(tmp_path / "b", server="other")
    a = analyze([str(path), str(other)])
    assert [(b.line, b.reason) for b in a.inputs.malformed] == [(3, "not valid UTF-8")]
    assert a.inputs.torn == []
    assert sorted(a.probes.get_column("outcome").to_list()) == ["discover-result", "discover-result"]
    assert a.inputs.files == sorted([str(path), str(other)])


def test_last_line_cut_inside_a_multibyte_character_is_torn(tmp_path: Path) -> None:
    path = _capture(tmp_path)
    # a recorder killed mid-write never wrote its closing record (part-end)
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:-1]))
    with path.open("ab") as f:
        f.write('{"type":"frame","seq":3,"conn":"c1","dir":"s2c","raw":"\u00e9t\u00e9'.encode()[:-1])
    facts = extract_file(str(path))
    assert facts.torn is not None and facts.torn.line == 4
    assert "not valid UTF-8" in facts.torn.reason
    assert facts.malformed == [] and facts.records == 3


def test_invalid_utf8_in_many_lines_and_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("analyzer.load.PIECE_BYTES", 512)
    lines = [orjson.dumps(HEADER).decode().encode()]
    for n in range(1, 60):
        lines.append(frame(n, '{"jsonrpc":"2.0","id":1,"method":"ping"}').encode())
        if n % 7 == 0:
            lines.append(b"\xff\xfe garbage \x80")
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    facts = extract_file(str(path), LoadOptions(condense=False))
    assert len(facts.malformed) == 8 and {b.reason for b in facts.malformed} == {"not valid UTF-8"}
    assert facts.records == 60
    assert facts.messages.height == 59


# --- wrong types ---------------------------------------------------------------------------------
def test_complete_last_line_with_a_wrong_type_is_malformed_not_torn(tmp_path: Path) -> None:
    lines = [orjson.dumps(HEADER).decode(), frame(1, "{}"), '{"type":"frame","seq":"two"}']
    facts = extract_file(str(write_lines(tmp_path / "x.jsonl", lines)))
    assert facts.torn is None
    assert [(b.line, b.reason) for b in facts.malformed] == [(3, "field 'seq' has the wrong type (str)")]


def test_complete_last_line_that_is_not_json_is_malformed_not_torn(tmp_path: Path) -> None:
    lines = [orjson.dumps(HEADER).decode(), frame(1, "{}"), '{"type":"frame","seq":']
    facts = extract_file(str(write_lines(tmp_path / "x.jsonl", lines)))
    assert facts.torn is None and [b.line for b in facts.malformed] == [3]


def test_many_wrong_typed_lines_are_each_located(tmp_path: Path) -> None:
    lines = [orjson.dumps(HEADER).decode()]
    for n in range(1, 400):
        lines.append(frame(n, "{}") if n % 2 else orjson.dumps({"type": "frame", "seq": str(n), "pid": "x"}).decode())
    facts = extract_file(str(write_lines(tmp_path / "x.jsonl", lines)), LoadOptions(condense=False))
    assert [b.line for b in facts.malformed] == list(range(3, 401, 2))
    assert all("has the wrong type" in b.reason for b in facts.malformed)
    assert facts.records == 201


_ODD_VALUES = ["x", "7", 1, -(2**63), 2**63, 1.5, 1.0, True, None, [1], ["a"], [["a", 1]], [[1, 2]], {}, {"a": 1}]


@pytest.mark.parametrize("field", ["seq", "ts", "raw", "headers", "status", "streamed", "code", "lost", "pid", "type"])
def test_a_line_is_judged_alike_on_both_paths(tmp_path: Path, field: str) -> None:
    """The typed check that locates wrong types in a piece with bad lines agrees with the reader
    that reads clean pieces: a line is malformed in one exactly when it is in the other."""
    for n, value in enumerate(_ODD_VALUES):
        rec = orjson.loads(frame(1, '{"jsonrpc":"2.0","id":1,"method":"ping"}'))
        rec[field] = value
        line = orjson.dumps(rec).decode()
        alone = extract_file(str(write_lines(tmp_path / f"a{n}.jsonl", [orjson.dumps(HEADER).decode(), line])))
        mixed = extract_file(str(write_lines(tmp_path / f"b{n}.jsonl", [orjson.dumps(HEADER).decode(), line, "nope"])))
        assert [b.line for b in alone.malformed] == [b.line for b in mixed.malformed if b.line == 2], (field, value)


# --- ids read from the message itself ------------------------------------------------------------
def test_numeric_id_stays_numeric_when_params_quote_it(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    request = probe(1)
    request["params"]["ref"] = {"id": "1"}  # the raw text holds `"id":"1"`, nested
    cap.c2s(request)
    cap.s2c(discover_result(1))
    a = analyze([str(cap.close())])
    assert a.probes.get_column("outcome").to_list() == ["discover-result"]
    ids = a.messages.filter(pl.col("kind").is_in(["request", "response"])).get_column("id").to_list()
    assert ids == ["1", "1"]


def test_string_and_number_ids_stay_distinct(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe("1"))
    cap.s2c(discover_result(1))  # answers id 1, not "1"
    cap.c2s(probe(2))
    cap.s2c({"jsonrpc": "2.0", "id": 2, "result": {"item": {"id": "2"}, "other": {"id": 2}}})
    a = analyze([str(cap.close())], AnalyzeOptions(load=LoadOptions(condense=False)))
    rows = a.messages.filter(pl.col("kind").is_in(["request", "response"]))
    assert rows.get_column("id").to_list() == ['"1"', "1", "2", "2"]
    # the second probe's answer pairs by its id (a result that is no DiscoverResult: a legacy answer)
    assert a.probes.get_column("outcome").to_list() == ["no-answer", "legacy-answer"]


# --- files that cannot be read -------------------------------------------------------------------
@pytest.mark.parametrize("size", ["small", "big"])
def test_a_vanished_file_is_an_input_error_and_the_rest_is_read(tmp_path: Path, size: str) -> None:
    first = _capture(tmp_path / "a")
    second = _capture(tmp_path / "b", server="other")
    if size == "big":  # read alone, not in a batch of small files
        with second.open("a") as f:
            f.write((frame(99, "x" * 1000) + "\n") * 1100)
    paths = find_inputs([str(tmp_path)])
    second.unlink()  # found by the directory walk, gone before it is read
    facts = extract_files(paths, jobs=1)
    assert [f.file for f in facts if f.was_read] == [str(first)]
    assert [(f.file, f.error) for f in facts if f.error] == [
        (str(second), f"cannot read {second}: No such file or directory")
    ]


def _unreadable(path: Path) -> Path:
    """A capture-named file that cannot be read, even by root: reading /proc/self/mem at 0 fails (EIO)."""
    path.symlink_to("/proc/self/mem")
    return path


def test_an_unreadable_file_is_an_input_error_and_the_rest_is_read(tmp_path: Path) -> None:
    good = _capture(tmp_path)
    bad = _unreadable(tmp_path / "unreadable.jsonl")
    a = analyze([str(tmp_path)])
    assert a.inputs.files == [str(good)]
    assert a.inputs.errors == [(str(bad), f"cannot read {bad}: Input/output error")]


def test_nothing_readable_is_an_error(tmp_path: Path) -> None:
    bad = _unreadable(tmp_path / "unreadable.jsonl")
    with pytest.raises(ErascopeError, match=r"no capture records found .*could not be read.*Input/output error"):
        analyze([str(bad)])
    result = CliRunner().invoke(app, ["analyze", str(bad), "-q"])
    assert result.exit_code == 2


def _erascope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ERASCOPE), *args], capture_output=True, text=True, timeout=120)


def test_when_every_line_is_malformed_the_error_says_where_and_why(tmp_path: Path) -> None:
    nan = write_lines(tmp_path / "a.jsonl", [orjson.dumps(HEADER).decode(), '{"type":"frame","ts":NaN,"seq":1}'])
    entry = {"startedDateTime": 5, "request": {"method": "POST", "url": "http://h/mcp"}, "response": {"status": 200}}
    har = tmp_path / "c.har"
    har.write_bytes(orjson.dumps({"log": {"version": "1.2", "entries": [entry]}}))
    for path, where in ((nan, f"{nan}:2: not valid JSON"), (har, f"{har}#entry=1: ")):
        proc = _erascope("analyze", str(path))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert f"no capture records found in {path} (1 malformed line(s), skipped: {where}" in proc.stderr
    torn = write_lines(tmp_path / "t.jsonl", [orjson.dumps(HEADER).decode(), '{"type":"fr'], trailing_newline=False)
    proc = _erascope("analyze", str(torn))
    assert proc.returncode == 2 and f"(torn last line: {torn}:2: " in proc.stderr, proc.stderr


def test_a_file_that_cannot_be_read_is_named_once_in_the_error(tmp_path: Path) -> None:
    future = write_lines(tmp_path / "future.jsonl", [orjson.dumps({**HEADER, "format": "erascope/7"}).decode()])
    proc = _erascope("analyze", str(future))
    assert proc.returncode == 2, proc.stderr
    assert f"(1 file(s) could not be read: {future}: capture format 'erascope/7'" in proc.stderr


def test_a_fifo_given_as_path_is_refused_not_read(tmp_path: Path) -> None:
    good = _capture(tmp_path / "caps")
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    a = analyze([str(good), str(fifo)])  # would block forever opening the FIFO
    assert a.inputs.files == [str(good)]
    assert a.inputs.skipped == [(str(fifo), "not a regular file (a FIFO)")]


def test_fifos_and_dangling_links_inside_directories_get_a_note(tmp_path: Path) -> None:
    good = _capture(tmp_path)
    os.mkfifo(tmp_path / "pipe.jsonl")
    (tmp_path / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    a = analyze([str(tmp_path)])
    assert a.inputs.files == [str(good)]
    assert dict(a.inputs.skipped) == {
        str(tmp_path / "gone.jsonl"): "a dangling symbolic link",
        str(tmp_path / "pipe.jsonl"): "not a regular file (a FIFO)",
    }


def test_strict_turns_input_errors_into_exit_2(tmp_path: Path) -> None:
    good = _capture(tmp_path / "caps")
    bad = _unreadable(tmp_path / "unreadable.jsonl")
    runner = CliRunner()
    lenient = runner.invoke(app, ["analyze", str(good), str(bad), "-f", "json", "-q"])
    assert lenient.exit_code == 0, lenient.output
    assert orjson.loads(lenient.stdout)["inputs"]["errors"] == [
        {"file": str(bad), "error": f"cannot read {bad}: Input/output error"}
    ]
    strict = runner.invoke(app, ["analyze", str(good), str(bad), "-f", "json", "--strict"])
    assert strict.exit_code == 2
    assert "unreadable.jsonl" in strict.output and "Traceback" not in strict.output


# --- the same capture twice ----------------------------------------------------------------------
def test_the_same_capture_given_twice_is_read_once(tmp_path: Path) -> None:
    path = _capture(tmp_path / "caps")
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "caps", copy)
    renamed = tmp_path / "renamed.jsonl"
    shutil.copy(path, renamed)
    a = analyze([str(tmp_path / "caps"), str(tmp_path / "caps"), str(path), str(copy), str(renamed)])
    assert a.probes.height == 1
    assert a.inputs.files == [str(path)]  # the first in sorted order: caps/ before copy/
    assert a.inputs.duplicates == [(str(copy / path.name), str(path)), (str(renamed), str(path))]


_PROBE_RAW: Final = '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}'
_ANSWER_RAW: Final = '{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'


def _har(path: Path) -> Path:
    entry = {
        "startedDateTime": "2026-11-30T01:00:00.000Z", "time": 5,
        "request": {"method": "POST", "url": "http://127.0.0.1:8000/mcp", "httpVersion": "HTTP/1.1",
                    "headers": [{"name": "content-type", "value": "application/json"}], "queryString": [],
                    "cookies": [], "headersSize": -1, "bodySize": len(_PROBE_RAW),
                    "postData": {"mimeType": "application/json", "text": _PROBE_RAW}},
        "response": {"status": 200, "statusText": "OK", "httpVersion": "HTTP/1.1",
                     "headers": [{"name": "content-type", "value": "application/json"}], "cookies": [],
                     "content": {"size": len(_ANSWER_RAW), "mimeType": "application/json", "text": _ANSWER_RAW},
                     "redirectURL": "", "headersSize": -1, "bodySize": len(_ANSWER_RAW)},
        "cache": {}, "timings": {"send": 1, "wait": 2, "receive": 1},
    }  # fmt: skip
    path.write_bytes(orjson.dumps({"log": {"version": "1.2", "entries": [entry]}}))
    return path


def test_one_file_named_several_ways_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HAR files, dumps and captures whose header names no recorder (no `started`, `recorder_pid`)
    were told apart by the spelling of their path alone: read, and counted, once per spelling."""
    _har(tmp_path / "x.har")
    (tmp_path / "link.har").symlink_to("x.har")
    (tmp_path / "d").mkdir()
    write_lines(tmp_path / "d" / "idA.jsonl", [orjson.dumps(HEADER).decode(), frame(1, _PROBE_RAW)])
    spellings = [
        ["x.har", "./x.har"], ["x.har", str(tmp_path / "x.har")], ["x.har", "link.har"], ["x.har", "d/../x.har"],
        ["d", "./d/idA.jsonl"], ["d/idA.jsonl", "./d", "d/"],
    ]  # fmt: skip
    for args in spellings:
        proc = subprocess.run(
            [str(ERASCOPE), "analyze", *args, "-q", "-f", "json"], cwd=tmp_path, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        inputs = orjson.loads(proc.stdout)["inputs"]
        first = args[0] if args[0].endswith(".har") else "d/idA.jsonl"
        assert (inputs["files"], inputs.get("duplicates")) == ([first], None), args
    monkeypatch.chdir(tmp_path)  # find_inputs keeps the first spelling given, in sorted order
    assert find_inputs(["./x.har", "x.har", "d", "./d/idA.jsonl"]) == ["./x.har", os.path.join("d", "idA.jsonl")]


def test_files_are_reported_in_one_order_whatever_the_order_given(tmp_path: Path) -> None:
    paths = [str(_capture(tmp_path / d, server=d)) for d in ("b", "a", "c")]
    assert analyze(paths).inputs.files == sorted(paths)
    assert analyze([paths[2], str(tmp_path / "a"), paths[0]]).inputs.files == sorted(paths)


# --- what erascope can read ----------------------------------------------------------------------
def test_an_empty_directory_says_no_jsonl_files(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ErascopeError, match=r"no \*\.jsonl files under .*empty"):
        analyze([str(tmp_path / "empty")])


def test_a_har_file_is_read_as_one(tmp_path: Path) -> None:
    """HAR files are read (tests/test_foreign.py); one without entries holds no records."""
    har = tmp_path / "session.har"
    har.write_text('{"log": {"version": "1.2", "entries": []}}')
    with pytest.raises(ErascopeError, match=r"no capture records found in .*session\.har"):
        analyze([str(har)])


def test_a_plain_jsonrpc_log_gets_a_hint(tmp_path: Path) -> None:
    log = tmp_path / "mcp.jsonl"
    write_lines(log, ['{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}'])
    good = _capture(tmp_path / "caps")
    a = analyze([str(log), str(good)])
    (reason,) = [r for f, r in a.inputs.skipped if f == str(log)]
    assert "JSON-RPC" in reason and "record stdio" in reason


def test_extract_files_keeps_no_frames_per_small_file(tmp_path: Path) -> None:
    paths = [str(_capture(tmp_path / f"d{n}", server=f"s{n % 3}")) for n in range(30)]
    facts = extract_files(paths, jobs=1)
    assert sum(f.records for f in facts) == 30 * 3
    # small files are read in batches: their rows live in the batch, not one frame per file
    assert sum(1 for f in facts if f.messages.height) < 5


def test_an_archive_and_the_jsonl_it_came_from_are_read_once(tmp_path: Path) -> None:
    from analyzer.compact import compact

    path = _capture(tmp_path / "caps")
    compact([str(tmp_path / "caps")], tmp_path / "archive")
    a = analyze([str(tmp_path / "archive"), str(tmp_path / "caps")])
    assert a.probes.height == 1
    assert len(a.inputs.files) == 1 and len(a.inputs.duplicates) == 1
    assert str(path) in (a.inputs.files[0], a.inputs.duplicates[0][0])


def test_a_copy_under_another_name_is_read_once_from_an_archive_too(tmp_path: Path) -> None:
    """A copy of a capture under a name the recorder would not write is the same capture by its
    header: read once from the JSONL. An archive knew its inputs by their file names alone, so it
    counted the copy twice (and its report differed from the JSONL's)."""
    from analyzer.compact import compact

    path = _capture(tmp_path / "caps")
    shutil.copyfile(path, tmp_path / "caps" / "copy.jsonl")
    compact([str(tmp_path / "caps")], tmp_path / "archive")
    jsonl = analyze([str(tmp_path / "caps")])
    archived = analyze([str(tmp_path / "archive")])
    assert jsonl.probes.height == archived.probes.height == 1
    assert archived.inputs.duplicates == jsonl.inputs.duplicates != []
    both = analyze([str(tmp_path / "archive"), str(tmp_path / "caps")])  # the archive and its captures
    assert both.probes.height == 1 and len(both.inputs.duplicates) == 3  # the copy, and both JSONL files


# --- fields every record should have, missing or out of range ------------------------------------
CORPUS = Path(__file__).resolve().parent.parent / "captures" / "corpus"
MISSING = object()


@pytest.mark.parametrize("scenario", ["auth-gate-http", "probe-storm-stdio", "rollout-split-http"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ts", MISSING),
        ("ts", 1e300),
        ("ts", -1e300),
        ("server", MISSING),
        ("conn", MISSING),
        ("seq", MISSING),
        ("dir", MISSING),
    ],
    ids=["no-ts", "ts-1e300", "ts-minus-1e300", "no-server", "no-conn", "no-seq", "no-dir"],
)
@pytest.mark.parametrize("every", [1, 2])
def test_records_without_a_field_every_record_has_are_analyzed(
    tmp_path: Path, scenario: str, field: str, value: object, every: int
) -> None:
    """The format gives every record a `ts`, `server` and `seq` (and messages a `conn` and `dir`);
    a capture without them (edited, or written by another tool) crashed the analysis: records
    without a `ts` a rule's time windows, without a `server` the client look-up of the requests, and
    a `ts` past any date the windows and the reports' times."""
    source = sorted((CORPUS / scenario).glob("*.jsonl"))[0]
    records = [orjson.loads(line) for line in source.read_bytes().splitlines()]
    for n, record in enumerate(records[1:]):
        if n % every == 0:
            if value is MISSING:
                record.pop(field, None)
            else:
                record[field] = value
    (tmp_path / "caps").mkdir()
    (tmp_path / "caps" / source.name).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    for fmt in ("json", "text", "markdown", "html"):
        out = tmp_path / f"report.{fmt}"
        result = CliRunner().invoke(app, ["analyze", str(tmp_path / "caps"), "-f", fmt, "-q", "-o", str(out)])
        assert result.exception is None or isinstance(result.exception, SystemExit), (fmt, result.exception)
        assert result.exit_code in (0, 1), result.output
    report = orjson.loads((tmp_path / "report.json").read_bytes())
    assert report["inputs"]["records"] == len(records)
    if field == "ts" and every == 1:  # answers without a time cannot be late: outcomes as with times
        untouched = orjson.loads(CliRunner().invoke(app, ["analyze", str(source), "-f", "json", "-q"]).stdout)
        for outcomes in ("probe_outcomes", "init_outcomes"):
            assert report["totals"][outcomes] == untouched["totals"][outcomes]


# --- a record keyed apart from its connection or flow --------------------------------------------
def rekeyed(scenario: str, folder: Path, pick: Callable[[dict[str, Any]], bool], key: str = "other") -> Path:
    """The first capture of `scenario` in `folder`, with the records `pick` chooses under server key
    `key` instead of their connection's or flow's (the recorders never write that; an edit can)."""
    source = sorted((CORPUS / scenario).glob("*.jsonl"))[0]
    records = [orjson.loads(line) for line in source.read_bytes().splitlines()]
    for record in records[1:]:
        if pick(record):
            record["server"] = key
    folder.mkdir(parents=True, exist_ok=True)
    (folder / source.name).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return folder / source.name


def _first(test: Callable[[dict[str, Any]], bool]) -> Callable[[dict[str, Any]], bool]:
    seen: list[bool] = []

    def pick(record: dict[str, Any]) -> bool:
        if not seen and test(record):
            seen.append(True)
            return True
        return False

    return pick


REKEYED: Final = {
    "stdio-probe-answer": ("probe-storm-stdio", lambda: _first(lambda r: r.get("dir") == "s2c")),
    "stdio-garbage-after-probe": ("banner-then-crash-stdio", lambda: _first(lambda r: r.get("dir") == "s2c")),
    "stdio-death-after-probe": (
        "crash-on-start-stdio",
        lambda: lambda r: r["type"] == "lifecycle" and r.get("event") in ("server-eof", "exit"),
    ),
    "http-response": ("legacy-client-modern-only-http", lambda: _first(lambda r: r["type"] == "http.response")),
    "http-request": ("auto-modern-http", lambda: _first(lambda r: r["type"] == "http.request")),
    "http-request-of-a-failed-flow": ("crash-on-start-http", lambda: _first(lambda r: r["type"] == "http.request")),
}
"""Edits that key one record of a connection or flow apart: case → (scenario, a new `pick`)."""


def _of_server(report: dict[str, Any], key: str) -> tuple[Any, ...]:
    return tuple([x for x in report[part] if x["server"] == key] for part in ("servers", "findings", "clients"))


@pytest.mark.parametrize("case", sorted(REKEYED))
def test_a_record_keyed_apart_from_its_connection_is_that_servers_alone(tmp_path: Path, case: str) -> None:
    """Every verdict and finding is a function of one server key's traffic: `--server` and the
    cluster's shards select by it, `watch` analyzes only the keys a round touched. A record keyed
    apart from its connection or flow answered (or settled the probe of) the other key's request
    when both were read, and not when that key was analyzed alone: `--server K` reported otherwise
    for K than the whole analysis."""
    scenario, pick = REKEYED[case]
    rekeyed(scenario, tmp_path / "caps", pick())
    whole = analyze([str(tmp_path / "caps")])
    report = orjson.loads(render(whole, "json"))
    keys = sorted(s["server"] for s in report["servers"])
    assert "other" in keys and len(keys) == 2
    for key in keys:
        alone = analyze([str(tmp_path / "caps")], AnalyzeOptions(servers=(key,)))
        assert _of_server(orjson.loads(render(alone, "json")), key) == _of_server(report, key), key
