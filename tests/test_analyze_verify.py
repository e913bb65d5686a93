"""`erascope analyze --verify [--key FILE]`: the report of an audit says which of its inputs were
proven unaltered. The chains of the captures the analysis read are checked as `erascope verify`
checks them, the report says per file what was found (JSON `inputs.verification`, a note in the
others), and a broken chain fails the run (exit 1) after the report is written.

Real captures: a real client and server through `erascope record stdio` (unkeyed), and the same
session through the real tee with a key, rotated into parts (`tests.test_verify`'s fixtures)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from tests.peers.capture_tools import capture_files
from tests.test_verify import (
    ERASCOPE,
    ROOT,
    edited,
    frame_line,
    http_dir,
    key_file,
    lines,
    put,
    rotated_dir,
    stdio_dir,
)

__all__ = ["http_dir", "key_file", "rotated_dir", "stdio_dir"]  # fixtures, used by name

pytestmark = pytest.mark.e2e

MITMPROXY_DUMP = ROOT / "tests" / "data" / "mitmproxy-10.4.2.flows"
UNCHAINED = next((ROOT / "captures" / "corpus" / "auto-legacy-stdio").glob("*.jsonl"))


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ERASCOPE), "analyze", "-q", *args], capture_output=True, text=True, timeout=300)


def report(*args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc = analyze("-f", "json", *args)
    assert proc.stdout, proc.stderr
    return proc, orjson.loads(proc.stdout)


def copy_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_intact_captures_are_reported_verified(stdio_dir: Path) -> None:
    proc, doc = report("--verify", str(stdio_dir))
    assert proc.returncode == 0, proc.stderr
    check = doc["inputs"]["verification"]
    assert check["keyed"] is False
    assert check["counts"] == {"verified": 1}
    assert check["files"] == [] and check["not_checked"] == []
    text = analyze("--verify", str(stdio_dir))
    assert text.returncode == 0, text.stderr
    assert "hash chains checked: 1 of 1 capture file(s) verified" in text.stdout


def test_without_verify_the_report_is_as_before(stdio_dir: Path) -> None:
    proc, doc = report(str(stdio_dir))
    assert proc.returncode == 0, proc.stderr
    assert "verification" not in doc["inputs"] and doc["inputs"]["chained"] == 1


def edit_frame(path: Path, to: Path) -> int:
    """`path` with its first frame's line edited, written to `to`; that line's number."""
    all_lines = lines(path)
    n = frame_line(all_lines)
    all_lines[n - 1] = edited(all_lines[n - 1])
    put(to, all_lines)
    return n


def test_an_edited_line_fails_the_run_and_is_located(stdio_dir: Path, tmp_path: Path) -> None:
    folder = copy_dir(stdio_dir, tmp_path / "caps")
    (path,) = capture_files(folder)
    n = edit_frame(path, path)
    proc, doc = report("--verify", str(folder))
    assert proc.returncode == 1, proc.stderr
    assert "hash chain" in proc.stderr and "tampered" in proc.stderr
    check = doc["inputs"]["verification"]
    assert check["counts"] == {"tampered": 1}
    (entry,) = check["files"]
    assert entry["file"] == str(path) and entry["status"] == "tampered"
    assert entry["findings"] == 1 and entry["first"]["line"] == n and entry["first"]["kind"] == "changed"
    # the analysis itself still ran: the report holds the traffic
    assert doc["servers"]
    text = analyze("--verify", str(folder))
    assert text.returncode == 1
    # files are cited by number in the text report, the legend naming them
    assert re.search(rf"\[(\d+)\]:{n}: changed", text.stdout) and path.name in text.stdout
    md = analyze("--verify", "-f", "markdown", str(folder))
    assert md.returncode == 1 and "tampered" in md.stdout


def test_a_copy_left_out_as_a_duplicate_is_checked_too(stdio_dir: Path, tmp_path: Path) -> None:
    # The analysis reads one of two copies of a capture and leaves the other out as the same capture;
    # `--verify` checked only the one read and said "1 of 1 verified", so an edited copy handed in
    # beside an intact one passed unseen. Every copy given is checked; the one left out is named.
    folder = copy_dir(stdio_dir, tmp_path / "caps")
    (path,) = capture_files(folder)
    copy = path.with_name(path.name.removesuffix(".jsonl") + " (1).jsonl")
    n = edit_frame(path, copy)
    proc, doc = report("--verify", str(folder))
    assert proc.returncode == 1, proc.stderr
    check = doc["inputs"]["verification"]
    assert check["counts"] == {"verified": 1, "tampered": 1}
    (entry,) = check["files"]
    assert entry["file"] == str(copy) and entry["first"]["line"] == n
    # both intact: both verified, the run passes
    put(copy, lines(path))
    proc, doc = report("--verify", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert doc["inputs"]["verification"]["counts"] == {"verified": 2}


def test_a_keyed_capture_is_checked_with_its_key(rotated_dir: Path, key_file: Path) -> None:
    parts = capture_files(rotated_dir)
    proc, doc = report("--verify", "--key", str(key_file), str(rotated_dir))
    assert proc.returncode == 0, proc.stderr
    check = doc["inputs"]["verification"]
    assert check["keyed"] is True and check["counts"] == {"verified": len(parts)}


def test_a_keyed_http_capture_of_a_real_proxy_verifies(http_dir: Path, key_file: Path) -> None:
    proc, doc = report("--verify", "--key", str(key_file), str(http_dir))
    assert proc.returncode == 0, proc.stderr
    assert doc["inputs"]["verification"]["counts"] == {"verified": len(capture_files(http_dir))}
    assert [s["era"] for s in doc["servers"]] == ["modern"]


def test_a_keyed_capture_without_its_key_cannot_be_checked(rotated_dir: Path) -> None:
    proc, doc = report("--verify", str(rotated_dir))
    assert proc.returncode == 2, proc.stderr
    assert "cannot be checked" in proc.stderr
    check = doc["inputs"]["verification"]
    assert check["counts"] == {"error": len(capture_files(rotated_dir))}
    assert all(f["status"] == "error" and "key" in f["detail"] for f in check["files"])


def test_with_a_key_an_unkeyed_capture_fails(stdio_dir: Path, key_file: Path) -> None:
    proc, doc = report("--verify", "--key", str(key_file), str(stdio_dir))
    assert proc.returncode == 1, proc.stderr
    (entry,) = doc["inputs"]["verification"]["files"]
    assert entry["status"] == "tampered" and entry["first"]["kind"] == "unkeyed"


def test_inputs_without_chains_are_said_so_and_pass(stdio_dir: Path, tmp_path: Path) -> None:
    folder = copy_dir(stdio_dir, tmp_path / "caps")
    shutil.copy(UNCHAINED, folder / "old.jsonl")
    proc, doc = report("--verify", str(folder), str(MITMPROXY_DUMP))
    assert proc.returncode == 0, proc.stderr
    check = doc["inputs"]["verification"]
    assert check["counts"] == {"verified": 1, "no-chain": 1}
    assert [(f["file"], f["status"]) for f in check["files"]] == [(str(folder / "old.jsonl"), "no-chain")]
    assert check["not_checked"] == [{"file": str(MITMPROXY_DUMP), "why": check["not_checked"][0]["why"]}]
    assert "mitmproxy" in check["not_checked"][0]["why"]


def test_an_archive_is_not_checked_and_says_why(stdio_dir: Path, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    made = subprocess.run(
        [str(ERASCOPE), "compact", str(stdio_dir), "--out", str(archive)], capture_output=True, text=True, timeout=300
    )
    assert made.returncode == 0, made.stderr
    proc, doc = report("--verify", str(archive))
    assert proc.returncode == 0, proc.stderr
    check = doc["inputs"]["verification"]
    assert check["counts"] == {}
    (entry,) = check["not_checked"]
    assert "archive" in entry["why"] and "erascope verify" in entry["why"]


def test_key_without_verify_and_verify_on_a_cluster_are_refused(stdio_dir: Path, key_file: Path) -> None:
    proc = analyze("--key", str(key_file), str(stdio_dir))
    assert proc.returncode == 2 and "--key" in proc.stderr and "--verify" in proc.stderr
    proc = analyze("--verify", "--scheduler", "tcp://127.0.0.1:1", str(stdio_dir))
    assert proc.returncode == 2 and "--verify" in proc.stderr and "--scheduler" in proc.stderr


def test_a_hostile_file_name_is_escaped_in_every_format(stdio_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "caps"
    folder.mkdir()
    (path,) = capture_files(stdio_dir)
    hostile = folder / "x\x1b]0;owned\x07<script>alert(1)<.jsonl"
    edit_frame(path, hostile)
    for fmt in ("text", "markdown", "html", "json"):
        proc = analyze("--verify", "-f", fmt, str(folder))
        assert proc.returncode == 1, (fmt, proc.stderr)
        assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout, fmt
        if fmt == "html":
            assert "<script>alert(1)" not in proc.stdout
        if fmt == "markdown":  # the legend names it in a code span, as every report's legend does
            assert "&lt;script&gt;alert(1)&lt;.jsonl: tampered:" in proc.stdout
            assert proc.stdout.count("<script>alert(1)") == 1
