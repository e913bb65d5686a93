"""Every command is documented: in the README, and with an example in its own --help."""

from __future__ import annotations

import itertools
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


def _help_text(words: list[str], columns: int) -> list[str]:
    """The lines of a command's --help above its option panels, as a terminal of `columns` shows them."""
    result = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0
    return [line.rstrip() for line in result.stdout.split("╭", 1)[0].splitlines()]


def _prose(line: str) -> bool:
    return line.startswith(" ") and not line.startswith("  ")  # an example's next lines are indented


@pytest.mark.parametrize("words", COMMANDS, ids=lambda w: " ".join(w))
def test_help_prose_fills_an_80_column_terminal(words: list[str]) -> None:
    # A docstring's source line breaks were kept: at 80 columns every other line stopped half way.
    lines = _help_text(words, 80)
    for a, b in itertools.pairwise(lines):
        if _prose(a) and _prose(b):
            assert len(a) + 1 + len(b.split()[0]) > 79, f"{a!r} could have held the next word of {b!r}"


@pytest.mark.parametrize("words", COMMANDS, ids=lambda w: " ".join(w))
def test_help_example_is_whole_on_its_lines_at_80_columns(words: list[str]) -> None:
    # An example wrapped by the terminal pastes as two commands, the second an error.
    lines = _help_text(words, 80)
    starts = [i for i, line in enumerate(lines) if line.strip().startswith("erascope ")]
    assert starts, lines
    example = lines[starts[-1] :]
    assert all(len(line) <= 79 for line in example), example
    shown = [line.strip() for line in example if line.strip()]
    assert all(line.endswith("\\") for line in shown[:-1]), shown
    assert len(" ".join(line.rstrip("\\") for line in shown).split()) >= len(words) + 2


@pytest.mark.parametrize("words", COMMANDS, ids=lambda w: " ".join(w))
def test_no_option_help_is_cut_at_80_columns(words: list[str]) -> None:
    # typer cuts a word wider than its help column with "…": the capture directory's default and the
    # metrics URL were unreadable on an 80-column terminal
    result = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "80"})
    assert "…" not in result.stdout, result.stdout
