"""`--scheduler`: compact and analyze on a real Dask cluster (`dask scheduler` and two `dask worker`
processes on loopback, started here) give what the local run gives, byte for byte; a worker killed
mid-run is retried elsewhere or the run fails loudly, never with a partial report."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson
import polars as pl
import pytest

from analyzer.compact import ARCHIVE_SCHEMA
from bench.dask_cluster import Cluster, dask_cluster
from bench.generate import generate
from tests.test_cluster_merge import tied_captures

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
ERASCOPE = Path(sys.executable).parent / "erascope"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two workers whose working directory is the repository, like the client's in these tests."""
    with dask_cluster(tmp_path_factory.mktemp("cluster"), cwd=ROOT) as c:
        yield c


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generated captures: HTTP and stdio servers, storms, rollout splits, malformed and torn lines."""
    out = tmp_path_factory.mktemp("gen") / "caps"
    generate(out, 1 << 20, files=3, spawns=12, seed=5)
    return out


def erascope(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run([str(ERASCOPE), *map(str, args)], cwd=ROOT, capture_output=True, timeout=600)
    if check:
        assert result.returncode == 0, result.stderr.decode()
    return result


def _tree(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _rows(archive: Path) -> pl.DataFrame:
    parts = sorted(archive.glob("day=*/server=*/*.parquet"))
    return pl.read_parquet(parts, schema=ARCHIVE_SCHEMA, hive_partitioning=False).sort("file", "line", "seq")


@pytest.mark.parametrize("source", ["corpus", "generated"])
def test_compact_on_the_cluster_writes_the_local_archive(
    cluster: Cluster, generated: Path, tmp_path: Path, source: str
) -> None:
    # the corpus by a relative path (recorded as given, opened in the workers' directory), the
    # generated set by an absolute one
    given = "captures/corpus" if source == "corpus" else str(generated)
    erascope("compact", given, "--out", tmp_path / "local")
    out = erascope("compact", given, "--out", tmp_path / "cluster", "--scheduler", cluster.address)
    assert b"0 unchanged" in out.stderr
    local, remote = _rows(tmp_path / "local"), _rows(tmp_path / "cluster")
    assert remote.height > 0
    assert remote.equals(local)
    assert _tree(tmp_path / "cluster") == _tree(tmp_path / "local")  # the same files, entries included


def test_compact_on_the_cluster_names_every_refused_input_as_locally(cluster: Cluster, tmp_path: Path) -> None:
    """A whole file of an unknown major among the inputs, and a capture of one joined into another file:
    the workers archive the rest, and the run names both, as the local run does."""
    from tests.test_joined_formats import _refused_inputs

    caps, *_ = _refused_inputs(tmp_path)
    local = erascope("compact", caps, "--out", tmp_path / "local", check=False)
    remote = erascope("compact", caps, "--out", tmp_path / "cluster", "--scheduler", cluster.address, check=False)
    assert (remote.returncode, local.returncode) == (2, 2), remote.stderr.decode()
    assert remote.stderr.replace(b"/cluster", b"/local") == local.stderr
    assert remote.stderr.count(b"capture format 'erascope/2' is not supported") == 2
    assert _tree(tmp_path / "cluster") == _tree(tmp_path / "local")


def test_compact_on_the_cluster_names_the_inputs_it_cannot_read_as_locally(cluster: Cluster, tmp_path: Path) -> None:
    """A gzip stream gone bad and a file gone since it was listed: the workers archive the rest, and
    the run names both, as the local run does."""
    from tests.test_compact_hostile import _corrupt_gzip, _hand_written

    caps = tmp_path / "caps"
    _hand_written(caps / "a.jsonl", "srv-a")
    _corrupt_gzip(caps / "bad.jsonl.gz", _hand_written(tmp_path / "b.jsonl", "srv-b"))
    (caps / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    local = erascope("compact", caps, "--out", tmp_path / "local", check=False)
    remote = erascope("compact", caps, "--out", tmp_path / "cluster", "--scheduler", cluster.address, check=False)
    assert (remote.returncode, local.returncode) == (2, 2), remote.stderr.decode()
    assert remote.stderr.replace(b"/cluster", b"/local") == local.stderr
    assert local.stderr.count(b"erascope: error: ") == 2 and b"1 file(s) compacted" in local.stderr
    assert _tree(tmp_path / "cluster") == _tree(tmp_path / "local")


def test_compact_refuses_inputs_the_workers_do_not_see(tmp_path: Path) -> None:
    # workers in another directory: the relative path names nothing there (or another file)
    src = tmp_path / "caps"
    shutil.copytree(ROOT / "captures" / "corpus", src)
    with dask_cluster(tmp_path / "cl", cwd=tmp_path / "cl") as c:
        result = subprocess.run(
            [str(ERASCOPE), "compact", "caps", "--out", "arch", "--scheduler", c.address],
            cwd=tmp_path,
            capture_output=True,
            timeout=600,
        )
    assert result.returncode == 2, result.stderr.decode()
    assert b"filesystem the client and the workers share" in result.stderr


def test_scheduler_without_the_engine_says_how_to_install_it(tmp_path: Path) -> None:
    # `distributed` made unimportable the way Python marks a missing module
    code = (
        "import sys; sys.modules['distributed'] = None; from analyzer.cli import main;"
        f" sys.argv = ['erascope', 'compact', 'captures/corpus', '--out', {str(tmp_path / 'a')!r},"
        " '--scheduler', 'tcp://127.0.0.1:1']; main()"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=120)
    assert result.returncode == 2
    assert "pip install 'erascope[dask]'" in result.stderr.decode()


def _free_port() -> int:
    """A loopback port nothing listens on (bound by the OS, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_scheduler_is_an_input_error(tmp_path: Path) -> None:
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    result = erascope("compact", "captures/corpus", "--out", tmp_path / "a", "--scheduler", address, check=False)
    assert result.returncode == 2
    assert f"cannot reach the Dask scheduler at {address}" in result.stderr.decode()


@pytest.mark.parametrize("case", ["silent listener", "worker", "not a scheduler file", "tls without certificates"])
def test_an_address_that_is_no_scheduler_is_an_input_error(cluster: Cluster, tmp_path: Path, case: str) -> None:
    """A port that accepts connections and never answers (a mistyped port, a service that waits for
    its client to speak first) hung the run for good, past the connect timeout (the handshake after
    the TCP connect has none); a worker's address, a file that is no scheduler file and a `tls://`
    address without a TLS configuration crashed with a traceback."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        if case == "silent listener":
            address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
        elif case == "worker":
            address = sorted(cluster.worker_pids())[0]
        elif case == "not a scheduler file":
            address = str(tmp_path / "scheduler.json")
            Path(address).write_bytes(b'{"not": "an address"}')
        else:
            address = f"tls://127.0.0.1:{_free_port()}"
        # a guard, far above the connect timeout: a run that hangs fails the test instead of stalling it
        result = subprocess.run(
            [str(ERASCOPE), "compact", "captures/corpus", "--out", str(tmp_path / "a"), "--scheduler", address],
            cwd=ROOT, capture_output=True, timeout=180,
        )
    assert result.returncode == 2, result.stderr.decode()
    assert b"Traceback" not in result.stderr
    assert address.encode() in result.stderr


@pytest.mark.parametrize("command", ["compact", "analyze"])
def test_jobs_with_a_scheduler_is_refused(command: str, tmp_path: Path) -> None:
    """`--jobs` with `--scheduler`: compact ignored it without a word, and analyze ran that many threads
    in every shard, on workers that have their own (`dask worker --nthreads`)."""
    args = ["--out", str(tmp_path / "a")] if command == "compact" else ["-q"]
    result = subprocess.run(
        [str(ERASCOPE), command, "captures/corpus", *args, "--jobs", "4", "--scheduler", f"tcp://127.0.0.1:{_free_port()}"],
        cwd=ROOT, capture_output=True, timeout=180,
    )  # fmt: skip
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert "--jobs does not apply with --scheduler" in err and "Traceback" not in err, err
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("tcp://alice:s3cret@127.0.0.1:{port}", "tcp://***@127.0.0.1:"),
        ("tcp://127.0.0.1:{port}?token=s3cret", "?***"),
        ("tcp://127.0.0.1:99999", "out of range"),
        ("inproc://x", "inproc protocol"),
        ("http://127.0.0.1:{port}", "http protocol"),
        ("tcp://", "no port"),
        ("scheduler.json", "no scheduler file at that path"),
        pytest.param(
            "ucx://127.0.0.1:{port}",
            "needs distributed-ucxx",
            marks=pytest.mark.skipif(importlib.util.find_spec("distributed_ucxx") is not None, reason="UCX installed"),
        ),
    ],
)
def test_an_address_no_scheduler_can_have_is_said_so(address: str, said: str, tmp_path: Path) -> None:
    """A password in the address was printed in clear (in Dask's "invalid address" text too), a port
    out of range waited for the connect timeout and then said nothing answered, `inproc://` gave
    Python's "not enough values to unpack", and `ucx://` without Dask's UCX package "Can't instantiate
    abstract class UCXConnector"."""
    address = address.format(port=_free_port())
    result = subprocess.run(
        [str(ERASCOPE), "compact", "captures/corpus", "--out", str(tmp_path / "a"), "--scheduler", address],
        cwd=ROOT, capture_output=True, timeout=180,
    )
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert said in err, err
    assert "s3cret" not in err and "Traceback" not in err, err
    assert not (tmp_path / "a").exists()


# --- analyze -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory, generated: Path) -> dict[str, Path]:
    """Local archives of the corpus and of the generated set."""
    root = tmp_path_factory.mktemp("archives")
    out = {"corpus": root / "corpus", "generated": root / "generated"}
    erascope("compact", "captures/corpus", "--out", out["corpus"])
    erascope("compact", generated, "--out", out["generated"])
    return out


def _servers(archive: Path) -> int:
    return len({p.name for p in archive.glob("day=*/server=*")})


def _compacted_and_sharded(cluster: Cluster, caps: Path, archive: Path, shards: int) -> dict[str, Any]:
    """`caps` compacted into `archive`, analyzed locally and in `shards` on the cluster: the local
    report, once the cluster's is shown to be the same bytes."""
    from analyzer.cluster import analyze_on_cluster
    from analyzer.pipeline import AnalyzeOptions
    from analyzer.report import render_json

    erascope("compact", caps, "--out", archive)
    local = erascope("analyze", archive, "--format", "json", "--quiet").stdout
    merged = analyze_on_cluster(cluster.address, [archive], AnalyzeOptions(), shards=shards)
    assert render_json(merged).encode() == local
    return orjson.loads(local)


@pytest.mark.parametrize("source", ["corpus", "generated"])
def test_analyze_on_the_cluster_gives_the_local_report(
    cluster: Cluster, archives: dict[str, Path], source: str
) -> None:
    archive = archives[source]
    assert _servers(archive) > 2  # more servers than workers: shards of several keys each
    local = erascope("analyze", archive, "--format", "json", "--quiet").stdout
    remote = erascope("analyze", archive, "--format", "json", "--quiet", "--scheduler", cluster.address).stdout
    assert orjson.loads(local)["servers"]  # a report with servers and findings, not an empty one
    assert orjson.loads(local)["findings"]
    assert remote == local


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_every_report_format_on_the_cluster_is_the_local_one(
    cluster: Cluster, archives: dict[str, Path], fmt: str
) -> None:
    """The html page draws a mark per probe and initialize (server, time, outcome, peer, client,
    file:line): the merged analysis had only their outcomes, and the page crashed on it."""
    archive = archives["generated"]
    local = erascope("analyze", archive, "--format", fmt, "--quiet").stdout
    remote = erascope("analyze", archive, "--format", fmt, "--quiet", "--scheduler", cluster.address)
    assert b"Traceback" not in remote.stderr
    assert remote.stdout == local


def test_a_shard_sends_back_a_row_per_probe_only_for_the_html_page(archives: dict[str, Path]) -> None:
    """Only small results travel back: text, JSON and markdown read of probes and initializes their
    outcome counts, so a shard sends those (a probe storm of millions is a few rows); the html page's
    marks need a row each, sent only for it. Run in process: what a worker returns."""
    from analyzer.cluster import _analyze_shard, code_identity
    from analyzer.pipeline import AnalyzeOptions, analyze
    from tests.test_cluster_merge import seen

    archive = str(archives["generated"])
    local = analyze([archive], AnalyzeOptions())
    servers = tuple(sorted(v.server for v in local.servers))
    counts = {k: n for k, n in local.probes.get_column("outcome").cast(pl.String).value_counts().iter_rows()}
    assert local.probes.height > len(counts)  # more probes than outcomes: counts are the smaller
    lean = _analyze_shard(code_identity(), 0, archive, seen(archive), servers, AnalyzeOptions())
    full = _analyze_shard(code_identity(), 0, archive, seen(archive), servers, AnalyzeOptions(), marks=True)
    assert lean.probes.height == len(counts) and full.probes.height == local.probes.height
    assert lean.inits.height < full.inits.height == local.inits.height


def test_the_html_page_does_not_depend_on_the_order_probes_come_back_in(cluster: Cluster, tmp_path: Path) -> None:
    """Probes of one server at one time (a coarse clock, or times anyone can write into a capture):
    the page sorted its marks by server and time only, so tied marks kept the order their rows came
    in, which differs between the local run and the merge of the shards, and so did the page."""
    caps = tmp_path / "caps"
    scenarios = ["probe-storm-stdio", "probe-storm-http", "auto-modern-stdio", "auto-legacy-http",
                 "rollout-split-http", "legacy-mode-dual-stdio"]
    sources = [sorted((ROOT / "captures" / "corpus" / scenario).glob("*.jsonl"))[0] for scenario in scenarios]
    tied_captures(sources, caps, servers=3, instants=2)
    archive = tmp_path / "archive"
    erascope("compact", caps, "--out", archive)
    local = erascope("analyze", archive, "--format", "html", "--quiet").stdout
    remote = erascope("analyze", archive, "--format", "html", "--quiet", "--scheduler", cluster.address).stdout
    assert remote == local


@pytest.mark.parametrize("shards", [1, 3, 7])
def test_report_does_not_depend_on_the_shards(cluster: Cluster, archives: dict[str, Path], shards: int) -> None:
    from analyzer.cluster import analyze_on_cluster
    from analyzer.pipeline import AnalyzeOptions, analyze
    from analyzer.report import render_json

    archive = archives["generated"]
    local = analyze([archive], AnalyzeOptions())
    try:
        expected = render_json(local)
    finally:
        local.close()
    merged = analyze_on_cluster(cluster.address, [archive], AnalyzeOptions(), shards=shards)
    assert render_json(merged) == expected


def test_analyze_on_the_cluster_needs_an_archive(cluster: Cluster) -> None:
    result = erascope("analyze", "captures/corpus", "--scheduler", cluster.address, check=False)
    assert result.returncode == 2
    assert "--scheduler analyzes one archive" in result.stderr.decode()


def _shard_story(address: str) -> list[tuple[str, str, str, str]]:
    """(key, from state, to state, stimulus) of every shard task's transitions on the scheduler."""
    from distributed import Client

    def log(dask_scheduler: Any) -> list[tuple[str, str, str, str]]:
        return [
            (str(t[0]), t[1], t[2], str(t[4]))
            for t in dask_scheduler.transition_log
            if str(t[0]).startswith("erascope-shard-")
        ]

    with Client(address, timeout=10, set_as_default=False) as client:
        return client.run_on_scheduler(log)


def _kill_a_busy_worker(cluster: Cluster, proc: subprocess.Popen[bytes]) -> str:
    """Wait until a worker is given a shard task, SIGKILL it, and return its address."""
    from distributed import Client

    pids = cluster.worker_pids()
    with Client(cluster.address, timeout=10, set_as_default=False) as client:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            for worker, keys in client.processing().items():
                if any(str(k).startswith("erascope-shard-") for k in keys):
                    os.kill(pids[worker], signal.SIGKILL)
                    return worker
            time.sleep(0.01)
    raise AssertionError(f"no worker was given a shard task (exit {proc.poll()})")


def test_a_worker_killed_mid_run_is_replaced_and_the_report_is_the_same(
    tmp_path: Path, archives: dict[str, Path]
) -> None:
    archive = archives["generated"]
    local = erascope("analyze", archive, "--format", "json", "--quiet").stdout
    # no nanny: a killed worker stays dead, the scheduler moves its task to the other one
    with dask_cluster(tmp_path / "cl", cwd=ROOT, nanny=False) as c:
        proc = subprocess.Popen(
            [str(ERASCOPE), "analyze", str(archive), "--format", "json", "--quiet", "--scheduler", c.address],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        _kill_a_busy_worker(c, proc)
        out, err = proc.communicate(timeout=600)
        story = _shard_story(c.address)
    assert proc.returncode == 0, err.decode()
    assert out == local
    # the scheduler took the shard back from the dead worker and ran it again to the end
    lost = {key for key, start, end, why in story if (start, end) == ("processing", "released")
            and why.startswith("handle-worker-cleanup")}
    finished = {key for key, start, end, _ in story if (start, end) == ("processing", "memory")}
    assert lost, story
    assert lost <= finished, story


def test_a_shard_that_cannot_be_run_fails_the_run_with_a_clear_error(
    tmp_path: Path, archives: dict[str, Path]
) -> None:
    archive = archives["generated"]
    # the scheduler gives up on a task after its first worker dies with it
    env = {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    with dask_cluster(tmp_path / "cl", cwd=ROOT, nanny=False, env=env) as c:
        proc = subprocess.Popen(
            [str(ERASCOPE), "analyze", str(archive), "--format", "json", "--quiet", "--scheduler", c.address],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        _kill_a_busy_worker(c, proc)
        out, err = proc.communicate(timeout=600)
    assert proc.returncode == 2
    assert out == b""  # no report at all, rather than a partial one
    assert "the workers running it died" in err.decode()


def test_workers_running_another_erascope_are_refused(tmp_path: Path, archives: dict[str, Path]) -> None:
    """Workers whose erascope differs from the client's (here one rule's default threshold) analyzed
    their shards their own way: exit 0 and a report other than the local one; an older erascope's
    shard results crashed the merge. Both steps are refused before any task runs."""
    other = tmp_path / "other"
    for package in ("addon", "analyzer"):
        shutil.copytree(ROOT / package, other / package, ignore=shutil.ignore_patterns("__pycache__"))
    options = other / "analyzer" / "rules" / "options.py"
    options.write_text(options.read_text().replace("storm_min_probes: int = 5", "storm_min_probes: int = 500"))
    archive = archives["corpus"]
    local = erascope("analyze", archive, "--format", "json", "--quiet").stdout
    assert "probe-storm" in {f["rule"] for f in orjson.loads(local)["findings"]}  # the other rule reports otherwise
    with dask_cluster(tmp_path / "cl", cwd=ROOT, env={"PYTHONPATH": str(other)}) as c:
        analyzed = erascope("analyze", archive, "--format", "json", "--quiet", "--scheduler", c.address, check=False)
        compacted = erascope("compact", "captures/corpus", "--out", tmp_path / "a", "--scheduler", c.address,
                             check=False)
    for result in (analyzed, compacted):
        assert result.returncode == 2, result.stderr.decode()
        assert b"another erascope" in result.stderr
    assert analyzed.stdout == b""
    assert not list((tmp_path / "a").glob("day=*"))  # no worker wrote a part


@pytest.mark.parametrize("window", [False, True])
def test_a_selection_is_sharded_like_the_whole(cluster: Cluster, archives: dict[str, Path], window: bool) -> None:
    archive = archives["generated"]
    keys = sorted({unquote(p.name.split("=", 1)[1]) for p in archive.glob("day=*/server=*")})[:3]
    picked = [a for k in keys for a in ("--server", k)]
    if window:  # the last day only, and the scheduler given as its scheduler file
        picked += ["--since", max(p.name.split("=", 1)[1] for p in archive.glob("day=*"))]
    address = str(cluster.scheduler_file) if window else cluster.address
    local = erascope("analyze", archive, "--format", "json", "--quiet", *picked).stdout
    remote = erascope("analyze", archive, "--format", "json", "--quiet", *picked, "--scheduler", address).stdout
    assert {s["server"] for s in orjson.loads(local)["servers"]} <= set(keys)
    assert orjson.loads(local)["servers"]
    assert orjson.loads(local)["inputs"]["selection"]["servers"] == keys  # the report says it is a slice
    assert remote == local


def test_a_partial_file_a_killed_compact_left_is_ignored_as_locally(
    cluster: Cluster, archives: dict[str, Path], tmp_path: Path
) -> None:
    """A compact killed while writing a part leaves its temporary file beside the parts
    (`.<name>.<pid>.<thread>.tmp`, `compact._atomic_write`); no entry names it. The local run reads
    only what the entries name; the cluster's planning read every file in the partitions and
    crashed on it (a polars traceback)."""
    archive = tmp_path / "archive"
    shutil.copytree(archives["corpus"], archive)
    part = sorted(archive.glob("day=*/server=*/*.parquet"))[0]
    (part.parent / f".{part.name}.4242.139.tmp").write_bytes(part.read_bytes()[:100])
    local = erascope("analyze", archive, "--format", "json", "--quiet").stdout
    remote = erascope("analyze", archive, "--format", "json", "--quiet", "--scheduler", cluster.address, check=False)
    assert remote.returncode == 0, remote.stderr.decode()
    assert remote.stdout == local


def test_a_damaged_part_is_an_input_error_not_a_crash(
    cluster: Cluster, archives: dict[str, Path], tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    shutil.copytree(archives["corpus"], archive)
    part = sorted(archive.glob("day=*/server=*/*.parquet"))[0]
    part.write_bytes(b"not parquet")
    key = unquote(part.parent.name.split("=", 1)[1])
    local = erascope("analyze", archive, "--server", key, "--quiet", check=False)
    remote = erascope("analyze", archive, "--quiet", "--scheduler", cluster.address, check=False)
    assert local.returncode == 2, local.stderr.decode()  # the local run reading that part says so
    assert remote.returncode == 2, remote.stderr.decode()
    assert b"Traceback" not in remote.stderr
    assert b"a part cannot be read" in remote.stderr


def _keyless_archive(tmp_path: Path) -> Path:
    """An archive of an HTTP capture and a stdio capture whose records lost their server key."""
    caps = tmp_path / "caps"
    shutil.copytree(ROOT / "captures" / "corpus" / "auto-modern-http", caps)
    source = sorted((ROOT / "captures" / "corpus" / "auto-modern-stdio").glob("*.jsonl"))[0]
    records = [orjson.loads(line) for line in source.read_bytes().splitlines()]
    keyless = b"".join(orjson.dumps({k: v for k, v in r.items() if k != "server"}) + b"\n" for r in records)
    (caps / source.name).write_bytes(keyless)
    archive = tmp_path / "archive"
    erascope("compact", caps, "--out", archive)
    return archive


def test_rows_without_a_server_key_are_refused_not_dropped(tmp_path: Path) -> None:
    from addon.errors import ErascopeError
    from analyzer.cluster import analyze_on_cluster
    from analyzer.pipeline import AnalyzeOptions

    archive = _keyless_archive(tmp_path)
    # refused before any scheduler is contacted (this address has none)
    with pytest.raises(ErascopeError, match="rows without a server key"):
        analyze_on_cluster(f"tcp://127.0.0.1:{_free_port()}", [archive], AnalyzeOptions())


def test_rows_without_a_server_key_do_not_stop_a_selection_of_servers(cluster: Cluster, tmp_path: Path) -> None:
    """`--server` never keeps rows without a key, locally either: the cluster refused such an
    archive all the same, though every row the selection keeps has a key and a shard."""
    archive = _keyless_archive(tmp_path)
    picked = ["--server", "auto-modern-http-server"]
    local = erascope("analyze", archive, "--format", "json", "--quiet", *picked).stdout
    remote = erascope("analyze", archive, "--format", "json", "--quiet", *picked, "--scheduler", cluster.address,
                      check=False)
    assert remote.returncode == 0, remote.stderr.decode()
    assert [s["server"] for s in orjson.loads(local)["servers"]] == ["auto-modern-http-server"]
    assert remote.stdout == local


def test_server_keys_that_share_a_session_are_analyzed_in_one_shard(cluster: Cluster, tmp_path: Path) -> None:
    """The HTTP+SSE transport recorded without --server: its POSTs (`/messages/`) and the stream that
    answers them (`/sse`) are two server keys sharing a session (`tests.test_watch.default_keyed`).
    In shards of their own, the initialize POSTed lost its answer (era `broken`, locally `legacy`)."""
    from tests.test_watch import default_keyed

    caps = tmp_path / "caps"
    caps.mkdir()
    source = next((ROOT / "captures" / "corpus" / "legacy-sse-http").glob("*.jsonl"))
    default_keyed(source, caps / source.name)
    other = next((ROOT / "captures" / "corpus" / "auto-modern-http").glob("*.jsonl"))
    (caps / other.name).write_bytes(other.read_bytes())
    local = _compacted_and_sharded(cluster, caps, tmp_path / "archive", shards=3)
    assert _servers(tmp_path / "archive") == 3
    assert {s["era"] for s in local["servers"]} >= {"legacy"}


def test_a_record_keyed_apart_from_its_connection_is_sharded_with_its_key(cluster: Cluster, tmp_path: Path) -> None:
    """Records an edit keyed apart from their connection or flow (`tests.test_load_hostile.REKEYED`):
    compact paired them across keys, so a probe whose answer sat in another key's shard was
    `no-answer` on the cluster (era `broken`) and answered locally (`modern`)."""
    from tests.test_load_hostile import REKEYED, rekeyed

    caps = tmp_path / "caps"
    for case, (scenario, pick) in sorted(REKEYED.items()):
        rekeyed(scenario, caps, pick(), key=f"other-{case}")
    local = _compacted_and_sharded(cluster, caps, tmp_path / "archive", shards=len(REKEYED))
    assert len(local["servers"]) == 2 * len(REKEYED)


def test_an_empty_server_key_and_the_key_null_are_sharded_like_any_other(cluster: Cluster, tmp_path: Path) -> None:
    """Their rows share the partition of rows without a key (`server=__null__`); the cluster refused
    every archive holding that partition, as if its rows had no key, though shards can select them."""
    from tests.test_load_hostile import rekeyed

    caps = tmp_path / "caps"
    rekeyed("auto-modern-stdio", caps, lambda r: True, key="")
    rekeyed("probe-storm-http", caps, lambda r: True, key="__null__")
    shutil.copytree(ROOT / "captures" / "corpus" / "auto-modern-http", caps, dirs_exist_ok=True)
    local = _compacted_and_sharded(cluster, caps, tmp_path / "archive", shards=3)
    assert {"", "__null__"} <= {s["server"] for s in local["servers"]}


# --- a cluster without workers, and Ctrl-C -------------------------------------------------------
def _block_the_workers(address: str, seconds: float) -> Any:
    """A client holding a task that sleeps on every worker thread, so erascope's tasks wait in line."""
    from distributed import Client

    client = Client(address, timeout=10, set_as_default=False)
    threads = sum(client.nthreads().values())
    sleeps = client.map(time.sleep, [seconds] * threads, pure=False)
    deadline = time.monotonic() + 30
    while sum(len(v) for v in client.processing().values()) < threads and time.monotonic() < deadline:
        time.sleep(0.05)
    return client, sleeps


def _erascope_tasks(client: Any) -> list[str]:
    return client.run_on_scheduler(
        lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks if str(k).startswith("erascope-")]
    )


def _wait_for_tasks(client: Any, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while not _erascope_tasks(client):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "erascope gave the scheduler no task"
        time.sleep(0.05)


@pytest.mark.parametrize("command", ["compact", "analyze"])
def test_a_scheduler_without_workers_is_a_clear_error(
    tmp_path: Path, archives: dict[str, Path], generated: Path, command: str
) -> None:
    args = (
        ["compact", generated, "--out", tmp_path / "out"]
        if command == "compact"
        else ["analyze", archives["generated"], "--format", "json"]
    )
    with dask_cluster(tmp_path / "cl", cwd=ROOT, workers=0) as c:
        started = time.monotonic()
        result = erascope(*args, "--scheduler", c.address, "--wait-for-workers", "2", check=False)
        waited = time.monotonic() - started
    assert result.returncode == 2, result.stderr.decode()
    assert result.stdout == b""
    err = result.stderr.decode()
    assert "has no workers" in err and "--wait-for-workers" in err, err
    assert "Traceback" not in err
    assert waited >= 2  # it waited for one to join first


def test_a_run_whose_workers_all_die_fails_with_a_clear_error(tmp_path: Path, archives: dict[str, Path]) -> None:
    with dask_cluster(tmp_path / "cl", cwd=ROOT, workers=1, nanny=False) as c:
        pid = next(iter(c.worker_pids().values()))
        client, _sleeps = _block_the_workers(c.address, 600)
        with client:
            proc = subprocess.Popen(
                [str(ERASCOPE), "analyze", str(archives["generated"]), "--format", "json", "--quiet",
                 "--scheduler", c.address, "--wait-for-workers", "3"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
            _wait_for_tasks(client, proc)
            os.kill(pid, signal.SIGKILL)  # the only worker: its tasks wait for another that never comes
            out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err.decode()
    assert out == b""  # no report, rather than a partial one
    assert "lost its last worker" in err.decode(), err.decode()
    assert b"Traceback" not in err


@pytest.mark.parametrize("command", ["compact", "analyze"])
def test_ctrl_c_on_the_cluster_stops_quietly_and_takes_its_tasks_back(
    tmp_path: Path, archives: dict[str, Path], generated: Path, command: str
) -> None:
    args = (
        ["compact", str(generated), "--out", str(tmp_path / "out")]
        if command == "compact"
        else ["analyze", str(archives["generated"]), "--format", "json"]
    )
    with dask_cluster(tmp_path / "cl", cwd=ROOT, workers=1) as c:
        client, _sleeps = _block_the_workers(c.address, 600)
        with client:
            proc = subprocess.Popen(
                [str(ERASCOPE), *args, "--scheduler", c.address], cwd=ROOT, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            _wait_for_tasks(client, proc)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            deadline = time.monotonic() + 10
            while (left := _erascope_tasks(client)) and time.monotonic() < deadline:
                time.sleep(0.05)
    assert proc.returncode == 130, err.decode()
    assert out == b""
    assert b"Traceback" not in err and b"Task exception" not in err, err.decode()
    assert left == []  # the scheduler does not run the tasks of a run nobody waits for


def test_an_archive_that_lost_a_partition_fails_on_the_cluster_as_locally(
    cluster: Cluster, archives: dict[str, Path], tmp_path: Path
) -> None:
    """The shards are planned from the `server=` directories present: a server whose partition is gone
    had no shard, and the cluster wrote a report without that server (exit 0) where the local run
    says the archive is incomplete."""
    archive = tmp_path / "archive"
    shutil.copytree(archives["corpus"], archive)
    shutil.rmtree(next(archive.glob("day=*/server=upgrade-stdio-server")))
    local = erascope("analyze", archive, "--format", "json", "--quiet", check=False)
    remote = erascope("analyze", archive, "--format", "json", "--quiet", "--scheduler", cluster.address, check=False)
    assert local.returncode == 2 and b"is incomplete" in local.stderr, local.stderr.decode()
    assert (remote.returncode, remote.stdout, remote.stderr) == (local.returncode, local.stdout, local.stderr)


def _clients(client: Any) -> int:
    return client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.clients))


@pytest.mark.parametrize("when", ["compact", "analyze", "waiting for a worker"])
def test_a_scheduler_that_dies_mid_run_fails_with_a_clear_error(
    tmp_path: Path, archives: dict[str, Path], generated: Path, when: str
) -> None:
    """The client's gather raised Dask's `FutureCancelledError` ("scheduler-connection-lost"), its
    wait for a worker an `OSError`: a traceback and exit status 1, a CI gate's "findings"."""
    args = (
        ["analyze", str(archives["generated"]), "--format", "json", "--quiet"]
        if when == "analyze"
        else ["compact", str(generated), "--out", str(tmp_path / "out")]
    )
    with dask_cluster(tmp_path / "cl", cwd=ROOT, workers=0 if when.startswith("waiting") else 1) as c:
        client, _sleeps = _block_the_workers(c.address, 600)
        with client:
            before = _clients(client)
            proc = subprocess.Popen(
                [str(ERASCOPE), *args, "--scheduler", c.address, "--wait-for-workers", "600"], cwd=ROOT,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
            if when.startswith("waiting"):
                deadline = time.monotonic() + 120
                while _clients(client) == before:  # erascope's client is connected, waiting for a worker
                    assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                    time.sleep(0.05)
            else:
                _wait_for_tasks(client, proc)
        os.killpg(c.scheduler.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err.decode()
    assert out == b""  # no report, rather than a partial one
    assert "lost the connection to the Dask scheduler" in err.decode(), err.decode()
    assert b"Traceback" not in err, err.decode()


@pytest.mark.parametrize("worker_sees", ["a copy", "another archive"])
def test_workers_that_see_another_archive_under_its_path_are_refused(tmp_path: Path, worker_sees: str) -> None:
    """Workers with a disk of their own under the archive's path (here `/proc/self/cwd/…`, which each
    process resolves in its own directory) analyzed their archive in the shards the client cut from
    its own: exit 0 and a report lacking the servers they did not have. A copy of the same archive is
    the same archive."""
    corpus = ROOT / "captures" / "corpus"
    scenarios = sorted(p.name for p in corpus.iterdir() if p.is_dir())[:4]
    client_dir, worker_dir = tmp_path / "client", tmp_path / "worker"
    for directory, kept in ((client_dir, scenarios), (worker_dir, scenarios[:2])):
        for name in kept:
            shutil.copytree(corpus / name, directory / "caps" / name)
    subprocess.run([str(ERASCOPE), "compact", "caps", "--out", "arch"], cwd=client_dir, check=True, capture_output=True)
    if worker_sees == "a copy":
        shutil.copytree(client_dir / "arch", worker_dir / "arch")
    else:
        subprocess.run([str(ERASCOPE), "compact", "caps", "--out", "arch"], cwd=worker_dir, check=True,
                       capture_output=True)  # fmt: skip
    archive = "/proc/self/cwd/arch"
    args = [str(ERASCOPE), "analyze", archive, "--format", "json", "--quiet"]
    local = subprocess.run(args, cwd=client_dir, capture_output=True, check=True, timeout=300).stdout
    with dask_cluster(tmp_path / "cl", cwd=worker_dir) as c:
        remote = subprocess.run([*args, "--scheduler", c.address], cwd=client_dir, capture_output=True, timeout=600)
    err = remote.stderr.decode()
    if worker_sees == "a copy":
        assert remote.returncode == 0, err
        assert remote.stdout == local
    else:
        assert remote.returncode == 2, err
        assert remote.stdout == b""  # no report, rather than one without the servers the workers lack
        assert "is not the archive the client sees" in err, err


def test_compact_refuses_workers_that_write_another_archive_under_its_path(tmp_path: Path) -> None:
    """Workers with an archive of their own under the `--out` path (a disk of their own; here
    `/proc/self/cwd/…`, which each process resolves in its own directory) wrote the parts and
    entries there: exit 0, "N file(s) compacted", and the client's archive held none of them."""
    caps = tmp_path / "caps"
    shutil.copytree(ROOT / "captures" / "corpus" / "auto-modern-http", caps)
    client_dir, worker_dir = tmp_path / "client", tmp_path / "worker"
    client_dir.mkdir()
    # the workers' own archive, of other captures
    subprocess.run([str(ERASCOPE), "compact", str(ROOT / "captures" / "corpus" / "auto-modern-stdio"), "--out",
                    worker_dir / "arch"], check=True, capture_output=True)  # fmt: skip
    with dask_cluster(tmp_path / "cl", cwd=worker_dir) as c:
        result = subprocess.run(
            [str(ERASCOPE), "compact", str(caps), "--out", "/proc/self/cwd/arch", "--scheduler", c.address],
            cwd=client_dir, capture_output=True, timeout=600,
        )
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert "not the archive the client sees" in err, err
    assert "Traceback" not in err


def test_workers_running_another_polars_are_refused(tmp_path: Path, archives: dict[str, Path]) -> None:
    """The workers' erascope was checked, not the polars it runs on (`polars>=2.1,<3`: workers
    installed another day get another one): a worker's polars writes its version into every
    Parquet part (the archive was not the local one, byte for byte) and analyzes with its own
    behaviour. Here the workers' polars says it is another version."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import polars\n\npolars.__version__ = '2.999.0'\n")
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH")) if p)
    with dask_cluster(tmp_path / "cl", cwd=ROOT, workers=1, env={"PYTHONPATH": path}) as c:
        analyzed = erascope("analyze", archives["corpus"], "--format", "json", "--quiet", "--scheduler", c.address,
                            check=False)  # fmt: skip
        compacted = erascope("compact", "captures/corpus", "--out", tmp_path / "a", "--scheduler", c.address,
                             check=False)  # fmt: skip
    for result in (analyzed, compacted):
        assert result.returncode == 2, result.stderr.decode()
        assert b"polars 2.999.0" in result.stderr, result.stderr.decode()
    assert analyzed.stdout == b""
    assert not list((tmp_path / "a").glob("day=*"))  # no worker wrote a part


def test_an_input_that_changes_before_its_worker_reads_it_is_said_so(tmp_path: Path) -> None:
    """A capture still being written grows between the client's listing and its worker's reading:
    the run failed saying the worker sees another file and the inputs must be on a shared
    filesystem, which they are."""
    from distributed import Client, Event

    caps = tmp_path / "caps"
    shutil.copytree(ROOT / "captures" / "corpus" / "auto-modern-stdio", caps)
    growing = sorted(caps.glob("*.jsonl"))[0]
    with dask_cluster(tmp_path / "cl", cwd=ROOT, workers=1) as c, Client(c.address, set_as_default=False) as client:
        go = Event("erascope-test-go", client=client)
        held = client.submit(go.wait, pure=False)  # the only worker thread, until the file has grown
        proc = subprocess.Popen(
            [str(ERASCOPE), "compact", str(caps), "--out", str(tmp_path / "out"), "--scheduler", c.address],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        _wait_for_tasks(client, proc)
        with growing.open("ab") as f:
            f.write(growing.read_bytes().splitlines(keepends=True)[-1])
        go.set()
        _out, err = proc.communicate(timeout=300)
        held.release()
    assert proc.returncode == 2, err.decode()
    assert b"changed since the client listed it" in err, err.decode()
    assert b"Traceback" not in err


def test_a_scheduler_that_stops_answering_mid_run_fails_with_a_clear_error(
    tmp_path: Path, archives: dict[str, Path]
) -> None:
    """A scheduler that stops answering without closing its connections (a stopped process, a host
    cut off) left the run waiting for ever, past --wait-for-workers: the client's check of the
    scheduler's workers had no time limit, nor had the wait for the tasks."""
    with dask_cluster(tmp_path / "cl", cwd=ROOT, workers=1) as c:
        client, _sleeps = _block_the_workers(c.address, 600)
        with client:
            proc = subprocess.Popen(
                [str(ERASCOPE), "analyze", str(archives["generated"]), "--format", "json", "--quiet", "--scheduler",
                 c.address, "--wait-for-workers", "3"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
            _wait_for_tasks(client, proc)
        os.kill(c.scheduler.pid, signal.SIGSTOP)
        try:
            out, err = proc.communicate(timeout=300)  # a guard far above the bound: a hang fails the test
        finally:
            proc.kill()
            os.kill(c.scheduler.pid, signal.SIGCONT)
    assert proc.returncode == 2, err.decode()
    assert out == b""
    assert "has not answered" in err.decode(), err.decode()
    assert b"Traceback" not in err, err.decode()


def _stop_on(address: str, op: str, *, stream: bool = False) -> None:
    """Make the scheduler at `address` stop its own process (SIGSTOP) when a client next asks it `op`
    (`broadcast`: run a function on the workers; `gather`: send the tasks' results; with `stream`, a
    message of the client's stream, such as `client-releases-keys`): a scheduler frozen at that
    exact step of a run, however fast the run goes."""
    from distributed import Client

    def stop_on(dask_scheduler: Any, op: str, stream: bool) -> None:
        import os
        import signal

        def stopped(**_msg: Any) -> None:
            os.kill(os.getpid(), signal.SIGSTOP)

        (dask_scheduler.stream_handlers if stream else dask_scheduler.handlers)[op] = stopped

    with Client(address, timeout=10, set_as_default=False) as client:
        client.run_on_scheduler(stop_on, op=op, stream=stream)


def _run_against(c: Cluster, *args: str | Path, stop_once_connected: bool = False) -> tuple[int, bytes, bytes, bool]:
    """erascope `args` with `--scheduler` `c` and `--wait-for-workers 10`: its exit status, stdout,
    stderr, and whether the scheduler was stopped when it ended. With `stop_once_connected`, the
    scheduler is stopped as soon as erascope's client is connected to it. A guard far above every
    bound: a run that hangs fails the test instead of stalling it; the scheduler is continued (and
    killed by `dask_cluster`) whatever happens."""
    from distributed import Client

    argv = [str(ERASCOPE), *map(str, args), "--scheduler", c.address, "--wait-for-workers", "10"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if stop_once_connected:
            with Client(c.address, timeout=10, set_as_default=False) as client:
                before = _clients(client)
                deadline = time.monotonic() + 120
                while _clients(client) == before:
                    assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                    time.sleep(0.05)
            os.kill(c.scheduler.pid, signal.SIGSTOP)
        out, err = proc.communicate(timeout=120)
        # the state field of /proc/PID/stat, after the command's name in parentheses
        stopped = Path(f"/proc/{c.scheduler.pid}/stat").read_text().rpartition(")")[2].split()[0] == "T"
    finally:
        proc.kill()
        proc.wait()
        os.kill(c.scheduler.pid, signal.SIGCONT)
    return proc.returncode, out, err, stopped


@pytest.mark.parametrize("when", ["waiting for a worker", "checking the workers"])
def test_a_scheduler_that_stops_answering_before_the_tasks_fails_with_a_clear_error(tmp_path: Path, when: str) -> None:
    """A scheduler that stopped answering right after the client connected hung the run for good:
    Dask's wait for a worker asks the scheduler with no time limit (its timeout is looked at only
    between answers), and so does the check of the workers' erascope (`Client.run`)."""
    waiting = when == "waiting for a worker"
    with dask_cluster(tmp_path / "cl", cwd=ROOT, workers=0 if waiting else 1) as c:
        if not waiting:
            _stop_on(c.address, "broadcast")
        code, out, err, stopped = _run_against(
            c, "compact", "captures/corpus", "--out", tmp_path / "out", stop_once_connected=waiting
        )
    assert stopped
    assert code == 2, err.decode()
    assert out == b""
    assert f"has not answered for 10 s while {when}" in err.decode(), err.decode()
    assert b"Traceback" not in err, err.decode()
    assert not list((tmp_path / "out").glob("day=*"))  # no task ran


@pytest.mark.parametrize("command", ["compact", "analyze"])
def test_a_scheduler_that_stops_answering_once_the_tasks_ended_fails_with_a_clear_error(
    tmp_path: Path, archives: dict[str, Path], command: str
) -> None:
    """A scheduler that stopped answering after the last task ended, when the client asked it for
    the results, hung the run for good: Dask's gather has no time limit."""
    args = (
        ["compact", "captures/corpus", "--out", tmp_path / "out"]
        if command == "compact"
        else ["analyze", archives["corpus"], "--format", "json", "--quiet"]
    )
    with dask_cluster(tmp_path / "cl", cwd=ROOT, workers=1) as c:
        _stop_on(c.address, "gather")
        code, out, err, stopped = _run_against(c, *args)
    assert stopped  # at the gather: the tasks had ended
    assert code == 2, err.decode()
    assert out == b""  # no report: the results never came
    assert "has not answered for 10 s" in err.decode(), err.decode()
    assert b"Traceback" not in err, err.decode()


def test_a_scheduler_that_stops_answering_once_the_results_are_in_does_not_fail_the_run(
    tmp_path: Path, archives: dict[str, Path]
) -> None:
    """The results are all in the client's hands when it lets the scheduler forget them: a scheduler
    that stops answering then takes nothing from the run, whose report is the local one."""
    local = erascope("analyze", archives["corpus"], "--format", "json", "--quiet").stdout
    with dask_cluster(tmp_path / "cl", cwd=ROOT, workers=1) as c:
        _stop_on(c.address, "client-releases-keys", stream=True)
        code, out, err, stopped = _run_against(c, "analyze", archives["corpus"], "--format", "json", "--quiet")
    assert stopped
    assert code == 0, err.decode()
    assert out == local
    assert b"Traceback" not in err, err.decode()
