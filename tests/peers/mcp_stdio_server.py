"""A real `mcp` 2.3.0 stdio server (`MCPServer`, dual-era) with one tool, `add`.

`--banner TEXT` writes a non-JSON line to stdout before serving, as servers that log to stdout do.

    python mcp_stdio_server.py [--banner TEXT]
"""

from __future__ import annotations

import argparse
import sys

from mcp.server.mcpserver import MCPServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--banner", default=None)
    args = parser.parse_args()
    if args.banner is not None:
        sys.stdout.write(args.banner + "\n")
        sys.stdout.flush()
    server = MCPServer(name="tee-test-modern", version="1.0", log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    server.run("stdio")


if __name__ == "__main__":
    main()
