"""Fuzzing the analyzer with mutated corpus captures: no input crashes it.

Each example takes a recorded capture (captures/corpus/*/*.jsonl), breaks it one way (bytes
flipped, cut anywhere, invalid UTF-8, a field of the wrong type, a huge or deeply nested value)
and runs the real `erascope analyze` in process next to an untouched capture. The run must end
with an exit status of 0, 1 or 2 and no traceback, and the untouched capture must be read.
Derandomized with a bounded number of examples, so CI runs the same cases every time.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from analyzer.cli import app

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "captures" / "corpus").glob("*/*.jsonl"))
UNTOUCHED = CORPUS[0]
VICTIMS = [p for p in CORPUS if p != UNTOUCHED and p.stat().st_size < 200_000]
FIELDS = ["type", "seq", "ts", "conn", "server", "dir", "raw", "flow", "headers", "status", "streamed", "event",
          "code", "lost", "kind", "method", "how", "peer", "error", "reason", "signal", "format", "part"]
ODD = st.one_of(
    st.sampled_from(["", "x", "7", -1, 2**63 - 1, -(2**63), 1.5, True, False, None, [], {}, [[1, 2]], ["a"],
                     [["a", "b", "c"]], {"a": [1, {"b": None}]}]),
    st.text(max_size=20),
    st.integers(),
    st.floats(allow_nan=False),
)


def _set_field(data: bytes, line_no: int, name: str, value: Any) -> bytes:
    lines = data.split(b"\n")
    n = line_no % len(lines)
    try:
        rec = orjson.loads(lines[n])
    except orjson.JSONDecodeError:
        return data
    if not isinstance(rec, dict):
        return data
    rec[name] = value
    try:
        lines[n] = orjson.dumps(rec)
    except TypeError:  # an integer orjson cannot write: written by hand, as a hostile writer would
        rec[name] = "__V__"
        lines[n] = orjson.dumps(rec).replace(b'"__V__"', str(value).encode())
    return b"\n".join(lines)


def _splice(data: bytes, at: int, text: bytes, line_no: int | None = None) -> bytes:
    if line_no is not None:
        lines = data.split(b"\n")
        lines.insert(line_no % (len(lines) + 1), text)
        return b"\n".join(lines)
    at %= len(data) + 1
    return data[:at] + text + data[at:]



def fuzzed(examples: int) -> settings:
    """Derandomized, with a bounded number of examples (CI runs the same cases every time)."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )

@dataclass(frozen=True)
class Case:
    """A mutated capture; its repr names the capture and the mutation, not the bytes."""

    victim: Path
    data: bytes = field(repr=False)
    kind: str


def byte_mutation(draw: st.DrawFn, data: bytes, kind: str, at: int, flips: int) -> bytes | None:
    """`data` mutated bytewise by `kind` (up to `flips` bytes flipped, cut at `at`, an invalid UTF-8
    sequence spliced in at `at`); None for a kind that is not one of those."""
    if kind == "flip":
        for pos in draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=flips)):
            data = data[:pos] + bytes([data[pos] ^ draw(st.integers(1, 255))]) + data[pos + 1 :]
    elif kind == "truncate":
        data = data[:at]
    elif kind == "utf8":
        data = _splice(data, at, draw(st.sampled_from([b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\x80\x80"])))
    else:
        return None
    return data


@st.composite
def mutations(draw: st.DrawFn) -> Case:
    victim = draw(st.sampled_from(VICTIMS))
    data = victim.read_bytes()
    kind = draw(st.sampled_from(["flip", "truncate", "utf8", "type", "huge", "deep", "line"]))
    at = draw(st.integers(0, max(0, len(data))))
    if (bytewise := byte_mutation(draw, data, kind, at, flips=8)) is not None:
        data = bytewise
    elif kind == "type":
        data = _set_field(data, draw(st.integers(0, 200)), draw(st.sampled_from(FIELDS)), draw(ODD))
    elif kind == "huge":
        big = "y" * draw(st.sampled_from([70_000, 1_200_000]))
        name = draw(st.sampled_from(["raw", "error", "conn", "method"]))
        data = _set_field(data, draw(st.integers(0, 200)), name, big)
    elif kind == "deep":
        depth = draw(st.sampled_from([200, 3_000, 100_000]))
        nested = b"[" * depth + b"]" * depth
        line = b'{"type":"frame","seq":1,"conn":"c","dir":"c2s","raw":' + nested + b"}"
        data = _splice(data, at, line, line_no=draw(st.integers(1, 50)))
    else:  # a whole line of noise
        data = _splice(data, at, draw(st.binary(max_size=80)), line_no=draw(st.integers(0, 50)))
    return Case(victim, data, kind)


@fuzzed(60)
@given(case=mutations())
def test_no_mutated_capture_crashes_the_analyzer(
    tmp_path_factory: pytest.TempPathFactory, case: Case
) -> None:
    victim, data, kind = case.victim, case.data, case.kind
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "mutated").mkdir()
    (folder / "mutated" / victim.name).write_bytes(data)
    result = CliRunner().invoke(
        app, ["analyze", str(folder / "mutated"), str(UNTOUCHED), "-f", "json", "-q", "-j", "1"]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), (kind, result.exception)
    assert result.exit_code in (0, 1, 2), (kind, result.output)
    assert "Traceback" not in result.output
    if result.exit_code != 2:
        report = orjson.loads(result.stdout)
        assert str(UNTOUCHED) in report["inputs"]["files"], kind
        for fmt in ("text", "markdown"):  # the formats that lay out what json only lists
            shown = CliRunner().invoke(
                app, ["analyze", str(folder / "mutated"), str(UNTOUCHED), "-f", fmt, "-q", "-j", "1"]
            )
            assert shown.exception is None or isinstance(shown.exception, SystemExit), (kind, fmt, shown.exception)
            assert shown.exit_code == result.exit_code, (kind, fmt, shown.output)


@fuzzed(40)
@given(case=mutations())
def test_a_mutated_capture_reads_alike_from_its_archive(tmp_path_factory: pytest.TempPathFactory, case: Case) -> None:
    """The archive is the other reader of the same captures: whatever a capture holds, `compact` and
    `analyze ARCHIVE` give the report the JSONL gives (a capture left without messages once made the
    archive unreadable)."""
    folder = tmp_path_factory.mktemp("fuzz-archive")
    (folder / "caps").mkdir()
    (folder / "caps" / case.victim.name).write_bytes(case.data)
    (folder / "caps" / UNTOUCHED.name).write_bytes(UNTOUCHED.read_bytes())
    runner = CliRunner()
    compacted = runner.invoke(app, ["compact", str(folder / "caps"), "--out", str(folder / "archive"), "-j", "1"])
    assert compacted.exit_code == 0, (case.kind, compacted.output)
    jsonl, archived = (
        runner.invoke(app, ["analyze", str(folder / source), "-f", "json", "-q", "-j", "1"])
        for source in ("caps", "archive")
    )
    assert archived.exception is None or isinstance(archived.exception, SystemExit), (case.kind, archived.exception)
    assert (archived.exit_code, archived.stdout) == (jsonl.exit_code, jsonl.stdout), case.kind


# --- the hash chain: verify ------------------------------------------------------------------------
CHAIN_KEY = b"fuzzing-key-of-at-least-16-bytes"
LINK_VALUES = st.sampled_from(["x\x00.001.jsonl", "../x.001.jsonl", "/etc/passwd", "..", ".", "a\\b", "\x1b[2J", 7])


@pytest.fixture(scope="module")
def chained(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, bytes]]:
    """A keyed capture rotated into parts by the real writer: (file name, bytes) of each part."""
    from addon.writer import CaptureWriter

    out = tmp_path_factory.mktemp("chained")
    writer = CaptureWriter(out, transport="stdio", server="srv", rotate_bytes=1500, chain_key=CHAIN_KEY)
    for n in range(12):
        raw = orjson.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "x" * 40}}).decode()
        frame = {"type": "frame", "conn": "c1", "dir": "c2s", "raw": raw, "len": len(raw), "nl": True}
        writer.write({**frame, "ts": 1.8e9 + n})
    writer.close()
    parts = sorted(out.glob("*.jsonl"))
    assert len(parts) >= 3
    return [(p.name, p.read_bytes()) for p in parts]


@fuzzed(80)
@given(data=st.data())
def test_no_edit_of_a_chained_capture_crashes_verify(
    tmp_path_factory: pytest.TempPathFactory, chained: list[tuple[str, bytes]], data: st.DataObject
) -> None:
    """Everything in a capture is the editor's: links naming paths or holding a NUL (which once
    crashed verify), chain fields of any type, lines removed, repeated or cut, parts deleted."""
    from analyzer.verify import render_text, verify

    parts = {name: content.split(b"\n") for name, content in chained}
    for _ in range(data.draw(st.integers(1, 3))):
        name = data.draw(st.sampled_from(sorted(parts)))
        lines = parts[name]
        n = data.draw(st.integers(0, len(lines) - 2))
        edit = data.draw(st.sampled_from(["link", "link", "field", "delete", "repeat", "cut", "part"]))
        if edit == "link":  # the header's `previous`, or the part-end's `next`
            end = data.draw(st.booleans())
            at = len(lines) - 2 if end else 0
            lines[at] = _set_field(lines[at], 0, "next" if end else "previous", data.draw(LINK_VALUES))
        elif edit == "field":
            field_name = data.draw(st.sampled_from(["chain", "chain_alg", "chain_prev", "key_id", "previous", "next",
                                                    "part", "seq", "type", "format", "reason"]))
            lines[n] = _set_field(lines[n], 0, field_name, data.draw(st.one_of(ODD, LINK_VALUES)))
        elif edit == "delete":
            del lines[n]
        elif edit == "repeat":
            lines.insert(n, lines[data.draw(st.integers(0, len(lines) - 1))])
        elif edit == "cut":
            lines[n] = lines[n][: data.draw(st.integers(0, len(lines[n])))]
        elif len(parts) > 1:
            del parts[name]
    folder = tmp_path_factory.mktemp("fuzz-verify")
    for name, lines in parts.items():
        (folder / name).write_bytes(b"\n".join(lines))
    for key in (CHAIN_KEY, None):
        result = verify([folder], key=key)
        assert "\x1b" not in render_text(result)
        orjson.dumps(result.as_dict())


@st.composite
def rekeyings(draw: st.DrawFn) -> list[tuple[Path, bytes]]:
    """One to three corpus captures, some of their records moved to other server keys."""
    victims = draw(st.lists(st.sampled_from(VICTIMS), min_size=1, max_size=3, unique=True))
    keys = st.sampled_from(["a", "b", "", "__null__", "ü" * 60])
    captures = []
    for victim in victims:
        data = victim.read_bytes()
        for line_no in draw(st.lists(st.integers(1, 200), min_size=1, max_size=4)):
            data = _set_field(data, line_no, "server", draw(keys))
        captures.append((victim, data))
    return captures


def _linked(report: dict[str, Any], analysis: Any) -> list[tuple[str, ...]]:
    """The report's server keys, in groups of keys that share a session (answers paired through
    their session cross keys by design: the HTTP+SSE transport)."""
    from analyzer.watch_shard import SessionLinks

    links = SessionLinks()
    links.add(analysis.traffic.sessions.select(pl.col("session_id", "server").cast(pl.String)).drop_nulls().iter_rows())
    return sorted({tuple(sorted(links.closure({s["server"]}))) for s in report["servers"]})


@fuzzed(25)
@given(captures=rekeyings())
def test_every_server_key_analyzed_alone_reads_as_in_the_whole(
    tmp_path_factory: pytest.TempPathFactory, captures: list[tuple[Path, bytes]]
) -> None:
    """Every verdict and finding is a function of one server key's traffic (or of keys that share a
    session): `--server`, the cluster's shards and `watch` rely on it. Records an edit moved to
    another key answered, or settled the probe of, their connection's key in the whole analysis
    and not in that key's own."""
    from analyzer.pipeline import AnalyzeOptions, analyze
    from analyzer.report import render_json

    folder = tmp_path_factory.mktemp("rekeyed")
    for victim, data in captures:
        (folder / victim.name).write_bytes(data)
    whole = analyze([str(folder)])
    report = orjson.loads(render_json(whole))
    for group in _linked(report, whole):
        alone = orjson.loads(render_json(analyze([str(folder)], AnalyzeOptions(servers=group))))
        for part in ("servers", "findings", "clients"):
            got = [x for x in alone[part] if x["server"] in group]
            assert got == [x for x in report[part] if x["server"] in group], (group, part)


# --- foreign files: HAR and mitmproxy dumps --------------------------------------------------------
DUMP = ROOT / "tests" / "data" / "mitmproxy-10.4.2.flows"
HAR_ODD = st.one_of(ODD, st.sampled_from(["2026-13-45T99:99:99Z", "base64", "text/event-stream", "\x00", 1e308,
                                           10**30, [{"name": 1, "value": None}], {"text": None}]))


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document (keys and list positions), the document itself excluded."""
    inner = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    return [p for k, v in inner for p in [(*at, k), *_paths(v, (*at, k))]]


@st.composite
def foreign_files(draw: st.DrawFn) -> tuple[str, bytes, str]:
    """(file name, bytes, mutation): a HAR of MCP flows with values replaced or removed, or a dump
    (mitmproxy's FlowWriter, or a real mitmproxy 10.4.2 file) with bytes flipped, cut or re-sized."""
    from mitmproxy.io import FlowWriter

    from tests.test_foreign import _flows, _har

    if draw(st.booleans()):
        doc = _har(_flows())
        for _ in range(draw(st.integers(1, 4))):
            places = _paths(doc)
            if not places:
                break
            *parent_at, last = draw(st.sampled_from(places))
            parent = doc
            for k in parent_at:
                parent = parent[k]
            if draw(st.booleans()) and isinstance(parent, dict):
                del parent[last]
            else:
                parent[last] = draw(HAR_ODD)
        return "mutated.har", orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS), "har"
    if draw(st.booleans()):
        data = DUMP.read_bytes()
    else:
        out = io.BytesIO()
        writer = FlowWriter(out)
        for flow in _flows():
            writer.add(flow)
        data = out.getvalue()
    kind = draw(st.sampled_from(["flip", "truncate", "digit"]))
    if kind == "flip":
        for pos in draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=6)):
            data = data[:pos] + bytes([data[pos] ^ draw(st.integers(1, 255))]) + data[pos + 1 :]
    elif kind == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    else:  # a tnetstring's length prefix changed
        digits = [i for i, b in enumerate(data) if 48 <= b <= 57]
        pos = draw(st.sampled_from(digits))
        data = data[:pos] + draw(st.sampled_from([b"0", b"1", b"9"])) + data[pos + 1 :]
    return "mutated.flows", data, kind


@fuzzed(40)
@given(case=foreign_files())
def test_no_mutated_foreign_file_crashes_the_analyzer(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[str, bytes, str]
) -> None:
    """HAR files and dumps are someone else's exports, as attacker-controlled as a capture: whatever
    they hold, the file is read, refused with a reason or skipped, and the capture beside it is read."""
    name, data, kind = case
    folder = tmp_path_factory.mktemp("fuzz-foreign")
    (folder / name).write_bytes(data)
    result = CliRunner().invoke(app, ["analyze", str(folder / name), str(UNTOUCHED), "-f", "json", "-q", "-j", "1"])
    assert result.exception is None or isinstance(result.exception, SystemExit), (kind, result.exception)
    assert result.exit_code in (0, 1), (kind, result.output)
    inputs = orjson.loads(result.stdout)["inputs"]
    assert str(UNTOUCHED) in inputs["files"], kind
    accounted = [*inputs["files"], *(e["file"] for e in [*inputs.get("errors", []), *inputs["skipped"]])]
    assert str(folder / name) in accounted, kind  # read, refused with a reason, or skipped as no dump
