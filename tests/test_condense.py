"""Condensing (`analyzer.condense`): the rows it drops change no report, and what it keeps adds up."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest

from addon.writer import CaptureWriter
from analyzer import load
from analyzer.compact import compact
from analyzer.condense import condense, traffic_of
from analyzer.load import LoadOptions, extract_file, find_inputs
from analyzer.messages import MEMBER_SLOTS, as_strings, pair_responses
from analyzer.pipeline import AnalyzeOptions, analyze
from analyzer.report import render_json, render_markdown, render_text
from bench import generate as gen
from tests.test_load import HEADER, frame, write_lines
from tests.test_messages import Cap, discover_result, modern_headers, probe

CORPUS = Path(__file__).resolve().parent.parent / "captures" / "corpus"
UNREAD_LIFECYCLE = {"signal", "terminate", "linger-end", "exit", "server-eof", "server-stdin-broken", "client-eof"}
"""The lifecycle events condensing may drop (never `spawn`, whose row names the host)."""


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "data"
    gen.generate(out, 3 << 20, files=3, spawns=18, seed=11)
    return out


def _both(path: Path) -> tuple[object, object]:
    full = analyze([path], AnalyzeOptions(load=LoadOptions(condense=False), jobs=1))
    condensed = analyze([path], AnalyzeOptions(jobs=1))
    return full, condensed


@pytest.fixture(params=["one chunk", "tiny chunks"])
def chunks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Files condensed as one chunk, or in chunks of a few lines (answers land in later chunks)."""
    if request.param == "tiny chunks":
        monkeypatch.setattr(load, "PIECE_BYTES", 16384)
        monkeypatch.setattr(load, "CHUNK_BYTES", 1)
    return str(request.param)


@pytest.mark.parametrize("where", ["corpus", "generated"])
def test_condensing_changes_no_report(where: str, generated: Path, chunks: str) -> None:
    full, condensed = _both(CORPUS if where == "corpus" else generated)
    # the comparison means something only when rows were dropped
    assert condensed.messages.height < full.messages.height  # type: ignore[attr-defined]
    assert condensed.message_count == full.message_count == full.messages.height  # type: ignore[attr-defined]
    assert render_json(condensed) == render_json(full)  # type: ignore[arg-type]
    assert render_markdown(condensed) == render_markdown(full)  # type: ignore[arg-type]
    assert render_text(condensed, width=160) == render_text(full, width=160)  # type: ignore[arg-type]


def test_the_moved_rows_are_let_go_once_the_frames_that_read_them_exist(generated: Path) -> None:
    from analyzer.rules import run_rules

    full, condensed = _both(generated)
    ctx = condensed.rule_context  # type: ignore[attr-defined]
    # the analysis keeps no row per moved request or dropped answer; the request view still has
    # every request, and the answers view the answers condensing kept facts of (those to
    # enveloped requests), all of them as reading without condensing finds them
    assert condensed.traffic.requests is None  # type: ignore[attr-defined]
    assert condensed.traffic.answers.is_empty()  # type: ignore[attr-defined]
    whole, kept = (_sorted(a.rule_context.responses) for a in (full, condensed))  # type: ignore[attr-defined]
    assert kept.height > condensed.messages.filter(pl.col("dir") == "s2c").height  # type: ignore[attr-defined]
    assert kept.join(whole, on=kept.columns, how="anti", nulls_equal=True).is_empty()
    every = full.messages.filter((pl.col("kind") == "request") & (pl.col("dir") == "c2s"))  # type: ignore[attr-defined]
    # the request view is on disk (`analyzer.spill`), or in memory when the moved requests were held
    # there and are few (`RuleContext._view_in_memory`; tests/test_spill.py covers which one is chosen)
    assert isinstance(ctx.requests, pl.DataFrame | pl.LazyFrame)
    view = ctx.requests.lazy().collect()
    assert view.height == every.height > condensed.messages.filter(pl.col("kind") == "request").height  # type: ignore[attr-defined]
    # rules run again on the released context read only the frames built before the release
    again = run_rules(condensed)
    assert again == condensed.findings  # type: ignore[attr-defined]
    assert [f.details for f in again] == [f.details for f in condensed.findings]  # type: ignore[attr-defined]
    # anything that would read the moved requests now fails loudly instead of seeing only kept rows
    with pytest.raises(RuntimeError, match="released"):
        ctx._request_details(view.select("capture", "seq").head(1))


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    plain = as_strings(frame).with_columns(pl.col(pl.List(pl.Categorical())).cast(pl.List(pl.String())))
    lists = [name for name, dtype in plain.schema.items() if isinstance(dtype, pl.List)]
    plain = plain.with_columns(pl.col(lists).list.sort()) if lists else plain
    return plain.sort(pl.all().exclude(lists))


def test_what_is_dropped_and_what_it_adds_up_to(generated: Path) -> None:
    dropped_any = False
    for path in find_inputs([generated]):
        paired = pair_responses(extract_file(path, LoadOptions(keep_raw=True)).messages.drop("raw"))
        kept, traffic = condense(paired)
        whole = traffic_of(paired)
        assert traffic.rows == paired.height
        for name in ("conns", "sessions", "servers"):
            assert _sorted(getattr(traffic, name)).equals(_sorted(getattr(whole, name))), (path, name)
        moved = as_strings(traffic.requests) if traffic.requests is not None else None
        assert moved is not None
        gone = as_strings(paired.join(kept.select("line"), on="line", how="anti"))
        # requests of condensed exchanges are moved, not dropped, and only those
        assert gone.filter(pl.col("kind") == "request").select(moved.columns).equals(moved)
        dropped = gone.filter(pl.col("kind") != "request")
        kept_s = pl.concat([as_strings(kept).select(moved.columns), moved])
        dropped_any = dropped_any or dropped.height > 0
        # never dropped: errors, garbage, process lifecycle, probe and initialize answers
        assert dropped.filter(pl.col("kind").is_in(["error", "invalid"])).is_empty()
        assert dropped.filter(pl.col("method").is_in(["server/discover", "initialize"])).is_empty()
        # of process lifecycle only what nothing reads (`test_a_spawns_unread_lifecycle_rows_are_dropped`)
        lifecycle = dropped.filter(pl.col("record_type") == "lifecycle").get_column("event")
        assert set(lifecycle.unique()) <= UNREAD_LIFECYCLE
        assert set(dropped.get_column("kind").unique()) <= {"response", "lifecycle", "notification"}
        answered = set(dropped.filter(pl.col("kind") == "response").get_column("req_seq").to_list())
        assert set(moved.get_column("seq").to_list()) <= answered
        # each dropped answer to an enveloped request is kept as a fact the rules read
        enveloped = kept_s.filter(pl.col("meta_version").is_not_null()).select("seq")  # kept or moved
        answers = dropped.filter(pl.col("kind") == "response").join(
            enveloped, left_on="req_seq", right_on="seq", how="semi"
        )
        assert sorted(traffic.answers.get_column("line").to_list()) == sorted(answers.get_column("line").to_list())
    assert dropped_any


def test_a_rotated_capture_reports_alike(tmp_path: Path, chunks: str) -> None:
    """Flows cut by rotation (request in one part, its stream in the next) pair and count as before."""
    out = tmp_path / "rot"
    cap = Cap(out, transport="http")
    cap.writer = CaptureWriter(out, transport="http", server="srv", rotate_bytes=900)
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, discover_result(1), headers=[["Content-Type", "application/json"]])
    for n in range(2, 40):
        flow = f"f{n}"
        cap.http_request(flow, {**probe(n), "method": "tools/call"}, headers=modern_headers("tools/call"))
        cap.http_response(flow, 200, streamed=True, peer=f"10.0.0.{n % 3}:8000")
        cap.sse(flow, 0, {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
        cap.sse(flow, 1, {"jsonrpc": "2.0", "id": n, "result": {"content": []}})
        cap.record({"type": "sse.end", "flow": flow, "dir": "s2c", "how": "clean"})
    cap.writer.close()
    assert len(cap.writer.paths) > 5
    full, condensed = _both(out)
    assert condensed.messages.height < full.messages.height  # type: ignore[attr-defined]
    assert render_json(condensed) == render_json(full)  # type: ignore[arg-type]
    assert render_text(condensed, width=160) == render_text(full, width=160)  # type: ignore[arg-type]


def _answer_pairs(frame: pl.DataFrame) -> list[tuple[object, ...]]:
    answers = as_strings(frame).filter(pl.col("dir") == "s2c")
    return answers.select("file", "line", "method", "req_line").sort("file", "line").rows()


@pytest.mark.parametrize("split", ["chunks", "parts"])
def test_a_duplicate_answer_finds_a_request_condensed_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: str
) -> None:
    # The first piece of work (a chunk of a file, or the first part of a rotated capture) holds one
    # plain exchange only, so condensing leaves it no rows; the server answers the same id again in
    # the next one. Read whole, that duplicate answer pairs with the request: condensed, too.
    exchange = [
        frame(1, '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'),
        frame(2, '{"jsonrpc":"2.0","id":1,"result":{}}', "s2c"),
    ]
    again = frame(3, '{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"again"}}', "s2c")
    header = orjson.dumps(HEADER).decode()
    if split == "chunks":
        first = [header, *exchange]
        paths = [write_lines(tmp_path / "dup.jsonl", [*first, again])]
        monkeypatch.setattr(load, "PIECE_BYTES", sum(len(line) + 1 for line in first))
        monkeypatch.setattr(load, "CHUNK_BYTES", 1)  # a chunk per piece
    else:
        second = orjson.dumps({**HEADER, "part": 1}).decode()
        paths = [
            write_lines(tmp_path / "dup.000.jsonl", [header, *exchange]),
            write_lines(tmp_path / "dup.001.jsonl", [second, again]),
        ]
    full = analyze([tmp_path], AnalyzeOptions(load=LoadOptions(condense=False), jobs=1))
    condensed = analyze([tmp_path], AnalyzeOptions(jobs=1))
    assert _answer_pairs(full.messages) == [
        (str(paths[0]), 3, "tools/list", 2),
        (str(paths[-1]), 4 if split == "chunks" else 2, "tools/list", 2),
    ]
    assert _answer_pairs(condensed.messages) == _answer_pairs(full.messages)[1:]  # the plain answer is dropped
    assert render_json(condensed) == render_json(full)


@pytest.mark.parametrize("big_seq", [False, True])
def test_a_request_answered_twice_keeps_its_first_answer(tmp_path: Path, big_seq: bool) -> None:
    # An enveloped call answered with a result (condensed into the answers facts), then again with
    # an error (kept): the answers view holds the first answer only, with seq numbers that fit an
    # integer key and with ones that do not (then the check runs on both columns).
    from analyzer.rules.context import _answered_twice

    meta = '{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}'
    base = (1 << 33) if big_seq else 0
    lines = [
        orjson.dumps(HEADER).decode(),
        frame(base + 1, '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":' + meta + "}"),
        frame(base + 2, '{"jsonrpc":"2.0","id":7,"result":{}}', "s2c"),
        frame(base + 3, '{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"again"}}', "s2c"),
    ]
    write_lines(tmp_path / "twice.jsonl", lines)
    analysis = analyze([tmp_path], AnalyzeOptions(jobs=1))
    answers = analysis.rule_context.responses  # type: ignore[attr-defined]
    assert answers.select("seq", "resp_line", pl.col("resp_kind").cast(pl.String)).rows() == [
        ((base + 1) * MEMBER_SLOTS, 3, "response")
    ]
    # seqs of every size: the check packs the capture's code and seq into one integer when both fit
    for seq in (base + 1, (base + 1) * MEMBER_SLOTS, (1 << 63) - 1):
        both = pl.DataFrame({"capture": ["c", "c", "d", "e"], "seq": [seq, seq, seq, seq - 1]})
        both = both.with_columns(pl.col("capture").cast(pl.Categorical()))
        assert _answered_twice(both) and not _answered_twice(both.slice(1))


def _lifecycle(analysis: object) -> list[str]:
    rows = as_strings(analysis.messages).filter(pl.col("record_type") == "lifecycle")  # type: ignore[attr-defined]
    return rows.sort("file", "line").get_column("event").to_list()


def test_a_spawns_unread_lifecycle_rows_are_dropped(tmp_path: Path) -> None:
    """A probe spawn keeps its `spawn`, the host's `signal` (a death after it is no crash) and its
    `client-eof` (the latest row of its file): the `server-eof` and `exit` after that signal are read
    by nothing, so a spawn keeps three rows, as before signals were read; the reports stay the same."""
    out = tmp_path / "spawns"
    gen.generate_spawns(out, 40, seed=3)
    full, condensed = _both(out)
    assert _lifecycle(full).count("exit") == _lifecycle(full).count("signal") == 40
    kept = _lifecycle(condensed)
    assert sorted(set(kept)) == ["client-eof", "signal", "spawn"]
    assert kept.count("spawn") == kept.count("signal") == kept.count("client-eof") == 40
    for name in ("probes", "inits"):
        assert getattr(condensed, name).equals(getattr(full, name)), name
    assert render_json(condensed) == render_json(full)  # type: ignore[arg-type]
    assert render_text(condensed, width=160) == render_text(full, width=160)  # type: ignore[arg-type]


def test_a_death_a_request_can_read_is_kept(tmp_path: Path, chunks: str) -> None:
    """Deaths and client EOFs a request can find first after it stay, whatever came before them."""
    out = tmp_path / "life"
    cap = Cap(out)
    cap.life("spawn", argv=["srv"], pid=7, parent_argv=["host", "--x"])
    cap.c2s(probe(1))
    cap.life("client-eof")  # before the death: probe 1 did not see the server die
    cap.life("signal", signal="SIGTERM")
    cap.life("server-eof")
    cap.life("exit", signal="SIGTERM", status=143)  # a second death: read by nothing
    cap.c2s({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}})
    cap.life("exit", code=1, status=1)  # the first death after the initialize
    cap.life("client-eof")  # after a death: read by nothing
    cap.life("linger-end")  # read by nothing, but the file's latest row (the watcher's horizon)
    cap.close()
    full, condensed = _both(out)
    assert _lifecycle(full) == [
        "spawn", "client-eof", "signal", "server-eof", "exit", "exit", "client-eof", "linger-end"
    ]  # fmt: skip
    expected = (
        ["spawn", "client-eof", "signal", "exit", "linger-end"]
        if chunks == "one chunk"
        else _lifecycle(condensed)
    )
    assert _lifecycle(condensed) == expected
    assert len(_lifecycle(condensed)) < len(_lifecycle(full))
    assert full.probes.get_column("outcome").to_list() == ["no-answer"]  # type: ignore[attr-defined]
    assert full.inits.get_column("outcome").to_list() == ["connection-died"]  # type: ignore[attr-defined]
    for name in ("probes", "inits"):
        assert getattr(condensed, name).equals(getattr(full, name)), name
    assert render_json(condensed) == render_json(full)  # type: ignore[arg-type]


def _after_the_probe(folder: Path, kind: str) -> Path:
    """A capture whose every request condensing moves: modern requests answered, no probe or
    `initialize` (the recorder started after the client's probe)."""
    if kind == "corpus":  # a real SDK session through the proxy, its probe exchange (lines 2-3) cut
        src = next((CORPUS / "auto-modern-http").glob("*.jsonl"))
        lines = src.read_bytes().split(b"\n")
        assert orjson.loads(lines[1])["raw"].find('"server/discover"') > 0
        folder.mkdir()
        out = folder / src.name
        out.write_bytes(b"\n".join([lines[0], *lines[3:]]))
        return out
    cap = Cap(folder, transport=kind)
    request = {**probe(5), "method": "tools/list"}
    answer = {"jsonrpc": "2.0", "id": 5, "result": {"tools": []}}
    if kind == "http":
        cap.http_request("f1", request, headers=modern_headers("tools/list"))
        cap.http_response("f1", 200, answer, headers=[["content-type", "application/json"]])
    else:
        cap.c2s(request)
        cap.s2c(answer)
    return cap.close()


@pytest.mark.parametrize("kind", ["stdio", "http", "corpus"])
def test_a_capture_condensed_to_no_rows_reports_as_uncondensed(tmp_path: Path, kind: str) -> None:
    path = _after_the_probe(tmp_path / "caps", kind)
    full, condensed = _both(path)
    assert condensed.messages.height == 0 < full.messages.height  # type: ignore[attr-defined]
    report = render_json(condensed)  # type: ignore[arg-type]
    assert report == render_json(full)  # type: ignore[arg-type]
    assert [s["server"] for s in orjson.loads(report)["servers"]] == [
        "auto-modern-http-server" if kind == "corpus" else "srv"
    ]
    compact([str(path.parent)], tmp_path / "archive")
    assert render_json(analyze([str(tmp_path / "archive")])) == report
