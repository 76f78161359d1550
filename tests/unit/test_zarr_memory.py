"""A Zarr group converts with bounded memory: a task holds a block of chunks, the rows
waiting to be routed and its shard buffers, never the array (issue 20). Measured with
tracemalloc (numpy's buffers are traced) around the Spark task's own function, on the
folder store, with the size constants scaled down so the store is many times the bound."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from shardline.core.config import parse_config
from shardline.core.folder_store import FolderStore
from shardline.tasks.batch import Source
from shardline.tasks.convert import shard_writer, zarr_typed
from shardline.tasks.convert.job import convert_group
from shardline.tasks.convert.split import Part

SAMPLE = (64, 64)                      # float32: 16 KiB a row
ROW = int(np.prod(SAMPLE)) * 4
ROWS = 3000                            # 47 MiB of tensors
SHARD_MB = 0.25                        # 16 rows a shard


def _group(root: Path, name: str, n: int) -> None:
    import zarr
    from zarr.storage import LocalStore

    g = zarr.open_group(store=LocalStore(root / "in/z" / name), mode="w")
    rng = np.random.default_rng(0)
    # the tensor chunked by 64 rows, the labels by 4096: blocks must follow the tensor's
    g.create_array("label", shape=(n,), chunks=(4096,), dtype="int16")[:] = \
        rng.integers(0, 3, n).astype(np.int16)
    bands = g.create_array("bands", shape=(n, *SAMPLE), chunks=(64, *SAMPLE), dtype="float32")
    for s in range(0, n, 256):
        e = min(n, s + 256)
        bands[s:e] = rng.standard_normal((e - s, *SAMPLE), dtype=np.float32)


def test_a_tasks_peak_is_a_few_chunks_and_its_shard_buffers(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setattr(zarr_typed, "BLOCK_BYTES", 512 << 10)
    monkeypatch.setattr(shard_writer, "ROUTE_BYTES", 128 << 10, raising=False)
    store = FolderStore(tmp_path / "store")
    _group(store.root, "warm.zarr", 64)
    _group(store.root, "t.zarr", ROWS)
    cfg = parse_config({"dataset": {
        "name": "z", "incoming": "in/z/", "classes": ["a", "b", "c"],
        "shards": {"target_mb": SHARD_MB},
        "fields": {"bands": {"kind": "tensor", "dtype": "float32", "shape": list(SAMPLE)}},
        "target": {"kind": "class"}}}).dataset
    assert cfg.holdout_fraction               # train and held-out buffers both in play
    # a first, small conversion: its imports (zarr codecs, pyarrow compute...) not measured
    convert_group(store, cfg, "warm", (Part.of(Source("in/z/warm.zarr/", "w", 64 * ROW,
                                                      "zarr")),), 0)
    src = Source("in/z/t.zarr/", "e", ROWS * ROW, "zarr")
    tracemalloc.start()
    try:
        meta = convert_group(store, cfg, "run1", (Part.of(src),), 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    shards = [r for r in meta.to_pylist() if r["kind"] == "shard"]
    assert sum(r["shard_row"] for r in shards if r["status"] == "data") == ROWS
    # a block (+ the rows copied out of it), the routing queue, two shards per split held,
    # one being written (columns + IPC bytes), and per-row bookkeeping (ids, positions, the
    # row file: about 1.2 KiB a row, measured; 2 KiB allowed), plus 2 MiB of slack
    shard = int(SHARD_MB * 2**20)
    bound = 2 * (512 << 10) + (128 << 10) + 6 * shard + ROWS * 2048 + 2 * 2**20
    assert 4 * bound < ROWS * ROW             # the store is far larger than the bound
    assert peak < bound, f"task peak {peak / 2**20:.1f} MiB > bound {bound / 2**20:.1f} MiB " \
        f"for a {ROWS * ROW / 2**20:.0f} MiB store"
