"""`--scheduler`: compact and analyze on a real Dask cluster (`dask scheduler` and two `dask worker`
processes on loopback, started here) give what the local run gives, byte for byte; a worker killed
mid-run is retried elsewhere or the run fails loudly, never with a partial report."""

from __future__ import annotations

import hashlib
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from analyzer.compact import ARCHIVE_SCHEMA
from bench.dask_cluster import Cluster, dask_cluster
from bench.generate import generate

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
    parts = sorted(archive.rglob("*.parquet"))
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

