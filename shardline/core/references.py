"""Which objects a version references: the one answer every cleaner asks for.

A version is its document (``versions/v<N>.json``) plus everything it names, directly or
through what it names: the schema and config objects, its checkpoint, every live batch list,
the data and quarantine shards those list, each batch's id file, and the deletions index
with every deletion vector (``core.deletions``). An object none of the kept versions
references is garbage; one any kept version references must stay. The sweep
(``tasks.sweep``) and retention (expire / vacuum) both ask here, so a new kind of object is
added once.
"""

from __future__ import annotations

from shardline.core.manifest_view import Manifest


def referenced(m: Manifest) -> set[str]:
    """Every object key version ``m`` references (not its own document key).

    Reads the checkpoint, every batch list and the deletions index of ``m``: O(live batches
    + masked shards) small objects, no shard.
    """
    keys = {m.doc.schema.key}
    if m.doc.config is not None:
        keys.add(m.doc.config.key)
    if m.doc.checkpoint is not None:
        keys.add(m.doc.checkpoint.key)
    keys.update(r.key for r in m.batch_lists)
    keys.update(s.path for s in m.shards)
    keys.update(s.path for s in m.quarantine.shards)
    keys.update(b.ids_path for b in m.batches)
    if m.doc.deletions is not None:
        keys.add(m.doc.deletions.key)
        keys.update(r.key for r in m.deletion_refs)
    return keys
