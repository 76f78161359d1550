"""Compaction, part 3: the id files of batches whose masked rows a compaction drops.

Applying a deletion vector removes the row from the shards; its id is still in the batch's
id file (``tasks.id_index``: the duplicate check's index) and would keep the deleted id in
the bucket, and refused as ``duplicate_id`` if it came again. So each such batch gets a new
id file without the ids of its masked rows (read from the masked positions of its shards),
under a key of this run and parent version; the compaction's version names it instead of the
old one (which vacuum removes once no kept version names it), and the batch's id range (a
zone map that may hold a deleted id) is dropped from its reference.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from shardline.core import layout
from shardline.core.manifest import Manifest
from shardline.core.store import Store
from shardline.tasks.compact_plan import Group
from shardline.tasks.id_index import encode_ids
from shardline.tasks.locate import read_ids_of


def pruned_id_files(store: Store, prefix: str, parent: Manifest, groups: list[Group],
                    run: str) -> dict[str, tuple[str, bytes]]:
    """Batch id -> (key, bytes) of its id file without the ids its groups' masks drop."""
    gone: dict[str, list[pa.Array]] = {}
    for g in groups:
        for s in g.inputs:
            rows = g.masked.get(s.path)
            if rows is not None and len(rows):
                ids, _ = read_ids_of(store, s)
                gone.setdefault(g.batch, []).append(ids.take(pa.array(np.asarray(rows))))
    out: dict[str, tuple[str, bytes]] = {}
    for batch, parts in gone.items():
        entry = parent.batch(batch)
        if entry is None:
            continue
        table = ipc.open_file(pa.py_buffer(store.get_bytes(entry.ids_path))).read_all()
        ids = table.column("id").combine_chunks()
        drop = pa.concat_arrays(parts).cast(pa.string())
        keep = ids.filter(pc.invert(pc.is_in(ids, value_set=drop)))
        key = layout.ids_key(prefix, batch, f"{run}-v{parent.version:06d}")
        out[batch] = key, encode_ids(keep)
    return out
