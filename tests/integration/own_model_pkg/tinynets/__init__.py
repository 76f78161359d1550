"""A model package of a team's own, installed beside shardline in the tests (put on
PYTHONPATH): shardline reaches it only through ``[train] model = "tinynets.nets:..."``."""

__version__ = "1.2.0"
