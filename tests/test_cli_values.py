"""The plain coercion of command-line values (analyzer/cli_values.py) gives what typer's own gives.

Every parameter of every command, with values of the kinds users type, good and bad: the same
value, or a `BadParameter` with the same message; a float typer takes that is not finite or beyond
±1e9 is refused instead, and so is an empty path (typer's `Path(".")`).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import typer
from typer._click import Context
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param

from addon.errors import EMPTY_PATH
from analyzer.cli import app
from analyzer.cli_values import PlainArgument, PlainOption, runtime_param
from analyzer.numbers import IN_RANGE, in_range

_SAMPLES: dict[Any, tuple[Any, ...]] = {
    str: ("", "x", "captures/", "s3://bucket/a b", "ünï", 3),
    bool: (True, False, "yes", "0"),
    int: (0, 1, 7, "1", "8", "0", "-3", "007", "+3", "1_0", " 2 ", "x", "1.0", 2.5, "9" * 120),
    float: (10.0, 3, "10", "0.5", "-1", "1e3", "1e9", "-1e9", "inf", "-inf", "nan", "1e10", "abc", "", " 2 ", "1_0"),
    Path: ("", "a", "a//b", "~/x", "/tmp", Path("p")),
}


def _commands() -> list[tuple[str, Any]]:
    group = typer.main.get_command(app)
    ctx = Context(group)
    out = [("erascope", group)]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        out.append((name, command))
        for sub_name, sub in getattr(command, "commands", {}).items():
            out.append((f"{name} {sub_name}", sub))
    assert ctx.command is group
    return out


def _params() -> list[tuple[str, Any, Any]]:
    rows = []
    for name, command in _commands():
        ctx = Context(command)
        for param in command.get_params(ctx):
            if hasattr(param, "type_descriptor"):
                rows.append((f"{name} {param.name}", command, param))
    return rows


def _samples(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) is list:
        item = get_args(annotation)[0]
        return (list(_samples(item)[:3]), [], ("a", "b"), "single")
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return (*annotation, *(m.value for m in annotation), *(m.value.upper() for m in annotation), "nope", "")
    return _SAMPLES.get(annotation, ("x",))


def _outcome(coerce: Any, value: Any, param: Any, ctx: Context) -> tuple[str, Any]:
    try:
        return "value", coerce(value, param=param, ctx=ctx)
    except BadParameter as exc:
        return "error", exc.format_message()


@pytest.mark.parametrize(("name", "command", "param"), _params(), ids=lambda v: v if isinstance(v, str) else "")
def test_plain_coercion_matches_typers(name: str, command: Any, param: Any) -> None:
    assert isinstance(param, (PlainOption, PlainArgument)), f"{name}: the commands' parameters coerce plainly"
    descriptor = param.type_descriptor
    ctx = Context(command)
    plain, typers = runtime_param(descriptor), build_runtime_param(descriptor)
    for value in _samples(descriptor.annotation):
        got = _outcome(plain.coerce, value, param, ctx)
        want = _outcome(typers.coerce, value, param, ctx)
        if want[0] == "value" and isinstance(want[1], float) and not in_range(want[1]):
            # the one departure: typer takes these, erascope's options cannot use them
            want = ("error", BadParameter(f"{want[1]!r} is not {IN_RANGE}.", ctx=ctx, param=param).format_message())
        if want == ("value", Path(".")) and value == "":
            # the other: typer takes "" as the current directory, which an unset variable must not name
            want = ("error", BadParameter(EMPTY_PATH, ctx=ctx, param=param).format_message())
        assert repr(got) == repr(want), f"{name} {value!r}"  # repr: nan is nan, 1 is not 1.0
        assert type(got[1]) is type(want[1]), f"{name} {value!r}"


def test_every_parameter_is_taken_plainly() -> None:
    """Every command's parameters have a plain coercion, so no run builds a pydantic adapter for a good value."""
    kinds = {name: type(runtime_param(param.type_descriptor)).__name__ for name, _command, param in _params()}
    assert "analyze paths" in kinds
    assert {name: kind for name, kind in kinds.items() if kind != "_PlainParam"} == {}
