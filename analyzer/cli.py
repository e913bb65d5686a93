"""The `erascope` command: a thin typer layer over the library.

Library code raises `ErascopeError` and never prints; this module formats output, maps errors to
exit statuses (0 ok, 1 findings at or above `--fail-on`, 2 usage or input errors) and owns the
terminal. Every command's help carries an example.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from addon.errors import ErascopeError

app = typer.Typer(
    name="erascope",
    help="Record real MCP traffic and audit how clients probe server eras.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
record_app = typer.Typer(help="Record MCP traffic into erascope captures.", no_args_is_help=True)
app.add_typer(record_app, name="record")


def _fail(exc: ErascopeError) -> typer.Exit:
    typer.echo(f"erascope: error: {exc}", err=True)
    return typer.Exit(code=exc.exit_code)


@record_app.command(
    "stdio",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def record_stdio(
    cmd: Annotated[list[str], typer.Argument(help="The server command and its arguments, after `--`.")],
    server: Annotated[
        str | None, typer.Option("--server", help="Server key; default: derived from the command line.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Capture directory; default: $ERASCOPE_CAPTURE_DIR or $XDG_STATE_HOME/erascope/captures.",
        ),
    ] = None,
    linger: Annotated[
        float, typer.Option("--linger", help="Seconds to keep recording client bytes after the server exits.")
    ] = 2.0,
) -> None:
    """Run an MCP stdio server behind a byte-exact recording tee.

    Put it in an MCP host's config in place of the server command. Example:

        erascope record stdio --server weather -- python -m weather_server
    """
    from addon.stdio_tee import run_tee

    try:
        status = run_tee(cmd, server=server, out_dir=out, linger=linger, stderr=sys.stderr.buffer)
    except ErascopeError as exc:
        raise _fail(exc) from None
    raise typer.Exit(code=status)


def main() -> None:
    app()
