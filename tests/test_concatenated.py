"""Captures joined into one file (`cat a.jsonl b.jsonl > both.jsonl`, `zcat parts*.gz > x.jsonl`, a
log shipper appending files to one stream) read as they read apart.

`seq` numbers one capture's records (FORMAT.md, Ordering), so a file holding two captures holds
every `seq` twice: the second capture's records must not be paired with the first's. Its parts
joined in order (`cat x.000.jsonl x.001.jsonl`) stay one capture: an answer in the second part still
pairs with its request in the first.

Reports are compared with every piece of evidence replaced by the text of the line it names: the
same record is on another line of another file, but it is the same record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from analyzer import load
from analyzer.compact import compact
from analyzer.pipeline import analyze
from analyzer.report import render_json
from analyzer.watch import Watcher
from tests.test_rotated_exchanges import SCENARIOS, by_seq, located, rewrite
from tests.test_watch import analyzed, expected, replay, reported


def by_text(report: dict[str, Any]) -> Any:
    """The report without its inputs, every evidence location replaced by the text of the line it names."""
    return located(report, "record", bytes.decode)


def report(*paths: Path) -> Any:
    return by_text(orjson.loads(render_json(analyze([str(p) for p in paths]))))


def join(files: list[Path], out: Path) -> Path:
    out.write_bytes(b"".join(f.read_bytes() for f in files))
    return out


CORPUS = sorted(p for scenario in SCENARIOS for p in scenario.glob("*.jsonl"))


def test_the_whole_corpus_joined_into_one_file_reads_as_its_files(tmp_path: Path) -> None:
    both = join(CORPUS, tmp_path / "corpus.jsonl")
    assert report(both) == report(*CORPUS)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.name)
def test_a_scenarios_captures_joined_read_as_apart(tmp_path: Path, scenario: Path) -> None:
    captures = sorted(scenario.glob("*.jsonl"))
    joined = join(captures, tmp_path / "joined.jsonl")
    assert report(joined) == report(*captures)


def test_a_legacy_server_after_a_modern_one_stays_legacy(tmp_path: Path) -> None:
    """The defect as first seen: the legacy server's `initialize` answer (seq 3 of its capture)
    settled the modern capture's probe of seq 3, and the legacy server read as dual-era."""
    corpus = SCENARIOS[0].parent
    modern, legacy = (next((corpus / name).glob("*.jsonl")) for name in ("auto-modern-stdio", "auto-legacy-stdio"))
    servers = report(join([modern, legacy], tmp_path / "both.jsonl"))["servers"]
    assert {s["server"]: s["era"] for s in servers} == {
        "auto-modern-stdio-server": "modern",
        "auto-legacy-stdio-server": "legacy",
    }


def test_rotated_parts_joined_in_order_stay_one_capture(tmp_path: Path) -> None:
    """A request at the end of one part answered in the next (see test_rotated_exchanges). The parts'
    records differ from the whole capture's in their hash chain: evidence is compared by `seq`, unique
    in a file holding one capture."""
    for capture in CORPUS:
        rewrite(capture, tmp_path / "whole", rotate_bytes=1 << 30)
        rewrite(capture, tmp_path / "parts", rotate_bytes=1500)
    parts = sorted((tmp_path / "parts").iterdir())
    by_capture: dict[str, list[Path]] = {}
    for part in parts:
        by_capture.setdefault(load.capture_id(str(part)), []).append(part)
    assert max(map(len, by_capture.values())) > 1
    (tmp_path / "joined").mkdir()
    for name, group in by_capture.items():
        join(group, tmp_path / "joined" / f"{name}.jsonl")
    joined, whole = (orjson.loads(render_json(analyze([str(tmp_path / d)]))) for d in ("joined", "whole"))
    assert by_seq(joined) == by_seq(whole)


def test_joined_captures_read_alike_in_pieces_and_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A big file is read in pieces (not batched with other small files): a capture that starts
    in a later piece, or mid-piece, still starts there."""
    both = join(CORPUS, tmp_path / "corpus.jsonl")
    expected = report(*CORPUS)
    monkeypatch.setattr(load, "SMALL_BYTES", 0)
    monkeypatch.setattr(load, "PIECE_BYTES", 20_000)
    assert report(both) == expected


def test_an_archive_of_joined_captures_reads_as_the_file(tmp_path: Path) -> None:
    """`compact` keeps each row's capture as the file's reading labels it: the archive's report is the
    joined file's, byte for byte (evidence names the joined file, its lines)."""
    both = join(CORPUS, tmp_path / "corpus.jsonl")
    compact([str(both)], tmp_path / "archive", jobs=1)
    from_file, from_archive = (render_json(analyze([str(p)])) for p in (both, tmp_path / "archive"))
    assert from_archive == from_file
    assert by_text(orjson.loads(from_file)) == report(*CORPUS)


@pytest.mark.parametrize("names", [("auto-modern-stdio", "auto-legacy-stdio"), ("upgrade-http", "upgrade-stdio")])
def test_watch_reads_joined_captures_as_analyze_does(tmp_path: Path, names: tuple[str, ...]) -> None:
    """`watch` reads a growing file in pieces: a capture joined in an earlier round keeps its label in
    the later ones."""
    corpus = SCENARIOS[0].parent
    (tmp_path / "src").mkdir()
    (tmp_path / "live").mkdir()
    joined = join(sorted(p for name in names for p in (corpus / name).glob("*.jsonl")), tmp_path / "src" / "j.jsonl")
    clock = [1000.0]
    watcher = Watcher([str(tmp_path / "live")], clock=lambda: clock[0])
    events = replay([joined], tmp_path / "live", watcher, clock, seed=5)
    final = analyzed(tmp_path / "live")
    assert reported([e.as_json() for e in events]) == expected(final)
    assert by_text(final) == report(*(p for name in names for p in sorted((corpus / name).glob("*.jsonl"))))
