"""Zarr groups through a Spark task's own function (``convert_group``) on the folder store:
the reads, the proofs, the row checks and the staged shards are the ones an ingest runs,
without Spark's scheduling or the publish (issue 20). Each case checks that every row ends
exactly once: published bit for bit, or quarantined with its rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyarrow import ipc

from shardline.core.config import DatasetConfig, parse_config
from shardline.core.folder_store import FolderStore
from shardline.tasks.batch import Source
from shardline.tasks.convert import zarr_typed
from shardline.tasks.convert.job import convert_group
from shardline.tasks.convert.split import Part
from shardline.tasks.convert.zarr_typed import split_zarr

CLASSES = ["a", "b", "c"]
N = 100


def _cfg(bands: dict[str, Any] | None = None, **target: Any) -> DatasetConfig:
    spec = {"kind": "tensor", "dtype": "float32", "shape": [4, 4], **(bands or {})}
    return parse_config({"dataset": {
        "name": "z", "incoming": "in/z/", "id_column": "ids", "classes": CLASSES,
        "validation": {"max_quarantine_fraction": 1.0},
        "fields": {"bands": spec}, "target": {"kind": "class", **target}}}).dataset


def _write(store: FolderStore, name: str, arrays: dict[str, tuple[np.ndarray, dict]]) -> Source:
    """A Zarr v3 group ``in/z/<name>`` of ``arrays`` (name -> (values, create_array
    options)); its source as the driver would list it."""
    import zarr
    from zarr.storage import LocalStore

    g = zarr.open_group(store=LocalStore(store.root / "in/z" / name), mode="w")
    for key, (values, options) in arrays.items():
        arr = g.create_array(key, shape=values.shape,
                             dtype=str if values.dtype.kind == "U" else values.dtype, **options)
        arr[...] = values
    return Source(f"in/z/{name}/", "e", sum(v.nbytes for v, _ in arrays.values()), "zarr")


def _drop(store: FolderStore, src: Source, array: str, key: str) -> None:
    """Delete the stored object ``key`` (``c/...``) of ``array``: an upload that lost it."""
    path = store.root / src.key / array / key
    assert path.is_file(), path
    path.unlink()


def _convert(store: FolderStore, cfg: DatasetConfig, parts: tuple[Part, ...]
             ) -> tuple[pa.Table, pa.Table]:
    """The staged rows of one task: (published rows, quarantine rows)."""
    meta = convert_group(store, cfg, "run1", parts, 0).to_pylist()
    tables: dict[str, list[pa.Table]] = {"data": [], "quarantine": []}
    for r in meta:
        if r["kind"] == "shard":
            with ipc.open_file(pa.BufferReader(store.get_bytes(r["shard"]))) as f:
                tables[r["status"]].append(f.read_all())
    data = pa.concat_tables(tables["data"]) if tables["data"] else None
    bad = pa.concat_tables(tables["quarantine"]) if tables["quarantine"] else None
    assert data is not None or bad is not None
    empty = pa.table({"id": pa.array([], pa.string())})
    return data if data is not None else empty, bad if bad is not None else empty


def _bands(table: pa.Table) -> dict[str, np.ndarray]:
    block = table.column("bands").combine_chunks().to_numpy_ndarray()
    return dict(zip(table.column("id").to_pylist(), block, strict=True))


def _sample(n: int = N, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = np.array([f"r{i:03d}" for i in range(n)])
    return ids, rng.standard_normal((n, 4, 4), dtype=np.float32), \
        rng.integers(0, len(CLASSES), n).astype(np.int16)


def _sharded_group(store: FolderStore) -> tuple[Source, np.ndarray, np.ndarray]:
    ids, bands, labels = _sample()
    src = _write(store, "s.zarr", {
        "ids": (ids, {"chunks": (10,), "shards": (50,)}),
        "bands": (bands, {"chunks": (10, 4, 4), "shards": (50, 4, 4)}),
        "label": (labels, {"chunks": (10,), "shards": (50,)})})
    return src, ids, bands


@pytest.mark.parametrize("block_bytes", [32 << 20, 64], ids=["whole-shards", "inner-chunks"])
def test_a_sharded_array_is_proven_per_shard_and_read_in_full(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block_bytes: int) -> None:
    """Chunks of 10 rows inside shards of 50: a shard is the stored object, so it is the
    unit of the proof (a lost shard quarantines its 50 rows, naming it), and the group is
    read in whole shards where one fits in a block, else a few inner chunks at a time."""
    monkeypatch.setattr(zarr_typed, "BLOCK_BYTES", block_bytes)
    store = FolderStore(tmp_path / "store")
    src, ids, bands = _sharded_group(store)
    cfg = _cfg()

    data, bad = _convert(store, cfg, (Part.of(src),))
    assert len(bad) == 0, bad.column("message").to_pylist()
    got = _bands(data)
    assert sorted(got) == sorted(ids)
    assert all(got[i].tobytes() == b.tobytes() for i, b in zip(ids, bands, strict=True))

    # the driver cuts between whole read units: shards when they fit in a block
    parts = split_zarr(store, src, 4, cfg)
    cuts = [(p.start, p.stop) for p in parts]
    if block_bytes > 50 * 64:
        assert cuts == [(0, 50), (50, 100)]
    else:
        assert len(cuts) == 4 and cuts[0][0] == 0 and cuts[-1][1] == N
        assert all(a % 10 == 0 for a, _ in cuts)

    _drop(store, src, "bands", "c/1/0/0")            # the shard of rows 50..99
    data, bad = _convert(store, cfg, split_zarr(store, src, 4, cfg))
    assert sorted(data.column("id").to_pylist()) == list(ids[:50])
    assert bad.column("id").to_pylist() == list(ids[50:])
    assert set(bad.column("rule").to_pylist()) == {"missing_chunk"}
    msg = bad.column("message")[0].as_py()
    assert "array 'bands' has no shard 1 on axis 0" in msg and "write_empty_chunks=True" in msg
    assert "\n" not in msg


def test_a_sharded_shorthand_group_reads_every_row(tmp_path: Path) -> None:
    """The shorthand's images/labels/ids group, sharded: every row published, and a lost
    shard quarantines exactly its rows."""
    store = FolderStore(tmp_path / "store")
    rng = np.random.default_rng(1)
    ids = np.array([f"d{i:03d}" for i in range(N)])
    src = _write(store, "d.zarr", {
        "images": (rng.integers(0, 256, (N, 8, 8, 1)).astype(np.uint8),
                   {"chunks": (10, 8, 8, 1), "shards": (50, 8, 8, 1)}),
        "labels": (rng.integers(0, 3, N).astype(np.int64), {"chunks": (10,), "shards": (50,)}),
        "ids": (ids, {"chunks": (10,), "shards": (50,)})})
    cfg = parse_config({"dataset": {"name": "d", "incoming": "in/z/", "classes": CLASSES,
                                    "image": {"shape": [8, 8, 1]}}}).dataset
    data, bad = _convert(store, cfg, (Part.of(src),))
    assert len(bad) == 0, bad.column("message").to_pylist()
    assert sorted(data.column("id").to_pylist()) == list(ids)

    _drop(store, src, "labels", "c/0")
    data, bad = _convert(store, cfg, (Part.of(src),))
    assert sorted(data.column("id").to_pylist()) == list(ids[50:])
    assert bad.column("id").to_pylist() == list(ids[:50])
    assert set(bad.column("rule").to_pylist()) == {"missing_chunk"}
    assert "array 'labels' has no shard 0" in bad.column("message")[0].as_py()


def test_samples_on_a_later_axis_round_trip_bit_identical(tmp_path: Path) -> None:
    """bands stored (13, N, 4, 4) with sample_axis = 1: row i is bands[:, i], published as
    declared [13, 4, 4], bit for bit, whole or cut into tasks; a lost chunk on axis 1
    quarantines its rows, naming the axis."""
    store = FolderStore(tmp_path / "store")
    rng = np.random.default_rng(2)
    ids = np.array([f"b{i:03d}" for i in range(N)])
    bands = rng.standard_normal((13, N, 4, 4), dtype=np.float32)
    bands[0, 3, 0, 0] = np.float32(np.nan)     # a NaN payload would fail a value compare
    src = _write(store, "t.zarr", {
        "ids": (ids, {"chunks": (16,)}),
        "bands": (bands, {"chunks": (13, 16, 4, 4)}),
        "label": (rng.integers(0, 3, N).astype(np.int16), {"chunks": (32,)})})
    cfg = _cfg({"shape": [13, 4, 4], "sample_axis": 1, "allow_nan": True})

    for parts in ((Part.of(src),), split_zarr(store, src, 3, cfg)):
        data, bad = _convert(store, cfg, parts)
        assert len(bad) == 0, bad.column("message").to_pylist()
        got = _bands(data)
        assert sorted(got) == list(ids)
        assert all(got[r].shape == (13, 4, 4) and got[r].tobytes() == bands[:, i].tobytes()
                   for i, r in enumerate(ids))
    assert len(split_zarr(store, src, 3, cfg)) == 3

    _drop(store, src, "bands", "c/0/1/0/0")          # rows 16..31
    data, bad = _convert(store, cfg, (Part.of(src),))
    assert sorted(data.column("id").to_pylist()) == list(ids[:16]) + list(ids[32:])
    assert bad.column("id").to_pylist() == list(ids[16:32])
    assert "has no chunk 1 on axis 1" in bad.column("message")[0].as_py()


@pytest.mark.parametrize("declared", ["quarantine", "fill_value"])
def test_a_missing_chunk_is_fill_only_where_declared(tmp_path: Path, declared: str) -> None:
    """A chunk absent from the store: its rows are quarantined as missing_chunk (the fix
    names write_empty_chunks, since Zarr v3 skips chunks equal to the fill value), unless
    the field declares missing_chunks = "fill_value": then they are published with it."""
    store = FolderStore(tmp_path / "store")
    ids, bands, labels = _sample(64, seed=3)
    src = _write(store, "g.zarr", {
        "ids": (ids, {"chunks": (16,)}),
        "bands": (bands, {"chunks": (16, 4, 4), "fill_value": -7.5}),
        "label": (labels, {"chunks": (16,)})})
    _drop(store, src, "bands", "c/2/0/0")            # rows 32..47
    data, bad = _convert(store, _cfg({"missing_chunks": declared}), (Part.of(src),))
    got = _bands(data)
    kept = list(ids[:32]) + list(ids[48:])
    assert all(got[r].tobytes() == bands[i].tobytes() for i, r in enumerate(ids) if r in kept)
    if declared == "quarantine":
        assert sorted(got) == kept
        assert bad.column("id").to_pylist() == list(ids[32:48])
        assert set(bad.column("rule").to_pylist()) == {"missing_chunk"}
        msg = bad.column("message")[0].as_py()
        assert 'missing_chunks = "fill_value" for \'bands\'' in msg
        assert "write_empty_chunks=True" in msg
    else:
        assert len(bad) == 0 and sorted(got) == list(ids)
        assert all((got[r] == np.float32(-7.5)).all() for r in ids[32:48])


def test_a_shard_larger_than_a_block_is_read_a_few_inner_chunks_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One 16 MiB shard of 1 MiB inner chunks, blocks of 512 KiB: the task's peak (numpy
    buffers are traced) is a few chunks, not the shard; every row read once."""
    import tracemalloc

    monkeypatch.setattr(zarr_typed, "BLOCK_BYTES", 512 << 10)
    store = FolderStore(tmp_path / "store")
    n, sample = 1024, (64, 64)                                    # 16 KiB a row
    rng = np.random.default_rng(4)
    src = _write(store, "big.zarr", {
        "bands": (rng.standard_normal((n, *sample), dtype=np.float32),
                  {"chunks": (64, *sample), "shards": (n, *sample)}),
        "label": (np.ones(n, np.int16), {"chunks": (64,), "shards": (n,)})})
    cfg = _cfg({"shape": list(sample)})
    list(zarr_typed.read_zarr_typed(store, src, cfg, rows=(0, 64)))   # imports, codecs
    tracemalloc.start()
    try:
        rows = sum(1 for _ in zarr_typed.read_zarr_typed(store, src, cfg))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    chunk = 64 * 64 * 64 * 4                                      # 1 MiB; the shard 16
    assert rows == n
    # a block (one chunk here), its decode buffers and the rows copied out of it: about 4
    # MiB measured; a whole shard read at once peaked at 57 MiB
    assert peak < 8 * chunk, f"peak {peak / 2**20:.1f} MiB for a 16 MiB shard"
