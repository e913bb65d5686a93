"""The `html` report: one self-contained page (no request to any network) for postmortems.

The page holds what the other reports hold (`analyzer.report.report_dict` is its data) plus what a
picture shows better: an era timeline with one lane per server. It is a Jinja2 template
(`templates/report.html.j2`, autoescaped) around a Bokeh chart. Bokeh was chosen over Plotly
because its one needed bundle (`bokeh.min.js`, ~1.4 MB) inlines well under the page budget
where Plotly's is ~4.5 MB, it brings zoom, pan and hover itself, and its hover tooltips escape
field values (no `{safe}` field is used here).

Everything from a capture is attacker-controlled, so no capture string ever reaches the page as
markup: the template autoescapes, the chart and the page script get their data as JSON inside
`<script type="application/json">` (with `<`, `>`, `&`, U+2028 and U+2029 escaped), read with
`textContent` and `JSON.parse`, and the script writes text with `textContent` only. A
Content-Security-Policy allows inline code and data: URLs only, so even a slip could not load
anything.

A cited HAR entry or dump flow is shown as every record the analysis read from it: the file is
converted again by `analyzer.foreign`, as the loader converted it (redacted alike, never the file's
own text), and only while it still holds what was read (`Inputs.foreign_from`'s digest).

Large analyses are capped (and the page says so): probe and initialize marks beyond
`MAX_MARKS` are aggregated into time buckets per server and outcome, payloads are truncated at
`MAX_PAYLOAD_CHARS` characters and at most `MAX_PAYLOADS` of them are inlined.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import stat
from collections import Counter
from collections.abc import Iterable
from typing import Any, Final

import orjson
import polars as pl
from bokeh.embed import json_item
from bokeh.models import CDSView, ColumnDataSource, FactorRange, HoverTool, IndexFilter, Range1d, TapTool
from bokeh.plotting import figure
from bokeh.resources import Resources
from bokeh.transform import dodge
from jinja2 import Environment, PackageLoader, select_autoescape

from addon.jsontext import loads
from analyzer.findings import Evidence
from analyzer.pipeline import Analysis
from analyzer.report import (
    ERA_LEGEND,
    _input_notes,
    _shown,
    _summary,
    _totals_line,
    report_dict,
    visible,
)
from analyzer.scrub import scrubbed, valid_unicode
from analyzer.sources import CutStream, location, open_stream
from analyzer.storage import mode_size

MAX_MARKS: Final = 5000
"""Probe and initialize marks drawn one by one; beyond this they are aggregated into buckets
(a canvas stays smooth to pan with a few thousand glyphs, not with hundreds of thousands)."""
BUCKETS: Final = 400
"""Time buckets across the whole span, at most, when marks are aggregated."""
MAX_PAYLOAD_CHARS: Final = 6000
"""Characters of one pretty-printed captured message shown; the rest is cut with a note."""
MAX_PAYLOADS: Final = 2000
"""Evidence lines whose captured message is inlined; later ones say where to look instead."""
_MAX_LINE: Final = 4 << 20
"""Bytes of a capture line read for a payload (recorded bodies are bounded by `--max-body`)."""
_MAX_TOOLTIP: Final = 300
_LANE_PX: Final = 46
MAX_CHART_PX: Final = 21000
"""The timeline's height at most, in CSS pixels: Chromium draws no canvas side over 65,535 device
pixels (a blank chart, no error), which is 21,845 CSS pixels at a device pixel ratio of 3. Past
`MAX_CHART_PX // _LANE_PX` servers their lanes share this height."""
_LANE_LABEL: Final = 48

ERA_COLORS: Final = {
    "dual-era": "#2e9d4f",
    "modern": "#7cc46b",
    "modern-only": "#1f9bb5",
    "legacy": "#e0a722",
    "inconsistent": "#b4399e",
    "broken": "#d13b3b",
    "unknown": "#9a9a9a",
}
SEVERITY_COLORS: Final = {"error": "#c62828", "warning": "#ef8f00", "info": "#1e88e5"}
_GOOD: Final = frozenset({"discover-result", "unsupported-version", "served", "refused-named"})
_BAD: Final = frozenset({"no-answer", "connection-died", "garbage"})
_CSP: Final = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; font-src data:"
)


def _iso(ts: float | None) -> str:
    if ts is None:
        return "?"
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def script_json(data: Any) -> str:
    """`data` as JSON that can sit inside `<script type="application/json">`: nothing in it can end
    the element or open a comment (`<`, `>`, `&` escaped) and JavaScript reads it whole (U+2028/9)."""
    try:
        text = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # a lone surrogate somewhere: rare, so fixed only then
        text = orjson.dumps(scrubbed(data, valid_unicode), option=orjson.OPT_NON_STR_KEYS).decode()
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


# --- captured messages -------------------------------------------------------------------------
@dataclasses.dataclass
class _Payloads:
    """The captured messages of cited evidence lines, each read once, with an id the page looks them up by."""

    units: dict[str, str]
    lines_from: dict[str, str]
    """File → the path to read its lines from (`Inputs.lines_from`): no other file is opened."""
    rows_from: dict[str, tuple[str, tuple[str, ...]]] = dataclasses.field(default_factory=dict)
    """Archived file → its rows' `file` and the parts holding them (`Inputs.rows_from`)."""
    foreign_from: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    """HAR file or dump → the path it was read from and the digest of what was read (`Inputs.foreign_from`)."""
    wanted: dict[tuple[str, int], str] = dataclasses.field(default_factory=dict)
    """(file, line) → payload id, in citation order."""
    dropped: int = 0
    """Cited lines beyond `MAX_PAYLOADS`, not inlined."""

    def cite(self, e: Evidence) -> str | None:
        key = (e.file, e.line)
        if key in self.wanted:
            return self.wanted[key]
        if len(self.wanted) >= MAX_PAYLOADS:
            self.dropped += 1
            return None
        pid = f"p{len(self.wanted)}"
        self.wanted[key] = pid
        return pid

    def read(self) -> tuple[dict[str, dict[str, Any]], int]:
        """Payload id → {at, text, note}; and how many were truncated."""
        by_file: dict[str, dict[int, str]] = {}
        for (file, line), pid in self.wanted.items():
            by_file.setdefault(file, {})[line] = pid
        out: dict[str, dict[str, Any]] = {}
        truncated = 0
        for file, lines in by_file.items():
            unit = self.units.get(file, "line")
            if unit != "line":
                truncated += self._read_foreign(file, unit, lines, out)
                continue
            path = self.lines_from.get(file)
            # an archive's entry names its capture, but the file there is not what was analysed,
            # and may be anything: it is never opened; the archive's own rows say what was captured
            archived = self.rows_from.get(file)
            if path is not None:
                texts = _read_lines(path, set(lines))
            elif archived is not None:
                texts = _archived_lines(*archived, set(lines))
            else:
                texts = {}
            for line, pid in lines.items():
                at = location(file, line, unit)
                raw = texts.get(line)
                if raw is None:
                    why = (
                        f"the message could not be read back from the archive: open the original capture at {at}"
                        if archived is not None
                        else f"the line could not be read again from {file} (moved, or not a plain capture)"
                    )
                    out[pid] = {"at": at, "text": "", "note": why}
                    continue
                text, cut = _pretty(raw)
                truncated += cut
                notes = ["read back from the archive: the message and the fields it keeps"] if archived else []
                notes += [f"truncated to {MAX_PAYLOAD_CHARS} characters"] if cut else []
                out[pid] = {"at": at, "text": text, "note": "; ".join(notes)}
        return out, truncated

    def _read_foreign(self, file: str, unit: str, lines: dict[int, str], out: dict[str, dict[str, Any]]) -> int:
        """The cited entries or flows of a HAR file or dump into `out`; how many were truncated."""
        name, noun = _FOREIGN_NAMES[unit]
        # every HAR file or dump read is in one of the two: read from an archive, or read itself
        archived = self.rows_from.get(file)
        source = self.foreign_from.get(file)
        if archived is not None:  # the file its entry names is not what was analysed: the archive's rows are
            records, failed = _archived_rows(*archived, set(lines)), _ARCHIVED
        elif source is not None:
            records, failed = _foreign_records(*source, unit, set(lines))
        else:
            records, failed = {}, _GONE
        why = {
            _ARCHIVED: f"the messages of this {noun} could not be read back from the archive: open the {name} itself",
            _GONE: f"the {name} could not be read again from {file} (moved, or no longer a regular file or a {name})",
            # its entry or flow numbers may now name other traffic: the analysis' own would be misquoted
            _CHANGED: f"the {name} changed since the analysis read it: nothing is shown, as its {unit} numbers"
            " may now name other traffic",
            None: f"no record of this {noun} was read",
        }[failed]
        truncated = 0
        for line, pid in lines.items():
            at = location(file, line, unit)
            kept, count = records.get(line, ([], 0))
            if not kept:
                out[pid] = {"at": at, "text": "", "note": why}
                continue
            text, cut = _records_text(kept, count)
            truncated += cut
            notes = [
                f"{_count(count, 'message')} of this {noun}, read back from the archive: the messages and the"
                " fields it keeps"
                if archived is not None
                else f"{_count(count, 'record')} of this {noun}, as the analysis read them (converted and redacted)"
            ]
            notes += [f"truncated to {MAX_PAYLOAD_CHARS} characters"] if cut else []
            out[pid] = {"at": at, "text": text, "note": "; ".join(notes)}
        return truncated


_FOREIGN_NAMES: Final = {"entry": ("HAR file", "HAR entry"), "flow": ("mitmproxy dump", "flow")}
"""A foreign file's unit → what the page calls the file and one of its units."""
_ARCHIVED: Final = "archived"
_GONE: Final = "gone"
_CHANGED: Final = "changed"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _foreign_records(
    path: str, digest: str, unit: str, wanted: set[int]
) -> tuple[dict[int, tuple[list[bytes], int]], str | None]:
    """The records the analysis read from the given entries or flows of a HAR file or dump, each with
    how many there are: the file converted again as the loader converted it (`analyzer.foreign`: the
    same bounds and redaction, the same order and `seq`). Of each location, records are kept up to
    `_MAX_LINE` bytes, as a capture line is. {} and `_GONE` when the file can no longer be read as it
    was read or is no longer a regular file, `_CHANGED` when it holds other traffic than was read."""
    from analyzer import foreign  # mitmproxy is imported only when a page cites such a file

    kind = next(k for k, u in foreign.UNITS.items() if u == unit)
    try:
        # replaced since it was read (a FIFO blocks, a device never ends): read again only as it was read
        if not stat.S_ISREG(mode_size(path)[0]):
            return {}, _GONE
        with open_stream(path) as raw:
            converted = foreign.convert(kind, io.BufferedReader(raw) if isinstance(raw, CutStream) else raw)
    except (OSError, foreign.ForeignError):
        return {}, _GONE
    if converted.digest.hex() != digest:
        return {}, _CHANGED
    kept: dict[int, list[bytes]] = {}
    size: Counter[int] = Counter()
    count: Counter[int] = Counter()
    for n, text in foreign.lines(converted):
        if n not in wanted:
            continue
        count[n] += 1
        if size[n] < _MAX_LINE:
            kept.setdefault(n, []).append(text)
            size[n] += len(text)
    return {n: (texts, count[n]) for n, texts in kept.items()}, None


def _records_text(raws: list[bytes], count: int) -> tuple[str, int]:
    """An entry's or flow's records, each as `_pretty` shows a capture record under a heading naming
    its place and type; 1 when cut (at `MAX_PAYLOAD_CHARS`, or records left out of `raws`)."""
    parts: list[str] = []
    size = 0
    for i, raw in enumerate(raws, start=1):
        if size > MAX_PAYLOAD_CHARS:  # the rest would be cut anyway
            break
        record, text = _record_text(raw)
        kind = record.get("type") if isinstance(record, dict) else None
        heading = f"— {i} of {count}" + (f": {visible(kind)}" if isinstance(kind, str) else "") + " —"
        parts.append(f"{heading}\n{text}")
        size += len(parts[-1]) + 2
    text = "\n\n".join(parts)
    if len(parts) < count and len(text) <= MAX_PAYLOAD_CHARS:
        return f"{text}\n… ({_count(count - len(parts), 'more record')} not shown)", 1
    return _cut(text)


_ARCHIVED_FIELDS: Final = {"type": "record_type", "ts": "ts", "server": "server", "conn": "conn", "dir": "dir"}
"""A capture record's fields an archive row keeps (record field → column), shown with its message."""


def _archived_lines(file: str, parts: tuple[str, ...], lines: set[int]) -> dict[int, bytes]:
    """The given lines of an archived capture, each its first row (`_archived_rows`)."""
    return {n: rows[0] for n, (rows, _) in _archived_rows(file, parts, lines).items()}


def _archived_rows(file: str, parts: tuple[str, ...], lines: set[int]) -> dict[int, tuple[list[bytes], int]]:
    """The rows of the given lines (a HAR entry's or a dump flow's: each of its messages) of an archived
    file, in `seq` order, as records rebuilt from them (the message, `raw`, and the fields
    `_ARCHIVED_FIELDS` keeps), with how many rows each line has: kept up to `_MAX_LINE` bytes of
    messages a line, as a capture line is. {} when the parts cannot be read again."""
    if not parts:
        return {}
    texts = [pl.col(c).cast(pl.String) for c in _ARCHIVED_FIELDS.values() if c != "ts"]
    size = pl.col("raw").str.len_bytes().fill_null(0)
    try:
        rows = (
            pl.scan_parquet(list(parts), hive_partitioning=False, glob=False)
            .filter((pl.col("file").cast(pl.String) == file) & pl.col("line").is_in(sorted(lines)))
            .select("line", "seq", "ts", *texts, "raw")
            .sort("line", "seq", maintain_order=True)
            .with_columns(pl.len().over("line").alias("_rows"), (size.cum_sum() - size).over("line").alias("_before"))
            .filter(pl.col("_before") < _MAX_LINE)
            .collect()
        )
    except (pl.exceptions.PolarsError, OSError):
        return {}
    out: dict[int, tuple[list[bytes], int]] = {}
    for row in rows.iter_rows(named=True):
        record = {field: row[column] for field, column in _ARCHIVED_FIELDS.items() if row[column] is not None}
        out.setdefault(row["line"], ([], row["_rows"]))[0].append(orjson.dumps({**record, "raw": row["raw"]}))
    return out


def _read_lines(file: str, lines: set[int]) -> dict[int, bytes]:
    """The given (1-based) lines of a capture, decompressed as the loader reads it, each at most
    `_MAX_LINE` bytes; {} when the file cannot be read again or is no longer a regular file."""
    found: dict[int, bytes] = {}
    last = max(lines)
    try:
        # replaced since it was read (a FIFO blocks, a device never ends): read again only as it was read
        if not stat.S_ISREG(mode_size(file)[0]):
            return found
        with open_stream(file) as raw:
            f = io.BufferedReader(raw) if isinstance(raw, CutStream) else raw
            for n in range(1, last + 1):
                data = f.readline(_MAX_LINE)
                if not data:
                    break
                rest = data
                while not rest.endswith(b"\n") and len(rest) == _MAX_LINE:  # a longer line: its rest is skipped
                    rest = f.readline(_MAX_LINE)
                if n in lines:
                    found[n] = data.rstrip(b"\r\n")
    except OSError:
        return found
    return found


def _pretty(raw: bytes) -> tuple[str, int]:
    """A capture record as a reader checks it: its fields, then the message it carries, pretty-printed."""
    return _cut(_record_text(raw)[1])


def _record_text(raw: bytes) -> tuple[Any, str]:
    """The record parsed (None when it is no JSON) and shown as `_pretty` shows it, whole."""
    record: Any = None
    try:
        record = loads(raw)
    except ValueError:
        text = raw.decode("utf-8", "replace")
    else:
        text = _pretty_record(record) or raw.decode("utf-8", "replace")
    lines = [visible(line) for line in text.split("\n")]  # bidi and control characters shown, not acted on
    return record, "\n".join(lines)


def _cut(text: str) -> tuple[str, int]:
    """`text` within `MAX_PAYLOAD_CHARS`, and 1 when it was cut."""
    if len(text) > MAX_PAYLOAD_CHARS:
        return text[:MAX_PAYLOAD_CHARS] + "\n… (truncated)", 1
    return text, 0


def _dumps(value: Any) -> str | None:
    """`value` pretty-printed; None when it nests deeper than orjson writes (255 levels)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    except TypeError:  # a lone surrogate in a string, or the nesting
        pass
    try:
        orjson.dumps(scrubbed(value, valid_unicode))
    except (TypeError, RecursionError):
        return None
    # lone surrogates (`addon.jsontext.loads`): written as they are, for `visible` to show each as its escape, not
    # as U+FFFD, which would hide that the message spelled one
    return json.dumps(value, indent=2, ensure_ascii=False)


def _pretty_record(record: Any) -> str | None:
    """The record's message pretty-printed, then its other fields; None when the fields cannot be
    (the caller shows the record as captured). A message that cannot be is shown as captured."""
    if not isinstance(record, dict):
        return _dumps(record)
    meta = _dumps({k: v for k, v in record.items() if k != "raw"})
    raw = record.get("raw")
    if not isinstance(raw, str) or meta is None:
        return _dumps(record)
    try:
        message: Any = loads(raw)
    except ValueError:
        body = raw  # not JSON (stderr, garbage): as captured
    else:
        body = _dumps(message) or raw
    return f"{body}\n\n— record —\n{meta}"


# --- the timeline --------------------------------------------------------------------------------
def _lane_labels(servers: Iterable[str]) -> dict[str, str]:
    """Server → its lane's label: short, unique, control characters shown (canvas text, never markup)."""
    labels: dict[str, str] = {}
    used: set[str] = set()
    for i, server in enumerate(servers):
        shown = visible(server) or "(empty)"
        label = _short(shown, _LANE_LABEL)
        n = i + 1
        # a numbered label can be another key's label too (keys are anyone's text): until it is not
        while label in used:
            suffix = f" #{n}"
            label = f"{_short(shown, _LANE_LABEL - len(suffix))}{suffix}"
            n += 1
        used.add(label)
        labels[server] = label
    return labels


_MARK_ORDER: Final = ["server", "ts", "kind", "file", "line", "outcome", "peer", "client_name"]
"""The marks' order: by lane and time, then by everything a mark shows."""


def _marks(analysis: Analysis, lanes: dict[str, str]) -> tuple[dict[str, list[Any]], str]:
    """Probe and initialize outcome marks (one per exchange, or one per bucket); and the page's note."""
    columns = ["server", "ts", "outcome", "peer", "client_name", "file", "line"]
    frames = []
    for kind, frame in (("probe", analysis.probes), ("initialize", analysis.inits)):
        if frame.height:
            frames.append(
                frame.select(
                    *(pl.col(c).cast(pl.String) for c in ("server", "outcome", "peer", "client_name", "file")),
                    pl.col("ts").cast(pl.Float64),
                    pl.col("line").cast(pl.Int64),
                    pl.lit(kind).alias("kind"),
                ).select(*columns, "kind")
            )
    empty: dict[str, list[Any]] = {
        k: [] for k in ("lane", "x", "kind", "outcome", "color", "time", "peer", "client", "at", "count", "server")
    }
    if not frames:
        return empty, ""
    # a total order, not the rows' own: marks tied on server and time (a coarse clock, or times a
    # capture made up) come in another order from a cluster's shards than from a local run, and a
    # bucket's first mark names its file:line
    marks = (
        pl.concat(frames)
        .filter(pl.col("ts").is_not_null() & pl.col("server").is_not_null())
        .sort(_MARK_ORDER, nulls_last=True, maintain_order=True)
    )
    note = ""
    if marks.height > MAX_MARKS:
        lo, hi = marks.get_column("ts").min(), marks.get_column("ts").max()
        # a mark per bucket and (server, kind, outcome): as many buckets as keep the marks under the cap
        groups = marks.select("server", "kind", "outcome").n_unique()
        buckets = max(1, min(BUCKETS, MAX_MARKS // groups))
        width = max((hi - lo) / buckets, 0.001)  # type: ignore[operator]
        note = (
            f"{marks.height} probe and initialize marks are aggregated into {buckets} time buckets of {width:g} s"
            " per server and outcome (hover shows each bucket's count)."
        )
        marks = (
            marks.with_columns(((pl.col("ts") - lo) / width).floor().alias("bucket"))
            .group_by("server", "kind", "outcome", "bucket")
            .agg(
                pl.col("ts").min().alias("first"),
                pl.col("ts").max().alias("last"),
                pl.len().alias("count"),
                pl.col("peer").drop_nulls().unique().sort().head(3).str.join(", ").alias("peer"),
                pl.col("client_name").drop_nulls().unique().sort().head(3).str.join(", ").alias("client_name"),
                pl.col("file").first(),
                pl.col("line").first(),
            )
            .with_columns(((pl.col("first") + pl.col("last")) / 2).alias("ts"))
            .sort("server", "ts", "kind", "outcome", "bucket", nulls_last=True)
        )
        times = [f"{_iso(a)} … {_iso(b)}" for a, b in zip(marks["first"], marks["last"], strict=True)]
    else:
        marks = marks.with_columns(pl.lit(1, dtype=pl.UInt32).alias("count"))
        times = [_iso(t) for t in marks["ts"]]
    rows = marks.to_dicts()
    return {
        "lane": [lanes.get(r["server"], "") for r in rows],
        "server": [visible(r["server"]) for r in rows],
        "x": [r["ts"] * 1000 for r in rows],
        "kind": [r["kind"] for r in rows],
        "outcome": [r["outcome"] or "?" for r in rows],
        "color": [
            "#2e7d32" if r["outcome"] in _GOOD else "#c62828" if r["outcome"] in _BAD else "#6d4c41" for r in rows
        ],
        "time": times,
        "peer": [visible(r["peer"] or "-") for r in rows],
        "client": [visible(r["client_name"] or "-") for r in rows],
        "at": [
            visible(location(r["file"] or "?", r["line"] or 0, analysis.inputs.units.get(r["file"] or "", "line")))
            for r in rows
        ],
        "count": [int(r["count"]) for r in rows],
    }, note


def _chart(doc: dict[str, Any], analysis: Analysis, lanes: dict[str, str]) -> tuple[dict[str, Any], str, int]:
    """The Bokeh timeline as `json_item` data; the aggregation note; the number of finding markers."""
    servers = doc["servers"]
    bounds = [
        t for s in servers for t in (s["first_seen"], s["last_seen"], *(e["ts"] for e in s["timeline"])) if t
    ] + [f["ts"] for f in doc["findings"] if f["ts"]]
    lo, hi = (min(bounds), max(bounds)) if bounds else (0.0, 1.0)
    if hi - lo < 1:
        lo, hi = lo - 1, hi + 1
    pad = (hi - lo) * 0.03
    factors = list(reversed(lanes.values()))  # the first server on top
    fig = figure(
        name="timeline",
        x_axis_type="datetime",
        y_range=FactorRange(*factors, name="lanes"),
        x_range=Range1d((lo - pad) * 1000, (hi + pad) * 1000, name="time"),
        height=min(max(220, 60 + _LANE_PX * len(factors)), MAX_CHART_PX),
        sizing_mode="stretch_width",
        tools="xpan,xwheel_zoom,xbox_zoom,reset,save",
        active_scroll="xwheel_zoom",
        toolbar_location="above",
        output_backend="canvas",
    )
    fig.yaxis.major_label_text_font_size = "11px"
    fig.xaxis.axis_label = "time (UTC)"
    fig.ygrid.grid_line_color = None

    seen = ColumnDataSource(
        {
            "lane": [lanes[s["server"]] for s in servers],
            "left": [(s["first_seen"] or lo) * 1000 for s in servers],
            "right": [(s["last_seen"] or s["first_seen"] or lo) * 1000 for s in servers],
        },
        name="seen",
    )
    fig.hbar(y="lane", left="left", right="right", height=0.08, source=seen, color="#bbbbbb")

    seg: dict[str, list[Any]] = {k: [] for k in ("lane", "server", "left", "right", "era", "color", "span", "at")}
    for s in servers:
        entries = s["timeline"]
        if not entries and s["first_seen"] is not None:  # no era change decided: its era over its whole span
            entries = [{"ts": s["first_seen"], "era": s["era"], "evidence": {"at": "no deciding evidence"}}]
        for i, e in enumerate(entries):
            end = entries[i + 1]["ts"] if i + 1 < len(entries) else max(e["ts"], s["last_seen"] or e["ts"])
            seg["lane"].append(lanes[s["server"]])
            seg["server"].append(s["server"])
            seg["left"].append(e["ts"] * 1000)
            seg["right"].append(max(end * 1000, e["ts"] * 1000 + 1))
            seg["era"].append(e["era"])
            seg["color"].append(ERA_COLORS.get(e["era"], "#9a9a9a"))
            seg["span"].append(f"{_iso(e['ts'])} → {_iso(end)}")
            seg["at"].append(e["evidence"]["at"])
    eras = fig.hbar(
        y="lane", left="left", right="right", height=0.34, color="color", source=ColumnDataSource(seg, name="eras")
    )
    # a square where each era begins: visible at any zoom, where a short era's bar is a hairline
    starts = fig.scatter(
        x="left", y="lane", source=eras.data_source, size=11, marker="square", fill_color="color", line_color="white"
    )
    fig.add_tools(
        HoverTool(
            renderers=[eras, starts],
            tooltips=[("server", "@server"), ("era", "@era"), ("when", "@span"), ("decided by", "@at")],
        )
    )

    split: dict[str, list[Any]] = {k: [] for k in ("lane", "server", "left", "right", "span", "peers")}
    for f in doc["findings"]:
        d = f["details"]
        if f["rule"] != "rollout-split" or f["server"] not in lanes or f["ts"] is None:
            continue
        end = f["ts"] + float(d.get("duration_s") or 0)
        split["lane"].append(lanes[f["server"]])
        split["server"].append(f["server"])
        split["left"].append(f["ts"] * 1000)
        split["right"].append(max(end * 1000, f["ts"] * 1000 + 1))
        split["span"].append(f"{d.get('axis', '')}: {_iso(f['ts'])} → {_iso(end)}")
        peers = d.get("peers") or []
        split["peers"].append("; ".join(f"{p['peer']} → {p['era']} ×{p['count']}" for p in peers) or "-")
    splits = fig.hbar(
        y="lane", left="left", right="right", height=0.9, source=ColumnDataSource(split, name="splits"),
        fill_color="#b4399e", fill_alpha=0.12, line_color="#b4399e", line_dash="dashed",
    )  # fmt: skip
    fig.add_tools(
        HoverTool(
            renderers=[splits],
            tooltips=[("rollout split", "@server"), ("window", "@span"), ("peers answered", "@peers")],
        )
    )

    marks, note = _marks(analysis, lanes)
    mark_src = ColumnDataSource(marks, name="marks")
    probe_glyph = fig.scatter(
        x="x", y=dodge("lane", -0.3, range=fig.y_range), source=mark_src, size=7, marker="circle",
        fill_color="color", line_color="white", fill_alpha=0.85,
    )  # fmt: skip
    fig.add_tools(
        HoverTool(
            renderers=[probe_glyph],
            tooltips=[
                ("", "@kind @outcome"), ("server", "@server"), ("time", "@time"), ("count", "@count"),
                ("peer", "@peer"), ("client", "@client"), ("first at", "@at"),
            ],
        )
    )

    fnd: dict[str, list[Any]] = {
        k: [] for k in ("lane", "x", "severity", "rule", "server", "client", "time", "message", "color", "index")
    }
    for i, f in enumerate(doc["findings"]):
        lane = lanes.get(f["server"])
        if lane is None:
            continue
        when = f["ts"] if f["ts"] is not None else lo
        fnd["lane"].append(lane)
        fnd["x"].append(when * 1000)
        fnd["severity"].append(f["severity"])
        fnd["rule"].append(f["rule"])
        fnd["server"].append(f["server"])
        fnd["client"].append(f["client"] or "-")
        fnd["time"].append(_iso(f["ts"]) if f["ts"] is not None else "unknown (placed at the start)")
        fnd["message"].append(_short(f["message"], _MAX_TOOLTIP))
        fnd["color"].append(SEVERITY_COLORS.get(f["severity"], "#555555"))
        fnd["index"].append(i)
    found = fig.scatter(
        x="x", y=dodge("lane", 0.3, range=fig.y_range), source=ColumnDataSource(fnd, name="findings"),
        size=12, marker="inverted_triangle", fill_color="color", line_color="black",
        # the page's filters narrow this to the findings they leave shown
        view=CDSView(filter=IndexFilter(list(range(len(fnd["x"]))), name="shown-findings")),
    )  # fmt: skip
    fig.add_tools(TapTool(renderers=[found]))  # the page script scrolls to the finding tapped
    fig.add_tools(
        HoverTool(
            renderers=[found],
            tooltips=[
                ("", "@severity @rule"), ("server", "@server"), ("client", "@client"), ("time", "@time"),
                ("", "@message"),
            ],
        )
    )
    return json_item(fig, "timeline"), note, len(fnd["x"])


# --- the page ------------------------------------------------------------------------------------
def _env() -> Environment:
    return Environment(
        loader=PackageLoader("analyzer", "templates"),
        autoescape=select_autoescape(["html", "j2"], default_for_string=True, default=True),
        keep_trailing_newline=True,
    )


def render_html(analysis: Analysis) -> str:
    """The html report: one page, every script and style inline, nothing fetched."""
    shown = _shown(analysis)  # control and bidi characters written visibly, as in text and markdown
    doc = report_dict(shown)
    for item in (*doc["servers"], *doc["findings"], *(doc["clients"] or ())):
        # traffic without a server key (null): the page's lanes and filters are keyed by text
        if item.get("server") is None:
            item["server"] = ""
    doc["findings"] = [dict(f, key=f"f{i}") for i, f in enumerate(doc["findings"])]
    lanes = _lane_labels(dict.fromkeys([s["server"] for s in doc["servers"]] + [f["server"] for f in doc["findings"]]))
    for f in doc["findings"]:  # a finding on a server with no verdict still gets a lane
        if f["server"] not in {s["server"] for s in doc["servers"]}:
            doc["servers"].append(_bare_server(f["server"], f["ts"]))
    # the doc's evidence names files as shown (`visible`): so are the keys they are looked up by
    payloads = _Payloads(
        {visible(k): v for k, v in analysis.inputs.units.items()},
        {visible(k): v for k, v in analysis.inputs.lines_from.items()},
        {visible(k): v for k, v in analysis.inputs.rows_from.items()},
        {visible(k): v for k, v in analysis.inputs.foreign_from.items()},
    )
    for f in doc["findings"]:
        for e in f["evidence"]:
            e["payload"] = payloads.cite(Evidence(e["file"], e["line"]))
    for s in doc["servers"]:
        for e in s["evidence"]:
            e["payload"] = payloads.cite(Evidence(e["file"], e["line"]))
    texts, truncated = payloads.read()
    item, marks_note, markers = _chart(doc, analysis, lanes)

    caps = []
    if marks_note:
        caps.append(marks_note)
    if 60 + _LANE_PX * len(lanes) > MAX_CHART_PX:
        caps.append(
            f"{len(lanes)} servers' lanes share the timeline's {MAX_CHART_PX} pixels (a taller chart is not drawn):"
            " pick a server in the filter to see its lane alone."
        )
    if truncated:
        caps.append(
            f"{truncated} captured message(s) are longer than {MAX_PAYLOAD_CHARS} characters and shown truncated"
            " (open the capture at the file:line shown for the whole message)."
        )
    if payloads.dropped:
        caps.append(
            f"Only the first {MAX_PAYLOADS} cited capture lines are inlined; {payloads.dropped} more are cited by"
            " file:line only."
        )
    clients = doc["clients"] or []
    client_columns = [c for c in (clients[0].keys() if clients else []) if c not in ("identity",)]
    page = {
        "findings": [
            {"key": f["key"], "server": f["server"], "client": f["client"] or "", "severity": f["severity"]}
            for f in doc["findings"]
        ],
        "servers": [s["server"] for s in doc["servers"]],
        "lanes": {s["server"]: lanes.get(s["server"], "") for s in doc["servers"]},
        "clients": sorted({c["client"] for c in clients if c.get("client")} | {f["client"] for f in doc["findings"]
                                                                               if f["client"]}),
        "client_rows": [{"server": c.get("server") or "", "client": c.get("client") or ""} for c in clients],
        "payloads": texts,
        "markers": markers,
    }
    template = _env().get_template("report.html.j2")
    return template.render(
        csp=_CSP,
        summary=_summary(shown),
        totals=_totals_line(shown),
        notes=_input_notes(shown),
        doc=doc,
        era_legend=[(era, text, ERA_COLORS[era]) for era, text in ERA_LEGEND.items()],
        era_colors=ERA_COLORS,
        severity_colors=SEVERITY_COLORS,
        eras_shown={s["era"] for s in doc["servers"]},
        caps=caps,
        clients=clients,
        client_columns=client_columns,
        cell=_cell,
        iso=_iso,
        bokeh_js=Resources(mode="inline", components=["bokeh"]).js_raw[0],
        chart_json=script_json(item),
        page_json=script_json(page),
        markers=markers,
    )


def _bare_server(server: str, ts: float | None) -> dict[str, Any]:
    return {
        "server": server, "transport": "?", "era": "unknown", "modern_support": "unknown",
        "legacy_support": "unknown", "versions": [], "first_seen": ts, "last_seen": ts, "probe_outcomes": {},
        "clients": [], "peers": [], "evidence": [], "timeline": [],
    }  # fmt: skip


def _cell(value: Any) -> str:
    """A client-table value as text."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return _iso(value) if value > 1e9 else f"{value:g}"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value) or "-"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_cell(v)}" for k, v in value.items()) or "-"
    return str(value)

