"""Inputs and archives on object storage: `s3://bucket/…` and the other fsspec URLs.

Capture files are read from a URL as from a local path: `erascope analyze s3://bucket/captures/`
lists the prefix for `*.jsonl`, `*.jsonl.gz` and `*.jsonl.zst` objects, and the loader reads each
one through `open_binary`, a buffered reader over ranged requests, so it reads pieces, finds bad
lines and torn last lines, and decompresses exactly as for a local file (`analyzer.load`,
`analyzer.sources`); evidence names the object (`s3://bucket/captures/x.jsonl:12`).

An archive written by `erascope compact` (also straight to a URL: `compact --out s3://…`,
`analyzer.compact`) is analyzed in place: its small `_sources` entries are listed and read with
fsspec, its Parquet parts are scanned by polars' own object-store reader, so only the columns and
row groups the analysis needs cross the network. Credentials and endpoints come from the store's
usual environment (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, … for S3), which fsspec's filesystems
and polars both read; nothing is passed on the command line. A URL that carries credentials
(`s3://key:secret@bucket`) or a query (a signed URL's signature) is refused, shown redacted
(`redact`): reports and notes name their inputs, and would repeat the secret.

fsspec and the filesystem for the URL's scheme (`s3fs` for `s3://`, `gcsfs`, `adlfs`) are an
optional extra: `pip install 'erascope[cloud]'` brings fsspec and s3fs.
"""

from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from addon.errors import ErascopeError
from addon.redact import mask_urls

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

_URL: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
BUFFER_BYTES: Final = 1 << 20
"""Bytes a reader of an object asks for at least: a header's first line costs one request, and the
loader's pieces (8 MiB) are asked for whole, a request each."""


def is_url(path: str) -> bool:
    """True for `scheme://…` (an object-store or other fsspec URL), False for a local path."""
    return _URL.match(path) is not None


def redact(text: str) -> str:
    """`text` (a URL, or a message naming URLs) with the secrets a URL can carry replaced by `***`:
    user information (`s3://key:secret@bucket` → `s3://***@bucket`) and the query (`?***`)."""
    return mask_urls(text)


def check_url(url: str) -> None:
    """Raise `ErascopeError` for a URL that carries a secret (see the module docstring), naming it redacted."""
    if redact(url) != url:
        raise ErascopeError(
            f"{redact(url)}: a URL with credentials or a query is not read (reports name their inputs and would"
            " repeat it); give the store's credentials in its environment (AWS_ACCESS_KEY_ID, … for S3)"
        )


def filesystem(url: str, *, named: bool = False) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem serving `url`, and the path it knows `url` by (`bucket/key`).

    `named`: `url` names an object under a URL given (and checked) already, by a name the store
    listed or the archive's layout made (`…/server=<cut>@<digest>/…`, a capture file `x?.jsonl`):
    not refused for an `@` or a `?` in that name, which are no credentials or query."""
    if not named:
        check_url(url)
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise ErascopeError(f"reading {url} needs fsspec: pip install 'erascope[cloud]'") from None
    try:
        return url_to_fs(url)
    except (ImportError, ValueError) as exc:  # no filesystem for the scheme, or it is not installed
        raise ErascopeError(f"cannot read {url}: {redact(str(exc))}") from None


def join(url: str, *names: str) -> str:
    """`url` with `names` appended as path segments (`s3://b/a` + `x/y` → `s3://b/a/x/y`)."""
    return "/".join([url.rstrip("/"), *(n.strip("/") for n in names)])


def _unstripped(url: str, fs: AbstractFileSystem, path: str) -> str:
    """A path fsspec returned, as a URL of `url`'s scheme (fsspec drops the scheme)."""
    return fs.unstrip_protocol(path) if "://" not in path else path


def _oserror(url: str, exc: Exception) -> OSError:
    """A store client's error (botocore, aiohttp, … raise their own kinds) as the `OSError` a local
    file gives, naming `url` redacted."""
    if isinstance(exc, FileNotFoundError):
        return FileNotFoundError(2, "No such file or directory", redact(url))
    return OSError(f"{redact(url)}: {redact(str(exc)) or type(exc).__name__}")


def read_bytes(url: str) -> bytes:
    """The whole object at `url`; `OSError` (as for a local file) when it cannot be read."""
    fs, path = filesystem(url, named=True)
    try:
        return fs.cat_file(path)
    except Exception as exc:
        raise _oserror(url, exc) from None


def read_many(urls: list[str]) -> dict[str, bytes | OSError]:
    """The objects at `urls` (of one filesystem), read concurrently where the filesystem can: each
    URL's bytes, or the `OSError` reading it gave."""
    if not urls:
        return {}
    fs, _ = filesystem(urls[0], named=True)
    paths = {filesystem(u, named=True)[1]: u for u in urls}
    try:
        # `cat_ranges`, not `cat`: `cat` expands its paths as glob patterns, and an entry of a capture
        # named `a[1].jsonl` is no pattern (it matched `a1.jsonl`'s entry, or nothing)
        contents = fs.cat_ranges(list(paths), None, None, on_error="return")
    except Exception as exc:
        raise ErascopeError(f"cannot read {redact(urls[0])} and the objects beside it: {redact(str(exc))}") from None
    found = dict(zip(paths, contents, strict=True))
    return {
        paths[p]: data if isinstance(data, bytes) else _oserror(paths[p], data)
        for p, data in found.items()
        if p in paths
    }


def is_dir(url: str) -> bool:
    """Whether `url` names a "directory" (a key prefix holding objects)."""
    return _ask(url, "isdir")


def is_file(url: str) -> bool:
    """Whether `url` names an object."""
    return _ask(url, "isfile")


def _ask(url: str, question: str) -> bool:
    """The store's answer to `isdir`/`isfile` about `url`; its errors as a clear, redacted one."""
    fs, path = filesystem(url)
    try:
        return bool(getattr(fs, question)(path))
    except Exception as exc:
        raise ErascopeError(f"cannot read {redact(url)}: {redact(str(exc))}") from None


def glob(url: str, pattern: str) -> list[str]:
    """URLs of the objects under `url` matching `pattern` (fsspec glob syntax), sorted."""
    return glob_url(join(url, pattern))


def glob_url(pattern: str) -> list[str]:
    """URLs of the objects and prefixes `pattern` (a URL with `*`, `?` or `[…]`) matches, sorted."""
    fs, path = filesystem(pattern)
    try:
        found = fs.glob(path)
    except Exception as exc:
        raise ErascopeError(f"cannot list {redact(pattern)}: {redact(str(exc))}") from None
    return sorted(_unstripped(pattern, fs, p) for p in found)


def files_under(url: str) -> set[str]:
    """URLs of every object under `url`, in one listing (to check an archive's parts exist)."""
    fs, path = filesystem(url)
    try:
        found = fs.find(path)
    except Exception as exc:
        raise ErascopeError(f"cannot list {redact(url)}: {redact(str(exc))}") from None
    return {_unstripped(url, fs, p) for p in found}


def part_sizes(url: str) -> dict[str, int]:
    """URL → bytes of each Parquet part of the archive at `url` (`day=…/server=…/*.parquet`), in one listing."""
    fs, path = filesystem(url)
    try:
        found = fs.glob(join(path, "day=*/server=*/*.parquet"), detail=True)
    except Exception as exc:
        raise ErascopeError(f"cannot list {redact(url)}: {redact(str(exc))}") from None
    return {_unstripped(url, fs, p): int(info.get("size") or 0) for p, info in found.items()}


# --- reading inputs, local or at a URL ------------------------------------------------------------
def _info(url: str) -> dict[str, Any]:
    fs, path = filesystem(url, named=True)
    try:
        return fs.info(path)
    except Exception as exc:
        raise _oserror(url, exc) from None


def mode_size(path: str) -> tuple[int, int]:
    """(`st_mode`, size) of a local path or an object (a regular file) or prefix (a directory) at a
    URL; `OSError` when it cannot be looked at (`FileNotFoundError` when there is nothing)."""
    if not is_url(path):
        st = os.stat(path)
        return st.st_mode, st.st_size
    info = _info(path)
    if info.get("type") == "directory":
        return stat.S_IFDIR | 0o500, 0
    return stat.S_IFREG | 0o400, int(info.get("size") or 0)


def fingerprint(url: str) -> dict[str, Any]:
    """What tells that the object at `url` changed: its size and its version (the store's entity tag,
    or its modification time where there is none). `OSError` when it cannot be looked at."""
    info = _info(url)
    version = info.get("ETag") or info.get("etag") or info.get("md5Hash")
    if not version:
        when = info.get("LastModified") or info.get("mtime") or info.get("updated") or info.get("last_modified")
        version = when.isoformat() if hasattr(when, "isoformat") else str(when)
    return {"size": int(info.get("size") or 0), "version": str(version)}


class RawOver(io.RawIOBase):
    """A raw reader over another stream (`_inner`), which it closes with itself."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


class _Remote(RawOver):
    """An object read as a raw file: each `readinto` is one ranged request of the store, and the
    store's own errors are `OSError`s naming the URL (redacted), as a local file's would be."""

    def __init__(self, url: str, inner: Any) -> None:
        super().__init__(inner)
        self._url = url

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:  # type: ignore[override]
        try:
            return self._inner.readinto(buffer)
        except Exception as exc:
            raise _oserror(self._url, exc) from None

    def readall(self) -> bytes:
        # the rest in one request (`RawIOBase.readall` would ask for 8 KiB at a time)
        try:
            return self._inner.read()
        except Exception as exc:
            raise _oserror(self._url, exc) from None

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._inner.seek(offset, whence)

    def tell(self) -> int:
        return self._inner.tell()


def open_binary(path: str) -> io.BufferedReader:
    """A local file or an object at a URL, opened for reading as `open(path, "rb")` opens a file
    (buffered: `peek`, `readline`, `seek`). Raises `OSError` when it cannot be opened."""
    if not is_url(path):
        return open(path, "rb")
    fs, key = filesystem(path, named=True)
    try:
        # no cache of fsspec's own: the buffered reader asks for what it needs, a request a time
        inner = fs.open(key, "rb", cache_type="none")
    except Exception as exc:
        raise _oserror(path, exc) from None
    return io.BufferedReader(_Remote(path, inner), buffer_size=BUFFER_BYTES)


def captures_under(url: str, suffixes: tuple[str, ...]) -> list[str]:
    """URLs of the objects under the prefix `url` whose names end with one of `suffixes`, in one listing."""
    return sorted(u for u in files_under(url) if u.endswith(suffixes))


# --- writing archives at a URL (`analyzer.compact`) ----------------------------------------------
def put_files(pairs: Iterable[tuple[str, str]]) -> None:
    """Upload local files to URLs (of one filesystem), concurrently where the filesystem can. Each
    object appears whole or not at all (a single or a completed multipart upload). Raises `OSError`."""
    pairs = list(pairs)
    if not pairs:
        return
    fs, _ = filesystem(pairs[0][1], named=True)
    try:
        fs.put([local for local, _ in pairs], [filesystem(url, named=True)[1] for _, url in pairs])
    except Exception as exc:
        raise _oserror(pairs[0][1], exc) from None


def remove(urls: Iterable[str]) -> None:
    """Delete the objects at `urls` (of one filesystem); those already gone are no error. Raises `OSError`."""
    urls = list(urls)
    if not urls:
        return
    fs, _ = filesystem(urls[0], named=True)
    for url in urls:
        # an object at a time: `rm` expands its paths as glob patterns, and removing the objects of
        # a capture named `a[1].jsonl` removed `a1.jsonl`'s instead
        try:
            fs.rm_file(filesystem(url, named=True)[1])
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise _oserror(url, exc) from None
