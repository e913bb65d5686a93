"""An MCP client on the real `mcp` 2.3.0 SDK (`mcp.Client`), reporting what it negotiated as one JSON line.

The server is either a stdio command (everything after `--`) or `--url` (Streamable HTTP).
`--per-call-client` opens a new `Client` (new connection, new probe) for every tool call, the way
some hosts do; `--timeout` bounds each connection so a server that never answers cannot hang the run.

    python modern_client.py --mode auto --calls 2 -- python modern_server.py
    python modern_client.py --mode legacy --url http://127.0.0.1:8931/mcp
    python modern_client.py --url http://127.0.0.1:8931/mcp --token secret-token   # bearer auth
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import anyio
import httpx2
import orjson
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


def _target(args: argparse.Namespace) -> StdioServerParameters | str | Any:
    if args.url and args.token:
        # The SDK takes HTTP settings (here the bearer token) only through a client of its own making.
        headers = {"Authorization": f"Bearer {args.token}"}
        return streamable_http_client(args.url, http_client=httpx2.AsyncClient(headers=headers))
    if args.url:
        return args.url
    if not args.cmd:
        raise SystemExit("modern_client: give --url or a server command after --")
    # The SDK passes only a few variables to the child by default; the recorder needs the rest
    # (redaction key, capture directory), so the whole environment goes through.
    return StdioServerParameters(command=args.cmd[0], args=args.cmd[1:], env=dict(os.environ))


def _describe(exc: BaseException) -> dict[str, Any]:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    error = getattr(exc, "error", None)
    out: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)[:300]}
    if error is not None and hasattr(error, "code"):
        out["code"] = error.code
    return out


async def _session(args: argparse.Namespace, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    report: dict[str, Any] = {"connected": False}
    try:
        with anyio.fail_after(args.timeout):
            async with Client(_target(args), mode=args.mode) as client:
                report["connected"] = True
                report["protocol_version"] = client.protocol_version
                info = client.server_info
                report["server_info"] = info.name if info is not None else None
                results = []
                for name, arguments in calls:
                    result = await client.call_tool(name, arguments)
                    texts = [c.text for c in result.content if getattr(c, "type", "") == "text"]
                    results.append({"tool": name, "is_error": bool(result.is_error), "text": texts})
                report["results"] = results
    except TimeoutError:
        report["error"] = {"type": "timeout", "message": f"no session within {args.timeout} s (client bound)"}
    except BaseException as exc:  # report whatever the SDK raised: that is the observation
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        report["error"] = _describe(exc)
    return report


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """One connection for all calls, or one per call with `--per-call-client`."""
    calls = [("add", {"a": i, "b": 1}) if i % 2 == 0 else ("echo", {"text": f"call {i}"}) for i in range(args.calls)]
    if not args.per_call_client:
        return {"mode": args.mode, "sessions": [await _session(args, calls)]}
    sessions = [await _session(args, [call]) for call in calls]
    return {"mode": args.mode, "per_call_client": True, "sessions": sessions}


def main() -> None:
    argv = sys.argv[1:]
    cmd: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, cmd = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=["auto", "legacy"], default="auto")
    parser.add_argument("--url", default=None)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--per-call-client", action="store_true")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--token", default=None, help="a bearer token sent with every HTTP request")
    args = parser.parse_args(argv)
    args.cmd = cmd
    report = anyio.run(run, args)
    sys.stdout.buffer.write(orjson.dumps(report) + b"\n")


if __name__ == "__main__":
    main()
