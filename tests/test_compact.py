"""`erascope compact`: Parquet archives that analyze exactly like their JSONL captures.

Compaction is idempotent, refuses to write where it could touch its input, lays files out by day
and server, and `erascope analyze` gives byte-identical reports on the archive and on the JSONL
files (generated captures with malformed and torn lines, and the recorded corpus). `--jobs` never
changes a report.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote

import orjson
import polars as pl
import pytest
from typer.testing import CliRunner

from addon.retention import compress_part
from analyzer import archive as archive_reader
from analyzer.cli import app
from analyzer.cluster import archive_parts, archive_servers
from analyzer.compact import ARCHIVE_SCHEMA, SOURCES_DIR, compact, extract_archived, source_entries
from analyzer.load import LoadOptions, extract_file
from analyzer.messages import MEMBER_SLOTS
from bench.generate import generate

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "captures" / "corpus"
runner = CliRunner()


@pytest.fixture(scope="module")
def caps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generated captures: HTTP and stdio, a storm, a rollout split, malformed and torn lines, two days."""
    out = tmp_path_factory.mktemp("compact") / "caps"
    manifest = generate(out, 1 << 20, files=2, spawns=10, seed=11)
    assert manifest.malformed and manifest.torn
    return out


def _tree(directory: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under `directory`."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _report(*args: str) -> bytes:
    result = runner.invoke(app, ["analyze", *args, "--format", "json", "--quiet"])
    assert result.exit_code == 0, result.output
    return result.stdout_bytes


@pytest.mark.parametrize(
    ("chunk_rows", "condensed"),
    [(archive_reader.CHUNK_ROWS, True), (archive_reader.CHUNK_ROWS, False), (500, False), (7, False), (7, True)],
)
def test_parquet_report_equals_jsonl_report(
    caps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_rows: int, condensed: bool
) -> None:
    archive = tmp_path / "archive"
    # compact pairs and condenses a file in windows of rows too (its `_condensed` frames)
    monkeypatch.setattr(archive_reader, "CHUNK_ROWS", chunk_rows)
    result = runner.invoke(app, ["compact", str(caps), "--out", str(archive)])
    assert result.exit_code == 0, result.output
    monkeypatch.undo()
    jsonl = _report(str(caps))
    # archives are read in windows of rows: tiny windows put answers after their requests' window,
    # split big files into ranges of lines and group small files
    monkeypatch.setattr(archive_reader, "CHUNK_ROWS", chunk_rows)
    if not condensed:  # the rows, as for a selection or an archive condensed by another erascope
        monkeypatch.setattr(archive_reader, "condensed_current", lambda entry: False)
    assert _report(str(archive)) == jsonl
    report = orjson.loads(jsonl)
    assert report["findings"], "the generated captures hide a storm and a rollout split"
    assert {f["rule"] for f in report["findings"]} >= {"probe-storm", "rollout-split"}


@pytest.mark.skipif(not CORPUS.is_dir(), reason="no recorded corpus in this checkout")
def test_parquet_report_equals_jsonl_report_on_the_recorded_corpus(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    compact([str(CORPUS)], archive, jobs=1)
    assert _report(str(archive)) == _report(str(CORPUS))


def test_jobs_do_not_change_the_report(caps: Path) -> None:
    assert _report(str(caps), "--jobs", "1") == _report(str(caps), "--jobs", "2")


def test_rerun_is_idempotent(caps: Path, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    first = compact([str(caps)], archive, jobs=2)
    tree = _tree(archive)
    assert len(first.written) == len(list(caps.glob("*.jsonl"))) and first.unchanged == []
    again = compact([str(caps)], archive, jobs=2)
    assert again.written == [] and len(again.unchanged) == len(first.written)
    assert _tree(archive) == tree
    forced = compact([str(caps)], archive, jobs=1, force=True)
    assert len(forced.written) == len(first.written)
    assert _tree(archive) == tree, "converting again gives the same bytes, and no extra files"


def test_a_grown_capture_replaces_its_rows(caps: Path, tmp_path: Path) -> None:
    work = tmp_path / "caps"
    shutil.copytree(caps, work)
    archive = tmp_path / "archive"
    compact([str(work)], archive, jobs=1)
    victim = min(work.glob("*weather*.jsonl"))
    lines = victim.read_bytes().splitlines(keepends=True)
    if not lines[-1].endswith(b"\n"):
        lines = lines[:-1]  # drop a torn tail before appending, as a restarted recorder would not
    last = orjson.loads(lines[-1])
    extra = {**last, "seq": last["seq"] + 1, "ts": last["ts"] + 1, "type": "lifecycle", "event": "linger-end"}
    victim.write_bytes(b"".join(lines) + orjson.dumps(extra) + b"\n")
    os.utime(victim, ns=(victim.stat().st_atime_ns, victim.stat().st_mtime_ns + 10**9))
    result = compact([str(work)], archive, jobs=1)
    assert result.written == [str(victim)]
    assert _report(str(archive)) == _report(str(work))
    rows = pl.scan_parquet(list(archive.glob("day=*/server=*/*.parquet")), schema=ARCHIVE_SCHEMA).filter(
        pl.col("file") == str(victim)
    )
    # the archive keeps every message row of the file (analysis condenses them after reading)
    kept = extract_file(str(victim), LoadOptions(keep_raw=True)).messages.height
    assert rows.select(pl.len()).collect().item() == kept


def test_partition_layout(caps: Path, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    result = compact([str(caps)], archive, jobs=1)
    parts = sorted(archive.glob("day=*/server=*/*.parquet"))
    assert len(parts) == result.parts and parts
    assert {p.parent.parent.name for p in parts} == {"day=2026-11-28", "day=2026-11-29"}
    total = 0
    for part in parts:
        frame = pl.read_parquet(part)
        assert frame.schema == pl.Schema(ARCHIVE_SCHEMA)
        server = unquote(part.parent.name.removeprefix("server="))
        assert frame.get_column("server").unique().to_list() == [server]
        days = {datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d") for ts in frame.get_column("ts")}
        assert days == {part.parent.parent.name.removeprefix("day=")}
        assert part.name.removesuffix(".parquet") in {p.name for p in caps.glob("*.jsonl")}
        total += frame.height
    assert total == result.rows
    entries = source_entries(archive)
    assert len(entries) == len(result.written)
    assert all(Path(e).parent.name == SOURCES_DIR for e in entries)


def test_a_server_key_too_long_for_a_directory_name(tmp_path: Path) -> None:
    """Server keys come from the captures: one whose partition name is longer than a file name may be
    (255 bytes; a percent-encoded non-ASCII character takes 6) crashed compact. Its partition is named
    by a prefix and a digest; the report and a `--server` selection read it as before."""
    source = next((CORPUS / "auto-legacy-stdio").glob("*.jsonl"))
    key = "ü" * 100 + "/mcp"
    records = [orjson.loads(line) for line in source.read_bytes().splitlines()]
    caps = tmp_path / "caps"
    caps.mkdir()
    (caps / source.name).write_bytes(b"".join(orjson.dumps({**r, "server": key}) + b"\n" for r in records))
    archive = tmp_path / "archive"
    result = runner.invoke(app, ["compact", str(caps), "--out", str(archive)])
    assert result.exit_code == 0, result.output
    parts = list(archive.glob("day=*/server=*/*.parquet"))
    assert parts and all(len(p.parent.name.encode()) <= 255 for p in parts)
    assert _report(str(archive)) == _report(str(caps))
    selected = _report(str(archive), "--server", key)
    assert selected == _report(str(caps), "--server", key)
    assert [s["server"] for s in orjson.loads(selected)["servers"]] == [key]
    assert list(archive_servers(archive_parts(archive))) == [key]  # how a cluster run shards the archive


@pytest.mark.parametrize("keys", [(None, ""), ("", "__null__"), (None, "__null__")], ids=str)
def test_keys_that_share_the_partition_of_rows_without_a_key(tmp_path: Path, keys: tuple[str | None, str]) -> None:
    """Rows without a server key, with an empty one and with the key `__null__` all go to
    `server=__null__`. Written a part per key, the last of one day overwrote the others' part (their
    records lost) and the entry named that part twice (its records read twice)."""
    source = next((CORPUS / "probe-storm-stdio").glob("*.jsonl"))
    records = [orjson.loads(line) for line in source.read_bytes().splitlines()]
    for n, record in enumerate(records[1:]):
        if n % 3 == 1:
            record.pop("server") if keys[0] is None else record.update(server=keys[0])
        elif n % 3 == 2:
            record["server"] = keys[1]
    caps = tmp_path / "caps"
    caps.mkdir()
    (caps / source.name).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    archive = tmp_path / "archive"
    assert runner.invoke(app, ["compact", str(caps), "--out", str(archive)]).exit_code == 0
    (entry,) = source_entries(archive)
    parts = orjson.loads(Path(entry).read_bytes())["parts"]
    assert len(parts) == len(set(parts))
    archived = pl.scan_parquet(archive / "day=*" / "server=*" / "*.parquet", hive_partitioning=False)
    assert archived.select(pl.len()).collect().item() == extract_file(str(caps / source.name)).messages.height
    assert _report(str(archive)) == _report(str(caps))
    for key in keys[1:]:
        assert _report(str(archive), "--server", key) == _report(str(caps), "--server", key)


def test_an_entry_naming_a_part_twice_is_refused_and_compact_writes_it_again(tmp_path: Path) -> None:
    """An archive written before parts were shared by keys: its entry may name a part twice (rows
    read twice, others lost). Reading it would double-count; it is refused, and compact converts
    the capture again."""
    source = next((CORPUS / "auto-modern-stdio").glob("*.jsonl"))
    caps = tmp_path / "caps"
    caps.mkdir()
    shutil.copy(source, caps)
    archive = tmp_path / "archive"
    assert runner.invoke(app, ["compact", str(caps), "--out", str(archive)]).exit_code == 0
    (entry,) = source_entries(archive)
    written = orjson.loads(Path(entry).read_bytes())
    Path(entry).write_bytes(orjson.dumps({**written, "parts": written["parts"] * 2}))
    refused = runner.invoke(app, ["analyze", str(archive), "--format", "json", "--quiet"])
    assert refused.exit_code == 2 and "names a part twice" in refused.output
    result = runner.invoke(app, ["compact", str(caps), "--out", str(archive)])
    assert result.exit_code == 0 and "1 file(s) compacted" in result.output
    assert orjson.loads(Path(entry).read_bytes())["parts"] == written["parts"]
    assert _report(str(archive)) == _report(str(caps))


def test_an_input_name_too_long_to_name_its_archive_files(tmp_path: Path) -> None:
    """An archive file's name adds up to about 110 bytes to its input's (a digest, a suffix, a
    temporary name's): an input named with 246 bytes crashed compact. Its files are named by a cut
    of the name and a digest; the report, and a second run finding it unchanged, are as for others."""
    caps = tmp_path / "caps"
    caps.mkdir()
    shutil.copyfile(next((CORPUS / "auto-legacy-stdio").glob("*.jsonl")), caps / ("é" * 118 + ".000.jsonl"))
    # the same first bytes: its own archive files
    shutil.copyfile(next((CORPUS / "probe-storm-stdio").glob("*.jsonl")), caps / ("é" * 118 + "x.000.jsonl"))
    archive = tmp_path / "archive"
    result = runner.invoke(app, ["compact", str(caps), "--out", str(archive)])
    assert result.exit_code == 0, result.output
    assert all(len(p.name.encode()) <= 255 for p in archive.rglob("*"))
    assert len(source_entries(archive)) == 2
    assert _report(str(archive)) == _report(str(caps))
    again = compact([str(caps)], archive, jobs=1)
    assert sorted(again.unchanged) == sorted(str(p) for p in caps.iterdir()) and not again.written


def test_a_capture_without_messages_beside_others(tmp_path: Path) -> None:
    """A capture of a header alone (a recorder stopped at once), or whose every other line is
    malformed, has no messages: its condensed frames were written with other dtypes than a file with
    messages gets, and analyze refused the whole archive as damaged."""
    caps = tmp_path / "caps"
    caps.mkdir()
    source = next((CORPUS / "auto-legacy-stdio").glob("*.jsonl"))
    shutil.copyfile(source, caps / source.name)
    empty = next((CORPUS / "auto-modern-stdio").glob("*.jsonl"))
    (caps / empty.name).write_bytes(empty.read_bytes().splitlines(keepends=True)[0] + b'{"type": "frame", "ts": []}\n')
    archive = tmp_path / "archive"
    compact([str(caps)], archive, jobs=1)
    assert _report(str(archive)) == _report(str(caps))


def _header(transport: str, started: str, part: int, previous: str | None) -> dict:
    return {"type": "header", "format": "erascope/1", "transport": transport, "server": "srv", "started": started,
            "part": part, "previous": previous, "recorder_pid": 7, "seq": 0, "ts": 1800000000.0}  # fmt: skip


@pytest.mark.parametrize("selection", [["--server", "srv"], ["--since", "2027-01-15T00:00:00Z"], []])
def test_a_rotated_part_read_with_another_captures_file_is_paired_with_its_next_part(
    tmp_path: Path, selection: list[str]
) -> None:
    """A selection reads an archive's rows, several files' rows going with the first one read: a
    rotated part's request went with another capture's file (read first, by its name) and was never
    paired with its answer in the next part (read alone, a file of joined captures), `no-answer`
    where the JSONL files give `discover-result`."""
    caps = tmp_path / "caps"
    caps.mkdir()
    a, b = "20270115T080000.000000Z_srv_7_aaaaaa.%03d.jsonl", "20270115T070000.000000Z_srv_7_bbbbbb.%03d.jsonl"
    probe = orjson.dumps(
        {"jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}
    ).decode()  # fmt: skip
    result = {"supportedVersions": ["2026-07-28"], "capabilities": {}}
    answer = orjson.dumps({"jsonrpc": "2.0", "id": 3, "result": result}).decode()
    flow = {"conn": "k", "flow": "f", "server": "srv"}
    files = {
        a % 1: [_header("http", "2027-01-15T08:00:00+00:00", 1, a % 0),
                {"type": "http.request", **flow, "dir": "c2s", "method": "POST", "url": "http://h/mcp", "raw": probe,
                 "headers": [["MCP-Protocol-Version", "2026-07-28"], ["Mcp-Method", "server/discover"]],
                 "ts": 1800000001.0, "seq": 1}],
        a % 2: [_header("http", "2027-01-15T08:00:00+00:00", 2, a % 1),
                {"type": "http.response", **flow, "dir": "s2c", "status": 200, "headers": [], "streamed": False,
                 "peer": "10.0.0.1:80", "raw": answer, "ts": 1800000002.0, "seq": 2},
                _header("stdio", "2027-01-15T07:00:00+00:00", 0, None)],  # another capture's first part joined
        b % 6: [_header("stdio", "2027-01-15T07:00:00+00:00", 6, b % 5)],
    }  # fmt: skip
    for name, records in files.items():
        (caps / name).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    archive = tmp_path / "archive"
    compact([str(caps)], archive, jobs=1)
    jsonl = _report(str(caps), *selection)
    assert orjson.loads(jsonl)["totals"]["probe_outcomes"] == {"discover-result": 1}
    assert _report(str(archive), *selection) == jsonl


def test_raw_and_extracted_columns_match_the_capture(caps: Path, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    compact([str(caps)], archive, jobs=1)
    source = max(caps.glob("*_proxy_*.jsonl"), key=lambda p: p.stat().st_size)
    parts = list(archive.glob("day=*/server=*/*.parquet"))
    frame = pl.scan_parquet(parts).filter(pl.col("file") == str(source)).collect()
    lines = source.read_bytes().split(b"\n")
    for row in frame.sample(50, seed=1).iter_rows(named=True):
        record = orjson.loads(lines[row["line"] - 1])
        assert row["raw"] == record.get("raw")
        assert row["seq"] == record["seq"] * MEMBER_SLOTS and row["server"] == record["server"]
    probes = frame.filter(pl.col("method") == "server/discover", pl.col("kind") == "request")
    assert probes.height and probes.get_column("meta_version").is_not_null().all()
    facts = extract_archived(next(e for e in source_entries(archive) if Path(e).name.startswith(source.name)))
    fresh = extract_file(str(source))
    assert facts.messages.equals(fresh.messages)
    assert (facts.records, facts.counts, facts.malformed, facts.torn) == (
        fresh.records,
        fresh.counts,
        fresh.malformed,
        fresh.torn,
    )


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("inside-input", "into the input directory"),
        ("same-as-input", "into the input directory"),
        ("input-inside-out", "inside the output directory"),
        ("out-holds-captures", "holds capture files"),
        ("out-is-a-file", "is not a directory"),
        ("archive-as-input", "already an archive"),
    ],
)
def test_refuses_to_overwrite_or_mix_with_input(caps: Path, tmp_path: Path, layout: str, message: str) -> None:
    work = tmp_path / "caps"
    shutil.copytree(caps, work)
    one = str(min(work.glob("*.jsonl")))
    args = {
        "inside-input": [str(work), "--out", str(work / "archive")],
        "same-as-input": [str(work), "--out", str(work)],
        "input-inside-out": [one, "--out", str(work)],
        "out-holds-captures": [one, "--out", str(tmp_path / "other")],
        "out-is-a-file": [str(work), "--out", one],
        "archive-as-input": [str(tmp_path / "archive"), "--out", str(tmp_path / "again")],
    }[layout]
    if layout == "archive-as-input":
        compact([str(work)], tmp_path / "archive", jobs=1)
    if layout == "out-holds-captures":
        (tmp_path / "other").mkdir()
        shutil.copy(max(work.glob("*.jsonl")), tmp_path / "other")
    before = _tree(tmp_path)
    result = runner.invoke(app, ["compact", *args])
    assert result.exit_code == 2
    assert message in result.stderr
    assert _tree(tmp_path) == before, "nothing written next to, or over, the input"


def test_an_incomplete_archive_is_an_error(caps: Path, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    compact([str(caps)], archive, jobs=1)
    next(archive.glob("day=*/server=*/*.parquet")).unlink()
    result = runner.invoke(app, ["analyze", str(archive), "--quiet"])
    assert result.exit_code == 2
    assert "archive" in result.stderr and "missing" in result.stderr


@pytest.mark.e2e
def test_cli_subprocess_round_trip(caps: Path, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    erascope = [sys.executable, "-c", "from analyzer.cli import main; main()"]
    done = subprocess.run([*erascope, "compact", str(caps), "--out", str(archive), "--jobs", "2"], capture_output=True)
    assert done.returncode == 0, done.stderr
    assert b"compacted" in done.stderr
    reports = [
        subprocess.run([*erascope, "analyze", path, "--format", "markdown", "-q"], capture_output=True, check=True)
        for path in (str(caps), str(archive))
    ]
    assert reports[0].stdout == reports[1].stdout and reports[0].stdout


def test_readme_documents_compact() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "## Scale and archives" in readme and "erascope compact" in readme


@pytest.mark.parametrize("older", ["columns", "record seqs", "extraction"])
def test_an_archive_from_an_erascope_with_other_columns_is_refreshed(caps: Path, tmp_path: Path, older: str) -> None:
    archive = tmp_path / "archive"
    compact([str(caps)], archive, jobs=1)
    entry_path = Path(source_entries(archive)[0])
    entry = orjson.loads(entry_path.read_bytes())
    if older == "columns":
        entry["columns"] = entry["columns"][:-2]  # as if written before two columns were added
    elif older == "record seqs":
        del entry["seq_slots"]  # as if written before batch members were numbered within a record's seq
    else:  # as if written before JSON that is no JSON-RPC message on an HTTP error status read as an error
        entry.pop("extraction", None)
    entry_path.write_bytes(orjson.dumps(entry))
    result = runner.invoke(app, ["analyze", str(archive), "--quiet"])
    assert result.exit_code == 2
    assert "run `erascope compact` on the captures again" in result.stderr
    again = compact([str(caps)], archive, jobs=1)
    assert again.written == [entry["file"]]
    assert _report(str(archive)) == _report(str(caps))


def _modes(directory: Path) -> set[tuple[str, int]]:
    return {("dir" if p.is_dir() else "file", p.stat().st_mode & 0o777) for p in directory.rglob("*")}


def test_archive_has_the_captures_permissions(caps: Path, tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask: without care, files are 0644 and directories 0755
    try:
        out = tmp_path / "new" / "parents" / "archive"
        compact([str(caps)], out)
    finally:
        os.umask(old)
    assert _modes(out) == {("dir", 0o700), ("file", 0o600)}
    for d in (out, out.parent, out.parent.parent):  # parents erascope created, too
        assert d.stat().st_mode & 0o777 == 0o700, d


def test_rerun_tightens_an_archive_written_loosely(caps: Path, tmp_path: Path) -> None:
    out = tmp_path / "archive"
    compact([str(caps)], out)
    for p in out.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    compact([str(caps)], out)  # nothing to convert: the files are only tightened
    assert _modes(out) == {("dir", 0o700), ("file", 0o600)}


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_group_or_world_writable_out_is_refused(caps: Path, tmp_path: Path, mode: int) -> None:
    from addon.errors import ErascopeError

    out = tmp_path / "shared"
    out.mkdir()
    out.chmod(mode)
    with pytest.raises(ErascopeError, match="writable by other users"):
        compact([str(caps)], out)
    assert list(out.iterdir()) == []


def _garble(path: Path) -> None:
    path.write_bytes(b"not parquet at all " * 10)


def test_an_analysis_of_every_row_reads_the_condensed_frames_alone(caps: Path, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    compact([str(caps)], archive, jobs=1)
    jsonl = _report(str(caps))
    parts = sorted(archive.glob("day=*/server=*/*.parquet"))
    assert parts and sorted((archive / archive_reader.CONDENSED_DIR).glob("*.parquet"))
    for part in parts:  # present, but nothing in them can be read
        _garble(part)
    assert _report(str(archive)) == jsonl
    # a selection reads the rows: the damaged parts are a clear error (not a traceback)
    server = orjson.loads(jsonl)["servers"][0]["server"]
    result = runner.invoke(app, ["analyze", str(archive), "--server", server, "--quiet"])
    assert result.exit_code == 2, result.output
    assert "cannot be read" in result.stderr and "compact --force" in result.stderr


def test_a_damaged_archive_part_is_a_clear_error(caps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "archive"
    compact([str(caps)], archive, jobs=1)
    monkeypatch.setattr(archive_reader, "condensed_current", lambda entry: False)
    _garble(max(archive.glob("day=*/server=*/*.parquet"), key=lambda p: p.stat().st_size))
    result = runner.invoke(app, ["analyze", str(archive), "--quiet"])
    assert result.exit_code == 2, result.output
    assert "cannot be read" in result.stderr and "compact --force" in result.stderr


@pytest.mark.parametrize("damage", ["garbage", "other frame", "fewer rows"])
def test_a_damaged_condensed_frame_is_a_clear_error(caps: Path, tmp_path: Path, damage: str) -> None:
    archive = tmp_path / "archive"
    compact([str(caps)], archive, jobs=1)
    condensed = archive / archive_reader.CONDENSED_DIR
    target = max(condensed.glob("*.messages.parquet"), key=lambda p: pl.read_parquet(p).height)
    if damage == "garbage":
        _garble(target)
    elif damage == "other frame":  # a frame of another kind in its place
        shutil.copy(target.with_name(target.name.replace(".messages.", ".conns.")), target)
    else:
        pl.read_parquet(target).head(1).write_parquet(target)
    result = runner.invoke(app, ["analyze", str(archive), "--quiet"])
    assert result.exit_code == 2, result.output
    assert "condensed" in result.stderr and "compact --force" in result.stderr
    assert target.name in result.stderr.replace("\n", "")  # which frame, not only that one is damaged


@pytest.mark.parametrize("stale", ["version", "polars", "missing"])
def test_stale_condensed_frames_are_not_read_and_compact_refreshes_them(
    caps: Path, tmp_path: Path, stale: str
) -> None:
    archive = tmp_path / "archive"
    compact([str(caps)], archive, jobs=1)
    entry_path = Path(source_entries(archive)[0])
    entry = orjson.loads(entry_path.read_bytes())
    if stale == "version":  # condensed by an erascope that condensed differently
        entry["condensed"]["version"] -= 1
    elif stale == "polars":  # flow keys hashed by another polars
        entry["condensed"]["polars"] = "0.0.1"
    else:  # an archive from before condensed frames
        del entry["condensed"]
    entry_path.write_bytes(orjson.dumps(entry))
    for frame in (archive / archive_reader.CONDENSED_DIR).glob(f"{Path(entry['file']).name}.*"):
        _garble(frame)  # read, they would be an error: the file's parts are read instead
    assert _report(str(archive)) == _report(str(caps))
    again = compact([str(caps)], archive, jobs=1)
    assert again.written == [entry["file"]]
    assert archive_reader.condensed_current(orjson.loads(entry_path.read_bytes()))
    assert _report(str(archive)) == _report(str(caps))


@pytest.mark.parametrize(
    "condensed",
    [
        {"frames": []},
        {"frames": {"messages": 5}},
        {"frames": {"messages": ["x", "many"]}},
        {"rows": None},
        {"rows": -1},
    ],
)
def test_a_malformed_condensed_entry_is_a_clear_error(caps: Path, tmp_path: Path, condensed: dict) -> None:
    archive = tmp_path / "archive"
    compact([str(caps)], archive, jobs=1)
    entry_path = Path(source_entries(archive)[0])
    entry = orjson.loads(entry_path.read_bytes())
    entry["condensed"] = {**entry["condensed"], **condensed}
    entry_path.write_bytes(orjson.dumps(entry))
    result = runner.invoke(app, ["analyze", str(archive), "--quiet"])
    assert result.exit_code == 2, result.output
    assert "malformed archive entry" in result.stderr
    assert compact([str(caps)], archive, jobs=1).written == [entry["file"]]  # converted again
    assert _report(str(archive)) == _report(str(caps))


@pytest.mark.parametrize("budget", [0, 96 << 20])
def test_condensed_frames_read_whole_stay_in_memory_within_the_budget(
    caps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    """The moved requests and dropped answers of an archive read whole are written to the analysis'
    temporary files only above `MOVED_IN_MEMORY_BYTES`: under it they stay as read, and the report
    is the same either way."""
    from analyzer import condense
    from analyzer.load import combine, extract_files, find_inputs
    from analyzer.spill import Spill

    archive = tmp_path / "archive"
    compact([str(caps)], archive, jobs=1)
    monkeypatch.setattr(condense, "SPILL_MIN_ROWS", 1)  # the generated captures are small
    monkeypatch.setattr(archive_reader, "MOVED_IN_MEMORY_BYTES", budget, raising=False)
    with Spill(tmp_path) as spill:
        traffic = combine(extract_files(find_inputs([str(archive)]), spill=spill)).traffic
        written = list(spill.path.iterdir())
        if budget:
            assert written == []
            assert isinstance(traffic.requests, pl.DataFrame) and isinstance(traffic.answers, pl.DataFrame)
        else:
            assert written
            assert isinstance(traffic.requests, pl.LazyFrame) and isinstance(traffic.answers, pl.LazyFrame)
    assert _report(str(archive)) == _report(str(caps))


def _hand_written(path: Path, server: str) -> None:
    """A capture with a header written by hand: nothing but its path tells it apart."""
    records = [
        {"type": "header", "format": "erascope/1", "transport": "stdio", "seq": 0},
        {"type": "frame", "conn": "c", "dir": "c2s", "ts": 1796002275.0, "server": server, "seq": 1,
         "raw": '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}'},
        {"type": "frame", "conn": "c", "dir": "s2c", "ts": 1796002275.5, "server": server, "seq": 2,
         "raw": '{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'},
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


def test_another_capture_under_an_archived_name_is_refused(tmp_path: Path) -> None:
    _hand_written(tmp_path / "a" / "capture.jsonl", "alpha")
    _hand_written(tmp_path / "b" / "capture.jsonl", "beta")
    archive = tmp_path / "archive"
    assert runner.invoke(app, ["compact", str(tmp_path / "a"), "--out", str(archive)]).exit_code == 0
    before = _tree(archive)
    for force in ([], ["--force"]):
        result = runner.invoke(app, ["compact", str(tmp_path / "b"), "--out", str(archive), *force])
        assert result.exit_code == 2, result.output
        assert "capture.jsonl" in result.stderr and "another capture" in result.stderr
        assert _tree(archive) == before
    assert b"alpha" in _report(str(archive)) and b"beta" not in _report(str(archive))


def test_a_moved_capture_replaces_its_own_entry(caps: Path, tmp_path: Path) -> None:
    """The same capture part (its identity), found at another path, is the same input."""
    archive = tmp_path / "archive"
    compact([str(caps)], archive, jobs=1)
    moved = tmp_path / "moved"
    shutil.copytree(caps, moved)
    result = compact([str(moved)], archive, jobs=1)
    assert sorted(result.written) == sorted(str(p) for p in moved.glob("*.jsonl"))
    assert _report(str(archive)) == _report(str(moved))


def _not_captures(directory: Path) -> dict[str, str]:
    """What `analyze` skips, each file name with the reason it gives: a FIFO, JSON lines without an
    erascope header, and garbage."""
    directory.mkdir(parents=True, exist_ok=True)
    os.mkfifo(directory / "pipe.jsonl")
    (directory / "plain.jsonl").write_bytes(b'{"a": 1}\n{"b": 2}\n')
    (directory / "junk.jsonl").write_bytes(b"garbage\x00\xff\n")
    return {
        "pipe.jsonl": "not a regular file (a FIFO)",
        "plain.jsonl": "not an erascope capture",
        "junk.jsonl": "not an erascope capture",
    }


def test_inputs_that_are_no_captures_are_not_compacted(tmp_path: Path) -> None:
    """Nothing but files `analyze` skips: compact said "3 file(s) compacted" and exited 0, and the
    archive then failed `analyze` ("no capture records found"). It fails as `analyze` does on them,
    each file named with why, and says that nothing was compacted, also when run again."""
    inputs = tmp_path / "inputs"
    skipped = _not_captures(inputs)
    analyzed = runner.invoke(app, ["analyze", str(inputs), "-q"])
    assert analyzed.exit_code == 2
    archive = tmp_path / "archive"
    for _ in range(2):  # the second run finds their entries unchanged
        result = runner.invoke(app, ["compact", str(inputs), "--out", str(archive)])
        assert result.exit_code == 2, result.output
        assert "file(s) compacted" not in result.stderr
        assert "no capture files to compact" in result.stderr
        for name, why in skipped.items():
            assert f"{inputs / name}: {why}" in result.stderr, result.stderr
            assert f"{inputs / name}: {why}" in analyzed.stderr


def test_inputs_that_are_no_captures_beside_one_are_named_not_counted(tmp_path: Path) -> None:
    """Beside a capture, each skipped file is a note naming it with why (as `analyze` notes it), not
    one of the files compacted; the archive's report names them as the captures' report does."""
    inputs = tmp_path / "inputs"
    skipped = _not_captures(inputs)
    source = next((CORPUS / "auto-legacy-stdio").glob("*.jsonl"))
    shutil.copyfile(source, inputs / source.name)
    archive = tmp_path / "archive"
    result = runner.invoke(app, ["compact", str(inputs), "--out", str(archive)])
    assert result.exit_code == 0, result.output
    assert "1 file(s) compacted" in result.stderr and "3 skipped" in result.stderr, result.stderr
    for name, why in skipped.items():
        assert f"skipped {inputs / name}: {why}" in result.stderr, result.stderr
    assert _report(str(archive)) == _report(str(inputs))
    again = runner.invoke(app, ["compact", str(inputs), "--out", str(archive)])
    assert again.exit_code == 0 and "0 file(s) compacted" in again.stderr, again.stderr
    assert "3 skipped, 1 unchanged" in again.stderr and f"skipped {inputs / 'junk.jsonl'}" in again.stderr


def _recorded(name: str) -> Path:
    """A recorded capture of the corpus (its header names its run: start, host, pid, server, part)."""
    return next((CORPUS / name).glob("*.jsonl"))


def test_another_recorded_capture_renamed_to_an_archived_name_is_refused(tmp_path: Path) -> None:
    """A recorder's file name is part of a capture's identity, and a renamed capture shares it: the
    other capture (another run in its header) replaced the archived entry, losing its rows. Refused,
    naming both files, with nothing replaced: from another directory, and at the archived path."""
    archived, other = _recorded("auth-gate-http"), _recorded("auto-legacy-http")
    caps, elsewhere = tmp_path / "caps", tmp_path / "other"
    caps.mkdir()
    elsewhere.mkdir()
    shutil.copyfile(archived, caps / archived.name)
    shutil.copyfile(other, elsewhere / archived.name)
    archive = tmp_path / "archive"
    assert runner.invoke(app, ["compact", str(caps), "--out", str(archive)]).exit_code == 0
    before, report = _tree(archive), _report(str(archive))
    shutil.copyfile(other, caps / archived.name)  # and another capture over the archived one, at its path
    for where in (elsewhere, caps):
        for force in ([], ["--force"]):
            result = runner.invoke(app, ["compact", str(where), "--out", str(archive), *force])
            assert result.exit_code == 2, result.output
            assert "another capture" in result.stderr, result.stderr
            assert str(where / archived.name) in result.stderr and str(caps / archived.name) in result.stderr
            assert _tree(archive) == before
    assert _report(str(archive)) == report


def open_part(source: Path, caps: Path) -> tuple[Path, list[bytes]]:
    """The first half of `source`'s lines as its part while the recorder still writes it, in a new
    directory `caps`: the part, and all of `source`'s lines."""
    lines = source.read_bytes().splitlines(keepends=True)
    caps.mkdir()
    part = caps / source.name
    part.write_bytes(b"".join(lines[: len(lines) // 2]))
    return part, lines


def test_a_recorded_capture_that_grew_is_compacted_again(tmp_path: Path) -> None:
    """The part compacted while the recorder still wrote it, then whole: the same capture (the same
    header), at its path or moved, replaces its entry."""
    source = _recorded("auth-gate-http")
    caps, moved = tmp_path / "caps", tmp_path / "moved"
    open_part(source, caps)
    moved.mkdir()
    archive = tmp_path / "archive"
    assert runner.invoke(app, ["compact", str(caps), "--out", str(archive)]).exit_code == 0
    shutil.copyfile(source, caps / source.name)
    result = runner.invoke(app, ["compact", str(caps), "--out", str(archive)])
    assert result.exit_code == 0 and "1 file(s) compacted" in result.stderr, result.output
    assert _report(str(archive)) == _report(str(caps))
    shutil.move(caps / source.name, moved / source.name)
    os.utime(moved / source.name)  # and it grew again meanwhile
    result = runner.invoke(app, ["compact", str(moved), "--out", str(archive)])
    assert result.exit_code == 0 and "1 file(s) compacted" in result.stderr, result.output
    assert _report(str(archive)) == _report(str(moved))


def test_a_part_compacted_open_then_compressed_by_its_recorder_replaces_its_entry(tmp_path: Path) -> None:
    """The recorder compresses a part it closed (`x.jsonl` → `x.jsonl.zst`): compacted once while
    open and again compressed, the part had two entries, and the archive read the first, stale one
    (its later records lost) and named the whole one a duplicate."""
    source = _recorded("auth-gate-http")
    caps = tmp_path / "caps"
    part, _ = open_part(source, caps)
    archive = tmp_path / "archive"
    assert runner.invoke(app, ["compact", str(caps), "--out", str(archive)]).exit_code == 0
    shutil.copyfile(source, part)
    assert compress_part(part) == caps / f"{source.name}.zst"
    result = runner.invoke(app, ["compact", str(caps), "--out", str(archive)])
    assert result.exit_code == 0 and "1 file(s) compacted" in result.stderr, result.output
    assert sorted(p.name for p in (archive / SOURCES_DIR).iterdir()) == [f"{source.name}.zst.json"]
    assert _report(str(archive)) == _report(str(caps))


@pytest.mark.parametrize("copy", ["renamed-in-an-earlier-directory", "compressed-beside-it", "joined-blank-line"])
def test_an_archive_of_copies_reads_what_its_jsonl_reads(tmp_path: Path, copy: str) -> None:
    """Of copies of one capture part the first in input order is read. An archive listed its entries
    by their own names (a flat `<file name>.json`, so `x.jsonl.gz` before `x.jsonl` and a renamed copy
    in an earlier directory last), not by the paths they archive: it read another copy than the
    JSONL did, and a report naming other files (with a renamed middle part, other verdicts). A file
    of joined captures with a blank line inside its first one was archived without its captures, and
    read as a duplicate of its first: the others' traffic was left out of the archive's report."""
    import gzip

    source = next((CORPUS / "auto-legacy-stdio").glob("*.jsonl"))
    other = next((CORPUS / "auto-modern-stdio").glob("*.jsonl"))
    caps = tmp_path / "caps"
    (caps / "d").mkdir(parents=True)
    shutil.copyfile(source, caps / "d" / source.name)
    if copy == "renamed-in-an-earlier-directory":
        (caps / "copies").mkdir()
        shutil.copyfile(source, caps / "copies" / f"copy-{source.name}")
    elif copy == "compressed-beside-it":
        (caps / "d" / f"{source.name}.gz").write_bytes(gzip.compress(source.read_bytes()))
    else:  # `cat source other > joined`, a blank line added inside the first capture
        first, second, *rest = source.read_bytes().splitlines(keepends=True)
        joined = first + second + b"\n" + b"".join(rest) + other.read_bytes()
        (caps / "d" / f"joined-{source.name}").write_bytes(joined)
    archive = tmp_path / "archive"
    result = runner.invoke(app, ["compact", str(caps), "--out", str(archive)])
    assert result.exit_code == 0, result.output
    jsonl = _report(str(caps))
    assert len(orjson.loads(jsonl)["inputs"]["files"]) >= 1
    assert _report(str(archive)) == jsonl
