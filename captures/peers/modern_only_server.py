"""A modern-only MCP server: `mcp` 2.3.0 serving 2026-07-28 and refusing the handshake.

`mcp` 2.3.0 has no public switch for modern-only serving (its stdio and HTTP servers are dual-era).
This peer therefore drives the SDK's own modern code paths directly, so every answer on the wire,
including the refusal of `initialize`, is the SDK's:

- stdio: `mcp.server.runner._serve_modern_stream`, the loop a dual-era connection enters after an
  enveloped first request (it answers `initialize` with -32022 naming its versions);
- HTTP: `mcp.server._streamable_http_modern.handle_modern_request`, the handler the dual-era
  session manager uses for requests with a modern `mcp-protocol-version` header, for every request.

Both imports are private API; if a later SDK renames them this script fails loudly.

    python modern_only_server.py                       # stdio
    python modern_only_server.py --transport http --port 8933
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
import uvicorn
from mcp.server._streamable_http_modern import handle_modern_request
from mcp.server.runner import _serve_modern_stream
from mcp.server.stdio import stdio_server
from modern_server import build

NAME = "erascope-modern-only-peer"


async def serve_stdio() -> None:
    lowlevel = build(NAME)._lowlevel_server
    async with lowlevel.lifespan(lowlevel) as state, stdio_server() as (read_stream, write_stream):
        await _serve_modern_stream(lowlevel, read_stream, write_stream, lifespan_state=state, raise_exceptions=False)


def http_app() -> Any:
    """A bare ASGI app: the server's lifespan, then every HTTP request to the modern handler."""
    lowlevel = build(NAME)._lowlevel_server
    state: dict[str, Any] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            async with lowlevel.lifespan(lowlevel) as lifespan_state:
                state["lifespan"] = lifespan_state
                while True:
                    message = await receive()
                    if message["type"] == "lifespan.startup":
                        await send({"type": "lifespan.startup.complete"})
                    elif message["type"] == "lifespan.shutdown":
                        await send({"type": "lifespan.shutdown.complete"})
                        return
        if scope["type"] == "http":
            # json_response=False is what `MCPServer.run("streamable-http")` passes by default.
            await handle_modern_request(lowlevel, None, False, state["lifespan"], scope, receive, send)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.transport == "stdio":
        anyio.run(serve_stdio)
    else:
        uvicorn.run(http_app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
