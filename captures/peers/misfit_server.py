"""Stdio "servers" that misbehave the way real ones do in the field. Standard library only.

crash-on-start   write an error to stderr and exit 3 before reading anything
silent           read stdin until EOF and never answer (a hung or wedged server)
silent-http      accept HTTP connections on 127.0.0.1:--port, read the requests, never answer
"""

from __future__ import annotations

import argparse
import socketserver
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["crash-on-start", "silent", "silent-http"])
    parser.add_argument("--port", type=int, default=0, help="silent-http: the loopback port to listen on")
    args = parser.parse_args()
    if args.mode == "silent-http":
        serve_silently(args.port)
        return
    if args.mode == "crash-on-start":
        sys.stderr.write("Traceback (most recent call last):\n  ...\nKeyError: 'WEATHER_API_KEY'\n")
        sys.exit(3)
    for _line in sys.stdin.buffer:
        pass  # swallow every request; exit quietly when the client closes stdin


class _Swallow(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        # Read whatever arrives and never answer, until the peer hangs up.
        while self.request.recv(65536):
            pass


class _SilentServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve_silently(port: int) -> None:
    with _SilentServer(("127.0.0.1", port), _Swallow) as server:
        server.serve_forever()


if __name__ == "__main__":
    main()
