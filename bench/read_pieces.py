"""The JSONL per-file step on one capture, or the bare scan of it, to count instructions with cachegrind.

Wall and CPU times on a shared machine move by more than most changes to the reading do;
instruction counts do not depend on the load. Run each side under cachegrind, and once more with
nothing read (`--pieces 0` or `--bare 0`: the imports alone), then subtract:

    valgrind --tool=cachegrind --cache-sim=no python -m bench.read_pieces FILE --pieces 4
    valgrind --tool=cachegrind --cache-sim=no python -m bench.read_pieces FILE --pieces 0
    valgrind --tool=cachegrind --cache-sim=no python -m bench.read_pieces FILE --bare 1
    cg_diff cachegrind.out.<nothing> cachegrind.out.<pieces> > diff.out && cg_annotate diff.out

`--pieces N` reads the file's first N pieces as `analyzer.load._read_pieces` does (counting each
piece's lines, the fast reading, the extraction of the messages columns), then pairs and condenses
them together as one chunk (`_finish_chunk`). `--bare 1` is the `ratio` benchmark's baseline on
this one file: `scan_ndjson(schema=RECORD_SCHEMA)`, every column.
"""

from __future__ import annotations

import argparse

# the analyzer package first: it sets the allocator the `erascope` command gets before polars loads
from analyzer import load
from analyzer.facts import FileFacts
from analyzer.schema import RECORD_SCHEMA


def read_pieces(path: str, count: int) -> int:
    """Read the first `count` pieces of capture `path` and finish them as one chunk; the rows kept."""
    if count == 0:
        return 0
    with open(path, "rb") as f:
        pieces = list(load._pieces(f, load.PIECE_BYTES))[:count]
    facts = FileFacts(file=path, capture=load.capture_id(path))
    parts, line = [], 1
    for piece in pieces:
        lines = piece.count(b"\n")
        parts.append(load._read_piece(facts, piece, line, lines, False, None)[1])
        line += lines
    load._finish_chunk(parts)
    return sum(part.messages.height for part in parts)


def bare(path: str) -> int:
    """The bare scan of one file, every column parsed (the `ratio` benchmark's baseline)."""
    import polars as pl

    counts = pl.scan_ndjson([path], schema=RECORD_SCHEMA).select(pl.all().count()).collect(engine="streaming")
    return int(counts.item(0, "type"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    side = parser.add_mutually_exclusive_group(required=True)
    side.add_argument("--pieces", type=int, help="read this many pieces, then pair and condense them")
    side.add_argument("--bare", type=int, choices=(0, 1), help="1: the bare scan of the file; 0: nothing")
    args = parser.parse_args()
    rows = read_pieces(args.file, args.pieces) if args.pieces is not None else bare(args.file) if args.bare else 0
    print(rows)


if __name__ == "__main__":
    main()
