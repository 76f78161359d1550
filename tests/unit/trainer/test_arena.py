"""``ShardArena``: shards land whole at their slot's rows, protected shards are never
overwritten, and a placement that cannot fit changes nothing."""

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
        for b in table.to_batches(max_chunksize=max(1, rows // 2 + 1)):
            w.write_batch(b)
    return OpenShard(path, (1, 2, 3)), pix


@pytest.fixture
def shards(tmp_path: Path) -> list[tuple[OpenShard, np.ndarray]]:
    return [_shard(tmp_path, f"s{i}", rows, i) for i, rows in enumerate((7, 5, 7, 6, 3))]


def _check(arena: ShardArena, placed: list[int], items: list[tuple[OpenShard, np.ndarray]]
           ) -> None:
    for base, (shard, pix) in zip(placed, items, strict=True):
        assert np.array_equal(arena.data[base:base + shard.rows], pix)


def test_shards_are_copied_once_and_read_back_exactly(shards: list) -> None:
    arena = ShardArena(5, 7, NBYTES)
    got = arena.place([(i, s) for i, (s, _) in enumerate(shards)])
    assert got is not None and sorted(got) == [0, 7, 14, 21, 28]
    _check(arena, got, shards)
    again = arena.place([(3, shards[3][0]), (1, shards[1][0])])
    assert again == [got[3], got[1]] and arena.copied == 5       # resident: no new copy


def test_protected_shards_stay_and_unfit_placements_change_nothing(shards: list) -> None:
    arena = ShardArena(3, 7, NBYTES)
    first = arena.place([(0, shards[0][0]), (1, shards[1][0])])
    assert first is not None
    arena.protect([0, 1])
    assert arena.place([(2, shards[2][0]), (3, shards[3][0])]) is None   # 1 free slot only
    assert arena.resident() == {0, 1}
    one = arena.place([(2, shards[2][0])])
    assert one is not None
    arena.protect([2])
    later = arena.place([(3, shards[3][0]), (4, shards[4][0])])       # evicts 0 and 1
    assert later is not None and arena.resident() == {2, 3, 4}
    _check(arena, one + later, [shards[2], shards[3], shards[4]])
    assert arena.copied == 5


def test_shards_larger_than_a_slot_are_refused(shards: list) -> None:
    arena = ShardArena(4, 6, NBYTES)
    assert arena.place([(0, shards[0][0])]) is None                  # 7 rows > 6
    assert ShardArena.sized(10 * 7 * NBYTES, [7, 5], NBYTES, 2) is not None
    assert ShardArena.sized(3 * 7 * NBYTES, [7, 5, 7, 6], NBYTES, 4) is None
    sized = ShardArena.sized(1 << 20, [7, 5, 7], NBYTES, 2)
    assert sized is not None and sized.data.shape == (3 * 7, NBYTES)   # never above shards
