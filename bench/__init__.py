"""Benchmarks and the synthetic capture generator (`python -m bench`, `python -m bench.generate`)."""

import os

ALLOCATOR_ENV = os.environ.get("_RJEM_MALLOC_CONF")
"""`_RJEM_MALLOC_CONF` as this process got it. Importing polars rewrites it (its own allocator
settings), and the workloads run in child processes that would inherit that: the harness gives them
this value back, so they start like a command run from the user's shell."""
