"""The shared core: configuration, object-store access, the dataset schema and the manifest.

The contract between ingest (``shardline.tasks``), the trainer (``shardline.trainer``) and
the stack launcher (``shardline.infra``). It imports nothing else of the project's (a test
checks this).
"""
