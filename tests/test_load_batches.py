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


def test_many_small_captures_share_what_they_have_in_common(
    inputs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100,000 spawn captures keep a `FileFacts` each until they are combined: what files have in
    common (equal record counts, the transport) is one object for all, and a part's identity keys
    are fixed-size digests, whatever the length of the path and header they come from. Sharing
    changes nothing a file says: its counts are those it has alone, even when the counts kept for
    sharing are few, and a copy of a part is still found to repeat it."""
    alone = {f.file: f for f in _alone(inputs)}
    for kept in (2, load._SHARED_COUNTS):
        monkeypatch.setattr(load, "_SHARED_COUNTS", kept)
        facts = extract_files(inputs, jobs=2)
        assert all(f.counts == alone[f.file].counts for f in facts)
        by_counts: dict[tuple[tuple[str, int], ...], set[int]] = {}
        for f in facts:
            by_counts.setdefault(tuple(f.counts.items()), set()).add(id(f.counts))
        repeated = [ids for key, ids in by_counts.items() if sum(tuple(f.counts.items()) == key for f in facts) > 1]
        assert repeated
        if kept > len(by_counts):
            assert all(len(ids) == 1 for ids in repeated)
    stdio = [f for f in facts if f.transport == "stdio"]
    assert len(stdio) > 20 and len({id(f.transport) for f in stdio}) == 1
    keys = [k for f in facts for k in f.identity]
    assert len(keys) >= len(inputs) and all(isinstance(k, bytes) and len(k) == 16 for k in keys)
    assert len(set(keys)) == len(keys)
    # a copy of a spawn capture, under the recorder's own name, is the same part: read once
    spawn = next(p for p in inputs if "/gen/" in p and Path(p).stat().st_size < 4096)
    copy = tmp_path / Path(spawn).name
    copy.write_bytes(Path(spawn).read_bytes())
    again = extract_files([spawn, str(copy)], jobs=1)
    assert again[0].duplicate_of is None and again[1].duplicate_of == spawn
