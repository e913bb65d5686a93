"""Baselines: accepted findings, so CI fails only on new findings — and on baselined ones that vanished.

A baseline is a JSON file (`erascope-baseline/1`) listing accepted findings by rule and server:

    {
      "format": "erascope-baseline/1",
      "accepted": [
        {"rule": "probe-storm", "server": "weather", "severity": "warning", "count": 2,
         "note": "spawn-per-call host, fix tracked in ISSUE-12"}
      ]
    }

`rule` and `server` are the key; `severity`, `count` and `note` are informational (kept when the file
is rewritten, ignored when comparing). One entry accepts every finding with that rule and server.
`server` is null for findings on records without a server key (captures/FORMAT.md: such records
are still read, and `analyze` reports their findings with a null server).
A baselined entry without any matching finding is *stale*: the problem was fixed (or the capture no
longer shows it), and the baseline should be updated so it cannot hide a regression later.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from addon.errors import ErascopeError
from analyzer.findings import Finding, Severity
from analyzer.output import write_atomic
from analyzer.report import visible
from analyzer.terminal import json_visible

BASELINE_FORMAT: Final = "erascope-baseline/1"
MAX_BASELINE_BYTES: Final = 64 << 20
"""A baseline holds an entry per (rule, server): megabytes at most, even for a large fleet."""


@dataclass(frozen=True, order=True)
class BaselineEntry:
    """One accepted (rule, server) pair."""

    rule: str
    server: str | None
    """None: the findings of records without a server key."""
    note: str = field(default="", compare=False)


@dataclass
class BaselineResult:
    """The comparison of findings with a baseline."""

    new: list[Finding]
    """Findings whose (rule, server) is not in the baseline (and at or above the severity gate)."""
    accepted: list[Finding]
    """Findings the baseline accepts."""
    stale: list[BaselineEntry]
    """Baseline entries that no finding matched any more."""

    @property
    def failed(self) -> bool:
        """True when CI should fail: a new finding, or a stale baseline entry."""
        return bool(self.new or self.stale)

    def messages(self) -> list[str]:
        """Human-readable lines explaining a failure (empty when nothing failed); server keys come from
        captures (and the baseline file), so their control characters are shown, not sent."""
        lines = [
            f"new finding not in the baseline: {f.severity.value} {f.rule} on {_shown(f.server)}" for f in self.new
        ]
        lines += [
            f"stale baseline entry: {visible(e.rule)} on {_shown(e.server)} no longer occurs; remove it (or rewrite"
            " the baseline)"
            for e in self.stale
        ]
        return lines


def _shown(server: str | None) -> str:
    """A server key as messages show it; records without one are `-`, as in the text report."""
    return "-" if server is None else visible(server)


def _order(key: tuple[str, str | None]) -> tuple[str, bool, str]:
    """Sort key of a (rule, server) pair: a null server (records without a key) first."""
    rule, server = key
    return rule, server is not None, server or ""


def load_baseline(path: str | Path) -> list[BaselineEntry]:
    """Read a baseline file; a missing, unparseable or wrong-format file is an `ErascopeError`."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            text = f.read(MAX_BASELINE_BYTES + 1)  # `/dev/zero`, or a huge file, is not read whole
        if len(text) > MAX_BASELINE_BYTES:
            raise ErascopeError(f"baseline {p}: larger than {MAX_BASELINE_BYTES} bytes, which no baseline is")
        data = orjson.loads(text)
    except FileNotFoundError:
        raise ErascopeError(f"baseline {p}: no such file (create one with --write-baseline)") from None
    except OSError as exc:
        raise ErascopeError(f"baseline {p}: cannot read: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ErascopeError(f"baseline {p}: not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ErascopeError(f"baseline {p}: expected format {BASELINE_FORMAT!r}, found {found!r}")
    accepted = data.get("accepted")
    if not isinstance(accepted, list):
        raise ErascopeError(f"baseline {p}: 'accepted' must be a list")
    entries: list[BaselineEntry] = []
    for i, item in enumerate(accepted):
        # a null server is what --write-baseline writes for findings on records without a server key
        if not (
            isinstance(item, dict)
            and isinstance(item.get("rule"), str)
            and "server" in item
            and (item["server"] is None or isinstance(item["server"], str))
        ):
            raise ErascopeError(f"baseline {p}: accepted[{i}] needs string 'rule' and 'server' (string or null)")
        note = item.get("note")
        entries.append(BaselineEntry(item["rule"], item["server"], note if isinstance(note, str) else ""))
    return entries


def baseline_document(findings: list[Finding], previous: list[BaselineEntry] | None = None) -> dict[str, Any]:
    """The baseline document accepting `findings`; notes of `previous` entries with the same key are kept."""
    notes = {(e.rule, e.server): e.note for e in previous or []}
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.rule, f.server), []).append(f)
    accepted = []
    for (rule, server), group in sorted(groups.items(), key=lambda item: _order(item[0])):
        worst = max((f.severity for f in group), key=lambda s: s.rank)
        entry: dict[str, Any] = {"rule": rule, "server": server, "severity": worst.value, "count": len(group)}
        if notes.get((rule, server)):
            entry["note"] = notes[(rule, server)]
        accepted.append(entry)
    return {"format": BASELINE_FORMAT, "accepted": accepted}


def write_baseline(findings: list[Finding], path: str | Path) -> int:
    """Write a baseline accepting every finding (keeping notes of an existing file); returns the entry count."""
    p = Path(path)
    previous = load_baseline(p) if p.exists() else None
    doc = baseline_document(findings, previous)
    # as the json report: C1 controls, bidi controls and line separators escaped (JSON writers leave
    # them raw), so a baseline shown in a terminal or a diff under review acts on nothing a server key says
    text = json_visible(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    write_atomic(p, text.encode() + b"\n")
    return len(doc["accepted"])


def compare(
    findings: list[Finding],
    path: str | Path,
    fail_on: Severity | str | None = None,
    scope: Collection[str | None] | None = None,
) -> BaselineResult:
    """Split findings into new and accepted, and list stale baseline entries.

    With `fail_on`, only new findings at or above that severity count as new (the others are
    neither new nor accepted: they do not gate). Stale entries are judged against all findings.
    With `scope` (the server keys a selection, `--server`/`--since`/`--until`, analyzed), only
    entries of those servers can be stale: the others' traffic was not looked at, so nothing says
    their findings no longer occur.
    """
    entries = load_baseline(path)
    keys = {(e.rule, e.server) for e in entries}
    gate = Severity(fail_on) if isinstance(fail_on, str) else fail_on
    new = [
        f
        for f in findings
        if (f.rule, f.server) not in keys and (gate is None or f.severity.rank >= gate.rank)
    ]
    accepted = [f for f in findings if (f.rule, f.server) in keys]
    seen = {(f.rule, f.server) for f in findings}
    stale = sorted(
        {e for e in entries if (e.rule, e.server) not in seen and (scope is None or e.server in scope)},
        key=lambda e: _order((e.rule, e.server)),
    )
    return BaselineResult(new=new, accepted=accepted, stale=stale)
