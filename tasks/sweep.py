"""Sweep: remove what crashed or losing runs left behind, once it is old enough.

- ``staging/<run>/`` folders whose newest object is older than ``sweep_after_minutes``;
- objects under ``shards/``, ``quarantine/``, ``ids/`` and batch lists under
  ``manifests/`` that the latest version does not name (copies of a run that crashed before
  its commit, or lost a race) and are older than the same age. The latest version names
  every live file (its batch lists name every live shard; no batch is ever removed yet);
  young files are left alone because a publisher may be about to commit them. Checkpoints
  are kept: older versions' documents reference them.
- A compaction (``tasks.compact``) is the one commit that stops naming objects: the shards
  and batch lists it replaced. They are old files, so their age says nothing; what counts is
  how long ago they stopped being live. Every compaction committed within
  ``retain_replaced_minutes`` (default a day) keeps what its parent named, so readers of
  the version before a compaction have that long to finish; after it they are swept.
Readers never list these folders, so sweeping changes nothing they can see.

The orphan scan lists every shard, quarantine shard, id file and batch list: O(history).
An ingest run therefore asks for it only when the last scan is ``sweep_after_minutes`` old
(``full=False``; the time is kept in ``sweep/last-scan.json``): nothing younger than that
could be removed anyway, so an orphan still goes within two of those periods, and a day of
frequent uploads pays the listing a few dozen times, not once per upload. The staging
folders (only crashed runs' and the current one) are swept every time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.errors import StoreError
from shardline.core.manifest import Manifest, latest_manifest, read_manifest
from shardline.core.replace import is_compaction
from shardline.core.store import Store
from shardline.core.version_doc import UnsupportedFormat

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepResult:
    staging_runs: int
    staging_objects: int
    orphans: int
    scanned: bool = True          # the orphan scan ran (``full=False`` skips a recent one)


def sweep(store: Store, cfg: DatasetConfig, *, keep_run: str | None = None,
          now: datetime | None = None, full: bool = True) -> SweepResult:
    """Sweep stale staging runs, then (``full``, or when the last scan is
    ``sweep_after_minutes`` old) the orphans."""
    now = now or datetime.now(UTC)
    cutoff = now - timedelta(minutes=cfg.sweep_after_minutes)
    runs: dict[str, list] = {}
    root = layout.staging_prefix(cfg.prefix)
    for o in store.list(root):
        run = o.key[len(root):].split("/", 1)[0]
        runs.setdefault(run, []).append(o)
    stale_keys: list[str] = []
    stale_runs = 0
    for run, objs in runs.items():
        if run != keep_run and max(o.last_modified for o in objs) < cutoff:
            stale_runs += 1
            stale_keys.extend(o.key for o in objs)
    store.delete(stale_keys)
    if not full and not _scan_due(store, cfg, cutoff):
        if stale_runs:
            log.info("swept %d stale staging run(s) (%d objects); orphan scan not due",
                     stale_runs, len(stale_keys))
        return SweepResult(stale_runs, len(stale_keys), 0, scanned=False)
    latest = latest_manifest(store, cfg.prefix)
    live: set[str] = set()
    if latest is not None:
        live = _named(latest) | _replaced_recently(
            store, cfg, now - timedelta(minutes=cfg.retain_replaced_minutes))
    prefixes = [f"{cfg.prefix}/{folder}" for folder in layout.SWEPT_FOLDERS]
    prefixes.append(layout.batch_lists_prefix(cfg.prefix))
    orphans = [o.key for p in prefixes for o in store.list(p)
               if o.key not in live and o.last_modified < cutoff]
    store.delete(orphans)
    store.put_json(layout.sweep_marker(cfg.prefix), {"scanned_at": now.isoformat()})
    if stale_runs or orphans:
        log.info("swept %d stale staging run(s) (%d objects) and %d orphaned file(s)",
                 stale_runs, len(stale_keys), len(orphans))
    return SweepResult(stale_runs, len(stale_keys), len(orphans))


def _scan_due(store: Store, cfg: DatasetConfig, cutoff: datetime) -> bool:
    """No orphan scan since ``cutoff`` (or no readable record of one)."""
    try:
        last = datetime.fromisoformat(store.get_json(layout.sweep_marker(cfg.prefix))
                                      ["scanned_at"])
    except (StoreError, KeyError, TypeError, ValueError):
        return True
    return last.tzinfo is None or last < cutoff


def _named(m: Manifest) -> set[str]:
    """Every shard, quarantine shard, id file and batch list version ``m`` names."""
    live = {s.path for s in m.shards}
    live.update(s.path for s in m.quarantine.shards)
    live.update(b.ids_path for b in m.batches)
    live.update(r.key for r in m.batch_lists)
    return live


def _replaced_recently(store: Store, cfg: DatasetConfig, cutoff: datetime) -> set[str]:
    """What the parents of compactions committed after ``cutoff`` named (their replaced
    objects are still in their grace period)."""
    recent = [v for v in (layout.version_of_key(o.key) for o in
                          store.list(layout.versions_prefix(cfg.prefix))
                          if o.last_modified >= cutoff) if v is not None]
    keep: set[str] = set()
    for v in recent:
        try:
            m = read_manifest(store, cfg.prefix, v)
            if is_compaction(m) and m.parent is not None:
                keep |= _named(read_manifest(store, cfg.prefix, m.parent))
        except UnsupportedFormat:
            continue        # history before `shardline migrate`: not read any more
    return keep
