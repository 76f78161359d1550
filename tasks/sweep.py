"""Sweep: remove what crashed or losing runs left behind, once it is old enough.

Age is judged by the store's clock, never the local one (``tasks.lease.store_now``: the
``LastModified`` of a marker the sweep writes), so a host whose clock runs ahead sweeps
exactly what a correct one would. The window, ``sweep_after_minutes``, defaults to three
days (Iceberg's orphan cleanup; Delta's VACUUM keeps seven) and may not go under a day
(``core.config_model.SWEEP_FLOOR_MINUTES``): a run slower than the window could otherwise
lose its own files. A running ingest's lease (``tasks.lease``) keeps its staging and its
copies whatever their age. What goes:

- ``staging/<run>/`` folders whose newest object is older than the window and whose run
  holds no live lease;
- objects under ``shards/``, ``quarantine/``, ``ids/``, ``deletes/`` and batch lists under
  ``manifests/`` that the latest version does not name (``core.references.referenced``:
  copies of a run that crashed before its commit, or lost a race), older than the window
  and of no live run. The latest version names every live file (its batch lists name
  every live shard; no batch is ever removed yet; a deletion masks rows, no file stops
  being named). Checkpoints are kept: older versions' documents reference them.
- A compaction (``tasks.compact``) is the one commit that stops naming objects: the shards
  and batch lists it replaced. They are old files, so their age says nothing; what counts is
  how long ago they stopped being live. Every compaction committed within
  ``retain_replaced_minutes`` (default a day) keeps what its parent named, so readers of
  the version before a compaction have that long to finish; after it they are swept.
Readers never list these folders, so sweeping changes nothing they can see. Should a sweep
still take an object a publish is about to name, the publish's check before its commit
(``tasks.publish``) finds it missing and the driver runs the batch again.

The orphan scan lists every shard, quarantine shard, id file and batch list: O(history).
An ingest run therefore asks for it only when the last scan is a window old (``full=False``;
the store time of the scan is kept in ``sweep/last-scan.json``): nothing younger than that
could be removed anyway. The staging folders (only crashed runs' and the current one) are
swept every time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.errors import StoreError
from shardline.core.manifest import VersionExpired, latest_manifest, read_manifest
from shardline.core.references import referenced
from shardline.core.replace import is_compaction
from shardline.core.store import Store
from shardline.core.version_doc import UnsupportedFormat
from shardline.tasks.lease import live_runs, protected, stale, store_now

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepResult:
    staging_runs: int
    staging_objects: int
    orphans: int
    scanned: bool = True          # the orphan scan ran (``full=False`` skips a recent one)


def _local_now() -> datetime:
    return datetime.now(UTC)


def sweep(store: Store, cfg: DatasetConfig, *, keep_run: str | None = None,
          now: datetime | None = None, full: bool = True,
          clock: Callable[[], datetime] = _local_now) -> SweepResult:
    """Sweep stale staging runs, then (``full``, or when the last scan is a window old) the
    orphans. ``now``: the store's time (default: read from the store; tests move it
    forward); ``clock``: the local clock, only compared with the store's to log skew."""
    if now is None:
        now = store_now(store, cfg.prefix)
        _warn_skew(clock(), now)
    window = timedelta(minutes=cfg.sweep_after_minutes)
    cutoff = now - window
    live = live_runs(store, cfg.prefix, now, window) | ({keep_run} if keep_run else set())
    stale_runs, stale_keys = stale_staging(store, cfg.prefix, now, window, live)
    store.delete(stale_keys)
    if not full and not _scan_due(store, cfg, cutoff):
        if stale_runs:
            log.info("swept %d stale staging run(s) (%d objects); orphan scan not due",
                     stale_runs, len(stale_keys))
        return SweepResult(stale_runs, len(stale_keys), 0, scanned=False)
    latest = latest_manifest(store, cfg.prefix)
    named: set[str] = set()
    if latest is not None:
        named = referenced(latest) | _replaced_recently(
            store, cfg, now - timedelta(minutes=cfg.retain_replaced_minutes))
    prefixes = [f"{cfg.prefix}/{folder}" for folder in layout.SWEPT_FOLDERS]
    prefixes.append(layout.batch_lists_prefix(cfg.prefix))
    orphans = [o.key for p in prefixes for o in store.list(p)
               if o.key not in named and o.last_modified < cutoff
               and not protected(o.key, live)]
    store.delete(orphans)
    store.put_json(layout.sweep_marker(cfg.prefix), {"scanned_at": now.isoformat()})
    if stale_runs or orphans:
        log.info("swept %d stale staging run(s) (%d objects) and %d orphaned file(s)",
                 stale_runs, len(stale_keys), len(orphans))
    return SweepResult(stale_runs, len(stale_keys), len(orphans))


def stale_staging(store: Store, prefix: str, now: datetime, window: timedelta,
                  live: set[str]) -> tuple[int, list[str]]:
    """The staging runs whose newest object is older than ``window`` at store time ``now``
    and that hold no live lease: (how many runs, their object keys)."""
    runs: dict[str, list] = {}
    root = layout.staging_prefix(prefix)
    for o in store.list(root):
        run = o.key[len(root):].split("/", 1)[0]
        runs.setdefault(run, []).append(o)
    keys: list[str] = []
    count = 0
    for run, objs in runs.items():
        if not protected(f"{root}{run}/", live) and stale(
                max(o.last_modified for o in objs), now, window):
            count += 1
            keys.extend(o.key for o in objs)
    return count, keys


def _warn_skew(local: datetime, store_time: datetime) -> None:
    skew = (local - store_time).total_seconds()
    if abs(skew) > 300:
        log.warning("this host's clock is %+.0f s off the store's; the sweep judges age by "
                    "the store's clock", skew)


def _scan_due(store: Store, cfg: DatasetConfig, cutoff: datetime) -> bool:
    """No orphan scan since ``cutoff`` (or no readable record of one)."""
    try:
        last = datetime.fromisoformat(store.get_json(layout.sweep_marker(cfg.prefix))
                                      ["scanned_at"])
    except (StoreError, KeyError, TypeError, ValueError):
        return True
    return last.tzinfo is None or last < cutoff


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
                keep |= referenced(read_manifest(store, cfg.prefix, m.parent))
        except (UnsupportedFormat, VersionExpired):
            continue        # history before `shardline migrate`, or expired: not read
    return keep
