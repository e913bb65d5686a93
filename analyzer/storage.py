"""Archives on object storage: `s3://bucket/archive` and the other fsspec URLs polars reads.

An archive written by `erascope compact` and copied to object storage (`aws s3 sync ARCHIVE
s3://bucket/archive`) is analyzed in place: its small `_sources` entries are listed and read with
fsspec, its Parquet parts are scanned by polars' own object-store reader, so only the columns and
row groups the analysis needs cross the network. Credentials and endpoints come from the store's
usual environment (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, … for S3), which fsspec's filesystems
and polars both read; nothing is passed on the command line.

fsspec and the filesystem for the URL's scheme (`s3fs` for `s3://`, `gcsfs`, `adlfs`) are an
optional extra: `pip install 'erascope[cloud]'` brings fsspec and s3fs. Only archives are read from
URLs: capture files are read from local or shared filesystems, and `compact` writes locally.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from addon.errors import ErascopeError

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

_URL: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: str) -> bool:
    """True for `scheme://…` (an object-store or other fsspec URL), False for a local path."""
    return _URL.match(path) is not None


def filesystem(url: str) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem serving `url`, and the path it knows `url` by (`bucket/key`)."""
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise ErascopeError(f"reading {url} needs fsspec: pip install 'erascope[cloud]'") from None
    try:
        return url_to_fs(url)
    except (ImportError, ValueError) as exc:  # no filesystem for the scheme, or it is not installed
        raise ErascopeError(f"cannot read {url}: {exc}") from None


def join(url: str, *names: str) -> str:
    """`url` with `names` appended as path segments (`s3://b/a` + `x/y` → `s3://b/a/x/y`)."""
    return "/".join([url.rstrip("/"), *(n.strip("/") for n in names)])


def _unstripped(url: str, fs: AbstractFileSystem, path: str) -> str:
    """A path fsspec returned, as a URL of `url`'s scheme (fsspec drops the scheme)."""
    return fs.unstrip_protocol(path) if "://" not in path else path


def read_bytes(url: str) -> bytes:
    """The whole object at `url`; `OSError` (as for a local file) when it cannot be read."""
    fs, path = filesystem(url)
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        raise
    except Exception as exc:  # the stores' clients raise their own kinds (botocore, aiohttp, …)
        raise OSError(f"{url}: {exc}") from None


def is_dir(url: str) -> bool:
    """Whether `url` names a "directory" (a key prefix holding objects)."""
    fs, path = filesystem(url)
    try:
        return bool(fs.isdir(path))
    except Exception as exc:
        raise ErascopeError(f"cannot read {url}: {exc}") from None


def glob(url: str, pattern: str) -> list[str]:
    """URLs of the objects under `url` matching `pattern` (fsspec glob syntax), sorted."""
    fs, path = filesystem(url)
    try:
        found = fs.glob(join(path, pattern))
    except Exception as exc:
        raise ErascopeError(f"cannot list {url}: {exc}") from None
    return sorted(_unstripped(url, fs, p) for p in found)


def files_under(url: str) -> set[str]:
    """URLs of every object under `url`, in one listing (to check an archive's parts exist)."""
    fs, path = filesystem(url)
    try:
        found = fs.find(path)
    except Exception as exc:
        raise ErascopeError(f"cannot list {url}: {exc}") from None
    return {_unstripped(url, fs, p) for p in found}


def part_sizes(url: str) -> dict[str, int]:
    """URL → bytes of each Parquet part of the archive at `url` (`day=…/server=…/*.parquet`), in one listing."""
    fs, path = filesystem(url)
    try:
        found = fs.glob(join(path, "day=*/server=*/*.parquet"), detail=True)
    except Exception as exc:
        raise ErascopeError(f"cannot list {url}: {exc}") from None
    return {_unstripped(url, fs, p): int(info.get("size") or 0) for p, info in found.items()}
