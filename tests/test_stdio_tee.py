"""The stdio tee: pure parts without processes, then the real command around real subprocesses.

Which behaviour is tested where:
- Line splitting and the pump (forward, then record; carry-over buffer; tail at EOF) run over plain
  `os.pipe()` pairs, so Hypothesis can throw random streams and random read sizes at them quickly.
- Everything a user meets (spawn, EOF propagation, linger, exit status, signals, stderr passthrough,
  capture write failures) runs the real `erascope record stdio` command around real processes:
  coreutils `cat` and the scripted servers in `tests/peers/scripted_server.py`.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import itertools
import os
import re
import resource
import select
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addon import format as fmt
from addon.errors import ErascopeError
from addon.stdio_tee import (
    LineSplitter,
    Pump,
    Sequencer,
    SpawnFailed,
    StdioTee,
    _await_drained,
    exit_status,
    fd_forwarder,
    run_tee,
    server_key,
)
from tests.peers.capture_tools import capture_files, events, lifecycle, only_capture, read_records, rebuild, traffic

ERASCOPE = Path(sys.executable).parent / "erascope"
SCRIPTED = Path(__file__).parent / "peers" / "scripted_server.py"
PY = sys.executable
LINGER = 0.3


@pytest.fixture(autouse=True)
def _redact_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # In-process tees must not create the per-host key file under the real state directory.
    monkeypatch.setenv("ERASCOPE_REDACT_KEY", "test-key")


def tee_cmd(out: Path, *server: str, linger: float = LINGER, extra: tuple[str, ...] = ()) -> list[str]:
    return [str(ERASCOPE), "record", "stdio", "--out", str(out), "--linger", str(linger), *extra, "--", *server]


def scripted(mode: str) -> list[str]:
    return [PY, str(SCRIPTED), mode]


# --- streams for property tests ------------------------------------------------------------------

_pieces = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"\n", b"\r\n", b"\r", b"\xff\xfe", b"\xc3", b"\xe2\x82", b"{}", b"\x00"]),
    st.text(max_size=20).map(lambda t: t.encode()),
    # A long line: crosses many read boundaries and the 64 KiB pipe buffer.
    st.integers(min_value=60_000, max_value=300_000).map(lambda n: b"y" * n),
)
streams = st.lists(_pieces, max_size=30).map(b"".join)


def lines_of(data: bytes) -> list[tuple[bytes, bool]]:
    """The reference split: what the tee must record for a stream."""
    parts = data.split(b"\n")
    out = [(p, True) for p in parts[:-1]]
    if parts[-1]:
        out.append((parts[-1], False))
    return out


def join_lines(lines: list[tuple[bytes, bool]]) -> bytes:
    return b"".join(p + (b"\n" if nl else b"") for p, nl in lines)


# --- LineSplitter ----------------------------------------------------------------------------------


@given(
    data=streams,
    cuts=st.lists(st.integers(min_value=0, max_value=400_000), max_size=20),
    long_line=st.sampled_from([None, 1, 100_000]),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_splitter_any_chunking_gives_the_reference_lines(data: bytes, cuts: list[int], long_line: int | None) -> None:
    """Every line, whatever the chunks; with `long_line`, those at least that long that span chunks come
    in their pieces (`fmt.Pieces`), the others joined."""
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    splitter = LineSplitter(long_line)
    got: list[tuple[bytes | fmt.Pieces, bool]] = []
    for a, b in itertools.pairwise(bounds):
        got += [(line, True) for line in splitter.feed(data[a:b])]
    tail = splitter.tail()
    if tail is not None:
        got.append((tail, False))
    for line, _ in got:
        if isinstance(line, fmt.Pieces):
            assert long_line is not None and len(line) >= long_line and len(line.chunks) > 1
            assert len(line) == sum(map(len, line.chunks))
        else:
            chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]
            assert long_line is None or len(line) < long_line or any(line in chunk for chunk in chunks)
    exact = [(bytes(line), nl) for line, nl in got]
    assert exact == lines_of(data)
    assert join_lines(exact) == data


def test_splitter_lends_a_whole_line_read_alone_without_copying_it() -> None:
    """With `borrow`, a chunk that is one whole line comes back as a view of the chunk (no copy of a
    megabyte line); every other line is copied out, since the buffer is read into again."""
    buf = bytearray(b"x" * 100 + b"\n" + b"junk")
    s = LineSplitter()
    (line,) = s.feed(buf, 101, borrow=True)
    assert isinstance(line, memoryview) and line.obj is buf and line == b"x" * 100
    line.release()
    assert s.feed(buf, 101) == [b"x" * 100] and isinstance(s.feed(buf, 101)[0], bytes)
    assert s.feed(bytearray(b"a\nb"), borrow=True) == [b"a"]  # a piece is kept: copied
    assert [type(x) for x in s.feed(bytearray(b"c\n"), borrow=True)] == [bytes]  # it completes a kept piece
    assert [type(x) for x in s.feed(bytearray(b"d\ne\n"), borrow=True)] == [bytes, bytes]


def test_pump_hands_a_whole_line_to_on_line_as_a_view_of_its_buffer() -> None:
    """The pump lends a line read whole to `on_line` (valid during the call), and copies nothing for it."""
    src_r, src_w = os.pipe()
    got: list[tuple[type, bytes, bool]] = []
    pump = Pump(src_r, None, lambda p, nl: got.append((type(p), bytes(p), nl)))
    os.write(src_w, b'{"jsonrpc":"2.0","id":1}\n')
    os.close(src_w)
    pump.run()
    os.close(src_r)
    assert pump.error is None
    assert got == [(memoryview, b'{"jsonrpc":"2.0","id":1}', True)]


def test_splitter_examples() -> None:
    s = LineSplitter()
    assert s.feed(b"ab") == []
    assert s.feed(b"c\r\nd\n\nxy") == [b"abc\r", b"d", b""]
    assert s.feed(b"") == []
    assert s.tail() == b"xy"
    assert s.tail() is None


# --- Pump over pipes ---------------------------------------------------------------------------------


def pump_through_pipes(
    data: bytes, chunk_size: int, by_fd: bool = False, long_line: int | None = None
) -> tuple[bytes, list[tuple[bytes, bool]], bool]:
    """Run one Pump between two pipes: feed `data` in, collect what comes out and what was recorded.
    `by_fd`: the pump is given the destination's descriptor instead of a forward function."""
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    recorded: list[tuple[bytes, bool]] = []
    ended: list[bool] = []
    received = bytearray()

    def feed() -> None:
        view = memoryview(data)
        while view:
            n = os.write(src_w, view[: 1 + (len(view) % 70_001)])
            view = view[n:]
        os.close(src_w)

    def drain() -> None:
        while chunk := os.read(dst_r, 1 << 16):
            received.extend(chunk)

    def on_end(eof: bool) -> None:
        ended.append(eof)
        os.close(dst_w)  # as the tee does: the destination sees EOF when the source did

    forward = dst_w if by_fd else fd_forwarder(dst_w)
    pump = Pump(
        src_r, forward, lambda p, nl: recorded.append((bytes(p), nl)), on_end=on_end, chunk_size=chunk_size,
        long_line=long_line,
    )  # fmt: skip
    threads = [threading.Thread(target=feed), threading.Thread(target=drain)]
    for t in threads:
        t.start()
    pump.run()
    for t in threads:
        t.join()
    os.close(src_r)
    os.close(dst_r)
    assert pump.error is None
    return bytes(received), recorded, ended == [True]


@given(
    data=streams,
    chunk_size=st.integers(min_value=1, max_value=1 << 20),
    by_fd=st.booleans(),
    long_line=st.sampled_from([None, 1, 100_000]),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_pump_relays_exactly_and_records_every_line(
    data: bytes, chunk_size: int, by_fd: bool, long_line: int | None
) -> None:
    out, recorded, eof = pump_through_pipes(data, chunk_size, by_fd, long_line)
    assert out == data
    assert recorded == lines_of(data)
    assert eof


@pytest.mark.parametrize("by_fd", [False, True])
def test_pump_keeps_recording_when_destination_is_gone(by_fd: bool) -> None:
    """EPIPE on the destination (a dead server's stdin) is reported once; later lines are still recorded."""
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    os.close(dst_r)
    errors: list[OSError] = []
    recorded: list[tuple[bytes, bool]] = []
    forward = dst_w if by_fd else fd_forwarder(dst_w)
    pump = Pump(src_r, forward, lambda p, nl: recorded.append((bytes(p), nl)), on_forward_error=errors.append)
    pump.start()
    os.write(src_w, b"one\ntwo\n")
    os.write(src_w, b"three")
    os.close(src_w)
    assert pump.join(10)
    assert pump.error is None
    assert [type(e) for e in errors] == [BrokenPipeError]
    assert recorded == [(b"one", True), (b"two", True), (b"three", False)]
    os.close(src_r)
    os.close(dst_w)


def test_pump_drained_while_the_writer_stays() -> None:
    """A grandchild holding the server's stdout open: the pump reads what is there, then is "drained"."""
    src_r, src_w = os.pipe()
    recorded: list[tuple[bytes, bool]] = []
    pump = Pump(src_r, None, lambda p, nl: recorded.append((bytes(p), nl))).start()
    os.write(src_w, b"last words\npartial")
    _await_drained(pump)  # returns although the pipe is still open
    assert not pump.done.is_set()
    assert recorded == [(b"last words", True)]
    os.write(src_w, b" rest\n")
    os.close(src_w)
    assert pump.join(10)
    assert recorded == [(b"last words", True), (b"partial rest", True)]
    assert pump.eof and pump.drained()
    os.close(src_r)


# --- Sequencer: records leave in the order their bytes were read ----------------------------------


def test_sequencer_holds_a_record_behind_an_earlier_unrecorded_read() -> None:
    out: list[str] = []
    seq = Sequencer(lambda r: out.append(r["n"]))
    t_req = seq.begin("c2s")  # the request was read (and is being forwarded)
    t_ans = seq.begin("s2c")  # the answer was read before the request's thread recorded it
    seq.submit({"n": "answer"}, t_ans)
    seq.submit({"n": "exit"})  # an event now: after everything read so far
    assert out == []
    seq.submit({"n": "request"}, t_req)
    assert out == ["request"]
    seq.end("c2s")
    assert out == ["request", "answer"]
    seq.end("s2c")
    assert out == ["request", "answer", "exit"]


def test_sequencer_drain_releases_what_a_stalled_stream_held_back() -> None:
    out: list[str] = []
    seq = Sequencer(lambda r: out.append(r["n"]))
    seq.begin("c2s")  # e.g. forwarding blocks on a server that stopped reading
    t = seq.begin("s2c")
    seq.submit({"n": "a"}, t)
    seq.submit({"n": "b"}, t)
    assert out == []
    seq.drain()
    assert out == ["a", "b"]


def test_sequencer_close_is_the_last_word_of_a_stream() -> None:
    out: list[str] = []
    seq = Sequencer(lambda r: out.append(r["n"]))
    seq.begin("c2s")
    seq.record("c2s", {"n": "frame"})
    seq.end("c2s")
    assert seq.close("c2s", {"n": "linger-end"})
    seq.begin("c2s")  # a parked pump reads more after the window closed
    seq.record("c2s", {"n": "too late"})
    seq.end("c2s")
    assert not seq.close("c2s", {"n": "again"})
    assert out == ["frame", "linger-end"]


@given(
    plans=st.lists(st.lists(st.integers(min_value=0, max_value=3), max_size=6), min_size=1, max_size=3),
    order=st.randoms(use_true_random=False),
)
@settings(max_examples=300, deadline=None)
def test_sequencer_output_is_complete_and_in_read_order(plans: list[list[int]], order) -> None:
    """Streams read chunks (each making 0..3 records) and interleave arbitrarily: nothing is lost, and
    records come out sorted by the read they belong to."""
    out: list[tuple[int, int]] = []
    seq = Sequencer(lambda r: out.append((r["ticket"], r["i"])))
    # Each stream's steps, in its own order: per chunk ("begin",), ("submit", i)..., ("end",).
    queues: dict[int, list[tuple]] = {name: [] for name in range(len(plans))}
    for name, plan in enumerate(plans):
        for n in plan:
            queues[name] += [("begin",), *[("submit", k) for k in range(n)], ("end",)]
    tickets: dict[int, int] = {}
    total = 0
    while any(queues.values()):
        name = order.choice([k for k, q in queues.items() if q])
        step = queues[name].pop(0)
        if step[0] == "begin":
            tickets[name] = seq.begin(str(name))
        elif step[0] == "submit":
            seq.submit({"ticket": tickets[name], "i": step[1]}, tickets[name])
            total += 1
        else:
            seq.end(str(name))
    seq.drain()
    assert len(out) == total
    assert out == sorted(out)


def test_answer_is_recorded_after_its_request_even_if_the_request_is_recorded_late(tmp_path: Path) -> None:
    """The client-side thread is slow to record (descheduled, GIL busy): the answer still comes after."""
    c_r, c_w = os.pipe()
    s_r, s_w = os.pipe()
    tee = StdioTee(["cat"], out_dir=tmp_path, linger=0, stderr=io.BytesIO(), stdin_fd=c_r, stdout_fd=s_w)
    original = tee._on_c2s
    slow = threading.Event()

    def late_c2s(payload: bytes, nl: bool) -> None:
        slow.wait(0.3)  # the answer is forwarded and recorded by the other thread meanwhile
        original(payload, nl)

    tee._on_c2s = late_c2s  # type: ignore[method-assign]
    t = threading.Thread(target=tee.run)
    t.start()
    os.write(c_w, b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    assert os.read(s_r, 100) == b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'  # relayed without waiting
    os.close(c_w)
    t.join(60)
    records = traffic(only_capture(tmp_path))
    frames = [r[fmt.F_DIR] for r in records if r[fmt.F_TYPE] == fmt.FRAME]
    assert frames == [fmt.C2S, fmt.S2C]
    for fd in (c_r, s_r, s_w):
        os.close(fd)


def _as_text(record: dict[str, object]) -> dict[str, object]:
    """`record` with a text given in pieces (`fmt.PieceText`) as the `str` it stands for."""
    return {k: v.text() if isinstance(v, fmt.PieceText) else v for k, v in record.items()}


@pytest.mark.parametrize("payload", [b'{"jsonrpc":"2.0","id":1}', b"caf\xc3\xa9", b"\xff\xfe not utf-8", b""])
@pytest.mark.parametrize("nl", [True, False])
@pytest.mark.parametrize("given_as", ["bytes", "lent", "pieces"])
def test_the_pumps_line_records_are_the_documented_records(
    tmp_path: Path, payload: bytes, nl: bool, given_as: str
) -> None:
    """Each pump's `on_line` builds its record inline: the very fields, values and order of `_line_record`
    (for a long line in pieces, a `fmt.PieceText` standing for the same text)."""
    tee = StdioTee(["cat"], out_dir=tmp_path, linger=0, stderr=io.BytesIO())
    got: list[tuple[str, dict[str, object]]] = []
    tee._seq.record = lambda stream, record: got.append((stream, record))  # type: ignore[method-assign]
    for on_line, stream, rtype, direction in (
        (tee._line_recorder(fmt.C2S, fmt.FRAME, fmt.C2S), fmt.C2S, fmt.FRAME, fmt.C2S),
        (tee._line_recorder(fmt.S2C, fmt.FRAME, fmt.S2C), fmt.S2C, fmt.FRAME, fmt.S2C),
        (tee._line_recorder(fmt.STDERR, fmt.STDERR, None), fmt.STDERR, fmt.STDERR, None),
    ):
        given = {
            "bytes": payload,
            "lent": memoryview(bytearray(payload)),  # as a pump lends a whole line
            "pieces": fmt.Pieces([payload[:4], payload[4:]]),  # a character cut between the two
        }[given_as]
        on_line(given, nl)
        expected = tee._line_record(rtype, payload, nl, direction)
        (got_stream, record) = got.pop()
        assert got_stream == stream
        assert list(record) == list(expected)
        text_fields = [fmt.F_RAW, fmt.F_RAW_B64]
        assert [isinstance(record.get(k), fmt.PieceText) for k in text_fields] == [
            given_as == "pieces" and rtype == fmt.FRAME and k in expected for k in text_fields
        ]  # a stderr piece is short: joined
        assert {k: v for k, v in _as_text(record).items() if k not in (fmt.F_TS, fmt.F_MONO)} == {
            k: v for k, v in expected.items() if k not in (fmt.F_TS, fmt.F_MONO)
        }
    tee.writer.close()


# --- small pure helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "key"),
    [
        (["python", "-m", "weather_server"], "python -m weather_server"),
        (["/usr/bin/python3", "-u", "/srv/mcp/server.py", "--port", "3"], "python3 server.py"),
        (["node", "build/index.js"], "node index.js"),
        (["npx", "-y", "@modelcontextprotocol/server-everything"], "npx @modelcontextprotocol/server-everything"),
        (["uvx", "mcp-server-git", "--repository", "/x"], "uvx mcp-server-git"),
        (["java", "-jar", "/opt/app/mcp.jar"], "java mcp.jar"),
        (["python", "-c", "print(1)"], "python -c"),
        (["/opt/bin/mcp-server-foo"], "mcp-server-foo"),
        (["mcp-server-foo", "--token=hmac:0123456789ab"], "mcp-server-foo"),
    ],
)
def test_server_key(argv: list[str], key: str) -> None:
    assert server_key(argv) == key


@pytest.mark.parametrize(
    ("argv", "key"),
    [
        # The configurations the servers' own READMEs give: the launcher's subcommand, then what it runs.
        (
            ["docker", "run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
            "docker run ghcr.io/github/github-mcp-server",
        ),
        (["docker", "run", "-i", "--rm", "mcp/fetch"], "docker run mcp/fetch"),
        (
            [
                "/usr/bin/docker",
                "run",
                "-it",
                "--rm",
                "--mount",
                "type=bind,src=/x,dst=/x",
                "-v",
                "/a:/b",
                "mcp/filesystem",
                "/x",
            ],
            "docker run mcp/filesystem",
        ),
        (["docker", "run", "--rm", "--network=host", "-w", "/app", "--init", "mcp/git"], "docker run mcp/git"),
        (["docker", "container", "run", "-i", "mcp/time"], "docker run mcp/time"),
        (["docker", "--context", "prod", "run", "-i", "mcp/time"], "docker run mcp/time"),
        (
            ["podman", "run", "-i", "--rm", "--replace", "--name", "w", "quay.io/acme/weather"],
            "podman run quay.io/acme/weather",
        ),
        (["docker", "exec", "-i", "-e", "A=1", "weather-1", "python", "-m", "weather"], "docker exec weather-1"),
        (["docker", "run"], "docker run"),
        (["docker", "ps"], "docker ps"),
        (["uv", "run", "server.py"], "uv run server.py"),
        (["uv", "--directory", "/srv/weather", "run", "weather.py"], "uv run weather.py"),
        (["uv", "run", "--with", "mcp[cli]", "--directory", "/srv/w", "mcp", "run", "server.py"], "uv run mcp"),
        (["uv", "tool", "run", "mcp-server-git"], "uv tool run mcp-server-git"),
        (["pipx", "run", "mcp-server-fetch"], "pipx run mcp-server-fetch"),
        (["deno", "run", "-A", "--allow-env=X", "jsr:@acme/weather"], "deno run jsr:@acme/weather"),
        (["pnpm", "dlx", "@acme/weather"], "pnpm dlx @acme/weather"),
        (["npm", "exec", "--yes", "--", "@acme/weather"], "npm exec @acme/weather"),
    ],
)
def test_server_key_of_a_launcher_names_what_it_launches(argv: list[str], key: str) -> None:
    # Keyed by the launcher alone, every server a fleet starts with `docker run` or `uv run` was one
    # key: different servers' eras were read as one server's rollout split.
    assert server_key(argv) == key


@pytest.mark.parametrize(
    ("argv", "key"),
    [
        (["docker", "run", "-i", "mcp/github:1.4.2"], "docker run mcp/github"),
        (["docker", "run", "-i", "localhost:5000/mcp/github:v2"], "docker run localhost:5000/mcp/github"),
        (["docker", "run", "-i", "mcp/github@sha256:" + "a" * 64], "docker run mcp/github"),
        (
            ["npx", "-y", "@modelcontextprotocol/server-everything@2025.7.1"],
            "npx @modelcontextprotocol/server-everything",
        ),
        (["npx", "-y", "mcp-remote@latest", "https://x.test/mcp"], "npx mcp-remote"),
        (["uvx", "mcp-server-git==0.6.2"], "uvx mcp-server-git"),
        (["uvx", "mcp-server-git@0.6.2"], "uvx mcp-server-git"),
    ],
)
def test_server_key_leaves_out_the_version_an_upgrade_changes(argv: list[str], key: str) -> None:
    # A rollout from one image tag or package version to the next is one server changing era, the
    # very thing the analysis looks for; a version in the key made it two servers.
    assert server_key(argv) == key


def test_exit_status_is_shell_like() -> None:
    assert exit_status(0) == 0
    assert exit_status(3) == 3
    assert exit_status(-signal.SIGKILL) == 137
    assert exit_status(-signal.SIGTERM) == 143


def test_empty_command_and_negative_linger_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ErascopeError, match="no server command"):
        run_tee([], out_dir=tmp_path, stderr=io.BytesIO())
    with pytest.raises(ErascopeError, match="linger"):
        run_tee(["cat"], out_dir=tmp_path, linger=-1, stderr=io.BytesIO())


def test_spawn_failure_in_process(tmp_path: Path) -> None:
    err = io.BytesIO()
    with pytest.raises(SpawnFailed) as info:
        run_tee([str(tmp_path / "missing-server")], out_dir=tmp_path / "c", stderr=err)
    assert info.value.exit_code == 127
    rec = lifecycle(only_capture(tmp_path / "c"), fmt.EV_SPAWN_FAILED)
    assert "ENOENT" in rec["error"]
    assert err.getvalue() == b""  # the library never prints; the CLI reports SpawnFailed


# --- the real command around real processes ----------------------------------------------------------


def run(cmd: list[str], env: dict[str, str], data: bytes = b"", **kw: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(cmd, input=data, capture_output=True, env=env, timeout=120, check=False, **kw)  # type: ignore[call-overload]


@given(data=streams)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_cat_through_the_tee_property(
    tmp_path_factory: pytest.TempPathFactory, clean_env: dict[str, str], data: bytes
) -> None:
    out = tmp_path_factory.mktemp("cap")
    proc = run(tee_cmd(out, "cat"), clean_env, data)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == data
    records = only_capture(out)
    assert rebuild(records, fmt.C2S) == data
    assert rebuild(records, fmt.S2C) == data


def test_edge_bytes_through_cat(tmp_path: Path, clean_env: dict[str, str]) -> None:
    data = b'{"a":1}\r\n' + b"\xff\xfe not utf-8\n" + "h\u00e9llo \u2603\n".encode() + b"\n" + b"no newline at end"
    proc = run(tee_cmd(tmp_path, "cat"), clean_env, data)
    assert proc.stdout == data
    records = only_capture(tmp_path)
    frames = [r for r in traffic(records) if r[fmt.F_TYPE] == fmt.FRAME and r[fmt.F_DIR] == fmt.C2S]
    assert [r.get(fmt.F_RAW) for r in frames] == ['{"a":1}\r', None, "h\u00e9llo \u2603", "", "no newline at end"]
    assert fmt.payload_bytes(frames[1]) == b"\xff\xfe not utf-8"
    assert frames[1][fmt.F_LEN] == len(b"\xff\xfe not utf-8")
    assert [r[fmt.F_NL] for r in frames] == [True, True, True, True, False]
    assert all(r[fmt.F_CONN] == frames[0][fmt.F_CONN] for r in traffic(records))
    header = records[0]
    assert header["transport"] == fmt.STDIO
    assert header[fmt.F_SERVER] == "cat"
    assert header["argv"] == ["cat"]


def test_ten_megabyte_line_both_ways(tmp_path: Path, clean_env: dict[str, str]) -> None:
    big = b'{"jsonrpc":"2.0","id":1,"result":{"blob":"' + b"x" * (10 * 1024 * 1024) + b'"}}\n'
    data = big + b'{"jsonrpc":"2.0","id":2}\n' + big[:-1]
    proc = run(tee_cmd(tmp_path, "cat"), clean_env, data)
    assert proc.returncode == 0
    assert proc.stdout == data
    records = only_capture(tmp_path)
    for direction in (fmt.C2S, fmt.S2C):
        frames = [r for r in traffic(records) if r[fmt.F_TYPE] == fmt.FRAME and r[fmt.F_DIR] == direction]
        assert [r[fmt.F_LEN] for r in frames] == [len(big) - 1, 24, len(big) - 1]
        assert rebuild(records, direction) == data


LONG_ANSWER = """
import os, sys, time
piece, count, answers, capture = sys.argv[1].encode(), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
line = 70 + len(piece) * count
for n in range(answers):
    if n:
        # the next line only once the tee has written the one before (its record is longer than the
        # line) and waits for another: a fixed pause was too short on a loaded machine
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and sum(
            os.path.getsize(os.path.join(capture, f)) for f in os.listdir(capture) if f.endswith(".jsonl")
        ) < n * line:
            time.sleep(0.05)
        time.sleep(1)
    os.write(1, b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"')
    for _ in range(count):  # written as it is made: the server never holds the line
        view = memoryview(piece)
        while view:
            view = view[os.write(1, view) :]
    os.write(1, b'"}]}}\\n')
"""
"""A server that answers `answers` times with one line of `count` times the JSON text `piece`, each
after the tee wrote the one before to the capture directory `capture`, and exits."""

TEXT_PIECE = 'A tool\u2019s output \u2014 \\"quoted\\", on lines\\n\\t' * 64
"""JSON string content as a tool result holds it: escapes (which a capture escapes once more), and
characters beyond Latin-1 (which make Python hold the text in two bytes a character)."""


CLIENT = """
import os, subprocess, sys
closed_first, answer, cmd = sys.argv[1] == "1", sys.argv[2], sys.argv[3:]
proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
if closed_first:
    proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}\\n')
    proc.stdin.close()
with open(answer, "wb") as f:
    while chunk := proc.stdout.read1(1 << 20):
        f.write(chunk)
proc.stdin.close()
_, status, usage = os.wait4(proc.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024)
"""
"""A client in a process of its own: runs the tee command `argv[3:]`, writes what it answers to the file
`argv[2]`, and prints the tee's exit status and peak RSS in bytes (wait4). With `argv[1]` "1" it sends a
request and closes the tee's stdin first; else it closes it once the answer is over."""


def _answer_through_tee(
    out: Path, env: dict[str, str], count: int, *, closed_first: bool = False, answers: int = 1
) -> tuple[int, bytes]:
    """Relay `LONG_ANSWER`'s line through a real tee: the tee's peak RSS in bytes, and what the client got.
    With `closed_first`, the client sends a request and closes stdin, and the server answers once it has
    read the request and that EOF.

    The tee is started by `CLIENT`, not by this process: a peak RSS read by wait4 counts the high-water
    mark of the process a child was forked from (Linux keeps it across fork and exec), and pytest's is
    hundreds of megabytes once a test before has read a long capture; both readings were then pytest's."""
    server = "import sys; sys.stdin.buffer.read()\n" + LONG_ANSWER if closed_first else LONG_ANSWER
    answer = out.parent / f"{out.name}.answer"
    cmd = tee_cmd(out, PY, "-c", server, TEXT_PIECE, str(count), str(answers), str(out))
    done = subprocess.run(
        [PY, "-c", CLIENT, "1" if closed_first else "0", str(answer), *cmd], env=env, capture_output=True,
        check=True, timeout=300,
    )  # fmt: skip
    status, peak = map(int, done.stdout.split())
    assert status == 0
    return peak, answer.read_bytes()


def test_a_long_line_is_held_about_once_by_the_tee(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """One long answer (a tool's result of 128 MiB) took 4.8 times its size of the tee's memory at its peak
    (the line joined from its pieces, decoded into a `str` of two bytes a character, encoded again whole),
    2.1 times while its pieces and its encoded record lived together, about 1.15 times now. The relay and
    the record are exact, and the peak stays below 1.6 times the line."""
    count = (128 << 20) // len(TEXT_PIECE.encode())
    base, _ = _answer_through_tee(tmp_path / "small", clean_env, 1)
    peak, got = _answer_through_tee(tmp_path / "long", clean_env, count)
    line = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"%b"}]}}' % (
        TEXT_PIECE.encode() * count
    )
    assert got == line + b"\n"
    records = only_capture(tmp_path / "long")
    assert rebuild(records, fmt.S2C) == got
    (frame,) = (r for r in traffic(records) if r[fmt.F_TYPE] == fmt.FRAME)
    assert frame[fmt.F_RAW] == line.decode()
    assert (peak - base) / len(line) < 1.6, f"{(peak - base) >> 20} MiB over {len(line) >> 20} MiB"


def test_a_long_line_after_the_client_closed_stdin_is_held_about_once(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """The same answer, sent after the client closed stdin, took twice its size of the tee's memory: the
    client's pump ended and freed its megabyte read buffer, and glibc, which maps a block alone only past
    a threshold it raises to the largest mapped block freed so far, put the line's pieces in a thread's
    heap from then on. Freed there as the writer encoded them, they stayed mapped (a heap shrinks only
    from its top) while the encoded record grew beside them. The peak stays below 1.6 times the line."""
    count = (128 << 20) // len(TEXT_PIECE.encode())
    base, _ = _answer_through_tee(tmp_path / "small", clean_env, 1, closed_first=True)
    peak, got = _answer_through_tee(tmp_path / "long", clean_env, count, closed_first=True)
    line = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"%b"}]}}' % (
        TEXT_PIECE.encode() * count
    )
    assert got == line + b"\n"
    records = only_capture(tmp_path / "long")
    assert rebuild(records, fmt.S2C) == got
    answer = next(r for r in traffic(records) if r.get(fmt.F_DIR) == fmt.S2C)
    assert lifecycle(records, fmt.EV_CLIENT_EOF)[fmt.F_SEQ] < answer[fmt.F_SEQ]  # the case this is about
    assert (peak - base) / len(line) < 1.6, f"{(peak - base) >> 20} MiB over {len(line) >> 20} MiB"


def test_a_long_line_is_let_go_before_the_next_one_is_read(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """Two long answers, the second sent once the first is written: the writer held the first one's
    encoded record while it waited for the next record, so the second line was read and encoded beside
    it (twice the line at the peak).
    The peak stays below 1.6 times one line."""
    count = (64 << 20) // len(TEXT_PIECE.encode())
    base, _ = _answer_through_tee(tmp_path / "small", clean_env, 1, answers=2)
    peak, got = _answer_through_tee(tmp_path / "long", clean_env, count, answers=2)
    line = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"%b"}]}}' % (
        TEXT_PIECE.encode() * count
    )
    assert got == (line + b"\n") * 2
    assert rebuild(only_capture(tmp_path / "long"), fmt.S2C) == got
    assert (peak - base) / len(line) < 1.6, f"{(peak - base) >> 20} MiB over {len(line) >> 20} MiB"


def test_secret_arguments_are_redacted_and_env_never_recorded(tmp_path: Path, clean_env: dict[str, str]) -> None:
    env = dict(clean_env, WEATHER_API_KEY="env-secret-value-123")
    script = "import sys; sys.stdout.write(sys.stdin.read())"
    server = (PY, "-c", script, "--header", "Authorization: Bearer bear-123", "postgresql://u:pg-pw@h/db",
              "postgresql://app:Tr0ub@dor&3@db.internal:5432/app", "--api-key", "sk-live-abc",
              "--token=tok-xyz")  # fmt: skip
    proc = run(tee_cmd(tmp_path, *server), env, b"hi\n")
    assert proc.stdout == b"hi\n"
    text = only_capture(tmp_path)
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("*.jsonl"))
    assert b"sk-live-abc" not in raw and b"tok-xyz" not in raw and b"env-secret-value-123" not in raw
    assert b"bear-123" not in raw and b"pg-pw" not in raw
    assert b"dor&3" not in raw and b"Tr0ub" not in raw  # a password holding '@': userinfo ends at the last '@'
    spawn = lifecycle(text, fmt.EV_SPAWN)
    assert spawn["argv"][-3] == "--api-key"
    assert spawn["argv"][-2].startswith("hmac:") and spawn["argv"][-1].startswith("--token=hmac:")
    assert text[0]["argv"] == spawn["argv"]
    assert spawn["cwd"] == os.getcwd()


ARGV_SECRETS = [
    # (argv, secret that must not survive, what must)
    (["npx", "mcp-remote", "--header", "Authorization: Bearer tok-AAA"], "tok-AAA", "Authorization: Bearer hmac:"),
    (["npx", "mcp-remote", "-H", "X-API-Token: tok-BBB"], "tok-BBB", "X-API-Token: hmac:"),
    (["uvx", "mcp-server-postgres", "postgresql://user:pw-CCC@db:5432/app"], "pw-CCC", "postgresql://user:hmac:"),
    (["srv", "--db=postgres://u:pw-DDD@h/db"], "pw-DDD", "--db=postgres://u:hmac:"),
    (["srv", "postgresql://app:Tr0ub@pw-LLL@db:5432/app"], "pw-LLL", "postgresql://app:hmac:"),  # '@' in it
    (["srv", "DSN=mysql://u:a@b@pw-MMM@h/db?x=1"], "pw-MMM", "DSN=mysql://u:hmac:"),
    (["srv", "https://tok@en-NNN@h/mcp"], "en-NNN", "https://hmac:"),  # a lone user, often a token
    (["srv", "https://h/mcp?token=tok-EEE&x=1"], "tok-EEE", "https://h/mcp?token=hmac:"),
    (["docker", "run", "-e", "GITHUB_TOKEN=tok-FFF", "ghcr.io/github/mcp"], "tok-FFF", "GITHUB_TOKEN=hmac:"),
    (["docker", "run", "--env=DB_PASSWORD=pw-GGG", "img"], "pw-GGG", "--env=DB_PASSWORD=hmac:"),
    (["srv", "--pat", "pat-HHH"], "pat-HHH", "hmac:"),
    (["srv", "--access-key=ak-III"], "ak-III", "--access-key=hmac:"),
    (["srv", "-k", "key-JJJ"], "key-JJJ", "hmac:"),
    (["srv", "--api-key", "sk-KKK"], "sk-KKK", "hmac:"),
    # connection strings: `;`-separated NAME=VALUE pairs (ODBC, ADO, JDBC), `&`-separated query-like ones
    (["srv", "Server=x;Password=cp-OOO"], "cp-OOO", "Server=x;Password=hmac:"),
    (["srv", "--dsn", "Data Source=db; User ID=sa; Pwd={cp;PPP}"], "PPP", "Data Source=db; User ID=sa; Pwd=hmac:"),
    (["srv", '--conn=Server=x;Password="cp;QQQ";Database=d'], "QQQ", "--conn=Server=x;Password=hmac:"),
    (["srv", "jdbc:sqlserver://db:1433;user=sa;password=cp-RRR"], "cp-RRR", "jdbc:sqlserver://db:1433;user=sa;pass"),
    (["srv", "user=ann&password=cp-SSS&x=1"], "cp-SSS", "user=ann&password=hmac:"),
    (["srv", "AccountName=a;AccountKey=ak-ABO==;EndpointSuffix=core.windows.net"], "ak-ABO", "AccountName=a;Acc"),
    # a header name and its value in two arguments
    (["srv", "--header", "Authorization", "Bearer h2-TTT"], "h2-TTT", "Bearer hmac:"),
    (["curl", "-H", "x-api-key", "k-UUU", "https://h/"], "k-UUU", "hmac:"),
    (["srv", "--header=Authorization", "Bearer h2-VVV"], "h2-VVV", "Bearer hmac:"),
    # names the word list missed
    (["srv", "--pass", "p1-WWW"], "p1-WWW", "hmac:"),
    (["srv", "--pass=p1-XXX"], "p1-XXX", "--pass=hmac:"),
    (["srv", "--passphrase", "p1-YYY"], "p1-YYY", "hmac:"),
    (["srv", "--pw", "p1-ZZZ"], "p1-ZZZ", "hmac:"),
    (["openssl", "rsa", "-passin", "pass:p1-ABA"], "p1-ABA", "hmac:"),
    (["docker", "run", "-e", "MYSQL_PASS=p1-ABB", "img"], "p1-ABB", "MYSQL_PASS=hmac:"),
    (["srv", "--client-secret", "cs-ABC"], "cs-ABC", "hmac:"),
    # well-known tokens, bare or inside an argument
    (["srv", "ghp_ABD0123456789abcdefghijABCDEFGHIJKLM"], "ABD0123456789", "hmac:"),
    (["srv", '--config={"token":"ghp_ABE0123456789abcdefghijABCDEFGHIJKLM"}'], "ABE0", '--config={"token":"hmac:'),
    (["srv", "Bearer ghp_ABF0123456789abcdefghijABCDEFGHIJKLM"], "ABF0", "Bearer hmac:"),
    (["srv", "github_pat_11ABG0123456789ABCDEFGH_" + "abcdefghij" * 5 + "ABCDEFGHI"], "ABG0", "hmac:"),
    (["srv", "sk-proj-ABH" + "Ab1_Cd2-Ef3" * 12], "ABH", "hmac:"),
    (["srv", "sk-ABI0T3BlbkFJ" + "a1B2c3D4e5" * 4], "ABI0", "hmac:"),
    (["srv", "sk-ant-api03-ABJ" + "Ab1_Cd2-Ef3" * 8 + "AA"], "ABJ", "hmac:"),
    (["srv", "xoxb-123456789012-1234567890123-ABKdEfGhIjKlMnOpQrStUvWx"], "ABKd", "hmac:"),
    (["srv", "xoxp-1234567890-1234567890-1234567890-ABL0123456789abcdef0123456789ab"], "ABL0", "hmac:"),
    (["srv", "glpat-ABMdEfGhIjKlMnOpQrSt"], "ABMd", "hmac:"),
    (["srv", "--aws=AKIAIOSFODNN7EXAMPLE"], "AKIAIOSFODNN7EXAMPLE", "--aws=hmac:"),
    (["srv", "AIzaSyABN0123456789abcdefghijABCDEFGHIJ"], "ABN0", "hmac:"),
]


@pytest.mark.parametrize(("argv", "secret", "kept"), ARGV_SECRETS, ids=[a[1] for a in ARGV_SECRETS])
def test_argv_redaction(argv: list[str], secret: str, kept: str) -> None:
    from addon.redact import Redactor, redact_argv

    out = redact_argv(argv, Redactor(b"k"))
    assert secret not in " ".join(out) and any(a.startswith(kept) for a in out), out
    assert out[0] == argv[0] and len(out) == len(argv)
    assert redact_argv(argv, Redactor(b"k")) == out  # stable: equal secrets correlate


def test_argv_redaction_keeps_ordinary_arguments() -> None:
    from addon.redact import Redactor, redact_argv

    argv = ["python", "-m", "weather", "--port", "8080", "--host=localhost:9000", "https://h/mcp?page=2", "A=1"]
    assert redact_argv(argv, Redactor(b"k")) == argv


ARGV_LOOK_ALIKES = [
    # token prefixes in ordinary arguments: too short, the wrong charset, or inside a longer word
    "sk-learn", "scikit-learn", "sk-notes.txt", "/home/u/sk-notes/sk-learn.py", "sk-proj-dashboard-frontend-v2",
    "ghp_cache", "github_pat_example", "glpat-test", "xoxb-not-a-token", "AKIAshort", "AIzaTest",
    "AKIAIOSFODNN7EXAMPLEX", "myghp_0123456789abcdefghijABCDEFGHIJKLMN", "da39a3ee5e6b4b0d3255bfef95601890afd80709",
    # `;` and `&` lists without a secret name, code with `;`, a header option naming no secret header
    "Server=db;Database=app;Encrypt=yes", "a=1&b=2", "import os; print(1)", "x=1; y=2",
    "--header", "Accept", "application/json",
    # names that merely contain `pass` or `pw`
    "--compass", "north", "--bypass-cache", "x", "--pass-through", "y", "--pwm", "z", "PASSENGER=1",
]  # fmt: skip


def test_argv_redaction_keeps_look_alikes() -> None:
    """Token prefixes, `pass`-like names and `;`/`&` lists that carry no credential are recorded as given."""
    from addon.redact import Redactor, redact_argv

    argv = ["srv", *ARGV_LOOK_ALIKES]
    assert redact_argv(argv, Redactor(b"k")) == argv


def test_argv_redaction_of_a_token_correlates_with_its_option() -> None:
    """A token hashed in place hashes as the value of a secret option does, so the two still correlate."""
    from addon.redact import Redactor, redact_argv

    token = "ghp_0123456789abcdefghijABCDEFGHIJKLMNOP"
    out = redact_argv(["srv", token, "--token", token, f"GITHUB_TOKEN={token}", f"Bearer {token}"], Redactor(b"k"))
    assert out[1] == out[3] == out[4].removeprefix("GITHUB_TOKEN=") == out[5].removeprefix("Bearer ")


def test_server_name_option(tmp_path: Path, clean_env: dict[str, str]) -> None:
    proc = run(tee_cmd(tmp_path, "cat", extra=("--server", "weather prod")), clean_env, b"x\n")
    assert proc.returncode == 0
    (path,) = list(tmp_path.glob("*.jsonl"))
    assert "_weather-prod_" in path.name
    assert {r[fmt.F_SERVER] for r in only_capture(tmp_path)} == {"weather prod"}
    assert path.stat().st_mode & 0o777 == 0o600


def test_options_after_the_double_dash_belong_to_the_server(tmp_path: Path, clean_env: dict[str, str]) -> None:
    cmd = tee_cmd(tmp_path / "c", "sh", "-c", 'echo "$@"', "sh", "--server", "x", "--out", "y", "--linger", "9")
    proc = run(cmd, clean_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"--server x --out y --linger 9\n"
    assert only_capture(tmp_path / "c")[0][fmt.F_SERVER] == "sh -c"


def test_cli_reports_bad_linger(tmp_path: Path, clean_env: dict[str, str]) -> None:
    proc = run(tee_cmd(tmp_path, "cat", linger=-1), clean_env)
    assert proc.returncode == 2
    assert b"--linger must be >= 0" in proc.stderr


# --- lifecycle with scripted servers ---------------------------------------------------------------


class Client:
    """The client side of a tee process: its stdin and stdout pipes, driven by hand."""

    def __init__(self, cmd: list[str], env: dict[str, str], **popen: Any) -> None:
        pipe = subprocess.PIPE
        self.proc = subprocess.Popen(cmd, stdin=pipe, stdout=pipe, stderr=pipe, env=env, **popen)
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self.stdin, self.stdout, self.stderr = self.proc.stdin, self.proc.stdout, self.proc.stderr

    def send(self, line: bytes) -> None:
        self.stdin.write(line)
        self.stdin.flush()

    def read_to_eof(self) -> bytes:
        return self.stdout.read()

    def finish(self, timeout: float = 60) -> tuple[int, bytes]:
        with contextlib.suppress(BrokenPipeError):
            self.stdin.close()
        rc = self.proc.wait(timeout)
        err = self.stderr.read()
        self.stdout.close()
        self.stderr.close()
        return rc, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def client_factory(clean_env: dict[str, str]):
    started: list[Client] = []

    def make(cmd: list[str], **popen: Any) -> Client:
        c = Client(cmd, clean_env, **popen)
        started.append(c)
        return c

    yield make
    for c in started:
        c.kill()


PROBE = b'{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}\n'


def test_crash_on_start(tmp_path: Path, client_factory) -> None:
    c = client_factory(tee_cmd(tmp_path, *scripted("crash-on-start")))
    # The client still holds stdin open: EOF on stdout must come from the server's death alone.
    assert c.read_to_eof() == b""
    rc, err = c.finish()
    assert rc == 3
    assert b"fatal: config file /etc/weather.toml not found\n" in err
    records = only_capture(tmp_path)
    exit_rec = lifecycle(records, fmt.EV_EXIT)
    assert exit_rec["code"] == 3 and exit_rec["status"] == 3 and "signal" not in exit_rec
    assert rebuild(records, None, fmt.STDERR) == b"fatal: config file /etc/weather.toml not found\n"
    ev = events(records)
    assert ev[0] == fmt.EV_SPAWN
    assert fmt.EV_SERVER_EOF in ev


def test_banner_then_answers(tmp_path: Path, client_factory) -> None:
    c = client_factory(tee_cmd(tmp_path, *scripted("banner-then-answers")))
    c.send(PROBE)
    banner = c.stdout.readline()
    answer = c.stdout.readline()
    assert banner.startswith(b"weather-server v1.2")
    assert answer == b'{"jsonrpc":"2.0","id":1,"result":{"echo":"server/discover"}}\n'
    c.send(b'{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}\n')
    assert c.stdout.readline() == b'{"jsonrpc":"2.0","id":2,"result":{"echo":"initialize"}}\n'
    rc, _ = c.finish()
    assert rc == 0
    records = only_capture(tmp_path)
    assert rebuild(records, fmt.S2C) == banner + answer + b'{"jsonrpc":"2.0","id":2,"result":{"echo":"initialize"}}\n'
    ev = events(records)
    assert ev.index(fmt.EV_CLIENT_EOF) < ev.index(fmt.EV_EXIT)
    assert fmt.EV_LINGER_END not in ev
    # Forwarding before recording, and one tee thread per direction: each answer is recorded after
    # the request that caused it.
    frames = [(r[fmt.F_DIR], fmt.payload_bytes(r)) for r in traffic(records) if r[fmt.F_TYPE] == fmt.FRAME]
    assert frames.index((fmt.C2S, PROBE[:-1])) < frames.index((fmt.S2C, answer[:-1]))


def test_banner_then_crash(tmp_path: Path, client_factory) -> None:
    c = client_factory(tee_cmd(tmp_path, *scripted("banner-then-crash")))
    c.send(PROBE)
    out = c.read_to_eof()
    assert out.startswith(b"weather-server v1.2") and out.count(b"\n") == 1
    rc, err = c.finish()
    assert rc == 1
    assert b"panic: database locked" in err
    records = only_capture(tmp_path)
    assert rebuild(records, fmt.C2S).startswith(PROBE)
    assert lifecycle(records, fmt.EV_EXIT)["code"] == 1
    assert rebuild(records, None, fmt.STDERR) == b"panic: database locked\n"


def test_never_answers(tmp_path: Path, client_factory) -> None:
    c = client_factory(tee_cmd(tmp_path, *scripted("never-answers")))
    c.send(PROBE)
    c.send(b'{"jsonrpc":"2.0","id":2,"method":"initialize"}\n')
    rc, _ = c.finish()  # the client gives up and closes stdin
    assert rc == 0
    records = only_capture(tmp_path)
    assert rebuild(records, fmt.S2C) == b""
    assert rebuild(records, fmt.C2S) == PROBE + b'{"jsonrpc":"2.0","id":2,"method":"initialize"}\n'
    ev = events(records)
    assert ev.index(fmt.EV_CLIENT_EOF) < ev.index(fmt.EV_EXIT)
    assert lifecycle(records, fmt.EV_EXIT)["status"] == 0


def test_linger_records_client_bytes_after_server_exit_until_linger_end(tmp_path: Path, client_factory) -> None:
    linger = 0.6
    c = client_factory(tee_cmd(tmp_path, *scripted("exit-after-first-line"), linger=linger))
    c.send(PROBE)
    assert c.read_to_eof() == b'{"jsonrpc":"2.0","id":1,"result":{"echo":"server/discover"}}\n'
    # The server is gone (stdout EOF reached us at once); the client, unaware, sends initialize.
    late = b'{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}\n'
    c.send(late)
    assert c.proc.wait(60) == 0  # the tee ends by itself after the linger window, stdin still open
    # Bytes written now can no longer be recorded by anyone: the tee is gone.
    with pytest.raises(BrokenPipeError):
        c.send(b'{"jsonrpc":"2.0","id":3,"method":"tools/list"}\n' * 10000)
    c.finish()
    records = only_capture(tmp_path)
    seqs = {r[fmt.F_EVENT]: r[fmt.F_SEQ] for r in traffic(records) if r[fmt.F_TYPE] == fmt.LIFECYCLE}
    late_frame = [r for r in traffic(records) if r[fmt.F_TYPE] == fmt.FRAME and fmt.payload_bytes(r) == late[:-1]]
    assert len(late_frame) == 1 and late_frame[0][fmt.F_DIR] == fmt.C2S
    # The client saw EOF only after server-eof was recorded (the tee records it under the same lock
    # that client frames need); `exit` may come before or after, whenever the tee reaps the server.
    assert seqs[fmt.EV_SERVER_EOF] < late_frame[0][fmt.F_SEQ] < seqs[fmt.EV_LINGER_END]
    # (Whether writing `late` to the server's stdin failed depends on how far its exit had got:
    # closing stdout comes before the process is gone. test_server_stdin_broken pins that down.)
    assert fmt.EV_CLIENT_EOF not in seqs
    # linger-end is the last word on the client side: nothing of the client recorded after it.
    assert max(r[fmt.F_SEQ] for r in traffic(records) if r.get(fmt.F_DIR) == fmt.C2S) < seqs[fmt.EV_LINGER_END]
    ends = lifecycle(records, fmt.EV_LINGER_END)[fmt.F_MONO] - lifecycle(records, fmt.EV_EXIT)[fmt.F_MONO]
    assert ends >= linger * 0.99  # the window is at least as long as asked (a correctness bound)


def test_linger_gate_in_process(tmp_path: Path) -> None:
    """After linger-end, client bytes are not recorded, even if the client keeps writing."""
    c_r, c_w = os.pipe()
    s_r, s_w = os.pipe()
    script = "import sys; sys.stdout.write(sys.stdin.readline())"
    tee = StdioTee([PY, "-c", script], out_dir=tmp_path, linger=0.2, stderr=io.BytesIO(), stdin_fd=c_r, stdout_fd=s_w)
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(tee.run()))
    t.start()
    os.write(c_w, b"first\n")
    got = b""
    while chunk := os.read(s_r, 100):
        got += chunk  # EOF arrives when the server exits: the tee replaced our stdout with /dev/null
    assert got == b"first\n"
    os.write(c_w, b"during linger\n")
    t.join(60)
    assert done == [0]
    c2s = tee.pumps[fmt.C2S]
    assert not c2s.done.is_set()  # parked on our pipe, which we still hold open
    os.write(c_w, b"after linger\n")  # read by the parked pump, but recorded by nobody
    os.close(c_w)
    assert c2s.join(10) and c2s.error is None
    records = only_capture(tmp_path)
    c2s_bytes = rebuild(records, fmt.C2S)
    assert c2s_bytes.startswith(b"first\n")
    assert b"after linger" not in c2s_bytes
    # linger-end is the last event of the exchange; only the recorder's closing record follows it
    assert events(records)[-2:] == [fmt.EV_LINGER_END, fmt.EV_RECORDER_END]
    for fd in (c_r, s_r, s_w):
        os.close(fd)


def test_server_stdin_broken(tmp_path: Path, client_factory) -> None:
    """The server closed its stdin: the tee's write fails with EPIPE, is recorded, and the tee lives on."""
    c = client_factory(tee_cmd(tmp_path, *scripted("close-stdin-then-answer")))
    c.send(PROBE)
    assert c.stdout.readline() == b'{"jsonrpc":"2.0","id":1,"result":{"echo":"server/discover"}}\n'
    late = b'{"jsonrpc":"2.0","id":2,"method":"initialize"}\n'
    c.send(late)  # the server's stdin is closed by now: it answered only after closing it
    c.send(late)
    assert c.read_to_eof() == b"bye\n"  # still relaying the other way
    rc, _ = c.finish()
    assert rc == 0
    records = only_capture(tmp_path)
    broken = lifecycle(records, fmt.EV_STDIN_BROKEN)  # exactly once
    assert "EPIPE" in broken["error"]
    assert rebuild(records, fmt.C2S) == PROBE + late + late  # recorded although not delivered
    frames = [r for r in traffic(records) if r.get(fmt.F_DIR) == fmt.C2S]
    assert frames[1][fmt.F_SEQ] > broken[fmt.F_SEQ]  # forwarding (and its failure) comes first


def _ready_pid(c: Client) -> int:
    line = c.stderr.readline()
    m = re.match(rb"ready pid=(\d+)", line)
    assert m, line
    return int(m.group(1))


def test_server_killed_from_outside(tmp_path: Path, client_factory) -> None:
    c = client_factory(tee_cmd(tmp_path, *scripted("answers-then-waits")))
    pid = _ready_pid(c)
    c.send(PROBE)
    assert c.stdout.readline() == b'{"jsonrpc":"2.0","id":1,"result":{"echo":"server/discover"}}\n'
    os.kill(pid, signal.SIGKILL)
    assert c.read_to_eof() == b""  # EOF propagated while the client still holds stdin open
    assert c.proc.wait(60) == 128 + signal.SIGKILL
    c.finish()
    records = only_capture(tmp_path)
    exit_rec = lifecycle(records, fmt.EV_EXIT)
    assert exit_rec["signal"] == "SIGKILL" and exit_rec["status"] == 137 and "code" not in exit_rec
    assert lifecycle(records, fmt.EV_SPAWN)["pid"] == pid
    ev = events(records)
    assert fmt.EV_LINGER_END in ev and fmt.EV_SIGNAL not in ev


def test_grandchild_holding_stdout_does_not_delay_eof(tmp_path: Path, client_factory) -> None:
    """The server exits but leaves a child that inherited its stdout and stderr: the client still gets EOF."""
    c = client_factory(tee_cmd(tmp_path, "sh", "-c", 'sleep 120 & echo "$!"; echo bye >&2'))
    line = c.stdout.readline()
    orphan = int(line)
    try:
        assert c.read_to_eof() == b""  # EOF although `sleep` holds the pipe's write end
        assert c.proc.wait(60) == 0
    finally:
        os.kill(orphan, signal.SIGKILL)
    c.finish()
    records = only_capture(tmp_path)
    assert rebuild(records, fmt.S2C) == line
    assert rebuild(records, None, fmt.STDERR) == b"bye\n"
    ev = events(records)
    assert ev.index(fmt.EV_EXIT) < ev.index(fmt.EV_SERVER_EOF) < ev.index(fmt.EV_LINGER_END)


def _terminal_defaults() -> None:
    """In the tee's process before it runs: the signals a terminal sends at their default disposition,
    as an interactive host leaves them. A suite run under `nohup` (SIGHUP ignored) or as a
    non-interactive shell's background job (SIGINT, SIGQUIT ignored) would hand the tee them ignored,
    which it rightly keeps so for the server (the test after this one), and the server would never end."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signal_to_tee_is_forwarded(tmp_path: Path, client_factory, sig: signal.Signals) -> None:
    c = client_factory(tee_cmd(tmp_path, *scripted("answers-then-waits")), preexec_fn=_terminal_defaults)
    _ready_pid(c)
    c.proc.send_signal(sig)
    assert c.read_to_eof() == b""
    rc = c.proc.wait(60)
    c.finish()
    records = only_capture(tmp_path)
    assert lifecycle(records, fmt.EV_SIGNAL)["signal"] == sig.name
    assert lifecycle(records, fmt.EV_SIGNAL)["forwarded"] is True
    exit_rec = lifecycle(records, fmt.EV_EXIT)
    # (Python turns SIGINT into KeyboardInterrupt, prints the traceback, then dies of SIGINT itself.)
    assert exit_rec["signal"] == sig.name and "code" not in exit_rec
    assert exit_rec["status"] == 128 + sig
    assert rc == exit_rec["status"]
    ev = events(records)
    assert ev.index(fmt.EV_SIGNAL) < ev.index(fmt.EV_EXIT)


def test_signals_the_host_ignores_stay_ignored_for_the_server(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """`nohup erascope record stdio -- CMD`, or a non-interactive shell's background job (SIGINT and
    SIGQUIT ignored): without the tee the server inherits the ignored signals, and a hangup does not
    end it. The tee must neither catch such a signal and pass it on to the server's group, nor give
    the server a default disposition in place of the ignored one."""
    ignored = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)

    def ignore() -> None:
        for sig in ignored:
            signal.signal(sig, signal.SIG_IGN)

    code = (
        "import signal, sys\n"
        "print(*(signal.getsignal(s) is signal.SIG_IGN for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)),"
        " flush=True)\n"
        "for line in sys.stdin: print(line, end='', flush=True)\n"
    )
    pipe = subprocess.PIPE
    proc = subprocess.Popen(
        tee_cmd(tmp_path, PY, "-c", code), stdin=pipe, stdout=pipe, stderr=pipe, env=clean_env, preexec_fn=ignore
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline() == b"True True True\n"  # as `nohup CMD` would have it
        for sig in ignored:
            proc.send_signal(sig)
        time.sleep(0.5)  # a signal passed on would have ended the server by now
        proc.stdin.write(b"still here\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"still here\n"
        proc.stdin.close()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    records = only_capture(tmp_path)
    assert fmt.EV_SIGNAL not in events(records)
    assert lifecycle(records, fmt.EV_EXIT)["code"] == 0


def test_one_socket_as_stdin_and_stdout_ends_when_the_server_exits(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """socat's `EXEC:`, inetd and systemd `Accept=yes` services give the command one socket as both its
    stdin and its stdout. Without the tee, the server's exit closes that socket and the client sees
    EOF at once; the tee's stdin (the same socket) must not hold it open through the linger window."""
    import socket

    host, theirs = socket.socketpair()
    code = "import sys; sys.stdout.write(sys.stdin.readline()); sys.stdout.flush()"
    proc = subprocess.Popen(
        tee_cmd(tmp_path, PY, "-c", code, linger=30), stdin=theirs, stdout=theirs, stderr=subprocess.PIPE, env=clean_env
    )
    theirs.close()
    try:
        host.sendall(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
        host.settimeout(15)  # well under the linger window
        got = b""
        while chunk := host.recv(65536):
            got += chunk
        assert got == b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
        host.shutdown(socket.SHUT_WR)  # the client's stdin EOF: the tee may go
        assert proc.wait(60) == 0
    finally:
        host.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    records = only_capture(tmp_path)
    assert rebuild(records, fmt.S2C) == b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    assert fmt.EV_SERVER_EOF in events(records)


GRACE = 0.4


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_server_ignoring_eof_is_ended_after_the_grace_period(tmp_path: Path, client_factory) -> None:
    """The client closed stdin; a server that ignores EOF and SIGTERM must not stay as an orphan."""
    c = client_factory(tee_cmd(tmp_path, *scripted("stubborn"), extra=("--grace", str(GRACE))))
    pid = _ready_pid(c)
    c.send(PROBE)
    assert c.stdout.readline() == b'{"jsonrpc":"2.0","id":1,"result":{"echo":"server/discover"}}\n'
    c.stdin.close()
    assert c.proc.wait(60) == 128 + signal.SIGKILL
    c.finish()
    assert not _alive(pid)
    records = only_capture(tmp_path)
    ends = [r for r in records if r.get(fmt.F_EVENT) == fmt.EV_TERMINATE]
    assert [(r["signal"], r["after"], r["grace"]) for r in ends] == [
        ("SIGTERM", fmt.EV_CLIENT_EOF, GRACE),
        ("SIGKILL", fmt.EV_CLIENT_EOF, GRACE),
    ]
    assert lifecycle(records, fmt.EV_EXIT)["signal"] == "SIGKILL"
    ev = events(records)
    assert ev.index(fmt.EV_CLIENT_EOF) < ev.index(fmt.EV_TERMINATE) < ev.index(fmt.EV_EXIT)


def test_signalled_tee_ends_a_server_that_ignores_the_signal(tmp_path: Path, client_factory) -> None:
    c = client_factory(tee_cmd(tmp_path, *scripted("stubborn"), extra=("--grace", str(GRACE))))
    pid = _ready_pid(c)
    c.proc.send_signal(signal.SIGTERM)  # the client still holds stdin open
    assert c.read_to_eof() == b""
    assert c.proc.wait(60) == 128 + signal.SIGKILL
    c.finish()
    assert not _alive(pid)
    records = only_capture(tmp_path)
    assert lifecycle(records, fmt.EV_SIGNAL)["forwarded"] is True
    ends = [r for r in records if r.get(fmt.F_EVENT) == fmt.EV_TERMINATE]
    assert [(r["signal"], r["after"]) for r in ends] == [("SIGTERM", fmt.EV_SIGNAL), ("SIGKILL", fmt.EV_SIGNAL)]
    ev = events(records)
    assert ev.index(fmt.EV_SIGNAL) < ev.index(fmt.EV_TERMINATE) < ev.index(fmt.EV_EXIT)


def _unread_then_sigterm(tmp_path: Path, env: dict[str, str], script: str, stream: str) -> tuple[int, int, int]:
    """Run the tee around `script` with a host that never reads the tee's `stream` (stdout or stderr):
    once that pipe is half full (the relay blocks on it), SIGTERM the tee. (exit status, the pipe's
    size, bytes left in the pipe: what the tee relayed.)"""
    proc = subprocess.Popen(
        tee_cmd(tmp_path, PY, "-c", script, extra=("--grace", str(GRACE))),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        pipe = proc.stdout if stream == "stdout" else proc.stderr
        assert pipe is not None
        fd = pipe.fileno()
        pipe_size = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _pipe_bytes(fd) < pipe_size // 2:
            time.sleep(0.01)
        time.sleep(0.2)  # the relay fills the pipe and blocks
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        return rc, pipe_size, _pipe_bytes(fd)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in (proc.stdin, proc.stdout, proc.stderr):
            if p is not None:
                p.close()


def test_signalled_tee_ends_although_the_client_stopped_reading(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """A host that stops reading the server's output (its pipe still open) and then sends SIGTERM: the
    server dies of the forwarded signal, as it would without the tee, but the tee waited forever to
    relay output nobody reads, deaf to further signals, its capture never closed (the `exit` and
    `signal` records held in memory until the host's SIGKILL). Told to stop, it waits `--grace` for
    the client to take the rest, then ends the client's stdout and closes the capture."""
    script = "import sys; sys.stdout.buffer.write(b'x' * 8_000_000 + b'\\n'); sys.stdout.flush(); sys.stdin.read()"
    rc, pipe_size, _ = _unread_then_sigterm(tmp_path, clean_env, script, "stdout")
    assert rc == 128 + signal.SIGTERM
    records = only_capture(tmp_path)
    assert records[-1][fmt.F_TYPE] == fmt.PART_END
    assert lifecycle(records, fmt.EV_SIGNAL)["forwarded"] is True
    assert lifecycle(records, fmt.EV_EXIT)["signal"] == "SIGTERM"
    ev = events(records)
    assert ev.index(fmt.EV_SIGNAL) < ev.index(fmt.EV_EXIT) < ev.index(fmt.EV_RELAY_ABANDONED)
    assert ev.index(fmt.EV_RELAY_ABANDONED) < ev.index(fmt.EV_SERVER_EOF)
    # What the tee read of the server's output and could neither relay nor record is said, not
    # silently gone: here the unfinished 8 MB line, of which the client's full pipe holds a part.
    abandoned = lifecycle(records, fmt.EV_RELAY_ABANDONED)
    assert abandoned["stream"] == "stdout"
    assert pipe_size // 2 <= abandoned["held"] <= 8_000_001
    assert not [r for r in records if r.get(fmt.F_TYPE) == fmt.FRAME and r.get(fmt.F_DIR) == fmt.S2C]


def test_what_a_host_that_stopped_reading_stderr_was_not_given_is_said(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """The host reads the server's stdout but never its stderr (many hosts leave it to a pipe): after
    SIGTERM the tee gives the stderr relay up after `--grace`, and says how much it held."""
    script = "import sys; sys.stderr.buffer.write(b'e' * 8_000_000); sys.stderr.flush(); sys.stdin.read()"
    rc, _, relayed = _unread_then_sigterm(tmp_path, clean_env, script, "stderr")
    assert rc == 128 + signal.SIGTERM
    records = only_capture(tmp_path)
    assert records[-1][fmt.F_TYPE] == fmt.PART_END
    abandoned = lifecycle(records, fmt.EV_RELAY_ABANDONED)
    assert abandoned["stream"] == "stderr" and abandoned["held"] > 0
    recorded = sum(r[fmt.F_LEN] for r in records if r.get(fmt.F_TYPE) == fmt.STDERR)
    # whatever the host's pipe got was read by the tee: recorded, or said to be held
    assert recorded + abandoned["held"] >= relayed > 0


def test_server_exiting_within_the_grace_period_is_left_alone(tmp_path: Path, client_factory) -> None:
    c = client_factory(tee_cmd(tmp_path, *scripted("never-answers"), extra=("--grace", "30")))
    c.send(PROBE)
    rc, _ = c.finish()
    assert rc == 0
    assert fmt.EV_TERMINATE not in events(only_capture(tmp_path))


def test_signal_during_linger_ends_it(tmp_path: Path, client_factory) -> None:
    """The server is gone and the user stops the tee: no waiting out a long linger window."""
    c = client_factory(tee_cmd(tmp_path, *scripted("exit-after-first-line"), linger=600))
    c.send(PROBE)
    assert c.read_to_eof().startswith(b'{"jsonrpc":"2.0","id":1')
    c.proc.send_signal(signal.SIGTERM)
    assert c.proc.wait(60) == 0  # the server's status, not the signal's; long before 600 s
    c.finish()
    records = only_capture(tmp_path)
    sig = lifecycle(records, fmt.EV_SIGNAL)
    # `forwarded` depends on whether the tee had reaped the server yet; both end the linger.
    assert sig["signal"] == "SIGTERM" and isinstance(sig["forwarded"], bool)
    ev = events(records)
    assert ev.index(fmt.EV_SIGNAL) < ev.index(fmt.EV_LINGER_END)
    assert ev.index(fmt.EV_EXIT) < ev.index(fmt.EV_LINGER_END)


_SIGNALLED_WHILE_STARTING = """
import os, signal, sys
from pathlib import Path
from addon.stdio_tee import StdioTee

out, when, cmd = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
tee = StdioTee(cmd, out_dir=out, linger=0.3, grace=30, stderr=sys.stderr.buffer)
spawn = tee._spawn

def signalled_spawn():
    # The host's SIGTERM, placed in the window the tee's command has for it to land in at random:
    # just before the server starts, or just after (the server runs, the tee has not noted it yet).
    if when == "before":
        os.kill(os.getpid(), signal.SIGTERM)
    proc = spawn()
    if when == "after":
        os.kill(os.getpid(), signal.SIGTERM)
    return proc

tee._spawn = signalled_spawn
sys.exit(tee.run())
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_signal_while_the_server_starts_is_forwarded_and_the_capture_closed(
    tmp_path: Path, clean_env: dict[str, str], when: str
) -> None:
    """A host may stop the tee as it starts (it is shutting down, or gave up on the server). A SIGTERM
    that came before the tee's handlers were in place killed it outright: a capture part left empty or
    never closed, no `signal` or `exit` record, and a server that ignores stdin EOF left running as an
    orphan. It must be forwarded once the server runs, and the capture closed as for any signal."""
    out = tmp_path / "captures"
    server = scripted("answers-then-waits")  # ignores stdin EOF: only a signal ends it
    proc = subprocess.Popen(
        [PY, "-c", _SIGNALLED_WHILE_STARTING, str(out), when, *server],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env,
    )  # fmt: skip
    pid = None
    try:
        assert proc.stdout is not None
        assert proc.stdout.read() == b""  # the client still holds stdin open: EOF comes from the server's end
        rc = proc.wait(60)
        records = read_records(capture_files(out))
        spawn = [r for r in records if r.get(fmt.F_EVENT) == fmt.EV_SPAWN]
        pid = spawn[0]["pid"] if spawn else None
        assert rc == 128 + signal.SIGTERM
        assert records[-1][fmt.F_TYPE] == fmt.PART_END
        assert lifecycle(records, fmt.EV_SIGNAL)["forwarded"] is True
        assert lifecycle(records, fmt.EV_EXIT)["signal"] == "SIGTERM"
        ev = events(records)
        assert ev.index(fmt.EV_SPAWN) < ev.index(fmt.EV_SIGNAL) < ev.index(fmt.EV_EXIT)
        assert pid is not None and not _alive(pid)
    finally:
        for p in (proc.stdin, proc.stdout, proc.stderr):
            if p is not None:
                p.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pid is not None and _alive(pid):  # the orphan a tee killed too early left behind
            os.kill(pid, signal.SIGKILL)


# --- launchers: the real server is the tee's grandchild (npx, uvx, `sh -c`, node wrappers) --------


def _running(pid: int) -> bool:
    """True while `pid` runs: not gone, and not merely a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: a zombie counts as running
        return _alive(pid)
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def _gone_soon(pid: int, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while _running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _kill_if_running(pid: int) -> None:
    """Cleanup for a test whose tee left `pid` behind (its own child's pid, read a moment ago)."""
    if _running(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


_PY_LAUNCHER = (
    "import subprocess, sys; p = subprocess.Popen(sys.argv[1:]); "
    "print(p.pid, file=sys.stderr, flush=True); sys.exit(p.wait())"
)
_LAUNCHERS = {
    # dies of SIGTERM, and so does the server it started
    "python": ([PY, "-c", _PY_LAUNCHER, PY, "-c", "import time; time.sleep(60)"], [signal.SIGTERM]),
    # ignores SIGTERM, and so does the server it starts (an ignored signal stays ignored across exec)
    "sh": (["sh", "-c", 'trap "" TERM; sleep 60 & echo "$!" >&2; wait'], [signal.SIGTERM, signal.SIGKILL]),
}


@pytest.mark.parametrize("launcher", sorted(_LAUNCHERS))
def test_a_server_started_by_a_launcher_is_ended_with_it(tmp_path: Path, client_factory, launcher: str) -> None:
    """A launcher that outlives the client's EOF is ended after `--grace`, and the server it started
    with it: the tee signals the server's process group, not only the launcher. Signalling the launcher
    alone left its child running as an orphan (parent pid 1), though the tee's exit status said it had
    been ended."""
    cmd, steps = _LAUNCHERS[launcher]
    c = client_factory(tee_cmd(tmp_path, *cmd, extra=("--grace", str(GRACE))))
    grandchild = int(c.stderr.readline())
    try:
        c.stdin.close()  # the client is done; neither the launcher nor its child reads stdin
        assert c.proc.wait(60) == 128 + steps[-1]
        assert _gone_soon(grandchild), f"the launcher's child {grandchild} outlived the tee"
    finally:
        _kill_if_running(grandchild)
    c.finish()
    records = only_capture(tmp_path)
    ends = [r for r in records if r.get(fmt.F_EVENT) == fmt.EV_TERMINATE]
    assert [(r["signal"], r["after"]) for r in ends] == [(sig.name, fmt.EV_CLIENT_EOF) for sig in steps]
    assert lifecycle(records, fmt.EV_EXIT)["signal"] == steps[-1].name


def test_a_launcher_dying_of_a_forwarded_signal_does_not_leave_its_server_behind(
    tmp_path: Path, client_factory
) -> None:
    """The host stops the tee with SIGTERM; the launcher dies of it at once, the server it started
    ignores it. The tee exits with the launcher's status, but only once the whole group is gone: what
    outlives `--grace` gets SIGTERM again, then SIGKILL, each with a `terminate` record."""
    server = "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    server += "print(os.getpid(), file=sys.stderr, flush=True); time.sleep(60)"
    launcher = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
    c = client_factory(tee_cmd(tmp_path, PY, "-c", launcher, PY, "-c", server, extra=("--grace", str(GRACE))))
    grandchild = int(c.stderr.readline())  # it ignores SIGTERM from now on
    try:
        c.proc.send_signal(signal.SIGTERM)  # the client still holds stdin open
        assert c.proc.wait(60) == 128 + signal.SIGTERM  # the launcher's own end
        assert _gone_soon(grandchild), f"the launcher's child {grandchild} outlived the tee"
    finally:
        _kill_if_running(grandchild)
    c.finish()
    records = only_capture(tmp_path)
    assert lifecycle(records, fmt.EV_SIGNAL)["forwarded"] is True
    assert lifecycle(records, fmt.EV_EXIT)["signal"] == "SIGTERM"
    ends = [r for r in records if r.get(fmt.F_EVENT) == fmt.EV_TERMINATE]
    assert [(r["signal"], r["after"]) for r in ends] == [("SIGTERM", fmt.EV_SIGNAL), ("SIGKILL", fmt.EV_SIGNAL)]
    assert records[-1][fmt.F_TYPE] == fmt.PART_END


_COUNTS_SIGINT = """
import os, signal, sys, time
r, w = os.pipe()
os.set_blocking(w, False)
signal.signal(signal.SIGINT, lambda *_: None)
signal.set_wakeup_fd(w, warn_on_full_buffer=False)  # a byte per delivered signal, though handlers coalesce
print("ready", file=sys.stderr, flush=True)
os.read(r, 1)
time.sleep(0.5)  # a second SIGINT, if one comes, comes within this
os.set_blocking(r, False)
try:
    more = len(os.read(r, 100))
except BlockingIOError:
    more = 0
print(f"sigints={1 + more}", file=sys.stderr, flush=True)
"""


_DEFAULT_SIGNALS = (
    "import os, signal, sys\n"
    "for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGHUP, signal.SIGTERM):\n"
    "    signal.signal(s, signal.SIG_DFL)\n"
    "os.execv(sys.argv[1], sys.argv[1:])"
)
"""Run by `_on_a_terminal` before the session's program: its arguments, with those signals at their defaults."""


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """Start `argv` leading a session whose controlling terminal is a new pty, as a terminal emulator
    starts a shell; returns the process and the pty's controlling side.

    util-linux `setsid --ctty` makes the pty the controlling terminal: `pty.fork` did it in a forked
    copy of this multi-threaded process, which Python warns may deadlock the child. The session starts
    with the terminal signals at their defaults, as a terminal emulator's shell does: an ignored signal
    is inherited through exec, and a shell and the tee keep it ignored (as they should), so a test run
    whose process came to ignore SIGQUIT saw Ctrl-\\ do nothing.
    """
    master, slave = os.openpty()
    try:
        setsid = shutil.which("setsid") or "/usr/bin/setsid"
        proc = subprocess.Popen(
            [setsid, "--ctty", sys.executable, "-c", _DEFAULT_SIGNALS, *argv],
            stdin=slave, stdout=slave, stderr=slave, env=env,
        )  # fmt: skip
    finally:
        os.close(slave)
    return proc, master


def test_ctrl_c_in_a_terminal_reaches_the_server_once(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """`erascope record stdio -- server` run in a terminal, and Ctrl-C: the server gets one SIGINT, as
    it would without the tee. In the terminal's foreground process group with the tee, it got the
    terminal's and then the one the tee forwarded; in a session of its own, only the tee's."""
    proc, master = _on_a_terminal(tee_cmd(tmp_path, PY, "-c", _COUNTS_SIGINT), clean_env)
    out, pressed = b"", False
    try:
        deadline = time.monotonic() + 60
        while b"sigints=" not in out and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    out += os.read(master, 4096)
                except OSError:  # EIO: nothing holds the terminal any more
                    break
            if b"ready" in out and not pressed:
                os.write(master, b"\x03")  # Ctrl-C: SIGINT to the terminal's foreground process group
                pressed = True
        status = proc.wait(timeout=30)
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert re.search(rb"sigints=(\d+)", out) is not None, out
    assert re.search(rb"sigints=(\d+)", out)[1] == b"1", out
    assert status == 0
    assert lifecycle(only_capture(tmp_path), fmt.EV_SIGNAL)["forwarded"] is True


def _state(pid: int) -> str:
    """The process state letter from /proc (`T`: stopped), or `gone`."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return "gone"
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


class _Terminal:
    """An interactive bash on a real pty, as a user's terminal: its jobs get the terminal's Ctrl-C, Ctrl-\\
    and Ctrl-Z, and it stops and continues them (`fg`) with job control."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc, self.master = _on_a_terminal(["/bin/bash", "--norc", "--noprofile", "-i"], {**env, "PS1": "$ "})
        self.out = b""

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def read_until(self, pattern: bytes, timeout: float = 30) -> re.Match[bytes]:
        deadline = time.monotonic() + timeout
        while (found := re.search(pattern, self.out)) is None:
            assert time.monotonic() < deadline, self.out
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                with contextlib.suppress(OSError):  # EIO: nothing holds the terminal any more
                    self.out += os.read(self.master, 4096)
        return found

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.close(self.master)


_SLEEPS = "import os, sys, time; print(f'server={os.getpid()}', file=sys.stderr, flush=True); time.sleep(60)"


def _until(check: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _signals_and_exit(out: Path) -> tuple[list[tuple[str, bool]], str | None]:
    """The closed capture's `signal` records (signal, forwarded) and the signal its `exit` names."""
    records = only_capture(out)
    assert records[-1][fmt.F_TYPE] == fmt.PART_END
    signals = [(r["signal"], r["forwarded"]) for r in records if r.get(fmt.F_EVENT) == fmt.EV_SIGNAL]
    return signals, lifecycle(records, fmt.EV_EXIT).get("signal")


def test_ctrl_backslash_in_a_terminal_quits_the_server_through_the_tee(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """Ctrl-\\ sends SIGQUIT to the terminal's foreground group: without the tee it quits the server. In a
    session of its own the server got nothing: the tee died of it (`^\\Quit`), the server ran on as an
    orphan, and the capture was never closed. The tee forwards it like SIGTERM and exits with the
    server's status."""
    term = _Terminal(clean_env)
    server = 0
    try:
        term.type(shlex.join(tee_cmd(tmp_path, PY, "-c", _SLEEPS)).encode() + b"; echo status=$?\n")
        server = int(term.read_until(rb"server=(\d+)")[1])
        term.type(b"\x1c")  # Ctrl-\
        status = int(term.read_until(rb"status=(\d+)")[1])
        assert _gone_soon(server), f"the server {server} outlived Ctrl-\\"
        assert status == 128 + signal.SIGQUIT
    finally:
        if server:
            _kill_if_running(server)
        term.close()
    assert _signals_and_exit(tmp_path) == ([("SIGQUIT", True)], "SIGQUIT")


def test_ctrl_z_in_a_terminal_stops_and_fg_continues_the_server_with_the_tee(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """Ctrl-Z stops the foreground job, `fg` continues it: without the tee the server itself. The tee
    stopped alone while the server ran on; it stops the server's group with it, and continues it when
    continued. Time spent stopped does not count toward `--grace`."""
    term = _Terminal(clean_env)
    server = 0
    try:
        term.type(shlex.join(tee_cmd(tmp_path, PY, "-c", _SLEEPS)).encode() + b"; echo status=$?\n")
        server = int(term.read_until(rb"server=(\d+)")[1])
        tee = _parent(server)
        term.type(b"\x1a")  # Ctrl-Z
        assert int(term.read_until(rb"status=(\d+)")[1]) == 128 + signal.SIGTSTP  # bash saw its job stop
        assert _until(lambda: _state(server) == "T"), f"the server {server} runs on ({_state(server)}) after Ctrl-Z"
        assert _state(tee) == "T"
        term.out = b""
        term.type(b"fg; echo status=$?\n")
        assert _until(lambda: _state(server) not in ("T", "t")), "the server stays stopped after fg"
        assert _until(lambda: _state(tee) not in ("T", "t"))
        term.type(b"\x03")  # Ctrl-C: the job runs in the foreground again
        assert int(term.read_until(rb"status=(\d+)")[1]) == 128 + signal.SIGINT
        assert _gone_soon(server)
    finally:
        if server:
            _kill_if_running(server)
        term.close()
    assert _signals_and_exit(tmp_path) == ([("SIGTSTP", True), ("SIGCONT", True), ("SIGINT", True)], "SIGINT")


_SHUTS_DOWN_ON_SIGINT = """
import os, signal, sys, time
asked = []
signal.signal(signal.SIGINT, lambda *_: asked.append(1))
print(f"server={os.getpid()}", file=sys.stderr, flush=True)
while not asked:
    time.sleep(0.01)
print("shutting down", file=sys.stderr, flush=True)
for _ in range(20):  # 1 s of its own running time: a pause while stopped does not shorten it much
    time.sleep(0.05)
"""


def test_time_stopped_by_ctrl_z_does_not_count_toward_grace(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """Ctrl-C, then Ctrl-Z during the server's graceful shutdown, then `fg` after longer than `--grace`:
    the stopped server had no time to finish, so it must not get SIGTERM the moment it continues."""
    term = _Terminal(clean_env)
    server = 0
    cmd = tee_cmd(tmp_path, PY, "-c", _SHUTS_DOWN_ON_SIGINT, extra=("--grace", "3"))
    try:
        term.type(shlex.join(cmd).encode() + b"; echo status=$?\n")
        server = int(term.read_until(rb"server=(\d+)")[1])
        term.out = b""  # the command line, echoed, says "shutting down" too
        term.type(b"\x03")  # Ctrl-C: the server starts shutting down
        term.read_until(rb"shutting down\r\n")
        term.type(b"\x1a")  # Ctrl-Z
        assert int(term.read_until(rb"status=(\d+)")[1]) == 128 + signal.SIGTSTP
        time.sleep(3.5)  # longer than --grace
        term.out = b""
        term.type(b"fg; echo status=$?\n")
        assert int(term.read_until(rb"status=(\d+)")[1]) == 0  # its shutdown done, not cut short by SIGTERM
    finally:
        if server:
            _kill_if_running(server)
        term.close()
    records = only_capture(tmp_path)
    assert [r for r in records if r.get(fmt.F_EVENT) == fmt.EV_TERMINATE] == []
    assert lifecycle(records, fmt.EV_EXIT)["code"] == 0


_SHUTS_DOWN_SLOWLY = """
import os, signal, sys, time
n = 0
def on_term(signum, frame):
    global n
    n += 1
    print(f"SIGTERM #{n}", file=sys.stderr, flush=True)
    if n >= 2:
        os._exit(9)  # a second SIGTERM: no more graceful shutdown
signal.signal(signal.SIGTERM, on_term)
print(os.getpid(), file=sys.stderr, flush=True)
while n == 0:
    time.sleep(0.02)
time.sleep(4)  # graceful shutdown
print("graceful", file=sys.stderr, flush=True)
"""


def test_a_second_signal_reaches_the_server_after_its_launcher_died(tmp_path: Path, client_factory) -> None:
    """`sh -c 'python server.py'`: sh dies of the host's first SIGTERM, the server starts a slow graceful
    shutdown, and the host's second SIGTERM means "now". Once sh was reaped the second was recorded
    `forwarded: false` and never reached the server, which ran its whole shutdown."""
    launcher = ["sh", "-c", '"$0" -c "$1"; exit $?', PY, _SHUTS_DOWN_SLOWLY]  # sh waits: no exec
    c = client_factory(tee_cmd(tmp_path, *launcher, extra=("--grace", "10")))
    server = int(c.stderr.readline())
    sh = _parent(server)
    try:
        c.proc.send_signal(signal.SIGTERM)
        assert c.stderr.readline() == b"SIGTERM #1\n"
        assert _gone_soon(sh)
        time.sleep(0.3)  # and reaped by the tee
        c.proc.send_signal(signal.SIGTERM)
        assert c.stderr.readline() == b"SIGTERM #2\n"
        assert c.proc.wait(3) == 128 + signal.SIGTERM  # sh's status; the server was done at once
    finally:
        _kill_if_running(server)
    c.finish()
    records = only_capture(tmp_path)
    signals = [(r["signal"], r["forwarded"]) for r in records if r.get(fmt.F_EVENT) == fmt.EV_SIGNAL]
    assert signals == [("SIGTERM", True), ("SIGTERM", True)]


_LATE_SIGNAL = """
import os, signal, sys
import addon.stdio_tee
from analyzer.cli import main

run_tee = addon.stdio_tee.run_tee

def run_then_signalled(*args, **kwargs):
    status = run_tee(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)  # the host's signal, as the tee is about to exit
    return status

addon.stdio_tee.run_tee = run_then_signalled
sys.argv = ["erascope", "record", "stdio", "--out", sys.argv[1], "--linger", "0", "--", "sh", "-c", "exit 3"]
main()
"""


def test_a_signal_as_the_command_exits_does_not_change_its_status(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """A signal that came after the tee had restored the default handlers but before the command exited
    killed it: the host saw -15, not the server's status, though the capture was complete."""
    proc = subprocess.run(
        [PY, "-c", _LATE_SIGNAL, str(tmp_path)], stdin=subprocess.DEVNULL, capture_output=True, env=clean_env,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert lifecycle(only_capture(tmp_path), fmt.EV_EXIT)["code"] == 3


def test_spawn_failure_exit_statuses(tmp_path: Path, clean_env: dict[str, str]) -> None:
    missing = run(tee_cmd(tmp_path / "a", str(tmp_path / "no-such-server")), clean_env)
    assert missing.returncode == 127
    assert b"cannot start server" in missing.stderr
    assert lifecycle(only_capture(tmp_path / "a"), fmt.EV_SPAWN_FAILED)["status"] == 127
    not_exec = tmp_path / "server.sh"
    not_exec.write_text("#!/bin/sh\necho hi\n")
    not_exec.chmod(0o644)
    # We run as root, who may execute anything with an x bit: without any x bit exec still fails.
    denied = run(tee_cmd(tmp_path / "b", str(not_exec)), clean_env)
    assert denied.returncode == 126
    assert "EACCES" in lifecycle(only_capture(tmp_path / "b"), fmt.EV_SPAWN_FAILED)["error"]


def test_relays_and_records_with_stderr_closed(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """A host may start the server command with fd 2 closed (`2>&-`); `cat` runs fine so, and so must
    the tee around it: the server's stderr and the tee's own messages go nowhere, the traffic is
    relayed and recorded, and no capture part ever lands on fd 2."""
    data = b'{"jsonrpc":"2.0","id":1,"method":"initialize"}\n' * 3
    server = ["sh", "-c", "cat; echo to-stderr >&2"]
    proc = subprocess.run(
        tee_cmd(tmp_path, *server), input=data, stdout=subprocess.PIPE, env=clean_env, timeout=120,
        preexec_fn=lambda: os.close(2),
    )  # fmt: skip
    assert proc.returncode == 0
    assert proc.stdout == data
    records = only_capture(tmp_path)
    assert rebuild(records, fmt.C2S) == data and rebuild(records, fmt.S2C) == data
    assert rebuild(records, None, fmt.STDERR) == b"to-stderr\n"


def _nonblocking(fd: int) -> None:
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)


def test_nonblocking_stdout_and_a_slow_client_lose_nothing(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """The host may hand the tee a stdout whose file description is O_NONBLOCK (a Node host's pipes, say).
    When the client reads slowly the pipe fills and a write fails with EAGAIN: the tee must wait for
    room, not take the client for gone, stop relaying, and record bytes the client never got."""
    r, w = os.pipe()
    _nonblocking(w)
    data = b"".join(b'{"id":%d,"x":"%s"}\n' % (i, b"b" * 1000) for i in range(6000))  # far beyond every buffer
    feeder: list[subprocess.Popen[bytes]] = []
    try:
        proc = subprocess.Popen(tee_cmd(tmp_path, "cat"), stdin=subprocess.PIPE, stdout=w, env=clean_env)
        feeder.append(proc)
        os.close(w)
        assert proc.stdin is not None
        writer = threading.Thread(target=lambda: (proc.stdin.write(data), proc.stdin.close()), daemon=True)
        writer.start()
        deadline = time.monotonic() + 60
        # The client reads nothing until the pipe is full, then a while more: the tee meets EAGAIN.
        while time.monotonic() < deadline and _pipe_bytes(r) < fcntl.fcntl(r, fcntl.F_GETPIPE_SZ):
            time.sleep(0.01)
        time.sleep(0.3)
        got = bytearray()
        while chunk := os.read(r, 1 << 20):
            got += chunk
        assert proc.wait(60) == 0
        writer.join(60)
    finally:
        os.close(r)
        for p in feeder:
            with contextlib.suppress(OSError):
                p.kill()
    assert bytes(got) == data
    records = only_capture(tmp_path)
    assert rebuild(records, fmt.S2C) == data and not any(r.get(fmt.F_EVENT) == fmt.EV_STDIN_BROKEN for r in records)


def _pipe_bytes(fd: int) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


_STDERR_HEAVY = (
    "import sys\n"
    "err = sys.stderr.buffer\n"
    "for i in range(4000):\n"
    "    err.write(b'log %d ' % i + b'e' * 1000 + b'\\n')\n"
    "    err.flush()\n"
    "sys.stdout.buffer.write(sys.stdin.buffer.read())\n"
)


def test_nonblocking_stderr_and_a_slow_reader_lose_nothing(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """The tee's fd 2, where the server's stderr passes through, may be O_NONBLOCK too (a pty or pipe
    the host shares). When its reader is slow the pipe fills and a write fails with EAGAIN: the tee
    must wait for room, not stop passing stderr through for good while the capture records on, and
    the relayed stdin/stdout traffic goes on unharmed."""
    r, w = os.pipe()
    _nonblocking(w)
    expected = b"".join(b"log %d " % i + b"e" * 1000 + b"\n" for i in range(4000))  # far beyond the pipe
    data = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n' * 20
    proc = subprocess.Popen(
        tee_cmd(tmp_path, PY, "-c", _STDERR_HEAVY), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=w,
        env=clean_env,
    )  # fmt: skip
    os.close(w)
    out: list[bytes] = []
    relay = threading.Thread(target=lambda: out.append(proc.communicate(data, timeout=120)[0]), daemon=True)
    try:
        relay.start()
        deadline = time.monotonic() + 60
        # Nobody reads fd 2 until its pipe is (about) full, then a while more: the tee meets EAGAIN
        # there. Not exactly full: a write cut short can leave a page of the pipe partly used.
        while time.monotonic() < deadline and _pipe_bytes(r) < fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) // 2:
            time.sleep(0.01)
        time.sleep(0.3)
        passed = bytearray()
        while chunk := os.read(r, 1 << 20):
            passed += chunk
        relay.join(120)
    finally:
        os.close(r)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and out == [data]
    assert bytes(passed) == expected
    records = only_capture(tmp_path)
    assert rebuild(records, None, fmt.STDERR) == expected
    assert rebuild(records, fmt.C2S) == data and rebuild(records, fmt.S2C) == data


def test_nonblocking_stdin_is_read_when_the_client_writes(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """A stdin whose file description is O_NONBLOCK and empty makes a read fail with EAGAIN: the tee
    must wait for the client's bytes, not lose its client-to-server pump (and hang)."""
    r, w = os.pipe()
    _nonblocking(r)
    line = b'{"jsonrpc":"2.0","id":1,"method":"initialize"}\n'
    proc = subprocess.Popen(tee_cmd(tmp_path, "cat"), stdin=r, stdout=subprocess.PIPE, env=clean_env)
    os.close(r)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not capture_files(tmp_path):  # the tee is up, its pumps too
            time.sleep(0.01)
        time.sleep(0.3)  # the empty pipe is read (EAGAIN) before the client writes
        os.write(w, line)
        os.close(w)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and out == line
    records = only_capture(tmp_path)
    assert rebuild(records, fmt.C2S) == line and rebuild(records, fmt.S2C) == line


# --- capture write failures never break the relay --------------------------------------------------

LOSS = re.compile(rb"capture incomplete: (\d+) record\(s\) lost")


def test_unwritable_out_dir(tmp_path: Path, clean_env: dict[str, str]) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a regular file")
    data = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(50)) + b"tail"
    proc = run(tee_cmd(blocker / "captures", *scripted("never-answers")), clean_env, data)
    assert proc.returncode == 0
    assert proc.stderr.count(b"cannot write capture") == 1
    m = LOSS.search(proc.stderr)
    assert m and int(m.group(1)) >= 51 + 3  # frames plus spawn, client-eof, exit at least
    proc = run(tee_cmd(blocker / "captures", "cat"), clean_env, data)
    assert proc.stdout == data and proc.returncode == 0


def test_disk_full_while_recording(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """RLIMIT_FSIZE makes capture writes fail with EFBIG part-way, as a full disk would."""
    limit = 8192

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    data = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{}}\n' % i for i in range(400))
    proc = subprocess.run(
        tee_cmd(tmp_path, "cat"), input=data, capture_output=True, env=clean_env, timeout=120, preexec_fn=limited
    )
    assert proc.stdout == data
    assert proc.returncode == 0
    assert proc.stderr.count(b"cannot write capture") == 1
    assert b"File too large" in proc.stderr
    m = LOSS.search(proc.stderr)
    assert m
    lost = int(m.group(1))
    (path,) = list(tmp_path.glob("*.jsonl"))
    assert path.stat().st_size <= limit
    written = 0
    for line in path.read_bytes().split(b"\n"):
        with contextlib.suppress(orjson.JSONDecodeError):
            written += orjson.loads(line)[fmt.F_SEQ] > 0
    # Every record was either written or counted as lost: 400 lines each way, plus spawn,
    # client-eof, exit, server-eof and recorder-end.
    assert written + lost == 2 * 400 + 5
    assert written > 0 and lost > 0


def _frames_in(path: Path) -> int:
    whole = path.read_bytes().rpartition(b"\n")[0]  # a line being written is not read half
    return sum(orjson.loads(line)[fmt.F_TYPE] == fmt.FRAME for line in whole.splitlines())


def test_capture_directory_removed_while_recording(tmp_path: Path, client_factory) -> None:
    """`rm -rf OUT` under a running tee: the open part's records went with it. That loss is reported
    on stderr with its count, and recording goes on in a new part of a new directory, which starts
    with a `capture-error` saying what was lost (not silently into the unlinked file until exit)."""
    out = tmp_path / "captures"
    c = client_factory(tee_cmd(out, "cat"))
    first = [b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(50)]
    for line in first:
        c.send(line)
        assert c.stdout.readline() == line
    (part,) = capture_files(out)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _frames_in(part) < 2 * len(first):  # some records to lose
        time.sleep(0.01)
    removed = part.open("rb")  # what the tee writes into the part after its removal is read here
    shutil.rmtree(out)
    second = [b'{"jsonrpc":"2.0","id":%d,"method":"tools/list"}\n' % i for i in range(50, 80)]
    for line in second:
        c.send(line)
        assert c.stdout.readline() == line
    rc, err = c.finish()
    with removed:
        gone = [orjson.loads(line) for line in removed.read().splitlines()]
    in_removed = len(gone) - 1  # all but its header
    assert rc == 0
    assert err.count(b"was removed while being written: %d record(s) in it lost" % in_removed) == 1
    m = LOSS.search(err)
    assert m and int(m.group(1)) == in_removed
    (new_part,) = capture_files(out)
    assert new_part.name.endswith(".001.jsonl")
    records = read_records(new_part)
    assert records[0]["previous"] == part.name
    assert records[1][fmt.F_TYPE] == fmt.CAPTURE_ERROR and records[1]["lost"] == in_removed
    # Recording went on: the frames missing from the removed part are in the new one.
    for direction in (fmt.C2S, fmt.S2C):
        assert rebuild(gone, direction) + rebuild(records, direction) == b"".join(first + second)


def test_spawn_names_the_host_process_that_started_the_tee(tmp_path: Path, clean_env: dict[str, str]) -> None:
    # The host (the MCP client) is the tee's parent: here a Python process that runs the tee.
    host = "import subprocess, sys; subprocess.run(sys.argv[1:], input=b'hi\\n', capture_output=True)"
    tee = tee_cmd(tmp_path, "cat")
    proc = run([PY, "-c", host, *tee], clean_env)
    assert proc.returncode == 0, proc.stderr
    spawn = lifecycle(only_capture(tmp_path), fmt.EV_SPAWN)
    assert isinstance(spawn["parent_pid"], int) and spawn["parent_pid"] not in (os.getpid(), 1)
    assert spawn["parent_argv"] == [PY, "-c", host, *tee]


def test_parent_command_line_is_redacted_like_the_servers(tmp_path: Path, clean_env: dict[str, str]) -> None:
    host = "import subprocess, sys; subprocess.run(sys.argv[3:], input=b'hi\\n', capture_output=True)"
    proc = run([PY, "-c", host, "--token=tok-host-123", "x", *tee_cmd(tmp_path, "cat")], clean_env)
    assert proc.returncode == 0, proc.stderr
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("*.jsonl"))
    assert b"tok-host-123" not in raw
    spawn = lifecycle(only_capture(tmp_path), fmt.EV_SPAWN)
    assert spawn["parent_argv"][3].startswith("--token=hmac:")


def test_a_command_line_and_a_directory_that_are_not_utf8_are_recorded(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """Arguments and the working directory are the host's bytes, which need not be UTF-8 (Python hands
    them over with lone surrogates, which no capture line can hold): the tee started no server and
    wrote no capture at all. They are recorded with those bytes written `%XX`, and the server key,
    which names the capture file and labels metrics, is printable text."""
    cwd = tmp_path / os.fsdecode(b"dir\xfe")
    cwd.mkdir()
    data = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    shell = os.fsdecode(b"s\xffh")
    (cwd / shell).symlink_to(shutil.which("sh") or "/bin/sh")
    proc = subprocess.run(
        tee_cmd(tmp_path, "./" + shell, "-c", "cat", os.fsdecode(b"--name=\xff\x1b")), input=data,
        capture_output=True, env=clean_env, timeout=120, cwd=cwd,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == data
    records = only_capture(tmp_path)
    header, spawn = records[0], next(r for r in records if r.get("event") == fmt.EV_SPAWN)
    assert header["argv"] == spawn["argv"] == ["./s%FFh", "-c", "cat", "--name=%FF\x1b"]
    assert spawn["cwd"].endswith("/dir%FE")
    assert header[fmt.F_SERVER].isprintable() and "%FF" in header[fmt.F_SERVER]
    assert rebuild(records, fmt.C2S) == data and rebuild(records, fmt.S2C) == data


PROGRESS = """
import sys
for i in range(20000):
    sys.stderr.buffer.write(b"\\rprogress %06d" % i)
    sys.stderr.flush()
sys.stdin.read()
sys.stderr.buffer.write(b" done\\n")
sys.stderr.flush()
"""


def test_stderr_without_newlines_is_recorded_while_the_server_runs(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """A progress bar redrawn with `\\r` never ends a line: the tee held all of it in memory, unrecorded,
    until the line ended (for days, in front of a long-running server). A stderr line is recorded in
    pieces of at most `STDERR_PIECE` bytes, `nl` false on all but its last; the stream rebuilds exact."""
    from addon.stdio_tee import STDERR_PIECE

    expected = b"".join(b"\rprogress %06d" % i for i in range(20000)) + b" done\n"
    proc = subprocess.Popen(
        tee_cmd(tmp_path, PY, "-c", PROGRESS), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=clean_env,
    )  # fmt: skip
    passed = bytearray()
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: passed.extend(proc.stderr.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()  # the operator's side takes the pass-through as it comes
    try:
        seen: list[dict[str, object]] = []
        deadline = time.monotonic() + 60  # a hang guard: the records come within the writer's flush
        while time.monotonic() < deadline and sum(r[fmt.F_LEN] for r in seen) < len(expected) // 2:
            time.sleep(0.1)
            files = capture_files(tmp_path)
            lines = files[0].read_bytes().splitlines() if files else []
            seen = [r for r in map(orjson.loads, lines[1:]) if r[fmt.F_TYPE] == fmt.STDERR]
        assert proc.poll() is None  # the server still runs: waiting on its stdin
        assert sum(r[fmt.F_LEN] for r in seen) >= len(expected) // 2
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)
        reader.join(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert bytes(passed) == expected  # passed through unchanged
    records = only_capture(tmp_path)
    assert rebuild(records, None, fmt.STDERR) == expected
    pieces = [r for r in traffic(records) if r[fmt.F_TYPE] == fmt.STDERR]
    assert all(r[fmt.F_LEN] <= STDERR_PIECE for r in pieces)
    assert [r[fmt.F_NL] for r in pieces] == [False] * (len(pieces) - 1) + [True]


# --- streams the tee closes itself -----------------------------------------------------------------

READ_ALL_THEN_EXIT = r"""
import os, select, sys, time
got, end = b"", time.monotonic() + 1.0
while time.monotonic() < end:
    if select.select([0], [], [], 0.05)[0]:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        got += chunk
sys.stderr.write("got %d\n" % len(got))
"""


def test_an_unfinished_client_line_is_recorded_when_the_linger_window_closes(tmp_path: Path, client_factory) -> None:
    """The server read a whole line and an unfinished one, then exited; the client keeps stdin open, so
    the tee ends the client's stream itself (linger-end): the unfinished line, relayed to the server,
    must be in the capture (`nl` false, before `linger-end`), as it would be at the client's EOF."""
    c = client_factory(tee_cmd(tmp_path, PY, "-c", READ_ALL_THEN_EXIT))
    whole = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    part = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a'
    c.send(whole)
    time.sleep(0.1)
    c.send(part)
    assert c.proc.wait(60) == 0  # the tee ends after the linger window, stdin still open
    assert c.stderr.readline() == b"got %d\n" % len(whole + part)  # the server got every byte
    c.finish()
    records = only_capture(tmp_path)
    assert rebuild(records, fmt.C2S) == whole + part
    frames = [r for r in traffic(records) if r.get(fmt.F_DIR) == fmt.C2S]
    assert [r[fmt.F_NL] for r in frames] == [True, False]
    assert frames[-1][fmt.F_SEQ] < lifecycle(records, fmt.EV_LINGER_END)[fmt.F_SEQ]


def test_unfinished_output_lines_are_recorded_when_a_grandchild_holds_the_pipes(tmp_path: Path, client_factory) -> None:
    """The server wrote an unfinished line to stdout and to stderr and exited, its child holding both
    pipes: the tee ends both streams itself (the client gets EOF), and what it relayed of the unfinished
    lines is recorded (`nl` false) before their streams close, not dropped."""
    script = 'sleep 120 & echo "$!"; printf "whole\\npart"; printf "starting\\nprogress 42%%" >&2'
    c = client_factory(tee_cmd(tmp_path, "sh", "-c", script))
    orphan = int(c.stdout.readline())
    try:
        assert c.read_to_eof() == b"whole\npart"
        assert c.proc.wait(60) == 0
    finally:
        os.kill(orphan, signal.SIGKILL)
    _, err = c.finish()
    assert err == b"starting\nprogress 42%"
    records = only_capture(tmp_path)
    assert rebuild(records, fmt.S2C) == b"%d\nwhole\npart" % orphan
    assert rebuild(records, None, fmt.STDERR) == b"starting\nprogress 42%"
    s2c = [r for r in traffic(records) if r.get(fmt.F_DIR) == fmt.S2C]
    assert s2c[-1][fmt.F_NL] is False and s2c[-1][fmt.F_SEQ] < lifecycle(records, fmt.EV_SERVER_EOF)[fmt.F_SEQ]
    stderr = [r for r in traffic(records) if r[fmt.F_TYPE] == fmt.STDERR]
    assert [r[fmt.F_NL] for r in stderr] == [True, False]


NOTIFY_FOREVER = r"""
import os, sys, time
i = 0
try:
    while True:
        os.write(1, b'{"jsonrpc":"2.0","method":"notifications/message","params":{"n":%d}}\n' % i)
        i += 1
        time.sleep(0.01)
except BrokenPipeError:
    sys.stderr.write("server: EPIPE after %d\n" % i)
    sys.exit(7)
"""


def test_a_client_that_closes_the_tees_stdout_is_not_hidden_from_the_server(tmp_path: Path, client_factory) -> None:
    """A host that closes its end of the server's stdout (`| head -n 2`): directly, the server's next
    write fails with EPIPE. Through the tee that failure is relayed: `client-stdout-broken` is recorded,
    the tee stops reading the server's stdout and closes it, so the server's next write fails as well,
    and nothing the tee read but could not deliver is recorded as relayed."""
    c = client_factory(tee_cmd(tmp_path, PY, "-c", NOTIFY_FOREVER))
    got = c.stdout.readline() + c.stdout.readline()
    c.stdout.close()  # the host is done reading; it keeps stdin open
    assert c.proc.wait(30) == 7  # the server died of the EPIPE, as it would have without the tee
    _, err = c.finish()
    assert err.startswith(b"server: EPIPE after ")
    records = only_capture(tmp_path)
    broken = lifecycle(records, fmt.EV_STDOUT_BROKEN)
    assert "EPIPE" in broken["error"]
    s2c = [r for r in traffic(records) if r.get(fmt.F_DIR) == fmt.S2C]
    assert rebuild(records, fmt.S2C).startswith(got)
    assert all(r[fmt.F_SEQ] < broken[fmt.F_SEQ] for r in s2c)  # nothing recorded as relayed after it
    assert fmt.EV_SERVER_EOF not in events(records)  # the server's stdout did not end: the tee stopped reading
    exit_seq = lifecycle(records, fmt.EV_EXIT)[fmt.F_SEQ]
    assert broken[fmt.F_SEQ] < exit_seq
    line = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"n":%d}}\n'
    written = b"".join(line % i for i in range(int(err.split()[-1])))
    recorded = rebuild(records, fmt.S2C)
    # a read the tee could not deliver is not recorded as relayed: it is counted in `held`
    assert written.startswith(recorded) and len(recorded) + broken["held"] <= len(written)


@pytest.mark.parametrize(
    ("argv", "key"),
    [
        (["bash", "-lc", "exec srv --port 8080"], "bash -lc"),
        (["/bin/sh", "-ec", "srv"], "sh -ec"),
        (["node", "-e", "require('srv')"], "node -e"),
        (["node", "--eval", "require('srv')"], "node --eval"),
        (["perl", "-pe", "s/a/b/"], "perl -pe"),
        (["ruby", "-e", "puts 1"], "ruby -e"),
        (["pwsh", "-Command", "Start-Server -Token x"], "pwsh -Command"),
        (["php", "-r", "echo 1;"], "php -r"),
        (["bash", "/srv/run.sh"], "bash run.sh"),  # a script, not code
    ],
)
def test_the_key_of_code_given_on_the_command_line_names_the_option_not_the_code(argv: list[str], key: str) -> None:
    """Code handed to a shell or an interpreter (`bash -lc "…"`, `node -e`) became the key: a file
    name, every record's `server`, an archive's partition, with what the code held."""
    assert server_key(argv) == key
