"""A real `mcp` Streamable HTTP server for the HTTP capture tests, runnable with either SDK.

Under `mcp` 2.3.0 (the project venv) it is the dual-era `MCPServer`; under `mcp` 1.30.0
(`.peers/legacy`) it is the legacy `FastMCP`. It binds 127.0.0.1 on a free port and prints
`PORT <n>` on stdout once it accepts connections, so a test never races a fixed port.

    python tests/peers/http_mcp_server.py [--stateless] [--name NAME] [--path PATH] [--transport sse]

`--path` is where the Streamable HTTP endpoint is (default `/mcp`); with `--transport sse` (the
deprecated HTTP+SSE transport) it is the prefix of its `/sse` stream and `/messages/` endpoint
(default none). Hosted servers put a key in it (`/mcp/<key>/sse`).

Tools: `echo(text)` returns the text; `slow(gate="")` sends one progress notification, then
sleeps `--slow` seconds (default 1) or waits for the gate file, and returns "done" (its response
is an SSE stream). `whoami()` returns the server's `--name` (tells balanced upstreams apart).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys

try:  # mcp 2.x
    from mcp.server.mcpserver import Context, MCPServer

    def make_server(name: str) -> MCPServer:
        return MCPServer(name)

    LEGACY = False
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import Context, FastMCP

    def make_server(name: str) -> FastMCP:  # type: ignore[misc]
        return FastMCP(name)

    LEGACY = True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--name", default="erascope-http-peer")
    parser.add_argument("--slow", type=float, default=1.0)
    parser.add_argument("--path", default=None)
    parser.add_argument("--transport", choices=["http", "sse"], default="http")
    args = parser.parse_args()

    server = make_server(args.name)

    @server.tool()
    def whoami() -> str:
        """The server's name."""
        return args.name

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    async def slow(ctx: Context, gate: str = "") -> str:
        """Report progress, wait, then answer: the response becomes an SSE stream.

        With `gate` (a file path) it waits until that file exists instead of sleeping: a client
        that creates the file when the progress event reaches it proves the event was not held
        back until the end of the stream (a buffering proxy deadlocks into "gate-timeout").
        """
        await ctx.report_progress(1, 2, "started")
        if not gate:
            await asyncio.sleep(args.slow)
            return "done"
        for _ in range(600):
            if os.path.exists(gate):
                return "done"
            await asyncio.sleep(0.05)
        return "gate-timeout"

    if args.transport == "sse":
        prefix = (args.path or "").rstrip("/")
        if LEGACY:
            server.settings.sse_path, server.settings.message_path = f"{prefix}/sse", f"{prefix}/messages/"
            app = server.sse_app()
        else:
            app = server.sse_app(sse_path=f"{prefix}/sse", message_path=f"{prefix}/messages/")
    elif LEGACY:
        server.settings.stateless_http = args.stateless
        server.settings.streamable_http_path = args.path or "/mcp"
        app = server.streamable_http_app()
    else:
        app = server.streamable_http_app(stateless_http=args.stateless, streamable_http_path=args.path or "/mcp")

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    userver = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(userver.serve(sockets=[sock]))
        while not userver.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        sys.stdout.write(f"PORT {port}\n")
        sys.stdout.flush()
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
