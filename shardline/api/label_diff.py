"""Which ids a range of versions changed: corrected (old and new label) and deleted.

Read from the newer version's deletions index (``core.deletions``): every vector written
after the older version names rows that were live then and are not now. Those rows are read
from their shards (id, label: only the touched shards), and the corrections batches added
in the range (the batches of the versions that wrote those vectors) give each corrected
id's new row. An id masked in the range with a live row in the newer version was
corrected; one without was deleted. A compaction in the range applies the masks and drops
the vectors, so changes before it are not listed (``complete`` is False then); so does an
erasure (``tasks.erase``), whose ids no object keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core.errors import StoreError
from shardline.core.manifest import Manifest, resolve_version
from shardline.core.replace import is_compaction, is_erasure
from shardline.core.store import Store


@dataclass(frozen=True)
class LabelChanges:
    """Ids changed between two versions, with labels (class indices; names where known)."""

    changed: list[dict[str, Any]] = field(default_factory=list)   # id, old, new
    deleted: list[dict[str, Any]] = field(default_factory=list)   # id, old
    complete: bool = True        # False: a compaction in the range applied earlier masks

    def to_dict(self) -> dict[str, Any]:
        return {"changed": self.changed, "deleted": self.deleted, "complete": self.complete}


def _columns(store: Store, path: str) -> tuple[list[str], list[Any]]:
    table = ipc.open_file(pa.py_buffer(store.get_bytes(path))).read_all()
    labels = table.column("label").to_pylist() if "label" in table.column_names \
        else [None] * table.num_rows
    return table.column("id").to_pylist(), labels


def _name(classes: list[str], label: Any) -> Any:
    if isinstance(label, int) and 0 <= label < len(classes):
        return classes[label]
    return label


def label_changes(store: Store, older: Manifest, newer: Manifest,
                  compacted: bool = False) -> LabelChanges:
    """The ids ``newer`` changed since ``older`` (``compacted``: a compaction lies between)."""
    refs = [r for r in newer.deletion_refs if older.version < r.version <= newer.version]
    if not refs:
        return LabelChanges(complete=not compacted)
    masks = newer.masks({r.shard for r in refs})
    before = older.masks({r.shard for r in refs}) if older.doc.deletions else {}
    added_in = {b.id: b.version for b in newer.batches}
    old: dict[str, Any] = {}            # rows live in ``older`` (their batch is as old)
    for shard in sorted({r.shard for r in refs if added_in.get(r.batch, 0) <= older.version}):
        rows = np.setdiff1d(masks[shard], before.get(shard, np.empty(0, np.int64)))
        ids, labels = _columns(store, shard)
        for i in rows.tolist():
            old.setdefault(ids[i], labels[i])
    versions = {r.version for r in refs}
    new: dict[str, Any] = {}
    live = newer.masks()
    for bl in newer.read_lists([r for r in newer.batch_lists if r.version in versions]):
        for s in bl.shards:
            ids, labels = _columns(store, s.path)
            gone = set(live.get(s.path, np.empty(0, np.int64)).tolist())
            for i, (rid, lab) in enumerate(zip(ids, labels, strict=True)):
                if rid in old and i not in gone:
                    new[rid] = lab
    classes = list(newer.schema.classes)
    return LabelChanges(
        changed=[{"id": k, "old": _name(classes, v), "new": _name(classes, new[k])}
                 for k, v in sorted(old.items()) if k in new],
        deleted=[{"id": k, "old": _name(classes, v)} for k, v in sorted(old.items())
                 if k not in new],
        complete=not compacted)


def compaction_between(read: Any, older: int, newer: int) -> bool:
    """Whether a version in (older, newer] is a compaction (``read``: version -> Manifest);
    a version that cannot be read (expired, an older format) counts as one: its changes
    cannot be vouched for."""
    for v in range(older + 1, newer + 1):
        try:
            m = read(v)
            if is_compaction(m) or is_erasure(m):     # vectors dropped; erased ids unknown
                return True
        except StoreError:
            return True
    return False


def changes_between(store: Store, prefix: str, older: Manifest, newer: Manifest
                    ) -> LabelChanges:
    """Ids corrected and deleted from ``older`` to ``newer`` (none unless it is later)."""
    if newer.version <= older.version:
        return LabelChanges()
    compacted = compaction_between(lambda v: resolve_version(store, prefix, v),
                                   older.version, newer.version)
    return label_changes(store, older, newer, compacted)
