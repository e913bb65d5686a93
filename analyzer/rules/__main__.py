"""`python -m analyzer.rules --markdown [--check] [README]`: regenerate the README's rule table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from addon.errors import ErascopeError
from analyzer.rules.docs import rules_markdown, sync_readme

README = Path(__file__).resolve().parents[2] / "README.md"


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with --check, verify) the generated block in the README; without --markdown, print it."""
    parser = argparse.ArgumentParser(prog="python -m analyzer.rules", description=__doc__)
    parser.add_argument("--markdown", action="store_true", help="rewrite the rules block in the README")
    parser.add_argument("--check", action="store_true", help="only report whether the README is out of date")
    parser.add_argument("readme", nargs="?", type=Path, default=README)
    args = parser.parse_args(argv)
    if not args.markdown:
        print(rules_markdown())
        return 0
    try:
        changed = sync_readme(args.readme, check=args.check)
    except ErascopeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check and changed:
        print(f"{args.readme}: rules table out of date; run python -m analyzer.rules --markdown", file=sys.stderr)
        return 1
    print(f"{args.readme}: {'updated' if changed else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
