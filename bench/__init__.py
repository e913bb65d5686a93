"""Benchmarks and the synthetic capture generator (`python -m bench`, `python -m bench.generate`)."""
