"""Every command is documented: in the README, and with an example in its own --help."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from analyzer.cli import app

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = [["record", "stdio"], ["record", "http"], ["analyze"], ["rules"], ["compact"], ["watch"], ["verify"]]


def _registered() -> list[list[str]]:
    import typer.main

    group = typer.main.get_command(app)
    found: list[list[str]] = []
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        subs = getattr(cmd, "commands", None)
        found.extend([[name, sub] for sub in subs] if subs else [[name]])
    return found


def test_the_list_below_is_every_registered_command() -> None:
    assert sorted(_registered()) == sorted(COMMANDS)


@pytest.mark.parametrize("words", COMMANDS, ids=lambda w: " ".join(w))
def test_command_is_in_the_readme(words: list[str]) -> None:
    assert f"erascope {' '.join(words)}" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("words", COMMANDS, ids=lambda w: " ".join(w))
def test_command_help_has_an_example(words: list[str]) -> None:
    result = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert f"erascope {' '.join(words)}" in result.stdout, result.stdout


def test_readme_gives_the_two_fresh_clone_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make report" in readme and "make test" in readme
    makefile = (ROOT / "Makefile").read_text()
    assert "erascope analyze captures/" in makefile.split("report:", 1)[1].split("\n\n", 1)[0]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("group", [[], ["record"]], ids=["erascope", "erascope record"])
def test_each_command_is_summed_up_in_one_line_of_the_list(group: list[str]) -> None:
    # The list shows a docstring's first paragraph as written: a line break in it breaks the row.
    result = CliRunner().invoke(app, [*group, "--help"], env={"COLUMNS": "200"})
    rows = result.stdout.split("Commands", 1)[1].splitlines()[1:-1]
    assert rows and all(not row.startswith("│  ") for row in rows), "\n".join(rows)
