r"""Reports of an `Analysis`: `text` (tables laid out to the width without folding a token), `json`
(`erascope-report/2`, see REPORT.md) and `markdown` (for postmortems). Every renderer returns a
string; the CLI decides where it goes.

File paths are shown exactly as they were given or found, so reports over relative paths are
stable (goldens can compare them byte for byte). Text and markdown cite evidence as `[n]:line` and
end with a legend of the numbered files (`FileRefs`): long paths never sit inside a table.

Every string that comes from a capture (server keys, client names, versions, notes, messages, file
names) is attacker-controlled. Text and markdown show control characters visibly (`visible`:
`\x1b`, `\n`, `\u202e`, and `\u200b` for what is drawn as nothing), so a report never moves the
cursor, retitles a window, hides a line or shows two strings alike; markdown also escapes what
markdown and HTML would act on and what GitHub would link or draw as an emoji or as math
(`_md_text`). json carries the exact strings (only lone surrogates, which UTF-8 cannot hold, become
U+FFFD).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson
import polars as pl
from rich.cells import cell_len

from addon.errors import ErascopeError
from analyzer.eras import ServerVerdict
from analyzer.findings import Evidence, Finding
from analyzer.identity import SEPARATOR as IDENTITY_SEPARATOR
from analyzer.pipeline import Analysis, ChainCheck
from analyzer.probes import NON_ERA_OUTCOMES
from analyzer.scrub import scrubbed, valid_unicode
from analyzer.selection import Selection, utc
from analyzer.sources import location, separator
from analyzer.terminal import json_visible, visible

if TYPE_CHECKING:
    # The text renderer's rich classes are imported where it runs: rich.text brings rich.console
    # (about a tenth of a second), which json and markdown reports do not use.
    from rich.text import Text

REPORT_SCHEMA: Final = "erascope-report/2"
FORMATS: Final = ("text", "json", "markdown")
_MAX_NOTES: Final = 20
"""Malformed-line locations listed in text/markdown (json lists them all)."""


def _shown(analysis: Analysis) -> Analysis:
    """The parts of `analysis` a text or markdown report shows, every capture string `visible`."""
    return dataclasses.replace(
        analysis,
        inputs=scrubbed(analysis.inputs, visible),
        servers=scrubbed(analysis.servers, visible),
        findings=scrubbed(analysis.findings, visible),
        clients=scrubbed(analysis.clients, visible),
    )


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ev(e: Evidence, units: dict[str, str] | None = None) -> dict[str, Any]:
    at = location(e.file, e.line, (units or {}).get(e.file, "line"))
    return {"file": e.file, "line": e.line, "at": at, "note": e.note}


def _server_json(v: ServerVerdict, units: dict[str, str] | None = None) -> dict[str, Any]:
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
        "evidence": [_ev(e, units) for e in v.evidence],
        "timeline": [{"ts": t.ts, "era": t.era, "evidence": _ev(t.evidence, units)} for t in v.timeline],
    }


def _finding_json(f: Finding, units: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "rule": f.rule,
        "severity": f.severity.value,
        "server": f.server,
        "client": f.client,
        "ts": f.ts,
        "message": f.message,
        "evidence": [_ev(e, units) for e in f.evidence],
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


def _moment(moment: dt.datetime | None) -> str | None:
    """A selection's bound as the report writes it: ISO-8601 in UTC, `Z` for its zone."""
    return None if moment is None else utc(moment).isoformat().replace("+00:00", "Z")


def _selection_dict(selection: Selection) -> dict[str, Any]:
    return {
        "since": _moment(selection.since),
        "until": _moment(selection.until),
        "servers": list(selection.servers) if selection.servers is not None else None,
    }


def _selection_note(selection: Selection, esc: Callable[[str], str]) -> str:
    """What part of the traffic a sliced analysis read, said once among the input notes."""
    bounds = [f"at or after {_moment(selection.since)}"] if selection.since is not None else []
    bounds += [f"before {_moment(selection.until)}"] if selection.until is not None else []
    when = f"records {' and '.join(bounds)}" if bounds else "records at any time"
    servers = selection.servers
    who = f"of server(s) {', '.join(esc(s) for s in servers)}" if servers is not None else "of every server"
    return f"analyzed only: {when}, {who}"


def report_dict(analysis: Analysis) -> dict[str, Any]:
    """The `erascope-report/2` document as plain Python data (see analyzer/REPORT.md)."""
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
            **(
                {"repeated": [{"file": f, "lines": [a, b], "duplicate_of": d} for f, a, b, d in inp.repeated]}
                if inp.repeated
                else {}
            ),
            **(
                {"undecodable": [{"file": f, "line": n, "count": c} for f, n, c in inp.undecodable]}
                if inp.undecodable
                else {}
            ),
            **({"chained": inp.chained} if inp.chained else {}),
            **({"verification": _verification_dict(inp.verification)} if inp.verification is not None else {}),
            **({"selection": _selection_dict(analysis.selection)} if analysis.selection is not None else {}),
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
        "servers": [_server_json(v, inp.units) for v in analysis.servers],
        "findings": [_finding_json(f, inp.units) for f in _sorted(analysis.findings)],
        "clients": clients,
    }


def render_json(analysis: Analysis) -> str:
    """The json report, indented, keys in a fixed order, ending with a newline."""
    doc = report_dict(analysis)
    options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
    try:
        return json_visible(orjson.dumps(doc, option=options).decode()) + "\n"
    except TypeError:  # a lone surrogate somewhere (e.g. a file name that is not UTF-8): rare, so fixed only then
        return json_visible(orjson.dumps(scrubbed(doc, valid_unicode), option=options).decode()) + "\n"


# --- text and markdown ---------------------------------------------------------------------------
_MAX_REFS: Final = 12
"""Evidence lines cited per finding in text/markdown (json lists them all)."""
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
ERA_LEGEND: Final[dict[str, str]] = {
    "dual-era": "answers the modern probe and serves the legacy initialize",
    "modern-only": "answers the modern probe, refuses the legacy initialize (-32022/-32004)",
    "modern": "answers the modern probe; no legacy initialize seen",
    "legacy": "serves the legacy initialize, or answered the probe the legacy way (nothing modern)",
    "broken": "served nothing: could not start, crash, garbage or silence, or refused both ways",
    "unknown": "no deciding evidence (nothing probed or initialized)",
    "inconsistent": "answered both ways at the same time (a fleet mid-rollout, or flapping)",
}
"""One line per era label (`analyzer.eras.ERAS`): the legend of the text and markdown reports."""
_SUPPORT_LEGEND: Final = (
    "modern, legacy: does it answer the modern probe / serve the legacy initialize: yes, no, unknown, "
    "or mixed (an inconsistent server that answered both ways)"
)
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

    def __init__(self, units: dict[str, str] | None = None) -> None:
        self.numbers: dict[str, int] = {}
        """File path (as given) → its number, in citation order."""
        self.units = units or {}
        """Files not located by line (`Inputs.units`): `[2]#entry=4`, `[3]#flow=7`."""

    def sep(self, file: str) -> str:
        """What joins a file's number and a location in it (`analyzer.sources.separator`)."""
        return separator(self.units.get(file, "line"))

    def number(self, file: str) -> int:
        """The number of `file`, assigned on its first citation."""
        return self.numbers.setdefault(file, len(self.numbers) + 1)

    def loc(self, e: Evidence) -> str:
        """`[n]:line` for one piece of evidence."""
        return f"[{self.number(e.file)}]{self.sep(e.file)}{e.line}"

    def grouped(self, evidence: Iterable[Evidence]) -> str:
        """`[3]:98,100 [5]:4`: the lines of each file together, files in order, each line once."""
        lines: dict[str, list[int]] = {}
        for e in evidence:
            seen = lines.setdefault(e.file, [])
            if e.line not in seen:
                seen.append(e.line)
        return " ".join(f"[{self.number(f)}]{self.sep(f)}{','.join(map(str, ls))}" for f, ls in lines.items())


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


def _why(v: ServerVerdict, refs: FileRefs, days: list[str], esc: Callable[[str], str] = str) -> str:
    """The deciding evidence with what each line was (`esc` applied to the notes), then the era changes."""
    notes: dict[str, list[str]] = {}
    for e in v.evidence:  # one line can decide two things (e.g. refused, and naming a version)
        notes.setdefault(refs.loc(e), []).append(esc(e.note))
    parts = "; ".join(f"{loc} {', '.join(n for n in ns if n)}".rstrip() for loc, ns in notes.items())
    parts = parts or "no deciding evidence"
    if len(v.timeline) > 1:
        first = v.timeline[0]
        steps = [f"{first.era} from {_when(first.ts, days)} ({refs.loc(first.evidence)})"]
        steps += [f"{t.era} at {_when(t.ts, days)} ({refs.loc(t.evidence)})" for t in v.timeline[1:]]
        parts += "; era " + " → ".join(steps)
    # an auditor sees which traffic an auth gate, rate limiter or gateway answered instead of the server
    gated = [(o, v.probe_outcomes.get(o, 0) + v.init_outcomes.get(o, 0)) for o in NON_ERA_OUTCOMES]
    if any(n for _, n in gated):
        parts += "; answered in front of the server (no era evidence): "
        parts += ", ".join(f"{o} ×{n}" for o, n in gated if n)
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


def _input_notes(
    analysis: Analysis, esc: Callable[[str], str] = str, refs: FileRefs | None = None
) -> list[str]:
    """One line per input note; `esc` is applied to file names and reasons. With `refs`, files are
    cited by number (`[3]:7`) like evidence, and the legend gives their paths."""

    def where(file: str, line: int | None = None) -> str:
        at = "" if line is None else f"{separator(analysis.inputs.units.get(file, 'line'))}{line}"
        if refs is not None:
            return f"[{refs.number(file)}]" + at
        return esc(file) + at

    inp = analysis.inputs
    notes: list[str] = [] if analysis.selection is None else [_selection_note(analysis.selection, esc)]
    for b in inp.torn:
        notes.append(f"torn last line: {where(b.file, b.line)} (skipped)")
    if inp.malformed:
        notes.append(f"{len(inp.malformed)} malformed line(s), skipped:")
        notes.extend(f"  {where(b.file, b.line)}: {esc(b.reason)}" for b in inp.malformed[:_MAX_NOTES])
        if len(inp.malformed) > _MAX_NOTES:
            notes.append(f"  … and {len(inp.malformed) - _MAX_NOTES} more (see --format json)")
    for f, reason in inp.skipped:
        notes.append(f"skipped {where(f)}: {esc(reason)}")
    # the error names its file already (`cannot read …`), in words of its own
    notes.extend(f"input error: {esc(error)}" for _, error in inp.errors)
    notes.extend(f"left out {where(f)}: the same capture as {where(first)}" for f, first in inp.duplicates)
    notes.extend(
        f"left out {where(f)} lines {a}–{b}: the same capture as {where(first)}" for f, a, b, first in inp.repeated
    )
    notes.extend(
        f"{count} HTTP {'body that does' if count == 1 else 'bodies that do'} not decode with its Content-Encoding"
        f" (read as captured, not classified): first at {where(f, line)}"
        for f, line, count in inp.undecodable
    )
    if inp.lost:
        notes.append(f"the recorders reported {inp.lost} record(s) lost while capturing")
    if inp.verification is not None:
        notes.extend(_verification_notes(inp.verification, where, esc))
    elif inp.chained:
        notes.append(
            f"{inp.chained} of {len(inp.files)} file(s) end with a hash chain's closing record"
            " (not checked here: erascope verify, or analyze --verify)"
        )
    return notes


def _verification_notes(
    check: ChainCheck, where: Callable[..., str], esc: Callable[[str], str]
) -> list[str]:
    """`--verify`: the verdict over the captures checked, then each one not verified with its first
    break, the inputs carrying no chain, and what verify notes besides."""
    checked = sum(check.counts.values())
    verified = check.counts.get("verified", 0)
    others = ", ".join(f"{n} {status}" for status, n in check.counts.items() if status != "verified")
    notes = [
        f"hash chains checked{' with a key' if check.keyed else ''}: {verified} of {checked} capture file(s)"
        f" verified{f' ({others})' if others else ''}"
    ]
    for f in check.files[:_MAX_NOTES]:
        notes.append(f"  {where(f.file)}: {esc(f.status)}: {esc(f.detail)}")
        if f.first is not None:
            line, kind, message = f.first
            notes.append(f"    {where(f.file, line)}: {esc(kind)}: {esc(message)}")
    if len(check.files) > _MAX_NOTES:
        notes.append(f"  … and {len(check.files) - _MAX_NOTES} more (see --format json, or erascope verify)")
    notes.extend(f"  not checked {where(f)}: {esc(why)}" for f, why in check.not_checked[:_MAX_NOTES])
    if len(check.not_checked) > _MAX_NOTES:
        notes.append(f"  … and {len(check.not_checked) - _MAX_NOTES} more not checked (see --format json)")
    notes.extend(f"  note: {esc(note)}" for note in check.notes)
    return notes


def _verification_dict(check: ChainCheck) -> dict[str, Any]:
    return {
        "keyed": check.keyed,
        "counts": check.counts,
        "files": [
            {
                "file": f.file,
                "status": f.status,
                "detail": f.detail,
                "findings": f.findings,
                "first": None if f.first is None else dict(zip(("line", "kind", "message"), f.first, strict=True)),
            }
            for f in check.files
        ],
        "not_checked": [{"file": f, "why": why} for f, why in check.not_checked],
        "notes": check.notes,
    }


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
# Tables are laid out here rather than by rich's Table: a cell never breaks a token (a server key,
# a date, a version, a client name), so when the columns do not fit side by side at their widest
# token, the table stacks instead: the key column (server, client) moves to a line of its own above
# its row, then the last columns move to labelled lines under it ("clients: mcp, …"). Only a token
# wider than the whole line is shortened, in the middle, with a visible `…`.
_GAP: Final = 2
"""Spaces between two table columns."""
_STEP: Final = 2
"""Indentation of a stacked row under its key line."""


@dataclass
class _Row:
    """One table row: a cell per column (lines separated by newlines) with its style, and the lines
    printed above it (group headings such as a server in the clients table)."""

    cells: list[str]
    styles: list[str] = field(default_factory=list)
    headings: list[Text] = field(default_factory=list)

    def style(self, col: int) -> str:
        return self.styles[col] if col < len(self.styles) else ""


def _ellipsized(word: str, width: int) -> str:
    """`word` cut to `width` cells in the middle, the cut marked `…` (both ends tell names apart)."""
    if cell_len(word) <= width:
        return word
    if width <= 1:
        return "…"
    head, tail = width // 2, width - 1 - width // 2
    text = word[:head] + "…" + word[len(word) - tail :]
    while cell_len(text) > width:  # wide characters take two cells
        head, tail = (head - 1, tail) if head > tail else (head, tail - 1)
        text = word[:head] + "…" + word[len(word) - tail :]
    return text


_LATER_PART: Final = "· "
"""What starts a line of a client identity's later parts in a table cell."""


def _identity_cell(identity: str) -> str:
    """A client identity (`analyzer.identity`) a part a line, the later parts marked `·`."""
    first, *rest = identity.split(IDENTITY_SEPARATOR)
    return "\n".join([first, *(_LATER_PART + part for part in rest)])


def _one_line(cell: str) -> str:
    """A cell's lines as one labelled line: its values separated by commas, a client identity's later
    parts (`_identity_cell`'s `·` lines) kept with their identity."""
    values: list[str] = []
    for line in cell.split("\n"):
        if line.startswith(_LATER_PART) and values:
            values[-1] += " " + line
        elif line:
            values.append(line)
    return ", ".join(values)


def _words_wrapped(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` cells, broken only at spaces (explicit newlines kept)."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            word = _ellipsized(word, width)
            if line and cell_len(line) + 1 + cell_len(word) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return lines


def _prose(text: str | Text, width: int, indent: int = 0, hang: int = 4) -> list[Text]:
    """A paragraph wrapped at spaces to `width`, first line at `indent`, the rest at `indent + hang`."""
    from rich.text import Text

    style = text.style if isinstance(text, Text) else ""
    plain = text.plain if isinstance(text, Text) else text
    first = _words_wrapped(plain, max(1, width - indent))
    out = [Text(" " * indent + first[0], style=style)]
    rest = " ".join(first[1:])
    if rest:
        more = _words_wrapped(rest, max(1, width - indent - hang))
        out += [Text(" " * (indent + hang) + line, style=style) for line in more]
    return out


def _token_width(text: str) -> int:
    return max((cell_len(w) for line in text.split("\n") for w in line.split(" ")), default=0)


def _line_width(text: str) -> int:
    return max((cell_len(line) for line in text.split("\n")), default=0)


def _fit(columns: list[int], headers: list[str], rows: list[_Row], room: int) -> list[int] | None:
    """Widths for `columns` within `room` cells, no narrower than any token; None when they cannot fit.

    Each column starts at its widest token and grows towards its widest line, the columns that need
    least first, so as many as possible show each value on one line.
    """
    most = [max(_line_width(headers[c]), *(_line_width(r.cells[c]) for r in rows)) for c in columns]
    # the key column (a server key, a client) whole or not at all: a stdio key is its command by
    # default (`python3 srv.py`), which broken at its spaces reads as two servers
    least = [
        most[i] if c == 0 else max(_token_width(headers[c]), *(_token_width(r.cells[c]) for r in rows))
        for i, c in enumerate(columns)
    ]
    spare = room - sum(least) - _GAP * (len(columns) - 1)
    if spare < 0:
        return None
    widths = list(least)
    for i in sorted(range(len(columns)), key=lambda i: most[i] - least[i]):
        grow = min(spare, most[i] - least[i])
        widths[i] += grow
        spare -= grow
    return widths


def _table_lines(
    title: str,
    headers: list[str],
    rows: list[_Row],
    width: int,
    *,
    right: frozenset[int] = frozenset(),
    indent: int = 0,
    show_header: bool = True,
) -> list[Text]:
    """`rows` laid out in `width` columns (see the section comment): the title, the header and its
    rule, then each row's headings, its line(s) and its labelled lines."""
    from rich.text import Text

    if not rows:
        return []
    stacked = 0  # leading key column moved above its row (0 or 1)
    labelled: list[int] = []  # trailing columns moved to "header: value" lines
    while True:
        shown = [c for c in range(stacked, len(headers)) if c not in labelled]
        at = indent + _STEP * stacked
        widths = _fit(shown, headers, rows, width - at)
        if widths is not None or len(shown) == 1:
            break
        if not stacked and len(shown) > 1:
            stacked = 1
        else:
            labelled.insert(0, shown[-1])
    if widths is None:  # one column, and a token wider than the line: shortened when wrapped
        widths = [width - at]

    def line(cells: list[str], styles: list[str], bold: bool = False) -> Text:
        out = Text(" " * at)
        for i, (c, text) in enumerate(zip(shown, cells, strict=True)):
            pad = " " * (widths[i] - cell_len(text))
            cell = pad + text if c in right else text + pad
            out.append(cell, style=("bold " if bold else "") + styles[i])
            if i < len(shown) - 1:
                out.append(" " * _GAP)
        out.rstrip()
        return out

    out: list[Text] = []
    if title:
        out.append(Text(title, style="bold"))
    if show_header:
        wrapped = [_words_wrapped(headers[c], w) for c, w in zip(shown, widths, strict=True)]
        height = max(map(len, wrapped))
        for n in range(height):  # headers sit on their rule
            cells = [h[n - (height - len(h))] if n >= height - len(h) else "" for h in wrapped]
            out.append(line(cells, [""] * len(shown), bold=True))
        out.append(Text(" " * at + "─" * (sum(widths) + _GAP * (len(widths) - 1))))
    for row in rows:
        out.extend(row.headings)
        if stacked:
            key = _words_wrapped(row.cells[0], width - at + _STEP)
            out += [Text(" " * (at - _STEP) + k, style=row.style(0)) for k in key]
        wrapped = [_words_wrapped(row.cells[c], w) for c, w in zip(shown, widths, strict=True)]
        styles = [row.style(c) for c in shown]
        for n in range(max(map(len, wrapped))):
            out.append(line([w[n] if n < len(w) else "" for w in wrapped], styles))
        for c in labelled:
            out += _prose(f"{headers[c]}: {_one_line(row.cells[c]) or '-'}", width, indent=at)
    return out


def _server_cell(server: str | None) -> str:
    """A server key as the text report shows it: traffic without a key (None, or empty) as `-`, as
    markdown shows it."""
    return server or "-"


def _servers_lines(analysis: Analysis, width: int) -> list[Text]:
    headers = ["server", "transport", "era", "modern", "legacy", "versions", "probes", "clients"]
    rows = [
        _Row(
            cells=[
                _server_cell(v.server),
                v.transport,
                v.era,
                v.modern_support,
                v.legacy_support,
                "\n".join(v.versions) or "-",
                "\n".join(_outcomes(v.probe_outcomes, short=True)) or "-",
                "\n".join(_identity_cell(c) for c in v.clients) or "-",
            ],
            styles=[_ERA_STYLE.get(v.era, ""), "", _ERA_STYLE.get(v.era, "")],
        )
        for v in analysis.servers
    ]
    return _table_lines("Servers", headers, rows, width)


def _why_lines(analysis: Analysis, refs: FileRefs, days: list[str], width: int) -> list[Text]:
    rows = [
        _Row(cells=[_server_cell(v.server), _why(v, refs, days)], styles=[_ERA_STYLE.get(v.era, "")])
        for v in analysis.servers
    ]
    return _table_lines("", ["server", "why"], rows, width, show_header=False)


def _legend_lines(analysis: Analysis, width: int) -> list[Text]:
    """The era labels this report shows, each with what it means; then the support values."""
    shown = {v.era for v in analysis.servers}
    rows = [_Row([era, text], [_ERA_STYLE.get(era, "")]) for era, text in ERA_LEGEND.items() if era in shown]
    lines = _table_lines("Eras", ["era", "meaning"], rows, width, indent=2, show_header=False)
    return lines + _prose(_SUPPORT_LEGEND, width, indent=2, hang=2) if lines else []


def _finding_lines(f: Finding, refs: FileRefs, days: list[str], width: int) -> list[Text]:
    from rich.text import Text

    head = Text.assemble(
        (f.severity.value.upper(), _SEVERITY_STYLE.get(f.severity.value, "")),
        "  ",
        (f.rule, "bold"),
        f"  server {_server_cell(f.server)}",
        f"  client {f.client}" if f.client else "",
        f"  {_when(f.ts, days)}",
    )
    cited, more = _cited(f.evidence)
    evidence = "evidence: " + (refs.grouped(cited) or "-") + (f" … {more} more (--format json)" if more else "")
    # the head keeps its styles when it fits (it nearly always does); wrapped, it is plain
    lines = [head] if cell_len(head.plain) <= width else _prose(head.plain, width)
    return lines + _prose(f.message, width, indent=4, hang=0) + _prose(evidence, width, indent=4, hang=4)


def _clients_lines(clients: pl.DataFrame, eras: dict[str, str], width: int) -> list[Text]:
    """Clients under a heading line per server (a server column would not fit)."""
    from rich.text import Text

    # the identity's parts are in its text (`client`); json has them apart
    shown = [c for c in clients.columns if c not in ("server", "server_era", "identity")]
    headers = [_CLIENT_HEADERS.get(c, c) for c in shown]
    numeric = {name for name, dtype in clients.schema.items() if dtype.is_numeric()}
    rows: list[_Row] = []
    server = None
    for record in clients.to_dicts():
        cells = {c: _cell(record[c]) for c in shown}
        if "outcomes" in cells:
            cells["outcomes"] = "\n".join(_short(o) for o in cells["outcomes"].split(", "))
        if "acted_as" in cells:  # `legacy+modern`: one era a line, like the other lists
            cells["acted_as"] = cells["acted_as"].replace("+", "\n")
        if "client" in cells:
            cells["client"] = _identity_cell(cells["client"])
        row = _Row(cells=[cells[c] for c in shown])
        if record.get("server") != server:
            server = record.get("server")
            era = eras.get(str(server), "?")
            heading = Text.assemble((str(server), "bold"), " ", (f"({era})", _ERA_STYLE.get(era, "")))
            row.headings = [heading] if cell_len(heading.plain) <= width else _prose(heading.plain, width)
        rows.append(row)
    right = frozenset(i for i, c in enumerate(shown) if c in numeric)
    return _table_lines("Clients", headers, rows, width, right=right, indent=_STEP)


def _legend(refs: FileRefs, width: int) -> list[str]:
    """`[n] name` under its directory: a full path with its number rarely fits in 100 columns."""
    by_dir: dict[str, list[tuple[int, str]]] = {}
    for path, n in refs.numbers.items():
        head, name = os.path.split(path)
        by_dir.setdefault(head, []).append((n, name))
    lines: list[str] = []
    for head, files in by_dir.items():
        if head:
            lines.append(_ellipsized(os.path.join(head, ""), width))
        for n, name in files:
            number = f"  [{n}] "
            lines.append(number + _ellipsized(name, width - cell_len(number)))
    return lines


def render_text(analysis: Analysis, *, width: int | None = None, color: bool = False) -> str:
    """Summary, servers, era legend, why each verdict, findings, clients, totals, input notes, files.

    `width`: columns to render at; None means the terminal's width (`COLUMNS`), at most 120, and
    100 when the output is not a terminal.
    """
    from rich.console import Console
    from rich.text import Text

    if width is None:
        width = min(shutil.get_terminal_size((100, 24)).columns, _MAX_WIDTH)
    analysis = _shown(analysis)
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color, highlight=False)
    refs = FileRefs(analysis.inputs.units)
    days = _days(analysis)
    lines: list[Text] = _prose(Text("erascope: ") + Text(_summary(analysis)), width, hang=0)
    lines[0].stylize("bold", 0, len("erascope:"))
    lines += [Text(), *_servers_lines(analysis, width), Text()]
    if analysis.servers:
        lines += [*_legend_lines(analysis, width), Text()]
    lines += [Text("Why each verdict" + _times_note(days), style="bold")]
    lines += [*_why_lines(analysis, refs, days, width), Text()]
    if analysis.findings:
        lines.append(Text(f"Findings: {len(analysis.findings)}" + _times_note(days), style="bold"))
        for f in _sorted(analysis.findings):
            lines += [*_finding_lines(f, refs, days, width), Text()]
    else:
        lines += [Text("No findings."), Text()]
    if analysis.clients is not None and analysis.clients.height:
        lines += _clients_lines(analysis.clients, {v.server: v.era for v in analysis.servers}, width)
    lines += [Text(), *_prose(_totals_line(analysis), width, hang=0)]
    for note in _input_notes(analysis, refs=refs):
        lines += _prose(note.lstrip(" "), width, indent=len(note) - len(note.lstrip(" ")))
    if refs.numbers:
        lines += [Text(), Text("Files", style="bold"), *(Text(line) for line in _legend(refs, width))]
    for line in lines:
        console.print(line, no_wrap=True, overflow="ignore", crop=False)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


# --- markdown ------------------------------------------------------------------------------------
_MD_ESCAPES: Final = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"} | {c: "\\" + c for c in "\\`*_[]|~"}
_MD_SPECIAL: Final = re.compile("[" + re.escape("".join(_MD_ESCAPES)) + "]")


_MD_AUTOLINKS: Final = re.compile(r"(?i)(?<=www)\.|:(?=//)")
"""What GitHub-flavoured markdown links in plain text (cmark-gfm's autolink extension): `www.`,
`scheme://` and e-mail addresses (`mailto:`, `xmpp:`). A backslash before the `.` or `:` stops it;
an address's `@` is set in code (`_MD_LIVE`)."""
_MD_LIVE: Final = re.compile(
    r"(?i)@|\$|#[0-9]+|gh-[0-9]+|/(?:issues|pull|discussions)/[0-9]+"
    r"|(?::(?![0-9]{1,2}:)[0-9a-z_+-]+)+:"
    r"|(?<![0-9a-z])[0-9a-f]{7,40}(?![0-9a-z])"
)
"""What GitHub acts on in the rendered HTML, in every text node outside `<a>`, `<code>` and `<pre>`
(docs.github.com, "Autolinked references and URLs"), after backslash escapes and entities are
resolved (`\\#26` and `&#35;26` are links), so only code stops it:

- an `@` mention that notifies an account or a team, `user@sha` and `owner/repo@sha` commits;
- issue, pull request and discussion references `#26`, `GH-26`, `owner#26`, `owner/repo#26` (and
  `/issues/26`, `/pull/26`, `/discussions/26`, as GitHub Desktop links them);
- emoji shortcodes (`:warning:`, `:+1:`; the emoji filter skips only `pre`, `code` and `tt`), also
  one that follows an unknown name (`:foo:warning:`), hence a run of `:name:`s. Every gemoji name is
  made of these characters, none of one or two digits: `12:30:45` is left as it is;
- a commit SHA, 7 to 40 hex digits (digits alone too, `1234567`) as a word: a link when the
  repository the report is pasted in has such a commit, which whoever wrote the capture can make
  (a fork's commits are reachable from its parent). Ordinary long numbers are set in code too;
- math between dollar signs, `$…$`, `$$…$$` and ``$`…`$`` (a ```` ```math ```` block cannot start:
  backticks are escaped). This one is found while the markdown is parsed, left to right like any
  inline, so it never starts inside a code span; GitHub's own way to write a dollar beside math is
  `<span>$</span>`, not `\\$`, and whether a `$` pairs depends on the rest of the line, so every
  `$` is set in code, a lone `$5` too."""


def _md_live_spans(text: str) -> list[tuple[int, int]]:
    """Where `_md_text` sets `text` in code (`_MD_LIVE`): one span for a run, as two side by side
    would read as one span holding two backticks; a span that would start or end inside a word takes
    the whole word, since its edge starts a text node where GitHub looks for a SHA (`#1deadbeef`)."""

    def in_word(at: int) -> bool:  # `text[at - 1]` and `text[at]` are letters or digits of one word
        pair = text[max(at - 1, 0) : at + 1]
        return len(pair) == 2 and pair.isascii() and pair.isalnum()

    spans: list[tuple[int, int]] = []
    for m in _MD_LIVE.finditer(text):
        start, end = m.span()
        while in_word(start):
            start -= 1
        while in_word(end):
            end += 1
        if spans and start <= spans[-1][1]:
            start = min(start, spans.pop()[0])
        spans.append((start, end))
    return spans


def _md_plain(text: str) -> str:
    """Capture text outside `_md_text`'s code spans: escaped, so it renders as that text."""
    text = _MD_SPECIAL.sub(lambda m: _MD_ESCAPES[m[0]], text)
    return _MD_AUTOLINKS.sub(lambda m: "\\" + m[0], text)


def _md_text(text: str) -> str:
    """Capture text as markdown that renders as exactly that text: HTML-significant characters as
    entities, markdown punctuation backslash-escaped (`|` too, so table cells stay whole), and
    nothing GitHub would make a link, a mention, a reference, an emoji or math: the `.` of `www.`
    and the `:` of `://` escaped (`_MD_AUTOLINKS`), what GitHub finds whatever the escapes (and
    every `$`) in code (`_MD_LIVE`)."""
    out: list[str] = []
    at = 0
    for start, end in _md_live_spans(text):
        out += [_md_plain(text[at:start]), _md_code(text[start:end])]
        at = end
    out.append(_md_plain(text[at:]))
    return "".join(out)


def _md_code(text: str, *, table: bool = False) -> str:
    """Capture text as a code span: nothing inside renders as markdown or HTML. The fence is one
    backtick longer than the longest run inside; `table`: pipes escaped (GFM reads `\\|` in a
    cell's code span as `|`)."""
    if not text:
        return "-"
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    if text[0] in "` " or text[-1] in "` ":
        text = f" {text} "  # one space each side is stripped again by the renderer
    return fence + (text.replace("|", "\\|") if table else text) + fence


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """A GFM table of cells that are already markdown."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out.extend("| " + " | ".join(cell or "-" for cell in row) + " |" for row in rows)
    return out


def _md_client_cell(column: str, value: object) -> str:
    text = _cell(value)
    return _md_code(text, table=True) if column in ("server", "client") and text != "-" else _md_text(text)


def render_markdown(analysis: Analysis) -> str:
    """A markdown document for postmortems, in the text report's order, with a files legend at the end."""
    analysis = _shown(analysis)
    refs = FileRefs(analysis.inputs.units)
    days = _days(analysis)
    lines = ["# erascope report", "", _summary(analysis), "", "## Servers", ""]
    lines += _md_table(
        ["server", "transport", "era", "modern", "legacy", "versions", "probes", "clients"],
        [
            [
                _md_code(v.server, table=True),
                _md_text(v.transport),
                f"**{v.era}**",
                v.modern_support,
                v.legacy_support,
                _md_text(", ".join(v.versions)),
                _md_text(", ".join(_outcomes(v.probe_outcomes))),
                ", ".join(_md_code(c, table=True) for c in v.clients),
            ]
            for v in analysis.servers
        ],
    )
    shown = {v.era for v in analysis.servers}
    if shown:
        lines += ["", "### Eras", ""]
        lines += [f"- **{era}**: {text}" for era, text in ERA_LEGEND.items() if era in shown]
        lines.append("- " + re.sub(r"\b(yes|no|unknown|mixed)\b", r"`\1`", _SUPPORT_LEGEND, count=0))
    lines += ["", "### Why each verdict" + _times_note(days), ""]
    lines += [f"- {_md_code(v.server)} **{v.era}**: {_why(v, refs, days, _md_text)}" for v in analysis.servers]
    lines += ["", "## Findings" + _times_note(days), ""]
    if not analysis.findings:
        lines.append("No findings.")
    for f in _sorted(analysis.findings):
        who = f", client {_md_code(f.client)}" if f.client else ""
        lines.append(
            f"- **{f.severity.value}** `{f.rule}` on {_md_code(f.server)}{who}, {_when(f.ts, days)}: "
            + _md_text(f.message)
        )
        cited, more = _cited(f.evidence)
        evidence = "; ".join(f"{refs.loc(e)} {_md_text(e.note)}".rstrip() for e in cited)
        lines.append(f"  - evidence: {evidence}" + (f"; … {more} more (see --format json)" if more else ""))
    if analysis.clients is not None and analysis.clients.height:
        lines += ["", "## Clients", ""]
        table = analysis.clients.drop("identity", strict=False)
        columns = table.columns
        rows = [[_md_client_cell(c, x) for c, x in zip(columns, row, strict=True)] for row in table.rows()]
        lines += _md_table(list(columns), rows)
    lines += ["", "## Inputs", "", _totals_line(analysis)]
    notes = _input_notes(analysis, _md_text)
    if notes:
        lines.append("")
        lines += [f"  - {n.strip()}" if n.startswith("  ") else f"- {n}" for n in notes]
    if refs.numbers:
        lines += ["", "## Files", ""]
        lines += [f"- [{n}] {_md_code(path)}" for path, n in refs.numbers.items()]
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
