"""Version listings from the version documents alone (no batch lists, no shard reads), and
what changed between two versions."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from shardline.api.label_diff import LabelChanges
from shardline.core.manifest import Manifest, ShardEntry, list_versions, read_manifest
from shardline.core.store import Store
from shardline.core.version_doc import UnsupportedFormat


def version_row(m: Manifest) -> dict[str, Any]:
    batch = m.new_batch
    validation = m.validation
    return {
        "version": m.version, "created": m.created_at, "batch": batch.id if batch else None,
        "new_rows": m.new_rows, "rows": m.rows, "shards": m.totals.shards, "bytes": m.bytes,
        "quarantined": m.quarantine.rows,
        "updated": m.doc.changes.updated if m.doc.changes else 0,
        "deleted": m.doc.changes.deleted if m.doc.changes else 0,
        "validation": "passed" if validation.success else "failed",
    }


def _row(store: Store, prefix: str, version: int) -> dict[str, Any]:
    try:
        return version_row(read_manifest(store, prefix, version))
    except UnsupportedFormat as exc:       # history before `shardline migrate`
        return {"version": version, "created": None, "batch": None, "new_rows": None,
                "rows": None, "shards": None, "bytes": None, "quarantined": None,
                "updated": None, "deleted": None,
                "validation": f"format {exc.found}: not read"}


def version_rows(store: Store, prefix: str) -> list[dict[str, Any]]:
    """One row per committed version under ``prefix``, latest first (versions in an older
    manifest format: their number and format only)."""
    numbers = list_versions(store, prefix)
    if not numbers:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(numbers))) as pool:
        rows = list(pool.map(lambda v: _row(store, prefix, v), numbers))
    return sorted(rows, key=lambda r: -r["version"])


@dataclass(frozen=True)
class VersionDiff:
    """What changed between two versions of a dataset (shards are immutable files)."""

    dataset: str
    from_version: int
    to_version: int
    added: list[ShardEntry]
    removed: list[ShardEntry]
    added_batches: list[str]
    removed_batches: list[str]
    # ids corrected (old and new label) and deleted in between (``api.label_diff``)
    labels: LabelChanges = field(default_factory=LabelChanges)

    @property
    def rows_added(self) -> int:
        return sum(s.rows for s in self.added)

    @property
    def rows_removed(self) -> int:
        return sum(s.rows for s in self.removed)

    def to_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "from_version": self.from_version,
                "to_version": self.to_version, "rows_added": self.rows_added,
                "rows_removed": self.rows_removed, "added_batches": self.added_batches,
                "removed_batches": self.removed_batches,
                "shards_added": [s.path for s in self.added],
                "shards_removed": [s.path for s in self.removed], **self.labels.to_dict()}
