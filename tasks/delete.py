"""Delete rows by id: a new version that masks them (``shardline delete``).

    locate (tasks.locate: id index -> touched batches -> their shards' id columns)
    -> build_deletion (core.change: a deletion vector per touched shard)
    -> commit_version (If-None-Match on the next version key, as every publish)

The cost follows what is touched: one id-file probe per live batch (the duplicate check's
index, ranged reads for large files), then only the shards of batches that hold an id
(their ``id`` column), then one small vector per touched shard and the deletions index. No
shard is rewritten; a compaction (``tasks.compact``) applies the masks later.

Ids that no live batch holds are refused before anything is written, the message naming
them. Ids whose rows are all masked already (an earlier deletion, or a correction) are
reported and skipped, so running the same deletion twice publishes one version. On a lost
race (an ingest, a compaction or another change committed the version number first) the
deletion locates its ids again on the new latest version and retries: both land, in some
order, each once.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from shardline.core import layout
from shardline.core.builder import commit_or_lost
from shardline.core.change import build_deletion
from shardline.core.config import DatasetConfig
from shardline.core.deletions import ChangeSummary
from shardline.core.errors import PublishConflict, ShardlineError, StoreError
from shardline.core.manifest import Manifest, latest_manifest
from shardline.core.store import Store
from shardline.tasks.locate import locate

log = logging.getLogger(__name__)


class DeleteRefused(ShardlineError):
    """The ids to delete include some no live row has; nothing was deleted."""


@dataclass(frozen=True)
class DeleteResult:
    dataset: str
    version: int | None             # the deletion version (None: nothing to delete)
    parent: int
    created: bool
    rows_deleted: int
    shards_touched: int
    already_deleted: list[str] = field(default_factory=list)
    attempts: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if not self.created:
            return (f"{self.dataset}: nothing to delete in v{self.parent} (the "
                    f"{len(self.already_deleted)} id(s) are deleted already)")
        skipped = (f"; {len(self.already_deleted)} id(s) were deleted already"
                   if self.already_deleted else "")
        return (f"{self.dataset} v{self.version}: {self.rows_deleted} row(s) deleted in "
                f"{self.shards_touched} shard(s) (deletion vectors; v{self.parent} unchanged)"
                f"{skipped}")


def read_ids(path: str | Path) -> list[str]:
    """Ids from a text file, one per line (blank lines skipped, surrounding spaces removed).

    Raises:
        DeleteRefused: the file cannot be read or holds no id.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DeleteRefused(f"--ids {path}: cannot read it ({exc}); pass a UTF-8 text file "
                            "with one id per line") from exc
    ids = list(dict.fromkeys(x.strip() for x in text.splitlines() if x.strip()))
    if not ids:
        raise DeleteRefused(f"--ids {path}: no id in it; pass a text file with one id per line")
    return ids


def _refuse_unknown(cfg: DatasetConfig, version: int, unknown: list[str]) -> None:
    if unknown:
        more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
        raise DeleteRefused(
            f"dataset {cfg.name} v{version}: id {unknown[0]!r}{more} is not in any live batch "
            "(never published, or quarantined at ingest); nothing was deleted. Remove it "
            "from the ids file and run the deletion again")


def latest_to_change(store: Store, cfg: DatasetConfig) -> Manifest:
    """The latest version, which a deletion or an erasure builds on.

    Raises:
        StoreError: the dataset has no version yet.
    """
    latest = latest_manifest(store, cfg.prefix)
    if latest is None:
        raise StoreError(f"no dataset versions under s3://{store.bucket}/{cfg.prefix}/; "
                         "nothing to delete")
    return latest


def delete_ids(store: Store, cfg: DatasetConfig, ids: list[str], *, run_id: str | None = None,
               max_attempts: int = 50) -> DeleteResult:
    """Publish the version after the latest without the rows of ``ids``.

    Raises:
        DeleteRefused: an id is not in any live batch (the message names it).
        StoreError: the dataset has no version, or a touched shard is damaged.
        PublishConflict: ``max_attempts`` lost races in a row.
    """
    run = run_id or f"delete{uuid.uuid4().hex[:8]}"
    wanted = pa.array(list(dict.fromkeys(ids)), pa.string())
    for attempt in range(1, max_attempts + 1):
        latest = latest_to_change(store, cfg)
        found = locate(store, latest, wanted)
        _refuse_unknown(cfg, latest.version, found.unknown)
        if not found.masked:
            log.info("%s v%d: every id is deleted already", cfg.name, latest.version)
            return DeleteResult(cfg.name, None, latest.version, False, 0, 0,
                                found.already_masked, attempt)
        changes = ChangeSummary(kind="delete", deleted=found.rows)
        draft = build_deletion(cfg.prefix, latest, found.masked, run, changes)
        m = commit_or_lost(store, draft, draft.objects)   # this run's vectors and index
        if m is None:
            log.info("version %d was taken by a concurrent publisher (attempt %d); "
                     "locating the ids again", draft.doc.version, attempt)
            continue
        log.info("deleted %d row(s) of %s in %d shard(s): version %d (%s)", found.rows,
                 cfg.name, len(found.masked), m.version,
                 store.uri(layout.version_key(cfg.prefix, m.version)))
        return DeleteResult(cfg.name, m.version, latest.version, True, found.rows,
                            len(found.masked), found.already_masked, attempt)
    raise PublishConflict(f"deletion in {cfg.name}: gave up after {max_attempts} lost races "
                          "for a version number; run it again")
