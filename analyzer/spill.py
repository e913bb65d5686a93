"""Temporary files for the rows an analysis reads again only near its end.

Condensing moves a narrow row per request of the input out of the messages frame, and keeps a row
per dropped answer to an enveloped request (`analyzer.condense.Traffic`). Nothing reads them again
until the rules build their frames, and they grow with the input: about 115 MB for 2 GB of
captures. An analysis (`analyzer.pipeline.analyze`) writes them, chunk by chunk as the captures are
read, to Arrow IPC files in a temporary directory and keeps only lazy scans of them; the few
queries that read them later read only the columns and rows they need. The rules' request view (a
row per request, `analyzer.rules.context.RuleContext.requests`) is written there too. The
directory goes with the analysis (`Analysis.close`, or when it is garbage-collected), and at once
when the analysis fails.

Without a `Spill` (the default of the loading functions) the rows stay in memory, as frames.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import polars as pl

from addon.errors import ErascopeError


class Spill:
    """A temporary directory of Arrow IPC files; `put` writes a frame and gives back a lazy scan of it.

    Created in the system's temporary directory (`TMPDIR`) unless `directory` is given. Use it as a
    context manager, or call `close`.
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        try:
            self.path = Path(tempfile.mkdtemp(prefix="erascope-", dir=directory))
        except OSError as exc:
            where = directory or tempfile.gettempdir()
            raise ErascopeError(f"cannot create a temporary directory in {where}: {exc.strerror or exc}") from None
        self._count = 0
        self._lock = threading.Lock()  # files are written from the threads that read captures
        self.bytes = 0
        """Bytes written so far."""

    def put(self, frame: pl.DataFrame) -> pl.LazyFrame:
        """Write `frame` to a new file and return a lazy scan of it (same schema, same row order).

        Raises `ErascopeError` when the file cannot be written (a full disk, say): an analysis that
        cannot keep its rows stops with a message, it never goes on without them.
        """
        # uncompressed: the rules read these files several times, and each read then skips decompressing
        return self._write(lambda target: frame.write_ipc(target, compression="uncompressed"))

    def sink(self, frame: pl.LazyFrame) -> pl.LazyFrame:
        """Stream `frame` to a new file as it is computed (never held whole) and return a lazy scan of
        it; raises `ErascopeError` as `put` does."""
        return self._write(lambda target: frame.sink_ipc(target, compression="uncompressed"))

    def _write(self, write: Callable[[Path], object]) -> pl.LazyFrame:
        with self._lock:
            self._count += 1
            target = self.path / f"{self._count:06d}.arrow"
        try:
            write(target)
        except OSError as exc:
            raise ErascopeError(
                f"cannot write temporary file {target}: {exc.strerror or exc}"
                " (point --temp-dir or TMPDIR to a directory with more free space)"
            ) from None
        with self._lock:
            self.bytes += target.stat().st_size
        return pl.scan_ipc(target)

    def close(self) -> None:
        """Remove the directory and every file in it."""
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
