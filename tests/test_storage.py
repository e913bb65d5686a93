"""Archives on object storage: `erascope analyze s3://bucket/archive`, locally and on a Dask cluster.

The store is moto's S3 server on loopback, spoken to over HTTP by the same clients a real bucket
gets (s3fs for the entries, polars' object-store reader for the Parquet parts), configured by the
usual `AWS_*` environment. The archive is the corpus compacted locally and uploaded, as a user would
`aws s3 sync` it; its report from the URL must be the local archive's, byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import orjson
import pytest
from moto.server import ThreadedMotoServer

from analyzer.archive import SOURCES_DIR, read_entry
from bench.dask_cluster import dask_cluster

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
ERASCOPE = Path(sys.executable).parent / "erascope"
BUCKET = "audits"


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    """The environment of a process that reads the loopback S3 server (credentials it accepts)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "erascope-test",
        "AWS_SECRET_ACCESS_KEY": "erascope-test",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",  # polars' reader refuses plain HTTP endpoints otherwise
    }
    try:
        yield env
    finally:
        server.stop()


def erascope(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(ERASCOPE), *map(str, args)], cwd=ROOT, env=env, capture_output=True, timeout=600)


def upload(env: dict[str, str], local: Path, url: str) -> None:
    """`aws s3 sync local url`, by s3fs in a child (the credentials live in `env`, not in this process)."""
    code = (
        "import sys, s3fs; fs = s3fs.S3FileSystem(); b = sys.argv[2].split('/')[2];"
        " fs.exists(b) or fs.mkdir(b); fs.put(sys.argv[1].rstrip('/') + '/', sys.argv[2], recursive=True)"
    )
    subprocess.run([sys.executable, "-c", code, str(local), url], env=env, check=True, timeout=120)


def delete(env: dict[str, str], url: str) -> None:
    code = "import sys, s3fs; s3fs.S3FileSystem().rm(sys.argv[1], recursive=True)"
    subprocess.run([sys.executable, "-c", code, url], env=env, check=True, timeout=120)


@pytest.fixture(scope="module")
def archive(s3_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The corpus compacted locally, and the URL of its copy in the bucket."""
    local = tmp_path_factory.mktemp("s3") / "archive"
    done = erascope(s3_env, "compact", "captures/corpus", "--out", local)
    assert done.returncode == 0, done.stderr.decode()
    url = f"s3://{BUCKET}/fleet/archive"
    upload(s3_env, local, url)
    return local, url


def test_an_archive_at_a_url_reports_what_the_local_archive_reports(
    archive: tuple[Path, str], s3_env: dict[str, str]
) -> None:
    local, url = archive
    here = erascope(s3_env, "analyze", local, "-f", "json")
    there = erascope(s3_env, "analyze", url, "-f", "json")
    assert here.returncode == there.returncode == 0, there.stderr.decode()
    assert there.stdout == here.stdout
    assert len(orjson.loads(there.stdout)["servers"]) > 10


def test_server_selection_reads_only_that_servers_parts(
    archive: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    local, _ = archive
    url = f"s3://{BUCKET}/pruned/archive"
    upload(s3_env, local, url)
    keep = "rollout-split-http-fleet"
    # every other server's parts gone from the bucket: reading any of them would fail the run
    for server_dir in {p.parent for p in local.glob("day=*/server=*/*.parquet")}:
        if server_dir.name != "server=" + quote(keep, safe=""):
            delete(s3_env, f"{url}/{server_dir.parent.name}/{server_dir.name}")
    whole = erascope(s3_env, "analyze", url, "-f", "json")
    assert whole.returncode == 2 and b"is incomplete" in whole.stderr
    one = erascope(s3_env, "analyze", url, "--server", keep, "-f", "json")
    expected = erascope(s3_env, "analyze", local, "--server", keep, "-f", "json")
    assert one.returncode == expected.returncode, one.stderr.decode()
    assert one.stdout == expected.stdout
    assert [s["server"] for s in orjson.loads(one.stdout)["servers"]] == [keep]


def test_what_is_not_an_archive_at_a_url_is_refused_clearly(archive: tuple[Path, str], s3_env: dict[str, str]) -> None:
    entries = erascope(s3_env, "analyze", f"s3://{BUCKET}/fleet/archive/{SOURCES_DIR}", "-f", "json")
    assert entries.returncode == 2
    assert b"is not an archive: only archives written by `erascope compact` are read from URLs" in entries.stderr
    out = erascope(s3_env, "compact", "captures/corpus", "--out", f"s3://{BUCKET}/new")
    assert out.returncode == 2
    assert b"copy the archive to object storage afterwards" in out.stderr
    unknown = erascope(s3_env, "analyze", "nosuchscheme://x/y")
    assert unknown.returncode == 2 and b"Traceback" not in unknown.stderr


def test_entries_read_from_the_url_are_the_uploaded_ones(archive: tuple[Path, str], s3_env: dict[str, str]) -> None:
    # the entry reader itself, in this process, against the store (its client reads the env)
    local, url = archive
    name = next((local / SOURCES_DIR).glob("*.json")).name
    saved = {k: os.environ.get(k) for k in s3_env if k.startswith("AWS_")}
    os.environ.update({k: v for k, v in s3_env.items() if k.startswith("AWS_")})
    try:
        assert read_entry(f"{url}/{SOURCES_DIR}/{name}") == read_entry(local / SOURCES_DIR / name)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def test_a_cluster_analyzes_the_archive_at_its_url(
    archive: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    # the workers read their shards from the bucket themselves (their environment has the store's)
    local, url = archive
    store = {k: v for k, v in s3_env.items() if k.startswith("AWS_")}
    with dask_cluster(tmp_path / "cluster", cwd=ROOT, env=store) as cluster:
        remote = erascope(s3_env, "analyze", url, "-f", "json", "--scheduler", cluster.address)
    here = erascope(s3_env, "analyze", local, "-f", "json")
    assert remote.returncode == here.returncode, remote.stderr.decode()
    assert remote.stdout == here.stdout
