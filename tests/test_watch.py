"""`erascope watch` as a subprocess, following a directory while capture lines are written into it.

The captures come from the bundled corpus, copied progressively in chunks cut at arbitrary bytes
(so watch meets torn last lines), or from a real recorder (`erascope record stdio` between real
MCP SDK peers). What watch reports is compared with `erascope analyze -f json` on the final files.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

import anyio
import pytest

from analyzer.pipeline import analyze
from analyzer.report import render
from analyzer.sources import strip_compression
from analyzer.watch import Watcher
from tests.test_load_hostile import REKEYED, rekeyed

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

CORPUS = Path(__file__).parent.parent / "captures" / "corpus"
ERASCOPE = Path(sys.executable).parent / "erascope"
GUARD = 90.0
"""Seconds a test waits for watch at most before it fails (a hang guard, not a timing assertion)."""


class Watch:
    """A running `erascope watch`, its stdout lines collected by a thread."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(ERASCOPE), "watch", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.errors: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_errors, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def _pump_errors(self) -> None:
        assert self.proc.stderr is not None
        self.errors.extend(self.proc.stderr)

    def events_until(self, done: Any) -> list[dict[str, Any]]:
        """JSON events read until `done(events)` holds (or the process ends, or the guard passes)."""
        deadline = time.monotonic() + GUARD
        while not done(self.events()) and time.monotonic() < deadline:
            try:
                self.seen.append(self.lines.get(timeout=0.5))
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
        return self.events()

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.seen]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        rc = self.proc.wait(timeout=30)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        time.sleep(0.2)  # the pump thread drains the pipe's end
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return rc


@pytest.fixture
def watches() -> Any:
    started: list[Watch] = []
    yield started
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()


def analyze_json(path: Path) -> dict[str, Any]:
    res = subprocess.run(
        [str(ERASCOPE), "analyze", "-f", "json", "-q", str(path)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def analyzed(*paths: Path) -> dict[str, Any]:
    """What `analyze -f json` prints for `paths`, in this process."""
    analysis = analyze([str(p) for p in paths])
    try:
        return json.loads(render(analysis, "json"))
    finally:
        analysis.close()


def expected(report: dict[str, Any]) -> tuple[set[Any], set[Any]]:
    """(findings as rule, server, evidence) and (era changes as server, era, deciding line, era
    before) of a report."""
    findings = {(f["rule"], f["server"], tuple(_loc(e) for e in f["evidence"])) for f in report["findings"]}
    eras = {
        (s["server"], t["era"], _loc(t["evidence"]), s["timeline"][i - 1]["era"] if i else None)
        for s in report["servers"]
        for i, t in enumerate(s["timeline"])
    }
    return findings, eras


def _loc(e: dict[str, Any]) -> tuple[str, int]:
    return strip_compression(e["file"]), e["line"]


def reported(events: list[dict[str, Any]]) -> tuple[set[Any], set[Any]]:
    """The same from watch's events: each finding's last report (`finding-update` replaces it), and
    the era changes reported and not withdrawn since."""
    last: dict[Any, Any] = {}
    eras: set[Any] = set()
    for e in events:
        era = (e["server"], e["era"], _loc(e["evidence"][0]), e["previous"]) if e["era"] is not None else None
        if e["event"] in ("finding", "finding-update"):
            if e.get("replaces"):  # the finding's first line moved: the report it replaces goes
                del last[(e["rule"], e["server"], e["client"], _loc(e["replaces"]))]
            last[(e["rule"], e["server"], e["client"], _loc(e["evidence"][0]))] = e
        elif e["event"] == "era":
            assert era not in eras  # reported once
            eras.add(era)
        elif era is not None:  # an era change withdrawn
            eras.remove(era)
        elif e["event"] == "withdrawn":  # the finding no longer holds: its reports go
            del last[(e["rule"], e["server"], e["client"], _loc(e["evidence"][0]))]
    findings = {(e["rule"], e["server"], tuple(_loc(x) for x in e["evidence"])) for e in last.values()}
    return findings, eras


def copy_in_chunks(sources: list[Path], target: Path, pause: float = 0.15, seed: int = 7) -> None:
    """Append `sources` to same-named files in `target`, interleaved, in chunks cut at random bytes."""
    rnd = random.Random(seed)
    data = {s: s.read_bytes() for s in sources}
    pos = dict.fromkeys(sources, 0)
    while any(pos[s] < len(data[s]) for s in sources):
        for s in sources:
            if pos[s] < len(data[s]):
                n = rnd.randint(200, 4000)
                with open(target / s.name, "ab") as out:
                    out.write(data[s][pos[s] : pos[s] + n])
                pos[s] += n
        time.sleep(pause)


@pytest.mark.parametrize("scenario", ["rollout-split-http", "probe-storm-stdio", "never-answers-stdio", "upgrade-http"])
def test_events_match_analyze(tmp_path: Path, watches: list[Watch], scenario: str) -> None:
    live = tmp_path / "live"
    live.mkdir()
    w = Watch(str(live), "--format", "json", "--interval", "0.2", "--probe-timeout", "2")
    watches.append(w)
    copy_in_chunks(sorted((CORPUS / scenario).glob("*.jsonl")), live)
    report = analyze_json_with_timeout(live, "2")
    want = expected(report)
    assert want[0] or want[1]  # the scenario proves something
    events = w.events_until(lambda ev: reported(ev) == want)
    assert w.stop() == 0
    assert reported(w.events()) == want
    assert all(e["time"] and e["server"] for e in events)
    assert w.errors == []  # every line cut mid-way was read whole later: no malformed line


def analyze_json_with_timeout(path: Path, timeout: str) -> dict[str, Any]:
    res = subprocess.run(
        [str(ERASCOPE), "analyze", "-f", "json", "-q", "--probe-timeout", timeout, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_fail_on_stops_on_rollout_split(tmp_path: Path, watches: list[Watch]) -> None:
    live = tmp_path / "live"
    live.mkdir()
    w = Watch(str(live), "--fail-on", "warning", "--format", "json", "--interval", "0.2")
    watches.append(w)
    copy_in_chunks(sorted((CORPUS / "rollout-split-http").glob("*.jsonl")), live)
    w.events_until(lambda ev: False)  # until it exits by itself
    assert w.stop() == 1
    last = w.events()[-1]
    assert (last["event"], last["rule"], last["severity"]) == ("finding", "rollout-split", "warning")
    assert all(e["evidence"][0]["at"].startswith(str(live)) for e in w.events())


def test_text_format_and_sigterm(tmp_path: Path, watches: list[Watch]) -> None:
    live = tmp_path / "live"
    live.mkdir()
    w = Watch(str(live), "--interval", "0.2")
    watches.append(w)
    copy_in_chunks(sorted((CORPUS / "rollout-split-http").glob("*.jsonl")), live, pause=0.05)
    deadline = time.monotonic() + GUARD
    while not any(" rollout-split " in line for line in w.seen) and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            w.seen.append(w.lines.get(timeout=0.5))
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(timeout=30) == 0
    split = next(line for line in w.seen if " rollout-split " in line)
    assert split.startswith("2026-11-30T01:31:02.406Z finding warning rollout-split server=rollout-split-http-fleet")


def test_rotated_part_compressed_is_not_read_twice(tmp_path: Path) -> None:
    """A part compressed after rotation (plain file gone, `.zst` in its place) is the same data."""
    live = tmp_path / "live"
    live.mkdir()
    source = next((CORPUS / "rollout-split-http").glob("*.jsonl"))
    data = source.read_bytes()
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    cut = data.index(b"\n", len(data) // 2) + 1
    plain = live / source.name
    plain.write_bytes(data[: cut + 10])  # a torn line at the end
    events = watcher.poll()
    assert watcher.bytes_read == cut
    # rotated and compressed: the rest arrives only in the .zst, the plain file goes
    (live / (source.name + ".zst")).write_bytes(zstd.compress(data))
    events += watcher.poll()  # the plain part is still there: the copy is not read
    assert watcher.bytes_read == cut
    plain.unlink()
    clock[0] += 30
    events += watcher.poll()
    assert watcher.bytes_read == len(data)
    report = analyze_json(live)
    want = expected(report)
    as_dicts = [e.as_json() for e in events]
    assert reported(as_dicts) == want
    assert len([e for e in as_dicts if e["event"] == "finding"]) == len(report["findings"])


def test_torn_last_line_is_read_when_complete(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    source = next((CORPUS / "never-answers-stdio").glob("*.jsonl"))
    data = source.read_bytes()
    watcher = Watcher([str(live)])
    middle = data.index(b"\n", 300) + 20  # 20 bytes into a line
    (live / source.name).write_bytes(data[:middle])
    watcher.poll()
    assert watcher.bytes_read == data.rindex(b"\n", 0, middle) + 1
    with open(live / source.name, "ab") as f:
        f.write(data[middle:])
    watcher.poll()
    assert watcher.bytes_read == len(data)
    assert watcher.records == analyze_json(live)["inputs"]["records"]
    assert watcher.notes == []


def test_malformed_line_is_named(tmp_path: Path, watches: list[Watch]) -> None:
    live = tmp_path / "live"
    live.mkdir()
    source = next((CORPUS / "never-answers-stdio").glob("*.jsonl"))
    data = source.read_bytes()
    lines = data.count(b"\n")
    w = Watch(str(live), "--interval", "0.2")
    watches.append(w)
    (live / source.name).write_bytes(data + b'{"type": "frame", "dir": \n')
    deadline = time.monotonic() + GUARD
    while not w.errors and time.monotonic() < deadline:
        time.sleep(0.2)
    assert w.stop() == 0
    assert w.errors[0].startswith(f"erascope: {live / source.name}:{lines + 1}: ")


PEERS = Path(__file__).parent / "peers"


@pytest.mark.e2e
@pytest.mark.parametrize("retention", [[], ["--rotate-size", "2k", "--compress"]], ids=["plain", "compressed"])
def test_real_recorder_while_watching(
    tmp_path: Path, clean_env: dict[str, str], modern_py: Path, watches: list[Watch], retention: list[str]
) -> None:
    """With `--compress`, each closed part becomes `.jsonl.zst` (the plain file removed) while watch
    follows: the same lines, never read twice; a line printed names its file, or its copy since."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    out = tmp_path / "captures"
    out.mkdir()
    w = Watch(str(out), "--format", "json", "--interval", "0.2")
    watches.append(w)

    async def session() -> None:
        params = StdioServerParameters(
            command=str(ERASCOPE),
            args=[
                *("record", "stdio", "--out", str(out), *retention),
                *("--", str(modern_py), str(PEERS / "mcp_stdio_server.py")),
            ],
            env=clean_env,
        )
        with anyio.fail_after(60):
            async with Client(params, mode="auto") as client:
                await client.call_tool("add", {"a": 2, "b": 3})

    anyio.run(session)
    anyio.run(session)
    want = expected(analyze_json(out))
    assert want[1]  # the server's era
    w.events_until(lambda ev: reported(ev) == want)
    assert w.stop() == 0
    assert reported(w.events()) == want
    if retention:
        assert any(p.name.endswith(".jsonl.zst") for p in out.iterdir())  # parts were compressed meanwhile
    for e in w.events():
        assert all(any(os.path.exists(x["file"] + z) for z in ("", ".zst")) for x in e["evidence"]), e
    assert w.errors == []


def replay(sources: list[Path], live: Path, watcher: Watcher, clock: list[float], seed: int) -> list[Any]:
    """Append `sources` to same-named files in `live`, interleaved in pieces cut at random bytes, a
    round of `watcher` each (a fake `clock`, no waiting); then idle past the probe timeout, so that
    unanswered probes are decided. Returns the events of every round."""
    data = {s: s.read_bytes() for s in sources}
    pos = dict.fromkeys(sources, 0)
    rnd = random.Random(seed)
    events: list[Any] = []
    while any(pos[s] < len(data[s]) for s in sources):
        for s in sources:
            n = rnd.randint(300, 6000)
            with open(live / s.name, "ab") as out:
                out.write(data[s][pos[s] : pos[s] + n])
            pos[s] += n
        clock[0] += 0.1
        events += watcher.poll()
    clock[0] += 30
    events += watcher.poll()
    return events


@pytest.mark.parametrize("scenario", sorted(p.name for p in CORPUS.iterdir() if p.is_dir()))
def test_every_corpus_scenario_replayed_in_pieces(tmp_path: Path, scenario: str) -> None:
    """In process (a fake clock, no waiting): every scenario, its files interleaved in chunks cut at
    random bytes, so each part is read in more pieces than `MERGE_PIECES` and merged."""
    live = tmp_path / "live"
    live.mkdir()
    sources = sorted((CORPUS / scenario).glob("*.jsonl"))
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = replay(sources, live, watcher, clock, seed=3)
    report = analyzed(live)
    assert reported([e.as_json() for e in events]) == expected(report)
    assert watcher.notes == []


def test_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    res = subprocess.run([str(ERASCOPE), "watch", str(tmp_path / "nope")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stderr == f"erascope: error: no such file or directory: {tmp_path / 'nope'}\n"


def test_line_longer_than_one_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line longer than what one round reads of a file is still read whole, not waited on forever."""
    monkeypatch.setattr("analyzer.watch.READ_LIMIT", 100)
    live = tmp_path / "live"
    live.mkdir()
    source = next((CORPUS / "never-answers-stdio").glob("*.jsonl"))
    data = source.read_bytes()
    (live / source.name).write_bytes(data)
    watcher = Watcher([str(live)])
    for _ in range(len(data)):
        before = watcher.bytes_read
        watcher.poll()
        if watcher.bytes_read == before:
            break
    assert watcher.bytes_read == len(data)


def test_hostile_lines_are_noted_and_the_rest_is_analyzed(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    source = next((CORPUS / "rollout-split-http").glob("*.jsonl"))
    lines = source.read_bytes().splitlines(keepends=True)
    hostile = [b"\x00\xff\xfe not utf-8\n", b"{\n", b"[1, 2]\n", b'{"type": 5, "ts": "x"}\n', b"\n"]
    mixed = lines[:4] + hostile + lines[4:]
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = []
    with open(live / source.name, "ab") as out:
        for n in range(0, len(mixed), 7):
            out.write(b"".join(mixed[n : n + 7]))
            out.flush()
            clock[0] += 0.1
            events += watcher.poll()
    clock[0] += 30
    events += watcher.poll()
    report = analyzed(live)
    assert reported([e.as_json() for e in events]) == expected(report)
    noted = sorted(int(note.split(":")[1]) for note in watcher.notes)
    assert noted == [b["line"] for b in report["inputs"]["malformed"]] == list(range(5, 10))


def test_unknown_format_is_noted_once(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    header = {"type": "header", "format": "erascope/9.0", "transport": "stdio", "server": "x"}
    (live / "future.jsonl").write_bytes(json.dumps(header).encode() + b"\n")
    watcher = Watcher([str(live)])
    watcher.poll()
    assert len(watcher.notes) == 1 and "erascope/9.0" in watcher.notes[0]
    watcher.notes.clear()
    watcher.poll()
    assert watcher.notes == []


def test_text_events_show_control_characters_instead_of_acting_on_them() -> None:
    """Server keys, messages and file names come from the traffic: a text line never retitles the
    terminal or moves the cursor, as in the text report (`analyzer.report.visible`)."""
    from analyzer.findings import Evidence
    from analyzer.watch import WatchEvent

    hostile = "srv\x1b]0;pwn\x07\x1b[2J\u202e"
    events = [
        WatchEvent("era", hostile, 1.0, (Evidence(f"{hostile}.jsonl", 3),), era="legacy"),
        WatchEvent(
            "finding", hostile, 1.0, (Evidence("a.jsonl", 3),), rule="probe-storm", severity="warning",
            message=f"probes {hostile}",
        ),
    ]  # fmt: skip
    for event in events:
        line = event.as_text()
        assert not any(c in line for c in "\x1b\x07\u202e"), repr(line)
        assert "srv\\x1b]0;pwn\\x07" in line


def with_backlog(tmp_path: Path, size: str) -> tuple[Path, Path]:
    """A directory `live` holding a generated backlog of `size`, and `more`: another generation of the
    same server keys (other connections), to append to it. Returns (live, more)."""
    from bench.generate import main as generate

    backlog, more = tmp_path / "backlog", tmp_path / "more"
    for out, seed in ((backlog, "1"), (more, "2")):
        assert generate(["--size", size, "--out", str(out), "--seed", seed]) == 0
    live = tmp_path / "live"
    live.mkdir()
    for f in backlog.glob("*.jsonl"):
        (live / f.name).write_bytes(f.read_bytes())
    return live, more


def test_findings_whose_evidence_spans_a_long_history(tmp_path: Path) -> None:
    """Traffic appended to a directory that already holds a long history of the same server keys (the
    load `bench.bench_watch` measures): findings whose evidence lies far back in the backlog and grows
    with the new lines, and era changes decided after it, are what `analyze` reports at the end."""
    live, more = with_backlog(tmp_path, "400k")
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = watcher.poll()
    backlog_events = len(events)
    # the HTTP proxy's capture of the other generation (the same server keys, other connections),
    # a day later: live traffic comes after the history (an earlier time read later can move a
    # timeline's first entry back, which a live report cannot take back)
    bulk = b"".join(_later(line, 86_400) for line in max(more.glob("*_proxy_*.jsonl")).read_bytes().splitlines())
    rnd = random.Random(5)
    cuts = sorted(rnd.sample(range(1, len(bulk)), 5))
    for start, end in zip([0, *cuts], [*cuts, len(bulk)], strict=True):
        with open(live / "growing.000.jsonl", "ab") as out:
            out.write(bulk[start:end])
        clock[0] += 1
        events += watcher.poll()
    clock[0] += 30
    events += watcher.poll()
    report = analyzed(live)
    as_dicts = [e.as_json() for e in events]
    assert reported(as_dicts) == expected(report)
    # the history mattered: an era change decided by the new lines on a server with a long history
    # (the era before it is the backlog's), next to the backlog's findings
    later = [e for e in events[backlog_events:] if e.kind == "era"]
    assert any(e.previous is not None for e in later)
    assert any(e.kind == "finding" for e in events[:backlog_events])


def _later(line: bytes, seconds: float) -> bytes:
    """A capture line with its time moved `seconds` later (a malformed line as it is)."""
    try:
        record = json.loads(line)
    except ValueError:
        return line + b"\n"
    if isinstance(record, dict) and isinstance(record.get("ts"), float):
        record["ts"] += seconds
        return json.dumps(record).encode() + b"\n"
    return line + b"\n"


def test_two_clients_findings_with_one_first_line_are_two_findings(tmp_path: Path) -> None:
    """Two clients' `stale-era` findings start at the same line (the other client's probe that saw
    the era change): each is reported once as a `finding` with its client, and a round that changes
    neither reports nothing (before, they took turns replacing each other as `finding-update`s)."""
    from analyzer.findings import Evidence, Finding, Severity

    change = Evidence("a.jsonl", 3, "another client saw legacy")
    findings = [
        Finding("stale-era", Severity.WARNING, "s", "m", (change, Evidence("a.jsonl", n)), client=c, ts=1.0)
        for n, c in ((8, "one"), (9, "two"))
    ]
    watcher = Watcher([str(tmp_path)])
    first = watcher._new_events(findings, [], {"s"}, set())
    assert [(e.kind, e.client) for e in first] == [("finding", "one"), ("finding", "two")]
    assert [e.as_json()["client"] for e in first] == ["one", "two"]
    assert watcher._new_events(findings, [], {"s"}, set()) == []


def watched_line_by_line(lines: list[bytes], live: Path, name: str, idle: float) -> list[dict[str, Any]]:
    """The events of a watcher of `live` (a fake clock) while `lines` are appended to `live/name`
    one at a time, a round each, then after `idle` seconds without new lines."""
    return [e for events in watched_rounds(lines, live, name, idle) for e in events]


def watched_rounds(lines: list[bytes], live: Path, name: str, idle: float) -> list[list[dict[str, Any]]]:
    """`watched_line_by_line` round by round: the events of the round after each line (the first
    after `lines[0]`), then those of the round after `idle` seconds without new lines."""
    live.mkdir()
    clock = [2_000_000_000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    rounds = []
    with open(live / name, "ab") as out:
        for line in lines:
            out.write(line)
            out.flush()
            clock[0] += 0.1
            rounds.append([e.as_json() for e in watcher.poll()])
    clock[0] += idle
    return [*rounds, [e.as_json() for e in watcher.poll()]]


def default_keyed(source: Path, target: Path) -> None:
    """`source` with every flow's records keyed as the HTTP recorder keys them without --server:
    by origin + path of the flow's request."""
    from urllib.parse import urlsplit

    records = [json.loads(line) for line in source.read_bytes().splitlines()]
    keys = {}
    for r in records:
        if r["type"] == "http.request":
            url = urlsplit(r["url"])
            keys[r["flow"]] = f"{url.scheme}://{url.netloc}{url.path}"
    for r in records:
        r["server"] = keys.get(r.get("flow"), r["server"])
    target.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))


def test_a_legacy_sse_server_under_its_default_keys(tmp_path: Path) -> None:
    """Without --server, the POSTs of the HTTP+SSE transport (`/messages/`) and the stream that
    answers them (`/sse`) are two server keys that share a session. A round analyzed only the keys
    with new lines, so the initialize POSTed stayed unanswered (era `broken`) once its answer came
    on the stream; analyze reads it as served (`legacy`)."""
    source = next((CORPUS / "legacy-sse-http").glob("*.jsonl"))
    keyed = tmp_path / "keyed" / source.name
    keyed.parent.mkdir()
    default_keyed(source, keyed)
    live = tmp_path / "live"
    events = watched_line_by_line(keyed.read_bytes().splitlines(keepends=True), live, source.name, idle=60)
    report = analyzed(live)
    assert len(report["servers"]) == 2
    assert reported(events) == expected(report)


@pytest.mark.parametrize("case", sorted(REKEYED))
def test_a_record_keyed_apart_from_its_connection(tmp_path: Path, case: str) -> None:
    """A record keyed apart from its connection or flow (an edited capture): a round analyzed the
    key with new lines alone, and analyze paired that record with the other key's request (a probe
    `no-answer` in watch, answered in analyze). Both read it now as the other key's alone."""
    scenario, pick = REKEYED[case]
    source = rekeyed(scenario, tmp_path / "keyed", pick())
    live = tmp_path / "live"
    events = watched_line_by_line(source.read_bytes().splitlines(keepends=True), live, source.name, idle=3600)
    assert reported(events) == expected(analyzed(live))


def test_a_finding_whose_first_line_moves_earlier_is_one_finding(tmp_path: Path) -> None:
    """An answer written before its request (an edited capture) joins a finding once its request is
    read: the finding's first evidence line moves earlier. Watch reported it as a second finding
    beside the first (analyze has one); it is the same finding's update, naming the report it replaces."""
    source = next((CORPUS / "rollout-per-request-http").glob("*.jsonl"))
    lines = source.read_bytes().splitlines(keepends=True)
    moved_up = [lines[0], lines[-1], *lines[1:-1]]  # the last answer before its request
    live = tmp_path / "live"
    events = watched_line_by_line(moved_up, live, source.name, idle=3600)
    splits = [e for e in events if e["rule"] == "rollout-split"]
    assert [e["event"] for e in splits].count("finding") == 1
    moved = [e for e in splits if e["replaces"]]
    assert moved and moved[0]["evidence"][0]["line"] == 2 and moved[0]["replaces"]["line"] > 2
    assert reported(events) == expected(analyzed(live))


def test_a_fifo_in_the_directory_is_noted_not_opened(tmp_path: Path) -> None:
    """A FIFO named like a capture would block watch in open() forever, deaf to SIGTERM, its findings
    on disk never reported: it is noted, as `analyze` notes it, and the rest is read."""
    live = tmp_path / "live"
    live.mkdir()
    for source in (CORPUS / "rollout-split-http").glob("*.jsonl"):
        (live / source.name).write_bytes(source.read_bytes())
    os.mkfifo(live / "zz.jsonl")
    res = subprocess.run(
        [str(ERASCOPE), "watch", str(live), "--fail-on", "warning", "--interval", "0.2"],
        capture_output=True,
        text=True,
        timeout=GUARD,
    )
    assert res.returncode == 1  # the rollout-split on disk stopped the rollout
    assert " rollout-split " in res.stdout
    assert res.stderr == f"erascope: {live / 'zz.jsonl'}: not a regular file (a FIFO)\n"


def test_a_link_that_leads_to_itself_is_noted(tmp_path: Path) -> None:
    """`loop.jsonl -> loop.jsonl` can never be read: `analyze` names it; watch took its ELOOP for a
    file gone since it was listed, every round, and never said a word."""
    live = tmp_path / "live"
    live.mkdir()
    for source in (CORPUS / "rollout-split-http").glob("*.jsonl"):
        (live / source.name).write_bytes(source.read_bytes())
    (live / "zz.jsonl").symlink_to("zz.jsonl")
    res = subprocess.run(
        [str(ERASCOPE), "watch", str(live), "--fail-on", "warning", "--interval", "0.2"],
        capture_output=True,
        text=True,
        timeout=GUARD,
    )
    assert res.returncode == 1 and " rollout-split " in res.stdout  # the rest is read
    assert res.stderr == f"erascope: {live / 'zz.jsonl'}: cannot read: Too many levels of symbolic links\n"


def _one_capture(tmp_path: Path, scenario: str) -> tuple[Path, Path]:
    """A folder to watch holding the corpus's `scenario` capture as `capture.jsonl`; (folder, file)."""
    live = tmp_path / "live"
    live.mkdir()
    target = live / "capture.jsonl"
    target.write_bytes(_corpus_capture(scenario))
    return live, target


def _corpus_capture(scenario: str) -> bytes:
    return next((CORPUS / scenario).glob("*.jsonl")).read_bytes()


def _replace(target: Path, new: bytes, how: str) -> None:
    """Another capture under `target`'s name: moved over it (`rename`) or written into it (`rewrite`)."""
    if how == "rename":
        (target.parent / ".new").write_bytes(new)
        os.replace(target.parent / ".new", target)
    else:
        with open(target, "wb") as f:  # truncated, then written: the same inode
            f.write(new)


@pytest.mark.parametrize("how", ["rename", "rewrite"])
def test_a_file_replaced_under_its_name_is_read_from_its_start(
    tmp_path: Path, watches: list[Watch], how: str
) -> None:
    """A capture replaced by another under the same name (`mv new capture.jsonl`, or `cat new >
    capture.jsonl`) is a new file: read from byte 0, not from the old file's offset (mid-line: a bogus
    malformed line, a finding `analyze` does not give, the real one missed)."""
    live, target = _one_capture(tmp_path, "auto-modern-stdio")
    w = Watch(str(live), "--format", "json", "--interval", "0.2", "--fail-on", "warning")
    watches.append(w)
    w.events_until(lambda ev: any(e["event"] == "era" for e in ev))
    _replace(target, _corpus_capture("rollout-split-http"), how)
    w.events_until(lambda ev: False)  # until --fail-on ends it
    assert w.stop() == 1
    findings = [e for e in w.events() if e["era"] is None]
    assert reported(findings)[0] == expected(analyze_json(live))[0]  # --fail-on ends it before its eras
    assert [e["rule"] for e in findings] == ["rollout-split"]
    assert w.errors == []


def test_a_file_rewritten_shorter_is_read_again(tmp_path: Path) -> None:
    """A file rewritten shorter than what was read of it is read from its start (not left unread
    until it grows past the old offset), and the old content's findings are no longer its results
    (withdrawn, once that is said)."""
    live, target = _one_capture(tmp_path, "rollout-split-http")
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = [e.as_json() for e in watcher.poll()]
    assert any(e["rule"] == "rollout-split" for e in events)
    _replace(target, _corpus_capture("auto-modern-stdio"), "rewrite")
    clock[0] += 30
    later = [e.as_json() for e in watcher.poll()]
    report = analyzed(live)
    assert reported(events + later) == expected(report)
    verdicts, findings = watcher.results()
    assert ([v.server for v in verdicts], findings) == (["auto-modern-stdio-server"], [])


def test_logrotate_rename_and_create_is_followed(tmp_path: Path) -> None:
    """logrotate's rename + `create`: the part is renamed to a name still listed (`extension .jsonl`,
    `dateext`), an empty file is created under its old name, and the recorder's descriptor goes on
    appending to the renamed file. Watch follows it there, and names its findings there as `analyze`
    does afterwards."""
    live = tmp_path / "live"
    live.mkdir()
    source = next((CORPUS / "rollout-split-http").glob("*.jsonl"))
    lines = source.read_bytes().splitlines(keepends=True)
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    plain = live / source.name
    plain.write_bytes(b"".join(lines[:2]))
    events = watcher.poll()
    rotated = live / "rotated-20261203.jsonl"
    plain.rename(rotated)
    plain.write_bytes(b"")
    with open(rotated, "ab") as f:
        f.write(b"".join(lines[2:]))
    clock[0] += 30
    events += watcher.poll()
    clock[0] += 30
    events += watcher.poll()
    report = analyzed(live)
    assert report["findings"]  # the split is there to be found
    assert reported([e.as_json() for e in events]) == expected(report)


def test_a_glob_is_watched(tmp_path: Path) -> None:
    """`watch 'dir/*.jsonl'`, as `analyze` takes it (and as `--help` says): the files it matches are read."""
    live = tmp_path / "live"
    live.mkdir()
    for source in (CORPUS / "rollout-split-http").glob("*.jsonl"):
        (live / source.name).write_bytes(source.read_bytes())
    res = subprocess.run(
        [str(ERASCOPE), "watch", str(live / "*.jsonl"), "--fail-on", "warning", "--interval", "0.2"],
        capture_output=True,
        text=True,
        timeout=GUARD,
    )
    assert (res.returncode, res.stderr) == (1, "")
    assert " rollout-split " in res.stdout



@pytest.mark.parametrize("beside", ["a glob", "a directory"])
def test_a_glob_matching_nothing_yet_leaves_the_other_paths_read(tmp_path: Path, beside: str) -> None:
    """`watch 'a/*.jsonl' 'b/*.jsonl'` before b's recorders started: a's files are read in every
    round, and b's once they come (one path matching nothing made the whole list match nothing)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    sources = sorted((CORPUS / "rollout-split-http").glob("*.jsonl"))
    for source in sources:
        (a / source.name).write_bytes(source.read_bytes())
    clock = [1000.0]
    first = str(a / "*.jsonl") if beside == "a glob" else str(a)
    watcher = Watcher([first, str(b / "*.jsonl")], clock=lambda: clock[0])
    events = [e.as_json() for e in watcher.poll()]
    assert watcher.bytes_read == sum(s.stat().st_size for s in sources)
    later = next((CORPUS / "probe-storm-http").glob("*.jsonl"))
    (b / later.name).write_bytes(later.read_bytes())
    clock[0] += 30
    events += [e.as_json() for e in watcher.poll()]
    assert watcher.bytes_read == sum(s.stat().st_size for s in sources) + later.stat().st_size
    assert reported(events) == expected(analyzed(a, b))


SIGINT_ON_IMPORT = """
import importlib.abc, os, signal, sys

class _Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "analyzer.watch":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, _Interrupt())
"""


def test_sigint_while_starting_exits_0(tmp_path: Path) -> None:
    """Ctrl-C while watch imports its analysis (a second or so): exit 0 as on any SIGINT, not 1 (the
    status --fail-on gives for a finding) with a traceback. The signal comes when `analyzer.watch`
    is imported (a `sitecustomize` on PYTHONPATH sends it), so no timing is involved."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SIGINT_ON_IMPORT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), *filter(None, [os.environ.get("PYTHONPATH")])])}
    res = subprocess.run(
        [str(ERASCOPE), "watch", str(CORPUS / "rollout-split-http"), "--fail-on", "warning", "--interval", "0.2"],
        capture_output=True,
        text=True,
        timeout=GUARD,
        env=env,
    )
    assert (res.returncode, res.stderr) == (0, "")


def storm_then_work(source: Path) -> tuple[bytes, bytes]:
    """A capture whose first lines are a probe-storm (5 probes against 10 real requests, 0.5 a request)
    and whose whole is not (against 30, 0.17): the client goes on working on one more connection."""
    lines = source.read_bytes().split(b"\n")[:-1]
    head, body = lines[0], lines[1:31]  # the header, 5 connections of a probe, tools/call, tools/list
    last = [json.loads(line) for line in lines[27:31]]  # connection 5's tools/call and tools/list, answered
    seq = max(json.loads(line)["seq"] for line in body)
    conn = "c0ffee00-0000-4000-8000-000000000001"
    extra = []
    for k in range(10):
        for n, pair in enumerate((last[0:2], last[2:4])):
            flow = f"f10f0000-0000-4000-8000-{k:06d}{n:06d}"
            for o in pair:
                seq += 1
                o = {**o, "seq": seq, "flow": flow, "conn": conn}
                for f in ("ts", "t_request", "t_headers", "t_end"):
                    if isinstance(o.get(f), float):
                        o[f] += 30 + 0.5 * (k + 1)
                o.pop("chain", None)
                raw = json.loads(o["raw"])
                raw["id"] = 1000 + seq
                o["raw"] = json.dumps(raw, separators=(",", ":"))
                o["len"] = len(o["raw"].encode())
                extra.append(json.dumps(o, separators=(",", ":")).encode())
    return b"\n".join([head, *body]) + b"\n", b"\n".join(extra) + b"\n"


def test_a_finding_that_no_longer_holds_is_withdrawn(tmp_path: Path) -> None:
    """probe-storm's ratios are not monotone: a storm in the first lines is none once the client's
    real work follows. Watch reported it (rightly, then); it says so when it no longer holds, so its
    last word on each finding is what `analyze` gives on the final files."""
    live = tmp_path / "live"
    live.mkdir()
    first, rest = storm_then_work(next((CORPUS / "probe-storm-http").glob("*.jsonl")))
    target = live / "storm.jsonl"
    target.write_bytes(first)
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    clock[0] += 30
    events = [e.as_json() for e in watcher.poll()]
    assert [e["rule"] for e in events if e["event"] == "finding"] == ["probe-storm"]
    with open(target, "ab") as f:
        f.write(rest)
    clock[0] += 30
    later = [e.as_json() for e in watcher.poll()]
    report = analyzed(live)
    assert report["findings"] == []
    assert [(e["event"], e["rule"]) for e in later] == [("withdrawn", "probe-storm")]
    storm = next(e for e in events if e["rule"] == "probe-storm")
    assert later[0]["evidence"][0] == storm["evidence"][0]
    assert reported(events + later) == expected(report)


@pytest.mark.parametrize("left", ["header", "nothing"])
def test_findings_of_a_capture_emptied_are_withdrawn(tmp_path: Path, left: str) -> None:
    """A capture rewritten down to its header (or to nothing) leaves its server no traffic: the round
    has nothing to analyze, yet the findings reported from the old content no longer hold there, as
    `results()` already says; watch's last word on each of them must say so too."""
    live = tmp_path / "live"
    live.mkdir()
    target = live / "capture.jsonl"
    source = next((CORPUS / "rollout-split-http").glob("*.jsonl")).read_bytes()
    target.write_bytes(source)
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = [e.as_json() for e in watcher.poll()]
    assert [e["rule"] for e in events if e["event"] == "finding"] == ["rollout-split"]
    with open(target, "wb") as f:
        f.write(source[: source.index(b"\n") + 1] if left == "header" else b"")
    clock[0] += 30
    later = [e.as_json() for e in watcher.poll()]
    assert [e["rule"] for e in later if e["era"] is None] == ["rollout-split"]
    eras = [(e["server"], e["era"], e["evidence"]) for e in events if e["event"] == "era"]
    assert eras and sorted(eras) == sorted((e["server"], e["era"], e["evidence"]) for e in later if e["era"])
    assert {e["event"] for e in later} == {"withdrawn"}
    assert reported(events + later) == (set(), set())
    assert watcher.results() == ([], [])


@pytest.mark.parametrize("first", ["fifo", "future-format"])
def test_a_refused_file_replaced_by_a_capture_is_read(tmp_path: Path, first: str) -> None:
    """A name refused once (a FIFO, a format this version cannot read) and then holding a capture
    (the FIFO replaced, the file written over) is read: the refusal was of the file, not the name.
    The refusal itself is noted once while the file stays what it was."""
    live = tmp_path / "live"
    live.mkdir()
    target = live / "capture.jsonl"
    if first == "fifo":
        os.mkfifo(target)
    else:
        header = {"type": "header", "format": "erascope/9.0", "transport": "stdio", "server": "x"}
        target.write_bytes(json.dumps(header).encode() + b"\n")
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    assert watcher.poll() == []
    clock[0] += 30
    assert watcher.poll() == []
    assert len(watcher.notes) == 1
    source = next((CORPUS / "rollout-split-http").glob("*.jsonl")).read_bytes()
    if first == "fifo":
        (live / ".new").write_bytes(source)
        os.replace(live / ".new", target)
    else:
        with open(target, "wb") as f:
            f.write(source)
    clock[0] += 30
    events = [e.as_json() for e in watcher.poll()]
    assert reported(events) == expected(analyzed(live))
    assert [e["rule"] for e in events if e["event"] == "finding"] == ["rollout-split"]
    assert len(watcher.notes) == 1


@pytest.mark.parametrize("how", ["rewrite", "rename"])
def test_a_file_replaced_between_its_check_and_its_read_is_read_from_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """`cat new > capture.jsonl` (or `mv new capture.jsonl`) landing after a round checked the file and
    before it read the new lines: what it read from the old offset is the new capture's middle. It is
    not analyzed (a finding `analyze` never gives, which ended `--fail-on` runs), and the file is read
    from its start."""
    live, target = _one_capture(tmp_path, "auto-modern-stdio")
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = [e.as_json() for e in watcher.poll()]
    follow = Watcher._follow

    def follow_then_rewrite(self: Watcher, files: list[str]) -> None:
        follow(self, files)
        monkeypatch.undo()  # once
        _replace(target, _corpus_capture("rollout-split-http"), how)

    monkeypatch.setattr(Watcher, "_follow", follow_then_rewrite)
    for _ in range(3):
        clock[0] += 30
        events += [e.as_json() for e in watcher.poll()]
    want = expected(analyzed(live))
    said = {(e["rule"], e["server"]) for e in events if e["event"] in ("finding", "finding-update")}
    assert said == {(rule, server) for rule, server, _ in want[0]}
    assert reported(events) == want


def _moved_copy(source: Path, seconds: float) -> bytes:
    """`source` as another recorder run (another pid in its header) whose records came `seconds` later."""
    head, *body = source.read_bytes().splitlines()
    header = json.loads(head)
    header["recorder_pid"] += 1
    return json.dumps(header).encode() + b"\n" + b"".join(_later(line, seconds) for line in body)


def test_an_era_change_a_later_read_file_moves_earlier_is_withdrawn(tmp_path: Path) -> None:
    """A capture copied in late (another host's, rsynced) can hold a server's upgrade earlier than the
    files read so far: the era change watch reported from those is no longer where `analyze` puts
    it. Watch says so, as for a finding, so that its last word on each era change is analyze's."""
    live = tmp_path / "live"
    live.mkdir()
    legacy, modern = sorted((CORPUS / "upgrade-stdio").glob("*.jsonl"))
    (live / "a-legacy.jsonl").write_bytes(legacy.read_bytes())
    (live / "b-modern-later.jsonl").write_bytes(_moved_copy(modern, 100.0))
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    clock[0] += 30
    events = [e.as_json() for e in watcher.poll()]
    assert [(e["era"], Path(e["evidence"][0]["file"]).name) for e in events if e["event"] == "era"] == [
        ("legacy", "a-legacy.jsonl"),
        ("modern", "b-modern-later.jsonl"),
    ]
    (live / "c-modern.jsonl").write_bytes(modern.read_bytes())
    clock[0] += 30
    round_two = watcher.poll()
    later = [e.as_json() for e in round_two]
    text = " withdrawn era server=upgrade-stdio-server modern (was legacy) (no longer holds) ["
    assert text in round_two[1].as_text()
    assert [(e["event"], e["era"], Path(e["evidence"][0]["file"]).name) for e in later] == [
        ("era", "modern", "c-modern.jsonl"),
        ("withdrawn", "modern", "b-modern-later.jsonl"),
    ]
    assert later[0]["previous"] == "legacy"
    assert reported(events + later) == expected(analyzed(live))


@pytest.mark.parametrize("seed", [1, 2])
def test_captures_copied_in_out_of_time_order(tmp_path: Path, seed: int) -> None:
    """A folder that other hosts' captures are copied into (rsync, a shared mount) gets them in any
    order: a server's first era, its upgrade, the line that decides each, can come in a file read
    after the ones watch has reported on. Each file arrives whole, in a shuffled order, a round each:
    watch's last word on every finding and era change is what `analyze` gives afterwards."""
    from bench.generate import generate

    source = tmp_path / "source"
    generate(source, 1 << 20, files=3, spawns=12, seed=seed, clean=True)
    files = sorted(source.glob("*.jsonl"))
    random.Random(seed).shuffle(files)
    live = tmp_path / "live"
    live.mkdir()
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = []
    for f in files:
        (live / f.name).write_bytes(f.read_bytes())
        clock[0] += 30
        events += [e.as_json() for e in watcher.poll()]
    assert any(e["event"] == "withdrawn" and e["era"] for e in events)  # the order mattered
    assert reported(events) == expected(analyzed(live))


def test_a_part_deleted_keeps_what_it_contributed(tmp_path: Path) -> None:
    """The recorders' retention bound deletes the oldest closed parts while watch runs: what watch
    reported from them stands (no `withdrawn` storm after each sweep), and it goes on judging the
    traffic it has seen, as README says."""
    live, target = _one_capture(tmp_path, "rollout-split-http")
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events = watcher.poll()
    assert [e.rule for e in events if e.kind == "finding"] == ["rollout-split"]
    target.unlink()
    clock[0] += 30
    assert watcher.poll() == []
    assert [f.rule for f in watcher.results()[1]] == ["rollout-split"]


def _exact(report: dict[str, Any]) -> set[Any]:
    """A report's findings as (rule, server, evidence as printed): file names as they are, a part's
    compressed copy not taken for its plain file (`expected` strips compression)."""
    return {(f["rule"], f["server"], tuple(e["at"] for e in f["evidence"])) for f in report["findings"]}


def test_evidence_names_a_part_compressed_since_by_its_copy(tmp_path: Path) -> None:
    """The recorder compresses each closed part (`--compress`: `x.000.jsonl.zst`, the plain file
    removed) while watch follows the directory. A report names each line as `analyze` names it on the
    files when the report is printed: a part compressed before by its copy (not the plain file, gone).
    The move alone reports nothing: an update per finding per rotation would tell an alerting pipeline
    nothing new. So a report printed before its part was compressed keeps the plain name (README)."""
    from addon.retention import compress_part

    live = tmp_path / "live"
    live.mkdir()
    sources = sorted((CORPUS / "probe-storm-stdio").glob("*.jsonl"))
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events: list[dict[str, Any]] = []
    for source in sources:
        (live / source.name).write_bytes(source.read_bytes())  # a spawn's part, closed
        clock[0] += 30
        printed = [e.as_json() for e in watcher.poll()]
        # each finding printed has the evidence `analyze` gives it on the files as they are now
        now = _exact(analyzed(live)) if any(e["rule"] for e in printed) else set()
        for e in printed:
            assert all(os.path.exists(x["file"]) for x in e["evidence"]), e
            if e["rule"]:
                assert (e["rule"], e["server"], tuple(x["at"] for x in e["evidence"])) in now
        events += printed
        assert compress_part(live / source.name) is not None
        clock[0] += 30
        assert watcher.poll() == []  # the same lines under another name: nothing to report
    assert [e["event"] for e in events if e["rule"]].count("finding-update") >= 3  # the storm grew across parts
    assert any(".jsonl.zst:" in x["at"] for e in events for x in e["evidence"])
    assert reported(events) == expected(analyzed(live))
    assert watcher.notes == []


def test_files_in_a_directory_it_will_never_follow_are_noted_once(tmp_path: Path) -> None:
    """A file named like a capture that is none (a JSON-RPC log, garbage) is noted once, in
    `analyze`'s words; a file empty so far or with its first line still partial may be a part a
    recorder just created: it is noted only once its first line is complete and no header."""
    live = tmp_path / "live"
    live.mkdir()
    (live / "x.jsonl").write_bytes(b'{"jsonrpc": "2.0", "id": 1, "method": "initialize"}\n')
    (live / "y.jsonl").write_bytes(b"\x00\x01garbage\xff\n")
    (live / "empty.jsonl").write_bytes(b"")
    (live / "torn.jsonl").write_bytes(b'{"type":"hea')
    (live / "starting.jsonl").write_bytes(b"")
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    assert watcher.poll() == []
    clock[0] += 30
    with open(live / "x.jsonl", "ab") as f:  # a log that grows is noted once all the same
        f.write(b'{"jsonrpc": "2.0", "id": 1, "result": {}}\n')
    assert watcher.poll() == []
    assert sorted(watcher.notes) == [
        f"{live / 'x.jsonl'}: not an erascope capture (first line is not an erascope header): it looks like a"
        " plain JSON-RPC log; erascope reads the captures `erascope record stdio` and `erascope record http`"
        " write (plain, .gz or .zst), HAR files and mitmproxy dumps: run the server behind `erascope record"
        " stdio` (or the proxy `erascope record http`) to record one",
        f"{live / 'y.jsonl'}: not an erascope capture (first line is not an erascope header); erascope reads"
        " the captures `erascope record stdio` and `erascope record http` write (plain, .gz or .zst), HAR"
        " files and mitmproxy dumps",
    ]
    watcher.notes.clear()
    # the part a recorder was starting gets its header: a capture, read; the empty file gets a line
    # that is no header: noted now
    (live / "starting.jsonl").write_bytes(_corpus_capture("rollout-split-http"))
    (live / "empty.jsonl").write_bytes(b"hello\n")
    clock[0] += 30
    events = [e.as_json() for e in watcher.poll()]
    assert [e["rule"] for e in events if e["event"] == "finding"] == ["rollout-split"]
    assert [n.split(": ")[0] for n in watcher.notes] == [str(live / "empty.jsonl")]


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("README.md", b"# notes\n\nnot a capture\n", "not an erascope capture (first line is not an erascope header)"),
        ("dump.har", b'{\n  "log": {"version": "1.2", "entries": []}\n}\n', "a HAR file: watch follows"),
        ("dump.json", b'{"log": {"version": "1.2", "entries": []}}', "a HAR file: watch follows"),
        ("dump.flows", b"5:hello,", "a mitmproxy dump: watch follows"),
    ],
)
def test_a_file_given_that_is_no_capture_is_noted(tmp_path: Path, name: str, content: bytes, why: str) -> None:
    """A path given explicitly that watch will never follow (a README, a HAR file, a mitmproxy dump)
    is noted once with why, instead of being watched in silence until Ctrl-C."""
    path = tmp_path / name
    path.write_bytes(content)
    watcher = Watcher([str(path)])
    assert watcher.poll() == []
    assert watcher.poll() == []
    assert len(watcher.notes) == 1, watcher.notes
    assert watcher.notes[0].startswith(f"{path}: {why}")
    if "watch follows" in why:
        assert watcher.notes[0].endswith("use `erascope analyze` for HAR files and mitmproxy dumps")


def test_the_cli_notes_a_file_given_that_is_no_capture(tmp_path: Path, watches: list[Watch]) -> None:
    har = tmp_path / "dump.har"
    har.write_bytes(b'{"log": {"version": "1.2", "entries": []}}\n')
    w = Watch(str(har), "--interval", "0.2")
    watches.append(w)
    deadline = time.monotonic() + GUARD
    while not w.errors and time.monotonic() < deadline:
        time.sleep(0.2)
    assert w.stop() == 0
    assert w.errors == [
        f"erascope: {har}: a HAR file: watch follows erascope captures only; use `erascope analyze` for HAR"
        " files and mitmproxy dumps\n"
    ]


def test_a_deleted_parts_inode_given_to_a_new_file_is_no_rename(tmp_path: Path) -> None:
    """A file system gives the inode of a deleted part (retention's) to the next file made: that file
    was taken for the part renamed, and what the part contributed was withdrawn. The inode's reuse is
    made certain here: a second name for the part, the part's name removed, the file rewritten."""
    live, target = _one_capture(tmp_path, "rollout-split-http")
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    assert [e.rule for e in watcher.poll() if e.kind == "finding"] == ["rollout-split"]
    newcomer = live / "20261204T000000.000000Z_other_1_abcdef.000.jsonl"
    os.link(target, newcomer)
    target.unlink()
    newcomer.write_bytes(_corpus_capture("auth-gate-http"))  # the same inode, another capture
    clock[0] += 30
    events = [e.as_json() for e in watcher.poll()]
    assert not [e for e in events if e["event"] == "withdrawn"], events
    assert [f.rule for f in watcher.results()[1] if f.rule == "rollout-split"] == ["rollout-split"]


def test_a_glob_follows_a_part_into_its_compressed_copy(tmp_path: Path) -> None:
    """`watch 'DIR/*.jsonl'` beside a recorder that compresses closed parts: the lines written after
    the last round and before the part was compressed are only in `x.jsonl.zst`, which the glob does
    not name. They were never read (here the probe answers: a false `probe-timeout`)."""
    live = tmp_path / "live"
    live.mkdir()
    source = next((CORPUS / "probe-storm-http").glob("*.jsonl"))
    data = source.read_bytes()
    clock = [1000.0]
    watcher = Watcher([str(live / "*.jsonl")], clock=lambda: clock[0])
    cut = data.index(b"\n", len(data) // 3) + 1
    (live / source.name).write_bytes(data[:cut])
    events = [e.as_json() for e in watcher.poll()]
    (live / (source.name + ".zst")).write_bytes(zstd.compress(data))
    (live / source.name).unlink()
    clock[0] += 30
    events += [e.as_json() for e in watcher.poll()]
    clock[0] += 30
    events += [e.as_json() for e in watcher.poll()]
    assert watcher.bytes_read == len(data)
    assert reported(events) == expected(analyzed(live))


WATCHED: Final = {
    "a directory": lambda live: live,
    "a *.jsonl glob": lambda live: live / "*.jsonl",
    "a glob of first parts": lambda live: live / "*.000.jsonl",
    "a recursive glob": lambda live: live.parent / "**" / "*.jsonl",
}
"""Ways to name a capture directory's parts: only the directory also lists their compressed copies."""


@pytest.mark.parametrize("named", sorted(WATCHED))
def test_a_part_created_and_compressed_between_two_rounds_is_read(tmp_path: Path, named: str) -> None:
    """A recorder with `--compress` beside `watch`: spawns that start, end and have their part
    compressed between two rounds leave only `x.000.jsonl.zst`, which no glob of plain names matches.
    The glob named the part while it was written: its lines are read as the copy of a part read
    before is (here all but the first spawn's probes: a storm missed)."""
    from addon.retention import compress_part

    live = tmp_path / "live"
    live.mkdir()
    sources = sorted((CORPUS / "probe-storm-stdio").glob("*.jsonl"))
    clock = [1000.0]
    watcher = Watcher([str(WATCHED[named](live))], clock=lambda: clock[0])
    first = live / sources[0].name
    first.write_bytes(sources[0].read_bytes())
    events = [e.as_json() for e in watcher.poll()]
    assert compress_part(first) is not None  # read plain, then compressed: `*.jsonl` matches nothing from now on
    for source in sources[1:]:
        part = live / source.name
        part.write_bytes(source.read_bytes())
        assert compress_part(part) is not None  # written, closed and compressed between two rounds
        clock[0] += 30
        events += [e.as_json() for e in watcher.poll()]
    clock[0] += 30
    events += [e.as_json() for e in watcher.poll()]
    assert watcher.bytes_read == sum(s.stat().st_size for s in sources)
    report = analyzed(live)
    assert [f["rule"] for f in report["findings"]] == ["probe-storm"]
    assert reported(events) == expected(report)
    assert watcher.notes == []


@pytest.mark.parametrize("named", [*sorted(WATCHED), "the file itself"])
def test_a_copy_holding_more_than_one_read_is_read_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: str
) -> None:
    """A part compressed while watch is still taking its backlog in steps (`READ_LIMIT` a round):
    its copy is read on in the rounds after, also where the paths given do not name it."""
    from addon.retention import compress_part

    monkeypatch.setattr("analyzer.watch.READ_LIMIT", 1000)
    live = tmp_path / "live"
    live.mkdir()
    source = next((CORPUS / "rollout-split-http").glob("*.jsonl"))
    target = live / source.name
    target.write_bytes(source.read_bytes())
    clock = [1000.0]
    given = target if named == "the file itself" else WATCHED[named](live)
    watcher = Watcher([str(given)], clock=lambda: clock[0])
    events = [e.as_json() for e in watcher.poll()]
    size = target.stat().st_size
    assert 0 < watcher.bytes_read < size
    assert compress_part(target) is not None
    for _ in range(size):
        before = watcher.bytes_read
        clock[0] += 1
        events += [e.as_json() for e in watcher.poll()]
        if watcher.bytes_read == before:
            break
    assert watcher.bytes_read == size
    assert reported(events) == expected(analyzed(live))


def test_a_glob_does_not_name_copies_there_before_watch_started(tmp_path: Path) -> None:
    """`watch 'DIR/*.jsonl'` names the parts written while it runs, not the history compressed
    before it started (a directory names both)."""
    from addon.retention import compress_part

    live, target = _one_capture(tmp_path, "rollout-split-http")
    assert compress_part(target) is not None
    watcher = Watcher([str(live / "*.jsonl")], clock=lambda: 1000.0)
    assert (watcher.poll(), watcher.bytes_read) == ([], 0)


def test_garbage_before_a_probes_answer_within_the_timeout_is_not_its_outcome(tmp_path: Path) -> None:
    """A server that logs a line to stdout and answers the probe 3 s later: `analyze` reads the answer
    (it came within the probe timeout), and `watch` reported the server `broken` (probe garbage) as
    soon as the line was on disk, then withdrew it."""
    from tests.test_messages import Cap, discover_result, probe

    cap = Cap(tmp_path / "whole")
    cap.c2s(probe(1))
    cap.frame("s2c", "Starting weather server v2...", dt=0.1)
    cap.s2c(discover_result(1), dt=3.0)
    whole = cap.close().read_bytes().splitlines(keepends=True)
    live = tmp_path / "live"
    live.mkdir()
    part = live / "20261204T000000.000000Z_srv_1_abcdef.000.jsonl"
    clock = [1000.0]
    watcher = Watcher([str(live)], clock=lambda: clock[0])
    events: list[dict[str, Any]] = []
    for n in (3, len(whole)):  # up to the garbage line, then the rest
        part.write_bytes(b"".join(whole[:n]))
        clock[0] += 1
        events += [e.as_json() for e in watcher.poll()]
    clock[0] += 30
    events += [e.as_json() for e in watcher.poll()]
    assert [e["era"] for e in events if e["event"] == "era"] == ["modern"], events
    assert reported(events) == expected(analyzed(live))


def test_a_part_missed_by_one_listing_is_followed_into_its_copy_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round whose listing names nothing (the directory gone for a moment: an NFS hiccup, a
    permission being changed) marks every plain part missing, and the part's copy is looked for once,
    then. The part listed again was read on, but still counted as missing: when it really went (its
    compressor done), its copy was not looked for, and what it holds past the lines read was never
    read where no listing names it (a copy there before watch started, which a glob of plain names
    does not name). Here a backlog taken in steps (`READ_LIMIT` a round), beside a copy a compressor
    wrote before watch started and before it removed the plain part."""
    monkeypatch.setattr("analyzer.watch.READ_LIMIT", 1000)
    live = tmp_path / "live"
    live.mkdir()
    source = next((CORPUS / "rollout-split-http").glob("*.jsonl"))
    data = source.read_bytes()
    target = live / source.name
    target.write_bytes(data)
    (live / (source.name + ".zst")).write_bytes(zstd.compress(data))
    clock = [1000.0]
    watcher = Watcher([str(live / "*.jsonl")], clock=lambda: clock[0])
    events = [e.as_json() for e in watcher.poll()]
    read = watcher.bytes_read
    assert 0 < read < len(data)
    away = tmp_path / "away"
    live.rename(away)  # the round's listing names nothing
    clock[0] += 1
    events += [e.as_json() for e in watcher.poll()]
    assert watcher.bytes_read == read
    away.rename(live)
    clock[0] += 1
    events += [e.as_json() for e in watcher.poll()]
    assert read < watcher.bytes_read < len(data)  # listed again: read on from where it was
    target.unlink()  # the compressor's last step: its copy holds the rest
    for _ in range(len(data)):
        before = watcher.bytes_read
        clock[0] += 1
        events += [e.as_json() for e in watcher.poll()]
        if watcher.bytes_read == before:
            break
    assert watcher.bytes_read == len(data)
    assert reported(events) == expected(analyzed(live))
