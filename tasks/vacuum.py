"""Vacuum (``shardline vacuum``): remove every file no kept version references.

After ``shardline expire`` (``tasks.expire``) the kept versions are the documents under
``versions/`` that ``retention/expired.json`` does not list. What they reference is
``core.references.referenced`` of each (the same answer the sweep uses), and it stays.
Everything else under the dataset's data folders goes, with the sweep's time-safe rules
(``tasks.lease``, ``tasks.sweep``): age by the store's clock, never the host's; the window
``dataset.sweep_after_minutes`` (default 3 days, refused under a day at config load); a
running ingest's lease keeps its files whatever their age. In detail:

- ``shards/``, ``quarantine/``, ``ids/``, ``deletes/`` and ``manifests/`` (batch lists,
  checkpoints): removed when no kept version references them and they were written more
  than a window ago (a publish in flight writes its files before its commit; they are
  young) and belong to no live run. Schema and config objects are content-addressed: a
  publish may name an old one without writing it again (it exists), so they are never
  removed (small, and they hold no row);
- an expired version's document waits under ``retention/v<N>.json``: while it is younger
  than the window, what it referenced stays too (a reader that opened the version before it
  expired has that long to finish, as Delta's VACUUM keeps files a retention period after
  they were removed from the log); after that the document goes with those files;
- ``staging/<run>/`` folders of dead runs older than the window (``tasks.sweep.
  stale_staging``).

Quarantine shards stay while a kept version lists their batch (every later version does:
they record each rejected input row's fate). The ledger (``batches/``, ``ledger/``),
reports, leases and ``incoming/`` are not touched. A version in a format this shardline
does not read makes the vacuum refuse (its references are unknown): migrate first.

Reads every kept version's document, checkpoint and batch lists, each batch list once (a
shared cache: versions share most of them), and lists the data folders: O(history), meant
for a schedule or an operator, not for every ingest.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.errors import StoreError
from shardline.core.latest import list_versions
from shardline.core.manifest import Manifest
from shardline.core.references import referenced
from shardline.core.retention import read_expired
from shardline.core.store import Store
from shardline.core.version_doc import decode
from shardline.tasks.lease import live_runs, protected, store_now
from shardline.tasks.sweep import stale_staging

log = logging.getLogger(__name__)

# Folders under the dataset root whose objects exist only because a version references them.
DATA_FOLDERS = ("shards/", "quarantine/", "ids/", "deletes/", "manifests/")


@dataclass(frozen=True)
class VacuumResult:
    dataset: str
    kept_versions: list[int]
    grace_versions: list[int]          # expired less than a window ago: their files stay
    removed: list[str] = field(default_factory=list)     # keys (removed or, dry, to remove)
    removed_bytes: int = 0
    staging_runs: int = 0
    dry_run: bool = False

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        grace = (f"; files of {len(self.grace_versions)} version(s) expired within the "
                 "window kept" if self.grace_versions else "")
        return (f"{self.dataset}: {verb} {len(self.removed)} object(s) ({self.removed_bytes:,} "
                f"bytes; {self.staging_runs} stale staging run(s)) that none of the "
                f"{len(self.kept_versions)} kept version(s) references{grace}")


class ManifestCache:
    """One GET per object across every version read (batch lists are shared)."""

    def __init__(self, store: Store) -> None:
        self.store, self.data = store, dict[str, bytes]()

    def get(self, key: str) -> bytes:
        if key not in self.data:
            self.data[key] = self.store.get_bytes(key)
        return self.data[key]

    def manifest(self, key: str, fallback: str | None = None) -> Manifest:
        """The version document at ``key`` (at ``fallback`` when ``key`` is gone: a version
        expired since it was listed, whose document moved to ``retention/`` first)."""
        try:
            data = self.store.get_bytes(key)
        except StoreError:
            if fallback is None or self.store.head(key) is not None:
                raise
            key, data = fallback, self.store.get_bytes(fallback)
        return Manifest(decode(data, self.store.uri(key)), self.get, key)


def kept_versions(store: Store, prefix: str) -> list[int]:
    """The versions under ``versions/`` that no expiry lists (the latest always)."""
    listed = list_versions(store, prefix)
    record = read_expired(store, prefix)
    return [v for v in listed if v not in record or v == listed[-1]]


def vacuum(store: Store, cfg: DatasetConfig, *, now: datetime | None = None,
           dry_run: bool = False) -> VacuumResult:
    """Remove what no kept version of ``cfg``'s dataset references (module docstring).
    ``now``: the store's time (default: read from the store; tests move it forward).

    Raises:
        UnsupportedFormat: a kept version is in an older format (migrate first)."""
    now = now or store_now(store, cfg.prefix)
    window = timedelta(minutes=cfg.sweep_after_minutes)
    cutoff = now - window
    live = live_runs(store, cfg.prefix, now, window)
    cache = ManifestCache(store)
    kept = kept_versions(store, cfg.prefix)
    named: set[str] = set()
    for v in kept:
        named |= referenced(cache.manifest(layout.version_key(cfg.prefix, v),
                                           layout.expired_doc_key(cfg.prefix, v)))
    grace, doomed = _expired_docs(store, cfg.prefix, cutoff)
    for _, key in grace:
        named |= referenced(cache.manifest(key))
    keep_always = (layout.schema_key(cfg.prefix, ""), layout.config_key(cfg.prefix, ""))
    infos = [o for folder in DATA_FOLDERS for o in store.list(f"{cfg.prefix}/{folder}")
             if o.key not in named and o.last_modified < cutoff and not protected(o.key, live)
             and not o.key.startswith(tuple(k.removesuffix(".json") for k in keep_always))]
    runs, staging = stale_staging(store, cfg.prefix, now, window, live)
    removed = [o.key for o in infos] + doomed + staging
    size = sum(o.size for o in infos)
    if not dry_run:
        # data first, the expired documents last: a vacuum killed midway runs again whole
        store.delete([o.key for o in infos] + staging)
        store.delete(doomed)
        if removed:
            log.info("vacuumed %d object(s) of %s (%d bytes)", len(removed), cfg.name, size)
    return VacuumResult(cfg.name, kept, [v for v, _ in grace], removed, size, runs, dry_run)


def _expired_docs(store: Store, prefix: str,
                  cutoff: datetime) -> tuple[list[tuple[int, str]], list[str]]:
    """Expired versions' documents: (those younger than ``cutoff``: version and key; the
    older ones' keys, to remove)."""
    root = layout.retention_prefix(prefix)
    young: list[tuple[int, str]] = []
    old: list[str] = []
    for o in store.list(root):
        name = o.key[len(root):]
        if not (name.startswith("v") and name.endswith(".json") and name[1:-5].isdigit()):
            continue                      # the expiry record itself
        if o.last_modified >= cutoff:
            young.append((int(name[1:-5]), o.key))
        else:
            old.append(o.key)
    return young, old


