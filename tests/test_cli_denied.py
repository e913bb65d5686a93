"""What the CLI answers where the system says no: directories it may not list or search, an archive
directory it may not create, a terminal whose encoding is not UTF-8. Whole `erascope` processes;
as root, without the capabilities that let root past permission bits (`setpriv`), so the bits are
what they are for every other user."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ERASCOPE = Path(sys.executable).parent / "erascope"
SAMPLE = Path(__file__).resolve().parent.parent / "captures" / "corpus" / "auth-gate-http"

if os.geteuid() == 0 and shutil.which("setpriv") is None:
    pytest.skip("root without setpriv: permission bits do not apply", allow_module_level=True)
AS_USER = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []


def _erascope(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AS_USER, str(ERASCOPE), *map(str, args)], capture_output=True, text=True, timeout=300, env=env
    )


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A directory of captures with a subdirectory of them that cannot be listed."""
    root = tmp_path / "tree"
    shutil.copytree(SAMPLE, root / "readable")
    shutil.copytree(SAMPLE.parent / "legacy-sse-http", root / "locked")
    (root / "locked").chmod(0)
    yield root, root / "locked"
    (root / "locked").chmod(0o755)


def test_a_directory_that_cannot_be_listed_is_an_input_error_not_left_out(tree: tuple[Path, Path]) -> None:
    root, locked = tree
    done = _erascope("analyze", root, "-q", "--strict", "-f", "json")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"cannot read directory {locked}: Permission denied" in done.stdout + done.stderr
    checked = _erascope("verify", root)
    assert checked.returncode == 2 and "Traceback" not in checked.stderr, checked.stderr
    alone = _erascope("analyze", locked, "-q")
    assert alone.returncode == 2 and "Traceback" not in alone.stderr and "Permission denied" in alone.stderr


def test_a_directory_that_cannot_be_searched_is_a_clear_error(tree: tuple[Path, Path]) -> None:
    root, locked = tree
    locked.chmod(0o111)  # listed by nobody, entered by anybody
    done = _erascope("analyze", locked, "-q")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "Permission denied" in done.stderr
    locked.chmod(0)
    out = _erascope("analyze", root / "readable", "-q", "-o", locked / "report.txt")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"cannot write --output {locked / 'report.txt'}: Permission denied" in out.stderr
    archive = _erascope("compact", root / "readable", "--out", locked / "archive")
    assert archive.returncode == 2 and "Traceback" not in archive.stderr, archive.stderr
    assert "Permission denied" in archive.stderr


def test_a_terminal_that_is_not_utf8_gets_the_report_not_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONIOENCODING": "iso-8859-1"}
    done = _erascope("analyze", SAMPLE, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    # the same bytes --output writes: a UTF-8 document
    assert _erascope("analyze", SAMPLE, "-o", tmp_path / "r.txt", env=env).returncode == 0
    raw = subprocess.run([*AS_USER, str(ERASCOPE), "analyze", str(SAMPLE)], capture_output=True, env=env, timeout=300)
    assert raw.stdout == (tmp_path / "r.txt").read_bytes()


def test_an_archive_directory_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "ro").mkdir(mode=0o555)
    done = _erascope("compact", SAMPLE, "--out", tmp_path / "ro" / "archive")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"cannot create the archive directory {tmp_path / 'ro' / 'archive'}: Permission denied" in done.stderr


def test_a_full_disk_while_compacting_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """polars' Parquet writer reports the OS error as a ComputeError (a full disk, on a small tmpfs)."""
    import polars as pl

    from addon.errors import ErascopeError
    from analyzer.compact import compact

    def full(*args: object, **kwargs: object) -> None:
        raise pl.exceptions.ComputeError("failed to write parquet: No space left on device (os error 28)")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", full)
    with pytest.raises(ErascopeError, match=r"cannot write .*\.parquet: .*No space left on device"):
        compact([str(SAMPLE)], tmp_path / "archive")
    assert not [p for p in (tmp_path / "archive").rglob("*") if p.is_file()]
