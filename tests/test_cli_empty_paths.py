"""An empty path is refused, never read as the current directory.

`Path("")` is `Path(".")`: `erascope analyze "$CAPTURES"` with the variable unset analyzed whatever
directory the job ran in (`/tmp`, a home directory: minutes of walking, and a report of the wrong
traffic with exit 0), `verify ""` verified it, and `record stdio --out ""` recorded into it. Each
command runs here as a real process in a directory holding a capture, which the old reading
would have taken as the input.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CAPTURE = next((ROOT / "captures" / "corpus" / "auto-legacy-stdio").glob("*.jsonl"))


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    """The directory the commands run in: a capture in it, as a job's working directory may hold."""
    shutil.copyfile(CAPTURE, tmp_path / "s.jsonl")
    return tmp_path


CASES = {
    "analyze": ["analyze", ""],
    "analyze-among-others": ["analyze", "s.jsonl", ""],
    "verify": ["verify", ""],
    "compact": ["compact", "", "--out", "arc"],
    "watch": ["watch", ""],
    "analyze --output": ["analyze", "s.jsonl", "--output", ""],
    "analyze --baseline": ["analyze", "s.jsonl", "--baseline", ""],
    "analyze --write-baseline": ["analyze", "s.jsonl", "--write-baseline", ""],
    "analyze --temp-dir": ["analyze", "s.jsonl", "--temp-dir", ""],
    "compact --out": ["compact", "s.jsonl", "--out", ""],
    "verify --key": ["verify", "s.jsonl", "--key", ""],
    "record stdio --out": ["record", "stdio", "--out", "", "--", sys.executable, "-c", "pass"],
}


@pytest.mark.parametrize("args", CASES.values(), ids=CASES.keys())
def test_an_empty_path_is_refused(cwd: Path, args: list[str]) -> None:
    before = sorted(p.name for p in cwd.iterdir())
    res = subprocess.run(
        [str(BIN / "erascope"), *args], cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "an empty path" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert res.stdout == ""
    assert sorted(p.name for p in cwd.iterdir()) == before  # nothing recorded, compacted or written there
