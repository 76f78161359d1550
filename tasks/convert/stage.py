"""Convert: a batch of sources -> staged Arrow IPC shards + quarantine, with Spark.

The driver plans units of work (whole sources; where a batch has fewer objects than useful
tasks, large JSONL and Parquet objects are cut into slices, see ``split``), packs them
into size-balanced groups (largest first onto the least-loaded task; see ``plan``), runs
one Spark task per group (``spark.range(n, numPartitions=n).mapInArrow``, see ``job``), collects
the tasks' file metadata once (collecting twice would re-run the tasks: one row per shard and
per task's row file, never per input row), removes duplicate ids reading the row files one
bucket range at a time (``dedupe``), and returns what publish and validate need. Every input
row appears in the row files exactly once: as a row of a staged data shard or as a quarantine
row with its rule; an unreadable object is one quarantine row with ``source_row = -1``. Rows
carry their position within the whole object, sliced or not, so the dedupe (first occurrence
in (key, row) order wins) and the quarantine read the same either way.
"""

from __future__ import annotations

import functools
import json
import logging
import time

import pyarrow as pa

from shardline.core.builder import holdout_conflict
from shardline.core.config import DatasetConfig, SparkSettings
from shardline.core.errors import ConfigError, worker_store_error
from shardline.core.manifest import Manifest
from shardline.core.schema import schema_conflict, staging_prefix
from shardline.core.store import Store
from shardline.tasks.batch import Batch
from shardline.tasks.convert import spark as spark_sessions
from shardline.tasks.convert.converted import Converted
from shardline.tasks.convert.dedupe import dedupe_batch
from shardline.tasks.convert.job import META_DDL, ConvertJob, run_partition
from shardline.tasks.convert.plan import MIN_TASK_BYTES, plan_groups, plan_parts, useful_tasks
from shardline.tasks.convert.rowfiles import RowFile, staged_ids_key
from shardline.tasks.convert.shard_writer import WrittenShard

log = logging.getLogger(__name__)


def run_spark(job: ConvertJob, spark_settings: SparkSettings) -> pa.Table:
    """Run the conversion tasks on Spark and collect their metadata rows."""
    spark = spark_sessions.get_session(spark_settings)
    n = len(job.groups)
    df = spark.range(0, n, 1, numPartitions=n).mapInArrow(
        functools.partial(run_partition, job), META_DDL)
    try:
        return df.toArrow()
    except Exception as exc:          # a task's store error reaches us only as text
        typed = worker_store_error(exc)
        if typed is None:
            raise
        raise typed from exc


def convert(store: Store, cfg: DatasetConfig, spark_settings: SparkSettings,
            batch: Batch, run_id: str, latest: Manifest | None, tasks: int | None = None,
            min_task_bytes: int = MIN_TASK_BYTES) -> Converted:
    """Convert ``batch`` into staged shards under ``staging/<run_id>/``.

    ``tasks`` (default: :func:`useful_tasks` for the Spark session's cores) and
    ``min_task_bytes`` steer the planning only; the rows, their ``source_row`` and what is
    published do not depend on them."""
    why = holdout_conflict(cfg.name, latest, cfg.holdout_fraction)
    if why is not None:       # refused before any work; publish checks again (races)
        raise ConfigError(why)
    schema_conflict(cfg, latest)    # likewise: a non-additive schema change is SchemaChange
    t0 = time.perf_counter()
    if tasks is None:
        tasks = useful_tasks(batch.bytes, spark_sessions.default_parallelism(
            spark_sessions.get_session(spark_settings)), min_task_bytes)
    t_session = time.perf_counter()
    parts = plan_parts(store, batch.sources, tasks, min_task_bytes, cfg)
    job = ConvertJob(cfg, store, run_id, plan_groups(parts, tasks))
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


def assemble(store: Store, cfg: DatasetConfig, batch: Batch, run_id: str,
             latest: Manifest | None, meta: pa.Table) -> Converted:
    """Turn the collected metadata (one row per file the tasks wrote) into a
    :class:`Converted`, quarantining duplicates (``dedupe.dedupe_batch``, one bucket range
    of the row files at a time)."""
    shards, files = [], []
    for s in meta.to_pylist():
        counts = json.loads(s["label_counts"] or "{}")
        if s["kind"] == "rows":
            files.append(RowFile(s["shard"], s["shard_row"], counts["by_rule"],
                                 tuple(counts["ok_per_bucket"]), s["bytes"] or 0))
            continue
        shards.append(WrittenShard(path=s["shard"], rows=s["shard_row"], bytes=s["bytes"],
                                   sha256=s["sha256"], kind=s["status"], label=s["label"],
                                   label_min=s["label_min"], label_max=s["label_max"],
                                   xxh3_128=s["xxh3_128"], label_counts=counts,
                                   split=s["split"], stats=json.loads(s.get("stats") or "{}")))
    files.sort(key=lambda f: f.key)
    data = sorted((s for s in shards if s.kind == "data"), key=lambda s: s.path)
    quarantine = sorted((s for s in shards if s.kind == "quarantine"), key=lambda s: s.path)
    by_rule: dict[str, int] = {}
    for f in files:
        for rule, n in f.by_rule.items():
            by_rule[rule] = by_rule.get(rule, 0) + n
    stage = staging_prefix(cfg.prefix, run_id)
    done = dedupe_batch(store, cfg, run_id, files,
                        [b.ids_path for b in latest.batches] if latest else [], data,
                        staged_ids_key(stage))
    for rule, n in done.by_rule.items():
        by_rule[rule] = by_rule.get(rule, 0) + n
    conv = Converted(batch, run_id, latest.version if latest else None, done.data,
                     quarantine + done.quarantine, files, store,
                     sum(f.rows for f in files), dict(sorted(by_rule.items())), done.ids_key,
                     done.dropped)
    conv.examples = conv.quarantine_examples()   # read now: publish removes the row files
    return conv
