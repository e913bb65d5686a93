"""The rows an analysis writes to disk while it reads (`analyzer.spill`): same rows back, nothing left behind."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from types import SimpleNamespace

import orjson
import polars as pl
import pytest

from addon.errors import ErascopeError
from analyzer import condense, load
from analyzer import spill as spill_module
from analyzer.condense import merge
from analyzer.load import combine, extract_file, extract_files
from analyzer.messages import as_strings
from analyzer.pipeline import AnalyzeOptions, analyze
from analyzer.rules import run_rules
from analyzer.spill import Spill
from tests.test_condense import _sorted
from tests.test_load import HEADER, write_lines
from tests.test_load_batches import inputs  # noqa: F401  (the fixture: many small files, rotated parts)

CORPUS = Path(__file__).resolve().parent.parent / "captures" / "corpus"


def test_put_gives_back_the_same_rows_and_close_removes_them(tmp_path: Path) -> None:
    frame = pl.DataFrame(
        {
            "server": pl.Series(["a", "b", None, "a"], dtype=pl.Categorical()),
            "seq": [3, 1, 2, None],
            "ts": [0.5, None, 1.5, 2.5],
            "flag": [True, False, None, True],
        }
    )
    with Spill(tmp_path) as spill:
        back = spill.put(frame)
        assert isinstance(back, pl.LazyFrame)
        assert back.collect().equals(frame, null_equal=True)
        assert back.collect_schema() == frame.schema  # categoricals stay categoricals
        assert spill.bytes > 0 and len(list(spill.path.iterdir())) == 1
        assert spill.path.parent == tmp_path
    assert not spill.path.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("streamed", [False, True])
def test_a_write_that_fails_is_a_clear_error(tmp_path: Path, streamed: bool) -> None:
    # a real "no space left on device": the next file the spill writes is /dev/full
    rows = pl.DataFrame({"a": list(range(10_000))})
    with Spill(tmp_path) as spill:
        os.symlink("/dev/full", spill.path / "000001.arrow")
        with pytest.raises(ErascopeError, match=r"cannot write temporary file .*000001\.arrow.*TMPDIR"):
            spill.sink(rows.lazy()) if streamed else spill.put(rows)


def test_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ErascopeError, match="cannot create a temporary directory in"):
        Spill(tmp_path / "missing")


@pytest.mark.parametrize("min_rows", [1, condense.SPILL_MIN_ROWS])
def test_loading_with_a_spill_reads_the_same_rows(
    inputs: list[str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    min_rows: int,
) -> None:
    """Every frame spilled (the parts of the rotated capture are paired again from disk), or the default."""
    monkeypatch.setattr(condense, "SPILL_MIN_ROWS", min_rows)
    alone = extract_files(inputs, jobs=2)
    # a file's moved requests and dropped answers are spilled when there are enough of them
    frames = [f for a in alone for f in (a.traffic.requests, a.traffic.answers) if f is not None]
    big = sum(f.height >= min_rows for f in frames)  # type: ignore[union-attr]
    # the small files of a spawn-per-call capture: read in batches, a batch's frames are spilled together
    assert big > 5 if min_rows == 1 else big == 0, big
    with Spill(tmp_path) as spill:
        spilled = combine(extract_files(inputs, jobs=2, spill=spill))
        assert len(list(spill.path.iterdir())) == big
        kind = pl.LazyFrame if big else pl.DataFrame
        assert isinstance(spilled.traffic.requests, kind)
        assert isinstance(spilled.traffic.answers, kind)
        in_memory = combine(alone)
        assert isinstance(in_memory.traffic.requests, pl.DataFrame)
        assert spilled.messages.equals(in_memory.messages, null_equal=True)
        for name in ("requests", "answers"):
            got, want = getattr(spilled.traffic, name).lazy().collect(), getattr(in_memory.traffic, name)
            assert got.height == want.height > 0, name
            assert _sorted(as_strings(got)).equals(_sorted(as_strings(want)), null_equal=True), name
        assert spilled.traffic.rows == in_memory.traffic.rows
        # merging spilled facts with in-memory ones keeps every row
        both = merge([spilled.traffic, in_memory.traffic])
        assert isinstance(both.requests, kind)
        assert both.requests.lazy().collect().height == 2 * in_memory.traffic.requests.height


def test_a_file_read_in_chunks_spills_each_chunk_as_it_is_condensed(
    inputs: list[str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(load, "PIECE_BYTES", 16 << 10)
    monkeypatch.setattr(load, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(condense, "SPILL_MIN_ROWS", 1)
    biggest = max(inputs, key=os.path.getsize)
    assert os.path.getsize(biggest) > 8 * load.CHUNK_BYTES
    with Spill(tmp_path) as spill:
        chunked = extract_file(biggest, spill=spill)
        assert len(list(spill.path.iterdir())) > 8  # while the file was read, not at its end
        alone = extract_file(biggest)
        # answers whose request was in an earlier chunk are paired from the spilled rows
        assert chunked.messages.equals(alone.messages, null_equal=True)
        for name in ("requests", "answers"):
            got, want = getattr(chunked.traffic, name), getattr(alone.traffic, name)
            assert isinstance(got, pl.LazyFrame) and isinstance(want, pl.DataFrame), name
            assert got.collect().equals(want, null_equal=True), name


def _spill_every_frame(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, int]]:
    """Spill frames of any size (the corpus' captures are small); returns, for each frame written,
    the directory its spill was made in and its rows."""
    written: list[tuple[Path, int]] = []
    put = Spill.put

    def recording(self: Spill, frame: pl.DataFrame) -> pl.LazyFrame:
        written.append((self.path.parent, frame.height))
        return put(self, frame)

    monkeypatch.setattr(spill_module.Spill, "put", recording)
    monkeypatch.setattr(condense, "SPILL_MIN_ROWS", 1)
    return written


def test_analyze_spills_and_its_files_go_with_the_analysis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written = _spill_every_frame(monkeypatch)
    temp = tmp_path / "temp"
    temp.mkdir()
    analysis = analyze([CORPUS], AnalyzeOptions(spill_dir=str(temp)))
    assert sum(rows for _, rows in written) > 0  # the corpus has plain exchanges: their requests went to disk
    assert analysis.servers and analysis.spill is not None and analysis.spill.path.parent == temp
    # the request view the rules read stays there while the analysis lives: the rules run again
    assert isinstance(analysis.rule_context.requests, pl.LazyFrame)
    again = run_rules(analysis)
    assert again == analysis.findings and [f.details for f in again] == [f.details for f in analysis.findings]
    analysis.close()
    assert list(temp.iterdir()) == []
    # an analysis nobody holds any more takes its files with it
    dropped = analyze([CORPUS], AnalyzeOptions(spill_dir=str(temp)))
    assert list(temp.iterdir()) != []
    del dropped
    gc.collect()
    assert list(temp.iterdir()) == []
    # and an analysis that fails part way leaves nothing behind
    empty = tmp_path / "empty"
    empty.mkdir()
    write_lines(empty / "x.jsonl", [orjson.dumps(HEADER).decode()])  # a header, no traffic
    with pytest.raises(ErascopeError, match="no capture records"):
        analyze([empty], AnalyzeOptions(spill_dir=str(temp)))
    assert list(temp.iterdir()) == []


def test_answers_go_to_disk_with_the_moved_requests_and_the_findings_stay_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rules' answers (`RuleContext.responses`, a row per answered request) are written to the
    spill when the moved requests are on disk (big inputs), so they are not held for the rest of the
    analysis; the rules read them back and find the same."""
    in_memory = analyze([CORPUS], AnalyzeOptions(spill_dir=str(tmp_path)))
    assert isinstance(in_memory.rule_context.responses, pl.DataFrame)  # the corpus is small: nothing moved to disk
    _spill_every_frame(monkeypatch)
    on_disk = analyze([CORPUS], AnalyzeOptions(spill_dir=str(tmp_path)))
    answers = on_disk.rule_context.responses
    assert isinstance(answers, pl.LazyFrame)
    assert _sorted(answers.collect()).equals(_sorted(in_memory.rule_context.responses))
    assert on_disk.findings == in_memory.findings
    assert [f.details for f in on_disk.findings] == [f.details for f in in_memory.findings]
    assert any(f.rule in ("stale-era", "rollout-split") for f in on_disk.findings)  # the rules that read them


def test_the_cli_takes_a_temp_dir_and_refuses_a_missing_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from analyzer.cli import app

    written = _spill_every_frame(monkeypatch)
    temp = tmp_path / "temp"
    temp.mkdir()
    ok = CliRunner().invoke(app, ["analyze", str(CORPUS), "-q", "--format", "json", "--temp-dir", str(temp)])
    assert ok.exit_code == 0, ok.output
    assert written and {directory for directory, _ in written} == {temp} and list(temp.iterdir()) == []
    bad = CliRunner().invoke(app, ["analyze", str(CORPUS), "-q", "--temp-dir", str(tmp_path / "missing")])
    assert bad.exit_code == 2
    assert "cannot create a temporary directory in" in bad.output


def _analysis_of(paths: list[str]) -> SimpleNamespace:
    """What `RuleContext.from_analysis` reads of an analysis of `paths`: messages, probes, inits, traffic."""
    from analyzer.probes import classify_inits, classify_probes

    loaded = combine(extract_files(paths, jobs=2))
    moved = loaded.traffic.requests
    return SimpleNamespace(
        messages=loaded.messages,
        probes=classify_probes(loaded.messages, moved=moved),
        inits=classify_inits(loaded.messages, moved=moved),
        traffic=loaded.traffic,
    )


def test_the_request_view_built_in_buckets_on_disk_is_the_view_built_in_memory(
    inputs: list[str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from analyzer.rules import RuleContext, RuleOptions
    from analyzer.rules import context as context_module

    monkeypatch.setattr(context_module, "VIEW_BUCKET_ROWS", 100)
    monkeypatch.setattr(context_module, "VIEW_SLICE_ROWS", 37)
    monkeypatch.setattr(context_module, "VIEW_MEMORY_ROWS", 0)  # never kept in memory
    analysis = _analysis_of(inputs)
    in_memory = RuleContext.from_analysis(analysis, RuleOptions()).requests
    assert isinstance(in_memory, pl.DataFrame)
    servers = in_memory.get_column("server").n_unique()
    assert servers > 3 and in_memory.height > 10 * 100
    with Spill(tmp_path) as spill:
        view = RuleContext.from_analysis(analysis, RuleOptions(), spill).requests
        assert isinstance(view, pl.LazyFrame)
        # a bucket per server at least, each written in slices
        assert len(list(spill.path.iterdir())) > servers + in_memory.height // 100
        assert view.collect().equals(in_memory)


def test_sigterm_removes_the_temporary_directory(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """A real `erascope analyze` stopped by SIGTERM while it reads leaves no temporary directory."""
    import signal
    import subprocess
    import sys
    import time

    from bench.generate import generate_spawns

    # 10,000 spawn captures: 1.5 s of analysis on a fast machine, 1.25 s of it after the temporary
    # directory appears (3,000 were read whole within the half second this test used to wait)
    generate_spawns(tmp_path / "caps", 10_000, calls=1)
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "erascope"), "analyze", str(tmp_path / "caps"), "--temp-dir", str(temp)],
        env=clean_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not any(temp.iterdir()) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    # stopped as soon as its temporary directory exists, which is before the reading: no fixed wait
    # that a faster machine could outrun
    assert proc.poll() is None, "the analysis ended before it could be stopped: give it more input"
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert list(temp.iterdir()) == []
    assert b"Traceback" not in stderr


@pytest.mark.parametrize("limit", [0, 1 << 20])
def test_a_small_view_of_requests_in_memory_stays_in_memory(
    inputs: list[str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    limit: int,
) -> None:
    """With a spill, the request view is written there only when the requests are (or are many):
    requests held in memory make a view held in memory, the same view, and no file."""
    from analyzer.rules import RuleContext, RuleOptions
    from analyzer.rules import context as context_module

    monkeypatch.setattr(context_module, "VIEW_MEMORY_ROWS", limit, raising=False)
    analysis = _analysis_of(inputs)
    moved = analysis.traffic.requests
    assert isinstance(moved, pl.DataFrame) and moved.height
    in_memory = RuleContext.from_analysis(analysis, RuleOptions()).requests
    assert in_memory.height > 1000
    with Spill(tmp_path) as spill:
        view = RuleContext.from_analysis(analysis, RuleOptions(), spill).requests
        assert view.lazy().collect().equals(in_memory)
        if limit:
            assert isinstance(view, pl.DataFrame) and list(spill.path.iterdir()) == []
        else:
            assert isinstance(view, pl.LazyFrame) and list(spill.path.iterdir())


def test_probe_costs_looked_up_a_group_of_keys_at_a_time_are_those_looked_up_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """probe-storm's look-ups over a request view on disk go a group of keys at a time
    (`frames.key_buckets`), each group's rows read alone; every probe still gets the cost it gets
    when all rows are looked in at once, those without a real request after them included."""
    from analyzer.load import find_inputs
    from analyzer.rules import RuleContext, RuleOptions, frames
    from analyzer.rules import context as context_module
    from analyzer.rules.storms import probe_costs

    analysis = _analysis_of(find_inputs([str(CORPUS)]))
    at_once = probe_costs(RuleContext.from_analysis(analysis, RuleOptions()))
    groups: list[int] = []
    original = frames.key_buckets

    def counted(*args: object, **kwargs: object) -> list[pl.Series]:
        found = original(*args, **kwargs)  # type: ignore[arg-type]
        groups.append(len(found))
        return found

    monkeypatch.setattr(frames, "LOOKUP_BUCKET_ROWS", 3)
    monkeypatch.setattr(context_module, "VIEW_MEMORY_ROWS", 0)
    monkeypatch.setattr("analyzer.rules.storms.key_buckets", counted)
    with Spill(tmp_path) as spill:
        ctx = RuleContext.from_analysis(analysis, RuleOptions(), spill)
        assert isinstance(ctx.requests, pl.LazyFrame)
        grouped = probe_costs(ctx)
    assert groups and min(groups) > 3  # both look-ups went in groups
    assert at_once.height > 50 and at_once.get_column("cost_s").null_count() not in (0, at_once.height)
    assert grouped.sort("file", "line").equals(at_once.sort("file", "line"))


def test_view_buckets_cut_a_busy_pair_by_time_and_keep_every_row_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spilled request view is built a bucket at a time (`context._buckets`): one (server, client)
    pair with more rows than a bucket is cut by time. Every row lands in one bucket, whatever its
    time (ties at a cut, null, NaN), server (missing) or connection (missing, or of no known client),
    no bucket is much over the size, and the buckets sorted one by one, in turn, are the view's order."""
    import random

    from analyzer.identity import UNKNOWN_CLIENT
    from analyzer.rules import context as context_module
    from analyzer.rules.frames import pair_key

    monkeypatch.setattr(context_module, "VIEW_BUCKET_ROWS", 50)
    rng = random.Random(3)
    n = 2000
    cat = pl.Categorical()
    conns = [f"k{i}" for i in range(30)]
    # a connection belongs to one client; some have none known, some rows no connection at all
    named = {c: rng.choices(["c1", "c2", "c3"], weights=[90, 5, 5])[0] for c in conns[:25]}
    rows = pl.DataFrame(
        {
            "server": [rng.choices(["busy", "s2", "s3", None], weights=[80, 10, 9, 1])[0] for _ in range(n)],
            "conn": [rng.choice([*conns, None]) for _ in range(n)],
            "ts": [rng.choice([None, *[float("nan")] * 8, 5.0, *(float(t) for t in range(40))]) for _ in range(n)],
            "seq": list(range(n)),
        },
        schema_overrides={"server": cat, "conn": cat},
    ).with_row_index("row")
    known = rows.select("server", "conn").unique().drop_nulls().filter(pl.col("conn").is_in(list(named)))
    clients = known.select(
        pair_key("server", "conn"), client=pl.col("conn").cast(pl.String).replace_strict(named).cast(cat)
    )
    rows = rows.with_columns(
        pair_key("server", "conn")
        .replace_strict(clients["_key"], clients["client"], default=None, return_dtype=cat)
        .fill_null(pl.lit(UNKNOWN_CLIENT).cast(cat))
        .alias("client")
    )
    buckets = context_module._buckets(rows.lazy(), clients)
    parts = [rows.filter(bucket) for bucket in buckets]
    assert len(parts) > 20
    assert sorted(r for part in parts for r in part.get_column("row").to_list()) == list(range(n))
    # a bucket grows past the size only by the rows of one time (or of none) of one pair
    untimed = pl.col("ts").fill_nan(None)
    ties = rows.group_by("server", "client", untimed).len().get_column("len").max()
    assert isinstance(ties, int) and max(part.height for part in parts) <= 50 + ties < n // 4
    whole = rows.get_column("row").gather(context_module._view_order(rows)).to_list()
    in_turn = [r for part in parts for r in part.get_column("row").gather(context_module._view_order(part)).to_list()]
    assert in_turn == whole
