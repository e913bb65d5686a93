"""A scripted JSON-RPC client that probes an unknown version first, then retries with a fresh id.

No released client does this on its own against a server at the same version, so this script
plays the part; the server's answers are real. Sequence (stdio or Streamable HTTP):

1. `server/discover` naming `2099-01-01` (id 1) — expect -32022 with `data.supported`;
2. `server/discover` naming a mutual modern version from that list (id 2, a new id);
3. `tools/call add` with the modern envelope (id 3).

    python raw_probe_client.py -- python modern_server.py
    python raw_probe_client.py --url http://127.0.0.1:8931/mcp
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from queue import Empty, Queue
from typing import Any

import orjson

FIRST_PROBE_VERSION = "2099-01-01"
MODERN = ("2026-07-28",)
CLIENT_INFO = {"name": "erascope-raw-probe", "version": "0.1.0"}


def request(rid: int, method: str, version: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A modern request: every request carries the `_meta` envelope."""
    body = dict(params or {})
    body["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
    }
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": body}


class StdioPeer:
    """The server as a child process; answers are read line by line, non-JSON lines skipped."""

    def __init__(self, cmd: list[str]) -> None:
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ))
        self.lines: Queue[bytes | None] = Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def call(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps(msg) + b"\n")
        self.proc.stdin.flush()
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except Empty:
                return {"error": {"code": None, "message": "no answer (client bound)"}}
            if line is None:
                return {"error": {"code": None, "message": "server closed stdout"}}
            try:
                answer = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(answer, dict) and answer.get("id") == msg["id"]:
                return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait(timeout=10)


class HttpPeer:
    """Streamable HTTP, modern style: one POST per request, version and method in headers."""

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": msg["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
            "mcp-method": msg["method"],
        }
        if msg["method"] == "tools/call":
            headers["mcp-name"] = msg["params"]["name"]
        req = urllib.request.Request(self.url, data=orjson.dumps(msg), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, ctype, text = resp.status, resp.headers.get("content-type", ""), resp.read().decode()
        except urllib.error.HTTPError as exc:  # 4xx/5xx still carry the JSON-RPC error body
            status, ctype, text = exc.code, exc.headers.get("content-type", ""), exc.read().decode()
        if ctype.startswith("text/event-stream"):
            datas = [ln[5:].strip() for ln in text.splitlines() if ln.startswith("data:")]
            text = datas[-1] if datas else ""
        try:
            answer = orjson.loads(text)
        except orjson.JSONDecodeError:
            answer = {"error": {"code": None, "message": f"HTTP {status}: {text[:200]}"}}
        answer["http_status"] = status
        return answer

    def close(self) -> None:
        """Nothing to release: each request used its own connection."""


def run(peer: StdioPeer | HttpPeer, timeout: float) -> dict[str, Any]:
    """Drive the three-step sequence and say what each step got."""
    steps: list[dict[str, Any]] = []
    report: dict[str, Any] = {"mode": "scripted-raw", "steps": steps}
    try:
        first = peer.call(request(1, "server/discover", FIRST_PROBE_VERSION), timeout)
        steps.append({"id": 1, "requested": FIRST_PROBE_VERSION, "answer": _summary(first)})
        supported = ((first.get("error") or {}).get("data") or {}).get("supported") or []
        mutual = [v for v in MODERN if v in supported]
        if not mutual:
            report["outcome"] = "no mutual modern version offered; stopped"
            return report
        second = peer.call(request(2, "server/discover", mutual[-1]), timeout)
        steps.append({"id": 2, "requested": mutual[-1], "answer": _summary(second)})
        if "result" not in second:
            report["outcome"] = "re-probe failed"
            return report
        call = peer.call(
            request(3, "tools/call", mutual[-1], {"name": "add", "arguments": {"a": 20, "b": 22}}), timeout
        )
        steps.append({"id": 3, "method": "tools/call", "answer": _summary(call)})
        report["protocol_version"] = mutual[-1]
        report["outcome"] = "adopted after re-probe"
    finally:
        peer.close()
    return report


def _summary(answer: dict[str, Any]) -> dict[str, Any]:
    if "error" in answer:
        err = answer["error"]
        out = {"error_code": err.get("code"), "message": err.get("message"), "data": err.get("data")}
    else:
        result = answer.get("result", {})
        out = {"result_keys": sorted(result)}
        if "supportedVersions" in result:
            out["supported_versions"] = result["supportedVersions"]
        if "content" in result:
            out["text"] = [c.get("text") for c in result["content"]]
    if "http_status" in answer:
        out["http_status"] = answer["http_status"]
    return out


def main() -> None:
    argv = sys.argv[1:]
    cmd: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, cmd = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=None)
    parser.add_argument("--timeout", type=float, default=15.0)
    args = parser.parse_args(argv)
    if not args.url and not cmd:
        raise SystemExit("raw_probe_client: give --url or a server command after --")
    peer: StdioPeer | HttpPeer = HttpPeer(args.url) if args.url else StdioPeer(cmd)
    sys.stdout.buffer.write(orjson.dumps(run(peer, args.timeout)) + b"\n")


if __name__ == "__main__":
    main()
