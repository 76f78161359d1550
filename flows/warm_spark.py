"""Spark's first job, run once at ``shardline up`` (``python -m shardline.flows.warm_spark
URL``, started and tracked by the stack: ``infra/stack_specs.py``), so the first ingest does
not pay for Spark's Python workers starting and importing the conversion code."""

from __future__ import annotations

import sys
from typing import Any

from shardline.flows.warm import warm_s3_client


def _warm_partition(batches: Any) -> Any:
    """Runs in Spark's Python workers (reused across jobs): imports what a conversion's
    tasks import and builds the S3 client they build."""
    import shardline.tasks.convert.job  # noqa: F401

    warm_s3_client()
    yield from batches


def spark_warmup(url: str, partitions: int = 2) -> float:
    """One tiny job through the Connect server at ``url``, so the first ingest does not pay
    Spark's first job (its Python workers starting and importing the conversion code;
    the workers are reused). Returns the seconds it took."""
    import time

    from shardline.core.config import SparkSettings
    from shardline.tasks.convert.spark import close_sessions, get_session

    t0 = time.perf_counter()
    spark = get_session(SparkSettings(remote=url))
    df = spark.range(partitions * 4).repartition(partitions * 2)
    df.mapInArrow(_warm_partition, df.schema).count()
    close_sessions(url)
    return time.perf_counter() - t0


if __name__ == "__main__":
    took = spark_warmup(sys.argv[1])
    print(f"Spark warm-up job on {sys.argv[1]}: {took:.1f}s", flush=True)
