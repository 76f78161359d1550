"""Benchmarks: loader, conversion, pipeline, GPU feed, scale, learning (docs/benchmarks.md).

The checkout's ``bench/``, linked into the namespace as ``shardline.bench`` and installed with
the wheel: ``shardline bench ...`` imports it, ``python -m shardline.bench.<part>`` runs a part.
Nothing else in ``shardline`` imports it; it imports no tests and no private names
(``tests/unit/test_layering.py``).
"""
