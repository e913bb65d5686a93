"""`--bodies metadata` keeps what tells eras apart: the same real traffic recorded with full bodies
and with metadata bodies reads the same (eras, probe and `initialize` outcomes, findings).

The peers are the deprecated HTTP+SSE transport's: a real `mcp` 1.30.0 server (`/sse` stream,
`/messages/` POSTs), its own client, and an `mcp` 2.3.0 client in auto mode whose probe POSTs to
the GET-only `/sse` (405, plain text), recorded by a real `erascope record http`.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from analyzer.pipeline import analyze
from analyzer.report import render_json
from tests.test_http_e2e import BIN, Proc, start_mitmdump

pytestmark = [pytest.mark.e2e, pytest.mark.legacy_peer]

PEERS = Path(__file__).resolve().parent.parent / "captures" / "peers"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sse_server(procs: list[Proc], env: dict[str, str], legacy_py: Path) -> int:
    port = _free_port()
    server = Proc([str(legacy_py), str(PEERS / "legacy_server.py"), "--transport", "sse", "--port", str(port)], env)
    procs.append(server)
    deadline = time.monotonic() + 60
    while True:  # it logs nothing when it is ready
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return port
        assert server.popen.poll() is None and time.monotonic() < deadline, "the SSE server did not start"
        time.sleep(0.1)


def _recorded(procs: list[Proc], env: dict[str, str], port: int, out: Path, bodies: str, legacy_py: Path) -> Path:
    """Both clients' sessions through `erascope record http --bodies BODIES`; the capture folder."""
    cli = Proc(
        [str(BIN / "erascope"), "record", "http", "--upstream", f"http://127.0.0.1:{port}/sse", "--listen",
         "127.0.0.1:0", "--server", "sse-server", "--bodies", bodies, "--out", str(out)],
        env,
    )  # fmt: skip
    procs.append(cli)
    url = cli.wait_for(r"listening on (http://127\.0\.0\.1:\d+/sse) -> ").group(1)
    _clients(procs, env, url, legacy_py)
    assert cli.stop(signal.SIGINT) == 0
    return out


def _clients(procs: list[Proc], env: dict[str, str], url: str, legacy_py: Path) -> None:
    for argv in (
        [str(legacy_py), str(PEERS / "legacy_client.py"), "--sse", "--url", url],
        [sys.executable, str(PEERS / "modern_client.py"), "--mode", "auto", "--calls", "1", "--url", url],
    ):
        done = subprocess.run(argv, env=env, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()


def _read(folder: Path) -> dict[str, Any]:
    report = orjson.loads(render_json(analyze([str(folder)])))
    (server,) = report["servers"]
    return {
        "era": server["era"],
        "probes": server["probe_outcomes"],
        "inits": server["init_outcomes"],
        "findings": sorted(f["rule"] for f in report["findings"]),
    }


def test_metadata_bodies_read_as_full_bodies_on_the_http_sse_transport(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path, legacy_py: Path
) -> None:
    port = _sse_server(procs, clean_env, legacy_py)
    full = _read(_recorded(procs, clean_env, port, tmp_path / "full", "full", legacy_py))
    # the legacy client's session is served; the auto client's probe is refused (405) and so is
    # its initialize: a legacy server, no finding
    assert full == {
        "era": "legacy",
        "probes": {"legacy-answer": 1},
        "inits": {"served": 1, "http-refused": 1},
        "findings": [],
    }
    assert _read(_recorded(procs, clean_env, port, tmp_path / "metadata", "metadata", legacy_py)) == full


def test_the_http_sse_transport_recorded_without_a_server_name_is_one_server(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path, legacy_py: Path
) -> None:
    # mitmdump with the addon and no server name keys flows by origin and path: the POSTs to the
    # `/messages/` endpoint that the `/sse` stream announced belong to the stream's server, whose
    # answers come on that stream
    port = _sse_server(procs, clean_env, legacy_py)
    proxy = start_mitmdump(procs, clean_env, port, tmp_path / "caps")
    _clients(procs, clean_env, f"http://127.0.0.1:{proxy.port}/sse", legacy_py)  # type: ignore[attr-defined]
    assert proxy.stop(signal.SIGINT) == 0
    report = orjson.loads(render_json(analyze([str(tmp_path / "caps")])))
    (server,) = report["servers"]
    assert server["server"] == f"http://127.0.0.1:{port}/sse"
    assert (server["transport"], server["era"], server["versions"]) == ("http+sse", "legacy", ["2025-11-25"])
    assert server["probe_outcomes"] == {"legacy-answer": 1}
    assert server["init_outcomes"] == {"served": 1, "http-refused": 1}
