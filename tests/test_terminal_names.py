"""Messages on the terminal show file names' control characters instead of acting on them.

A capture directory's file names are written by whoever can write files there, and the recorders'
names carry the server key. `erascope analyze`'s errors, `erascope verify`'s text output and
`erascope watch`'s notes quote file names; each must write an ESC in a name as `\\x1b` (as the text
report does), never raw. Real `erascope` processes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from analyzer.report import visible

NAME = "cap-\x1b]0;pwned\x07\x1b[2J.jsonl"
UNKNOWN_FORMAT = b'{"type":"header","format":"erascope/9","seq":0}\n'


BIN = str(Path(sys.executable).parent / "erascope")


def erascope(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture
def hostile_dir(tmp_path: Path) -> Path:
    (tmp_path / NAME).write_bytes(UNKNOWN_FORMAT)
    return tmp_path


def assert_shown_not_acted_on(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text
    assert visible(NAME) in text  # the name is there, escaped


def test_analyze_error_names_the_file_visibly(hostile_dir: Path) -> None:
    done = erascope("analyze", hostile_dir, "-f", "text")
    assert done.returncode == 2
    assert_shown_not_acted_on(done.stderr)


def test_compact_error_names_the_file_visibly(hostile_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    done = erascope("compact", hostile_dir, "--out", tmp_path_factory.mktemp("arch") / "a")
    assert done.returncode == 2
    assert_shown_not_acted_on(done.stderr)


def test_verify_text_names_the_file_visibly(hostile_dir: Path) -> None:
    done = erascope("verify", hostile_dir)
    assert done.returncode == 2
    assert_shown_not_acted_on(done.stdout + done.stderr)


def test_watch_notes_name_the_file_visibly(hostile_dir: Path) -> None:
    proc = subprocess.Popen(
        [BIN, "watch", str(hostile_dir), "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The refused file is noted in the first round; a fixed sleep missed it on a loaded machine (the
    # process was still importing), so wait for the note, then let a few more rounds run.
    assert proc.stderr is not None
    err_lines: list[str] = []
    reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any("capture format 'erascope/9'" in line for line in err_lines) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    out = proc.stdout.read() if proc.stdout is not None else ""
    proc.wait(timeout=30)
    reader.join(timeout=30)
    err = "".join(err_lines)
    assert proc.returncode == 0
    assert "capture format 'erascope/9'" in err
    assert_shown_not_acted_on(out + err)
