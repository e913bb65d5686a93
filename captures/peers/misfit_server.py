"""Stdio "servers" that misbehave the way real ones do in the field. Standard library only.

crash-on-start   write an error to stderr and exit 3 before reading anything
silent           read stdin until EOF and never answer (a hung or wedged server)
"""

from __future__ import annotations

import argparse
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["crash-on-start", "silent"])
    args = parser.parse_args()
    if args.mode == "crash-on-start":
        sys.stderr.write("Traceback (most recent call last):\n  ...\nKeyError: 'WEATHER_API_KEY'\n")
        sys.exit(3)
    for _line in sys.stdin.buffer:
        pass  # swallow every request; exit quietly when the client closes stdin


if __name__ == "__main__":
    main()
