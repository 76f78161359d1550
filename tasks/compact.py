"""Compaction: rewrite the small shards of published batches into large ones, as a new
version with the same rows and ids (and new digests).

    plan (tasks.compact_plan)  ->  rewrite + verify each output (tasks.compact_rewrite)
    ->  build the version (shardline.core.replace)  ->  commit_version (If-None-Match)

Nothing a reader can see changes until the commit: the new shards and batch lists are under
keys no version names yet. The replaced shards and batch lists stay where they are, so
readers of older versions keep working; the sweep (``tasks.sweep``) removes them once the
compaction is older than ``retain_replaced_minutes``.

Racing publishers: when an ingest (or another compaction) commits the version number first,
compaction re-reads the latest version, plans again on it and retries. A group whose input
shards are unchanged reuses the shard already written for it (its identity is its batch and
its inputs' digests); a group another compaction already rewrote is no longer small and
drops out. Shards written for groups that did not make it are deleted right away (no
version names them). When the commit's reply is lost but the document is ours, it counts
as committed. Re-running on a compacted dataset plans nothing and publishes nothing.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from shardline.core.builder import commit_or_lost
from shardline.core.config import DatasetConfig
from shardline.core.errors import PublishConflict, StoreError
from shardline.core.manifest import Manifest, latest_manifest
from shardline.core.parts import ShardEntry
from shardline.core.replace import Rewrite, build_compaction
from shardline.core.schema import data_schema
from shardline.core.store import Store
from shardline.tasks.compact_ids import pruned_id_files
from shardline.tasks.compact_plan import CompactionPlan, Group, MiB, plan
from shardline.tasks.compact_rewrite import output_key, rewrite_bin

log = logging.getLogger(__name__)

WORKERS = 4                # bins rewritten at once
IN_FLIGHT_TARGETS = 2      # input bytes in flight, in target sizes


@dataclass(frozen=True)
class CompactResult:
    dataset: str
    version: int | None          # the compaction version (None: nothing committed)
    parent: int | None           # the version it was planned on
    created: bool
    dry_run: bool
    plan: dict[str, Any]
    seconds: float
    attempts: int
    bytes_out: int = 0
    deleted_unused: int = 0
    outputs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "version": self.version, "parent": self.parent,
                "created": self.created, "dry_run": self.dry_run, "seconds": self.seconds,
                "attempts": self.attempts, "bytes_out": self.bytes_out,
                "deleted_unused": self.deleted_unused, **self.plan}


def sizes(cfg: DatasetConfig, min_mb: float | None, target_mb: float | None) -> tuple[int, int]:
    """(min, target) bytes: the target defaults to ``shards.target_mb``, small to half of it."""
    target = float(target_mb if target_mb is not None else cfg.shards.target_mb)
    small = float(min_mb if min_mb is not None else target / 2)
    if target <= 0 or small <= 0:
        raise ValueError(f"--min-mb ({small}) and --target-mb ({target}) must be positive")
    return int(small * MiB), int(target * MiB)


def _schema(cfg: DatasetConfig, m: Manifest) -> pa.Schema:
    """The Arrow schema of the version's shards: recorded in its schema part, else the
    config's (which must then have the version's fingerprint)."""
    info = m.schema
    if info.ipc_b64:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(info.ipc_b64)))
    from shardline.core.schema import fingerprint

    schema = data_schema(cfg)
    if fingerprint(schema) != m.fingerprint:
        raise PublishConflict(f"version {m.version} of {m.dataset} records no Arrow schema and "
                              "the config's differs from its fingerprint; compact with the "
                              "config the dataset was written with")
    return schema


class _Budget:
    """Bytes in flight: ``hold(n)`` waits until ``n`` more fit (or nothing is held)."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0
        self.cond = threading.Condition()

    @contextlib.contextmanager
    def hold(self, n: int) -> Iterator[None]:
        with self.cond:
            self.cond.wait_for(lambda: self.used == 0 or self.used + n <= self.limit)
            self.used += n
        try:
            yield
        finally:
            with self.cond:
                self.used -= n
                self.cond.notify_all()


class _Outputs:
    """Output shards written by this run, by group identity (kept across retries)."""

    def __init__(self, store: Store, cfg: DatasetConfig, run: str, target_bytes: int):
        self.store, self.cfg, self.run, self.target_bytes = store, cfg, run, target_bytes
        self.done: dict[tuple[str, tuple[str, ...]], list[ShardEntry]] = {}
        self.parts: dict[str, int] = {}

    def for_groups(self, groups: list[Group], schema: pa.Schema) -> None:
        """Rewrite the bins of every group not rewritten yet: up to ``WORKERS`` at a time,
        with at most ``IN_FLIGHT_TARGETS`` target sizes of input in flight (one bin always
        runs), so memory stays bounded by the target, not by the plan."""
        jobs: list[tuple[Group, int, list[ShardEntry], str]] = []
        for g in groups:
            if g.identity in self.done:
                continue
            for i, inputs in enumerate(g.bins):
                part = self.parts[g.batch] = self.parts.get(g.batch, -1) + 1
                jobs.append((g, i, inputs, output_key(self.cfg.prefix, g.batch, part, self.run,
                                                      inputs[0].split)))
        budget = _Budget(IN_FLIGHT_TARGETS * self.target_bytes)

        def one(job: tuple[Group, int, list[ShardEntry], str]) -> ShardEntry:
            nbytes = sum(s.bytes for s in job[2])
            with budget.hold(nbytes):
                return rewrite_bin(self.store, self.cfg.prefix, job[2], key=job[3],
                                   schema=schema, compression=self.cfg.shards.compression,
                                   record_batch_rows=self.cfg.shards.record_batch_rows,
                                   masked=job[0].masked)

        try:
            with ThreadPoolExecutor(max_workers=WORKERS) as pool:
                written = list(pool.map(one, jobs))
        except BaseException:
            self.store.delete(j[3] for j in jobs)    # what did get written: no version names it
            raise
        by_group: dict[tuple[str, tuple[str, ...]], dict[int, ShardEntry]] = {}
        for (g, i, _, _), entry in zip(jobs, written, strict=True):
            by_group.setdefault(g.identity, {})[i] = entry
        for ident, got in by_group.items():
            self.done[ident] = [got[i] for i in sorted(got)]

    def outputs(self, g: Group) -> list[ShardEntry]:
        return self.done[g.identity]

    def unused(self, used: set[str]) -> list[str]:
        return [s.path for out in self.done.values() for s in out if s.path not in used]


def _rewrites(p: CompactionPlan, outs: _Outputs, schema: pa.Schema) -> dict[str, Rewrite]:
    outs.for_groups(p.groups, schema)
    by_batch: dict[str, Rewrite] = {}
    for g in p.groups:
        got = outs.outputs(g)
        rw = by_batch.get(g.batch)
        by_batch[g.batch] = Rewrite(g.batch, (rw.replaced if rw else []) + g.inputs,
                                    (rw.outputs if rw else []) + got,
                                    (rw.masked_rows if rw else 0) + g.masked_rows)
    return by_batch


def compact(store: Store, cfg: DatasetConfig, *, min_mb: float | None = None,
            target_mb: float | None = None, dry_run: bool = False, max_attempts: int = 20,
            run_id: str | None = None) -> CompactResult:
    """Compact the latest version of ``cfg``'s dataset (see the module docstring).

    Raises:
        StoreError: the dataset has no version, a shard is damaged, or a rewrite does not
            hold exactly the rows it replaces (then nothing is committed).
        PublishConflict: ``max_attempts`` lost races in a row.
    """
    t0 = time.perf_counter()
    min_b, target_b = sizes(cfg, min_mb, target_mb)
    run = run_id or f"compact{uuid.uuid4().hex[:8]}"
    outs = _Outputs(store, cfg, run, target_b)
    for attempt in range(1, max_attempts + 1):
        latest = latest_manifest(store, cfg.prefix)
        if latest is None:
            raise StoreError(f"no dataset versions under s3://{store.bucket}/{cfg.prefix}/; "
                             "nothing to compact")
        p = plan(latest, min_bytes=min_b, target_bytes=target_b,
                 max_rows=cfg.shards.max_rows)
        if dry_run or not p.groups:
            gone = store.delete(outs.unused(set()))
            log.info("%s v%d: %d shard(s), %s", cfg.name, latest.version, p.shards_before,
                     "dry run" if dry_run else "nothing to compact")
            return CompactResult(cfg.name, None, latest.version, False, dry_run, p.to_dict(),
                                 time.perf_counter() - t0, attempt, deleted_unused=gone)
        rewrites = _rewrites(p, outs, _schema(cfg, latest))
        draft = build_compaction(cfg.prefix, latest, rewrites, run, rows_rewritten=p.rows,
                                 id_files=pruned_id_files(store, cfg.prefix, latest,
                                                          p.groups, run))
        if time.perf_counter() - t0 > 0.9 * cfg.sweep_after_minutes * 60:
            # an ingest's sweep may already have taken the young-looking outputs as litter
            store.delete(outs.unused(set()))
            raise StoreError(f"compaction of {cfg.name} ran longer than 90% of "
                             f"sweep_after_minutes ({cfg.sweep_after_minutes:g}); nothing "
                             "was committed. Raise sweep_after_minutes for the run")
        m = commit_or_lost(store, draft, draft.run_objects)   # its batch lists, checkpoint
        if m is None:
            log.info("version %d was taken by a concurrent publisher (attempt %d); "
                     "planning again", draft.doc.version, attempt)
            continue
        used = {s.path for rw in rewrites.values() for s in rw.outputs}
        gone = store.delete(outs.unused(used))
        out_bytes = sum(s.bytes for rw in rewrites.values() for s in rw.outputs)
        log.info("compacted %s: version %d, %d -> %d shards (%d small shards of %d batches "
                 "-> %d), %d rows rewritten", cfg.name, m.version, p.shards_before,
                 p.shards_after, p.shards_in, len(p.batches), p.shards_out, p.rows)
        return CompactResult(cfg.name, m.version, latest.version, True, False, p.to_dict(),
                             time.perf_counter() - t0, attempt, bytes_out=out_bytes,
                             deleted_unused=gone, outputs=sorted(used))
    raise PublishConflict(f"compaction of {cfg.name}: gave up after {max_attempts} lost races "
                          "for a version number; run it again")
