"""A header holding a lone surrogate escape (`"server":"s\\ud800"`) on a file's first line.

The reader reads such a header when a capture joined after another holds it (9935f08), and reads the
records keyed so (their values as the escape's text, `load._lone_surrogates_as_text`); orjson refuses
the escape, and every reading of a file's first line went through it: the file was skipped as "not a
capture", its records lost, by `analyze`, `compact` and `watch`, and `verify` called it no capture.
The header on line 1 is read as it is further down a file, on every path; so is one holding an escape
the reader refuses (a low surrogate alone, a high one before an escape that is not a low one), which
was no header at all: the escape is read as its text there too.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Final

import orjson
import pytest

from addon import chain
from addon.errors import ErascopeError
from analyzer import load
from analyzer.compact import compact
from analyzer.output import check_targets, is_capture
from analyzer.pipeline import analyze
from analyzer.report import render_json
from analyzer.verify import Status, verify
from tests.test_concatenated import by_text
from tests.test_verify_joined import FIRST, SECOND, written
from tests.test_watch import CORPUS, ERASCOPE, analyzed, expected, reported, watched_line_by_line

SOURCES: Final = sorted((CORPUS / "probe-storm-stdio").glob("*.jsonl"))[:3]
PLAIN: Final = sorted((CORPUS / "auto-modern-stdio").glob("*.jsonl"))[0]
LONE: Final = b"\\ud800"
NAMED: Final = "s\\ud800"
"""The server as the capture writes it → as it is read (the escape's text)."""


def lone_headed(source: Path, out: Path, escape: bytes = LONE) -> Path:
    """`source` with its server, in its header and in every record, written `s<escape>`."""
    lines = source.read_bytes().splitlines(keepends=True)
    was = b'"server":' + orjson.dumps(orjson.loads(lines[0])["server"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(b"".join(line.replace(was, b'"server":"s' + escape + b'"') for line in lines))
    return out


def lone_captures(folder: Path) -> list[Path]:
    return [lone_headed(source, folder / source.name) for source in SOURCES]


def resealed(part: Path, out: Path, escape: bytes = LONE) -> Path:
    """A chained part written again with its server `s<escape>` and its chain sealed anew (as the
    recorder would have sealed those bytes)."""
    lines = part.read_bytes().splitlines(keepends=True)
    was = b'"server":' + orjson.dumps(orjson.loads(lines[0])["server"])
    bodies = [line[: line.rindex(chain.FIELD_OPEN)] + b"}\n" for line in lines]
    bodies = [body.replace(was, b'"server":"s' + escape + b'"') for body in bodies]
    pieces, _, _ = chain.seal_lines(chain.Chainer(), chain.START, list(bodies), 0)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(b"".join(bytes(p) for p in pieces))
    return out


def _report(*paths: Path) -> dict[str, Any]:
    return orjson.loads(render_json(analyze([str(p) for p in paths])))


def test_a_first_line_header_is_read_as_further_down_a_file(tmp_path: Path) -> None:
    """Files apart (each header on line 1) and joined after a plain capture (each header further
    down): the same header, the same run, the same report."""
    paths = lone_captures(tmp_path / "apart")
    for path in paths:
        header = load.read_header(str(path))
        assert header is not None and header["server"] == NAMED
        assert header == load._header_record(path.read_bytes().splitlines()[0])
    joined = tmp_path / "joined.jsonl"
    joined.write_bytes(b"".join(p.read_bytes() for p in [PLAIN, *paths]))
    heads = load.heads_in(joined.read_bytes(), 1)
    headers = [load.read_header(str(p)) or {} for p in paths]
    assert [(h.key, h.transport) for h in heads[1:]] == [(load.run_key(h), h["transport"]) for h in headers]
    report = _report(PLAIN, *paths)
    assert report["inputs"]["skipped"] == []
    assert report["inputs"]["records"] == sum(len(p.read_bytes().splitlines()) for p in [PLAIN, *paths])
    assert NAMED in [s["server"] for s in report["servers"]]
    assert by_text(report) == by_text(_report(joined))


def test_the_capture_is_analyzed(tmp_path: Path) -> None:
    """Its records counted, keyed as their header names the server, the transport the header's; the
    text report names the server as the escape's text."""
    paths = lone_captures(tmp_path / "caps")
    facts = load.extract_file(str(paths[0]), load.LoadOptions(condense=False))
    assert facts.skipped is None
    assert facts.transport == "stdio"
    assert facts.records == len(paths[0].read_bytes().splitlines())
    assert set(facts.messages.get_column("server").cast(str).unique()) == {NAMED}
    report = _report(tmp_path / "caps")
    assert [s["server"] for s in report["servers"]] == [NAMED]
    done = subprocess.run(
        [str(ERASCOPE), "analyze", str(tmp_path / "caps")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert NAMED in done.stdout


def test_an_archive_of_it_reads_as_it_does(tmp_path: Path) -> None:
    """`erascope compact`, then `analyze` on the archive: the report `analyze` gives on the files."""
    paths = lone_captures(tmp_path / "caps")
    compact([str(p) for p in paths], tmp_path / "archive", jobs=1)
    archived = render_json(analyze([str(tmp_path / "archive")]))
    assert orjson.loads(archived)["inputs"]["skipped"] == []
    assert archived == render_json(analyze([str(p) for p in paths]))


def test_watch_reports_it_as_analyze_does(tmp_path: Path) -> None:
    """`erascope watch` over the captures joined in one file (the first header on its first line),
    a line a round: the findings and era changes `analyze` reports."""
    lines = [line for p in lone_captures(tmp_path / "caps") for line in p.read_bytes().splitlines(keepends=True)]
    live = tmp_path / "live"
    events = watched_line_by_line(lines, live, "joined.jsonl", idle=3600)
    report = analyzed(live)
    assert [s["server"] for s in report["servers"]] == [NAMED]
    assert reported(events) == expected(report)
    assert {e["server"] for e in events} == {NAMED}


def test_verify_checks_its_chain(tmp_path: Path) -> None:
    """`erascope verify`: the chain covers the line's bytes, whatever the reading of its values."""
    (part,) = written(FIRST, tmp_path / "w")
    path = resealed(part, tmp_path / "lone" / part.name)
    (file,) = verify([path]).files
    assert (file.status, file.findings, file.error) == (Status.VERIFIED, [], None)
    done = subprocess.run([str(ERASCOPE), "verify", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{path}: verified (" in done.stdout


def test_verify_finds_it_joined_after_another_capture(tmp_path: Path) -> None:
    """Joined after another capture, the header starts a capture of its own, checked as apart."""
    (other,) = written(SECOND, tmp_path / "o")
    (part,) = written(FIRST, tmp_path / "w")
    lone = resealed(part, tmp_path / "lone" / part.name)
    joined = tmp_path / "joined.jsonl"
    joined.write_bytes(other.read_bytes() + lone.read_bytes())
    (file,) = verify([joined]).files
    assert [(c.line, c.status, c.findings) for c in file.captures] == [
        (1, Status.VERIFIED, []),
        (len(other.read_bytes().splitlines()) + 1, Status.VERIFIED, []),
    ]


def test_an_output_never_overwrites_it(tmp_path: Path) -> None:
    """`-o` naming such a capture is refused, as for any capture."""
    (path,) = lone_captures(tmp_path / "caps")[:1]
    assert is_capture(path)
    with pytest.raises(ErascopeError, match="it is an erascope capture"):
        check_targets([str(PLAIN)], {"-o": path})


def test_a_plain_json_rpc_log_is_still_named_so(tmp_path: Path) -> None:
    """A JSON-RPC log whose first line holds a lone surrogate escape gets the hint any such log gets."""
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"jsonrpc":"2.0","method":"s\\ud800","id":1}\n')
    assert "plain JSON-RPC log" in load.not_a_capture(str(path), load.first_line(str(path)))


@pytest.mark.parametrize(
    ("escape", "named"),
    [(b"\\udc00", "s\\udc00"), (b"\\uDFFF", "s\\udfff"), (b"\\ud800\\u0041", "s\\ud800A")],
    ids=["low-alone", "low-in-capitals", "high-before-other"],
)
def test_a_header_holding_an_escape_the_reader_refuses_is_read_as_its_text(
    tmp_path: Path, escape: bytes, named: str
) -> None:
    """A low surrogate escape alone, or a high one before an escape that is not a low one: the reader
    refuses such a line, so the file was skipped as "not an erascope capture" (`analyze`, `watch`'s
    reading, `verify`), its records lost. Each is read as the escape's text, as a lone high one is:
    the capture is analyzed under that server, its chain verified."""
    path = lone_headed(SOURCES[0], tmp_path / "caps" / SOURCES[0].name, escape)
    header = load.read_header(str(path))
    assert header is not None and header["server"] == named
    facts = load.extract_file(str(path), load.LoadOptions(condense=False))
    assert facts.skipped is None and facts.malformed == []
    assert facts.records == len(path.read_bytes().splitlines())
    assert set(facts.messages.get_column("server").cast(str).unique()) == {named}
    (part,) = written(FIRST, tmp_path / "w")
    sealed = resealed(part, tmp_path / "lone" / part.name, escape)
    (file,) = verify([sealed]).files
    assert (file.status, file.findings, file.error) == (Status.VERIFIED, [], None)
    for command, target in (("analyze", path), ("verify", sealed)):
        done = subprocess.run([str(ERASCOPE), command, str(target)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    assert (
        named
        in subprocess.run([str(ERASCOPE), "analyze", str(path)], capture_output=True, text=True, timeout=120).stdout
    )
