"""The per-host redaction key: made once, whole, by whichever recorder starts first."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from addon.errors import ErascopeError
from addon.redact import Redactor, load_key

ROOT = Path(__file__).resolve().parent.parent
# Each process waits for one shared instant before asking for the key, so they all ask together, as
# recorders started by one `systemctl start` do on a fresh host.
_ASK_AT = "import sys, time; from addon.redact import load_key; time.sleep(max(0.0, float(sys.argv[1]) - time.time()));"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("ERASCOPE_REDACT_KEY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "erascope" / "redact.key"


def test_the_first_use_makes_a_key_and_later_uses_read_it(state: Path) -> None:
    key = load_key()
    assert len(key) == 64 and state.read_bytes() == key
    assert state.stat().st_mode & 0o777 == 0o600
    assert load_key() == key
    assert list(state.parent.iterdir()) == [state], "no temporary file left beside the key"


def test_recorders_starting_together_all_hash_with_the_one_key(tmp_path: Path) -> None:
    # A recorder that found the key file made but not yet written hashed every secret with an empty
    # key (anyone can recompute such a hash), and its hashes matched no other recorder's.
    for round_ in range(8):
        env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / f"state{round_}"), "PYTHONPATH": str(ROOT)}
        env.pop("ERASCOPE_REDACT_KEY", None)
        at = str(time.time() + 0.5)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _ASK_AT + "print(load_key().decode())", at],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(12)
        ]
        keys = [p.communicate(timeout=60)[0].strip() for p in procs]
        made = (tmp_path / f"state{round_}" / "erascope" / "redact.key").read_text()
        assert keys == [made] * 12 and len(made) == 64, f"round {round_}: {sorted(set(keys))}"


@pytest.mark.parametrize("content", [b"", b"\n  \n"], ids=["empty", "blank"])
def test_a_key_file_found_empty_is_refused_not_used(state: Path, content: bytes) -> None:
    state.parent.mkdir(parents=True)
    state.write_bytes(content)
    with pytest.raises(ErascopeError, match=r"redact\.key.*is empty.*ERASCOPE_REDACT_KEY"):
        Redactor()
    assert state.read_bytes() == content, "the file is the operator's to look at: left as found"


@pytest.mark.parametrize(
    "command",
    [
        ["record", "stdio", "--out", "{caps}", "--", sys.executable, "-c", "pass"],
        ["record", "http", "--out", "{caps}", "--upstream", "http://127.0.0.1:1/mcp", "--listen", "127.0.0.1:0"],
    ],
    ids=["stdio", "http"],
)
def test_recorders_refuse_to_start_on_an_empty_key_file(tmp_path: Path, command: list[str]) -> None:
    key = tmp_path / "state" / "erascope" / "redact.key"
    key.parent.mkdir(parents=True)
    key.touch()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    env.pop("ERASCOPE_REDACT_KEY", None)
    caps = tmp_path / "caps"
    args = [arg.format(caps=caps) for arg in command]
    res = subprocess.run(
        [str(Path(sys.executable).parent / "erascope"), *args], capture_output=True, text=True, env=env, timeout=60
    )
    assert res.returncode == 2, res.stderr
    assert f"the redaction key file {key} is empty" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not caps.exists() or not any(caps.iterdir())


@pytest.mark.parametrize(
    ("options", "made"),
    [({"erascope_redact": False}, False), ({"erascope_redact": False, "erascope_bodies": "metadata"}, True),
     ({}, True)],
    ids=["no-redact", "no-redact-metadata-bodies", "redact"],
)  # fmt: skip
def test_the_http_recorder_makes_a_key_only_when_it_hashes(
    state: Path, tmp_path: Path, options: dict[str, object], made: bool
) -> None:
    # `--no-redact` hashes nothing (unless `--bodies metadata` hashes payloads), yet made the host's key
    from mitmproxy.test import taddons

    from addon.http_recorder import HttpRecorder

    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), **options)
    assert state.exists() == made
