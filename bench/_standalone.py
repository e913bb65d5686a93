"""The command line shared by benchmark modules that also run on their own (`python -m bench.bench_x`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import orjson


def targets_line(result: dict[str, Any]) -> str:
    return "  targets: " + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in result["targets"].items())


def module_main(
    description: str, run: Callable[..., dict[str, Any]], describe: Callable[[dict[str, Any]], list[str]]
) -> None:
    """`--quick` for fewer runs, `--json` for the raw result; otherwise `describe(result)` lines."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--json", action="store_true", help="print the result as JSON only")
    args = parser.parse_args()
    result = run(quick=args.quick)
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    sys.stdout.write("\n".join([*describe(result), targets_line(result)]) + "\n")
