"""The one domain exception library code raises; the CLI maps it to a message and an exit status."""

from __future__ import annotations


class ErascopeError(Exception):
    """A problem the user can fix (bad input, bad option, unreadable path). Exit status 2."""

    exit_code: int = 2


EMPTY_PATH = "an empty path names no file (was a variable unset?)"
"""Refusing "": `Path("")` is the current directory, which an unset variable must not silently name."""
