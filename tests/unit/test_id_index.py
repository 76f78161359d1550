"""The hash-bucketed published-id index: exact membership against brute force, old
(unbucketed) id files still read, and only the buckets the new batch needs fetched."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core.store import ObjectInfo
from shardline.tasks import id_index


@dataclass
class FileStore:
    """get_bytes (whole or ranged) and head over a dict: the calls the index makes."""

    objects: dict[str, bytes] = field(default_factory=dict)
    gets: list[tuple[str, int]] = field(default_factory=list)

    bucket = "test"

    def get_bytes(self, key: str, range_: tuple[int, int] | None = None,
                  if_match: str | None = None) -> bytes:
        assert if_match in (None, "e")       # ranged reads pin the version head() gave
        data = self.objects[key]
        if range_ is None:
            self.gets.append((key, len(data)))
            return data
        self.gets.append((key, range_[1] - range_[0] + 1))
        return data[range_[0]:range_[1] + 1]

    def head(self, key: str) -> ObjectInfo | None:
        data = self.objects.get(key)
        return None if data is None else ObjectInfo(key, "e", len(data), dt.datetime.now(dt.UTC))

    def uri(self, key: str) -> str:
        return f"s3://test/{key}"


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


def test_membership_is_exact_over_new_and_legacy_files() -> None:
    store = FileStore()
    published = [_ids(f"b{j}", 3000) for j in range(5)]
    for j, ids in enumerate(published):
        store.objects[f"ids/{j}.arrow"] = (_legacy(ids) if j == 2 else id_index.encode_ids(ids))
    rng = np.random.default_rng(1)
    new = pa.array([f"b{rng.integers(0, 7)}-{rng.integers(0, 4000)}" for _ in range(4000)])
    mask = id_index.published_mask(store, list(store.objects), new)  # type: ignore[arg-type]
    everything = {i for ids in published for i in ids.to_pylist()}
    assert mask.tolist() == [i in everything for i in new.to_pylist()]
    assert mask.any() and not mask.all()


def test_only_the_needed_buckets_of_a_large_file_are_read(monkeypatch) -> None:
    monkeypatch.setattr(id_index, "WHOLE_FILE_BYTES", 1000)
    store = FileStore()
    store.objects["ids/big.arrow"] = id_index.encode_ids(_ids("x", 50_000))
    new = pa.array(["x-7", "x-123", "nope"])
    mask = id_index.published_mask(store, ["ids/big.arrow"], new)  # type: ignore[arg-type]
    assert mask.tolist() == [True, True, False]
    read = sum(n for _, n in store.gets)
    assert read < len(store.objects["ids/big.arrow"]) / 8     # a few buckets, not the file
    assert id_index.published_mask(store, [], new).tolist() == [False] * 3  # type: ignore[arg-type]


def test_a_small_file_is_one_get_and_a_missing_one_is_named() -> None:
    store = FileStore()
    store.objects["ids/a.arrow"] = id_index.encode_ids(_ids("a", 1000))
    new = _ids("a", 1500)
    mask = id_index.published_mask(store, ["ids/a.arrow"], new)  # type: ignore[arg-type]
    assert mask.tolist() == [True] * 1000 + [False] * 500
    assert store.gets == [("ids/a.arrow", len(store.objects["ids/a.arrow"]))]
    import pytest

    from shardline.core.errors import StoreError
    with pytest.raises(StoreError, match="ids/gone.arrow: the id index .* missing"):
        id_index.published_mask(store, ["ids/gone.arrow"], new)  # type: ignore[arg-type]
