"""A genuine legacy stdio server: `mcp` 1.30.0 `FastMCP` with one tool, `add`.

Run with the legacy peer Python (`tests.conftest.legacy_python()`).
"""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP


def main() -> None:
    server = FastMCP("tee-test-legacy", log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    server.run("stdio")


if __name__ == "__main__":
    main()
