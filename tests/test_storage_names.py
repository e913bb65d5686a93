"""Archives at a URL holding names that are no plain words: capture files named with glob characters
(`a[1].jsonl`) or a `?`, partitions named with a digest after an `@` under a prefix holding a `:`,
and a part compacted open then compressed by a run cut short. The loopback S3 server and helpers
are tests/test_storage.py's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from addon.retention import compress_part
from analyzer.archive import SOURCES_DIR
from tests.test_compact import open_part
from tests.test_storage import BUCKET, ROOT, _objects, erascope, failing_puts, s3_env  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bucket")]

CORPUS = ROOT / "captures" / "corpus"


@pytest.fixture(scope="module")
def bucket(s3_env: dict[str, str]) -> None:  # noqa: F811
    code = "import sys, s3fs; fs = s3fs.S3FileSystem(); fs.exists(sys.argv[1]) or fs.mkdir(sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, BUCKET], env=s3_env, check=True, timeout=120)


def _corpus(name: str) -> Path:
    return next((CORPUS / name).glob("*.jsonl"))


def test_captures_named_with_glob_characters(s3_env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    # `a[1].jsonl`'s entry was read as the glob pattern it is not (a KeyError traceback, or "cannot
    # read"), and replacing its entry removed `a1.jsonl`'s entry and frames instead of its own
    source = _corpus("auth-gate-http")
    lines = source.read_bytes().splitlines(keepends=True)
    caps = tmp_path / "caps"
    caps.mkdir()
    (caps / "a[1].jsonl").write_bytes(b"".join(lines[: len(lines) // 2]))
    shutil.copyfile(_corpus("upgrade-http"), caps / "a1.jsonl")
    archive = f"s3://{BUCKET}/glob-names/archive"
    first = erascope(s3_env, "compact", caps, "--out", archive)
    assert first.returncode == 0, first.stderr.decode()
    there = erascope(s3_env, "analyze", archive, "-f", "json")
    assert there.returncode == 0 and b"Traceback" not in there.stderr, there.stderr.decode()
    assert there.stdout == erascope(s3_env, "analyze", caps, "-f", "json").stdout
    # the part whole and compressed by its recorder: its old entry goes, `a1.jsonl`'s stays
    shutil.copyfile(source, caps / "a[1].jsonl")
    compress_part(caps / "a[1].jsonl")
    again = erascope(s3_env, "compact", caps, "--out", archive)
    assert again.returncode == 0, again.stderr.decode()
    entries = {k for k in _objects(s3_env, archive) if k.startswith(SOURCES_DIR)}
    assert entries == {f"{SOURCES_DIR}/a1.jsonl.json", f"{SOURCES_DIR}/a[1].jsonl.zst.json"}
    there = erascope(s3_env, "analyze", archive, "-f", "json")
    assert there.returncode == 0, there.stderr.decode()
    assert there.stdout == erascope(s3_env, "analyze", caps, "-f", "json").stdout


def test_names_with_a_question_mark_or_an_at_are_no_credentials(s3_env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    # the names the store lists or the layout makes were refused as "a URL with credentials or a
    # query": a capture `c?.jsonl`, and a digested partition (`server=<cut>@<digest>`) under a prefix
    # holding a `:` (a time)
    caps = tmp_path / "caps"
    caps.mkdir()
    shutil.copyfile(_corpus("auth-gate-http"), caps / "c?.jsonl")
    long_key = "npx -y @scope/server --root " + "/very/long/path" * 20
    lines = [orjson.loads(line) for line in _corpus("upgrade-http").read_bytes().splitlines()]
    (caps / "long.jsonl").write_bytes(
        b"".join(orjson.dumps({**r, "server": long_key} if r.get("server") else r) + b"\n" for r in lines)
    )
    expected = erascope(s3_env, "analyze", caps, "-f", "json")
    assert expected.returncode == 0, expected.stderr.decode()
    archive = f"s3://{BUCKET}/backup-2026-01-01T00:00/archive"
    done = erascope(s3_env, "compact", caps, "--out", archive)
    assert done.returncode == 0, done.stderr.decode()
    assert any("@" in k for k in _objects(s3_env, archive))
    there = erascope(s3_env, "analyze", archive, "-f", "json")
    assert there.returncode == 0, there.stderr.decode()
    assert there.stdout == expected.stdout
    # a URL given with credentials or a query is still refused
    for given in (f"s3://AKIAEXAMPLE:s3cret@{BUCKET}/x", f"s3://{BUCKET}/x.jsonl?X-Amz-Signature=s3cret"):
        refused = erascope(s3_env, "analyze", given)
        assert refused.returncode == 2 and b"credentials or a query is not read" in refused.stderr
        assert b"s3cret" not in refused.stderr


def test_a_stale_open_part_entry_left_by_a_run_cut_short_goes_on_the_next_run(
    s3_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the run that compacted the compressed whole part failed on another file (connection reset):
    # the open part's entry stayed, and the next run, finding the whole part unchanged, kept it for
    # good (the report named the gone file a duplicate)
    from addon.errors import ErascopeError
    from analyzer import storage
    from analyzer.compact import compact

    source = _corpus("auth-gate-http")
    caps = tmp_path / "caps"
    part, lines = open_part(source, caps)
    other = caps / ("z-" + _corpus("upgrade-http").name)  # converted after the part
    shutil.copyfile(_corpus("upgrade-http"), other)
    archive = f"s3://{BUCKET}/cut-stale/archive"
    assert erascope(s3_env, "compact", caps, "--out", archive).returncode == 0
    shutil.copyfile(source, part)
    compress_part(part)
    other.write_bytes(other.read_bytes() + lines[1])
    real_put = failing_puts(monkeypatch, s3_env, f"/{SOURCES_DIR}/z-")
    with pytest.raises(ErascopeError, match="cannot write the archive"):
        compact([str(caps)], archive, jobs=1)
    monkeypatch.setattr(storage, "put_files", real_put)
    done = erascope(s3_env, "compact", caps, "--out", archive)
    assert done.returncode == 0 and b"1 unchanged" in done.stderr, done.stderr.decode()
    assert {k for k in _objects(s3_env, archive) if k.startswith(SOURCES_DIR)} == {
        f"{SOURCES_DIR}/{source.name}.zst.json",
        f"{SOURCES_DIR}/{other.name}.json",
    }
    assert (
        erascope(s3_env, "analyze", archive, "-f", "json").stdout
        == erascope(s3_env, "analyze", caps, "-f", "json").stdout
    )
