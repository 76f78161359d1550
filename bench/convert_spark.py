"""Shardline's conversion stage, run on Spark Connect servers (as the embedded stack runs it).

``tasks.convert.convert`` itself (plan groups, one Spark task per group via
``spark.range(n).mapInArrow``, each task reads its objects through its store, decodes,
checks and writes its shards; the driver collects the row metadata and deduplicates), with
the S3 server as the store, or a ``FolderStore`` on local disk (the job carries the store to
the workers). This module is pickled by value so the Spark workers need no bench package.

JVM start is the Connect server's launch-to-listening time; the first job is a trivial
``mapInArrow`` on a new client session (Python workers start there).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from shardline.core.config import DatasetConfig, SparkSettings
from shardline.core.store import Store
from shardline.infra import procs, services
from shardline.tasks.batch import Batch
from shardline.tasks.convert import spark as spark_sessions
from shardline.tasks.convert.stage import Converted, convert

log = logging.getLogger(__name__)


@dataclass
class SparkServer:
    master: str
    service: services.Service
    jvm_start_s: float
    first_job_s: float = float("nan")

    @property
    def settings(self) -> SparkSettings:
        return SparkSettings(remote=self.service.url)


def _identity(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def start_servers(masters: list[str], log_dir: Path) -> list[SparkServer]:
    """Boot one Connect server per master side by side, then run each one's first job."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    launches = [services.launch_spark_connect(procs.free_port(), log_dir / m.strip("[]"), m,
                                              work_dir=log_dir / f"work-{m.strip('[]')}",
                                              name=f"spark-{m}")
                for m in masters]
    try:
        services.wait_all([(launch, 120.0) for launch in launches])
    except BaseException:
        for launch in launches:
            launch.service.stop(grace_s=5.0)
        raise
    servers = [SparkServer(m, launch.service, float(launch.service.ready_s or "nan"))
               for m, launch in zip(masters, launches, strict=True)]
    import pyspark.sql.connect.session  # noqa: F401 - the client's import is not a job
    for s in servers:
        t0 = time.perf_counter()
        spark = spark_sessions.get_session(s.settings)
        spark.range(0, 2, 1, numPartitions=2).mapInArrow(_identity, "id bigint").toArrow()
        s.first_job_s = time.perf_counter() - t0
    return servers


def stop_servers(servers: list[SparkServer]) -> None:
    """Close each client session first: a session left open retries its server at exit."""
    for s in servers:
        try:
            spark_sessions.get_session(s.settings).stop()
        except Exception as exc:  # the server may already be gone: stop it anyway
            log.warning("could not close the Spark session of %s: %s", s.master, exc)
        s.service.stop(grace_s=10.0)


def convert_on(server: SparkServer, store: Store, cfg: DatasetConfig, batch: Batch,
               run_id: str) -> Converted:
    """``tasks.convert.convert`` unchanged, on this server, from and to ``store`` (the S3
    server, or a folder on local disk that the Spark workers write to directly)."""
    return convert(store, cfg, server.settings, batch, run_id, None)
