"""Rule thresholds: one dataclass, every field documented with its default and why."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from addon.errors import ErascopeError
from analyzer.numbers import IN_RANGE, in_range


@dataclass(frozen=True)
class RuleOptions:
    """Thresholds the rules use. Defaults suit interactive MCP hosts; CI may tighten them."""

    storm_min_probes: int = 5
    """probe-storm: a client must probe a server at least this often before it can be a storm."""
    storm_probes_per_verdict: float = 5.0
    """probe-storm: probes per distinct answer run (verdict change + 1) at or above this count."""
    storm_window_s: float = 60.0
    """probe-storm: the time window for the rate test."""
    storm_window_probes: int = 10
    """probe-storm: this many probes of one server by one client inside one window is a storm."""
    storm_probes_per_request: float = 0.3
    """probe-storm: probes per real request (tools/call, …) at or above this is a storm: a probe for every
    three real requests or fewer is what spawn-per-call hosts (tools/list + tools/call per spawn) produce."""
    cost_horizon_s: float = 30.0
    """Probe cost: when the probe's connection carries no real request, the client's next real request
    within this many seconds counts as the one the probe delayed (throwaway sibling processes)."""
    timeout_min_wait_s: float = 1.0
    """probe-timeout: an unanswered probe the client abandoned sooner than this is not a timeout (the
    connection ended, or the client gave up, for another reason)."""
    max_retries: int = 1
    """retry-loop: more consecutive re-probes after `unsupported-version` than this is a loop."""
    stale_repeats: int = 2
    """stale-era: refused requests in a row (without a re-probe) before the client counts as stale."""
    split_window_s: float = 60.0
    """rollout-split: answers of one server inside one window of this length are compared; the windows
    start every half window, so answers less than half a window apart are always compared, and up to a
    whole window apart when they fall in one."""
    max_evidence: int = 10
    """Evidence lines kept per finding (the total is in the finding's details)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            wants_int = f.type in (int, "int")
            if isinstance(value, bool) or not isinstance(value, int if wants_int else (int, float)):
                kind = "an integer" if wants_int else "a number"
                raise ErascopeError(f"rule option {f.name} must be {kind}, got {value!r}")
            if not in_range(value):
                raise ErascopeError(f"rule option {f.name} must be {IN_RANGE}, got {value!r}")
            if value < 0:
                raise ErascopeError(f"rule option {f.name} must not be negative, got {value!r}")
            # windows and horizons of zero length would silently disable their rules
            if f.name.endswith("_s") and f.name != "timeout_min_wait_s" and value == 0:
                raise ErascopeError(f"rule option {f.name} must be positive, got {value!r}")

    @classmethod
    def from_mapping(cls, values: dict[str, Any] | None) -> RuleOptions:
        """Options from a plain mapping (CLI, config); unknown keys are an error, not ignored."""
        if not values:
            return cls()
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ErascopeError(f"unknown rule option(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return cls(**values)


def option_docs() -> list[tuple[str, Any, str]]:
    """(name, default, description) for every option, read from the field docstrings in this file."""
    import ast
    import inspect
    import itertools

    tree = ast.parse(inspect.getsource(RuleOptions))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for prev, node in itertools.pairwise(body):
        if (
            isinstance(prev, ast.AnnAssign)
            and isinstance(prev.target, ast.Name)
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
        ):
            docs[prev.target.id] = " ".join(str(node.value.value).split())
    defaults = RuleOptions()
    return [(f.name, getattr(defaults, f.name), docs.get(f.name, "")) for f in fields(RuleOptions)]


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """`["storm_min_probes=3", …]` → `{"storm_min_probes": 3}`, typed by the `RuleOptions` field.

    Unknown names and values of the wrong type are an `ErascopeError` naming the option.
    """
    types = {f.name: f.type for f in fields(RuleOptions)}
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            raise ErascopeError(f"rule option {item!r}: expected NAME=VALUE")
        if name not in types:
            raise ErascopeError(f"unknown rule option {name!r} (known: {', '.join(sorted(types))})")
        convert = int if types[name] in (int, "int") else float
        try:
            out[name] = convert(value)
        except ValueError:
            raise ErascopeError(f"rule option {name}: {value!r} is not a valid {convert.__name__}") from None
    return out
