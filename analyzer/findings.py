"""Findings: what the rules report. Small, comparable dataclasses (tests compare lists directly)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Severity(Enum):
    """How bad a finding is; `--fail-on` gates CI on it."""

    INFO = "info"
    """Worth knowing; the client coped (e.g. the documented recovery from a crashing probe)."""
    WARNING = "warning"
    """Costs time or robustness (storms, timeouts, protocol hygiene)."""
    ERROR = "error"
    """The client drew a wrong conclusion or cannot succeed (misreads, retries that must fail)."""

    @property
    def rank(self) -> int:
        """0 info, 1 warning, 2 error: compare severities by rank."""
        return {"info": 0, "warning": 1, "error": 2}[self.value]


@dataclass(frozen=True, order=True)
class Evidence:
    """A capture line that proves a finding (or decides a verdict)."""

    file: str
    line: int
    note: str = ""


@dataclass(frozen=True)
class Finding:
    rule: str
    """Stable rule id, part of the report contract (e.g. `probe-storm`)."""
    severity: Severity
    server: str
    message: str
    evidence: tuple[Evidence, ...] = ()
    client: str | None = None
    ts: float | None = None
    """When it happened (first evidence), seconds since the epoch; used for sorting."""
    details: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """Rule-specific numbers (counts, rates, versions) for the json report."""
