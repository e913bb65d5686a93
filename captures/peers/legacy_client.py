"""A genuine legacy MCP client: `mcp` 1.30.0 `ClientSession` (initialize handshake, no probe).

Run with the legacy peer environment. Reports what happened as one JSON line on stdout.

    python legacy_client.py -- python some_server.py
    python legacy_client.py --url http://127.0.0.1:8931/mcp
    python legacy_client.py --sse --url http://127.0.0.1:8933/sse   # the deprecated HTTP+SSE transport
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def _describe(exc: BaseException) -> dict[str, Any]:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    error = getattr(exc, "error", None)
    out: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)[:300]}
    if error is not None and hasattr(error, "code"):
        out["code"] = error.code
    return out


async def _use(read: Any, write: Any, report: dict[str, Any]) -> None:
    async with ClientSession(read, write) as session:
        init = await session.initialize()
        report["connected"] = True
        report["protocol_version"] = init.protocolVersion
        report["server_info"] = init.serverInfo.name
        result = await session.call_tool("add", {"a": 2, "b": 3})
        report["results"] = [
            {"tool": "add", "is_error": bool(result.isError), "text": [c.text for c in result.content]}
        ]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Connect, initialize, call one tool; any failure becomes the report's `error`."""
    report: dict[str, Any] = {"connected": False}
    try:
        with anyio.fail_after(args.timeout):
            if args.url and args.sse:
                async with sse_client(args.url) as (read, write):
                    await _use(read, write, report)
            elif args.url:
                async with streamable_http_client(args.url) as (read, write, _session_id):
                    await _use(read, write, report)
            else:
                params = StdioServerParameters(command=args.cmd[0], args=args.cmd[1:], env=dict(os.environ))
                async with stdio_client(params) as (read, write):
                    await _use(read, write, report)
    except TimeoutError:
        report["error"] = {"type": "timeout", "message": f"no session within {args.timeout} s (client bound)"}
    except Exception as exc:  # the failure is the observation
        report["error"] = _describe(exc)
    return {"mode": "legacy-1.x", "sessions": [report]}


def main() -> None:
    argv = sys.argv[1:]
    cmd: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, cmd = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=None)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--sse", action="store_true", help="--url is a GET /sse endpoint (HTTP+SSE transport)")
    args = parser.parse_args(argv)
    args.cmd = cmd
    if not args.url and not cmd:
        raise SystemExit("legacy_client: give --url or a server command after --")
    print(json.dumps(anyio.run(run, args)))


if __name__ == "__main__":
    main()
