"""What a rule is: a stable id, a severity, a finder that returns one row per finding, and its docs.

A rule's docstring has fixed sections (`What it flags:`, `Why it matters:`, `Example:`); the CLI and
the README render them, so the documentation cannot drift from the code.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from analyzer.findings import Finding, Severity
from analyzer.rules.context import RuleContext
from analyzer.rules.frames import emit

SECTIONS: Final = ("What it flags", "Why it matters", "Example")

Finder = Callable[[RuleContext], pl.DataFrame]
Formatter = Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Rule:
    """One registered rule."""

    id: str
    severity: Severity
    find: Finder
    message: Formatter

    def run(self, ctx: RuleContext) -> list[Finding]:
        """The rule's findings for one analysis."""
        return emit(
            self.find(ctx),
            rule=self.id,
            severity=self.severity,
            message=self.message,
            max_evidence=ctx.options.max_evidence,
        )

    @property
    def summary(self) -> str:
        """The docstring's first line."""
        return (inspect.getdoc(self.find) or "").split("\n", 1)[0].strip()

    def sections(self) -> dict[str, str]:
        """The fixed docstring sections, in order; a missing section is an empty string."""
        doc = inspect.getdoc(self.find) or ""
        out = dict.fromkeys(SECTIONS, "")
        pattern = re.compile(r"^(" + "|".join(map(re.escape, SECTIONS)) + r"):\s*$", re.MULTILINE)
        parts = pattern.split(doc)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            out[name] = inspect.cleandoc(body)
        return out


def rule(rule_id: str, severity: Severity, message: Formatter) -> Callable[[Finder], Rule]:
    """Declare a rule; the decorated function's docstring is its documentation."""

    def wrap(find: Finder) -> Rule:
        return Rule(rule_id, severity, find, message)

    return wrap
