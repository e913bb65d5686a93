"""A stdio server whose answer to the probe is no DiscoverResult: runs a real server and relays its
stdio, but replaces the result of each answer to a `server/discover` request with RESULT, a JSON
object (standard library only).

    python broken_discover.py RESULT SERVER_COMMAND...

Every other line passes as it came, so a client that falls back to `initialize` after the probe
meets the real server's answer to that.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading


def _message(line: bytes) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _relay_stdin(server: subprocess.Popen[bytes], probe_ids: set[str]) -> None:
    assert server.stdin is not None
    for line in sys.stdin.buffer:
        msg = _message(line)
        if isinstance(msg, dict) and msg.get("method") == "server/discover":
            probe_ids.add(json.dumps(msg.get("id")))
        server.stdin.write(line)
        server.stdin.flush()
    server.stdin.close()


def main() -> int:
    result = json.loads(sys.argv[1])
    server = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    probe_ids: set[str] = set()
    threading.Thread(target=_relay_stdin, args=(server, probe_ids), daemon=True).start()
    assert server.stdout is not None
    for line in server.stdout:
        msg = _message(line)
        if isinstance(msg, dict) and "result" in msg and json.dumps(msg.get("id")) in probe_ids:
            line = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode() + b"\n"
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main())
