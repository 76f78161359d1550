"""Assembling loaders: the training pipeline (torchdata.nodes) and the evaluation pass.

Training: ``ShardStream -> ThreadPrefetcher -> Loader`` when feeding CUDA, ``ShardStream ->
Loader`` on CPU (see ``make_train_loader``). With the thread, the stream gathers batches
on it (numpy copies release the GIL), so batch assembly and shard fetching overlap the
training step; ``Loader.state_dict()`` is the consumer-side position (the prefetcher
snapshots the stream's state per batch), which is what checkpoints store. Pinning happens
in the stream itself (the batch buffer is allocated pinned), which saves the extra copy a
separate PinMemory node would make.

Evaluation reads the held-out rows of the version in manifest order, in batches, each rank
a strided share; no shuffle, no state. It opens only the held-out shards (and the mixed
shards of the older layout, masked by id hash): never a train shard.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torchdata.nodes import Loader

from shardline.trainer.buffers import BufferPool
from shardline.trainer.options import LoaderSpec
from shardline.trainer.picks import build_picks, gather_into
from shardline.trainer.plan import TrainPlan
from shardline.trainer.prefetch import ThreadPrefetcher
from shardline.trainer.shard_file import OpenShard
from shardline.trainer.shard_reader import ShardReader
from shardline.trainer.stream import Batch, ShardStream


def make_train_loader(stream: ShardStream, spec: LoaderSpec) -> Loader[Batch]:
    """The training loader over ``stream`` (one iteration covers every epoch).

    With a prefetch thread the numpy copies (which release the GIL) overlap the training
    step; that is what a CUDA step needs. ``prefetch_batches=None`` picks the thread only
    when the stream feeds CUDA (pinned buffers): measured on 2 CPU cores (bench/loader.py),
    a CPU training step left the loader at <1 % of the time with or without the thread,
    while the thread hand-off cost 25-35 % of the loader's raw throughput."""
    depth = spec.prefetch_batches
    if depth is None:
        depth = 4 if stream.pin_memory else 0
    if depth == 0:
        return Loader(stream, restart_on_stop_iteration=False)
    return Loader(ThreadPrefetcher(stream, depth), restart_on_stop_iteration=False)


def eval_batches(plan: TrainPlan, reader: ShardReader, pool: BufferPool, *, rank: int = 0,
                 world: int = 1, lookahead_bytes: int | None = None) -> Iterator[Batch]:
    """Batches of the held-out rows (``key`` maps back to shard and row), read from
    ``plan.eval_shards`` only; the same dicts as the training stream's.

    Batches come from ``pool`` (``reader.pool(batch_size)``); release them with
    ``pool.release``."""
    batch_size = pool.batch_size
    label = reader.layout.target if reader.layout.label_source is not None else None
    shards = plan.eval_shards
    items: list[tuple[int, OpenShard, np.ndarray, np.ndarray]] = []
    rows_in_group = 0
    for i, s in enumerate(shards):
        if i % 8 == 0:
            reader.source.prefetch([t.entry for t in shards[i:]], lookahead_bytes)
        shard = reader.open(s)
        index = reader.index(s)
        rows = plan.holdout_rows(index, s)[rank::world]
        if len(rows):
            items.append((s.ordinal, shard, rows, index.labels[rows]))
            rows_in_group += len(rows)
        if items and (rows_in_group >= 4 * batch_size or i == len(shards) - 1):
            picks = build_picks(items)
            for lo in range(0, len(picks), batch_size):
                hi = min(lo + batch_size, len(picks))
                buf = pool.acquire()
                labels, keys = np.empty(hi - lo, np.int64), np.empty(hi - lo, np.int64)
                gather_into(pool.views(buf)[0], picks, lo, hi, 0, labels, keys)
                batch: Batch = pool.batch(buf, hi - lo)
                if label is not None:
                    batch[label] = torch.from_numpy(labels)
                batch.update(key=torch.from_numpy(keys), epoch=0, epoch_end=hi == len(picks))
                yield batch
            items, rows_in_group = [], 0
