"""An erasure racing an ingest on moto: both land, once each, in some order (the loser of
the version number finds its ids again / rebases and retries); the erased ids are in no
live row and no live id file; the version verifies. Versions are published through the
builder ingest uses (``trainer_data.publish_version``), not Spark."""

from __future__ import annotations

import functools

import pyarrow as pa

import shardline
from shardline.core.manifest import Manifest, latest_manifest
from shardline.core.store import ObjectStore
from shardline.tasks.erase import EraseResult, erase_ids
from shardline.tasks.id_index import published_mask
from shardline.tasks.verify import verify
from tests.integration.test_delete import CFG, IDS, PER_BATCH, ingest_batch, race


def test_an_erasure_racing_an_ingest_loses_neither(store: ObjectStore) -> None:
    ingest_batch(store, 0)
    every: set[str] = set()
    for rnd in range(3):
        gone = [IDS[i] for i in range(rnd * 10, rnd * 10 + 5)]
        every.update(gone)
        out = race(store, rnd + 1, "erase", functools.partial(erase_ids, store, CFG, gone))
        assert isinstance(out["ingest"], Manifest), out
        assert getattr(out["erase"], "rows_deleted", None) == 5, out
        m = latest_manifest(store, CFG.prefix)
        assert m is not None and m.version == 1 + 2 * (rnd + 1)   # both landed, once each
        assert len(m.batches) == rnd + 2
        assert m.rows == PER_BATCH * (rnd + 2) - 5 * (rnd + 1)
        ids = shardline.open_dataset(CFG, store=store).to_table().column("id").to_pylist()
        assert len(ids) == m.rows and not every & set(ids)
        held = published_mask(store, [b.ids_path for b in m.batches], pa.array(sorted(every)))
        assert not held.any()
    assert verify(store, CFG).sound
    # the Python API erases by default as the CLI does
    r = shardline.delete_rows(CFG, [IDS[100]], store=store)
    assert isinstance(r, EraseResult) and (r.version, r.rows_deleted) == (8, 1)
