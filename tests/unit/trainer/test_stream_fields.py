"""The loader on typed fields (``shardline.core.fields``): batches are dicts with one tensor
per field and the target, each holding exactly the values of the rows its keys name, in
the declared dtype and served shape (images ``[B, C, H, W]`` over channels-last memory),
gathered from zero-copy views of the memory-mapped columns; the arena, the evaluation pass
and the schema check treat every column alike."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
import torch

from shardline.core.fields import dataset_info
from shardline.trainer.columns import TORCH_DTYPES, ShardFormatError, layout_for
from shardline.trainer.loader import eval_batches, make_train_loader
from shardline.trainer.options import LoaderSpec
from shardline.trainer.plan import TrainPlan
from shardline.trainer.shard_file import OpenShard
from shardline.trainer.stream import ShardStream

from .conftest import LocalFields
from .typed_data import typed_config, value

TYPED = dataset_info(typed_config())


def stream(d: LocalFields, plan: TrainPlan, **kw: object) -> ShardStream:
    args: dict[str, object] = dict(batch_size=24, epochs=2, seed=0, window_rows=90,
                                   window_min_shards=2)
    args.update(kw)
    return ShardStream(plan, d.reader(), **args)  # type: ignore[arg-type]


def _source_rows(d: LocalFields, plan: TrainPlan) -> dict[int, np.ndarray]:
    out = {}
    for s in plan.shards:
        with ipc.open_file(pa.memory_map(str(d.data.root / s.entry.path))) as r:
            out[s.ordinal] = r.read_all().column("source_row").to_numpy()
    return out


def assert_rows(d: LocalFields, plan: TrainPlan, batch: dict) -> None:
    """Every field and the target hold what the rows named by ``key`` hold."""
    info = d.data.info
    src = _source_rows(d, plan)
    keys = batch["key"].numpy()
    rows = np.array([src[k >> 32][k & 0xFFFFFFFF] for k in keys.tolist()])
    for f in info.fields:
        if f.dtype == "string" and not f.vocabulary:
            assert f.name not in batch            # free text is not served
            continue
        got = batch[f.name]
        assert got.dtype == TORCH_DTYPES["int64" if f.dtype == "string" else f.dtype], f.name
        assert tuple(got.shape) == (len(keys), *f.shape), f.name
        want = value(info, f.name, rows)
        if f.kind == "image":                      # served C, H, W over H, W, C memory
            assert got.is_contiguous(memory_format=torch.channels_last)
            got = got.permute(0, 2, 3, 1)
        assert np.array_equal(got.numpy(), want), f.name
    t = batch[info.target.name]
    assert t.dtype == TORCH_DTYPES[info.target.dtype]      # as stored (a mask: uint8 indices)
    assert tuple(t.shape) == (len(keys), *info.target.shape)
    assert np.array_equal(t.numpy(), value(info, info.target.name, rows))


@pytest.mark.parametrize("fixture", ["local_fields", "local_regression", "local_mask"])
def test_batches_hold_every_field_and_target_of_the_rows_their_keys_name(
        fixture: str, request: pytest.FixtureRequest) -> None:
    d: LocalFields = request.getfixturevalue(fixture)
    plan = d.plan()
    batches = list(make_train_loader(stream(d, plan), LoaderSpec()))
    names = {f.name for f in d.data.info.fields if f.name != "note"}
    assert set(batches[0]) == names | {d.data.info.target.name, "key", "epoch", "epoch_end"}
    for b in batches[:4] + batches[-2:]:       # full batches and an epoch's short last one
        assert_rows(d, plan, b)
    assert any(len(b["key"]) < 24 for b in batches)


@pytest.mark.parametrize("arena", [True, False])
def test_every_training_sample_once_per_epoch_with_and_without_the_arena(
        local_fields: LocalFields, arena: bool) -> None:
    plan = local_fields.plan(since=None)
    reader = local_fields.reader()
    want = {(s.ordinal << 32) | int(r) for s in plan.train_shards
            for r in plan.train_rows(s, reader.index(s))}
    s = stream(local_fields, plan, epochs=3, arena_bytes=1 << 30 if arena else 0)
    batches = list(s)
    assert (s.arena is not None) == arena and (s.windows_arena > 0) == arena
    per_epoch: dict[int, list[int]] = {}
    for b in batches:
        per_epoch.setdefault(b["epoch"], []).extend(b["key"].tolist())
    assert sorted(per_epoch) == [0, 1, 2]
    for keys in per_epoch.values():
        assert Counter(keys).most_common(1)[0][1] == 1 and set(keys) == want
    for b in batches[::7]:
        assert_rows(local_fields, plan, b)


def test_the_arena_and_the_maps_give_the_same_bytes(local_fields: LocalFields) -> None:
    plan = local_fields.plan(since=None)
    a = list(stream(local_fields, plan, arena_bytes=1 << 30))
    m = list(stream(local_fields, plan, arena_bytes=0))
    assert len(a) == len(m)
    for x, y in zip(a, m, strict=True):
        assert x.keys() == y.keys()
        assert all(torch.equal(x[k], y[k]) for k in x if isinstance(x[k], torch.Tensor))


def test_open_shards_view_the_mapped_columns_without_a_copy(local_fields: LocalFields
                                                            ) -> None:
    s = next(p for p in local_fields.plan().shards if p.entry.compression == "none")
    path = local_fields.data.root / s.entry.path
    shard = OpenShard(path, local_fields.reader().layout)
    names = [c.name for c in shard.layout.columns]
    for name in ("bands", "rgb16", "valid", "elevation", "tags"):   # (a bool scalar: copied)
        view = shard.segments[1][names.index(name)]
        assert view.shape == (16, shard.layout.columns[names.index(name)].nbytes)
        assert not view.flags.owndata and not view.flags.writeable
        assert _mapped_file(view.__array_interface__["data"][0]) == str(path), name
    assert shard.nbytes == sum(c.nbytes for c in shard.layout.columns)


def _mapped_file(address: int) -> str | None:
    """The file whose memory mapping holds ``address`` (from /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        for line in f:
            span, *rest = line.split()
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= address < hi:
                return rest[4] if len(rest) > 4 else None
    return None


def test_evaluation_batches_are_the_same_dicts(local_fields: LocalFields) -> None:
    plan = local_fields.plan()
    reader = local_fields.reader()
    pool = reader.pool(32)
    seen = 0
    for batch in eval_batches(plan, reader, pool):
        assert_rows(local_fields, plan, batch)
        seen += len(batch["key"])
        pool.release(batch)
    assert seen == sum(len(plan.holdout_rows(reader.index(s), s)) for s in plan.eval_shards)
    assert pool.allocated == 1                                # released buffers are reused


def test_a_shard_stored_with_another_dtype_is_refused_naming_the_column(
        local_fields: LocalFields, tmp_path: object) -> None:
    s = local_fields.plan().shards[0]
    with ipc.open_file(pa.memory_map(str(local_fields.data.root / s.entry.path))) as r:
        table = r.read_all()
    wrong = pa.FixedShapeTensorArray.from_numpy_ndarray(
        np.zeros((table.num_rows, 13, 32, 32), np.float64))
    other = table.set_column(table.schema.get_field_index("bands"), "bands", wrong)
    path = f"{tmp_path}/wrong.arrow"
    with ipc.new_file(path, other.schema) as w:
        w.write_table(other)
    with pytest.raises(ShardFormatError, match=r"column 'bands' has type .*double.*float32"):
        OpenShard(path, local_fields.reader().layout)
    # the same shape in another memory order: not a view the model can take as declared
    cols = value(TYPED, "bands", np.arange(table.num_rows)).transpose(0, 2, 1, 3)
    moved = pa.ExtensionArray.from_storage(
        pa.fixed_shape_tensor(pa.float32(), [13, 32, 32], permutation=[1, 0, 2]),
        pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(cols)).storage)
    other = table.set_column(table.schema.get_field_index("bands"), "bands", moved)
    with ipc.new_file(path, other.schema) as w:
        w.write_table(other)
    with pytest.raises(ShardFormatError, match="column 'bands'"):
        OpenShard(path, local_fields.reader().layout)
    missing = table.drop_columns(["elevation"])
    with ipc.new_file(path, missing.schema) as w:
        w.write_table(missing)
    with pytest.raises(ShardFormatError, match="no column 'elevation'"):
        OpenShard(path, local_fields.reader().layout)
    # an optional field added after the shard was written: its rows read as zeros
    later = layout_for(TYPED, optional={"elevation"})
    shard = OpenShard(path, later)
    at = [c.name for c in later.columns].index("elevation")
    assert all(not seg[at].any() and seg[at].shape == (len(seg[0]), 4)
               for seg in shard.segments)


def test_layout_of_the_typed_dataset() -> None:
    lay = layout_for(TYPED)
    assert [c.name for c in lay.columns] == ["bands", "rgb16", "valid", "elevation", "cloudy",
                                             "landuse", "tags"]
    assert lay.label_source is None and lay.target == "tags"
    assert [c.nbytes for c in lay.columns] == [13 * 32 * 32 * 4, 6 * 5 * 3 * 2, 16, 4, 1, 8, 4]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (pinned host memory)")
def test_on_cuda_every_field_is_pinned_and_copies_without_blocking(
        local_fields: LocalFields) -> None:
    plan = local_fields.plan()
    s = stream(local_fields, plan, pin_memory=True, epochs=1)
    for batch in list(s)[:3]:
        tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)
                   and k != "key"}
        assert all(t.is_pinned() for t in tensors.values())
        on_gpu = {k: t.to("cuda", non_blocking=True) for k, t in tensors.items()}
        event = torch.cuda.Event()
        event.record()
        s.release(batch, event)
        for k, t in on_gpu.items():
            assert torch.equal(t.cpu(), tensors[k]), k
        assert on_gpu["rgb16"].is_contiguous(memory_format=torch.channels_last)
