"""Test helpers for stdio captures: read every record of a capture and rebuild each direction's bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from addon import format as fmt


def capture_files(out_dir: Path) -> list[Path]:
    """Capture parts in a directory, in name order (time order)."""
    return sorted(out_dir.glob(f"*{fmt.CAPTURE_SUFFIX}"))


def read_records(paths: list[Path] | Path) -> list[dict[str, Any]]:
    """Every record of the given parts, in file order; fails loudly on an unparseable line."""
    if isinstance(paths, Path):
        paths = capture_files(paths) if paths.is_dir() else [paths]
    records: list[dict[str, Any]] = []
    for path in paths:
        for line in path.read_bytes().splitlines():
            records.append(orjson.loads(line))
    return records


def only_capture(out_dir: Path) -> list[dict[str, Any]]:
    """The records of the single capture in `out_dir` (asserts there is exactly one part)."""
    files = capture_files(out_dir)
    assert len(files) == 1, files
    return read_records(files)


def traffic(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Non-header records in seq order."""
    return sorted((r for r in records if r[fmt.F_SEQ] > 0), key=lambda r: r[fmt.F_SEQ])


def rebuild(records: list[dict[str, Any]], direction: str | None, rtype: str = fmt.FRAME) -> bytes:
    """The bytes of one direction (or of stderr with `rtype=stderr`, `direction=None`), from its records."""
    out = bytearray()
    for rec in traffic(records):
        if rec[fmt.F_TYPE] != rtype or rec.get(fmt.F_DIR) != direction:
            continue
        payload = fmt.payload_bytes(rec)
        assert len(payload) == rec[fmt.F_LEN]
        out += payload
        if rec[fmt.F_NL]:
            out += b"\n"
    return bytes(out)


def events(records: list[dict[str, Any]]) -> list[str]:
    """Lifecycle events in seq order."""
    return [r[fmt.F_EVENT] for r in traffic(records) if r[fmt.F_TYPE] == fmt.LIFECYCLE]


def lifecycle(records: list[dict[str, Any]], event: str) -> dict[str, Any]:
    """The one lifecycle record of `event` (asserts it is there exactly once)."""
    found = [r for r in traffic(records) if r[fmt.F_TYPE] == fmt.LIFECYCLE and r[fmt.F_EVENT] == event]
    assert len(found) == 1, (event, found)
    return found[0]


def jsonrpc(records: list[dict[str, Any]], direction: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of one direction, skipping lines that are not JSON objects (banners)."""
    out = []
    for line in rebuild(records, direction).splitlines():
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(msg, dict):
            out.append(msg)
    return out
