"""Exchanges cut by rotation: a request at the end of one part, its answer (or what ended it) in the next.

Every corpus capture is written again by the real `CaptureWriter`, once whole and once rotated into
parts of a record or two, and both are analyzed. The reports must be the same, evidence included:
each piece of evidence is compared by the `seq` of the record it names (numbered across parts), so
an answer's evidence must name the part and line the answer is on, not the request's part.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from addon import format as fmt
from addon.writer import CaptureWriter
from analyzer.pipeline import analyze
from analyzer.report import render_json

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted(p for p in (ROOT / "captures" / "corpus").iterdir() if p.is_dir())
WRITER_FIELDS = frozenset(
    {"type", "format", "tool", "tool_version", "started", "host", "transport", "server", "part", "previous",
     "recorder_pid", "ts", "mono", "seq", "chain_alg", "chain_key_id", "chain_prev", "chain"}
)  # fmt: skip
"""Header fields the writer sets itself; the others (argv, redaction, …) are passed on."""


def rewrite(capture: Path, out: Path, rotate_bytes: int, key: bytes | None = None) -> list[Path]:
    """`capture` written again into `out` by the real writer (chained; keyed with `key`): its parts, in order."""
    lines = [orjson.loads(line) for line in capture.read_bytes().splitlines() if line]
    header = lines[0]
    writer = CaptureWriter(
        out,
        transport=header["transport"],
        server=header["server"],
        header_extra={k: v for k, v in header.items() if k not in WRITER_FIELDS},
        rotate_bytes=rotate_bytes,
        chain_key=key,
    )
    for rec in lines[1:]:
        if rec["type"] not in (fmt.HEADER, fmt.PART_END):
            rec.pop(fmt.F_SEQ, None)
            writer.write(rec)
    writer.close()
    return writer.paths


def located(report: dict[str, Any], name: str, of: Callable[[bytes], Any]) -> Any:
    """The report without its inputs, every evidence location replaced by `{name: of(the line it names)}`."""
    lines: dict[str, list[bytes]] = {}

    def at(file: str, line: int) -> Any:
        if file not in lines:
            lines[file] = Path(file).read_bytes().splitlines()
        return of(lines[file][line - 1])

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if isinstance(node.get("file"), str) and isinstance(node.get("line"), int):
                return {name: at(node["file"], node["line"]), "note": node.get("note")}
            return {k: walk(v) for k, v in node.items() if k != "inputs"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(report)


def by_seq(report: dict[str, Any]) -> Any:
    """The report with every evidence location replaced by the `seq` of the record it names."""
    return located(report, "seq", lambda text: orjson.loads(text)[fmt.F_SEQ])


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.name)
def test_an_exchange_cut_by_rotation_reads_as_whole(tmp_path: Path, scenario: Path) -> None:
    captures = sorted(scenario.glob("*.jsonl"))
    for capture in captures:
        rewrite(capture, tmp_path / "whole", rotate_bytes=1 << 30)
        rewrite(capture, tmp_path / "parts", rotate_bytes=1500)
    assert len(list((tmp_path / "parts").iterdir())) > len(captures)  # rotated
    whole, parts = (orjson.loads(render_json(analyze([str(tmp_path / d)]))) for d in ("whole", "parts"))
    assert by_seq(parts) == by_seq(whole)


@pytest.mark.parametrize("read", ["jsonl", "archive"])
@pytest.mark.parametrize("others", ["parts", "part 0 in a batch"])
def test_a_renamed_copy_of_a_middle_part_goes_on_with_the_part_before_it(
    tmp_path: Path, read: str, others: str
) -> None:
    """A copy of part 1 named as a file manager names a copy (`x.001 copy.jsonl`) sorts before the part
    (a space before the dot) and is read in its place, the part left out as its duplicate: its capture
    was its name's, so the probe at the end of part 0 and its answer in the copy were not paired
    (`no-answer`). Also when part 0 is the only file named for its capture, read in a batch of small
    files behind another capture's."""
    from analyzer.compact import compact
    from analyzer.report import report_dict

    corpus = ROOT / "captures" / "corpus"
    (capture,) = sorted((corpus / "auto-modern-http").glob("*.jsonl"))
    parts = rewrite(capture, tmp_path / "parts", rotate_bytes=1)
    assert len(parts) > 2
    copy = parts[1].with_name(parts[1].name.removesuffix(".jsonl") + " copy.jsonl")
    copy.write_bytes(parts[1].read_bytes())
    want = {"discover-result": 1}
    if others != "parts":
        for part in parts[1:]:
            part.unlink()
        (other,) = sorted((corpus / "auto-legacy-stdio").glob("*.jsonl"))
        (tmp_path / "parts" / ("0" + other.name)).write_bytes(other.read_bytes())
        want["legacy-answer"] = 1
    if read == "archive":
        compact([str(tmp_path / "parts")], str(tmp_path / "archive"))
    report = report_dict(analyze([str(tmp_path / ("parts" if read == "jsonl" else "archive"))]))
    assert report["totals"]["probe_outcomes"] == want


@pytest.mark.parametrize("read", ["jsonl", "archive"])
@pytest.mark.parametrize("suffix", [" copy", " (1)"])
@pytest.mark.parametrize("part", ["part 0", "part 0 cut short", "no part 0"])
def test_a_renamed_copy_of_part_0_goes_on_with_the_next_part(tmp_path: Path, read: str, suffix: str, part: str) -> None:
    """A copy of part 0 named as a file manager names a copy (`x.000 copy.jsonl`, `x.000 (1).jsonl`)
    sorts before the part and is read in its place, the part left out as its duplicate. Its header
    names no previous part, so its capture was its name's: the probe at the end of part 0 and its
    answer in part 1 were not paired (`no-answer`). The copy is read also when it holds more lines
    than the part (a part cut short, without the probe), and paired as well; and without the part."""
    from analyzer.compact import compact
    from analyzer.report import report_dict

    (capture,) = sorted((ROOT / "captures" / "corpus" / "auto-modern-http").glob("*.jsonl"))
    parts = rewrite(capture, tmp_path / "parts", rotate_bytes=1)
    assert len(parts) > 2
    copy = parts[0].with_name(parts[0].name.removesuffix(".jsonl") + suffix + ".jsonl")
    copy.write_bytes(parts[0].read_bytes())
    if part == "part 0 cut short":
        parts[0].write_bytes(parts[0].read_bytes().splitlines(keepends=True)[0])  # its header alone
    elif part == "no part 0":
        parts[0].unlink()
    assert sorted(p.name for p in (tmp_path / "parts").iterdir())[0] == copy.name  # read, the part left out
    if read == "archive":
        compact([str(tmp_path / "parts")], str(tmp_path / "archive"))
    report = report_dict(analyze([str(tmp_path / ("parts" if read == "jsonl" else "archive"))]))
    assert report["totals"]["probe_outcomes"] == {"discover-result": 1}


@pytest.mark.parametrize("read", ["jsonl", "archive"])
def test_another_runs_part_0_named_as_a_copy_of_part_0_is_a_capture_of_its_own(tmp_path: Path, read: str) -> None:
    """A file named as a copy of capture `x`'s part 0 (`x.000 copy.jsonl`) whose header is of another
    run's part 0 (the same server recorded again: another start time) is no copy of it. It went on
    into `x`'s part 1, so its probe was paired with the answer to `x`'s (two `discover-result`)."""
    from analyzer.compact import compact
    from analyzer.report import report_dict

    (capture,) = sorted((ROOT / "captures" / "corpus" / "auto-modern-http").glob("*.jsonl"))
    parts = rewrite(capture, tmp_path / "parts", rotate_bytes=1)
    other = rewrite(capture, tmp_path / "other", rotate_bytes=1)
    assert orjson.loads(other[0].read_bytes().splitlines()[0])["started"] != orjson.loads(
        parts[0].read_bytes().splitlines()[0]
    )["started"]
    misleading = parts[0].with_name(parts[0].name.removesuffix(".jsonl") + " copy.jsonl")
    misleading.write_bytes(other[0].read_bytes())
    if read == "archive":
        compact([str(tmp_path / "parts")], str(tmp_path / "archive"))
    report = report_dict(analyze([str(tmp_path / ("parts" if read == "jsonl" else "archive"))]))
    # as that part reads under its own name: its probe unanswered, `x`'s answered
    assert report["totals"]["probe_outcomes"] == {"discover-result": 1, "no-answer": 1}
