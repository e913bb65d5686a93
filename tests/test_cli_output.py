"""`analyze --output` and `--write-baseline` never destroy a capture, and write their file whole or not at all.

Refusals are checked through real `erascope` processes; the half-written case needs a render that
fails mid-write, so it runs in process with the renderer replaced.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.report import REPORT_SCHEMA

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CAPTURE = next((ROOT / "captures" / "corpus" / "auto-legacy-stdio").glob("*.jsonl"))


@pytest.fixture
def caps(tmp_path: Path) -> Path:
    """A directory with one real capture from the corpus, as `caps/s.jsonl`."""
    (tmp_path / "caps").mkdir()
    shutil.copyfile(CAPTURE, tmp_path / "caps" / "s.jsonl")
    return tmp_path / "caps"


def erascope(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "erascope"), "analyze", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("inputs", "target"),
    [
        (["caps/s.jsonl"], "caps/s.jsonl"),  # the reproduction
        (["caps"], "caps/s.jsonl"),  # through a directory input
        (["caps/*.jsonl"], "./caps/../caps/s.jsonl"),  # through a glob, spelled differently
        (["caps/s.jsonl"], "link.jsonl"),  # a symlink to the input
    ],
    ids=["same-path", "via-directory", "via-glob", "via-symlink"],
)
@pytest.mark.parametrize("option", ["--output", "--write-baseline"])
def test_an_input_is_never_overwritten(caps: Path, tmp_path: Path, inputs: list[str], target: str, option: str) -> None:
    (tmp_path / "link.jsonl").symlink_to(caps / "s.jsonl")
    res = erascope(tmp_path, *inputs, "--format", "json", option, target)
    assert res.returncode == 2, res.stderr
    assert f"refusing to write {option} {Path(target)}: it is one of the inputs" in res.stderr
    assert (caps / "s.jsonl").read_bytes() == CAPTURE.read_bytes()
    assert res.stdout == ""


@pytest.mark.parametrize("option", ["--output", "--write-baseline"])
def test_any_capture_is_never_overwritten(caps: Path, tmp_path: Path, option: str) -> None:
    other = tmp_path / "other.jsonl"
    shutil.copyfile(CAPTURE, other)
    res = erascope(tmp_path, "caps", option, "other.jsonl")
    assert res.returncode == 2, res.stderr
    assert f"refusing to write {option} other.jsonl: it is an erascope capture" in res.stderr
    assert other.read_bytes() == CAPTURE.read_bytes()


def test_report_and_baseline_must_be_two_files(caps: Path, tmp_path: Path) -> None:
    res = erascope(tmp_path, "caps", "--output", "out.json", "--write-baseline", "./out.json")
    assert res.returncode == 2, res.stderr
    assert "--output and --write-baseline name the same file" in res.stderr
    assert not (tmp_path / "out.json").exists()


def test_output_replaces_the_old_report_whole_and_says_where(caps: Path, tmp_path: Path) -> None:
    old = tmp_path / "report.json"
    old.write_text("an old report\n")
    old.chmod(0o640)
    inode = old.stat().st_ino
    res = erascope(tmp_path, "caps", "-f", "json", "-o", "report.json")
    assert res.returncode == 0, res.stderr
    assert "erascope: wrote the report to report.json" in res.stderr
    assert orjson.loads(old.read_bytes())["schema"] == REPORT_SCHEMA
    assert old.stat().st_ino != inode, "a new file renamed over the old one, not the old one rewritten"
    assert old.stat().st_mode & 0o777 == 0o640, "the replaced report keeps its permissions"
    assert {p.name for p in tmp_path.iterdir()} == {"caps", "report.json"}, "no temporary file is left"


def test_baseline_is_written_by_rename_and_says_where(caps: Path, tmp_path: Path) -> None:
    res = erascope(tmp_path, "caps", "--write-baseline", "base.json")
    assert res.returncode == 0, res.stderr
    assert "erascope: wrote baseline base.json" in res.stderr
    inode = (tmp_path / "base.json").stat().st_ino
    res = erascope(tmp_path, "caps", "--write-baseline", "base.json")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "base.json").stat().st_ino != inode
    assert orjson.loads((tmp_path / "base.json").read_bytes())["format"] == "erascope-baseline/1"
    assert {p.name for p in tmp_path.iterdir()} == {"caps", "base.json"}


def test_output_to_a_device_writes_through_it(caps: Path, tmp_path: Path) -> None:
    res = erascope(tmp_path, "caps", "-f", "json", "-o", "/dev/stdout")
    assert res.returncode == 0, res.stderr
    assert orjson.loads(res.stdout)["schema"] == REPORT_SCHEMA
    assert Path("/dev/stdout").exists() and not Path("/dev/stdout").resolve().is_file()


def test_a_failed_write_leaves_the_old_report_whole(
    caps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import analyzer.report

    old = tmp_path / "report.md"
    old.write_text("the good report\n")
    # a report that cannot be encoded fails after its first bytes would have been written
    monkeypatch.setattr(analyzer.report, "render", lambda *a, **k: "# half a report\n" * 1000 + "\ud800")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["analyze", "caps", "-f", "markdown", "-o", "report.md"])
    assert result.exit_code != 0
    assert old.read_text() == "the good report\n"
    assert {p.name for p in tmp_path.iterdir()} == {"caps", "report.md"}, "no temporary file is left"


def test_nothing_is_written_into_an_input_archive(tmp_path: Path) -> None:
    from addon.errors import ErascopeError
    from analyzer.output import check_targets

    archive = tmp_path / "archive"
    (archive / "_sources").mkdir(parents=True)
    with pytest.raises(ErascopeError, match="it is inside the input archive"):
        check_targets([str(archive)], {"--output": archive / "day=2026-11-30" / "report.md"})
    check_targets([str(archive)], {"--output": tmp_path / "report.md"})  # beside it is fine


def test_a_write_failing_midway_leaves_the_old_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    from addon.errors import ErascopeError
    from analyzer.output import write_atomic

    old = tmp_path / "report.json"
    old.write_text("the good report\n")

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(ErascopeError, match=r"cannot write .*report\.json: No space left on device"):
        write_atomic(old, b"{}" * 100_000)
    assert old.read_text() == "the good report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"], "no temporary file is left"


def _compressed(path: Path, kind: str) -> Path:
    import gzip

    from analyzer.sources import zstd

    data = CAPTURE.read_bytes()
    target = path.with_name(path.name + (".gz" if kind == "gzip" else ".zst"))
    target.write_bytes(gzip.compress(data) if kind == "gzip" else zstd.compress(data))
    return target


def _refused_untouched(tmp_path: Path, given: str, file: Path, why: str) -> None:
    """`analyze GIVEN --output FILE` (run in `tmp_path`) is refused for `why`, and FILE stays as it was."""
    before = file.read_bytes()
    target = str(file.relative_to(tmp_path))
    res = erascope(tmp_path, given, "--output", target)
    assert res.returncode == 2, res.stderr
    assert f"refusing to write --output {target}: {why}" in res.stderr
    assert file.read_bytes() == before


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_a_compressed_capture_is_never_overwritten(caps: Path, tmp_path: Path, kind: str) -> None:
    _refused_untouched(tmp_path, "caps", _compressed(tmp_path / "other.jsonl", kind), "it is an erascope capture")


@pytest.mark.parametrize("kind", ["plain", "zstd"])
def test_an_input_given_as_a_file_url_is_never_overwritten(caps: Path, tmp_path: Path, kind: str) -> None:
    source = caps / "s.jsonl" if kind == "plain" else _compressed(caps / "s.jsonl", "zstd")
    if kind != "plain":
        (caps / "s.jsonl").unlink()
    _refused_untouched(tmp_path, source.as_uri(), source, "it is one of the inputs")


@pytest.mark.e2e
def test_nothing_is_written_into_an_archive_given_as_a_file_url(caps: Path, tmp_path: Path) -> None:
    archive = tmp_path / "arch"
    done = subprocess.run([str(BIN / "erascope"), "compact", str(caps), "--out", str(archive)], capture_output=True)
    assert done.returncode == 0, done.stderr
    (entry,) = (archive / "_sources").glob("*.json")
    _refused_untouched(tmp_path, archive.as_uri(), entry, "it is inside the input archive")


STDOUT_COMMANDS = [
    ["analyze", "caps"],
    ["analyze", "caps", "-f", "json"],
    ["verify", "caps"],
    ["rules", "--brief"],
    ["watch", "caps", "--fail-on", "info", "--interval", "0.2"],
]
"""Every command that writes to standard output."""


@pytest.mark.parametrize("args", STDOUT_COMMANDS)
def test_standard_output_on_a_full_disk_is_a_clear_error(caps: Path, tmp_path: Path, args: list[str]) -> None:
    """A report redirected to a file on a full disk (`> report.txt`) is an error the CLI names, exit
    2 as for `--output` there, not a traceback and the status that means "findings"."""
    with open("/dev/full", "w") as full:
        res = subprocess.run(
            [str(BIN / "erascope"), *args], cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert (res.returncode, res.stderr) == (
        2,
        "erascope: error: cannot write to standard output: No space left on device\n",
    )


@pytest.mark.parametrize("args", STDOUT_COMMANDS)
def test_standard_output_closed_is_a_clear_error(caps: Path, tmp_path: Path, args: list[str]) -> None:
    """Started with standard output closed (`erascope analyze DIR >&-`), the report cannot be written:
    an error the CLI names, exit 2, not a traceback (Python leaves `sys.stdout` None) nor a report
    silently dropped with exit 0."""
    res = subprocess.run(
        [str(BIN / "erascope"), *args], cwd=tmp_path, stdout=None, stderr=subprocess.PIPE, text=True, timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    assert (res.returncode, res.stderr) == (2, "erascope: error: cannot write to standard output: it is closed\n")


@pytest.mark.parametrize("args", [["analyze", "caps"], ["analyze", "caps", "-f", "json", "-q"], ["verify", "caps"]])
def test_standard_error_closed_still_reports(caps: Path, tmp_path: Path, args: list[str]) -> None:
    """With standard error closed (`2>&-` in a cron line), the report is written as with it open; the
    notes meant for stderr go nowhere. It was a traceback on the closed stream, exit 1, no report."""
    run = functools.partial(
        subprocess.run, [str(BIN / "erascope"), *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    shown, closed = run(), run(stderr=None, capture_output=False, stdout=subprocess.PIPE, preexec_fn=_close_fd_2)
    assert closed.returncode == shown.returncode
    assert closed.stdout == shown.stdout and shown.stdout


def _close_fd_2() -> None:
    os.close(2)


def test_output_dash_is_standard_output(caps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`-o -` is standard output, as for other tools; it wrote a file named `-`."""
    monkeypatch.chdir(tmp_path)
    shown = CliRunner().invoke(app, ["analyze", str(caps), "-f", "json", "-q", "-o", "-"])
    assert shown.exit_code == 0, shown.output
    assert not (tmp_path / "-").exists()
    assert orjson.loads(shown.stdout)["servers"]
