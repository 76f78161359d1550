"""One stage of one scale-bench measurement, in its own process:

    python -m shardline.bench.scale_stages <stage> <params.json> <out.json>

Each stage is the ingest driver's own (``tasks.driver_stages.plain``), so the bench
measures the chain the flow and the tests run. The process sets the stage up (imports,
inputs read from the work folder, nothing timed), takes its resident memory, runs the
stage once, and writes wall and CPU seconds, its peak RSS (``ru_maxrss``) and the peak
above the set-up baseline, the stage's own figures and the requests and bytes it read and
wrote per kind of object (``bench.scale_store``). One process per stage: a stage's peak
never includes another's.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import resource
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from shardline.bench.common import rss
from shardline.bench.scale_store import Counts, counting, counting_folder
from shardline.core.config import SparkSettings, StoreSettings, parse_config
from shardline.core.manifest import latest_manifest
from shardline.core.store import ObjectStore
from shardline.tasks.driver_stages import Stages, plain

Run = Callable[[], dict[str, Any]]


class Ctx:
    def __init__(self, p: dict[str, Any]) -> None:
        self.p = p
        self.work = Path(p["work"])
        self.cfg = parse_config({"dataset": p["dataset"]}).dataset
        self.plain = ObjectStore(StoreSettings(**p["store"])) if p.get("store") else None
        self.store = counting(self.plain) if self.plain else None
        self.counts = Counts()
        # Arrow's allocator maps ~40 MB on its first allocation: in the set-up, not a stage
        pa.table({"x": list(range(1000))}).to_pylist()
        if self.store is not None:   # the client's first request loads botocore's models
            self.store.head(f"{self.cfg.prefix}/warm-up")
            self.store.counts = self.counts

    def load(self, name: str) -> Any:
        return pickle.loads((self.work / f"{name}.pkl").read_bytes())

    def save(self, name: str, obj: Any) -> None:
        (self.work / f"{name}.pkl").write_bytes(pickle.dumps(obj))


def _stages(c: Ctx, latest: Any = None) -> Stages:
    """The ingest driver's plain stages (``tasks.driver_stages``): the chain the flow runs,
    one stage per process here; ``latest`` read before the timer."""
    spark = SparkSettings(remote=c.p["spark"]) if c.p.get("spark") else None
    return plain(c.store, c.cfg, spark, latest=lambda: latest)  # type: ignore[arg-type]


def detect(c: Ctx) -> Run:
    stages = _stages(c)

    def go() -> dict[str, Any]:
        batch = stages.detect()
        assert batch is not None, "nothing new to ingest"
        c.save("batch", batch)
        return {"sources": len(batch.sources), "bytes_in": batch.bytes}
    return go


def _latest(c: Ctx) -> Any:
    latest = latest_manifest(c.plain, c.cfg.prefix)  # type: ignore[arg-type]
    if latest is not None:
        latest.batches  # noqa: B018 - read before the timer (the version read stage's cost)
    return latest


def convert(c: Ctx) -> Run:
    import pyspark.sql.connect.session  # noqa: F401 - the client's import is set-up

    from shardline.tasks.convert.spark import close_sessions
    batch, stages = c.load("batch"), _stages(c, _latest(c))

    def go() -> dict[str, Any]:
        try:
            conv = stages.convert(batch, c.p["run_id"])
        finally:
            close_sessions(c.p["spark"])
        c.save("conv", conv)
        # what the Spark tasks read and wrote (in the workers, not through this process's
        # store): the batch's sources in, its staged shards and row files out
        for src in batch.sources:
            c.counts.add("get", src.key, src.size)
        for sh in conv.data_shards + conv.quarantine_shards:
            c.counts.add("put", sh.path, sh.bytes)
        for f in conv.row_files:
            c.counts.add("put", f.key, f.bytes)
        return {"rows_ok": conv.rows_ok, "rows_quarantined": conv.rows_quarantined,
                "shards": len(conv.data_shards), "timings": conv.timings}
    return go


def dedupe(c: Ctx) -> Run:
    """What convert's driver does after the Spark job: the new ids against the published
    id index, one id-bucket range of the tasks' row files at a time (``dedupe_batch``; its
    id file goes to a key of its own, so publish still copies convert's)."""
    from shardline.core.schema import staging_prefix
    from shardline.tasks.convert.dedupe import dedupe_batch
    from shardline.tasks.convert.rowfiles import staged_ids_key

    conv, latest = c.load("conv"), _latest(c)
    batches = latest.batches if latest else []
    key = staged_ids_key(staging_prefix(c.cfg.prefix, c.p["run_id"]) + "bench-")

    def go() -> dict[str, Any]:
        done = dedupe_batch(c.store, c.cfg, c.p["run_id"], conv.row_files,  # type: ignore[arg-type]
                            [b.ids_path for b in batches], conv.data_shards, key)
        assert not done.dropped, "the bench's new batch repeats no id"
        return {"new_ids": done.ids, "published_files": len(batches), "found": done.count}
    return go


def validate(c: Ctx) -> Run:
    import great_expectations  # noqa: F401 - the import (~200 MB) is set-up, not the suites

    conv, stages = c.load("conv"), _stages(c)

    def go() -> dict[str, Any]:
        report = stages.validate(conv)
        c.save("report", report)
        return {"success": report.success, "rows": conv.rows_in}
    return go


def publish(c: Ctx) -> Run:
    from shardline.core import layout

    conv, report, stages = c.load("conv"), c.load("report"), _stages(c)

    def go() -> dict[str, Any]:
        pub = stages.publish(conv, report)
        info = c.plain.head(layout.version_key(c.cfg.prefix, pub.version))  # type: ignore[union-attr]
        return {"version": pub.version, "rows": pub.rows_published,
                "new_shards": len(pub.new_shards), "doc_bytes": info.size if info else None}
    return go


def read(c: Ctx) -> Run:
    """What ``shardline versions`` / ``Dataset.version()`` read: the latest document, its
    batches (the checkpoint), its own batch list and the schema."""
    def go() -> dict[str, Any]:
        m = latest_manifest(c.store, c.cfg.prefix)  # type: ignore[arg-type]
        assert m is not None
        return {"version": m.version, "batches": len(m.batches), "new": len(m.new()),
                "classes": len(m.schema.classes), "rows": m.rows}
    return go


def _plan(m: Any, prefix: str) -> Any:
    from shardline.trainer.plan import make_plan
    from shardline.trainer.trust import check_shard_columns

    check_shard_columns(m.shard_columns, prefix, f"v{m.version}")
    return make_plan(m, m.version - 1 if m.version > 1 else None, 0.3, None, seed=7)


def plan(c: Ctx) -> Run:
    """The trainer's plan for the latest version, the parent model trained on the one
    before: the document, every batch list (replay samples all of history), trust check."""
    if c.p.get("folder"):                       # the synthetic 100k-shard history
        folder = counting_folder(c.p["folder"])
        c.counts = folder.counts

        def open_() -> Any:
            from shardline.core.manifest import Manifest
            from shardline.core.version_doc import decode
            key = c.p["doc_key"]
            return Manifest(decode(folder.get_bytes(key), key), folder.get_bytes, key)
    else:
        def open_() -> Any:
            return latest_manifest(c.store, c.cfg.prefix)  # type: ignore[arg-type]

    def go() -> dict[str, Any]:
        m = open_()
        p = _plan(m, c.cfg.prefix)
        return {"shards": len(p.shards), "batches": len(m.batch_lists),
                "new": sum(s.role == "new" for s in p.shards)}
    return go


def evaluate(c: Ctx) -> Run:
    """The evaluation pass over a warm local cache, as ``trainer.loader.eval_batches`` walks
    it: every shard of ``plan.eval_shards`` opened (memory map), indexed (ids hashed), its
    held-out rows picked and their pixels gathered. The model's forward pass is left out.
    Synthetic history shards have no bytes; each is stood in by the first rows (as many
    as the entry says) of a real shard of the measured batch, of the same split."""
    import pyarrow.ipc as ipc

    from shardline.trainer.shard_file import OpenShard

    m = latest_manifest(c.plain, c.cfg.prefix)  # type: ignore[arg-type]
    assert m is not None
    p = _plan(m, c.cfg.prefix)
    local = c.work / "eval"
    local.mkdir(exist_ok=True)
    real: dict[str, Path] = {}
    by_split: dict[str | None, Path] = {}
    for s in m.new():                            # the trainer's cache, filled beforehand
        real[s.path] = local / s.sha256
        real[s.path].write_bytes(c.plain.get_bytes(s.path))  # type: ignore[union-attr]
        by_split.setdefault(s.split, real[s.path])
    stand_in: dict[tuple[str | None, int], Path] = {}
    for s in p.eval_shards:                      # synthetic: the first rows of a real shard
        key = (s.split, s.entry.rows)
        if s.entry.path in real or key in stand_in:
            continue
        src = by_split.get(s.split) or next(iter(real.values()))
        with ipc.open_file(pa.memory_map(str(src))) as f:
            table = f.read_all()
        stand_in[key] = local / f"stand-in-{s.split}-{s.entry.rows}.arrow"
        with ipc.new_file(str(stand_in[key]), table.schema) as w:
            w.write_table(table.slice(0, s.entry.rows))
    shape = tuple(c.cfg.image.shape)
    nbytes = int(np.prod(shape))

    def go() -> dict[str, Any]:
        held = opened = 0
        for s in p.eval_shards:
            path = real.get(s.entry.path) or stand_in[s.split, s.entry.rows]
            shard = OpenShard(path, shape)
            rows = p.holdout_rows(shard.index(), s)
            seg, off = shard.locate(rows)
            out = np.empty((len(rows), nbytes), np.uint8)
            for k in np.unique(seg).tolist():
                pick = seg == k
                out[pick] = shard.segments[k][0][off[pick]]
            c.counts.add("get", "x/shards/" + s.entry.path, path.stat().st_size)
            held += len(rows)
            opened += 1
            shard.close()
        return {"shards": opened, "heldout_rows": held}
    return go


def ids(c: Ctx) -> Run:
    """The duplicate check against a synthetic published-id index in a local folder
    (``bench.scale_ids`` layout): ``new`` ids, ``overlap`` of them already published."""
    import pyarrow as pa

    from shardline.core.parts import BatchEntry
    from shardline.tasks.ledger import published_in

    folder = counting_folder(c.p["folder"])
    c.counts = folder.counts
    files, per, new, dup = c.p["files"], c.p["per_file"], c.p["new"], c.p["duplicates"]
    rng = np.random.default_rng(0)
    fresh = [f"batch{files:05d}-row{x:09d}" for x in range(new - dup)]
    old = [f"batch{b:05d}-row{i:09d}" for b, i in zip(rng.integers(0, files, dup).tolist(),
                                                      rng.integers(0, per, dup).tolist(),
                                                      strict=True)]
    arr = pa.array(fresh + old, pa.string())
    entries = [BatchEntry(id=str(b), version=b + 1, rows=per, quarantined=0,
                          ids_path=f"ids/batch={b:05d}.arrow", sources=1)
               for b in range(files)]

    def go() -> dict[str, Any]:
        mask = published_in(folder, entries, arr)
        found = int(mask.sum())
        assert found == len(set(old)), (found, len(set(old)))
        return {"published_ids": files * per, "new_ids": new, "found": found,
                "arrow_pool_peak_mb": pa.default_memory_pool().max_memory() / 2**20}
    return go


STAGES: dict[str, Callable[[Ctx], Run]] = {
    "detect": detect, "convert": convert, "dedupe": dedupe, "validate": validate,
    "publish": publish, "read": read, "plan": plan, "evaluate": evaluate, "ids": ids}


class Sampler:
    """The highest RSS seen while the stage runs (sampled every 5 ms)."""

    def __init__(self) -> None:
        self.peak = rss()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss())

    def stop(self) -> int:
        self._stop.set()
        self._t.join()
        return max(self.peak, rss())


def main(argv: list[str]) -> int:
    stage, params, out = argv
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    t_setup = time.perf_counter()
    c = Ctx(json.loads(Path(params).read_text()))
    go = STAGES[stage](c)
    t_setup = time.perf_counter() - t_setup
    gc.collect()
    base = rss()
    sampler = Sampler()
    c0, t0 = time.process_time(), time.perf_counter()
    extra = go()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = sampler.stop()
    Path(out).write_text(json.dumps({
        "stage": stage, "wall_s": wall, "cpu_s": cpu, "setup_s": t_setup,
        "peak_rss_mb": peak / 2**20,
        "stage_rss_mb": max(0, peak - base) / 2**20, "base_rss_mb": base / 2**20,
        "process_max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "counts": c.counts.to_dict(), **extra}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
