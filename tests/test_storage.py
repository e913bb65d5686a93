"""Captures and archives on object storage: `erascope analyze s3://bucket/captures/`, `erascope
compact … --out s3://bucket/archive` and `erascope analyze s3://bucket/archive`, locally and on a
Dask cluster.

The store is moto's S3 server on loopback, spoken to over HTTP by the same clients a real bucket
gets (s3fs for captures and entries, polars' object-store reader for the Parquet parts), configured
by the usual `AWS_*` environment. One archive is the corpus compacted locally and uploaded, as a
user would `aws s3 sync` it; its report from the URL must be the local archive's, byte for byte.
Generated captures (malformed and torn lines, a zstd part) uploaded under a prefix must report as
the local files do (their directory written as the URL), and compacted into the bucket, locally or
by the cluster's workers, as the captures themselves.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from urllib.parse import quote, unquote

import orjson
import pytest
from moto.server import ThreadedMotoServer

from analyzer.archive import SOURCES_DIR, read_entry
from bench.dask_cluster import dask_cluster
from bench.generate import generate
from tests.test_compact import open_part

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
ERASCOPE = Path(sys.executable).parent / "erascope"
BUCKET = "audits"


class Requests(logging.Handler):
    """The requests the loopback S3 server answered, as its request log names them (`GET /bucket/key`)."""

    LINE = re.compile(r"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/")

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if found := self.LINE.search(record.getMessage()):
            self.seen.append(f"{found[1]} {found[2]}")


REQUESTS = Requests()


def object_requests(url: str, methods: tuple[str, ...] = ("GET", "HEAD")) -> Counter[str]:
    """`METHOD name` → how often the loopback server answered it since `REQUESTS.seen` was cleared,
    for the objects under the prefix `url` (names relative to it, quoted as the log has them; the
    bucket's listings are not objects)."""
    path = "/" + url.removeprefix("s3://").rstrip("/") + "/"
    found: Counter[str] = Counter()
    for request in REQUESTS.seen:
        method, _, target = request.partition(" ")
        if method in methods and target.startswith(path):
            found[f"{method} {target.removeprefix(path)}"] += 1
    return found


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    """The environment of a process that reads the loopback S3 server (credentials it accepts)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    logging.getLogger("werkzeug").addHandler(REQUESTS)  # the server's request log, in this process
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
        logging.getLogger("werkzeug").removeHandler(REQUESTS)


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
    keep = "rollout-split-http-fleet"
    # every other server's parts garbage in the bucket: opening any of them would fail the run (gone,
    # they would make the archive incomplete, which is checked whatever the selection)
    garbled = tmp_path / "garbled"
    shutil.copytree(local, garbled)
    others = [p for p in garbled.glob("day=*/server=*/*.parquet") if p.parent.name != "server=" + quote(keep, safe="")]
    assert others
    for part in others:
        part.write_bytes(b"not parquet")
    upload(s3_env, garbled, url)
    # the garbage is found where a part is opened: another server's selection reads its parts
    other = unquote(next(p.parent.name for p in others if "@" not in p.parent.name).removeprefix("server="))
    broken = erascope(s3_env, "analyze", url, "--server", other, "-f", "json")
    assert broken.returncode == 2 and b"cannot be read" in broken.stderr, broken.stderr.decode()
    one = erascope(s3_env, "analyze", url, "--server", keep, "-f", "json")
    expected = erascope(s3_env, "analyze", local, "--server", keep, "-f", "json")
    assert one.returncode == expected.returncode, one.stderr.decode()
    assert one.stdout == expected.stdout
    assert [s["server"] for s in orjson.loads(one.stdout)["servers"]] == [keep]


def test_what_names_nothing_at_a_url_is_refused_clearly(archive: tuple[Path, str], s3_env: dict[str, str]) -> None:
    entries = erascope(s3_env, "analyze", f"s3://{BUCKET}/fleet/archive/{SOURCES_DIR}", "-f", "json")
    assert entries.returncode == 2
    assert b"no *.jsonl files under" in entries.stderr  # a prefix of entries holds no captures
    nothing = erascope(s3_env, "analyze", f"s3://{BUCKET}/no/such/captures", "-f", "json")
    assert nothing.returncode == 2
    assert f"no such file or directory: s3://{BUCKET}/no/such/captures".encode() in nothing.stderr
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


def test_each_archive_entry_is_read_once_at_a_url(archive: tuple[Path, str], s3_env: dict[str, str]) -> None:
    # listing the archive reads its entries to order them; the reader takes them from there
    local, url = archive
    REQUESTS.seen.clear()
    done = erascope(s3_env, "analyze", url, "-f", "json")
    assert done.returncode == 0, done.stderr.decode()
    names = {p.name for p in (local / SOURCES_DIR).glob("*.json")}
    assert object_requests(f"{url}/{SOURCES_DIR}", ("GET",)) == Counter({f"GET {quote(n)}": 1 for n in names})


def test_each_archive_entry_is_read_once_locally(archive: tuple[Path, str]) -> None:
    from analyzer.pipeline import analyze

    local, _ = archive
    opened: Counter[str] = Counter()
    entries = str(local / SOURCES_DIR)

    def count(event: str, args: tuple[object, ...]) -> None:
        if event == "open" and isinstance(args[0], str) and args[0].startswith(entries) and counting:
            opened[args[0]] += 1

    counting = True
    sys.addaudithook(count)  # for good (hooks cannot be removed): it counts only while `counting`
    try:
        analyze([str(local)]).close()
    finally:
        counting = False
    assert len(opened) == len(list((local / SOURCES_DIR).glob("*.json"))) > 10
    assert set(opened.values()) == {1}


# --- captures at a URL, and archives written there ------------------------------------------------
@pytest.fixture(scope="module")
def captures(s3_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Generated captures (malformed and torn lines; one bulk file zstd-compressed, as logrotate
    leaves it), locally and uploaded under a prefix of the bucket."""
    local = tmp_path_factory.mktemp("caps") / "captures"
    manifest = generate(local, 1 << 20, files=2, spawns=6, seed=11)
    assert manifest.malformed and manifest.torn
    (local / "manifest.json").unlink()
    bulk = max(local.glob("*.jsonl"), key=lambda p: p.stat().st_size)
    bulk.with_name(bulk.name + ".zst").write_bytes(zstd.compress(bulk.read_bytes()))
    bulk.unlink()
    url = f"s3://{BUCKET}/hosts/captures"
    upload(s3_env, local, url)
    return local, url


def _located_at(report: bytes, local: Path, url: str) -> bytes:
    """The local files' report with their directory named as the URL prefix (evidence names the object)."""
    return report.replace(str(local).encode(), url.encode())


def test_captures_at_a_url_report_what_the_local_files_report(
    captures: tuple[Path, str], s3_env: dict[str, str]
) -> None:
    local, url = captures
    here = erascope(s3_env, "analyze", local, "-f", "json")
    there = erascope(s3_env, "analyze", url + "/", "-f", "json")
    assert here.returncode == there.returncode == 0, there.stderr.decode()
    assert there.stdout == _located_at(here.stdout, local, url)
    inputs = orjson.loads(there.stdout)["inputs"]
    assert len(inputs["files"]) == len(list(local.iterdir())) and any(f.endswith(".jsonl.zst") for f in inputs["files"])
    # malformed and torn lines are located in the object, line by line
    assert inputs["malformed"] and inputs["torn"]
    assert all(b["file"].startswith(url + "/") and b["line"] > 0 for b in inputs["malformed"] + inputs["torn"])


def test_one_compressed_capture_at_a_url(captures: tuple[Path, str], s3_env: dict[str, str]) -> None:
    local, url = captures
    (packed,) = local.glob("*.jsonl.zst")
    here = erascope(s3_env, "analyze", packed, "-f", "json")
    there = erascope(s3_env, "analyze", f"{url}/{packed.name}", "-f", "json")
    assert here.returncode == there.returncode == 0, there.stderr.decode()
    assert there.stdout == _located_at(here.stdout, local, url)
    assert orjson.loads(there.stdout)["inputs"]["records"] > 100


def _objects(s3_env: dict[str, str], url: str) -> dict[str, str]:
    """Key under `url` → entity tag of every object there."""
    code = (
        "import sys, orjson, s3fs; fs = s3fs.S3FileSystem(); root = sys.argv[1].removeprefix('s3://');"
        " found = fs.find(root, detail=True);"
        " sys.stdout.write(orjson.dumps({k[len(root) + 1:]: v['ETag'] for k, v in found.items()}).decode())"
    )
    done = subprocess.run([sys.executable, "-c", code, url], env=s3_env, capture_output=True, check=True, timeout=120)
    return orjson.loads(done.stdout)


def test_compact_reads_captures_at_a_url_and_writes_the_archive_there(
    captures: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    local, url = captures
    archive = f"s3://{BUCKET}/hosts/archive"
    done = erascope(s3_env, "compact", url, "--out", archive)
    assert done.returncode == 0, done.stderr.decode()
    assert f"{len(list(local.iterdir()))} file(s) compacted".encode() in done.stderr
    written = _objects(s3_env, archive)
    assert any(k.startswith(f"{SOURCES_DIR}/") for k in written) and any(k.startswith("day=") for k in written)
    expected = erascope(s3_env, "analyze", url, "-f", "json")
    there = erascope(s3_env, "analyze", archive, "-f", "json")
    assert there.returncode == expected.returncode == 0, there.stderr.decode()
    assert there.stdout == expected.stdout  # evidence names the captures' objects, as their entries do
    # again: every input unchanged, nothing written or deleted
    again = erascope(s3_env, "compact", url, "--out", archive)
    assert again.returncode == 0 and b"0 file(s) compacted" in again.stderr, again.stderr.decode()
    assert _objects(s3_env, archive) == written
    # the same captures into a local archive: the same objects, byte for byte
    into = erascope(s3_env, "compact", url, "--out", tmp_path / "archive")
    assert into.returncode == 0, into.stderr.decode()
    mine = {str(p.relative_to(tmp_path / "archive")) for p in (tmp_path / "archive").rglob("*") if p.is_file()}
    assert mine == set(written)
    assert erascope(s3_env, "analyze", tmp_path / "archive", "-f", "json").stdout == expected.stdout


def test_local_captures_compacted_to_a_url(captures: tuple[Path, str], s3_env: dict[str, str]) -> None:
    local, _ = captures
    archive = f"s3://{BUCKET}/from-disk/archive"
    done = erascope(s3_env, "compact", local, "--out", archive)
    assert done.returncode == 0, done.stderr.decode()
    here = erascope(s3_env, "analyze", local, "-f", "json")
    assert erascope(s3_env, "analyze", archive, "-f", "json").stdout == here.stdout
    inside = erascope(s3_env, "compact", captures[1], "--out", captures[1] + "/archive")
    assert inside.returncode == 2 and b"choose --out outside it" in inside.stderr


def test_a_file_of_an_unknown_major_compacted_to_a_url_is_named_as_locally(
    captures: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    """Staged and uploaded, the other inputs are archived and every refused one is named, as locally
    (`captures`: the bucket)."""
    from tests.test_joined_formats import _refused_inputs

    caps, *_ = _refused_inputs(tmp_path)
    archive = f"s3://{BUCKET}/refused/archive"
    remote = erascope(s3_env, "compact", caps, "--out", archive)
    local = erascope(s3_env, "compact", caps, "--out", tmp_path / "archive")
    assert (remote.returncode, local.returncode) == (2, 2), remote.stderr.decode()
    assert remote.stderr.replace(archive.encode(), str(tmp_path / "archive").encode()) == local.stderr
    assert remote.stderr.count(b"capture format 'erascope/2' is not supported") == 2
    here = erascope(s3_env, "analyze", tmp_path / "archive", "-f", "json")
    assert erascope(s3_env, "analyze", archive, "-f", "json").stdout == here.stdout


def test_an_upload_cut_short_is_never_read_as_complete(
    captures: tuple[Path, str], s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from addon.errors import ErascopeError
    from analyzer import storage
    from analyzer.compact import compact

    _, url = captures
    archive = f"s3://{BUCKET}/cut/archive"
    for k, v in s3_env.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    real_put = storage.put_files
    entries: list[str] = []

    def put_files(pairs: object) -> None:
        pairs = list(pairs)  # type: ignore[call-overload]
        if any(f"/{SOURCES_DIR}/" in u for _, u in pairs):
            entries.append(pairs[0][1])
            if len(entries) == 3:  # the third file's entry: the connection drops
                raise OSError("connection reset by peer")
        real_put(pairs)

    monkeypatch.setattr(storage, "put_files", put_files)
    with pytest.raises(ErascopeError, match="cannot write the archive"):
        compact([url], archive, jobs=1)
    monkeypatch.undo()
    cut = _objects(s3_env, archive)
    lost = entries[2].removeprefix(archive + "/")
    assert lost not in cut and any(lost.split("/")[-1].removesuffix(".json") in k for k in cut)  # its parts, orphaned
    registered = erascope(s3_env, "analyze", archive, "-f", "json")
    assert registered.returncode == 0, registered.stderr.decode()
    files = orjson.loads(registered.stdout)["inputs"]["files"]
    assert len(files) == 2 and all(not f.endswith(lost.split("/")[-1].removesuffix(".json")) for f in files)
    # the next run converts the rest; the archive then reads as the captures
    done = erascope(s3_env, "compact", url, "--out", archive)
    assert done.returncode == 0 and b" 2 unchanged" in done.stderr, done.stderr.decode()
    assert (
        erascope(s3_env, "analyze", archive, "-f", "json").stdout
        == erascope(s3_env, "analyze", url, "-f", "json").stdout
    )


def test_credentials_in_a_url_are_refused_and_never_shown(s3_env: dict[str, str]) -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    for args in (
        ["analyze", f"s3://AKIAEXAMPLE:{secret}@{BUCKET}/hosts/captures/"],
        ["analyze", f"s3://{BUCKET}/hosts/captures/x.jsonl?X-Amz-Signature={secret}"],
        ["compact", "captures/corpus", "--out", f"s3://AKIAEXAMPLE:{secret}@{BUCKET}/out"],
    ):
        done = erascope(s3_env, *args)
        assert done.returncode == 2, done.stderr.decode()
        assert b"credentials or a query is not read" in done.stderr
        assert secret.encode() not in done.stderr and secret.split("/")[0].encode() not in done.stderr + done.stdout


def test_a_cluster_compacts_captures_at_a_url_into_an_archive_there(
    captures: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    # the workers fetch their own captures and upload their own objects (their environment has the store's)
    _, url = captures
    archive = f"s3://{BUCKET}/cluster/archive"
    store = {k: v for k, v in s3_env.items() if k.startswith("AWS_")}
    with dask_cluster(tmp_path / "cluster", cwd=ROOT, env=store) as cluster:
        done = erascope(s3_env, "compact", url, "--out", archive, "--scheduler", cluster.address)
        assert done.returncode == 0, done.stderr.decode()
        remote = erascope(s3_env, "analyze", archive, "-f", "json", "--scheduler", cluster.address)
    expected = erascope(s3_env, "analyze", url, "-f", "json")
    assert remote.returncode == expected.returncode == 0, remote.stderr.decode()
    assert remote.stdout == expected.stdout
    there = erascope(s3_env, "analyze", archive, "-f", "json")
    assert there.stdout == expected.stdout
    # the objects a local run writes, byte for byte
    local_run = f"s3://{BUCKET}/cluster/local"
    assert erascope(s3_env, "compact", url, "--out", local_run).returncode == 0
    assert _objects(s3_env, archive) == _objects(s3_env, local_run)


def test_verify_reads_captures_at_a_url(captures: tuple[Path, str], s3_env: dict[str, str]) -> None:
    local, url = captures
    here = erascope(s3_env, "verify", local, "-f", "json")
    there = erascope(s3_env, "verify", url, "-f", "json")
    assert there.returncode == here.returncode, there.stderr.decode()
    assert there.stdout == _located_at(here.stdout, local, url)
    assert b"cannot read" not in there.stdout


def test_analyze_verify_checks_captures_at_a_url(captures: tuple[Path, str], s3_env: dict[str, str]) -> None:
    local, url = captures
    here = erascope(s3_env, "analyze", "-q", "--verify", local, "-f", "json")
    there = erascope(s3_env, "analyze", "-q", "--verify", url, "-f", "json")
    assert there.returncode == here.returncode == 0, there.stderr.decode()
    checked = [orjson.loads(p.stdout)["inputs"]["verification"] for p in (here, there)]
    assert checked[0]["counts"] == checked[1]["counts"] == {"no-chain": len(checked[0]["files"])}
    assert [f["file"] for f in checked[1]["files"]] == [
        f["file"].replace(str(local), url) for f in checked[0]["files"]
    ]


# --- compact --out URL: what it asks the store, where it stages, what a cut-short run leaves -------
def _own_copy(s3_env: dict[str, str], captures: tuple[Path, str], prefix: str) -> tuple[Path, str]:
    """The generated captures uploaded under a prefix of their own (a test that changes one leaves
    the shared ones alone)."""
    local, _ = captures
    url = f"s3://{BUCKET}/{prefix}/captures"
    upload(s3_env, local, url)
    return local, url


def _change_one(s3_env: dict[str, str], local: Path, url: str, tmp_path: Path) -> str:
    """Replace one plain capture at `url` by itself with its first record repeated at its end (one
    more message row: its parts and condensed frames differ); its name."""
    plain = [p for p in local.glob("*.jsonl") if p.read_bytes().endswith(b"\n")]
    capture = max(plain, key=lambda p: p.stat().st_size)
    lines = capture.read_bytes().splitlines(keepends=True)
    changed = tmp_path / capture.name
    changed.write_bytes(b"".join(lines) + lines[1])
    code = "import sys, s3fs; s3fs.S3FileSystem().put(sys.argv[1], sys.argv[2])"
    subprocess.run([sys.executable, "-c", code, str(changed), f"{url}/{capture.name}"], env=s3_env, check=True)
    return capture.name


def _entry_names(s3_env: dict[str, str], archive: str) -> set[str]:
    """Every object the archive's entries name (parts, condensed frames), and the entries."""
    code = (
        "import sys, orjson, s3fs; fs = s3fs.S3FileSystem(); root = sys.argv[1].removeprefix('s3://');"
        " found = {k[len(root) + 1:]: orjson.loads(fs.cat(k)) for k in fs.glob(root + '/_sources/*.json')};"
        " sys.stdout.write(orjson.dumps(found).decode())"
    )
    done = subprocess.run([sys.executable, "-c", code, archive], env=s3_env, capture_output=True, check=True)
    named = set()
    for key, entry in orjson.loads(done.stdout).items():
        named |= {key, *entry["parts"], *(rel for rel, _ in entry["condensed"]["frames"].values())}
    return named


def test_compact_to_a_url_reads_each_old_entry_once(
    captures: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    # the entries are read together to tell what changed; the conversion takes the old parts from there
    local, url = _own_copy(s3_env, captures, "once")
    archive = f"s3://{BUCKET}/once/archive"
    REQUESTS.seen.clear()
    first = erascope(s3_env, "compact", url, "--out", archive)
    assert first.returncode == 0, first.stderr.decode()
    assert object_requests(f"{archive}/{SOURCES_DIR}") == Counter()  # a new archive: no entry to ask about
    _change_one(s3_env, local, url, tmp_path)
    REQUESTS.seen.clear()
    again = erascope(s3_env, "compact", url, "--out", archive)
    assert again.returncode == 0 and b"1 file(s) compacted" in again.stderr, again.stderr.decode()
    entries = {k.removeprefix(f"{SOURCES_DIR}/") for k in _objects(s3_env, archive) if k.startswith(SOURCES_DIR)}
    assert len(entries) == len(list(local.iterdir()))
    assert object_requests(f"{archive}/{SOURCES_DIR}") == Counter({f"GET {quote(n)}": 1 for n in entries})


def test_a_cluster_compacting_to_a_url_reads_each_old_entry_once(
    captures: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    local, url = _own_copy(s3_env, captures, "once-cluster")
    archive = f"s3://{BUCKET}/once-cluster/archive"
    store = {k: v for k, v in s3_env.items() if k.startswith("AWS_")}
    with dask_cluster(tmp_path / "cluster", cwd=ROOT, env=store) as cluster:
        REQUESTS.seen.clear()
        first = erascope(s3_env, "compact", url, "--out", archive, "--scheduler", cluster.address)
        assert first.returncode == 0, first.stderr.decode()
        assert object_requests(f"{archive}/{SOURCES_DIR}") == Counter()
        _change_one(s3_env, local, url, tmp_path)
        REQUESTS.seen.clear()
        again = erascope(s3_env, "compact", url, "--out", archive, "--scheduler", cluster.address)
        assert again.returncode == 0 and b"1 file(s) compacted" in again.stderr, again.stderr.decode()
    entries = {k.removeprefix(f"{SOURCES_DIR}/") for k in _objects(s3_env, archive) if k.startswith(SOURCES_DIR)}
    assert object_requests(f"{archive}/{SOURCES_DIR}") == Counter({f"GET {quote(n)}": 1 for n in entries})
    assert (
        erascope(s3_env, "analyze", archive, "-f", "json").stdout
        == erascope(s3_env, "analyze", url, "-f", "json").stdout
    )


def test_a_cluster_stages_under_temp_dir_and_leaves_it_empty(
    captures: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    # the workers run on this machine, so they see the same directory: each conversion's staging
    # directory is made and removed inside it, which moves its modification time
    _, url = captures
    staging = tmp_path / "staging"
    staging.mkdir()
    os.utime(staging, ns=(0, 0))
    store = {k: v for k, v in s3_env.items() if k.startswith("AWS_")}
    archive = f"s3://{BUCKET}/staged-cluster/archive"
    with dask_cluster(tmp_path / "cluster", cwd=ROOT, env=store) as cluster:
        done = erascope(s3_env, "compact", url, "--out", archive, "--scheduler", cluster.address, "--temp-dir", staging)
        assert done.returncode == 0, done.stderr.decode()
        missing = erascope(
            s3_env,
            "compact",
            url,
            "--out",
            f"s3://{BUCKET}/staged-cluster/x",
            "--scheduler",
            cluster.address,
            "--temp-dir",
            tmp_path / "no",
        )
    assert staging.stat().st_mtime_ns > 0 and list(staging.iterdir()) == []
    assert missing.returncode == 2 and b"--temp-dir" in missing.stderr and b"Traceback" not in missing.stderr
    assert (
        erascope(s3_env, "analyze", archive, "-f", "json").stdout
        == erascope(s3_env, "analyze", url, "-f", "json").stdout
    )


def test_compact_fetches_a_capture_at_a_url_once(captures: tuple[Path, str], s3_env: dict[str, str]) -> None:
    # its header (to tell what the object is) comes from the same bytes its records are read from
    local, url = captures
    REQUESTS.seen.clear()
    done = erascope(s3_env, "compact", url, "--out", f"s3://{BUCKET}/fetched/archive")
    assert done.returncode == 0, done.stderr.decode()
    gets = object_requests(url, ("GET",))
    # objects of one reader's request (1 MiB): plain, compressed, and with a torn last line (the
    # piece cut before it is not sought back to)
    whole = [p for p in local.iterdir() if p.stat().st_size < 1 << 20]
    assert any(p.suffix == ".zst" for p in whole) and any(not p.read_bytes().endswith(b"\n") for p in whole)
    assert {p.name: gets[f"GET {quote(p.name)}"] for p in whole} == {p.name: 1 for p in whole}


def test_analyze_fetches_each_capture_at_a_url_once(
    captures: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    # the header read that leaves out duplicates opens the file its pieces are then read from: a
    # small compressed capture was fetched 3 times (whole, for its header, to read), a big one twice
    from analyzer.storage import BUFFER_BYTES

    local = tmp_path / "captures"
    shutil.copytree(captures[0], local)
    big = tmp_path / "big"
    generate(big, 3 << 20, files=1, spawns=0, seed=12, clean=True)
    (bulk,) = big.glob("*.jsonl")
    assert BUFFER_BYTES < bulk.stat().st_size < 8 << 20
    shutil.copy(bulk, local / bulk.name)
    # a file larger than the reader's buffer: its first buffer (holding the header), then the rest
    expected = {p.name: 1 + (p.stat().st_size > BUFFER_BYTES) for p in local.iterdir()}
    assert any(p.suffix == ".zst" for p in local.iterdir())
    assert _gets_of_analyze(s3_env, local, f"s3://{BUCKET}/fetched-by-analyze/captures") == expected


def _gets_of_analyze(s3_env: dict[str, str], local: Path, url: str) -> dict[str, int]:
    """`local` uploaded to `url` and analyzed there: the GETs each file took. The report must be the
    one of `local` analyzed where it is."""
    upload(s3_env, local, url)
    REQUESTS.seen.clear()
    there = erascope(s3_env, "analyze", url, "-f", "json")
    assert there.returncode == 0, there.stderr.decode()
    gets = object_requests(url, ("GET",))
    here = erascope(s3_env, "analyze", local, "-f", "json").stdout
    assert there.stdout.replace(f"{url}/".encode(), f"{local}/".encode()) == here
    return {p.name: gets[f"GET {quote(p.name)}"] for p in local.iterdir()}


def test_a_batch_read_again_file_by_file_is_not_fetched_again(s3_env: dict[str, str], tmp_path: Path) -> None:
    # small captures are fetched once and read as one batch; an id that is an object makes the batch
    # read again file by file (the robust id reading), which fetched every one of them a second time
    from tests.test_load import HEADER, frame, write_lines

    local = tmp_path / "small"
    local.mkdir()
    header = orjson.dumps(HEADER).decode()
    ping = frame(1, '{"jsonrpc":"2.0","id":1.0,"method":"ping"}')
    object_id = frame(2, '{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}')
    write_lines(local / "20261201T000000.000000Z_a_1_aaaaaa.000.jsonl", [header, ping])
    write_lines(local / "20261201T000001.000000Z_b_2_bbbbbb.000.jsonl", [header, ping, object_id])
    gets = _gets_of_analyze(s3_env, local, f"s3://{BUCKET}/batch-read-again/small")
    assert gets == {p.name: 1 for p in local.iterdir()}


def test_an_archive_given_to_compact_is_refused_alike_local_or_at_a_url(
    archive: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path
) -> None:
    local, url = archive
    for given in (str(local), url, url + "/"):
        done = erascope(s3_env, "compact", given, "--out", tmp_path / "out")
        assert done.returncode == 2, done.stderr.decode()
        assert f"{given} is already an archive; analyze it directly".encode() in done.stderr
        assert not (tmp_path / "out").exists()


def test_compact_to_a_url_stages_under_temp_dir_and_leaves_it_empty(
    captures: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from addon.errors import ErascopeError
    from analyzer import storage
    from analyzer.compact import compact

    _, url = captures
    for k, v in s3_env.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    staging = tmp_path / "staging"
    staging.mkdir()
    real_put = storage.put_files
    uploaded: list[str] = []

    def put_files(pairs: object) -> None:
        pairs = list(pairs)  # type: ignore[call-overload]
        uploaded.extend(local for local, _ in pairs)
        real_put(pairs)

    monkeypatch.setattr(storage, "put_files", put_files)
    compact([url], f"s3://{BUCKET}/staged/archive", jobs=2, temp_dir=staging)
    assert uploaded and all(Path(p).is_relative_to(staging) for p in uploaded)
    assert list(staging.iterdir()) == []

    def cut(pairs: object) -> None:
        raise OSError("connection reset by peer")

    monkeypatch.setattr(storage, "put_files", cut)
    with pytest.raises(ErascopeError, match="cannot write the archive"):
        compact([url], f"s3://{BUCKET}/staged/cut", jobs=2, temp_dir=staging)
    assert list(staging.iterdir()) == []


def test_compact_temp_dir_option(captures: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path) -> None:
    _, url = captures
    staging = tmp_path / "staging"
    staging.mkdir()
    done = erascope(s3_env, "compact", url, "--out", f"s3://{BUCKET}/staged-cli/archive", "--temp-dir", staging)
    assert done.returncode == 0, done.stderr.decode()
    assert list(staging.iterdir()) == []
    missing = erascope(s3_env, "compact", url, "--out", f"s3://{BUCKET}/staged-cli/x", "--temp-dir", tmp_path / "no")
    assert missing.returncode == 2 and b"--temp-dir" in missing.stderr and b"Traceback" not in missing.stderr


def failing_puts(
    monkeypatch: pytest.MonkeyPatch, s3_env: dict[str, str], where: str
) -> Callable[[Iterable[tuple[str, str]]], None]:
    """`storage.put_files` in this process, against the loopback store, failing as a dropped connection
    does for a batch holding a URL with `where` in it; the real one is returned, to put back."""
    from analyzer import storage

    for k, v in s3_env.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    # fsspec keeps one filesystem per set of arguments for the process: one an earlier test made may
    # still speak to another test module's S3 server, gone now (the endpoint comes from the environment)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    real_put = storage.put_files

    def put_files(pairs: Iterable[tuple[str, str]]) -> None:
        pairs = list(pairs)
        if any(where in u for _, u in pairs):
            raise OSError("connection reset by peer")
        real_put(pairs)

    monkeypatch.setattr(storage, "put_files", put_files)
    return real_put


def test_a_changed_capture_converted_again_never_overwrites_what_its_old_entry_names(
    captures: tuple[Path, str], s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from addon.errors import ErascopeError
    from analyzer import storage
    from analyzer.compact import compact

    local, url = _own_copy(s3_env, captures, "again")
    archive = f"s3://{BUCKET}/again/archive"
    assert erascope(s3_env, "compact", url, "--out", archive).returncode == 0
    before = _objects(s3_env, archive)
    report_before = erascope(s3_env, "analyze", archive, "-f", "json").stdout
    name = _change_one(s3_env, local, url, tmp_path)
    real_put = failing_puts(monkeypatch, s3_env, f"/{SOURCES_DIR}/")  # the new entry: the connection drops
    with pytest.raises(ErascopeError, match="cannot write the archive"):
        compact([url], archive, jobs=1)
    monkeypatch.setattr(storage, "put_files", real_put)
    cut = _objects(s3_env, archive)
    # the new parts went elsewhere: every object there before, the old entry's included, is as it was
    assert {k: cut.get(k) for k in before} == before
    assert set(cut) - set(before) and all(name in k for k in set(cut) - set(before))
    assert erascope(s3_env, "analyze", archive, "-f", "json").stdout == report_before
    # the next run completes: the old parts go, nothing is left that no entry names
    done = erascope(s3_env, "compact", url, "--out", archive)
    assert done.returncode == 0 and b"1 file(s) compacted" in done.stderr, done.stderr.decode()
    assert set(_objects(s3_env, archive)) == _entry_names(s3_env, archive)
    report = erascope(s3_env, "analyze", archive, "-f", "json").stdout
    assert report == erascope(s3_env, "analyze", url, "-f", "json").stdout != report_before


def test_a_part_compacted_open_then_compressed_replaces_its_entry_at_a_url(
    s3_env: dict[str, str], tmp_path: Path
) -> None:
    """As on disk (tests/test_compact.py): the entry of the part compacted while open goes when the
    part is compacted again as its recorder compressed it, with the objects it named."""
    from addon.retention import compress_part

    source = next((ROOT / "captures" / "corpus" / "auth-gate-http").glob("*.jsonl"))
    caps = tmp_path / "caps"
    part, _ = open_part(source, caps)
    archive = f"s3://{BUCKET}/compressed/archive"
    assert erascope(s3_env, "compact", caps, "--out", archive).returncode == 0
    shutil.copyfile(source, part)
    compress_part(part)
    done = erascope(s3_env, "compact", caps, "--out", archive)
    assert done.returncode == 0, done.stderr.decode()
    assert {k for k in _objects(s3_env, archive) if f"{source.name}." not in k} == set()
    assert {k for k in _objects(s3_env, archive) if k.startswith(SOURCES_DIR)} == {
        f"{SOURCES_DIR}/{source.name}.zst.json"
    }
    assert not any(k.endswith(f"{source.name}.parquet") for k in _objects(s3_env, archive))
    here = erascope(s3_env, "analyze", caps, "-f", "json")
    assert erascope(s3_env, "analyze", archive, "-f", "json").stdout == here.stdout
