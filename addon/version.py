"""erascope's version, as installed: a module of its own so `erascope --version` imports nothing else."""

from __future__ import annotations


def tool_version() -> str:
    """The installed distribution's version (`0+unknown` when erascope runs from an uninstalled tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("erascope")
    except PackageNotFoundError:
        return "0+unknown"
