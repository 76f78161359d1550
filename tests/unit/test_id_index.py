"""The hash-bucketed published-id index: exact membership against brute force, old
(unbucketed) id files still read, and only the buckets the new batch needs fetched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from shardline.core.counting_store import CountingStore
from shardline.core.errors import StoreError
from shardline.core.folder_store import FolderStore
from shardline.tasks import id_index


@pytest.fixture
def store(tmp_path: Path) -> CountingStore:
    """A folder store counting the index's reads (bytes per key)."""
    return CountingStore(FolderStore(tmp_path))


def _read(store: CountingStore) -> dict[str, dict[str, int]]:
    return store.counts.to_dict().get("get", {})


def _ids(prefix: str, n: int) -> pa.Array:
    return pa.array([f"{prefix}-{i}" for i in range(n)], pa.string())


def _legacy(ids: pa.Array) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, id_index.IDS_SCHEMA) as w:
        w.write_table(pa.table({"id": ids}), max_chunksize=700)
    return sink.getvalue().to_pybytes()


def test_bucketed_file_holds_each_id_once_in_its_bucket() -> None:
    ids = _ids("a", 5000)
    with ipc.open_file(pa.BufferReader(id_index.encode_ids(ids))) as f:
        assert f.num_record_batches == id_index.ID_BUCKETS
        assert int(f.schema.metadata[id_index.BUCKETS_KEY]) == id_index.ID_BUCKETS
        seen = []
        for k in range(f.num_record_batches):
            col = f.get_batch(k).column(0)
            assert (id_index.buckets_of(col) == k).all()
            seen += col.to_pylist()
    assert sorted(seen) == sorted(ids.to_pylist())


def test_membership_is_exact_over_new_and_legacy_files(store: CountingStore) -> None:
    published = [_ids(f"b{j}", 3000) for j in range(5)]
    for j, ids in enumerate(published):
        store.put_bytes(f"ids/{j}.arrow", _legacy(ids) if j == 2 else id_index.encode_ids(ids))
    rng = np.random.default_rng(1)
    new = pa.array([f"b{rng.integers(0, 7)}-{rng.integers(0, 4000)}" for _ in range(4000)])
    mask = id_index.published_mask(store, [f"ids/{j}.arrow" for j in range(5)], new)
    everything = {i for ids in published for i in ids.to_pylist()}
    assert mask.tolist() == [i in everything for i in new.to_pylist()]
    assert mask.any() and not mask.all()


def test_only_the_needed_buckets_of_a_large_file_are_read(monkeypatch, store) -> None:
    monkeypatch.setattr(id_index, "WHOLE_FILE_BYTES", 1000)
    body = id_index.encode_ids(_ids("x", 50_000))
    store.put_bytes("ids/big.arrow", body)
    new = pa.array(["x-7", "x-123", "nope"])
    mask = id_index.published_mask(store, ["ids/big.arrow"], new)
    assert mask.tolist() == [True, True, False]
    read = _read(store)["ids/big.arrow"]
    assert read["n"] > 1 and read["bytes"] < len(body) / 8    # a few buckets, not the file
    assert id_index.published_mask(store, [], new).tolist() == [False] * 3


def test_a_small_file_is_one_get_and_a_missing_one_is_named(store: CountingStore) -> None:
    body = id_index.encode_ids(_ids("a", 1000))
    store.put_bytes("ids/a.arrow", body)
    new = _ids("a", 1500)
    mask = id_index.published_mask(store, ["ids/a.arrow"], new)
    assert mask.tolist() == [True] * 1000 + [False] * 500
    assert _read(store) == {"ids/a.arrow": {"n": 1, "bytes": len(body)}}
    with pytest.raises(StoreError, match="ids/gone.arrow: the id index .* missing"):
        id_index.published_mask(store, ["ids/gone.arrow"], new)
