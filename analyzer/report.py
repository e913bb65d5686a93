"""Reports of an `Analysis`: `text` (rich tables), `json` (`erascope-report/1`, see REPORT.md) and
`markdown` (for postmortems). Every renderer returns a string; the CLI decides where it goes.

File paths are shown exactly as they were given or found, so reports over relative paths are
stable (goldens can compare them byte for byte).
"""

from __future__ import annotations

import datetime as dt
import io
from typing import Any, Final

import orjson
import polars as pl
from rich.console import Console
from rich.table import Table

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


def _loc(e: Evidence) -> str:
    return f"{e.file}:{e.line}"


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
        },
        "totals": {
            "servers": len(analysis.servers),
            "messages": analysis.messages.height,
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


# --- text ----------------------------------------------------------------------------------------
def _servers_table(analysis: Analysis) -> Table:
    t = Table(title="Servers", title_justify="left")
    for col in ("server", "transport", "era", "modern", "legacy", "versions", "probes", "clients", "evidence"):
        t.add_column(col, overflow="fold")
    for v in analysis.servers:
        outcomes = ", ".join(f"{k} {n}" for k, n in v.probe_outcomes.items())
        t.add_row(
            v.server,
            v.transport,
            v.era,
            v.modern_support,
            v.legacy_support,
            ", ".join(v.versions) or "-",
            f"{v.probes}" + (f" ({outcomes})" if outcomes else ""),
            ", ".join(v.clients) or "-",
            "\n".join(_loc(e) for e in v.evidence[:3]) or "-",
        )
    return t


def _timeline_lines(analysis: Analysis) -> list[str]:
    out: list[str] = []
    for v in analysis.servers:
        if len(v.timeline) > 1:
            steps = " → ".join(f"{t.era} ({_iso(t.ts)}, {_loc(t.evidence)})" for t in v.timeline)
            out.append(f"{v.server}: {steps}")
    return out


def _findings_table(analysis: Analysis) -> Table:
    t = Table(title="Findings", title_justify="left")
    for col in ("severity", "rule", "server", "client", "message", "evidence"):
        t.add_column(col, overflow="fold")
    for f in _sorted(analysis.findings):
        t.add_row(
            f.severity.value,
            f.rule,
            f.server,
            f.client or "-",
            f.message,
            "\n".join(_loc(e) for e in f.evidence[:3]) + (" …" if len(f.evidence) > 3 else ""),
        )
    return t


def _clients_table(clients: pl.DataFrame) -> Table:
    t = Table(title="Clients", title_justify="left")
    for col in clients.columns:
        t.add_column(col, overflow="fold")
    for row in clients.iter_rows():
        t.add_row(*("-" if x is None else (", ".join(map(str, x)) if isinstance(x, list) else str(x)) for x in row))
    return t


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
    if inp.lost:
        notes.append(f"the recorders reported {inp.lost} record(s) lost while capturing")
    return notes


def _totals_line(analysis: Analysis) -> str:
    inp = analysis.inputs
    sev = _severity_text(analysis)
    return (
        f"{len(inp.files)} file(s), {inp.records} record(s), {analysis.messages.height} message(s), "
        f"{len(analysis.servers)} server(s), {analysis.probes.height} probe(s), {analysis.inits.height} initialize, "
        f"findings: {sev}"
    )


def _severity_text(analysis: Analysis) -> str:
    # `N error, N warning, N info`
    counts = {s: 0 for s in ("error", "warning", "info")}
    for f in analysis.findings:
        counts[f.severity.value] += 1
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def render_text(analysis: Analysis, *, width: int = 120, color: bool = False) -> str:
    """Rich tables: servers, timelines, findings, clients, totals, then notes about the input."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color, highlight=False)
    console.print(_servers_table(analysis))
    timelines = _timeline_lines(analysis)
    if timelines:
        console.print("Era changes:")
        for line in timelines:
            console.print("  " + line, markup=False)
    if analysis.findings:
        console.print(_findings_table(analysis))
    else:
        console.print("No findings.")
    if analysis.clients is not None and analysis.clients.height:
        console.print(_clients_table(analysis.clients))
    console.print(_totals_line(analysis), markup=False)
    for note in _input_notes(analysis):
        console.print(note, markup=False)
    return buf.getvalue()


# --- markdown ------------------------------------------------------------------------------------
def _md_cell(value: object) -> str:
    text = "-" if value is None or value == "" else str(value)
    return text.replace("|", "\\|").replace("\n", "<br>")


def _md_table(headers: list[str], rows: list[list[object]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows)
    return out


def render_markdown(analysis: Analysis) -> str:
    """A markdown document for postmortems: servers, era changes, findings with evidence, inputs."""
    lines = ["# erascope report", "", "## Servers", ""]
    lines += _md_table(
        ["server", "transport", "era", "modern", "legacy", "versions", "probes", "clients", "evidence"],
        [
            [
                f"`{v.server}`",
                v.transport,
                f"**{v.era}**",
                v.modern_support,
                v.legacy_support,
                ", ".join(v.versions),
                v.probes,
                ", ".join(v.clients),
                "<br>".join(f"`{_loc(e)}` {e.note}" for e in v.evidence[:3]),
            ]
            for v in analysis.servers
        ],
    )
    timelines = [v for v in analysis.servers if len(v.timeline) > 1]
    if timelines:
        lines += ["", "## Era changes", ""]
        for v in timelines:
            lines.append(f"- `{v.server}`:")
            lines += [f"  - {_iso(t.ts)} **{t.era}** (`{_loc(t.evidence)}` {t.evidence.note})" for t in v.timeline]
    lines += ["", "## Findings", ""]
    if not analysis.findings:
        lines.append("No findings.")
    for f in _sorted(analysis.findings):
        who = f" client `{f.client}`" if f.client else ""
        lines.append(f"- **{f.severity.value}** `{f.rule}` on `{f.server}`{who} ({_iso(f.ts)}): {f.message}")
        lines += [f"  - `{_loc(e)}` {e.note}".rstrip() for e in f.evidence[:5]]
    lines += ["", "## Inputs", "", _totals_line(analysis)]
    notes = _input_notes(analysis)
    if notes:
        lines.append("")
        lines += [f"  - {n.strip()}" if n.startswith("  ") else f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def render(analysis: Analysis, fmt: str, *, width: int = 120, color: bool = False) -> str:
    """The report in `fmt` (`text`, `json` or `markdown`)."""
    if fmt == "json":
        return render_json(analysis)
    if fmt == "markdown":
        return render_markdown(analysis)
    if fmt == "text":
        return render_text(analysis, width=width, color=color)
    raise ErascopeError(f"unknown report format {fmt!r} (choose from {', '.join(FORMATS)})")
