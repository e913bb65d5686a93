"""A stdio server that hangs on the probe: runs a real server and relays its stdio, but never passes
it a `server/discover` request (standard library only).

    python swallow_discover.py SERVER_COMMAND...

Every other line goes to the server as it came, and the server's stdout comes back as it wrote it, so a
client that gives up on its probe and falls back to `initialize` is served by the real server. Exits
with the server's status once its stdout ended.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading


def _is_probe(line: bytes) -> bool:
    try:
        msg = json.loads(line)
    except ValueError:
        return False
    return isinstance(msg, dict) and msg.get("method") == "server/discover"


def _relay_stdin(server: subprocess.Popen[bytes]) -> None:
    assert server.stdin is not None
    for line in sys.stdin.buffer:
        if not _is_probe(line):
            server.stdin.write(line)
            server.stdin.flush()
    server.stdin.close()


def main() -> int:
    server = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    threading.Thread(target=_relay_stdin, args=(server,), daemon=True).start()
    assert server.stdout is not None
    for chunk in iter(lambda: server.stdout.read1(65536), b""):  # type: ignore[union-attr]
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main())
