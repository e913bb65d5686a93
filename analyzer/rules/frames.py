"""Small frame helpers shared by the rules: typed empty/inline frames, evidence structs, emitting findings."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal

import polars as pl

from analyzer.findings import Evidence, Finding, Severity
from analyzer.probes import file_of_answer

EVIDENCE_DTYPE: Final = pl.Struct({"file": pl.String(), "line": pl.UInt32(), "note": pl.String()})
"""One evidence line inside a frame: the capture file, 1-based line, and what that line shows."""


def frame(schema: Mapping[str, pl.DataType], rows: Iterable[Mapping[str, Any]] = ()) -> pl.DataFrame:
    """A frame with exactly `schema`; columns a row does not name are null.

    Unknown keys are an error rather than dropped, so a typo in a test row cannot pass silently.
    """
    rows = list(rows)
    for row in rows:
        extra = set(row) - set(schema)
        if extra:
            raise KeyError(f"columns not in schema: {sorted(extra)}")
    columns = {name: [row.get(name) for row in rows] for name in schema}
    return pl.DataFrame(columns, schema=dict(schema))


def as_lazy(value: Any, schema: Mapping[str, pl.DataType]) -> pl.LazyFrame:
    """A LazyFrame from a DataFrame, LazyFrame or None (then empty with `schema`)."""
    if value is None:
        return frame(schema).lazy()
    if isinstance(value, pl.DataFrame):
        return value.lazy()
    if isinstance(value, pl.LazyFrame):
        return value
    raise TypeError(f"expected a polars frame, got {type(value).__name__}")


def evidence(file: str | pl.Expr = "file", line: str | pl.Expr = "line", note: str | pl.Expr = "") -> pl.Expr:
    """An evidence struct expression; strings name columns, except `note`, which is a literal unless an Expr."""
    file_e = pl.col(file) if isinstance(file, str) else file
    line_e = pl.col(line) if isinstance(line, str) else line
    note_e = pl.lit(note) if isinstance(note, str) else note
    return pl.struct(
        file=file_e.cast(pl.String()), line=line_e.cast(pl.UInt32()), note=note_e.cast(pl.String())
    )


def answer_evidence(note: str | pl.Expr = "") -> pl.Expr:
    """Evidence of a probe's or `initialize`'s deciding answer: its `answer_line`, in `answer_file` when a
    rotated capture put it in the part after the request's, else in the request's `file`."""
    return evidence(file_of_answer(), "answer_line", note)


def run_ids(position: str, keys: list[str]) -> pl.Expr:
    """An id per run of rows at consecutive `position`s within each `keys` group.

    The frame must be in `position` order. Ids are unique across groups, so runs are grouped by
    `keys` plus the id.
    """
    return (pl.col(position).diff().over(keys) != 1).fill_null(True).cum_sum()


def emit(
    df: pl.DataFrame,
    *,
    rule: str,
    severity: Severity,
    message: Callable[[dict[str, Any]], str],
    max_evidence: int,
) -> list[Finding]:
    """Turn one row per finding into `Finding`s.

    The frame has `server`, `ts`, `evidence` (a list of evidence structs) and optionally `client`;
    every other column goes into `details`. Evidence is de-duplicated, sorted by file and line, kept
    to `max_evidence` entries, and its full count is kept in `details["evidence_total"]`. A rule
    with too much evidence to list passes the first entries in that order and its own
    `evidence_total` column (the count of all distinct entries).
    """
    if "evidence" in df.columns and "evidence_total" not in df.columns and df.height:
        # thousands of entries (a storm's probes) are counted and cut here, not made into objects
        el = pl.element()
        usable = el.struct.field("file").is_not_null() & el.struct.field("line").is_not_null()
        distinct = pl.col("evidence").list.eval(
            el.filter(usable).struct.with_fields(pl.field("note").fill_null("")).unique().sort()
        )
        df = df.with_columns(evidence=distinct.list.head(max_evidence), evidence_total=distinct.list.len())
    out: list[Finding] = []
    for row in df.to_dicts():
        server = row.pop("server")
        client = row.pop("client", None)
        ts = row.pop("ts", None)
        raw_ev = row.pop("evidence", None) or []
        items = sorted(
            {
                Evidence(str(e["file"]), int(e["line"]), e.get("note") or "")
                for e in raw_ev
                if e is not None and e.get("file") is not None and e.get("line") is not None
            }
        )
        total = row.pop("evidence_total", None)
        details = {k: _plain(v) for k, v in row.items()}
        details["evidence_total"] = len(items) if total is None else int(total)
        out.append(
            Finding(
                rule=rule,
                severity=severity,
                server=server,
                message=message(details),
                evidence=tuple(items[:max_evidence]),
                client=client,
                ts=ts,
                details=details,
            )
        )
    return out


def _plain(value: Any) -> Any:
    # Rounding keeps the json report stable and readable; the raw numbers remain derivable from the capture.
    if isinstance(value, float):
        return round(value, 3)
    return value


def pair_key(first: str, second: str, *, cast: pl.DataType | None = None) -> pl.Expr:
    """Two categoricals as one 64-bit integer named `_key`: joins, look-ups and sorts over a row per
    request by one integer column hold far less memory than by two categoricals (an as-of join
    `by` it a third). `second` may also be an integer column whose values lie in [0, 2³²).

    Categories are process-wide, so keys of different frames match when their strings do. `cast`
    (`pl.Categorical()`) turns string columns into categoricals first.
    """
    a, b = pl.col(first), pl.col(second)
    if cast is not None:
        a, b = a.cast(cast), b.cast(cast)
    return (a.to_physical().cast(pl.UInt64()) * (1 << 32) + b.to_physical().cast(pl.UInt64())).alias("_key")


def picked(rows: pl.LazyFrame, keep: pl.Expr) -> pl.DataFrame:
    """The rows of `rows` that `keep` holds, in their order.

    How rules read the request view (`RuleContext.requests`, a row per request, on disk for big
    inputs) and the moved requests: a filter is pushed into the scan and applied while the rows are
    read, so only the rows kept are ever held; a join or a sort over every request holds all of them
    (about 80 MB of the view's rows per 2 million requests). Polars' default engine: forcing the
    streaming one held 10–15 MB more on 100,000 small captures, and no less at 4 GB."""
    return rows.filter(keep).collect()


def matching(rows: pl.LazyFrame, keys: pl.DataFrame, how: Literal["semi", "inner"] = "semi") -> pl.DataFrame:
    """The rows of `rows` whose (`capture`, `seq`) is among `keys`' (`how="semi"`), or those joined
    with `keys`' other columns (`how="inner"`), in `rows`' order.

    For a few keys against every request or answer: `rows` are first `picked` by a hash of both
    (`_near_key`), a filter applied while they are read that may keep a few more than wanted, and
    the exact match is made among those. A join straight on `rows` would hold all of them in memory,
    even for no key at all; `seq` alone picks far more than wanted (every capture numbers its own)."""
    near = picked(rows, _near_key().is_in(keys.select(_near_key()).to_series().unique().implode()))
    # `keys` in `near`'s dtypes: a categorical `capture` matches the same text either way
    keys = keys.with_columns(pl.col("capture").cast(pl.String).cast(near.schema["capture"]))
    return near.join(keys, on=["capture", "seq"], how=how, maintain_order="left")


def grouped[T](counts: Iterable[tuple[T, int]], limit: int) -> list[tuple[list[T], int]]:
    """`counts`' items, in their order, in runs whose counts add up to at most `limit` (an item over
    it alone), each with its total."""
    groups: list[tuple[list[T], int]] = []
    for item, n in counts:
        if groups and groups[-1][1] + n <= limit:
            items, total = groups[-1]
            items.append(item)
            groups[-1] = (items, total + n)
        else:
            groups.append(([item], n))
    return groups


LOOKUP_BUCKET_ROWS: Final = 1 << 19
"""`key_buckets` groups keys of about this many rows (8 MB of a key and a time each)."""


def key_buckets(rows: pl.LazyFrame, wanted: pl.Series, *, on_disk: bool) -> list[pl.Series]:
    """The values of `wanted` (of `rows`' `_key` column; nulls left out) in groups that each pick at
    most about `LOOKUP_BUCKET_ROWS` of `rows` (a key with more rows alone); one group unless `rows`
    are read from disk (`on_disk`).

    A look-up over the rows of many keys (an as-of join over every real request) holds all the rows
    it looks in. Over rows on disk it is made a group of keys at a time, each group's rows `picked`:
    one more read of the rows per group, and only one group's rows in memory."""
    wanted = wanted.drop_nulls().unique().sort()
    if not on_disk or wanted.is_empty():
        return [wanted]
    counts = (
        rows.filter(pl.col("_key").is_in(wanted.implode()))
        .group_by("_key")
        .agg(pl.len())
        .sort("_key")
        .collect(engine="streaming")
    )
    groups = [keys for keys, _ in grouped(counts.iter_rows(), LOOKUP_BUCKET_ROWS)] or [[]]
    # keys without a row need no rows looked in, but their rows on the other side need a group
    groups[0] = wanted.filter(~wanted.is_in(counts.get_column("_key").implode())).to_list() + groups[0]
    return [pl.Series("_key", group, dtype=wanted.dtype) for group in groups if group]


def _near_key() -> pl.Expr:
    # equal for equal (capture, seq): a hash of the capture's category code (process-wide) and of
    # `seq`; the rare other rows that share it are dropped by the exact match after
    code = pl.col("capture").cast(pl.Categorical()).to_physical().cast(pl.UInt32())
    return pl.struct(code, pl.col("seq").cast(pl.Int64())).hash()
