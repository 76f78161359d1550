"""Convert: a batch of sources -> staged Arrow IPC shards + quarantine rows, with Spark.

The stage's entry point is :func:`shardline.tasks.convert.stage.convert` (returns a
:class:`~shardline.tasks.convert.stage.Converted`). The other modules are its internals:

- ``plan``: units of work (whole sources, slices of large objects) packed into Spark tasks;
- ``split``: where a large JSONL / Parquet object is cut (``Part``, ranged reads);
- ``job``: the code that runs inside each Spark task; ``spark``: the Spark sessions;
- ``formats``: the format registry (one entry per input format: file suffixes, reader,
  slice reader, splitter); ``readers``: the readers themselves;
- ``rows``: row checks; ``shard_writer``: writes the staged Arrow IPC shards;
- ``rowfiles``: each task's per-row metadata file, bucketed by id hash; ``converted``: the
  :class:`Converted` result, which reads them back a bucket range at a time;
- ``dedupe``: duplicate ids across the batch and the published versions (in the driver,
  one bucket range of the row files at a time).

This package's ``__init__`` imports nothing, so importing one internal (the registry, from
detect) does not load the rest.
"""
