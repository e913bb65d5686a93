"""End to end: one real MCP exchange recorded three ways gives one verdict.

The real `mcp` 2.3.0 client (auto, then legacy mode) talks to the real 2.3.0 dual-era Streamable HTTP
server through two real proxies in a chain: `erascope record http` (an erascope capture), then a plain
`mitmdump -w FILE --set hardump=FILE` (a mitmproxy flow dump and mitmproxy's own HAR export, with no
erascope addon loaded). The three files are analyzed apart and together: eras, probe and initialize
outcomes and findings agree, and evidence names each file in its own notation.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from analyzer.pipeline import analyze
from analyzer.report import report_dict
from tests.goldens import reduce_report
from tests.test_http_e2e import BIN, Proc, session, start_server

pytestmark = pytest.mark.e2e


def _verdicts(report: dict[str, Any]) -> dict[str, Any]:
    reduced = reduce_report(report)
    servers = {s["server"]: (s["probe_outcomes"], s["init_outcomes"], s["versions"]) for s in report["servers"]}
    return {**reduced, "outcomes": servers, "totals": {k: report["totals"][k] for k in ("probe_outcomes", "inits")}}


def test_erascope_capture_mitmdump_dump_and_har_agree(
    procs: list[Proc],
    clean_env: dict[str, str],
    tmp_path: Path,
) -> None:
    port = start_server(procs, clean_env)
    server_url = f"http://127.0.0.1:{port}/mcp"
    dump, har, capdir = tmp_path / "dump.flows", tmp_path / "export.har", tmp_path / "caps"
    mitm = Proc(
        [str(BIN / "mitmdump"), "--mode", f"reverse:http://127.0.0.1:{port}", "--listen-host", "127.0.0.1",
         "--listen-port", "0", "--set", f"confdir={tmp_path / 'mitmproxy-conf'}", "-w", str(dump),
         "--set", f"hardump={har}"],
        clean_env,
        merge_stderr=True,
    )  # fmt: skip
    procs.append(mitm)
    mitm_port = int(mitm.wait_for(r"listening at 127\.0\.0\.1:(\d+)").group(1))
    recorder = Proc(
        [str(BIN / "erascope"), "record", "http", "--upstream", f"http://127.0.0.1:{mitm_port}/mcp",
         "--server", server_url, "--listen", "127.0.0.1:0", "--out", str(capdir)],
        clean_env,
    )  # fmt: skip
    procs.append(recorder)
    listen = recorder.wait_for(r"listening on (http://127\.0\.0\.1:\d+/mcp) -> ").group(1)

    for mode in ("auto", "legacy"):
        seen = asyncio.run(session(listen, mode))
        assert seen["echo"] == "hello" and seen["slow"] == "done", (mode, seen)
    assert recorder.stop(signal.SIGINT) == 0
    assert mitm.stop(signal.SIGINT) == 0  # the HAR is written when mitmdump stops
    (capture,) = sorted(capdir.glob("*.jsonl"))
    assert dump.stat().st_size and har.stat().st_size

    reports = {name: report_dict(analyze([str(path)])) for name, path in
               (("erascope", capture), ("flows", dump), ("har", har))}  # fmt: skip
    expected = _verdicts(reports["erascope"])
    assert list(expected["servers"]) == [server_url]
    assert expected["servers"][server_url]["era"] == "dual-era"
    assert expected["outcomes"][server_url][0], "the auto client probed"
    for name in ("flows", "har"):
        assert _verdicts(reports[name]) == expected, name
        assert reports[name]["inputs"]["malformed"] == [], name

    # evidence points into each file in its own notation
    both = report_dict(analyze([str(capture), str(dump), str(har)]))
    files = {e["file"] for s in both["servers"] for e in s["evidence"]}
    assert {str(capture), str(dump), str(har)} <= files
    for s in both["servers"]:
        for e in s["evidence"]:
            if e["file"] == str(har):
                assert e["at"] == f"{har}#entry={e['line']}"
            elif e["file"] == str(dump):
                assert e["at"] == f"{dump}#flow={e['line']}"
            else:
                assert e["at"] == f"{capture}:{e['line']}"
    assert sys.executable  # the venv's mitmdump and erascope ran (BIN)
