"""Writing the files `analyze` produces (the report, a baseline) without ever destroying a capture.

A target is refused when it is one of the inputs (by file identity, so a directory input, a glob,
another spelling or a symlink all count), inside an input archive, or any erascope capture at all.
Files are written whole or not at all: into a temporary file in the target's directory, then
renamed over the target, so a failed run leaves the previous file as it was.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from addon import format as fmt
from addon.errors import ErascopeError

_HEADER_LIMIT: Final = 1 << 20
"""Bytes of a file's first line read to tell whether it is a capture (headers are far smaller)."""


def is_capture(path: Path) -> bool:
    """True when the file's first line is an erascope header (any format version), decompressed as
    the analyzer reads it: a capture logrotate compressed is a capture too, and one whose header the
    analyzer reads and orjson refuses (a lone surrogate escape) is one."""
    from analyzer.load import read_line
    from analyzer.sources import first_line

    try:
        header = read_line(first_line(str(path), _HEADER_LIMIT))
    except OSError:
        return False
    return (
        header is not None
        and header.get(fmt.F_TYPE) == fmt.HEADER
        and isinstance(header.get("format"), str)
        and header["format"].startswith(fmt.FORMAT_NAME + "/")
    )


def _same_file(a: Path, b: str | Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _local(path: str) -> str | None:
    """The local path an input names: itself, or a `file://` (any local filesystem's) URL's path;
    None for an object elsewhere, which no local target can be."""
    from analyzer.storage import filesystem, is_url

    if not is_url(path):
        return path
    try:
        from fsspec.implementations.local import LocalFileSystem

        fs, local = filesystem(path)
    except (ErascopeError, ImportError, ValueError):
        return None
    return local if isinstance(fs, LocalFileSystem) else None


def check_searchable(path: Path, what: str) -> None:
    """Raise `ErascopeError` ("cannot write WHAT") when whether `path` exists cannot be told (a
    directory on the way that cannot be searched, say); a path that does not exist yet is written new."""
    try:
        path.stat()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ErascopeError(f"cannot write {what}: {exc.strerror or exc}") from None


def check_targets(paths: Iterable[str], targets: Mapping[str, Path]) -> None:
    """Raise `ErascopeError` when writing any of `targets` (option name → path) could destroy a capture.

    `paths` are the analysis inputs as given (files, directories, globs, archives, URLs).
    """
    from analyzer.archive import SOURCES_DIR
    from analyzer.load import find_inputs

    given = [str(p) for p in paths]
    inputs = [local for f in find_inputs(given) if (local := _local(f)) is not None]
    archives = [
        Path(local).resolve()
        for p in given
        if (local := _local(p)) is not None and Path(local).is_dir() and (Path(local) / SOURCES_DIR).is_dir()
    ]
    for option, target in targets.items():
        check_searchable(target, f"{option} {target}")
        if target.is_dir():
            raise ErascopeError(f"{option} {target} is a directory; name a file")
        real = target.resolve()
        for archive in archives:
            if archive in real.parents:
                raise ErascopeError(f"refusing to write {option} {target}: it is inside the input archive {archive}")
        if not target.is_file():
            continue  # nothing there yet, or a device or FIFO (/dev/stdout) that is written through
        if any(_same_file(target, f) for f in inputs):
            raise ErascopeError(f"refusing to write {option} {target}: it is one of the inputs")
        if is_capture(target):
            raise ErascopeError(f"refusing to write {option} {target}: it is an erascope capture")
    named = list(targets.items())
    for i, (option, target) in enumerate(named):
        for other, second in named[i + 1 :]:
            if target.resolve() == second.resolve() or _same_file(target, second):
                raise ErascopeError(f"{option} and {other} name the same file: {target}")


def write_atomic(target: Path, data: bytes) -> None:
    """Write `data` to `target` whole or not at all (temporary file in the same directory, then rename).

    A symlink is followed (the file it points to is replaced), an existing file keeps its
    permissions, and a device or FIFO is written through. Raises `ErascopeError` when it cannot write.
    """
    try:
        if target.exists() and not target.is_file():
            with open(target, "wb") as f:
                f.write(data)
            return
        real = target.resolve()
        mode = stat.S_IMODE(real.stat().st_mode) if real.exists() else None
        tmp = real.with_name(f".{real.name}.{secrets.token_hex(4)}.tmp")
        # 0o666 lets the umask decide a new file's permissions, as a plain open() would
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, real)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise ErascopeError(f"cannot write {target}: {exc.strerror or exc}") from None
