"""Convert: a batch of sources -> staged Arrow IPC shards + quarantine, with Spark.

The driver packs sources into size-balanced groups (largest first onto the least-loaded
task), runs one Spark task per group (``spark.range(n, numPartitions=n).mapInArrow``, see
``convert_job``), collects the per-row metadata once (collecting twice would re-run the
tasks), removes duplicate ids, and returns what publish and validate need. Every input row
appears in the metadata exactly once: as a row of a staged data shard or as a quarantine
row with its rule; an unreadable object is one quarantine row with ``source_row = -1``.
"""

from __future__ import annotations

import functools
import heapq
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from shardline.config import DatasetConfig, SparkSettings
from shardline.manifest import Manifest
from shardline.schema import staging_prefix
from shardline.store import ObjectStore
from tasks import spark as spark_sessions
from tasks.convert_job import META_DDL, ConvertJob, run_partition
from tasks.dedupe import find_duplicates, load_published_ids, remove_duplicates
from tasks.detect import Batch, Source
from tasks.shards import WrittenShard

log = logging.getLogger(__name__)


@dataclass
class Converted:
    """A converted batch sitting in staging, not yet visible to any reader."""

    batch: Batch
    run_id: str
    base_version: int | None          # the version whose ids were checked for duplicates
    data_shards: list[WrittenShard]
    quarantine_shards: list[WrittenShard]
    # per input row: id, label, source_key, source_row, status, rule
    rows: pa.Table
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def rows_in(self) -> int:
        return self.rows.num_rows

    @property
    def rows_ok(self) -> int:
        return sum(s.rows for s in self.data_shards)

    @property
    def rows_quarantined(self) -> int:
        return self.rows_in - self.rows_ok

    @property
    def by_rule(self) -> dict[str, int]:
        rules = self.rows.column("rule").drop_null().to_pylist()
        return dict(sorted(Counter(rules).items()))

    def quarantine_examples(self, n: int = 50) -> list[dict]:
        bad = self.rows.filter(pc.not_equal(self.rows.column("status"), "ok"))
        return bad.select(["source_key", "source_row", "id", "rule"]).slice(0, n).to_pylist()

    def published_ids(self) -> pa.Array:
        mask = pc.equal(self.rows.column("status"), "ok")
        return self.rows.filter(mask).column("id").combine_chunks()


def plan_groups(sources: tuple[Source, ...], tasks: int) -> tuple[tuple[Source, ...], ...]:
    """Pack sources into at most ``tasks`` groups of similar byte size (LPT scheduling)."""
    n = max(1, min(tasks, len(sources)))
    heap = [(0, i) for i in range(n)]
    groups: list[list[Source]] = [[] for _ in range(n)]
    for src in sorted(sources, key=lambda s: (-s.size, s.key)):
        load, i = heapq.heappop(heap)
        groups[i].append(src)
        heapq.heappush(heap, (load + max(src.size, 1), i))
    return tuple(tuple(sorted(g, key=lambda s: s.key)) for g in groups if g)


# Below this much input per task, splitting further costs more (more, smaller shards and
# per-task start-up) than the parallelism gains.
MIN_TASK_BYTES = 8 * 1024 * 1024


def plan_task_count(batch: Batch, parallelism: int) -> int:
    """Two tasks per core for large batches (stragglers even out), fewer for small ones."""
    by_size = -(-batch.bytes // MIN_TASK_BYTES)
    return max(1, min(2 * parallelism, by_size, len(batch.sources)))


def run_spark(job: ConvertJob, spark_settings: SparkSettings) -> pa.Table:
    """Run the conversion tasks on Spark and collect their metadata rows."""
    spark = spark_sessions.get_session(spark_settings)
    n = len(job.groups)
    df = spark.range(0, n, 1, numPartitions=n).mapInArrow(
        functools.partial(run_partition, job), META_DDL)
    return df.toArrow()


def convert(store: ObjectStore, cfg: DatasetConfig, spark_settings: SparkSettings,
            batch: Batch, run_id: str, latest: Manifest | None, tasks: int | None = None,
            ) -> Converted:
    """Convert ``batch`` into staged shards under ``staging/<run_id>/``."""
    t0 = time.perf_counter()
    if tasks is None:
        tasks = plan_task_count(batch, spark_sessions.default_parallelism(
            spark_sessions.get_session(spark_settings)))
    t_session = time.perf_counter()
    job = ConvertJob(cfg, store.settings, run_id, plan_groups(batch.sources, tasks))
    meta = run_spark(job, spark_settings)
    t_spark = time.perf_counter()
    result = assemble(store, cfg, batch, run_id, latest, meta)
    result.timings = {"session_s": t_session - t0, "spark_job_s": t_spark - t_session,
                      "dedupe_s": time.perf_counter() - t_spark}
    log.info("converted batch %s: %d rows in, %d ok, %d quarantined %s in %.1fs (%d tasks)",
             batch.id, result.rows_in, result.rows_ok, result.rows_quarantined,
             result.by_rule, time.perf_counter() - t0, len(job.groups))
    return result


def assemble(store: ObjectStore, cfg: DatasetConfig, batch: Batch, run_id: str,
             latest: Manifest | None, meta: pa.Table) -> Converted:
    """Turn the collected metadata into a :class:`Converted`, quarantining duplicates."""
    is_row = pc.equal(meta.column("kind"), "row")
    rows, shards_meta = meta.filter(is_row), meta.filter(pc.invert(is_row))
    shards = [
        WrittenShard(path=s["shard"], rows=s["shard_row"], bytes=s["bytes"],
                     sha256=s["sha256"], kind=s["status"], label=s["label"],
                     label_min=s["label_min"], label_max=s["label_max"])
        for s in shards_meta.to_pylist()
    ]
    data = sorted((s for s in shards if s.kind == "data"), key=lambda s: s.path)
    quarantine = sorted((s for s in shards if s.kind == "quarantine"), key=lambda s: s.path)
    ok_mask = pc.equal(rows.column("status"), "ok")
    ok = rows.filter(ok_mask)
    dups = find_duplicates(ok, load_published_ids(store, latest))
    status = rows.column("status").to_pylist()
    rule = rows.column("rule").to_pylist()
    if dups:
        data, dq = remove_duplicates(store, cfg, staging_prefix(cfg.prefix, run_id), ok, dups,
                                     data)
        quarantine.append(dq)
        ok_positions = [i for i, s in enumerate(status) if s == "ok"]
        for d in dups:
            status[ok_positions[d.meta_index]] = "quarantined"
            rule[ok_positions[d.meta_index]] = "duplicate_id"
    table = pa.table({
        "id": rows.column("id"), "label": rows.column("label"),
        "source_key": rows.column("source_key"), "source_row": rows.column("source_row"),
        "status": pa.array(status, pa.string()), "rule": pa.array(rule, pa.string()),
    })
    return Converted(batch, run_id, latest.version if latest else None, data, quarantine, table)
