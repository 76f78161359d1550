"""``ShardArena``: each shard lands whole at its own rows, is claimed by one filler only,
and a window's bases exist only once all its shards are filled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from shardline.trainer.arena import ShardArena
from shardline.trainer.shard_file import OpenShard

NBYTES = 6


def _shard(tmp: Path, name: str, rows: int, seed: int) -> tuple[OpenShard, np.ndarray]:
    pix = np.random.default_rng(seed).integers(0, 256, (rows, NBYTES), dtype=np.uint8)
    col = pa.FixedSizeBinaryArray.from_buffers(pa.binary(NBYTES), rows,
                                               [None, pa.py_buffer(pix.tobytes())])
    table = pa.table({"image": col})
    path = tmp / f"{name}.arrow"
    with ipc.new_file(str(path), table.schema) as w:        # two record batches
        for b in table.to_batches(max_chunksize=rows // 2 + 1):
            w.write_batch(b)
    return OpenShard(path, (1, 2, 3)), pix


@pytest.fixture
def shards(tmp_path: Path) -> dict[int, tuple[OpenShard, np.ndarray]]:
    return {10 + i: _shard(tmp_path, f"s{i}", rows, i) for i, rows in enumerate((7, 5, 3))}


def test_filled_shards_read_back_exactly_at_their_bases(shards: dict) -> None:
    arena = ShardArena({o: s.rows for o, (s, _) in shards.items()}, [NBYTES])
    assert [d.shape for d in arena.data] == [(15, NBYTES)]
    assert arena.bases([10]) is None                             # nothing filled yet
    first = arena.claim([(10, shards[10][0]), (11, shards[11][0])])
    assert [o for o, _ in first] == [10, 11]
    assert arena.claim([(11, shards[11][0]), (12, shards[12][0])]) == [(12, shards[12][0])]
    arena.fill(first)
    assert arena.bases([10, 12]) is None                         # 12 claimed, not filled
    bases = arena.bases([11, 10])
    assert bases == [7, 0]
    for base, o in zip(bases, [11, 10], strict=True):
        shard, pix = shards[o]
        assert np.array_equal(arena.data[0][base:base + shard.rows], pix)
    assert arena.copied == 2 and arena.filled() == {10, 11}
    assert arena.claim([(10, shards[10][0])]) == []               # never copied twice


def test_a_shard_with_other_rows_than_the_layout_is_refused(shards: dict) -> None:
    arena = ShardArena({10: 6}, [NBYTES])
    with pytest.raises(ValueError, match="rows"):
        arena.fill(arena.claim([(10, shards[10][0])]))
    assert arena.bases([10]) is None
    # the claim is handed back: the next build (helper or batch path) fails the same way
    again = arena.claim([(10, shards[10][0])])
    assert [o for o, _ in again] == [10]
    with pytest.raises(ValueError, match="rows"):
        arena.fill(again)


def test_sized_only_when_everything_fits() -> None:
    rows = {1: 7, 2: 5}
    assert ShardArena.sized(12 * NBYTES, rows, [NBYTES - 2, 2]) is not None
    assert ShardArena.sized(12 * NBYTES - 1, rows, [NBYTES]) is None
    assert ShardArena.sized(1 << 20, {}, [NBYTES]) is None
