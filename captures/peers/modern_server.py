"""A dual-era MCP server on the real `mcp` 2.3.0 SDK (`MCPServer`): serves 2026-07-28 and the handshake era.

Run with the project venv. `--banner` writes a non-JSON line to stdout before serving (a common
real-world mistake: a startup log line on the protocol stream); `--crash-after-banner` then exits.

    python modern_server.py --transport stdio
    python modern_server.py --transport http --port 8931
    python modern_server.py --transport http --port 8931 --auth-token secret-token   # bearer auth gate
"""

from __future__ import annotations

import argparse
import sys

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer


class FixedToken:
    """A token verifier that accepts one bearer token: the SDK's own auth middleware does the rest."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def verify_token(self, token: str) -> AccessToken | None:
        return AccessToken(token=token, client_id="erascope-peer", scopes=[]) if token == self.token else None


def build(name: str, auth_token: str | None = None, port: int = 0) -> MCPServer:
    """The server with the two tools every scenario calls; behind the SDK's bearer auth with `auth_token`."""
    auth: dict[str, object] = {}
    if auth_token is not None:
        origin = f"http://127.0.0.1:{port}"
        auth = {
            "token_verifier": FixedToken(auth_token),
            "auth": AuthSettings(
                issuer_url=origin, resource_server_url=f"{origin}/mcp", validate_token_resource=False
            ),
        }
    server = MCPServer(name=name, version="2.3.0-peer", log_level="WARNING", **auth)  # type: ignore[arg-type]

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
    parser.add_argument("--auth-token", default=None, help="serve HTTP behind bearer auth accepting this token")
    args = parser.parse_args()
    if args.banner is not None:
        sys.stdout.write(args.banner + "\n")
        sys.stdout.flush()
    if args.crash_after_banner:
        sys.stderr.write("fatal: cannot open /nonexistent/weather.db\n")
        sys.exit(1)
    server = build(args.name, args.auth_token, args.port)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
