"""Small files are read in batches (`analyzer.load._read_batch`) and paired and condensed together
(`analyzer.load.finish_pending`), as each would be alone."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest

from addon.writer import CaptureWriter
from analyzer import load
from analyzer.condense import merge
from analyzer.load import FileFacts, extract_file, extract_files, find_inputs
from analyzer.messages import as_strings
from bench import generate as gen
from tests.test_condense import _sorted
from tests.test_load import HEADER, frame, write_lines
from tests.test_messages import Cap, discover_result, modern_headers, probe


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Spawn-per-call stdio captures, HTTP captures, a capture rotated into parts, a header-only file
    and one with a torn last line."""
    out = tmp_path_factory.mktemp("batches")
    gen.generate(out / "gen", 2 << 20, files=2, spawns=24, seed=5)
    cap = Cap(out / "rot", transport="http")
    cap.writer = CaptureWriter(out / "rot", transport="http", server="srv", rotate_bytes=700)
    for n in range(1, 12):
        cap.http_request(f"f{n}", probe(n), headers=modern_headers())
        cap.http_response(f"f{n}", 200, discover_result(n), headers=[["Content-Type", "application/json"]])
    cap.writer.close()
    header = orjson.dumps(HEADER).decode()
    write_lines(out / "header-only.jsonl", [header])
    ping = frame(1, '{"jsonrpc":"2.0","id":1,"method":"ping"}')
    write_lines(out / "torn.jsonl", [header, ping, '{"type":"fr'], trailing_newline=False)
    paths = find_inputs([out])
    assert len(paths) > 30
    return paths


def _alone(paths: list[str]) -> list[FileFacts]:
    return [extract_file(p) for p in paths]


def _rows(frames: list[pl.DataFrame | None]) -> pl.DataFrame:
    """Frames of many files together, in (file, line) order: a batch holds its files' rows in one frame."""
    present = [as_strings(f) for f in frames if f is not None and f.height]
    return pl.concat(present).sort("file", "line", maintain_order=True)


def _assert_same(batched: list[FileFacts], alone: list[FileFacts]) -> None:
    assert [f.file for f in batched] == [f.file for f in alone]
    for b, a in zip(batched, alone, strict=True):
        assert not b.pending
        assert (b.records, b.counts, b.malformed, b.torn) == (a.records, a.counts, a.malformed, a.torn)
    # every file's rows and moved requests, exactly: per file, or in its batch's frame
    assert _rows([f.messages for f in batched]).equals(_rows([f.messages for f in alone]), null_equal=True)
    moved = [_rows([f.traffic.requests for f in facts]) for facts in (batched, alone)]  # type: ignore[misc]
    assert moved[0].equals(moved[1], null_equal=True)
    together, each = merge([f.traffic for f in batched]), merge([f.traffic for f in alone])
    assert together.rows == each.rows
    for name in ("conns", "sessions", "servers", "answers"):
        assert _sorted(getattr(together, name)).equals(_sorted(getattr(each, name))), name


@pytest.mark.parametrize("jobs", [1, 2])
def test_small_files_finished_together_read_as_alone(
    inputs: list[str], jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups: list[int] = []
    finish_group = load._finish_group
    monkeypatch.setattr(load, "_finish_group", lambda files: (groups.append(len(files)), finish_group(files)))
    batched = extract_files(inputs, jobs=jobs)
    # the spawn captures are read in a batch; the parts of the rotated capture (consecutive) one group each
    parts = sum("/rot/" in p for p in inputs)
    assert parts > 5 and len(groups) <= parts + 2
    assert sum(1 for f in batched if f.messages.height) < len(inputs) - 20
    _assert_same(batched, _alone(inputs))


def test_groups_of_any_size_read_as_alone(inputs: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _alone(inputs)
    for rows in (1, 40, 1_000):
        monkeypatch.setattr(load, "CHUNK_ROWS", rows)
        _assert_same(extract_files(inputs, jobs=1), alone)


def test_files_larger_than_a_piece_are_finished_alone(inputs: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "PIECE_BYTES", 512)
    big = [p for p in inputs if Path(p).stat().st_size > 512]
    assert big
    facts = [extract_file(p, defer=True) for p in big]
    assert not any(f.pending for f in facts)
    small = [p for p in inputs if Path(p).stat().st_size <= 512]
    assert small and all(extract_file(p, defer=True).pending for p in small)
