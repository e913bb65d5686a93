"""`erascope compact` and its archive against hostile input and hostile archives.

Capture file names and archive entries are attacker-controlled: no record is lost to a name two
inputs share in the archive, an entry never makes the reader open a file outside its archive, an
entry that is not a regular file is refused instead of read forever, and a malformed entry is an
error (never a traceback, never a report that differs from the captures').
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.compact import archive_name

runner = CliRunner()
ERASCOPE = [sys.executable, "-c", "from analyzer.cli import main; main()"]


def _hand_written(path: Path, server: str, requests: int = 3) -> Path:
    """A capture with a header written by hand: only its path tells it apart."""
    records: list[dict[str, Any]] = [{"type": "header", "format": "erascope/1", "transport": "stdio", "seq": 0}]
    for i in range(requests):
        records += [
            {"type": "frame", "conn": "c", "dir": "c2s", "ts": 1796002275.0 + i, "server": server, "seq": 2 * i + 1,
             "raw": f'{{"jsonrpc":"2.0","id":{i},"method":"tools/list","params":{{}}}}'},
            {"type": "frame", "conn": "c", "dir": "s2c", "ts": 1796002275.5 + i, "server": server, "seq": 2 * i + 2,
             "raw": f'{{"jsonrpc":"2.0","id":{i},"result":{{}}}}'},
        ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def _report(*args: str) -> bytes:
    result = runner.invoke(app, ["analyze", *args, "--format", "json", "--quiet"])
    assert result.exit_code == 0, result.output
    return result.stdout_bytes


def _refused(result: Any, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # said, not a traceback
    for word in words:
        assert word in result.stderr, result.stderr


def _servers(report: bytes) -> list[str]:
    return sorted(s["server"] for s in orjson.loads(report)["servers"])


# --- two inputs, one archive name ----------------------------------------------------------------
def test_names_that_differ_only_in_undecodable_bytes_are_not_archived_over_each_other(tmp_path: Path) -> None:
    """`a\\xff.jsonl` (a byte that is no UTF-8) is shown as the text `a\\xff.jsonl`, which another
    file may be named: both were archived under that one name, the second over the first, and
    compact said "2 file(s) compacted" with one file's records lost."""
    caps = tmp_path / "caps"
    _hand_written(Path(os.fsdecode(os.fsencode(caps) + b"/a\xff.jsonl")), "alpha")
    _hand_written(caps / "a\\xff.jsonl", "beta")
    assert _servers(_report(str(caps))) == ["alpha", "beta"]
    result = runner.invoke(app, ["compact", str(caps), "--out", str(tmp_path / "archive")])
    _refused(result, "a\\xff.jsonl", "separate archives")
    assert not (tmp_path / "archive" / "_sources").is_dir() or not any((tmp_path / "archive" / "_sources").iterdir())


def test_a_short_name_equal_to_a_long_names_archive_name_is_refused(tmp_path: Path) -> None:
    """A name too long to add to is archived under a cut of it and its digest; a file may be named
    exactly that, and the two were archived over each other."""
    long = _hand_written(tmp_path / "caps" / ("L" * 130 + ".jsonl"), "alpha")
    short = _hand_written(tmp_path / "caps" / archive_name(str(long)), "beta")
    result = runner.invoke(app, ["compact", str(long), str(short), "--out", str(tmp_path / "archive")])
    _refused(result, short.name, "separate archives")


# --- an entry naming files outside its archive -------------------------------------------------
def _two_archives(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, Any]]:
    """An archive of a capture, and beside it another archive (another user's, say) of a secret one:
    the first archive, its capture directory, the other archive, and the first archive's entry."""
    caps = tmp_path / "caps"
    _hand_written(caps / "cap.jsonl", "alpha")
    _hand_written(tmp_path / "secret" / "cap.jsonl", "SECRET")
    for source, out in ((caps, "archive"), (tmp_path / "secret", "other")):
        assert runner.invoke(app, ["compact", str(source), "--out", str(tmp_path / out)]).exit_code == 0
    entry = orjson.loads((tmp_path / "archive" / "_sources" / "cap.jsonl.json").read_bytes())
    return tmp_path / "archive", caps, tmp_path / "other", entry


def _outside(archive: Path, other: Path, rel: str, how: str) -> str:
    """`rel` in the other archive, named from `archive` as `how` says."""
    return {
        "absolute": str(other / rel),
        "parent": f"../{other.name}/{rel}",
        "through-a-partition": f"{rel.split('/')[0]}/../../{other.name}/{rel}",
    }[how]


@pytest.mark.parametrize("how", ["absolute", "parent", "through-a-partition"])
def test_an_entry_naming_a_part_outside_its_archive_is_refused(tmp_path: Path, how: str) -> None:
    """A part named out of the archive was read: the report on the archive held another archive's
    rows (any Parquet file the reader may open), and compact found the entry unchanged."""
    archive, caps, other, entry = _two_archives(tmp_path)
    (part,) = (p.relative_to(other).as_posix() for p in other.glob("day=*/server=*/*.parquet"))
    path = archive / "_sources" / "cap.jsonl.json"
    path.write_bytes(orjson.dumps({**entry, "parts": [_outside(archive, other, part, how)]}))
    for selection in ([], ["--server", "SECRET"], ["--since", "2026-01-01"]):
        result = runner.invoke(app, ["analyze", str(archive), "-q", "-f", "json", *selection])
        _refused(result, "malformed archive entry", path.name)
        assert "SECRET" not in result.stdout
    result = runner.invoke(app, ["compact", str(caps), "--out", str(archive)])
    assert result.exit_code == 0 and "1 file(s) compacted" in result.stderr, result.output
    assert (other / part).is_file(), "the other archive's file is left alone"
    assert _report(str(archive)) == _report(str(caps))


@pytest.mark.parametrize("how", ["absolute", "parent"])
def test_an_entry_naming_condensed_frames_outside_its_archive_is_refused(tmp_path: Path, how: str) -> None:
    archive, caps, other, entry = _two_archives(tmp_path)
    theirs = orjson.loads((other / "_sources" / "cap.jsonl.json").read_bytes())["condensed"]
    frames = {kind: [_outside(archive, other, rel, how), rows] for kind, (rel, rows) in theirs["frames"].items()}
    path = archive / "_sources" / "cap.jsonl.json"
    path.write_bytes(orjson.dumps({**entry, "condensed": {**theirs, "frames": frames}}))
    result = runner.invoke(app, ["analyze", str(archive), "-q", "-f", "json"])
    _refused(result, "malformed archive entry", path.name)
    assert "SECRET" not in result.stdout
    assert runner.invoke(app, ["compact", str(caps), "--out", str(archive)]).exit_code == 0
    assert all((other / rel).is_file() for rel, _ in theirs["frames"].values())
    assert _report(str(archive)) == _report(str(caps))


def _archived_one(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A capture directory of one capture compacted into an archive: the directory, the archive, and
    its capture's entry."""
    caps = tmp_path / "caps"
    _hand_written(caps / "cap.jsonl", "alpha")
    archive = tmp_path / "archive"
    assert runner.invoke(app, ["compact", str(caps), "--out", str(archive)]).exit_code == 0
    return caps, archive, archive / "_sources" / "cap.jsonl.json"


# --- an entry that is not a regular file -------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["fifo", "endless-device"])
def test_an_entry_that_is_no_regular_file_is_refused_not_read_forever(tmp_path: Path, kind: str) -> None:
    """`_sources/<name>.json` a FIFO (nobody writes it) or a link to /dev/zero: analyze waited on
    the FIFO forever, and read the device until memory ran out."""
    caps, archive, entry = _archived_one(tmp_path)
    entry.unlink()
    os.mkfifo(entry) if kind == "fifo" else entry.symlink_to("/dev/zero")
    done = subprocess.run([*ERASCOPE, "analyze", str(archive), "-q"], capture_output=True, timeout=30)
    assert done.returncode == 2 and b"Traceback" not in done.stderr, done.stderr
    assert b"cap.jsonl.json" in done.stderr and b"not a regular file" in done.stderr, done.stderr
    # compact writes a regular entry in its place
    assert runner.invoke(app, ["compact", str(caps), "--out", str(archive)]).exit_code == 0
    assert _report(str(archive)) == _report(str(caps))


def test_a_directory_in_place_of_an_entry_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    caps, archive, entry = _archived_one(tmp_path)
    entry.unlink()
    entry.mkdir()
    _refused(runner.invoke(app, ["analyze", str(archive), "-q"]), entry.name)
    result = runner.invoke(app, ["compact", str(caps), "--out", str(archive)])
    _refused(result, f"cannot write {entry}")
    assert entry.is_dir() and not [p for p in entry.parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("where", ["rows", "frame rows"])
@pytest.mark.parametrize("value", [1.5, "6", True, 2.0], ids=["float", "text", "bool", "whole-float"])
def test_condensed_row_counts_of_other_types_are_a_malformed_entry(tmp_path: Path, where: str, value: Any) -> None:
    """The counts were taken with `int()`: 1.5 read as 1 message (the report said 1 of 6 without an
    error), `"6"` and `true` as numbers, and compact found such an entry unchanged."""
    caps, archive, path = _archived_one(tmp_path)
    entry = orjson.loads(path.read_bytes())
    if where == "rows":
        entry["condensed"]["rows"] = value
    else:
        entry["condensed"]["frames"]["conns"][1] = value
    path.write_bytes(orjson.dumps(entry))
    _refused(runner.invoke(app, ["analyze", str(archive), "-q"]), "malformed archive entry", path.name)
    result = runner.invoke(app, ["compact", str(caps), "--out", str(archive)])
    assert result.exit_code == 0 and "1 file(s) compacted" in result.stderr, result.output
    assert _report(str(archive)) == _report(str(caps))


# --- two runs at once ----------------------------------------------------------------------------
def test_a_compact_run_while_another_writes_the_archive_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs converting a capture that grows (a cron job that overlaps the previous one): each
    chose its file names from the entry it read, both wrote the same names with other rows, and the
    entry left named another run's parts and frames beside its own accounting (a report that neither
    the capture as read nor as it is now gives). The second run is refused while the first holds the
    archive."""
    from addon.errors import ErascopeError
    from analyzer import compact as compact_module

    caps, archive = tmp_path / "caps", tmp_path / "archive"
    capture = _hand_written(caps / "cap.jsonl", "alpha", requests=1)
    for requests in (1, 2):  # the entry now names files under digested names (`_write_new`)
        _hand_written(capture, "alpha", requests=requests)
        compact_module.compact([str(caps)], archive, jobs=1)
    _hand_written(capture, "alpha", requests=3)
    expected = _report(str(caps))  # the capture as the first run reads it
    write_condensed = compact_module._write_condensed
    second: list[ErascopeError | None] = []

    def meanwhile(*args: Any, **kwargs: Any) -> dict[str, Any]:
        if not second:  # the first run wrote its parts; the capture grows, and another run starts
            second.append(None)
            _hand_written(capture, "alpha", requests=4)
            try:
                compact_module.compact([str(caps)], archive, jobs=1)
            except ErascopeError as exc:
                second[0] = exc
        return write_condensed(*args, **kwargs)

    monkeypatch.setattr(compact_module, "_write_condensed", meanwhile)
    compact_module.compact([str(caps)], archive, jobs=1)
    monkeypatch.undo()
    assert _report(str(archive)) == expected
    assert isinstance(second[0], ErascopeError) and "another `erascope compact`" in str(second[0])
    assert compact_module.compact([str(caps)], archive, jobs=1).written == [str(capture)]  # it grew since
    assert _report(str(archive)) == _report(str(caps))


def test_an_entry_naming_another_inputs_part_does_not_have_compact_delete_it(tmp_path: Path) -> None:
    """Converted again, an input's files its old entry named and the new one does not are deleted:
    an entry edited to name another input's part had compact delete that part (its rows gone from
    the archive, which then failed as incomplete)."""
    caps, archive = tmp_path / "caps", tmp_path / "archive"
    _hand_written(caps / "a.jsonl", "alpha")
    _hand_written(caps / "b.jsonl", "beta")
    assert runner.invoke(app, ["compact", str(caps), "--out", str(archive)]).exit_code == 0
    a, b = (orjson.loads((archive / "_sources" / f"{n}.jsonl.json").read_bytes()) for n in "ab")
    (archive / "_sources" / "a.jsonl.json").write_bytes(orjson.dumps({**a, "parts": a["parts"] + b["parts"]}))
    result = runner.invoke(app, ["compact", str(caps / "a.jsonl"), "--out", str(archive), "--force"])
    assert result.exit_code == 0, result.output
    assert (archive / b["parts"][0]).is_file()
    assert _report(str(archive)) == _report(str(caps))


# --- an input that cannot be read among others ----------------------------------------------------
def _corrupt_gzip(path: Path, capture: Path) -> Path:
    """`capture` gzipped, its deflate stream corrupted from its start (a copy gone bad): not even
    the header can be read."""
    import gzip

    data = bytearray(gzip.compress(capture.read_bytes(), mtime=0))
    data[10:40] = bytes(b ^ 0xFF for b in data[10:40])  # past gzip's own 10-byte header
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_input_that_cannot_be_read_is_named_and_the_others_archived(tmp_path: Path, jobs: str) -> None:
    """`analyze` names a file it cannot read (a gzip stream gone bad) and reads the others; `compact`
    stopped at it with its error alone, archiving none of the others (those converted before it
    were, by chance of order). It archives the others, names the file among the errors, prints its
    summary and exits 2; the file gets no entry, so the next run tries it again."""
    caps = tmp_path / "caps"
    a = _hand_written(caps / "a.jsonl", "srv-a")
    _corrupt_gzip(caps / "bad.jsonl.gz", _hand_written(tmp_path / "b.jsonl", "srv-b", requests=200))
    _hand_written(caps / "z.jsonl", "srv-z")
    archive = tmp_path / "archive"
    analyzed = runner.invoke(app, ["analyze", str(caps), "--format", "json", "--quiet"])
    assert analyzed.exit_code == 0 and "bad.jsonl.gz" in analyzed.stderr + analyzed.stdout

    result = runner.invoke(app, ["compact", str(caps), "--out", str(archive), "--jobs", jobs])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    errors = [line for line in result.stderr.splitlines() if line.startswith("erascope: error: ")]
    assert len(errors) == 1 and "bad.jsonl.gz" in errors[0] and "gzip" in errors[0], result.stderr
    assert "erascope: 2 file(s) compacted (" in result.stderr, result.stderr
    assert not (archive / "_sources" / f"{archive_name(str(caps / 'bad.jsonl.gz'))}.json").exists()
    assert _servers(_report(str(archive))) == ["srv-a", "srv-z"]
    assert _servers(_report(str(archive))) == _servers(_report(str(a), str(caps / "z.jsonl")))

    again = runner.invoke(app, ["compact", str(caps), "--out", str(archive), "--jobs", jobs])
    assert again.exit_code == 2 and "bad.jsonl.gz" in again.stderr, again.output
    assert "erascope: 0 file(s) compacted (0 rows, 0 Parquet part(s)), 2 unchanged" in again.stderr, again.stderr


def test_an_input_gone_since_it_was_listed_is_named_not_a_traceback(tmp_path: Path) -> None:
    """A file listed but gone when its turn came (a recorder compressed or removed it; here, a link
    to nothing) ended `compact` with a traceback. It is named among the errors, as `analyze` names
    it, and the others are archived."""
    caps = tmp_path / "caps"
    _hand_written(caps / "a.jsonl", "srv-a")
    (caps / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    archive = tmp_path / "archive"
    result = runner.invoke(app, ["compact", str(caps), "--out", str(archive)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert f"erascope: error: cannot read {caps / 'gone.jsonl'}: No such file or directory" in result.stderr
    assert "erascope: 1 file(s) compacted (" in result.stderr, result.stderr
    assert _servers(_report(str(archive))) == ["srv-a"]
