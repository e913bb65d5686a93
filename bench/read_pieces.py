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
them together as one chunk (`_finish_chunk`; `--no-finish` leaves that out). `--bare 1` is the
`ratio` benchmark's baseline on this one file: `scan_ndjson(schema=RECORD_SCHEMA)`, every column.
`--bare-pieces N` is that baseline on exactly the pieces `--pieces N` reads, so the two compare on
the same bytes; `--skip K` starts both at the file's piece K (0 holds the header record).
"""

from __future__ import annotations

import argparse
import itertools

# the analyzer package first: it sets the allocator the `erascope` command gets before polars loads
from analyzer import load
from analyzer.facts import FileFacts
from analyzer.schema import RECORD_SCHEMA


def _chosen(path: str, count: int, skip: int) -> list[bytes]:
    """Pieces `skip` to `skip + count` of the file, cut as `analyzer.load` cuts them."""
    with open(path, "rb") as f:
        return list(itertools.islice(load._pieces(f, load.PIECE_BYTES), skip, skip + count))


def read_pieces(path: str, count: int, skip: int = 0, finish: bool = True) -> int:
    """Read `count` pieces of capture `path` (from piece `skip`) and, with `finish`, pair and
    condense them as one chunk; the rows kept."""
    if count == 0:
        return 0
    pieces = _chosen(path, count, skip)
    facts = FileFacts(file=path, capture=load.capture_id(path))
    parts, line = [], 1
    for piece in pieces:
        lines = piece.count(b"\n")
        parts.append(load._read_piece(facts, piece, line, lines, False, None)[1])
        line += lines
    if finish:
        load._finish_chunk(parts)
    return sum(part.messages.height for part in parts)


def bare(path: str) -> int:
    """The bare scan of one file, every column parsed (the `ratio` benchmark's baseline)."""
    import polars as pl

    counts = pl.scan_ndjson([path], schema=RECORD_SCHEMA).select(pl.all().count()).collect(engine="streaming")
    return int(counts.item(0, "type"))


def bare_pieces(path: str, count: int, skip: int = 0) -> int:
    """The bare scan of the pieces `read_pieces` reads, each one as it reads them (from memory)."""
    import polars as pl

    records = 0
    for piece in _chosen(path, count, skip):
        counts = pl.scan_ndjson(piece, schema=RECORD_SCHEMA).select(pl.all().count()).collect(engine="streaming")
        records += int(counts.item(0, "type"))
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    side = parser.add_mutually_exclusive_group(required=True)
    side.add_argument("--pieces", type=int, help="read this many pieces, then pair and condense them")
    side.add_argument("--bare", type=int, choices=(0, 1), help="1: the bare scan of the file; 0: nothing")
    side.add_argument("--bare-pieces", type=int, help="the bare scan of the pieces --pieces would read")
    parser.add_argument("--skip", type=int, default=0, help="start at this piece of the file (default 0)")
    parser.add_argument("--no-finish", action="store_true", help="with --pieces: leave out pairing and condensing")
    args = parser.parse_args()
    if args.pieces is not None:
        rows = read_pieces(args.file, args.pieces, args.skip, not args.no_finish)
    elif args.bare_pieces is not None:
        rows = bare_pieces(args.file, args.bare_pieces, args.skip)
    else:
        rows = bare(args.file) if args.bare else 0
    print(rows)


if __name__ == "__main__":
    main()
