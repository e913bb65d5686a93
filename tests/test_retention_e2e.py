"""Retention with real recorders: a capture directory filled past its bound while they write.

Two real `erascope record stdio` processes share one directory that already holds stale parts of an
earlier run. Recorder A keeps a part open and idle (made the oldest file of all); recorder B relays
a stream of lines through `cat` with small parts, compression and `--keep-bytes`. B must remove the
stale parts first, then its own oldest closed parts, never A's open part (nor its own), keep the
directory within the bound plus the documented slack of one part, log every removal, and relay every
byte unchanged. Then the same with `mitmdump -s addon/http_recorder.py`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from addon import format as fmt
from addon.retention import PART_NAME, capture_parts
from tests.test_http_e2e import MODERN_HEADERS, Proc, start_mitmdump, start_server

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

pytestmark = pytest.mark.e2e

ERASCOPE = Path(sys.executable).parent / "erascope"
DAY = 86400.0
REMOVED = re.compile(r"erascope: retention \((keep-bytes|keep-days)\) removed (\S+) \((\d+) bytes")


class Tee:
    """A real `erascope record stdio` process; a thread collects what it relays to us."""

    def __init__(self, out: Path, env: dict[str, str], *options: str) -> None:
        self.popen = subprocess.Popen(
            [str(ERASCOPE), "record", "stdio", "--out", str(out), *options, "--", "cat"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )  # fmt: skip
        self.received = bytearray()
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        while chunk := self.popen.stdout.read1(1 << 16):
            with self._cond:
                self.received += chunk
                self._cond.notify_all()

    def send(self, data: bytes) -> None:
        """Write `data` and wait until it came back through `cat`."""
        assert self.popen.stdin is not None
        want = len(self.received) + len(data)
        self.popen.stdin.write(data)
        self.popen.stdin.flush()
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.received) >= want, 60), "the relay stalled"

    def finish(self) -> tuple[int, str]:
        assert self.popen.stdin is not None and self.popen.stderr is not None
        self.popen.stdin.close()
        err = self.popen.stderr.read().decode()
        return self.popen.wait(60), err


def stale_parts(directory: Path, count: int, size: int) -> list[Path]:
    """Closed parts of an earlier run, oldest first (1 day apart)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    parts = []
    for n in range(count):
        path = directory / f"20250101T000000.000000Z_earlier_1_abcdef.{n:03d}.jsonl"
        path.write_bytes(b'{"type":"frame"}\n' * (size // 17))
        when = time.time() - (count + 1 - n) * DAY
        os.utime(path, (when, when))
        parts.append(path)
    return parts


def compressed(part: Path) -> Path:
    return part.with_name(part.name + ".zst")


def parts_of(directory: Path, pid: int) -> list[Path]:
    return sorted(p for p in directory.iterdir() if PART_NAME.fullmatch(p.name) and f"_{pid}_" in p.name)


def records_of(paths: list[Path]) -> list[dict[str, object]]:
    out = []
    for p in paths:
        data = p.read_bytes()
        if p.name.endswith(".zst"):
            data = zstd.decompress(data)
        out.extend(orjson.loads(line) for line in data.splitlines())
    return out


def test_two_real_tees_fill_a_directory_past_its_bound(tmp_path: Path, clean_env: dict[str, str]) -> None:
    caps = tmp_path / "caps"
    keep, rotate = 24_000, 4_000
    stale = stale_parts(caps, 4, 6_000)

    # A: one open part, idle, made the oldest file in the directory
    a = Tee(caps, clean_env)
    a.send(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # header, spawn, and the line both ways: then it stays idle
        found = parts_of(caps, a.popen.pid)
        if found and found[0].read_bytes().count(b"\n") >= 4:
            break
        time.sleep(0.05)
    (a_part,) = parts_of(caps, a.popen.pid)
    os.utime(a_part, (time.time() - 100 * DAY,) * 2)
    assert capture_parts(caps)[0][3] == a_part  # the first candidate of every sweep

    # B: small parts, compressed, the directory bounded
    b = Tee(caps, clean_env, "--rotate-size", "4k", "--compress", "--keep-bytes", str(keep))
    sent = bytearray()
    for batch in range(20):
        data = b"".join(
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"pad":"%s"}}\n' % (batch * 10 + i, b"x" * 220)
            for i in range(10)
        )
        b.send(data)
        sent += data
        assert a_part.exists(), f"an open part was removed (after batch {batch})"
    status, b_err = b.finish()
    assert status == 0
    assert bytes(b.received) == bytes(sent)  # relayed unchanged while parts were compressed and removed

    # Every removal was logged, the stale parts first (compressed at B's start), oldest first; then
    # B's oldest parts.
    removed = [(m.group(1), Path(m.group(2)), int(m.group(3))) for m in REMOVED.finditer(b_err)]
    assert [p for _, p, _ in removed[: len(stale)]] == [compressed(p) for p in stale]
    assert {reason for reason, _, _ in removed} == {"keep-bytes"}
    assert all(not p.exists() for _, p, _ in removed)
    assert a_part not in [p for _, p, _ in removed] and a_part.exists()
    b_removed = [p for _, p, _ in removed[len(stale) :]]
    assert b_removed, "B's own oldest parts had to go too"
    b_left = parts_of(caps, b.popen.pid)
    numbers = [int(p.name.split(".")[-3 if p.name.endswith(".zst") else -2]) for p in b_left]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # the newest parts, no gap
    assert all(int(p.name.split(".")[-3 if p.name.endswith(".zst") else -2]) < numbers[0] for p in b_removed)
    assert all(p.name.endswith(".jsonl.zst") for p in b_left)  # closed parts compressed, the last one too

    # Within the bound, but for the slack of one part (A's open part, at most a part and a record).
    total = sum(size for _, _, size, _ in capture_parts(caps))
    assert total <= keep + rotate + 400
    assert total - a_part.stat().st_size <= keep

    # B's surviving parts end its capture in order; its counters saw the removals.
    b_records = records_of(b_left)
    assert b_records[-1][fmt.F_TYPE] == fmt.PART_END  # the hash chain closes every part
    end = b_records[-2]
    assert end[fmt.F_TYPE] == fmt.LIFECYCLE and end[fmt.F_EVENT] == fmt.EV_RECORDER_END
    assert end[fmt.F_COUNTERS]["parts_removed"] >= len(stale)  # type: ignore[index]
    seqs = [r[fmt.F_SEQ] for r in b_records if r[fmt.F_SEQ]]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))

    # A's capture, open all along, is whole: every record of it, from its header to its end.
    a.send(b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
    status, a_err = a.finish()
    assert status == 0 and "retention" not in a_err
    a_records = records_of(parts_of(caps, a.popen.pid))
    events = [r.get(fmt.F_EVENT) for r in a_records if r[fmt.F_TYPE] == fmt.LIFECYCLE]
    assert a_records[0][fmt.F_TYPE] == fmt.HEADER and events[0] == fmt.EV_SPAWN and events[-1] == fmt.EV_RECORDER_END
    frames = [r for r in a_records if r[fmt.F_TYPE] == fmt.FRAME]
    assert len(frames) == 4  # two lines each way


def test_keep_days_with_a_real_tee(tmp_path: Path, clean_env: dict[str, str]) -> None:
    caps = tmp_path / "caps"
    stale = stale_parts(caps, 4, 1_000)  # 5, 4, 3 and 2 days old
    tee = Tee(caps, clean_env, "--keep-days", "3.5")
    tee.send(b"hello\n")
    status, err = tee.finish()
    assert status == 0
    removed = [Path(m.group(2)) for m in REMOVED.finditer(err) if m.group(1) == "keep-days"]
    assert removed == stale[:2]
    assert [p.exists() for p in stale] == [False, False, True, True]


def test_mitmdump_addon_rotates_compresses_and_bounds(
    procs: list[Proc], clean_env: dict[str, str], tmp_path: Path
) -> None:
    import httpx2

    port = start_server(procs, clean_env)
    caps = tmp_path / "caps"
    stale = stale_parts(caps, 3, 5_000)
    keep = 8_000  # less than the stale parts: they go, then the proxy's own oldest
    proxy = start_mitmdump(
        procs, clean_env, port, caps,
        "--set", "erascope_rotate_size=4k", "--set", "erascope_compress=true", "--set", f"erascope_keep_bytes={keep}",
    )  # fmt: skip
    url = f"http://127.0.0.1:{proxy.port}/mcp"  # type: ignore[attr-defined]
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {**MODERN_HEADERS, "mcp-method": "server/discover"}
    with httpx2.Client(timeout=30) as http:
        for i in range(40):
            probe = {"jsonrpc": "2.0", "id": i, "method": "server/discover", "params": {"_meta": meta}}
            resp = http.post(url, content=orjson.dumps(probe), headers=headers)
            assert resp.status_code == 200 and resp.json()["id"] == i  # relayed as ever
    removed = proxy.wait_for(r"retention \(keep-bytes\) removed " + re.escape(str(stale[-1])))
    assert removed
    # while the proxy runs: its open part is there, plain, and the closed ones are compressed
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        mine = [p for p in caps.iterdir() if PART_NAME.fullmatch(p.name) and "earlier" not in p.name]
        if sum(not p.name.endswith(".zst") for p in mine) == 1:
            break
        time.sleep(0.1)
    assert sum(not p.name.endswith(".zst") for p in mine) == 1
    assert not any(p.exists() for p in stale)
    assert proxy.stop(signal.SIGINT) == 0
    lines = "\n".join(proxy.lines)
    logged = [Path(m.group(2)) for m in REMOVED.finditer(lines)]
    assert logged[: len(stale)] == [compressed(p) for p in stale]  # compressed at the proxy's start
    total = sum(size for _, _, size, _ in capture_parts(caps))
    assert total <= keep
    records = records_of(sorted(p for p in caps.iterdir() if PART_NAME.fullmatch(p.name)))
    assert records[-1][fmt.F_TYPE] != fmt.HEADER and any(r[fmt.F_TYPE] == fmt.HTTP_RESPONSE for r in records)
