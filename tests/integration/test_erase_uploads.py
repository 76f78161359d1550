"""Which raw uploads an erasure removes (``tasks.erase.remove_uploads``), on moto: only an
object the ledger lists as consumed (its key and current ETag claimed by a published
version). One replaced since (another ETag: not ingested yet) or never claimed stays; one
gone already is skipped."""

from __future__ import annotations

from shardline.core.store import ObjectStore
from shardline.tasks.batch import Batch, Source, batch_id
from shardline.tasks.erase import remove_uploads
from shardline.tasks.ledger import write_claim
from tests.integration.ingest_helpers import dataset_config

IN = "incoming/digits/"


def test_only_consumed_uploads_are_removed(store: ObjectStore) -> None:
    cfg = dataset_config()
    keys = {n: f"{IN}{n}.jsonl" for n in ("consumed", "replaced", "unclaimed", "gone")}
    for k in keys.values():
        store.put_bytes(k, b'{"id": "x"}\n')
    heads = {n: store.head(k) for n, k in keys.items()}
    sources = tuple(Source(keys[n], heads[n].etag, heads[n].size, "jsonl")  # type: ignore[union-attr]
                    for n in ("consumed", "replaced", "gone"))
    write_claim(store, cfg, Batch(batch_id(sources), sources), 1)
    store.put_bytes(keys["replaced"], b'{"id": "y"}\n')          # new bytes, not ingested
    store.delete([keys["gone"]])

    removed, kept = remove_uploads(store, cfg, set(keys.values()))
    assert removed == [keys["consumed"]]
    assert kept == sorted([keys["replaced"], keys["unclaimed"]])
    assert store.head(keys["consumed"]) is None
    assert store.head(keys["replaced"]) is not None and store.head(keys["unclaimed"]) is not None
