"""`erascope analyze --since/--until/--server`: a time window and server keys, on JSONL and on archives.

The window is `[since, until)` in UTC; the server keys are the records' `server`. JSONL captures
and their archive give the same report for the same selection, and on an archive the partitions of
other days and servers are never opened (they are overwritten with garbage here: opening one fails).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import unquote

import orjson
import polars as pl
import pytest
from typer.testing import CliRunner

from analyzer import archive as archive_reader
from analyzer.cli import app
from analyzer.compact import compact, kept_parts
from analyzer.pipeline import AnalyzeOptions, analyze
from analyzer.selection import Selection, parse_time
from bench.generate import generate

runner = CliRunner()
ERASCOPE = Path(sys.executable).parent / "erascope"
T0 = datetime(2026, 11, 29, 0, 30, tzinfo=UTC)


@pytest.fixture(scope="module")
def caps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generated captures over two UTC days (2026-11-28 and 29), stdio and HTTP servers."""
    out = tmp_path_factory.mktemp("selection") / "caps"
    generate(out, 1 << 20, files=2, spawns=10, seed=11)
    return out


@pytest.fixture(scope="module")
def archive(caps: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("selection-archive") / "archive"
    compact([str(caps)], out, jobs=1)
    return out


def _report(*args: str) -> dict:
    result = runner.invoke(app, ["analyze", *args, "--format", "json", "--quiet"])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout_bytes)


# --- the selection itself ------------------------------------------------------------------------
def test_bounds_are_since_inclusive_until_exclusive_and_nulls_are_left_out() -> None:
    t = T0.timestamp()
    rows = pl.DataFrame(
        {
            "ts": [t - 0.001, t, t + 10, t + 3600 - 0.001, t + 3600, None, t],
            "server": ["a", "a", "b", "a", "a", "a", None],
        }
    )
    window = Selection(since=T0, until=T0 + timedelta(hours=1))
    assert rows.select(window.expr()).to_series().to_list() == [False, True, True, True, False, False, True]
    servers = Selection(servers=("a",))
    assert rows.select(servers.expr()).to_series().to_list() == [True, True, False, True, True, True, False]
    both = Selection(since=T0, servers=("b",))
    assert rows.select(both.expr()).to_series().to_list() == [False, False, True, False, False, False, False]
    assert rows.select(Selection().expr()).to_series().all()


def test_a_time_without_a_zone_is_utc_and_offsets_are_converted() -> None:
    assert parse_time("2026-11-29") == datetime(2026, 11, 29, tzinfo=UTC)
    assert parse_time("2026-11-29T00:30") == T0
    assert parse_time("2026-11-29T00:30:00Z") == T0
    assert parse_time("2026-11-29T02:30+02:00") == T0
    naive = Selection(since=datetime(2026, 11, 29, 0, 30))
    shifted = Selection(since=datetime(2026, 11, 29, 1, 30, tzinfo=timezone(timedelta(hours=1))))
    rows = pl.DataFrame({"ts": [T0.timestamp() - 1, T0.timestamp()], "server": ["a", "a"]})
    assert rows.select(naive.expr()).to_series().to_list() == [False, True]
    assert rows.select(shifted.expr()).to_series().to_list() == [False, True]
    with pytest.raises(ValueError, match="not an ISO-8601 time"):
        parse_time("yesterday")


def test_days_are_pruned_only_when_they_cannot_hold_a_kept_row() -> None:
    window = Selection(since=T0, until=datetime(2026, 11, 30, tzinfo=UTC))
    assert not window.keeps_day("2026-11-28")
    assert window.keeps_day("2026-11-29")  # since is inside that day
    assert not window.keeps_day("2026-11-30")  # until is exclusive: midnight belongs to no kept row
    assert not window.keeps_day("unknown")  # rows without a time
    assert Selection(servers=("a",)).keeps_day("unknown")
    parts = [
        "day=2026-11-28/server=a/x.parquet",
        "day=2026-11-29/server=a/x.parquet",
        "day=2026-11-29/server=https%3A%2F%2Fapi.example.test%2Fmcp/x.parquet",
        "day=2026-11-29/server=__null__/x.parquet",
    ]
    assert kept_parts(parts, Selection(since=T0, servers=("https://api.example.test/mcp",))) == [parts[2]]
    assert kept_parts(parts, Selection(until=T0, servers=("a",))) == parts[:2]
    # `__null__` holds the rows of an empty server key too: kept when "" is asked for
    assert kept_parts(parts, Selection(servers=("",))) == [parts[3]]


def test_the_last_and_first_days_of_the_calendar_are_pruned_without_overflow() -> None:
    last, first = "9999-12-31", "0001-01-01"
    assert Selection(since=T0).keeps_day(last) and not Selection(since=T0).keeps_day(first)
    assert Selection(until=T0).keeps_day(first) and not Selection(until=T0).keeps_day(last)
    end = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
    assert Selection(since=end).keeps_day(last) and not Selection(since=end).keeps_day("9999-12-30")


# --- analyze -------------------------------------------------------------------------------------
SELECTIONS = [
    ["--since", "2026-11-29T00:30:00Z", "--until", "2026-11-29T01:30"],
    ["--server", "weather", "--server", "https://api.example.test/mcp"],
    ["--since", "2026-11-29", "--server", "weather"],
    ["--until", "2026-11-29T01:00+01:00", "--server", "files-legacy"],
]


@pytest.mark.parametrize("selection", SELECTIONS, ids=["window", "servers", "since-server", "until-offset"])
def test_archive_and_jsonl_give_the_same_selected_report(caps: Path, archive: Path, selection: list[str]) -> None:
    whole = _report(str(caps))
    jsonl = _report(str(caps), *selection)
    assert jsonl != whole
    assert _report(str(archive), *selection) == jsonl
    counted = {k: v for k, v in jsonl["inputs"].items() if k != "selection"}
    assert counted == whole["inputs"], "the accounting counts the files read, whatever is selected"
    assert jsonl["inputs"]["selection"], "and says what was selected"


def test_only_selected_traffic_is_analyzed(caps: Path) -> None:
    since, until = T0, T0 + timedelta(hours=1)
    servers = ("weather", "https://api.example.test/mcp")
    analysis = analyze([str(caps)], AnalyzeOptions(since=since, until=until, servers=servers))
    try:
        everything = analyze([str(caps)])
        rows = analysis.messages
        assert rows.height and analysis.message_count < everything.message_count
        ts = rows.get_column("ts")
        assert ts.min() >= since.timestamp() and ts.max() < until.timestamp()
        assert set(rows.get_column("server").cast(pl.String).unique()) <= set(servers)
        assert {v.server for v in analysis.servers} <= set(servers)
        everything.close()
    finally:
        analysis.close()


def test_a_window_that_starts_after_the_probe(tmp_path: Path) -> None:
    # "the last hour" of a modern server's traffic: every request in it is one condensing moves
    # out of the rows, so none is left (a polars schema error, exit 1, before)
    src = next((Path(__file__).resolve().parent.parent / "captures" / "corpus" / "auto-modern-http").glob("*.jsonl"))
    probe_answered = orjson.loads(src.read_bytes().split(b"\n")[2])["ts"]
    since = datetime.fromtimestamp(probe_answered + 1e-3, UTC).isoformat()
    result = runner.invoke(app, ["analyze", str(src), "--since", since, "--format", "json"])
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    assert [s["server"] for s in report["servers"]] == ["auto-modern-http-server"]
    assert report["servers"][0]["probes"] == 0


def test_partitions_outside_the_selection_are_never_opened(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = Path(shutil.copytree(archive, tmp_path / "archive"))
    selection = ["--since", "2026-11-29", "--server", "weather"]
    expected = _report(str(archive), *selection)
    opened = 0
    for part in archive.glob("day=*/server=*/*.parquet"):
        day = part.parent.parent.name.removeprefix("day=")
        if day == "2026-11-29" and unquote(part.parent.name.removeprefix("server=")) == "weather":
            opened += 1
            continue
        part.write_bytes(b"not parquet: opening this part fails")
    assert opened
    assert _report(str(archive), *selection) == expected
    # without a selection the parts are read too when the condensed frames are not current
    monkeypatch.setattr(archive_reader, "condensed_current", lambda entry: False)
    broken = runner.invoke(app, ["analyze", str(archive), "--format", "json", "--quiet"])
    assert broken.exit_code == 2, "the garbage parts are read when nothing is selected"
    assert "cannot be read" in broken.stderr


@pytest.mark.parametrize(
    "args",
    [["--since", "0001-01-01T00:00+01:00"], ["--until", "9999-12-31T23:59-01:00"]],
    ids=["before-year-1", "after-year-9999"],
)
def test_a_bound_outside_the_calendar_in_utc_is_a_usage_error(caps: Path, args: list[str]) -> None:
    proc = subprocess.run([str(ERASCOPE), "analyze", str(caps), "--quiet", *args], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{args[1]!r} lies outside years 1 to 9999 in UTC" in proc.stderr


def _one_probe_reports(tmp_path: Path, ts: float, *selection: str) -> list[dict]:
    """A capture of one probe at `ts`, analyzed with `selection` as JSONL and as its archive: the two
    JSON reports."""
    header = {"type": "header", "format": "erascope/1", "transport": "stdio", "seq": 0}
    probe = {"type": "frame", "conn": "c", "dir": "c2s", "ts": ts, "server": "s", "seq": 1,
             "raw": '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}'}  # fmt: skip
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "c.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in (header, probe)))
    assert runner.invoke(app, ["compact", str(tmp_path / "y"), "--out", str(tmp_path / "ya")]).exit_code == 0
    reports = []
    for source in ("y", "ya"):
        cmd = [str(ERASCOPE), "analyze", str(tmp_path / source), *selection, "--format", "json"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        reports.append(orjson.loads(proc.stdout))
    return reports


def test_a_record_on_the_last_day_of_the_calendar_is_selected_in_an_archive(tmp_path: Path) -> None:
    ts = datetime(9999, 12, 31, 12, tzinfo=UTC).timestamp()
    reports = [r["totals"]["probe_outcomes"] for r in _one_probe_reports(tmp_path, ts, "--since", "2026-01-01")]
    assert reports[0] == reports[1] == {"no-answer": 1}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "last week"], "not an ISO-8601 time"),
        (["--since", "2026-11-29", "--until", "2026-11-29"], "is not after --since"),
    ],
)
def test_bad_selections_are_usage_errors(caps: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["analyze", str(caps), "--quiet", *args])
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.parametrize(
    "args",
    [["--server", "wether"], ["--since", "2030-01-01"], ["--until", "2000-01-01", "--server", "weather"]],
    ids=["server-misspelled", "window-after", "window-before"],
)
def test_a_selection_that_holds_no_traffic_is_an_error(caps: Path, args: list[str]) -> None:
    # it gave "0 servers, no findings", exit 0: a CI gate with a misspelled key passed, always
    result = runner.invoke(app, ["analyze", str(caps), "--quiet", "--fail-on", "info", *args])
    assert result.exit_code == 2, result.output
    assert "the selection holds no traffic of the inputs" in result.stderr
    assert all(arg in result.stderr for arg in args), "it says which selection"


def test_a_server_key_with_no_traffic_is_named(caps: Path) -> None:
    result = runner.invoke(app, ["analyze", str(caps), "-f", "json", "--server", "weather", "--server", "wether"])
    assert result.exit_code == 0, result.output
    assert [s["server"] for s in orjson.loads(result.stdout)["servers"]] == ["weather"]
    assert "erascope: --server wether: no traffic of this server in the inputs" in result.stderr
    assert "--server weather:" not in result.stderr


def test_a_record_just_before_a_midnight_before_1970_is_selected_in_an_archive(tmp_path: Path) -> None:
    """Its day partition was its time in microseconds truncated toward zero: 1969-12-30T23:59:59.9999995
    went to day=1969-12-31, which `--until 1969-12-31` prunes, so the archive lost a record the JSONL kept."""
    ts = datetime(1969, 12, 31, tzinfo=UTC).timestamp() - 0.0000005
    reports = _one_probe_reports(tmp_path, ts, "--until", "1969-12-31")
    assert reports[0]["totals"] == reports[1]["totals"] and reports[0]["totals"]["probes"] == 1


# --- relative bounds, and a report that says what it covers ----------------------------------------
@pytest.mark.parametrize(
    ("text", "before"),
    [("7d", timedelta(days=7)), ("36h", timedelta(hours=36)), ("90m", timedelta(minutes=90)),
     ("2w", timedelta(weeks=2)), ("45s", timedelta(seconds=45)), (" 1.5h ", timedelta(minutes=90))],
)  # fmt: skip
def test_a_duration_is_that_long_before_now(text: str, before: timedelta) -> None:
    # "last week" was an ISO time worked out by hand; `journalctl`, `kubectl logs` take `--since 1h`
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    assert parse_time(text, now=now) == now - before


@pytest.mark.parametrize("text", ["7", "0d", "7y", "-1d", "d"])
def test_a_number_without_a_known_unit_is_no_time(text: str) -> None:
    with pytest.raises(ValueError, match="ISO-8601 time or a duration before now"):
        parse_time(text)


def test_a_selected_report_says_what_it_covers(caps: Path) -> None:
    # A slice's report read like the whole traffic's: fewer servers, nothing saying why.
    full = _report(str(caps))
    assert "selection" not in full["inputs"]
    sliced = _report(str(caps), "--since", "2026-11-29T00:30:00+00:00", "--server", "weather", "--server", "weather")
    assert sliced["inputs"]["selection"] == {"since": "2026-11-29T00:30:00Z", "until": None, "servers": ["weather"]}
    text = runner.invoke(app, ["analyze", str(caps), "--since", "2026-11-29T01:30+01:00", "--until", "2026-11-30",
                               "--quiet"], env={"COLUMNS": "200"})  # fmt: skip
    assert text.exit_code == 0, text.output
    window = "records at or after 2026-11-29T00:30:00Z and before 2026-11-30T00:00:00Z"
    assert f"analyzed only: {window}, of every server" in text.stdout


def test_a_relative_window_is_reported_as_the_moments_it_meant(caps: Path) -> None:
    before = datetime.now(UTC)
    report = _report(str(caps), "--since", "100000d")
    since = datetime.fromisoformat(report["inputs"]["selection"]["since"])
    assert before - timedelta(days=100000, seconds=5) <= since <= datetime.now(UTC) - timedelta(days=100000)
    assert [s["server"] for s in report["servers"]] == [s["server"] for s in _report(str(caps))["servers"]]
