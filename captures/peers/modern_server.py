"""A dual-era MCP server on the real `mcp` 2.3.0 SDK (`MCPServer`): serves 2026-07-28 and the handshake era.

Run with the project venv. `--banner` writes a non-JSON line to stdout before serving (a common
real-world mistake: a startup log line on the protocol stream); `--crash-after-banner` then exits.

    python modern_server.py --transport stdio
    python modern_server.py --transport http --port 8931
"""

from __future__ import annotations

import argparse
import sys

from mcp.server.mcpserver import MCPServer


def build(name: str) -> MCPServer:
    """The server with the two tools every scenario calls."""
    server = MCPServer(name=name, version="2.3.0-peer", log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--name", default="erascope-modern-peer")
    parser.add_argument("--banner", default=None, help="a line printed on stdout before serving")
    parser.add_argument("--crash-after-banner", action="store_true")
    args = parser.parse_args()
    if args.banner is not None:
        sys.stdout.write(args.banner + "\n")
        sys.stdout.flush()
    if args.crash_after_banner:
        sys.stderr.write("fatal: cannot open /nonexistent/weather.db\n")
        sys.exit(1)
    server = build(args.name)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
