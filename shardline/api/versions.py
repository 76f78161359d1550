"""Version listings from the version documents alone (no batch lists, no shard reads)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from shardline.core.manifest import Manifest, list_versions, read_manifest
from shardline.core.store import Store


def version_row(m: Manifest) -> dict[str, Any]:
    batch = m.new_batch
    validation = m.validation
    return {
        "version": m.version, "created": m.created_at, "batch": batch.id if batch else None,
        "new_rows": m.new_rows, "rows": m.rows, "shards": m.totals.shards, "bytes": m.bytes,
        "quarantined": m.quarantine.rows,
        "validation": "passed" if validation.get("success") else "failed",
    }


def version_rows(store: Store, prefix: str) -> list[dict[str, Any]]:
    """One row per committed version under ``prefix``, latest first."""
    numbers = list_versions(store, prefix)
    if not numbers:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(numbers))) as pool:
        manifests = list(pool.map(lambda v: read_manifest(store, prefix, v), numbers))
    return [version_row(m) for m in sorted(manifests, key=lambda m: -m.version)]
