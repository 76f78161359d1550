"""shardline core: configuration, object-store access, dataset schema and the manifest.

This package is the shared contract between ingest (``tasks/``), the trainer (``trainer/``)
and the stack launcher (``infra/``). It imports nothing else of the project's.
"""

__version__ = "0.1.0"
