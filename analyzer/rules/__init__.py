"""The rulebook: one explicit registry of client-behaviour rules (filled by the findings work)."""

from __future__ import annotations

from typing import Any

from analyzer.findings import Finding


def run_rules(analysis: Any, options: dict[str, Any] | None = None) -> list[Finding]:
    """All findings for an analysis; empty until rules are registered."""
    return []
