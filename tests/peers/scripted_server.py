"""Small scripted stdio servers for the tee's lifecycle tests (standard library only).

    python scripted_server.py MODE

Modes:
- `crash-on-start`: writes a line to stderr and exits 3 before reading anything.
- `banner-then-answers`: writes a non-JSON banner line to stdout, then answers every JSON-RPC
  request line with `{"jsonrpc":"2.0","id":<id>,"result":{"echo":<method>}}`; exits 0 at stdin EOF.
- `banner-then-crash`: writes the banner, reads one line, writes a stderr line and exits 1.
- `never-answers`: reads and ignores stdin; exits 0 at stdin EOF.
- `exit-after-first-line`: answers the first request, then exits 0 without waiting for EOF.
- `close-stdin-then-answer`: reads one line, closes its stdin, answers it, waits half a second,
  writes `bye` and exits 0 (writes to its stdin fail with EPIPE meanwhile).
- `answers-then-waits`: writes `ready pid=<pid>` to stderr at start (so a test knows it runs and
  whom to kill), answers requests, then ignores stdin EOF and sleeps until killed.
- `stubborn`: like `answers-then-waits`, but also ignores SIGTERM, SIGINT and SIGHUP: only SIGKILL
  ends it (a server that would outlive its client as an orphan).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

BANNER = b"weather-server v1.2 starting (this line is not JSON)\n"


def _answer(line: bytes) -> bytes | None:
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    if not isinstance(msg, dict) or "id" not in msg or "method" not in msg:
        return None
    reply = {"jsonrpc": "2.0", "id": msg["id"], "result": {"echo": msg["method"]}}
    return json.dumps(reply, separators=(",", ":")).encode() + b"\n"


def _serve(stdin, stdout, *, limit: int | None = None) -> None:
    answered = 0
    for line in stdin:
        reply = _answer(line)
        if reply is not None:
            stdout.write(reply)
            stdout.flush()
            answered += 1
            if limit is not None and answered >= limit:
                return


def main() -> int:
    mode = sys.argv[1]
    stdin, stdout, stderr = sys.stdin.buffer, sys.stdout.buffer, sys.stderr.buffer
    if mode == "crash-on-start":
        stderr.write(b"fatal: config file /etc/weather.toml not found\n")
        stderr.flush()
        return 3
    if mode == "banner-then-answers":
        stdout.write(BANNER)
        stdout.flush()
        _serve(stdin, stdout)
        return 0
    if mode == "banner-then-crash":
        stdout.write(BANNER)
        stdout.flush()
        stdin.readline()
        stderr.write(b"panic: database locked\n")
        stderr.flush()
        return 1
    if mode == "never-answers":
        for _ in stdin:
            pass
        return 0
    if mode == "exit-after-first-line":
        _serve(stdin, stdout, limit=1)
        return 0
    if mode == "close-stdin-then-answer":
        line = stdin.readline()
        os.close(0)
        stdout.write(_answer(line) or b"")
        stdout.flush()
        time.sleep(0.5)
        stdout.write(b"bye\n")
        stdout.flush()
        return 0
    if mode in ("answers-then-waits", "stubborn"):
        if mode == "stubborn":
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
        stderr.write(f"ready pid={os.getpid()}\n".encode())
        stderr.flush()
        _serve(stdin, stdout)
        while True:
            time.sleep(60)
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main())
