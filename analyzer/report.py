"""Reports of an `Analysis`: `text` (rich, readable at 100 columns), `json` (`erascope-report/1`,
see REPORT.md) and `markdown` (for postmortems). Every renderer returns a string; the CLI decides
where it goes.

File paths are shown exactly as they were given or found, so reports over relative paths are
stable (goldens can compare them byte for byte). Text and markdown cite evidence as `[n]:line` and
end with a legend of the numbered files (`FileRefs`): long paths never sit inside a table.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import shutil
import textwrap
from collections.abc import Iterable
from typing import Any, Final

import orjson
import polars as pl
from rich import box
from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from addon.errors import ErascopeError
from analyzer.eras import ServerVerdict
from analyzer.findings import Evidence, Finding
from analyzer.pipeline import Analysis

REPORT_SCHEMA: Final = "erascope-report/1"
FORMATS: Final = ("text", "json", "markdown")
_MAX_NOTES: Final = 20
"""Malformed-line locations listed in text/markdown (json lists them all)."""


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ev(e: Evidence) -> dict[str, Any]:
    return {"file": e.file, "line": e.line, "note": e.note}


def _server_json(v: ServerVerdict) -> dict[str, Any]:
    return {
        "server": v.server,
        "transport": v.transport,
        "era": v.era,
        "modern_support": v.modern_support,
        "legacy_support": v.legacy_support,
        "versions": v.versions,
        "first_seen": v.first_seen,
        "last_seen": v.last_seen,
        "connections": v.connections,
        "probes": v.probes,
        "probe_outcomes": v.probe_outcomes,
        "inits": v.inits,
        "init_outcomes": v.init_outcomes,
        "clients": v.clients,
        "peers": v.peers,
        "evidence": [_ev(e) for e in v.evidence],
        "timeline": [{"ts": t.ts, "era": t.era, "evidence": _ev(t.evidence)} for t in v.timeline],
    }


def _finding_json(f: Finding) -> dict[str, Any]:
    return {
        "rule": f.rule,
        "severity": f.severity.value,
        "server": f.server,
        "client": f.client,
        "ts": f.ts,
        "message": f.message,
        "evidence": [_ev(e) for e in f.evidence],
        "details": f.details,
    }


def _sorted(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then by time (the rulebook's order; re-applied so every report agrees)."""
    from analyzer.rules import sort_findings

    return sort_findings(list(findings))


def _message_count(analysis: Analysis) -> int:
    count = getattr(analysis, "message_count", None)  # plain test doubles carry only `messages`
    return int(count) if count is not None else analysis.messages.height


def _counts(series: pl.Series) -> dict[str, int]:
    return {str(k): int(n) for k, n in sorted(series.value_counts().iter_rows())}


def report_dict(analysis: Analysis) -> dict[str, Any]:
    """The `erascope-report/1` document as plain Python data (see analyzer/REPORT.md)."""
    inp = analysis.inputs
    severities = {s: 0 for s in ("error", "warning", "info")}
    for f in analysis.findings:
        severities[f.severity.value] = severities.get(f.severity.value, 0) + 1
    clients = None
    if analysis.clients is not None:
        clients = analysis.clients.to_dicts()
    return {
        "schema": REPORT_SCHEMA,
        "inputs": {
            "files": inp.files,
            "records": inp.records,
            "malformed": [{"file": b.file, "line": b.line, "reason": b.reason} for b in inp.malformed],
            "torn": [{"file": b.file, "line": b.line, "reason": b.reason} for b in inp.torn],
            "skipped": [{"file": f, "reason": r} for f, r in inp.skipped],
            "lost": inp.lost,
            # only when there are any: reports of clean inputs stay as they were
            **({"errors": [{"file": f, "error": e} for f, e in inp.errors]} if inp.errors else {}),
            **({"duplicates": [{"file": f, "duplicate_of": d} for f, d in inp.duplicates]} if inp.duplicates else {}),
        },
        "totals": {
            "servers": len(analysis.servers),
            "messages": _message_count(analysis),
            "probes": analysis.probes.height,
            "probe_outcomes": _counts(analysis.probes.get_column("outcome")),
            "inits": analysis.inits.height,
            "init_outcomes": _counts(analysis.inits.get_column("outcome")),
            "findings": severities,
        },
        "servers": [_server_json(v) for v in analysis.servers],
        "findings": [_finding_json(f) for f in _sorted(analysis.findings)],
        "clients": clients,
    }


def render_json(analysis: Analysis) -> str:
    """The json report, indented, keys in a fixed order, ending with a newline."""
    return orjson.dumps(report_dict(analysis), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"


# --- text and markdown ---------------------------------------------------------------------------
_MAX_REFS: Final = 12
"""Evidence lines cited per finding in text/markdown (json lists them all)."""
_MAX_NAME: Final = 40
"""Server names longer than this wrap in the "why" list (the rest of the line is for the evidence)."""
_MAX_CLIENT: Final = 14
"""Client names longer than this wrap inside the servers and clients tables."""
_MAX_WIDTH: Final = 120
"""Text reports are never wider than this by default: longer lines are hard to read."""
_ERA_STYLE: Final = {
    "modern": "green",
    "dual-era": "green",
    "modern-only": "cyan",
    "legacy": "yellow",
    "inconsistent": "magenta",
    "broken": "red",
    "unknown": "dim",
}
_SEVERITY_STYLE: Final = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_CLIENT_HEADERS: Final = {
    "connections": "conns",
    "requests": "reqs",
    "acted_as": "acted as",
}
"""Short headers keep the client table within 100 columns; the json report keeps the real names."""
_SHORT_OUTCOMES: Final = {
    "discover-result": "discover",
    "legacy-answer": "legacy",
    "unsupported-version": "unsupported",
    "connection-died": "died",
    "modern-error": "modern-err",
}
"""Probe outcome names as the text tables abbreviate them (markdown and json use the full names)."""


class FileRefs:
    """Numbers the capture files a report cites, in the order it first cites them.

    Evidence is then written `[3]:98` (or `[3]:98,100` for several lines of one file) and the
    legend maps each number to its path once, so long paths never sit inside a table cell.
    """

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}
        """File path (as given) → its number, in citation order."""

    def number(self, file: str) -> int:
        """The number of `file`, assigned on its first citation."""
        return self.numbers.setdefault(file, len(self.numbers) + 1)

    def loc(self, e: Evidence) -> str:
        """`[n]:line` for one piece of evidence."""
        return f"[{self.number(e.file)}]:{e.line}"

    def grouped(self, evidence: Iterable[Evidence]) -> str:
        """`[3]:98,100 [5]:4`: the lines of each file together, files in order, each line once."""
        lines: dict[str, list[int]] = {}
        for e in evidence:
            seen = lines.setdefault(e.file, [])
            if e.line not in seen:
                seen.append(e.line)
        return " ".join(f"[{self.number(f)}]:{','.join(map(str, ls))}" for f, ls in lines.items())


def _clock(ts: float | None) -> str:
    """`01:31:02.406Z`: the time of day is what tells events apart; section headings give the day."""
    if ts is None:
        return "?"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M:%S.%f")[:-3] + "Z"


def _days(analysis: Analysis) -> list[str]:
    """The UTC days the report's times fall on (timelines and findings)."""
    stamps = [t.ts for v in analysis.servers for t in v.timeline]
    stamps += [f.ts for f in analysis.findings if f.ts is not None]
    return sorted({dt.datetime.fromtimestamp(ts, dt.UTC).date().isoformat() for ts in stamps})


def _when(ts: float | None, days: list[str]) -> str:
    # A report over one day shows times of day; one spanning days needs the date on every time.
    return _clock(ts) if len(days) <= 1 else (_iso(ts) or "?")


def _short(outcome: str) -> str:
    """An outcome name short enough for a narrow table cell (`discover-result` → `discover`)."""
    for long, short in _SHORT_OUTCOMES.items():
        outcome = outcome.replace(long, short)
    return outcome


def _outcomes(counts: dict[str, int], *, short: bool = False) -> list[str]:
    """`["5 legacy-answer", "1 discover-result"]`, most frequent first."""
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [f"{n} {_short(k) if short else k}" for k, n in ordered]


def _why(v: ServerVerdict, refs: FileRefs, days: list[str]) -> str:
    """The deciding evidence with what each line was, then the era changes, if any."""
    notes: dict[str, list[str]] = {}
    for e in v.evidence:  # one line can decide two things (e.g. refused, and naming a version)
        notes.setdefault(refs.loc(e), []).append(e.note)
    parts = "; ".join(f"{loc} {', '.join(n for n in ns if n)}".rstrip() for loc, ns in notes.items())
    parts = parts or "no deciding evidence"
    if len(v.timeline) > 1:
        first = v.timeline[0]
        steps = [f"{first.era} from {_when(first.ts, days)} ({refs.loc(first.evidence)})"]
        steps += [f"{t.era} at {_when(t.ts, days)} ({refs.loc(t.evidence)})" for t in v.timeline[1:]]
        parts += "; era " + " → ".join(steps)
    return parts


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _summary(analysis: Analysis) -> str:
    """One line: files, records, servers, findings by severity, malformed input."""
    inp = analysis.inputs
    parts = [
        f"{_plural(len(inp.files), 'file')}, {_plural(inp.records, 'record')}, "
        f"{_plural(len(analysis.servers), 'server')}",
        f"findings: {_severity_text(analysis)}",
        _plural(len(inp.malformed), "malformed line"),
    ]
    if inp.torn:
        parts[-1] += f", {len(inp.torn)} torn"
    if inp.skipped:
        parts.append(f"{_plural(len(inp.skipped), 'file')} skipped")
    return "; ".join(parts)


def _times_note(days: list[str]) -> str:
    """Where times are shown as times of day, the day they belong to."""
    return f" (times UTC, {days[0]})" if len(days) == 1 else ""


def _cited(evidence: tuple[Evidence, ...]) -> tuple[tuple[Evidence, ...], int]:
    """The evidence a text/markdown report cites and how many more lines the json report has."""
    return evidence[:_MAX_REFS], max(0, len(evidence) - _MAX_REFS)


def _input_notes(analysis: Analysis) -> list[str]:
    inp = analysis.inputs
    notes: list[str] = []
    for b in inp.torn:
        notes.append(f"torn last line: {b.file}:{b.line} (skipped)")
    if inp.malformed:
        notes.append(f"{len(inp.malformed)} malformed line(s), skipped:")
        notes.extend(f"  {b.file}:{b.line}: {b.reason}" for b in inp.malformed[:_MAX_NOTES])
        if len(inp.malformed) > _MAX_NOTES:
            notes.append(f"  … and {len(inp.malformed) - _MAX_NOTES} more (see --format json)")
    for f, reason in inp.skipped:
        notes.append(f"skipped {f}: {reason}")
    notes.extend(f"input error: {error}" for _, error in inp.errors)
    notes.extend(f"left out {f}: the same capture as {first}" for f, first in inp.duplicates)
    if inp.lost:
        notes.append(f"the recorders reported {inp.lost} record(s) lost while capturing")
    return notes


def _totals_line(analysis: Analysis) -> str:
    inp = analysis.inputs
    sev = _severity_text(analysis)
    return (
        f"{len(inp.files)} file(s), {inp.records} record(s), {_message_count(analysis)} message(s), "
        f"{len(analysis.servers)} server(s), {analysis.probes.height} probe(s), {analysis.inits.height} initialize, "
        f"findings: {sev}"
    )


def _severity_text(analysis: Analysis) -> str:
    # `N error, N warning, N info`
    counts = {s: 0 for s in ("error", "warning", "info")}
    for f in analysis.findings:
        counts[f.severity.value] += 1
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def _cell(value: object) -> str:
    """A client-table value as text: lists joined, nulls as `-`."""
    if value is None or value == "":
        return "-"
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


# --- text ----------------------------------------------------------------------------------------
def _table(title: str) -> Table:
    # No vertical rules and one space of padding: 100 columns are tight.
    return Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        collapse_padding=True,
    )


def _wrap(text: str, width: int) -> str:
    """`text` broken at hyphens (then anywhere) into lines of `width`: names stay readable when folded."""
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=True)) or text


def _flex(width: int, fixed: list[str], natural: int) -> int:
    """The width left for the one flexible column of a table whose other columns show `fixed` cells.

    Each column costs its widest line plus two columns of spacing; the result is at least 12 and
    never more than the flexible column needs (`natural`).
    """
    return max(12, min(natural, width - sum(max(map(len, c.splitlines()), default=0) + 2 for c in fixed)))


def _servers_table(analysis: Analysis, width: int) -> Table:
    headers = ["transport", "era", "modern", "legacy", "versions", "probes", "clients"]
    rows = [
        [
            v.transport,
            v.era,
            v.modern_support,
            v.legacy_support,
            "\n".join(v.versions) or "-",
            "\n".join(_outcomes(v.probe_outcomes, short=True)) or "-",
            "\n".join(_wrap(c, _MAX_CLIENT) for c in v.clients) or "-",
        ]
        for v in analysis.servers
    ]
    columns = ["\n".join(col) for col in zip(headers, *rows, strict=True)]
    server_width = _flex(width, columns, max((len(v.server) for v in analysis.servers), default=6))
    t = _table("Servers")
    t.add_column("server", width=server_width, overflow="fold")
    for col in headers:
        t.add_column(col, overflow="fold")
    for v, row in zip(analysis.servers, rows, strict=True):
        era = Text(v.era, style=_ERA_STYLE.get(v.era, ""))
        t.add_row(Text(_wrap(v.server, server_width)), Text(row[0]), era, *map(Text, row[2:]))
    return t


def _why_grid(analysis: Analysis, refs: FileRefs, days: list[str]) -> Table:
    t = Table.grid(padding=(0, 2))
    t.add_column(overflow="fold", max_width=_MAX_NAME)
    t.add_column()
    for v in analysis.servers:
        t.add_row(Text(_wrap(v.server, _MAX_NAME), style=_ERA_STYLE.get(v.era, "")), Text(_why(v, refs, days)))
    return t


def _finding_block(f: Finding, refs: FileRefs, days: list[str]) -> Group:
    head = Text.assemble(
        (f.severity.value.upper(), _SEVERITY_STYLE.get(f.severity.value, "")),
        "  ",
        (f.rule, "bold"),
        f"  server {f.server}",
        f"  client {f.client}" if f.client else "",
        f"  {_when(f.ts, days)}",
    )
    cited, more = _cited(f.evidence)
    evidence = "evidence: " + (refs.grouped(cited) or "-") + (f" … {more} more (--format json)" if more else "")
    return Group(head, Padding(Text(f.message), (0, 0, 0, 4)), Padding(Text(evidence), (0, 0, 0, 4)))


def _clients_table(clients: pl.DataFrame, eras: dict[str, str], width: int) -> Table:
    """Clients grouped under a heading per server: a server column would not fit in 100 columns."""
    shown = [c for c in clients.columns if c not in ("server", "server_era")]
    headers = ["server / client" if c == "client" else _CLIENT_HEADERS.get(c, c) for c in shown]
    rows = [{c: _cell(row[c]) for c in clients.columns} for row in clients.to_dicts()]
    for row in rows:
        if "outcomes" in row:
            row["outcomes"] = "\n".join(_short(o) for o in row["outcomes"].split(", "))
        if "acted_as" in row:
            row["acted_as"] = row["acted_as"].replace("+", "+\n")  # `legacy+modern` would widen the table
        if "client" in row:
            row["client"] = "  " + _wrap(row["client"], _MAX_CLIENT)
    fixed = ["\n".join([h, *(r[c] for r in rows)]) for c, h in zip(shown, headers, strict=True) if c != "client"]
    headings = {r.get("server", ""): f"{r.get('server', '')} ({eras.get(r.get('server', ''), '?')})" for r in rows}
    first_width = _flex(width, fixed, max(map(len, [*headings.values(), *(r.get("client", "") for r in rows)])))
    t = _table("Clients")
    numeric = {name for name, dtype in clients.schema.items() if dtype.is_numeric()}
    for col, header in zip(shown, headers, strict=True):
        t.add_column(
            header,
            justify="right" if col in numeric else "left",
            overflow="fold",
            width=first_width if col == "client" else None,
        )
    server = None
    for row in rows:
        if row.get("server") != server:
            server = row.get("server")
            era = eras.get(str(server), "")
            heading = _wrap(headings[str(server)], first_width)
            text = Text(heading, style="bold")
            text.highlight_words([f"({era})"], _ERA_STYLE.get(era, ""))
            t.add_row(text)
        t.add_row(*(Text(row[c]) for c in shown))  # Text: names from captures are not rich markup
    return t


def _legend(refs: FileRefs) -> list[str]:
    """`[n] name` under its directory: a full path with its number rarely fits in 100 columns."""
    by_dir: dict[str, list[tuple[int, str]]] = {}
    for path, n in refs.numbers.items():
        head, name = os.path.split(path)
        by_dir.setdefault(head, []).append((n, name))
    lines: list[str] = []
    for head, files in by_dir.items():
        indent = "  "
        if head:
            lines.append(f"  {os.path.join(head, '')}")
            indent = "    "
        lines += [f"{indent}[{n}] {name}" for n, name in files]
    return lines


def render_text(analysis: Analysis, *, width: int | None = None, color: bool = False) -> str:
    """Summary, servers, why each verdict, findings, clients, totals, input notes, files legend.

    `width`: columns to render at; None means the terminal's width (`COLUMNS`), at most 120, and
    100 when the output is not a terminal.
    """
    if width is None:
        width = min(shutil.get_terminal_size((100, 24)).columns, _MAX_WIDTH)
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color, highlight=False)
    refs = FileRefs()
    days = _days(analysis)
    console.print(Text("erascope: ", style="bold") + Text(_summary(analysis)))
    console.print()
    console.print(_servers_table(analysis, width))
    console.print()
    console.print(Text("Why each verdict" + _times_note(days), style="bold"))
    console.print(_why_grid(analysis, refs, days))
    console.print()
    if analysis.findings:
        console.print(Text(f"Findings: {len(analysis.findings)}" + _times_note(days), style="bold"))
        for f in _sorted(analysis.findings):
            console.print(_finding_block(f, refs, days))
            console.print()
    else:
        console.print("No findings.")
        console.print()
    if analysis.clients is not None and analysis.clients.height:
        console.print(_clients_table(analysis.clients, {v.server: v.era for v in analysis.servers}, width))
    console.print()
    console.print(_totals_line(analysis), markup=False)
    for note in _input_notes(analysis):
        console.print(note, markup=False)
    if refs.numbers:
        console.print()
        console.print(Text("Files", style="bold"))
        for line in _legend(refs):
            console.print(line, markup=False)
    # Tables pad every line to the full width; trailing blanks only get in the way of copy and paste.
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


# --- markdown ------------------------------------------------------------------------------------
def _md_cell(value: object) -> str:
    text = "-" if value is None or value == "" else str(value)
    return text.replace("|", "\\|").replace("\n", "<br>")


def _md_table(headers: list[str], rows: list[list[object]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows)
    return out


def render_markdown(analysis: Analysis) -> str:
    """A markdown document for postmortems, in the text report's order, with a files legend at the end."""
    refs = FileRefs()
    days = _days(analysis)
    lines = ["# erascope report", "", _summary(analysis), "", "## Servers", ""]
    lines += _md_table(
        ["server", "transport", "era", "modern", "legacy", "versions", "probes", "clients"],
        [
            [
                f"`{v.server}`",
                v.transport,
                f"**{v.era}**",
                v.modern_support,
                v.legacy_support,
                ", ".join(v.versions),
                ", ".join(_outcomes(v.probe_outcomes)),
                ", ".join(v.clients),
            ]
            for v in analysis.servers
        ],
    )
    lines += ["", "### Why each verdict" + _times_note(days), ""]
    lines += [f"- `{v.server}` **{v.era}**: {_why(v, refs, days)}" for v in analysis.servers]
    lines += ["", "## Findings" + _times_note(days), ""]
    if not analysis.findings:
        lines.append("No findings.")
    for f in _sorted(analysis.findings):
        who = f", client `{f.client}`" if f.client else ""
        lines.append(f"- **{f.severity.value}** `{f.rule}` on `{f.server}`{who}, {_when(f.ts, days)}: {f.message}")
        cited, more = _cited(f.evidence)
        evidence = "; ".join(f"{refs.loc(e)} {e.note}".rstrip() for e in cited)
        lines.append(f"  - evidence: {evidence}" + (f"; … {more} more (see --format json)" if more else ""))
    if analysis.clients is not None and analysis.clients.height:
        lines += ["", "## Clients", ""]
        rows = [[_cell(x) for x in row] for row in analysis.clients.iter_rows()]
        lines += _md_table(list(analysis.clients.columns), rows)
    lines += ["", "## Inputs", "", _totals_line(analysis)]
    notes = _input_notes(analysis)
    if notes:
        lines.append("")
        lines += [f"  - {n.strip()}" if n.startswith("  ") else f"- {n}" for n in notes]
    if refs.numbers:
        lines += ["", "## Files", ""]
        lines += [f"- [{n}] `{path}`" for path, n in refs.numbers.items()]
    return "\n".join(lines) + "\n"


def render(analysis: Analysis, fmt: str, *, width: int | None = None, color: bool = False) -> str:
    """The report in `fmt` (`text`, `json` or `markdown`)."""
    if fmt == "json":
        return render_json(analysis)
    if fmt == "markdown":
        return render_markdown(analysis)
    if fmt == "text":
        return render_text(analysis, width=width, color=color)
    raise ErascopeError(f"unknown report format {fmt!r} (choose from {', '.join(FORMATS)})")
