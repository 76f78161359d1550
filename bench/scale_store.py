"""The scale bench's stores: the S3 store or a local folder (for the synthetic sizes),
counting what a stage reads and writes by kind of object (``CountingStore``).

Counts are the deterministic side of a measurement (times vary with the machine's load):
requests and bytes per *kind* of key, so a stage's reads of the history (id files, batch
lists, claims) can be told apart from its reads of the new data.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shardline.core import counting_store
from shardline.core.counting_store import CountingStore
from shardline.core.folder_store import FolderStore
from shardline.core.store import Store

# key fragment -> kind (first match wins; the order matters: "/manifests/checkpoint-" before
# "/manifests/", the latest-version hint before the version documents beside it, pending
# upload keys (events/pending/incoming/...) before the uploads)
KINDS = (("/events/pending/", "pending_key"), ("/ledger/listing", "listing_mark"),
         ("/sweep/clock", "store_clock"), ("/versions/latest", "latest_hint"),
         ("/versions/", "version_doc"),
         ("/manifests/checkpoint-", "checkpoint"),
         ("/manifests/batch=", "batch_list"), ("/manifests/", "schema_config"),
         ("/ids/", "id_index"), ("/batches/", "claim"),
         ("/ledger/claims-", "claims_checkpoint"), ("/staging/", "staging"),
         ("/shards/", "shard"), ("/quarantine/", "quarantine"), ("/reports/", "report"),
         ("incoming/", "incoming"))


def kind_of(key: str) -> str:
    key = "/" + key
    for frag, kind in KINDS:
        if frag in key:
            return kind
    return "other"


# Requests and bytes per (operation, kind of key: KINDS); thread-safe.
Counts = functools.partial(counting_store.Counts, kind_of)


def total(counts: dict[str, Any], op: str, kinds: Iterable[str] | None = None,
          field: str = "n", exclude: Iterable[str] = ()) -> int:
    """Sum of ``field`` over ``kinds`` (all when None) of operation ``op``."""
    cells = counts.get(op, {})
    skip = set(exclude)
    want = set(cells) if kinds is None else set(kinds)
    return sum(int(v[field]) for k, v in cells.items() if k in want and k not in skip)


def counting(store: Store) -> CountingStore:
    """``store`` counting its requests per kind of key."""
    return CountingStore(store, Counts())


def counting_folder(root: str | Path) -> CountingStore:
    """The folder ``root`` as a store, counting (the synthetic 10M/100M-id indexes and the
    100k-shard history live on local disk)."""
    return counting(FolderStore(root))
