"""Benchmarks: loader, conversion, GPU feed (see docs/benchmarks.md)."""
