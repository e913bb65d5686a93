"""Compressed captures (`*.jsonl.gz`, `*.jsonl.zst`, as logrotate leaves them) read as the plain file.

Real corpus captures (written by the real recorder), compressed by the standard library's gzip and
the zstd the project depends on, analyzed by the real pipeline: the report (eras, probe outcomes,
findings, evidence lines) equals the plain file's but for the file's name. Cut and corrupt streams
are torn, never a crash.
"""

from __future__ import annotations

import gzip
import io
import shutil
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer import load
from analyzer.load import extract_file, find_inputs
from analyzer.pipeline import analyze
from analyzer.report import report_dict

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

CORPUS = Path(__file__).resolve().parent.parent / "captures" / "corpus"


def _corpus_capture(scenario: str) -> Path:
    (path,) = sorted((CORPUS / scenario).glob("*.jsonl"))
    return path


def _compress(kind: str, data: bytes) -> bytes:
    return gzip.compress(data) if kind == "gz" else zstd.compress(data)


def _report(paths: list[Path]) -> dict[str, Any]:
    return report_dict(analyze([str(p) for p in paths]))


def _renamed(report: dict[str, Any], old: Path, new: Path) -> dict[str, Any]:
    """The report with every mention of `old` (its path, its capture id) written as `new`'s."""
    text = orjson.dumps(report).decode()
    return orjson.loads(text.replace(str(old), str(new)))


@pytest.mark.parametrize("kind", ["gz", "zst"])
@pytest.mark.parametrize("scenario", ["probe-storm-http", "unsupported-retry-stdio", "upgrade-http"])
def test_a_compressed_capture_reports_as_the_plain_one(tmp_path: Path, kind: str, scenario: str) -> None:
    plain = tmp_path / "plain" / _corpus_capture(scenario).name
    plain.parent.mkdir()
    shutil.copy(_corpus_capture(scenario), plain)
    packed = tmp_path / "packed" / f"{plain.name}.{kind}"
    packed.parent.mkdir()
    packed.write_bytes(_compress(kind, plain.read_bytes()))
    expected = _report([plain])
    assert expected["findings"] or expected["servers"], "the scenario must have something to compare"
    got = _report([packed.parent])  # found in a directory
    assert got["inputs"]["files"] == [str(packed)]
    assert _renamed(got, packed, plain) == expected
    assert any(str(packed) in orjson.dumps(f["evidence"]).decode() for f in got["findings"]) or not got["findings"]


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_bad_lines_keep_the_line_numbers_of_the_decompressed_stream(tmp_path: Path, kind: str) -> None:
    lines = _corpus_capture("probe-storm-http").read_bytes().split(b"\n")
    broken = b"\n".join([*lines[:3], b"{not json", *lines[3:-1], lines[-2][:20]])  # one malformed, one torn
    plain = tmp_path / "cap.000.jsonl"
    plain.write_bytes(broken)
    packed = tmp_path / f"z.000.jsonl.{kind}"
    packed.write_bytes(_compress(kind, broken))
    a, b = extract_file(str(plain)), extract_file(str(packed))
    assert [(x.line, x.reason) for x in b.malformed] == [(x.line, x.reason) for x in a.malformed] == [
        (4, "not valid JSON")
    ]
    assert a.torn is not None and b.torn is not None and b.torn.line == a.torn.line == len(lines) + 1
    assert b.counts == a.counts


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_small_pieces_carry_lines_over_without_losing_or_splitting_any(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _corpus_capture("probe-storm-http")
    packed = tmp_path / f"{source.name}.{kind}"
    packed.write_bytes(_compress(kind, source.read_bytes()))
    whole = extract_file(str(source))
    monkeypatch.setattr(load, "PIECE_BYTES", 1000)  # many pieces, lines longer than a piece too
    pieced = extract_file(str(packed))
    assert pieced.counts == whole.counts
    assert pieced.malformed == [] and pieced.torn is None


def test_a_gzip_capture_cut_mid_stream_is_torn_not_a_crash(tmp_path: Path) -> None:
    source = _corpus_capture("probe-storm-http")
    packed = gzip.compress(source.read_bytes())
    cut = tmp_path / "cut.000.jsonl.gz"
    cut.write_bytes(packed[: len(packed) * 2 // 3])
    facts = extract_file(str(cut))
    assert facts.torn is not None
    assert "gzip stream ends early" in facts.torn.reason
    assert 0 < facts.records < extract_file(str(source)).records
    report = _report([cut])
    assert len(report["inputs"]["torn"]) == 1


def test_a_gzip_capture_cut_right_after_a_newline_still_says_it_was_cut(tmp_path: Path) -> None:
    data = _corpus_capture("probe-storm-http").read_bytes()
    first_lines = data[: data.index(b"\n", 2000) + 1]
    path = tmp_path / "cut.000.jsonl.gz"
    path.write_bytes(zlib_stream_without_end(first_lines))  # whole lines, then the stream stops
    facts = extract_file(str(path))
    assert facts.records == first_lines.count(b"\n")
    assert facts.torn is not None and "ends early" in facts.torn.reason
    assert facts.torn.line == first_lines.count(b"\n") + 1


def zlib_stream_without_end(data: bytes) -> bytes:
    """A gzip member holding `data`, flushed but never finished (no end block, no trailer)."""
    import zlib

    c = zlib.compressobj(wbits=31)
    return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)


def test_corrupt_gzip_data_is_torn_with_the_reason(tmp_path: Path) -> None:
    packed = bytearray(gzip.compress(_corpus_capture("probe-storm-http").read_bytes()))
    packed[len(packed) // 2 : len(packed) // 2 + 64] = b"\xff" * 64
    path = tmp_path / "bad.000.jsonl.gz"
    path.write_bytes(bytes(packed))
    facts = extract_file(str(path))
    assert facts.torn is not None and "gzip stream" in facts.torn.reason


def test_the_kind_comes_from_the_content_not_the_name(tmp_path: Path) -> None:
    source = _corpus_capture("probe-storm-http")
    disguised = tmp_path / "a" / source.name  # gzip content, plain name
    disguised.parent.mkdir()
    disguised.write_bytes(gzip.compress(source.read_bytes()))
    plain_named_gz = tmp_path / "b" / f"{source.name}.gz"  # plain content, compressed name
    plain_named_gz.parent.mkdir()
    shutil.copy(source, plain_named_gz)
    expected = extract_file(str(source))
    for path in (disguised, plain_named_gz):
        got = extract_file(str(path))
        assert got.skipped is None and got.counts == expected.counts


def test_directories_list_compressed_captures_and_a_copy_is_read_once(tmp_path: Path) -> None:
    source = _corpus_capture("probe-storm-http")
    shutil.copy(source, tmp_path / source.name)
    (tmp_path / f"{source.name}.gz").write_bytes(gzip.compress(source.read_bytes()))
    (tmp_path / f"{source.name}.zst").write_bytes(zstd.compress(source.read_bytes()))
    (tmp_path / "notes.txt.gz").write_bytes(gzip.compress(b"not a capture"))
    found = find_inputs([tmp_path])
    assert [Path(p).name for p in found] == [source.name, f"{source.name}.gz", f"{source.name}.zst"]
    report = _report([tmp_path])
    assert report["inputs"]["files"] == [str(tmp_path / source.name)]  # the logrotated copies repeat the part
    assert [d["duplicate_of"] for d in report["inputs"].pop("duplicates")] == [str(tmp_path / source.name)] * 2
    assert report == _report([tmp_path / source.name])


def _pieces_model(data: bytes, head: int, size: int) -> list[bytes]:
    """Pieces as the reading defines them: cut after the last newline of what has been read, the
    `head` bytes read ahead and then `size` bytes at a time; only the last piece may lack its newline."""
    out: list[bytes] = []
    pending = b""
    blocks = [data[: head + size], *(data[at : at + size] for at in range(head + size, len(data), size))]
    for block in blocks:
        pending += block
        cut = pending.rfind(b"\n") + 1
        if cut:
            out.append(pending[:cut])
            pending = pending[cut:]
    return [*out, pending] if pending else out


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    last=st.booleans(),
    size=st.integers(1, 64),
    head=st.integers(0, 8),
)
def test_pieces_of_a_stream_are_cut_after_newlines(lines: list[bytes], last: bool, size: int, head: int) -> None:
    """Lines longer than a piece (joined once, at their newline), short ones, a last line without its
    newline, bytes read ahead (`head`): the pieces are the model's, whatever the block size."""
    from analyzer.sources import pieces

    data = b"\n".join(lines) + (b"\n" if last and lines else b"")
    head = min(head, len(data))
    stream = io.BufferedReader(io.BytesIO(data[head:]))  # type: ignore[arg-type]
    assert list(pieces(stream, size, data[:head])) == _pieces_model(data, head, size)


@pytest.mark.parametrize("stale_dir", ["a-backup", "z-backup"])
@pytest.mark.parametrize("kind", ["plain", "zst"])
def test_of_two_copies_of_a_part_the_one_holding_more_lines_is_read(
    tmp_path: Path, stale_dir: str, kind: str
) -> None:
    """A copy taken while the recorder still wrote the part holds only its first lines; the part
    itself (or its copy compressed when the recorder closed it) all of them. The copy first in path
    order was read, the other named its duplicate: the later records were lost, whichever way the
    inputs were named. Read from an archive of both copies, too."""
    from analyzer.compact import compact

    source = _corpus_capture("probe-storm-http")
    lines = source.read_bytes().splitlines(keepends=True)
    stale, live = tmp_path / "in" / stale_dir, tmp_path / "in" / "live"
    stale.mkdir(parents=True)
    live.mkdir()
    (stale / source.name).write_bytes(b"".join(lines[: len(lines) // 2]))
    whole = live / (source.name if kind == "plain" else f"{source.name}.zst")
    whole.write_bytes(source.read_bytes() if kind == "plain" else zstd.compress(source.read_bytes()))
    expected = _report([whole])
    for inputs in ([tmp_path / "in"], [stale, live], [live, stale]):
        report = _report(inputs)
        assert report["inputs"]["files"] == [str(whole)], inputs
        assert [d["duplicate_of"] for d in report["inputs"]["duplicates"]] == [str(whole)]
        assert (report["totals"], report["servers"], report["findings"]) == (
            expected["totals"], expected["servers"], expected["findings"]
        ), inputs
    if kind == "plain":
        return  # two inputs of one file name go into separate archives (`compact` refuses them)
    compact([str(tmp_path / "in")], tmp_path / "archive")
    archived = _report([tmp_path / "archive"])
    assert (archived["totals"], archived["servers"], archived["findings"]) == (
        expected["totals"], expected["servers"], expected["findings"]
    )
