"""A genuine legacy MCP server: `mcp` 1.30.0 `FastMCP` (handshake era only, no `server/discover`).

Run with the legacy peer environment (`.peers/legacy/bin/python`).

    python legacy_server.py --transport stdio
    python legacy_server.py --transport http --port 8932
    python legacy_server.py --transport sse --port 8933    # the deprecated HTTP+SSE transport (GET /sse)
"""

from __future__ import annotations

import argparse

from mcp.server.fastmcp import FastMCP


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transport", choices=["stdio", "http", "sse"], default="stdio")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--name", default="erascope-legacy-peer")
    args = parser.parse_args()
    server = FastMCP(args.name, host="127.0.0.1", port=args.port, log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    server.run({"stdio": "stdio", "http": "streamable-http", "sse": "sse"}[args.transport])


if __name__ == "__main__":
    main()
