"""Convert: a batch of sources -> staged Arrow IPC shards + quarantine, with Spark.

The driver plans units of work (whole sources; where a batch has fewer objects than useful
tasks, large JSONL and Parquet objects are cut into slices, see ``split``), packs them
into size-balanced groups (largest first onto the least-loaded task; see ``plan``), runs
one Spark task per group (``spark.range(n, numPartitions=n).mapInArrow``, see ``job``), collects
the per-row metadata once (collecting twice would re-run the tasks), removes duplicate ids,
and returns what publish and validate need. Every input row appears in the metadata exactly
once: as a row of a staged data shard or as a quarantine row with its rule; an unreadable
object is one quarantine row with ``source_row = -1``. Rows carry their position within
the whole object, sliced or not, so the dedupe (first occurrence in (key, row) order wins)
and the quarantine read the same either way.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardline.core.builder import holdout_conflict
from shardline.core.config import DatasetConfig, SparkSettings
from shardline.core.errors import ConfigError
from shardline.core.manifest import Manifest
from shardline.core.store import ObjectStore
from shardline.tasks.batch import Batch
from shardline.tasks.convert import spark as spark_sessions
from shardline.tasks.convert.dedupe import find_duplicates, remove_duplicates
from shardline.tasks.convert.job import META_DDL, ConvertJob, run_partition
from shardline.tasks.convert.plan import MIN_TASK_BYTES, plan_groups, plan_parts, useful_tasks
from shardline.tasks.convert.shard_writer import WrittenShard
from shardline.tasks.ledger import published_in

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
        counts = pc.value_counts(self.rows.column("rule").drop_null()).to_pylist()
        return dict(sorted((c["values"], c["counts"]) for c in counts))

    def quarantine_examples(self, n: int = 50) -> list[dict]:
        bad = self.rows.filter(pc.not_equal(self.rows.column("status"), "ok"))
        return bad.select(["source_key", "source_row", "id", "rule"]).slice(0, n).to_pylist()

    def published_ids(self) -> pa.Array:
        mask = pc.equal(self.rows.column("status"), "ok")
        return self.rows.filter(mask).column("id").combine_chunks()


def run_spark(job: ConvertJob, spark_settings: SparkSettings) -> pa.Table:
    """Run the conversion tasks on Spark and collect their metadata rows."""
    spark = spark_sessions.get_session(spark_settings)
    n = len(job.groups)
    df = spark.range(0, n, 1, numPartitions=n).mapInArrow(
        functools.partial(run_partition, job), META_DDL)
    return df.toArrow()


def convert(store: ObjectStore, cfg: DatasetConfig, spark_settings: SparkSettings,
            batch: Batch, run_id: str, latest: Manifest | None, tasks: int | None = None,
            min_task_bytes: int = MIN_TASK_BYTES) -> Converted:
    """Convert ``batch`` into staged shards under ``staging/<run_id>/``.

    ``tasks`` (default: :func:`useful_tasks` for the Spark session's cores) and
    ``min_task_bytes`` steer the planning only; the rows, their ``source_row`` and what is
    published do not depend on them."""
    why = holdout_conflict(cfg.name, latest, cfg.holdout_fraction)
    if why is not None:       # refused before any work; publish checks again (races)
        raise ConfigError(why)
    t0 = time.perf_counter()
    if tasks is None:
        tasks = useful_tasks(batch.bytes, spark_sessions.default_parallelism(
            spark_sessions.get_session(spark_settings)), min_task_bytes)
    t_session = time.perf_counter()
    parts = plan_parts(store, batch.sources, tasks, min_task_bytes)
    job = ConvertJob(cfg, store.settings, run_id, plan_groups(parts, tasks))
    t_plan = time.perf_counter()
    meta = run_spark(job, spark_settings)
    t_spark = time.perf_counter()
    result = assemble(store, cfg, batch, run_id, latest, meta)
    result.timings = {"session_s": t_session - t0, "plan_s": t_plan - t_session,
                      "spark_job_s": t_spark - t_plan, "dedupe_s": time.perf_counter() - t_spark}
    log.info("converted batch %s: %d rows in, %d ok, %d quarantined %s in %.1fs "
             "(%d tasks, %d units of work)", batch.id, result.rows_in, result.rows_ok,
             result.rows_quarantined, result.by_rule, time.perf_counter() - t0,
             len(job.groups), len(parts))
    return result


def assemble(store: ObjectStore, cfg: DatasetConfig, batch: Batch, run_id: str,
             latest: Manifest | None, meta: pa.Table) -> Converted:
    """Turn the collected metadata into a :class:`Converted`, quarantining duplicates."""
    is_row = pc.equal(meta.column("kind"), "row")
    rows, shards_meta = meta.filter(is_row), meta.filter(pc.invert(is_row))
    shards = [
        WrittenShard(path=s["shard"], rows=s["shard_row"], bytes=s["bytes"],
                     sha256=s["sha256"], kind=s["status"], label=s["label"],
                     label_min=s["label_min"], label_max=s["label_max"],
                     xxh3_128=s["xxh3_128"],
                     label_counts=json.loads(s["label_counts"] or "{}"),
                     split=s["split"])
        for s in shards_meta.to_pylist()
    ]
    data = sorted((s for s in shards if s.kind == "data"), key=lambda s: s.path)
    quarantine = sorted((s for s in shards if s.kind == "quarantine"), key=lambda s: s.path)
    ok_mask = pc.equal(rows.column("status"), "ok")
    ok = rows.filter(ok_mask)
    dups = find_duplicates(ok, published_in(store, latest.batches if latest else [],
                                            ok.column("id")))
    status, rule = rows.column("status"), rows.column("rule")
    if dups:
        data, dq = remove_duplicates(store, cfg, run_id, ok, dups,
                                     data)
        quarantine.append(dq)
        ok_positions = np.flatnonzero(ok_mask.to_numpy(zero_copy_only=False))
        hit = np.zeros(rows.num_rows, bool)
        hit[ok_positions[[d.meta_index for d in dups]]] = True
        dup = pa.array(hit)
        status = pc.if_else(dup, "quarantined", status)
        rule = pc.if_else(dup, "duplicate_id", rule)
    table = pa.table({
        "id": rows.column("id"), "label": rows.column("label"),
        "source_key": rows.column("source_key"), "source_row": rows.column("source_row"),
        "status": pc.cast(status, pa.string()), "rule": pc.cast(rule, pa.string()),
    })
    return Converted(batch, run_id, latest.version if latest else None, data, quarantine, table)
