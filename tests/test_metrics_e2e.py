"""Scraping a live recorder: a real `mitmdump -s addon/http_recorder.py` (and `erascope record http`)
with `--metrics`, real `mcp` SDK servers and clients; `/metrics` fetched over HTTP and read with
prometheus_client's own parser. The values must match the traffic sent, and the capture on disk.

And `record stdio`: the same counters in the `recorder-end` record closing a real tee's capture,
which the analyzer reads like any other capture.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from mcp import Client
from prometheus_client.parser import text_string_to_metric_families

from addon import format as fmt
from analyzer.pipeline import AnalyzeOptions, analyze
from analyzer.report import report_dict
from tests.peers.capture_tools import jsonrpc, only_capture, read_records
from tests.test_http_e2e import (
    BIN,
    META,
    MODERN_HEADERS,
    Proc,
    by_flow,
    record_http,
    session,
    start_mitmdump,
    start_server,
)
from tests.test_stdio_e2e import PEERS, call_add, through_tee

pytestmark = pytest.mark.e2e

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def settle(url: str, done: Callable[[Samples], bool], timeout: float = 30.0) -> Samples:
    """Scrape until `done` holds (the writer thread counts records just after the proxy passed them)."""
    deadline = time.monotonic() + timeout
    while True:
        got = scrape(url)
        if done(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def era(samples: Samples, server: str) -> str | None:
    """The one era set to 1 for `server` (None when the server has no series yet)."""
    on = [
        labels["era"]
        for (name, pairs), v in samples.items()
        if name == "erascope_server_era" and v == 1.0 and (labels := dict(pairs))["server"] == server
    ]
    assert len(on) <= 1, on
    return on[0] if on else None


def outcome(samples: Samples, server: str, name: str) -> float:
    return value(samples, "erascope_probe_outcomes_total", server=server, outcome=name) or 0.0


def post(url: str, body: dict[str, Any] | list[dict[str, Any]], headers: dict[str, str]) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=orjson.dumps(body), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def capture_totals(capdir: Path) -> tuple[int, int, int]:
    """Lines, bytes and `http.request` records of every capture part in `capdir`."""
    files = sorted(capdir.glob("*.jsonl"))
    data = [p.read_bytes() for p in files]
    lines = [orjson.loads(line) for d in data for line in d.splitlines()]
    return len(lines), sum(len(d) for d in data), sum(r["type"] == fmt.HTTP_REQUEST for r in lines)


def open_streams(capdir: Path) -> list[str]:
    """The methods of the requests whose event stream the capture on disk shows open (no `sse.end` yet)."""
    # a line the writer is still writing has no newline yet: left for the next look
    records = [orjson.loads(line) for p in sorted(capdir.glob("*.jsonl")) for line in p.read_bytes().split(b"\n")[:-1]]
    methods = {r["flow"]: r.get("method") for r in records if r["type"] == fmt.HTTP_REQUEST}
    ended = {r["flow"] for r in records if r["type"] == fmt.SSE_END}
    return [
        methods[r["flow"]]
        for r in records
        if r["type"] == fmt.HTTP_RESPONSE
        and r.get("streamed")
        and any(k.lower() == "content-type" and v.startswith("text/event-stream") for k, v in r["headers"])
        and r["flow"] not in ended
    ]


def _scraped_proxy(procs: list[Proc], env: dict[str, str], tmp_path: Path) -> tuple[Proc, Path, str, str, str]:
    """A real dual-era server behind `mitmdump` with the addon serving metrics: the proxy, its capture
    directory, the metrics URL, the URL clients reach the server at, and the server's key."""
    port = start_server(procs, env)
    capdir = tmp_path / "caps"
    proxy = start_mitmdump(procs, env, port, capdir, "--set", "erascope_metrics=127.0.0.1:0")
    url = proxy.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)
    via = f"http://127.0.0.1:{proxy.port}/mcp"  # type: ignore[attr-defined]
    return proxy, capdir, url, via, f"http://127.0.0.1:{port}/mcp"


def test_scrape_mitmdump_addon_through_a_rollout(procs: list[Proc], clean_env: dict[str, str], tmp_path: Path) -> None:
    proxy, capdir, url, via, key = _scraped_proxy(procs, clean_env, tmp_path)

    first = scrape(url)
    assert value(first, "erascope_flows_total") == 0 and era(first, key) is None

    # 1. a modern client probes: a DiscoverResult naming 2026-07-28
    got = asyncio.run(session(via, "auto", gate=tmp_path / "gate1"))
    assert got["version"] == "2026-07-28"
    s = settle(url, lambda s: outcome(s, key, "discover-result") >= 1)
    assert outcome(s, key, "discover-result") == 1 and era(s, key) == "modern"

    # 2. a legacy client on the same (dual-era) server: initialize is served; its GET stream stays open.
    # Each POST's answer comes in a stream of its own too, ended just after the client read the answer:
    # the gauge is read once the capture shows only the GET's stream open.
    def one_get(s: Samples) -> bool:
        return open_streams(capdir) == ["GET"] and value(s, "erascope_sse_streams_open") == 1

    async def legacy_session() -> Samples:
        async with Client(via, mode="legacy") as client:
            await client.call_tool("echo", {"text": "x"})
            return await anyio.to_thread.run_sync(lambda: settle(url, one_get))

    during = asyncio.run(legacy_session())
    assert value(during, "erascope_sse_streams_open") == 1
    s = settle(url, lambda s: value(s, "erascope_sse_streams_open") == 0 and era(s, key) == "legacy")
    assert value(s, "erascope_sse_streams_open") == 0  # the stream's end was seen
    assert era(s, key) == "legacy"  # the latest decisive answer: a served initialize
    assert outcome(s, key, "discover-result") == 1  # a legacy client sends no probe

    # 3. a probe for a version the server does not speak: -32022, a modern server on other versions
    bad = {"jsonrpc": "2.0", "id": 9, "method": "server/discover", "params": {"_meta": {**META}}}
    bad["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
    headers = {**MODERN_HEADERS, "mcp-method": "server/discover", "mcp-protocol-version": "2099-01-01"}
    status, body = post(via, bad, headers)
    assert status == 400 and orjson.loads(body)["error"]["code"] == -32022
    s = settle(url, lambda s: outcome(s, key, "unsupported-version") >= 1)
    assert outcome(s, key, "unsupported-version") == 1 and era(s, key) == "modern-other-version"

    # 4. the modern client again
    asyncio.run(session(via, "auto", gate=tmp_path / "gate2"))
    s = settle(url, lambda s: outcome(s, key, "discover-result") >= 2)
    assert outcome(s, key, "discover-result") == 2 and era(s, key) == "modern"

    # 5. the server goes away: the next request cannot reach it
    procs[0].stop(signal.SIGKILL)
    with contextlib.suppress(OSError):  # mitmdump's eager connect drops the client (no HTTP answer)
        post(via, bad, MODERN_HEADERS)
    s = settle(url, lambda s: (value(s, "erascope_upstream_errors_total", kind="connection-refused") or 0) >= 1)
    assert value(s, "erascope_upstream_errors_total", kind="connection-refused") == 1

    # The writer's counters are the capture on disk, record for record and byte for byte.
    def stable(s: Samples) -> bool:
        lines, size, _ = capture_totals(capdir)
        return value(s, "erascope_records_written_total") == lines and value(s, "erascope_bytes_written_total") == size

    s = settle(url, stable)
    lines, size, requests = capture_totals(capdir)
    assert value(s, "erascope_records_written_total") == lines
    assert value(s, "erascope_bytes_written_total") == size
    assert value(s, "erascope_flows_total") == requests == len(by_flow(read_records(capdir)))
    assert value(s, "erascope_records_lost_total") == 0 and value(s, "erascope_write_errors_total") == 0
    # only bounded label values: server keys, outcomes, eras, kinds
    servers = {dict(k[1]).get("server") for k in s if "server" in dict(k[1])}
    assert servers == {key}
    assert proxy.stop(signal.SIGINT) == 0


def test_a_probe_without_the_version_header_leaves_the_era_modern(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """The dual-era SDK server routes a POST on its version header alone: an enveloped probe without it
    lands on the legacy side and is refused there (400, -32600 "Missing session ID"). That says nothing
    of the server's era: the counters called it `legacy-answer` and turned a modern server `legacy`."""
    proxy, capdir, url, via, key = _scraped_proxy(procs, clean_env, tmp_path)

    asyncio.run(session(via, "auto", gate=tmp_path / "gate"))
    s = settle(url, lambda s: outcome(s, key, "discover-result") >= 1)
    assert era(s, key) == "modern"

    probe = {"jsonrpc": "2.0", "id": 7, "method": "server/discover", "params": {"_meta": META}}
    headers = {k: v for k, v in MODERN_HEADERS.items() if k != "mcp-protocol-version"}
    status, body = post(via, probe, headers)
    assert status == 400 and orjson.loads(body)["error"]["code"] == -32600  # the legacy side's refusal
    s = settle(url, lambda s: outcome(s, key, "malformed-probe") >= 1)
    assert outcome(s, key, "malformed-probe") == 1 and outcome(s, key, "legacy-answer") == 0
    assert era(s, key) == "modern"
    assert proxy.stop(signal.SIGINT) == 0

    # the analyzer reads the capture alike
    (server,) = report_dict(analyze([str(capdir)]))["servers"]
    live = {k[1]: v for k, v in s.items() if k[0] == "erascope_probe_outcomes_total"}
    assert server["probe_outcomes"] == {dict(labels)["outcome"]: int(n) for labels, n in live.items()}
    assert server["probe_outcomes"] == {"discover-result": 1, "malformed-probe": 1}


@pytest.mark.legacy_peer
def test_a_probe_in_a_batch_refused_whole_is_counted_as_analyze_counts_it(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path, legacy_py: Path
) -> None:
    """The real `mcp` 1.30.0 Streamable HTTP server refuses a POSTed batch with one 400 (-32602, its id
    `"server-error"`): the analyzer reads it as the answer of each member, the probe's a `legacy-answer`;
    the counters kept one key per flow and counted no probe of a batch."""
    port = start_server(procs, clean_env, legacy_py)
    key = f"http://127.0.0.1:{port}/mcp"
    capdir = tmp_path / "caps"
    proxy = start_mitmdump(procs, clean_env, port, capdir, "--set", "erascope_metrics=127.0.0.1:0")
    url = proxy.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)
    probe = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}
    init = {"jsonrpc": "2.0", "id": 2, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "_meta": META}}  # fmt: skip
    headers = {**MODERN_HEADERS, "mcp-method": "server/discover"}  # a well-formed probe's
    status, body = post(f"http://127.0.0.1:{proxy.port}/mcp", [probe, init], headers)  # type: ignore[attr-defined]
    assert status == 400 and orjson.loads(body)["error"]["code"] == -32602  # one refusal of the whole array
    s = settle(url, lambda s: outcome(s, key, "legacy-answer") >= 1)
    assert outcome(s, key, "legacy-answer") == 1
    assert era(s, key) == "legacy"
    assert proxy.stop(signal.SIGINT) == 0

    (server,) = report_dict(analyze([str(capdir)]))["servers"]
    live = {k[1]: v for k, v in s.items() if k[0] == "erascope_probe_outcomes_total"}
    assert server["probe_outcomes"] == {dict(labels)["outcome"]: int(n) for labels, n in live.items()}
    assert (server["probe_outcomes"], server["era"]) == ({"legacy-answer": 1}, "legacy")


class _SilentServer:
    """An upstream that takes every connection and request and never answers nor closes one: a hung
    server (`close` lets them go)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                conn, _ = self._listener.accept()
                self._held.append(conn)  # read by no one: the request sits in its buffer

    def close(self) -> None:
        self._listener.close()
        for conn in self._held:
            conn.close()


def test_a_scrape_counts_the_probe_a_silent_hung_server_never_answered(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """A server that never answers a probe and never closes the connection: no record comes after the
    request, and the counters, which a record decided, held the probe in no count however long the
    proxy was scraped; `analyze` calls it `no-answer`. A scrape after the timeout decides it."""
    upstream = _SilentServer()
    try:
        capdir = tmp_path / "caps"
        options = ("--set", "erascope_metrics=127.0.0.1:0", "--set", "erascope_probe_timeout=1")
        proxy = start_mitmdump(procs, clean_env, upstream.port, capdir, *options)
        url = proxy.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)
        key = f"http://127.0.0.1:{upstream.port}/mcp"
        probe = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}})
        headers = {**MODERN_HEADERS, "mcp-method": "server/discover", "content-length": str(len(probe))}
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        # a client that sends the probe and waits, its connection open, as the server is silent
        with socket.create_connection(("127.0.0.1", proxy.port)) as client:  # type: ignore[attr-defined]
            client.sendall(f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}\r\n".encode() + probe)
            s = settle(url, lambda s: outcome(s, key, "no-answer") >= 1)
            assert outcome(s, key, "no-answer") == 1
            assert era(s, key) == "unknown"
            assert proxy.stop(signal.SIGINT) == 0
    finally:
        upstream.close()

    (server,) = report_dict(analyze([str(capdir)], AnalyzeOptions(probe_timeout=1.0)))["servers"]
    live = {k[1]: v for k, v in s.items() if k[0] == "erascope_probe_outcomes_total"}
    assert server["probe_outcomes"] == {dict(labels)["outcome"]: int(n) for labels, n in live.items()}
    assert server["probe_outcomes"] == {"no-answer": 1}


def test_metrics_port_in_use_is_an_option_error(procs: list[Proc], clean_env: dict[str, str], tmp_path: Path) -> None:
    port = start_server(procs, clean_env)
    proxy = start_mitmdump(procs, clean_env, port, tmp_path / "caps", "--set", "erascope_metrics=127.0.0.1:0")
    url = proxy.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)
    taken = url.rsplit(":", 1)[1].split("/")[0]
    cli = Proc(
        [str(BIN / "erascope"), "record", "http", "--upstream", f"http://127.0.0.1:{port}/mcp", "--listen",
         "127.0.0.1:0", "--out", str(tmp_path / "caps2"), "--metrics", f"127.0.0.1:{taken}"],
        clean_env,
    )  # fmt: skip
    procs.append(cli)
    assert cli.popen.wait(60) == 2
    cli.wait_for(rf"cannot serve metrics on 127\.0\.0\.1:{taken}")


@pytest.mark.legacy_peer
def test_scrape_record_http_in_front_of_a_legacy_server(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path, legacy_py: Path
) -> None:
    port = start_server(procs, clean_env, legacy_py)
    upstream = f"http://127.0.0.1:{port}/mcp"
    cli, listen = record_http(procs, upstream, tmp_path / "caps", clean_env, "--metrics", "127.0.0.1:0")
    url = cli.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)
    got = asyncio.run(session(listen, "auto", gate=tmp_path / "gate"))
    assert got["version"] != "2026-07-28"  # the client fell back to initialize
    s = settle(url, lambda s: era(s, upstream) == "legacy" and outcome(s, upstream, "legacy-answer") >= 1)
    assert outcome(s, upstream, "legacy-answer") == 1  # 400 with -32600 "Missing session ID"
    assert era(s, upstream) == "legacy"
    assert sum(v for k, v in s.items() if k[0] == "erascope_probe_outcomes_total") == 1
    assert cli.stop(signal.SIGINT) == 0


# --- record stdio: the counters in the closing record ------------------------------------------------------


def test_stdio_closing_record_holds_the_counters_and_analyze_reads_it(
    tmp_path: Path, clean_env: dict[str, str], modern_py: Path
) -> None:
    out = tmp_path / "captures"
    got = anyio.run(call_add, through_tee([str(modern_py), str(PEERS / "mcp_stdio_server.py")], out, clean_env))
    assert got["protocol_version"] == "2026-07-28" and got["text"] == ["5"]
    (path,) = sorted(out.glob("*.jsonl"))
    lines = path.read_bytes().splitlines(keepends=True)
    records = only_capture(out)
    end = records[-2]  # the last record is the hash chain's `part-end`, written after it
    assert records[-1][fmt.F_TYPE] == fmt.PART_END
    assert end[fmt.F_TYPE] == fmt.LIFECYCLE and end[fmt.F_EVENT] == fmt.EV_RECORDER_END
    counters = end[fmt.F_COUNTERS]
    # as of just before the closing record: every line before it, byte for byte
    assert counters["records"] == len(lines) - 2
    assert counters["bytes"] == sum(len(line) for line in lines[:-2])
    assert counters["lost"] == 0 and counters["write_errors"] == 0
    assert counters["flows"] == 1 and counters["upstream_errors"] == {}
    server = records[0][fmt.F_SERVER]
    # a loaded machine can make the client give up on its probe and fall back before the answer
    # comes (then -32022 to `initialize` and a second probe; the first one's late answer is then
    # `no-answer`): count what the capture shows, as the analyzer counts it
    probes = [r for r in jsonrpc(records, fmt.C2S) if r.get("method") == "server/discover"]
    assert probes
    (analyzed,) = report_dict(analyze([str(out)]))["servers"]
    assert counters["servers"] == {server: {"era": "modern", "outcomes": analyzed["probe_outcomes"]}}
    assert analyzed["probe_outcomes"].get("discover-result") and sum(analyzed["probe_outcomes"].values()) == len(probes)
    assert counters["parts_removed"] == 0 and "sse_open" not in counters

    # The analyzer reads it as one more lifecycle record of the spawn: one more record and message
    # (and a later `last_seen`); verdicts, findings and their evidence are those without it.
    without = tmp_path / "without"
    without.mkdir()
    (without / path.name).write_bytes(b"".join(lines[:-2] + lines[-1:]))
    want = report_dict(analyze([str(without)]))
    have = orjson.loads(orjson.dumps(report_dict(analyze([str(out)]))).decode().replace(str(out), str(without)))
    assert have["inputs"]["records"] == want["inputs"]["records"] + 1
    assert have["totals"]["messages"] == want["totals"]["messages"] + 1
    assert have["servers"][0]["last_seen"] == end[fmt.F_TS]
    for report in (have, want):
        del report["inputs"]["records"], report["totals"]["messages"], report["servers"][0]["last_seen"]
    assert have == want
    assert want["servers"][0]["era"] in ("modern", "modern-only")  # as the client happened to probe


def test_stdio_closing_record_counts_a_failed_spawn(tmp_path: Path, clean_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [str(BIN / "erascope"), "record", "stdio", "--out", str(tmp_path), "--", str(tmp_path / "no-such-server")],
        input=b"", capture_output=True, env=clean_env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 127
    records = only_capture(tmp_path)
    assert records[-1][fmt.F_TYPE] == fmt.PART_END  # the hash chain's closing record comes after the counters
    assert records[-2][fmt.F_EVENT] == fmt.EV_RECORDER_END
    assert records[-2][fmt.F_COUNTERS]["upstream_errors"] == {"spawn-failed": 1}
    assert records[-2][fmt.F_COUNTERS]["flows"] == 0


def test_stdio_closing_record_counts_a_probe_the_server_never_answered(
    tmp_path: Path, clean_env: dict[str, str], modern_py: Path, legacy_py: Path
) -> None:
    """A server hung on the probe: the real `mcp` 2.3.0 client gives up after its 10 s and falls back
    to `initialize`, which a real `mcp` 1.30.0 server serves. The counters say `no-answer`, as the
    analyzer does (they told nothing before: no outcome at all for that probe)."""
    out = tmp_path / "captures"
    hung = [str(modern_py), str(PEERS / "swallow_discover.py"), str(legacy_py), str(PEERS / "legacy_stdio_server.py")]
    got = anyio.run(call_add, through_tee(hung, out, clean_env))
    assert got["text"] == ["5"] and got["protocol_version"] != "2026-07-28"
    records = only_capture(out)
    counters = records[-2][fmt.F_COUNTERS]
    (server,) = report_dict(analyze([str(out)]))["servers"]
    assert server["probe_outcomes"] == {"no-answer": 1}
    assert counters["servers"] == {records[0][fmt.F_SERVER]: {"era": "legacy", "outcomes": {"no-answer": 1}}}


@pytest.mark.parametrize(("timeout", "outcome"), [(["--probe-timeout", "1"], "no-answer"), ([], "connection-died")])
def test_stdio_closing_record_times_probes_as_told(
    tmp_path: Path, clean_env: dict[str, str], timeout: list[str], outcome: str
) -> None:
    """`--probe-timeout` times the live outcomes as `analyze --probe-timeout` times them: a server that
    dies 2 s after an unanswered probe is `connection-died` within the default 10 s, `no-answer`
    past 1 s."""
    probe = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}})
    proc = subprocess.Popen(
        [str(BIN / "erascope"), "record", "stdio", "--out", str(tmp_path), "--linger", "0", *timeout, "--",
         "sh", "-c", "sleep 2; exit 1"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env,
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(probe + b"\n")
    proc.stdin.flush()
    try:
        proc.wait(timeout=60)  # the client holds stdin open until the tee is done
    finally:
        proc.kill()
        proc.stdin.close()
    assert proc.stderr is not None
    assert proc.returncode == 1, proc.stderr.read()
    records = only_capture(tmp_path)
    counters = records[-2][fmt.F_COUNTERS]
    assert counters["servers"] == {records[0][fmt.F_SERVER]: {"era": "unknown", "outcomes": {outcome: 1}}}
    options = AnalyzeOptions(probe_timeout=float(timeout[1])) if timeout else AnalyzeOptions()
    (server,) = report_dict(analyze([str(tmp_path)], options))["servers"]
    assert server["probe_outcomes"] == {outcome: 1}
