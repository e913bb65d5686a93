"""Which traffic an analysis reads: a time window and a set of server keys (`--since/--until/--server`).

A `Selection` keeps the message rows whose record time `ts` lies in `[since, until)` (since
inclusive, until exclusive, both in UTC) and whose `server` is one of `servers`, the server key
every record carries (captures/FORMAT.md: `--server`, else derived from the command line or from
the origin and path). Bounds left out are open; `servers=None` keeps every server. When a time
bound is given, rows without a time are left out; when servers are named, rows without a server.

The selection applies to the rows the analysis reads, before any pairing: a response whose
request lies before `since` is analyzed as a response without its request, exactly as if the
capture had started at `since`. The input accounting (files, records, malformed and torn lines,
lost records) still counts the files read as a whole, so JSONL captures and their archive give the
same report for the same selection.

An archive (`analyzer.compact`) is partitioned by UTC day and server: `keeps_day` and
`keeps_server` tell from a partition's name whether it can hold a selected row, so the others are
never opened. They only ever prune what cannot match; the rows read are then selected exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Final

import polars as pl

from addon.errors import ErascopeError


def utc(moment: datetime) -> datetime:
    """`moment` in UTC; a time without a zone is taken to be UTC already."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


_AGO: Final = re.compile(r"\s*\d+(?:\.\d+)?\s*[smhdw]\s*", re.IGNORECASE)
"""A duration with its unit (`90s`, `30m`, `6h`, `7d`, `2w`): that long before now. A bare number
is no time (seconds? a year?)."""


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """An ISO-8601 date or date and time (`2026-11-28`, `2026-11-28T09:30`, `…Z`, `…+02:00`) in UTC,
    or a duration before `now` (default: the clock), as the recorders' `--rotate-age` writes one.

    Raises `ValueError` with what was expected, also for a time that is valid where it was written
    but not in UTC (`0001-01-01T00:00+01:00` is in year 0 there).
    """
    if _AGO.fullmatch(text):
        # the recorders' parser, imported only for a duration: its module costs every analysis a start
        from addon.retention import parse_duration

        try:
            before = timedelta(seconds=parse_duration(text, "a duration"))
            return (utc(now) if now is not None else datetime.now(UTC)) - before
        except (ErascopeError, OverflowError):
            pass  # 0d, or more days than the calendar holds: refused below as any other text
    else:
        try:
            moment = datetime.fromisoformat(text.strip())
        except ValueError:
            pass
        else:
            try:
                return utc(moment)
            except OverflowError:
                raise ValueError(f"{text!r} lies outside years 1 to 9999 in UTC") from None
    raise ValueError(
        f"{text!r} is not an ISO-8601 time or a duration before now"
        " (e.g. 2026-11-28, 2026-11-28T09:30:00Z, 2026-11-28T11:30+02:00, 7d, 6h)"
    )


@dataclass(frozen=True)
class Selection:
    """A time window `[since, until)` and a set of server keys; None means no bound / every server."""

    since: datetime | None = None
    """First moment kept (inclusive); a time without a zone is UTC."""
    until: datetime | None = None
    """First moment no longer kept (exclusive); a time without a zone is UTC."""
    servers: tuple[str, ...] | None = None
    """Server keys kept, exactly as the records name them; None keeps every server."""

    @property
    def everything(self) -> bool:
        """True when nothing is left out."""
        return self.since is None and self.until is None and self.servers is None

    def expr(self) -> pl.Expr:
        """True on the rows (with `ts` in epoch seconds and `server`) this selection keeps."""
        keep = pl.lit(True)
        if self.since is not None:
            keep &= pl.col("ts") >= utc(self.since).timestamp()
        if self.until is not None:
            keep &= pl.col("ts") < utc(self.until).timestamp()
        if self.servers is not None:
            keep &= pl.col("server").cast(pl.String).is_in(list(self.servers))
        return keep.fill_null(False)

    def describe(self) -> str:
        """The selection as the command line gives it (`--since 2026-11-28T00:00:00+00:00 --server KEY`)."""
        words = [f"--since {self.since.isoformat()}"] if self.since is not None else []
        words += [f"--until {self.until.isoformat()}"] if self.until is not None else []
        words += [f"--server {key}" for key in self.servers or ()]
        return " ".join(words)

    def unmatched(self, servers: set[str]) -> list[str]:
        """The server keys named that are not among `servers` (those the analysis found traffic of)."""
        return [key for key in self.servers or () if key not in servers]

    def keeps_day(self, day: str) -> bool:
        """Whether a UTC day (`YYYY-MM-DD`, or `unknown` for rows without a time) can hold kept rows."""
        if self.since is None and self.until is None:
            return True
        try:
            start = datetime.combine(date.fromisoformat(day), datetime.min.time(), tzinfo=UTC)
        except ValueError:
            return False  # `unknown`: rows without a time, never inside a window
        if self.until is not None and start >= utc(self.until):
            return False
        # compared as dates: the end of 9999-12-31 is past what a datetime can hold
        return self.since is None or start.date() >= utc(self.since).date()

    def keeps_server(self, server: str | None) -> bool:
        """Whether rows of this server key (None: rows without one) can be kept."""
        return self.servers is None or (server is not None and server in self.servers)
