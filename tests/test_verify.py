"""`erascope verify` on real captures, then on copies an attacker (or a careless hand) changed.

The captures are recorded for real: the `erascope record stdio` tee between the `mcp` 2.3.0 client
and server (once through the console script, once keyed and rotating into small parts), and a
real `mitmdump` with the HTTP recorder, keyed, in front of the real `mcp` Streamable HTTP server.
Each mutation is applied to a copy and verify's findings are checked to the file and line.
"""

from __future__ import annotations

import gzip
import itertools
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from mcp.client.stdio import StdioServerParameters

from addon import chain
from addon import format as fmt
from addon.retention import compress_part
from analyzer.verify import Kind, Status, Verification, verify
from tests.conftest import subprocess_env
from tests.peers.capture_tools import capture_files, read_records

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(__file__).parent / "peers"
ERASCOPE = Path(sys.executable).parent / "erascope"
CORPUS_FILE = next((ROOT / "captures" / "corpus" / "auto-legacy-stdio").glob("*.jsonl"))
TEE_ROTATING = """
import sys
from pathlib import Path
from addon.chain import load_key
from addon.stdio_tee import run_tee
out, size, key = sys.argv[1:4]
sys.exit(run_tee(sys.argv[5:], out_dir=Path(out), rotate_bytes=int(size),
                 chain_key=None if key == "-" else load_key(key), stderr=sys.stderr.buffer))
"""


def record_stdio(command: list[str], env: dict[str, str]) -> None:
    from tests.test_stdio_e2e import call_add

    seen = anyio.run(call_add, StdioServerParameters(command=command[0], args=command[1:], env=env))
    assert seen["text"] == ["5"]


# --- real captures, recorded once per module -----------------------------------------------------
@pytest.fixture(scope="module")
def stdio_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One unkeyed capture of a real client/server session through `erascope record stdio`."""
    base = tmp_path_factory.mktemp("stdio")
    out = base / "caps"
    server = [sys.executable, str(PEERS / "mcp_stdio_server.py")]
    record_stdio([str(ERASCOPE), "record", "stdio", "--out", str(out), "--", *server], subprocess_env(base))
    assert len(capture_files(out)) == 1
    return out


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "audit.key"
    path.write_text("c2VjcmV0LWF1ZGl0LWtleS1mb3ItZXJhc2NvcGUtdGVzdHM=\n")
    return path


@pytest.fixture(scope="module")
def rotated_dir(tmp_path_factory: pytest.TempPathFactory, key_file: Path) -> Path:
    """A keyed capture of the same session, rotated into parts of at most 1500 bytes by the real tee."""
    base = tmp_path_factory.mktemp("rotated")
    out = base / "caps"
    server = [sys.executable, str(PEERS / "mcp_stdio_server.py")]
    tee = [sys.executable, "-c", TEE_ROTATING, str(out), "1500", str(key_file), "--", *server]
    record_stdio(tee, subprocess_env(base))
    assert len(capture_files(out)) >= 4
    return out


@pytest.fixture(scope="module")
def http_dir(tmp_path_factory: pytest.TempPathFactory, key_file: Path) -> Path:
    """A keyed capture written by a real mitmdump running the HTTP recorder."""
    import asyncio

    from tests.test_http_e2e import Proc, session, start_mitmdump, start_server

    base = tmp_path_factory.mktemp("http")
    env = subprocess_env(base)
    capdir = base / "caps"
    procs: list[Proc] = []
    try:
        port = start_server(procs, env)
        proxy = start_mitmdump(procs, env, port, capdir, "--set", f"erascope_chain_key={key_file}")
        seen = asyncio.run(session(f"http://127.0.0.1:{proxy.port}/mcp", "auto"))  # type: ignore[attr-defined]
        assert seen["echo"] == "hello"
        assert proxy.stop(signal.SIGINT) == 0
    finally:
        for p in reversed(procs):
            p.stop()
    return capdir


# --- helpers: what an editor of a capture does ---------------------------------------------------
def copy_of(src: Path, dst: Path) -> list[Path]:
    shutil.copytree(src, dst)
    return capture_files(dst)


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def put(path: Path, new: list[bytes]) -> None:
    path.write_bytes(b"".join(new))


def frame_line(all_lines: list[bytes], direction: str = fmt.S2C) -> int:
    """The 1-based number of the first frame line of `direction` carrying a JSON-RPC message."""
    for n, line in enumerate(all_lines, 1):
        rec = orjson.loads(line)
        if rec[fmt.F_TYPE] == fmt.FRAME and rec.get(fmt.F_DIR) == direction and '"jsonrpc"' in rec.get("raw", ""):
            return n
    raise AssertionError("no frame")


def edited(line: bytes) -> bytes:
    """The line with one byte of its payload changed (`2.0` -> `2.1`)."""
    assert b'\\"2.0\\"' in line
    return line.replace(b'\\"2.0\\"', b'\\"2.1\\"', 1)


def reseal(all_lines: list[bytes], chainer: chain.Chainer, start: bytes = chain.START) -> list[bytes]:
    """A forger's tool: recompute the whole chain of a part with `chainer`."""
    out: list[bytes] = []
    previous = start
    for n, line in enumerate(all_lines, 1):
        record = orjson.loads(line)
        del record[fmt.F_CHAIN]
        pieces, previous = chain.seal(chainer, previous, orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE), n)
        out.append(b"".join(bytes(p) for p in pieces))
    return out


def kinds(result: Verification) -> list[tuple[str, str, int | None]]:
    return [(Path(f.file).name, f.kind.value, f.line) for f in result.findings]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ERASCOPE), "verify", *args], capture_output=True, text=True, timeout=120)


# --- untouched captures --------------------------------------------------------------------------
def test_untouched_stdio_capture_verifies(stdio_dir: Path) -> None:
    (path,) = capture_files(stdio_dir)
    records = read_records(path)
    assert records[0][fmt.F_CHAIN_ALG] == chain.BLAKE3 and fmt.F_CHAIN_PREV not in records[0]
    assert records[-1][fmt.F_TYPE] == fmt.PART_END and records[-1][fmt.F_REASON] == fmt.END_CLOSED
    assert [int(r[fmt.F_CHAIN].split(":")[0]) for r in records] == list(range(1, len(records) + 1))
    result = verify([stdio_dir])
    (file,) = result.files
    assert file.status is Status.VERIFIED and result.findings == []
    assert file.closed_at == file.lines == len(records)
    proc = cli(str(stdio_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{path}: verified ({len(records)} lines, closed, blake3, final digest " in proc.stdout


def _renamed(stdio_dir: Path, tmp_path: Path, name: str) -> Path:
    """A folder holding the stdio capture under `name`."""
    folder = tmp_path / "caps"
    folder.mkdir()
    (path,) = capture_files(stdio_dir)
    shutil.copy(path, folder / name)
    return folder


def test_json_output_of_a_file_whose_name_is_not_utf8(stdio_dir: Path, tmp_path: Path) -> None:
    """A POSIX name is bytes: `verify --format json` of a file named `bad\\xff.jsonl` ended in a
    traceback (orjson refuses the lone surrogate Python reads such a byte as), after no output."""
    proc = cli("--format", "json", str(_renamed(stdio_dir, tmp_path, "bad\udcff.jsonl")))
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    assert doc["counts"]["verified"] == 1 and doc["files"][0]["file"].endswith("bad\ufffd.jsonl")


def test_json_output_escapes_what_a_terminal_acts_on(stdio_dir: Path, tmp_path: Path) -> None:
    """A file named with a C1 CSI (U+009B) and a bidi override went out raw in `--format json`
    (JSON writers escape C0 controls only): written as `\\u009b`, the same name for a JSON reader."""
    proc = cli("--format", "json", str(_renamed(stdio_dir, tmp_path, "x\u009b2J\u202e.jsonl")))
    assert proc.returncode == 0, proc.stderr
    assert "\u009b" not in proc.stdout and "\u202e" not in proc.stdout
    assert "x\\u009b2J\\u202e.jsonl" in proc.stdout
    assert orjson.loads(proc.stdout)["files"][0]["file"].endswith("x\u009b2J\u202e.jsonl")


def test_untouched_rotated_keyed_capture_verifies_across_parts(rotated_dir: Path, key_file: Path) -> None:
    parts = capture_files(rotated_dir)
    headers = [read_records(p)[0] for p in parts]
    assert [h["part"] for h in headers] == list(range(len(parts)))
    assert all(h[fmt.F_CHAIN_ALG] == chain.BLAKE3_KEYED for h in headers)
    assert {h[fmt.F_CHAIN_KEY_ID] for h in headers} == {chain.key_id(chain.load_key(key_file))}
    # each part starts from the previous part's final digest: its part-end line's
    for before, after in itertools.pairwise(parts):
        end = read_records(before)[-1]
        assert end[fmt.F_REASON] == fmt.END_ROTATED and end[fmt.F_NEXT] == after.name
        assert read_records(after)[0][fmt.F_CHAIN_PREV] == end[fmt.F_CHAIN].split(":")[1]
    result = verify([rotated_dir], key=chain.load_key(key_file))
    assert [f.status for f in result.files] == [Status.VERIFIED] * len(parts)
    assert result.findings == [] and result.notes == []
    proc = cli(str(rotated_dir), "--key", str(key_file), "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = orjson.loads(proc.stdout)
    assert report["format"] == "erascope-verify/1" and report["counts"]["verified"] == len(parts)


def test_untouched_http_capture_verifies(http_dir: Path, key_file: Path) -> None:
    (path,) = capture_files(http_dir)
    records = read_records(path)
    assert {fmt.HTTP_REQUEST, fmt.SSE_EVENT} <= {r[fmt.F_TYPE] for r in records}
    assert records[-1][fmt.F_TYPE] == fmt.PART_END
    proc = cli(str(http_dir), "--key", str(key_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verified" in proc.stdout and "blake3-keyed" in proc.stdout


# --- edits inside one file ------------------------------------------------------------------------
def test_changed_byte_in_a_payload_is_located(stdio_dir: Path, tmp_path: Path) -> None:
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    k = frame_line(text)
    text[k - 1] = edited(text[k - 1])
    put(path, text)
    result = verify([path])
    assert kinds(result) == [(path.name, "changed", k)]
    assert result.files[0].status is Status.TAMPERED and result.files[0].intact_to == k - 1
    proc = cli(str(path))
    assert proc.returncode == 1
    assert f"{path}:{k}: changed: " in proc.stdout


def test_deleted_line_is_located(stdio_dir: Path, tmp_path: Path) -> None:
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    k = frame_line(text)
    del text[k - 1]
    put(path, text)
    result = verify([path])
    assert kinds(result) == [(path.name, "removed", k)]
    assert f"1 line(s) removed before this line (line index {k})" in result.findings[0].message


def test_swapped_lines_are_reordered_not_removed(stdio_dir: Path, tmp_path: Path) -> None:
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    k = frame_line(text)
    text[k - 1], text[k] = text[k], text[k - 1]
    put(path, text)
    result = verify([path])
    assert kinds(result) == [(path.name, "reordered", k + 1)]
    assert f"line index {k} belongs before line {k}" in result.findings[0].message


@pytest.mark.parametrize("edit", ["deleted", "moved"])
def test_a_header_deleted_or_moved_is_tampering_not_another_kind_of_file(
    stdio_dir: Path, tmp_path: Path, edit: str
) -> None:
    """A part whose first line is a sealed record but no header lost its header: that was an error
    ("not an erascope capture", exit 2), as if the file were something else, not tampering."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    put(path, text[1:] if edit == "deleted" else [text[1], text[0], *text[2:]])
    result = verify([path])
    assert kinds(result) == [(path.name, "removed", 1)]
    assert result.files[0].status is Status.TAMPERED and result.files[0].error is None
    assert "sealed as line index 2" in result.findings[0].message
    proc = cli(str(path))
    assert proc.returncode == 1 and f"{path}:1: removed: " in proc.stdout
    # a file that never had a chain is still not a capture
    path.write_bytes(b'{"jsonrpc":"2.0","id":1}\n')
    assert verify([path]).files[0].status is Status.ERROR


@pytest.mark.parametrize("edit", ["a-byte-made-a-newline", "its-seal-cut-short"])
def test_a_header_broken_into_no_record_is_tampering_not_another_kind_of_file(
    stdio_dir: Path, tmp_path: Path, edit: str
) -> None:
    """A header edited so that it is no record any more (a byte of it made a newline, its seal's
    closing cut off), followed by the sealed lines of its chain: that was "not an erascope capture"
    (exit 2), as if the file were something else, where the same edit to any other line, or the
    header deleted, is tampering."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    at = text[0].index(b'"host"')
    header = [text[0][:at], b"\n", text[0][at + 1 :]] if edit == "a-byte-made-a-newline" else [text[0][:-3], b"\n"]
    put(path, [*header, *text[1:]])
    result = verify([path])
    assert kinds(result) == [(path.name, "changed", 1)]
    assert result.files[0].status is Status.TAMPERED and result.files[0].error is None
    proc = cli(str(path))
    assert proc.returncode == 1 and f"{path}:1: changed: " in proc.stdout
    # lines of JSON that are no capture, the second sealed by no chain: still not a capture
    path.write_bytes(b'{"jsonrpc":"2.0","id":1}\n{"jsonrpc":"2.0","id":1,"result":{}}\n')
    assert verify([path]).files[0].status is Status.ERROR


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("format", "erascopE/1", id="format-of-no-erascope"),
        pytest.param("format", "erascope/2", id="format-of-an-unknown-major"),
        pytest.param(fmt.F_CHAIN_ALG, "blak93", id="chain-alg-unknown"),
    ],
)
def test_a_header_edited_to_name_what_verify_does_not_know_is_tampering(
    stdio_dir: Path, tmp_path: Path, field: str, value: str
) -> None:
    """One field of a sealed header edited to name a format or a chain algorithm this erascope does
    not know: exit 2, "not an erascope capture" or "unknown chain algorithm", so that an edit could
    make a capture look like one verify cannot check instead of a tampered one. The lines after the
    header are sealed by a chain it knows, from the header's written seal, and that seal no longer
    covers the header: line 1 changed, and the rest of the chain checked."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    old = orjson.loads(text[0])[field]
    text[0] = text[0].replace(
        b'"%s":"%s"' % (field.encode(), old.encode()), b'"%s":"%s"' % (field.encode(), value.encode()), 1
    )
    put(path, text)
    result = verify([path])
    assert kinds(result) == [(path.name, "changed", 1)]
    assert value in result.findings[0].message
    proc = cli(str(path))
    assert proc.returncode == 1 and f"{path}:1: changed: " in proc.stdout
    # a line after it edited too is found as well: the chain is followed
    k = frame_line(text)
    text[k - 1] = edited(text[k - 1])
    put(path, text)
    assert kinds(verify([path])) == [(path.name, "changed", 1), (path.name, "changed", k)]


def test_a_sealed_header_of_an_unknown_format_is_still_refused(stdio_dir: Path, tmp_path: Path) -> None:
    """A capture of a format this erascope does not know, its chain whole (its header's seal covers
    it): not a capture it can check (exit 2), not tampering."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    header = orjson.loads(text[0])
    header["format"] = "erascope/2"
    text[0] = orjson.dumps(header, option=orjson.OPT_APPEND_NEWLINE)
    put(path, reseal(text, chain.Chainer()))
    result = verify([path])
    assert result.findings == [] and result.files[0].status is Status.ERROR
    assert "capture format 'erascope/2' is not known" in (result.files[0].error or "")
    assert cli(str(path)).returncode == 2


def test_an_edit_among_lines_a_move_displaced_is_located(stdio_dir: Path, tmp_path: Path) -> None:
    """Moving a line up displaces every line it jumped over: those were taken as moved and never
    checked against their digests, so an edit among them went unreported."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    k = frame_line(text)
    target = next(n for n in range(k + 2, len(text) - 1) if b'\\"2.0\\"' in text[n - 1])
    text[target - 1] = edited(text[target - 1])
    put(path, [*text[: k - 1], text[-2], *text[k - 1 : -2], text[-1]])  # the line before part-end, moved up
    result = verify([path])
    assert (path.name, "changed", target + 1) in kinds(result)
    assert {k for _, k, _ in kinds(result)} == {"changed", "reordered"}


def test_a_line_moved_up_and_edited_is_changed(stdio_dir: Path, tmp_path: Path) -> None:
    """The line a move put ahead of its place opens the gap the lines it jumped over fill: it was
    never checked against its digest, so it could be edited as well as moved."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    k = frame_line(text)
    last = max(n for n in range(k + 2, len(text)) if b'\\"2.0\\"' in text[n - 1])
    put(path, [*text[: k - 1], edited(text[last - 1]), *text[k - 1 : last - 1], *text[last:]])
    result = verify([path])
    assert (path.name, "changed", k) in kinds(result)
    # moved but not edited, it is not called changed
    put(path, [*text[: k - 1], text[last - 1], *text[k - 1 : last - 1], *text[last:]])
    assert "changed" not in {k for _, k, _ in kinds(verify([path]))}


def test_inserted_forged_lines_are_located(stdio_dir: Path, tmp_path: Path) -> None:
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    k = frame_line(text)
    forged_copy = edited(text[k - 1])  # a real line, altered, with the original's digest
    made_up = orjson.dumps(
        {fmt.F_TYPE: fmt.FRAME, fmt.F_SEQ: 99, fmt.F_DIR: fmt.S2C, **fmt.payload_fields(b'{"jsonrpc":"2.0","id":9}')},
        option=orjson.OPT_APPEND_NEWLINE,
    )
    text[k:k] = [forged_copy]
    text[k + 3 : k + 3] = [made_up]
    put(path, text)
    result = verify([path])
    assert kinds(result) == [(path.name, "inserted", k + 1), (path.name, "inserted", k + 4)]
    assert "already taken" in result.findings[0].message
    assert "without a chain digest" in result.findings[1].message


def reordered_keys(line: bytes) -> bytes:
    return orjson.dumps(orjson.loads(line), option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)


@pytest.mark.parametrize(
    "reformat",
    [lambda line: line[:-1] + b"\r\n", lambda line: line[:-1] + b" \n", reordered_keys],
    ids=["crlf", "trailing-space", "keys-reordered"],
)
def test_a_reformatted_line_is_one_changed_line(stdio_dir: Path, tmp_path: Path, reformat: Any) -> None:
    """A line whose seal no longer ends it was called inserted, and the line index it took removed."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    k = frame_line(text)
    text[k - 1] = reformat(text[k - 1])
    assert chain.split(text[k - 1]) is None
    put(path, text)
    result = verify([path])
    assert kinds(result) == [(path.name, "changed", k)]
    assert "not as sealed" in result.findings[0].message
    assert result.files[0].closed_at == len(text)


def test_a_capture_converted_to_crlf_is_changed_on_every_line(stdio_dir: Path, tmp_path: Path) -> None:
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    put(path, [line[:-1] + b"\r\n" for line in text])
    result = verify([path])
    assert kinds(result) == [(path.name, "changed", n) for n in range(1, len(text) + 1)]


def test_truncated_last_line_is_a_crash_not_tampering(stdio_dir: Path, tmp_path: Path) -> None:
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    n = len(text)
    text[-1] = text[-1][: len(text[-1]) // 2]
    put(path, text)
    (file,) = verify([path]).files
    assert file.status is Status.UNCLOSED and file.findings == []
    assert (file.intact_to, file.torn, file.closed_at) == (n - 1, n, None)
    proc = cli(str(path))
    assert proc.returncode == 0
    assert f"never closed: the chain holds up to line {n - 1}, its last complete line; line {n} is torn" in proc.stdout
    assert "TAMPERED" not in proc.stdout and "not tampering" in proc.stdout


def test_unkeyed_chain_recomputed_by_a_forger_verifies(stdio_dir: Path, tmp_path: Path) -> None:
    """The documented limit: without a key, whoever edits a capture can compute a new chain."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    k = frame_line(text)
    text[k - 1] = edited(text[k - 1])
    put(path, reseal(text, chain.Chainer()))
    assert verify([path]).files[0].status is Status.VERIFIED


# --- keys -------------------------------------------------------------------------------------------
def test_keyed_chain_forged_without_the_key_is_detected(rotated_dir: Path, key_file: Path, tmp_path: Path) -> None:
    parts = copy_of(rotated_dir, tmp_path / "c")
    key = chain.load_key(key_file)
    target = next(p for p in parts[1:] if frame_line_or_none(lines(p)))
    text = lines(target)
    k = frame_line_or_none(text)
    assert k is not None
    text[k - 1] = edited(text[k - 1])
    start = chain.decode(read_records(target)[0][fmt.F_CHAIN_PREV])
    assert start is not None
    forged = reseal(text, chain.Chainer(b"a guess at the key, 32 bytes...."), start)  # header keeps its key id
    put(target, forged)
    result = verify(parts, key=key)
    first = result.findings[0]
    assert (Path(first.file).name, first.kind, first.line) == (target.name, Kind.CHANGED, 1)
    assert {f.kind for f in result.findings if f.file == str(target)} == {Kind.CHANGED}
    proc = cli(*map(str, parts), "--key", str(key_file))
    assert proc.returncode == 1 and f"{target}:{k}: changed" in proc.stdout


def test_keyed_chain_downgraded_to_unkeyed_is_detected(rotated_dir: Path, key_file: Path, tmp_path: Path) -> None:
    parts = copy_of(rotated_dir, tmp_path / "c")
    text = lines(parts[0])
    header = orjson.loads(text[0])
    header[fmt.F_CHAIN_ALG] = chain.BLAKE3
    del header[fmt.F_CHAIN_KEY_ID]
    text[0] = orjson.dumps(header, option=orjson.OPT_APPEND_NEWLINE)
    put(parts[0], reseal(text, chain.Chainer()))
    assert verify([parts[0]]).files[0].status is Status.VERIFIED  # fine for whoever has no key
    result = verify(parts, key=chain.load_key(key_file))
    assert (Path(result.findings[0].file).name, result.findings[0].kind) == (parts[0].name, Kind.UNKEYED)
    # the next part starts from the true final digest of part 0, not the forged one
    assert (parts[1].name, "part-link", 1) in kinds(result)


def test_keyed_capture_without_or_with_another_key_cannot_be_checked(rotated_dir: Path, tmp_path: Path) -> None:
    proc = cli(str(rotated_dir))
    assert proc.returncode == 2 and "the chain is keyed (key id " in proc.stdout and "--key FILE" in proc.stdout
    other = tmp_path / "other.key"
    other.write_bytes(b"another key of enough length")
    proc = cli(str(rotated_dir), "--key", str(other))
    assert proc.returncode == 2 and "made with another key" in proc.stdout
    short = tmp_path / "short.key"
    short.write_bytes(b"short")
    proc = cli(str(rotated_dir), "--key", str(short))
    assert proc.returncode == 2 and "use at least 16 random bytes" in proc.stderr


def test_an_edited_key_id_under_the_right_key_is_a_changed_header(
    rotated_dir: Path, key_file: Path, tmp_path: Path
) -> None:
    """The chain links under --key, so the header's key id lies: tampering, not "another key"."""
    parts = copy_of(rotated_dir, tmp_path / "c")
    text = lines(parts[1])
    header = orjson.loads(text[0])
    text[0] = text[0].replace(header[fmt.F_CHAIN_KEY_ID].encode(), b"0000000000000000", 1)
    put(parts[1], text)
    result = verify(parts, key=chain.load_key(key_file))
    assert kinds(result) == [(parts[1].name, "changed", 1)]
    assert "chain_key_id 0000000000000000" in result.findings[0].message
    proc = cli(*map(str, parts), "--key", str(key_file))
    assert proc.returncode == 1 and f"{parts[1]}:1: changed: the header's chain_key_id" in proc.stdout


def test_another_key_names_the_file_once(rotated_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.key"
    other.write_bytes(b"another key of enough length")
    part = capture_files(rotated_dir)[0]
    proc = cli(str(part), "--key", str(other))
    assert proc.returncode == 2
    assert f"{part}: error: the chain was made with another key (key id " in proc.stdout
    assert proc.stdout.count(str(part)) == 1


@pytest.mark.parametrize("major", ["\u00b2", "\u0661", "9" * 5000], ids=["superscript", "arabic-indic", "5000-digits"])
def test_a_header_with_an_odd_major_is_an_error_not_a_crash(tmp_path: Path, major: str) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_bytes(orjson.dumps({"type": "header", "format": f"erascope/{major}", "seq": 0}) + b"\n")
    proc = cli(str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{path}: error: capture format" in proc.stdout and "is not known to this erascope" in proc.stdout
    assert len(proc.stdout) < 600


def test_capture_without_a_chain_is_reported_not_failed(tmp_path: Path, key_file: Path) -> None:
    result = verify([CORPUS_FILE])
    assert result.files[0].status is Status.NO_CHAIN and result.findings == []
    proc = cli(str(CORPUS_FILE))
    assert proc.returncode == 0 and "no chain" in proc.stdout
    # with --key, a file without a chain is what a forger who stripped it would hand over
    proc = cli(str(CORPUS_FILE), "--key", str(key_file))
    assert proc.returncode == 1 and f"{CORPUS_FILE}:1: unkeyed: no chain" in proc.stdout


@pytest.mark.parametrize("keep_header_seal", [True, False])
def test_chain_fields_stripped_from_a_header_are_tampering_not_a_pre_chain_capture(
    rotated_dir: Path, tmp_path: Path, keep_header_seal: bool
) -> None:
    parts = copy_of(rotated_dir, tmp_path / "c")
    text = lines(parts[0])
    header = orjson.loads(text[0])
    del header[fmt.F_CHAIN_ALG], header[fmt.F_CHAIN_KEY_ID]
    seal = header.pop(fmt.F_CHAIN)
    text[0] = orjson.dumps(header, option=orjson.OPT_APPEND_NEWLINE)
    if keep_header_seal:
        text[0] = text[0][:-2] + b',"chain":"' + seal.encode() + b'"}\n'
    put(parts[0], text)
    result = verify([parts[0]])
    assert kinds(result) == [(parts[0].name, "changed", 1)]
    assert result.files[0].status is Status.TAMPERED
    assert "names no chain" in result.findings[0].message
    proc = cli(str(parts[0]))
    assert proc.returncode == 1 and "made before captures carried one" not in proc.stdout


# --- whole parts ----------------------------------------------------------------------------------
def test_deleted_middle_part_is_missing_from_the_rotation(rotated_dir: Path, key_file: Path, tmp_path: Path) -> None:
    parts = copy_of(rotated_dir, tmp_path / "c")
    parts[2].unlink()
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    closing = len(lines(parts[1]))
    assert kinds(result) == [(parts[1].name, "part-missing", closing)]
    assert parts[2].name in result.findings[0].message
    proc = cli(str(tmp_path / "c"), "--key", str(key_file))
    assert proc.returncode == 1 and f"{parts[1]}:{closing}: part-missing: the next part {parts[2].name}" in proc.stdout


def test_a_part_missing_from_one_copy_is_not_hidden_by_another_copy(
    rotated_dir: Path, key_file: Path, tmp_path: Path
) -> None:
    """Verifying a capture's folder with a backup of it: the backup's parts did stand in for the
    folder's deleted one (links were looked up by file name alone), so nothing was found."""
    copy_of(rotated_dir, tmp_path / "backup")
    parts = copy_of(rotated_dir, tmp_path / "live")
    parts[2].unlink()
    result = verify([tmp_path / "backup", tmp_path / "live"], key=chain.load_key(key_file))
    assert [(Path(f.file).parent.name, *k) for f, k in zip(result.findings, kinds(result), strict=True)] == [
        ("live", parts[1].name, "part-missing", len(lines(parts[1]))),
    ]
    # a capture whose parts were moved to two folders (older ones archived) still links across them
    (tmp_path / "archive").mkdir()
    for part in parts[:2]:
        part.rename(tmp_path / "archive" / part.name)
    (tmp_path / "backup" / parts[2].name).rename(parts[2])
    result = verify([tmp_path / "archive", tmp_path / "live"], key=chain.load_key(key_file))
    assert result.findings == [] and result.notes == []


def test_a_part_compressed_by_retention_while_verify_runs_is_read_compressed(
    rotated_dir: Path, key_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`verify` of a folder a recorder with --compress writes into: a part listed plain and compressed
    (renamed to *.jsonl.zst) before it was read was an error, "cannot read: No such file", exit 2."""
    import analyzer.verify as verify_module
    from addon.retention import compress_part

    parts = copy_of(rotated_dir, tmp_path / "c")
    listed = verify_module.find_inputs

    def listing_then_compressing(paths: Any) -> list[str]:
        files = listed(paths)
        assert compress_part(parts[1]) is not None  # as the recorder's keeper does, meanwhile
        return files

    monkeypatch.setattr(verify_module, "find_inputs", listing_then_compressing)
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert result.errors == [] and result.findings == [] and result.notes == []
    assert result.files[1].file == f"{parts[1]}.zst" and result.files[1].status is Status.VERIFIED


def test_a_part_replaced_by_another_under_its_name_is_said_so(
    rotated_dir: Path, key_file: Path, tmp_path: Path
) -> None:
    """Part 2 deleted and part 3 linked in under its name: the file named part 2 was checked against
    itself ("does not start where <its own name> ends") and part 2's absence was never said."""
    parts = copy_of(rotated_dir, tmp_path / "c")
    parts[2].unlink()
    parts[2].symlink_to(parts[3].name)
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert kinds(result) == [(parts[2].name, "part-link", 1)]
    assert "named as part 2, but its header is part 3's" in result.findings[0].message


@pytest.mark.parametrize("run", range(3))
def test_a_part_replaced_by_a_link_to_the_one_before_it_is_said_so(
    rotated_dir: Path, key_file: Path, tmp_path: Path, run: int
) -> None:
    """Part 3 deleted and part 2 linked in under its name: the two names are one file, given once
    (under part 2's name), so part 3's name was only "on disk" and its absence passed unsaid; which
    name a folder's two names for one file were given under also changed from run to run."""
    parts = copy_of(rotated_dir, tmp_path / "c")
    parts[3].unlink()
    parts[3].symlink_to(parts[2].name)
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert kinds(result) == [(parts[2].name, "part-link", len(lines(parts[2])))]
    assert f"the next part {parts[3].name} is {parts[2].name} (part 2)" in result.findings[0].message


def test_deleted_last_part_is_missing(rotated_dir: Path, key_file: Path, tmp_path: Path) -> None:
    parts = copy_of(rotated_dir, tmp_path / "c")
    parts[-1].unlink()
    assert [k for _, k, _ in kinds(verify([tmp_path / "c"], key=chain.load_key(key_file)))] == ["part-missing"]


@pytest.mark.parametrize("suffix", ["", ".zst"])
def test_a_directory_named_like_a_deleted_part_does_not_stand_in_for_it(
    rotated_dir: Path, key_file: Path, tmp_path: Path, suffix: str
) -> None:
    parts = copy_of(rotated_dir, tmp_path / "c")
    for part in parts[-3:]:
        part.unlink()
    (parts[-3].parent / (parts[-3].name + suffix)).mkdir()
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert kinds(result) == [(parts[-4].name, "part-missing", len(lines(parts[-4])))]
    assert f"the next part {parts[-3].name} is missing" in result.findings[0].message


def test_first_parts_removed_as_retention_does_are_a_note(rotated_dir: Path, key_file: Path, tmp_path: Path) -> None:
    parts = copy_of(rotated_dir, tmp_path / "c")
    parts[0].unlink()
    parts[1].unlink()
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert result.findings == [] and not result.tampered
    assert len(result.notes) == 1 and "parts before part 2 are absent" in result.notes[0]


@pytest.mark.parametrize("link", ["cap\x00.000.jsonl", "../outside/cap.000.jsonl", "/dev/null", ".."])
def test_a_header_link_is_a_name_beside_the_part_never_a_path(stdio_dir: Path, tmp_path: Path, link: str) -> None:
    """A part's `previous` link comes from the capture: a NUL in it crashed verify, and a path made
    it look at files outside the capture's folder (and call a part that is not there "not given")."""
    outside = tmp_path / "outside" / "cap.000.jsonl"
    outside.parent.mkdir()
    outside.write_text("{}\n")
    (path,) = copy_of(stdio_dir, tmp_path / "caps")
    text = lines(path)
    header = orjson.loads(text[0])
    header.update(previous=link, part=1)
    put(path, [orjson.dumps(header, option=orjson.OPT_APPEND_NEWLINE), *text[1:]])
    result = verify([tmp_path / "caps"])
    assert kinds(result) == [(path.name, "changed", 1)]
    assert len(result.notes) == 1 and "parts before part 1 are absent" in result.notes[0]


def test_a_part_end_link_with_a_nul_is_a_missing_part(rotated_dir: Path, key_file: Path, tmp_path: Path) -> None:
    parts = copy_of(rotated_dir, tmp_path / "c")
    text = lines(parts[0])
    end = orjson.loads(text[-1])
    end[fmt.F_NEXT] = "next\x00part.001.jsonl"
    put(parts[0], [*text[:-1], orjson.dumps(end, option=orjson.OPT_APPEND_NEWLINE)])
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert (parts[0].name, "part-missing", len(text)) in kinds(result)
    proc = cli(str(tmp_path / "c"), "--key", str(key_file))
    assert proc.returncode == 1 and "the next part next\\x00part.001.jsonl is missing" in proc.stdout


def test_a_part_given_but_unreadable_is_not_called_not_given(rotated_dir: Path, key_file: Path, tmp_path: Path) -> None:
    parts = copy_of(rotated_dir, tmp_path / "c")
    parts[1].write_bytes(b"garbage\n")
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert result.errors and result.files[1].error is not None
    assert not any("was not given" in note for note in result.notes)
    assert any(f"{parts[1].name} could not be checked" in note for note in result.notes)


def test_cut_end_of_a_rotated_part_breaks_the_link(rotated_dir: Path, key_file: Path, tmp_path: Path) -> None:
    parts = copy_of(rotated_dir, tmp_path / "c")
    text = lines(parts[1])
    put(parts[1], text[:-1])  # its part-end record removed: alone, it would look like a crash
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert kinds(result) == [(parts[2].name, "part-link", 1)]
    assert f"does not start where {parts[1].name} ends" in result.findings[0].message


def test_compressed_parts_are_verified(rotated_dir: Path, key_file: Path, tmp_path: Path) -> None:
    from analyzer.sources import zstd

    parts = copy_of(rotated_dir, tmp_path / "c")
    gz = parts[0].with_name(parts[0].name + ".gz")
    gz.write_bytes(gzip.compress(parts[0].read_bytes()))
    zst = parts[1].with_name(parts[1].name + ".zst")
    text = lines(parts[1])
    k = frame_line_or_none(text) or 2
    text[k - 1] = text[k - 1].replace(b'"seq":', b'"seq": ', 1)
    zst.write_bytes(zstd.compress(b"".join(text)))
    parts[0].unlink()
    parts[1].unlink()
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert kinds(result) == [(zst.name, "changed", k)]
    assert result.files[0].status is Status.VERIFIED and result.files[0].file.endswith(".jsonl.gz")


def test_a_compressed_part_with_bytes_after_its_closing_record_says_it_is_cut(
    rotated_dir: Path, key_file: Path, tmp_path: Path
) -> None:
    parts = copy_of(rotated_dir, tmp_path / "c")
    gz = parts[-1].with_name(parts[-1].name + ".gz")
    gz.write_bytes(gzip.compress(parts[-1].read_bytes()) + b"JUNKJUNK")
    parts[-1].unlink()
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert result.findings == [] and result.files[-1].status is Status.VERIFIED
    assert result.files[-1].cut is not None and "corrupt" in result.files[-1].cut
    assert result.as_dict()["files"][-1]["cut"] == result.files[-1].cut
    proc = cli(str(tmp_path / "c"), "--key", str(key_file))
    line = next(t for t in proc.stdout.splitlines() if t.startswith(f"{gz}: "))
    assert proc.returncode == 0 and "verified" in line and "gzip stream is corrupt" in line


def pack(path: Path, how: str) -> Path:
    """The part `path` compressed whole beside itself, and removed: by the recorders' retention
    (`compress_part`: one zstd frame, a single block for a part this small, so a cut anywhere leaves
    nothing readable), by gzip, or by zstd in blocks of at most 1 KiB (a cut leaves the blocks before
    it readable, as in a part of megabytes)."""
    from analyzer.sources import zstd

    if how == "retention":
        out = compress_part(path)
        assert out is not None
        return out
    data = path.read_bytes()
    if how == "gzip":
        out = path.with_name(path.name + ".gz")
        out.write_bytes(gzip.compress(data, mtime=0))
    else:
        out = path.with_name(path.name + ".zst")
        out.write_bytes(zstd.compress(data, options={zstd.CompressionParameter.window_log: 10}))
    path.unlink()
    return out


def cut_short(path: Path, keep: int | None = None) -> None:
    """The file cut to its first `keep` bytes (two thirds of it by default)."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3 if keep is None else keep])


def nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {status: n for status, n in counts.items() if n}


@pytest.mark.parametrize("how", ["gzip", "zstd-blocks"])
def test_a_compressed_part_cut_short_fails_where_its_chain_ends(stdio_dir: Path, tmp_path: Path, how: str) -> None:
    """The recorders write a compressed part whole (to a hidden name, renamed into place): one cut short
    was cut after it was written, and its lines after the cut are lost. It was said "cut" with a
    crash's status (`unclosed`), and verify exited 0."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    n = len(lines(path))
    part = pack(path, how)
    cut_short(part)
    proc = cli(str(part), "--format", "json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = orjson.loads(proc.stdout)
    (entry,) = report["files"]
    assert entry["status"] == "cut" and "stream ends early (the file was cut short)" in entry["cut"]
    assert 1 < entry["intact_to"] < n and entry["closed_at"] is None and entry["error"] is None
    assert nonzero(report["counts"]) == {"cut": 1} and report["findings"] == []
    proc = cli(str(part))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    head, total = proc.stdout.splitlines()
    kind = "gzip" if how == "gzip" else "zstd"
    assert head.startswith(
        f"{part}: CUT: the {kind} stream ends early (the file was cut short); the chain holds up to line"
        f" {entry['intact_to']}, its last complete line"
    )
    assert "cut after it was written: its lines after that point are lost" in head and "crashed" not in head
    assert total == "1 file(s): 1 cut; 1 compressed part(s) cut after they were written: lines lost"


@pytest.mark.parametrize(("how", "keep", "torn"), [("retention", 40, None), ("gzip", 150, 1)], ids=["zstd", "gzip"])
def test_a_compressed_part_cut_in_its_header_fails(
    stdio_dir: Path, tmp_path: Path, how: str, keep: int, torn: int | None
) -> None:
    """Cut before its header's end (a part of a few kilobytes is one zstd block: a cut anywhere leaves
    nothing of it): not what a crash leaves in a part written whole. It was an error, "not an erascope
    capture" (exit 2), as a file that is no capture."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    part = pack(path, how)
    cut_short(part, keep)
    proc = cli(str(part), "--format", "json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = orjson.loads(proc.stdout)
    (entry,) = report["files"]
    assert (entry["status"], entry["lines"], entry["intact_to"], entry["torn_line"], entry["error"]) == (
        "cut", 0, 0, torn, None
    )  # fmt: skip
    assert "stream ends early" in entry["cut"] and nonzero(report["counts"]) == {"cut": 1}
    (head, _) = cli(str(part)).stdout.splitlines()
    what = "its header (line 1) is torn" if torn else "not one line of it can be read"
    assert head == (
        f"{part}: CUT: the {'gzip' if torn else 'zstd'} stream ends early (the file was cut short); {what}."
        " A compressed part is written whole, so this one was cut after it was written: all its lines are lost"
    )


def test_a_compressed_part_cut_to_nothing_fails(stdio_dir: Path, tmp_path: Path) -> None:
    """Emptied, a compressed part read as an empty plain file: a part a crash left before its header
    was written ("never closed", exit 0), though a compressed stream, even of nothing, has bytes."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    part = pack(path, "retention")
    part.write_bytes(b"")
    proc = cli(str(part), "--format", "json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (entry,) = orjson.loads(proc.stdout)["files"]
    assert (entry["status"], entry["lines"], entry["cut"]) == (
        "cut", 0, "the file is empty: its compressed stream was cut to nothing"
    )  # fmt: skip
    assert cli(str(part)).stdout.startswith(
        f"{part}: CUT: the file is empty: its compressed stream was cut to nothing; not one line of it can be read."
    )


@pytest.mark.parametrize("how", ["retention", "gzip"])
def test_a_cut_compressed_part_followed_by_the_next_part_is_cut(
    rotated_dir: Path, key_file: Path, tmp_path: Path, how: str
) -> None:
    """A rotation compressed, its second part cut: the next part's link breaks, and the cut part is said
    cut, not never closed (gzip; `unclosed`) nor an input that cannot be checked (zstd, nothing of it
    readable; `error`)."""
    parts = [pack(p, how) for p in copy_of(rotated_dir, tmp_path / "c")]
    cut_short(parts[1])
    proc = cli(str(tmp_path / "c"), "--key", str(key_file), "--format", "json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = orjson.loads(proc.stdout)
    statuses = ["verified"] * len(parts)
    statuses[1:3] = ["cut", "tampered"]
    assert [(Path(f["file"]).name, f["status"]) for f in report["files"]] == [
        (p.name, s) for p, s in zip(parts, statuses, strict=True)
    ]
    found = [(Path(f["file"]).name, f["kind"], f["line"]) for f in report["findings"]]
    assert found == [(parts[2].name, "part-link", 1)]
    out = cli(str(tmp_path / "c"), "--key", str(key_file)).stdout
    assert f"{parts[1]}: CUT: the {'gzip' if how == 'gzip' else 'zstd'} stream ends early" in out
    assert out.endswith(
        f": {len(parts) - 2} verified, 1 cut, 1 tampered; 1 finding(s): tampering;"
        " 1 compressed part(s) cut after they were written: lines lost\n"
    )


def test_a_part_never_closed_compressed_whole_is_never_closed(stdio_dir: Path, tmp_path: Path) -> None:
    """Retention compresses a crashed recorder's part as it is: its stream is whole, and it stays a
    crash (exit 0), as the plain part was."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    put(path, text[: len(text) // 2])
    part = pack(path, "retention")
    proc = cli(str(part), "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (entry,) = orjson.loads(proc.stdout)["files"]
    assert (entry["status"], entry["intact_to"], entry["cut"]) == ("unclosed", len(text) // 2, None)
    assert f"{part}: never closed: the chain holds up to line {len(text) // 2}" in cli(str(part)).stdout


def test_a_huge_first_line_is_refused_without_being_read_whole(tmp_path: Path) -> None:
    import tracemalloc

    path = tmp_path / "big.jsonl"
    path.write_bytes(b"x" * (8 << 20))
    tracemalloc.start()
    try:
        (file,) = verify([path]).files
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert file.status is Status.ERROR and file.error is not None and "first line" in file.error
    assert peak < 4 << 20, f"{peak} bytes"


# --- HTTP ------------------------------------------------------------------------------------------
def test_http_capture_edits_are_located(http_dir: Path, key_file: Path, tmp_path: Path) -> None:
    (path,) = copy_of(http_dir, tmp_path / "c")
    text = lines(path)
    event = next(n for n, line in enumerate(text, 1) if orjson.loads(line)[fmt.F_TYPE] == fmt.SSE_EVENT)
    request = next(n for n, line in enumerate(text, 1) if orjson.loads(line)[fmt.F_TYPE] == fmt.HTTP_REQUEST)
    text[event - 1] = edited(text[event - 1])
    text.insert(event + 1, text[request - 1])  # a request replayed later in the file
    put(path, text)
    proc = cli(str(path), "--key", str(key_file), "--format", "json")
    assert proc.returncode == 1
    report: dict[str, Any] = orjson.loads(proc.stdout)
    found = [(f["kind"], f["line"]) for f in report["findings"]]
    assert found == [("changed", event), ("inserted", event + 2)]
    assert report["files"][0]["status"] == "tampered" and report["files"][0]["intact_to"] == event - 1


# --- the analyzer reads chained captures as it reads others -----------------------------------------
def test_analyzer_reads_a_chained_capture_like_an_unchained_one(stdio_dir: Path, tmp_path: Path) -> None:
    (path,) = capture_files(stdio_dir)
    plain = tmp_path / "plain" / path.name
    plain.parent.mkdir()
    records = [r for r in read_records(path) if r[fmt.F_TYPE] != fmt.PART_END]
    for r in records:
        del r[fmt.F_CHAIN]
    plain.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in records))

    def report(target: Path) -> dict[str, Any]:
        proc = subprocess.run(
            [str(ERASCOPE), "analyze", str(target), "--format", "json"], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        return orjson.loads(proc.stdout)

    chained = orjson.loads(orjson.dumps(report(stdio_dir)).replace(str(stdio_dir).encode(), str(plain.parent).encode()))
    unchained = report(plain.parent)
    assert chained["inputs"]["malformed"] == unchained["inputs"]["malformed"] == []
    assert chained["servers"] == unchained["servers"] and chained["findings"] == unchained["findings"]
    assert chained["totals"] == unchained["totals"]
    # the report says which inputs carry a chain, without checking it
    assert chained["inputs"]["chained"] == 1 and "chained" not in unchained["inputs"]
    text = subprocess.run([str(ERASCOPE), "analyze", str(stdio_dir)], capture_output=True, text=True, timeout=120)
    words = " ".join(text.stdout.split())  # the text report wraps long notes
    said = (
        "1 of 1 file(s) end with a hash chain's closing record (not checked here: erascope verify, or analyze --verify)"
    )
    assert said in words


def frame_line_or_none(all_lines: list[bytes]) -> int | None:
    try:
        return frame_line(all_lines)
    except AssertionError:
        try:
            return frame_line(all_lines, fmt.C2S)
        except AssertionError:
            return None


# --- a last line short of its newline -------------------------------------------------------------
def forged_frame(seq: int) -> bytes:
    """A record as a forger without the key writes it: no seal, and (here) no newline."""
    return orjson.dumps(
        {fmt.F_TYPE: fmt.FRAME, fmt.F_SEQ: seq, fmt.F_DIR: fmt.C2S, **fmt.payload_fields(b'{"jsonrpc":"2.0","id":9}')}
    )


@pytest.mark.parametrize("which", ["middle", "last"])
def test_a_record_appended_without_newline_after_part_end_is_appended(
    rotated_dir: Path, key_file: Path, tmp_path: Path, which: str
) -> None:
    """The analyzer reads a line short only of its newline as a record: verify cannot call it torn."""
    parts = copy_of(rotated_dir, tmp_path / "c")
    target = parts[1] if which == "middle" else parts[-1]
    n = len(lines(target))
    target.write_bytes(target.read_bytes() + forged_frame(999))
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert kinds(result) == [(target.name, "appended", n + 1)]
    proc = cli(str(tmp_path / "c"), "--key", str(key_file))
    assert proc.returncode == 1 and f"{target}:{n + 1}: appended: " in proc.stdout


def test_a_gzip_member_appended_after_part_end_is_appended(rotated_dir: Path, key_file: Path, tmp_path: Path) -> None:
    parts = copy_of(rotated_dir, tmp_path / "c")
    n = len(lines(parts[-1]))
    gz = parts[-1].with_name(parts[-1].name + ".gz")
    gz.write_bytes(gzip.compress(parts[-1].read_bytes()) + gzip.compress(forged_frame(999)))
    parts[-1].unlink()
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert kinds(result) == [(gz.name, "appended", n + 1)]


def test_a_sealed_line_copied_after_part_end_is_appended_too(stdio_dir: Path, tmp_path: Path) -> None:
    """A line after `part-end` is appended whatever else is wrong with it (here: its index is taken)."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    k = frame_line(text)
    put(path, [*text, text[k - 1].rstrip(b"\n")])
    result = verify([path])
    n = len(text) + 1
    assert kinds(result) == [(path.name, "appended", n), (path.name, "inserted", n)]


def test_a_torn_line_after_part_end_is_appended_not_a_crash(stdio_dir: Path, tmp_path: Path) -> None:
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    n = len(lines(path))
    path.write_bytes(path.read_bytes() + forged_frame(999)[:40])
    result = verify([path])
    assert kinds(result) == [(path.name, "appended", n + 1)]
    assert result.files[0].status is Status.TAMPERED and result.files[0].torn == n + 1


def test_a_closed_part_short_only_of_its_final_newline_still_verifies(
    rotated_dir: Path, key_file: Path, tmp_path: Path
) -> None:
    """FORMAT.md: a line short only of its newline reads whole and counts as written."""
    parts = copy_of(rotated_dir, tmp_path / "c")
    for target in (parts[1], parts[-1]):
        target.write_bytes(target.read_bytes()[:-1])
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert result.findings == [] and result.notes == []
    assert [f.status for f in result.files] == [Status.VERIFIED] * len(parts)
    assert [f.closed_at for f in result.files] == [len(lines(p)) for p in parts]
    assert all(f.torn is None for f in result.files)


# --- crafted files: verify's cost follows the file's size, not the numbers in it ---------------------
def test_a_huge_line_index_costs_no_memory(stdio_dir: Path, tmp_path: Path) -> None:
    """A gap's missing indices were listed one by one: an index of 100000000 took gigabytes."""
    import tracemalloc

    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    # its bytes edited too: an index alone edited is one changed line, which opens no gap
    text[4] = text[4].replace(b'"chain":"5:', b'"chain":"3000000:', 1).replace(b'{"', b'{ "', 1)
    put(path, text)
    tracemalloc.start()
    try:
        result = verify([path])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20, f"{peak} bytes"
    moved = len(text) - 5  # the lines after it keep their indices, 6 on: they read as moved after it
    assert kinds(result) == [(path.name, "removed", 5)] + [(path.name, "reordered", n) for n in range(6, len(text) + 1)]
    removed = 3000000 - 5 - moved
    assert f"{removed} line(s) removed before this line (line index 5 to 2999999)" in result.findings[0].message


_MOVED_BACK = """
import sys
from pathlib import Path
from addon import chain
import analyzer.verify
from analyzer.verify import Kind, verify
k, path = int(sys.argv[1]), Path(sys.argv[2])
analyzer.verify.FINDINGS_LIMIT = 4 * k  # every gap walked, none left unchecked
digest = b"A" * chain.DIGEST_CHARS
header = b'{"type":"header","format":"erascope/1","chain_alg":"blake3","chain":"1:%b"}\\n' % digest
# odd indices first (each opens a gap), then the even ones (each moved back into its gap)
indices = [*range(3, 2 * k + 3, 2), *range(2, 2 * k + 2, 2)]
path.write_bytes(header + b"".join(b'{"x":0,"chain":"%d:%b"}\\n' % (i, digest) for i in indices))
result = verify([path])
print([f.kind for f in result.findings].count(Kind.REORDERED))
"""


def test_lines_moved_back_past_many_gaps_cost_linear_time(tmp_path: Path) -> None:
    """Each line moved back looked through every gap before it: quadratic (a crafted 2.7 MB file took
    9 s; these 200,000 lines, minutes). Not a timing goal: a guard against that walk, with minutes of
    margin either way (the bisect takes seconds)."""
    k = 100_000
    run = subprocess.run(
        [sys.executable, "-c", _MOVED_BACK, str(k), str(tmp_path / "crafted.jsonl")],
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(k)]


@pytest.mark.parametrize("keep", [0, 5, 60], ids=["empty", "torn-before-type", "torn-header"])
def test_a_last_part_cut_in_its_header_is_a_crash_not_an_error(
    rotated_dir: Path, key_file: Path, tmp_path: Path, keep: int
) -> None:
    """A recorder opens the next part before it writes its header: a crash (or power loss) in between
    leaves that part empty or its header torn. It was an error, "not an erascope capture" (exit 2)."""
    parts = copy_of(rotated_dir, tmp_path / "c")
    parts[-1].write_bytes(parts[-1].read_bytes()[:keep])
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert result.findings == [] and result.errors == []
    last = result.files[-1]
    assert (Path(last.file).name, last.status, last.lines, last.intact_to) == (parts[-1].name, Status.UNCLOSED, 0, 0)
    assert last.torn == (1 if keep else None)
    proc = cli(str(tmp_path / "c"), "--key", str(key_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith(f"{parts[-1]}:"))
    assert "never closed" in line and "not tampering" in line and "error" not in line
    assert ("empty" if keep == 0 else "header (line 1) is torn") in line


def test_an_emptied_middle_part_is_tampering(rotated_dir: Path, key_file: Path, tmp_path: Path) -> None:
    """Emptied, a part reads as a crash in its header, but a crash leaves no part after it."""
    parts = copy_of(rotated_dir, tmp_path / "c")
    parts[1].write_bytes(b"")
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert kinds(result) == [(parts[2].name, "part-link", 1)]
    assert f"{parts[1].name} is empty" in result.findings[0].message
    proc = cli(str(tmp_path / "c"), "--key", str(key_file))
    assert proc.returncode == 1 and f"{parts[2]}:1: part-link:" in proc.stdout


@pytest.mark.parametrize("shift", [5, -3])
def test_a_line_whose_index_alone_was_edited_is_one_changed_line(stdio_dir: Path, tmp_path: Path, shift: int) -> None:
    """An edited index read as lines removed before the line (or it inserted) and every later line
    reordered: many findings for one edit, none of them naming it."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    n = len(text) // 2
    assert n > 4
    index, _, _ = chain.split(text[n - 1])  # type: ignore[misc]
    text[n - 1] = text[n - 1].replace(b'"chain":"%d:' % index, b'"chain":"%d:' % (index + shift), 1)
    put(path, text)
    result = verify([path])
    assert kinds(result) == [(path.name, "changed", n)]
    assert f"its line index was edited: sealed as {index}, it says {index + shift}" in result.findings[0].message
    (file,) = result.files
    assert file.lines == len(text)


@pytest.mark.parametrize("block", [1, 2])
def test_lines_moved_up_are_named_not_every_line_they_jumped_over(stdio_dir: Path, tmp_path: Path, block: int) -> None:
    """Moving a line up far named every line it jumped over as reordered, and never the one moved."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    k = frame_line(text)
    end = len(text) - 1  # the lines just before part-end, moved up to line k
    put(path, [*text[: k - 1], *text[end - block : end], *text[k - 1 : end - block], text[-1]])
    assert end - block - k > 2 * block  # they jumped over more lines than they are
    result = verify([path])
    assert kinds(result) == [(path.name, "reordered", k)]
    what = f"line index {end - block + 1}" if block == 1 else f"lines {k} to {k + 1} (line index {end - 1} to {end})"
    assert f"{what} belong{'s' if block == 1 else ''} after line index {end - block} (line {end}): moved up" in (
        result.findings[0].message
    )


@pytest.mark.parametrize("escape", [b"\\ud800", b"\\udc00", b"\\ud800\\u0041"], ids=["high", "low", "high-before"])
def test_a_forged_last_line_analyze_reads_is_not_taken_for_a_torn_one(
    stdio_dir: Path, tmp_path: Path, escape: bytes
) -> None:
    """Cut the closing lines (a crash looks the same) and append a record without its newline that
    orjson refuses (a lone surrogate escape; a low one alone, or a high one before another escape,
    which the analyzer reads as their text) but the analyzer reads: verify called it torn, the
    capture `never closed`, exit 0, while `analyze` read the forged record."""
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)[:-2]  # part-end and recorder-end
    last = orjson.loads(text[-1])
    forged = orjson.dumps(
        {fmt.F_TYPE: fmt.FRAME, fmt.F_SEQ: last[fmt.F_SEQ] + 1, fmt.F_CONN: last.get(fmt.F_CONN), fmt.F_DIR: fmt.S2C,
         **fmt.payload_fields(b"Traceback (most recent call last): forged"), "ts": last["ts"] + 0.001}
    )[:-1] + b',"pad":"' + escape + b'"}'  # fmt: skip
    put(path, [*text, forged])
    from analyzer.pipeline import analyze

    assert any(f.evidence[0].line == len(text) + 1 for f in analyze([str(path)]).findings)  # analyze reads it
    result = verify([path])
    assert kinds(result) == [(path.name, "inserted", len(text) + 1)]
    assert result.files[0].status is Status.TAMPERED
    assert cli(str(path)).returncode == 1


@pytest.fixture(scope="module")
def unkeyed_rotated_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An unkeyed capture rotated into parts of at most 1500 bytes by the real tee."""
    base = tmp_path_factory.mktemp("unkeyed")
    out = base / "caps"
    server = [sys.executable, str(PEERS / "mcp_stdio_server.py")]
    record_stdio([sys.executable, "-c", TEE_ROTATING, str(out), "1500", "-", "--", *server], subprocess_env(base))
    assert len(capture_files(out)) >= 4
    return out


@pytest.mark.parametrize("which", ["middle", "last"])
def test_a_part_whose_chain_was_stripped_inside_a_chained_rotation_is_tampering(
    unkeyed_rotated_dir: Path, tmp_path: Path, which: str
) -> None:
    """Anyone can strip an unkeyed chain, but a part without one between chained parts is no capture
    made before chains: it read `no chain: not checked` (exit 0), its records edited at will."""
    parts = copy_of(unkeyed_rotated_dir, tmp_path / "c")
    victim = parts[len(parts) // 2] if which == "middle" else parts[-1]
    stripped = []
    for raw in lines(victim):
        rec = orjson.loads(raw)
        rec.pop(fmt.F_CHAIN, None)
        if rec[fmt.F_TYPE] == fmt.HEADER:
            rec.pop(fmt.F_CHAIN_ALG, None)
            rec.pop(fmt.F_CHAIN_PREV, None)
        if rec[fmt.F_TYPE] != fmt.PART_END:  # captures made before chains have no part-end
            stripped.append(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE))
    put(victim, stripped)
    result = verify([tmp_path / "c"])
    assert (victim.name, "part-link", 1) in kinds(result), kinds(result)
    assert cli(str(tmp_path / "c")).returncode == 1


@pytest.mark.parametrize(("early", "whole"), [("", ".zst"), (".gz", ".zst"), (".gz", "")])
def test_an_early_copy_of_a_part_beside_the_part_itself_is_no_broken_link(
    rotated_dir: Path, key_file: Path, tmp_path: Path, early: str, whole: str
) -> None:
    """A copy of a part taken while it was written (its first lines: a backup, a copy compressed by
    hand) beside the closed part under its own name (`x.000.jsonl` and `x.000.jsonl.zst`): the next
    part's link was checked against whichever copy sorted first, the early one, and an untouched
    capture was called tampered ("the header does not start where … ends")."""
    from analyzer.sources import zstd

    parts = copy_of(rotated_dir, tmp_path / "c")
    text = lines(parts[0])
    packs = {"": lambda b: b, ".gz": gzip.compress, ".zst": zstd.compress}
    parts[0].unlink()
    parts[0].with_name(parts[0].name + whole).write_bytes(packs[whole](b"".join(text)))
    parts[0].with_name(parts[0].name + early).write_bytes(packs[early](b"".join(text[:2])))
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert result.findings == [] and result.errors == []
    statuses = {Path(r.file).name: r.status for r in result.files}
    assert statuses.pop(parts[0].name + early) is Status.UNCLOSED
    assert set(statuses.values()) == {Status.VERIFIED}
    assert cli(str(tmp_path / "c"), "--key", str(key_file)).returncode == 0


def test_a_compressed_copy_under_a_part_name_holding_another_part_is_said_so(
    rotated_dir: Path, key_file: Path, tmp_path: Path
) -> None:
    """Part 0 compressed under part 3's name, beside part 3 itself (`x.003.jsonl`, `x.003.jsonl.zst`):
    only the copy listed first was checked against its name, and the other read "verified"."""
    from analyzer.sources import zstd

    parts = copy_of(rotated_dir, tmp_path / "c")
    stray = parts[3].with_name(parts[3].name + ".zst")
    stray.write_bytes(zstd.compress(parts[0].read_bytes()))
    result = verify([tmp_path / "c"], key=chain.load_key(key_file))
    assert kinds(result) == [(stray.name, "part-link", 1)]
    assert "named as part 3, but its header is part 0's" in result.findings[0].message


@pytest.mark.parametrize("which", ["frame", "part-end"])
def test_a_digest_written_with_its_unused_bits_set_is_a_changed_line(
    stdio_dir: Path, tmp_path: Path, which: str
) -> None:
    """43 base64 characters carry 258 bits for a digest's 256: the last character's two low bits are
    unused, and a decoder ignores them. Set, the line's bytes differ from what the recorder wrote, yet
    the digest read is the same, and the capture read "verified"."""
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    k = frame_line(text) if which == "frame" else len(text)
    last = len(text[k - 1]) - len(chain.TAIL) - 1  # the digest's last character
    line = bytearray(text[k - 1])
    line[last] = alphabet[alphabet.index(line[last]) | 1]
    text[k - 1] = bytes(line)
    put(path, text)
    result = verify([path])
    assert kinds(result) == [(path.name, "changed", k)]
    assert cli(str(path)).returncode == 1


def zstd_bomb(first: bytes, size: int) -> bytes:
    """`first`, then `size` bytes of `a` with no newline, as zstd: a frame of RLE blocks (4 bytes for
    each 128 KiB), so a few hundred kilobytes stand for gigabytes."""
    from analyzer.sources import zstd

    block = 128 << 10
    n = size // block
    rle = (1 << 1 | block << 3).to_bytes(3, "little") + b"a"  # an RLE block: 128 KiB of one byte
    last = (1 | 1 << 1 | block << 3).to_bytes(3, "little") + b"a"
    # magic, a frame header (no content size, no checksum), a 128 KiB window (log 17: exponent 7)
    frame = b"\x28\xb5\x2f\xfd\x00\x38" + rle * (n - 1) + last
    return zstd.compress(first) + frame


def test_a_line_longer_than_verify_holds_is_an_error_not_a_crash(stdio_dir: Path, tmp_path: Path) -> None:
    """A zstd bomb: a part of a few hundred kilobytes whose second line is gigabytes long. Its lines were
    read whole, so verify ran out of memory (a MemoryError traceback, or an abort in the JSON reader)."""
    import resource

    (path,) = copy_of(stdio_dir, tmp_path / "c")
    zst = path.with_name(path.name + ".zst")
    zst.write_bytes(zstd_bomb(lines(path)[0], 8 << 30))
    path.unlink()

    def bounded() -> None:  # a memory bound the machine has, so the run fails as a small machine would
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    # the timeout only guards the run
    proc = subprocess.run(
        [str(ERASCOPE), "verify", str(zst)], capture_output=True, text=True, timeout=300, preexec_fn=bounded
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert f"{zst}: error: line 2 is longer than 512 MiB" in proc.stdout


def test_millions_of_bad_lines_are_not_each_held_as_a_finding(stdio_dir: Path, tmp_path: Path) -> None:
    """A compressed part of a few kilobytes holding millions of short unsealed lines: each was held as a
    finding (and printed), so verify ran out of memory on a file smaller than a page."""
    import resource

    from analyzer.sources import zstd

    (path,) = copy_of(stdio_dir, tmp_path / "c")
    text = lines(path)
    zst = path.with_name(path.name + ".zst")
    packer = zstd.ZstdCompressor()
    packed = [packer.compress(b"".join(text[:2]))]
    packed += [packer.compress(b"{}\n" * (1 << 20)) for _ in range(6)]
    zst.write_bytes(b"".join([*packed, packer.compress(b"".join(text[2:])), packer.flush()]))
    path.unlink()

    def bounded() -> None:  # a memory bound the machine has, so the run fails as a small machine would
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))

    # the timeout only guards the run
    proc = subprocess.run(
        [str(ERASCOPE), "verify", str(zst)], capture_output=True, text=True, timeout=300, preexec_fn=bounded
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    from analyzer.verify import FINDINGS_LIMIT

    assert f"{zst}:3: inserted: a line without a chain digest" in proc.stdout
    last = FINDINGS_LIMIT + 2
    assert f"not checked after line {last}: more than {FINDINGS_LIMIT} findings" in proc.stdout
    assert f":{last + 1}: " not in proc.stdout
    (file,) = verify([zst]).files
    assert (file.status, len(file.findings), file.stopped) == (Status.TAMPERED, FINDINGS_LIMIT, last)
