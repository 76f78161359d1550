"""``train()``: one incremental training run on a published dataset version.

1. Resolve the dataset version (default: latest) and the start point (``trainer.parent``).
2. Plan: new shards since the parent's dataset version + a replay sample (``trainer.plan``).
3. Evaluate the promoted model on the held-out rows of *all* shards (the "before").
4. Train for ``epochs`` over the streaming loader, evaluating each epoch, saving an
   in-progress checkpoint every ``checkpoint_every`` steps and at epoch ends; a run with
   the same inputs that finds one resumes from it (same weights, optimizer, sample order).
5. Gate, save the candidate under a new model number, promote by compare-and-swap.

Runs alone or under torchrun (every rank calls ``train``; rank 0 writes to the registry).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from shardline.core.config import Config, config_to_dict
from shardline.core.manifest import resolve_version
from shardline.core.store import ObjectStore
from shardline.trainer import dist
from shardline.trainer.cache import ShardCache
from shardline.trainer.checkpoint import (
    load_model_tensors,
    load_optimizer_parts,
    model_tensors,
    optimizer_parts,
)
from shardline.trainer.device import Placement, choose
from shardline.trainer.dist import DistInfo
from shardline.trainer.evaluate import EvalResult, evaluate
from shardline.trainer.fetch import ShardFetcher
from shardline.trainer.loader import eval_batches, make_train_loader
from shardline.trainer.loop import LoopHooks, LoopState, run_loop
from shardline.trainer.model import arch, build_model
from shardline.trainer.options import RunOptions
from shardline.trainer.parent import (
    Start,
    load_parent,
    make_optimizer,
    promoted_model,
    resolve_start,
)
from shardline.trainer.plan import TrainPlan, make_plan
from shardline.trainer.publish import publish
from shardline.trainer.reader import BufferPool, ShardReader
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.stream import Batch, ShardStream

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    dataset: str
    model: str
    model_version: int
    dataset_version: int
    parent_model_version: int | None
    samples_seen: int
    new_samples: int                   # per epoch, all ranks
    replay_samples: int                # per epoch, all ranks
    epochs: int
    eval_accuracy: float | None
    accuracy_before: float | None
    promoted: bool
    decision: str
    checkpoint: str
    start: str
    loader_samples_per_s: float
    train_samples_per_s: float
    data_wait_share: float
    resumed_at_step: int | None = None
    eval: dict[str, Any] = field(default_factory=dict)
    eval_before: dict[str, Any] | None = None
    curve_steps: list[dict[str, Any]] = field(default_factory=list)
    curve_epochs: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def train(cfg: Config, store: ObjectStore, version: int | None = None, *,
          options: RunOptions | None = None,
          on_batch: Callable[[int, Batch], None] | None = None) -> TrainResult:
    """Train on dataset ``version`` (default: latest), continuing the promoted model.

    ``on_batch(step, batch)`` observes every batch before its step (tests record the sample
    order with it; an exception raised there aborts the run like a crash would).

    Raises:
        StoreError: the version does not exist or a shard cannot be fetched/verified.
        NothingToTrain: the version adds nothing beyond the parent's dataset version.
    """
    options = options or RunOptions()
    info = DistInfo.from_env()
    place = choose(options.device, info, options.amp)
    created = dist.init(info, place.device)
    try:
        return _Run(cfg, store, version, options, info, place).execute(on_batch)
    finally:
        dist.shutdown(created)


class _Run:
    def __init__(self, cfg: Config, store: ObjectStore, version: int | None, options: RunOptions,
                 info: DistInfo, place: Placement) -> None:
        self.cfg, self.store, self.options, self.info, self.place = cfg, store, options, info, place
        t = cfg.train
        self.manifest = resolve_version(store, cfg.dataset.prefix, version)
        self.registry = ModelRegistry(store, cfg.dataset.name, t.model)
        self.spec = arch(t.model, t.width, t.depth, cfg.dataset.image.shape,
                         len(cfg.dataset.classes))
        self.start = resolve_start(self.registry, self.spec)
        self.plan: TrainPlan = make_plan(self.manifest, self.start.since_version, t.replay_ratio,
                                         t.holdout_fraction, t.seed)
        cache = ShardCache(t.cache_dir, int(t.cache_max_gb * 2**30), store)
        self.fetcher = ShardFetcher(cache, t.fetch_threads)
        self.reader = ShardReader(self.fetcher, cfg.dataset,
                                  keep_open_bytes=int(options.loader.keep_open_mb * 2**20))
        self.lookahead = int(options.loader.lookahead_mb * 2**20)
        self.run_key = _run_key(cfg, self.manifest.version, self.start, info.world)
        self.eval_pool = BufferPool(options.loader.eval_batch_size, cfg.dataset.image.nbytes,
                                    place.cuda)
        self.last_eval: EvalResult | None = None

    def execute(self, on_batch: Callable[[int, Batch], None] | None) -> TrainResult:
        try:
            if self.info.is_main:
                log.info("dataset %s v%d: %s; %d shards (%d new), replay fraction %.3f",
                         self.cfg.dataset.name, self.manifest.version, self.start.reason,
                         len(self.plan.shards), sum(s.role == "new" for s in self.plan.shards),
                         self.plan.replay_fraction)
            return self._execute(on_batch)
        finally:
            self.fetcher.close()

    def _execute(self, on_batch: Callable[[int, Batch], None] | None) -> TrainResult:
        torch.manual_seed(self.cfg.train.seed)
        model = build_model(self.spec)
        opt = make_optimizer(model, self.cfg.train.lr, self.cfg.train.weight_decay)
        if self.start.from_parent:
            load_parent(model, opt, self.registry, self.start)
        progress = self.registry.load_progress(self.run_key) if self.options.resume else None
        state, loader_state, before = LoopState(), None, None
        if progress is not None:
            state, loader_state, before = self._restore(model, opt, *progress)
        else:
            before = self._evaluate_before(model)
        model = self.place.prepare(model)
        stream = self._stream()
        loader = make_train_loader(stream, self.options.loader)
        if loader_state is not None:
            loader.load_state_dict(loader_state)
        train_model = self._wrap(model)
        hooks = LoopHooks(
            epoch_end=lambda st, ep: self._epoch_eval(model, ep),
            checkpoint=lambda st: self._checkpoint(model, opt, loader, st, before),
            on_batch=on_batch, log_every=self.options.log_every,
            checkpoint_every=self.options.checkpoint_every,
            curve_every=self.options.curve_every, is_main=self.info.is_main)
        resumed_at = state.step if progress is not None else None
        state = run_loop(train_model, opt, loader, stream, self.place, state, hooks,
                         self.info.world)
        after = self.last_eval or self._eval(model)
        return publish(self, model, opt, stream, loader, state, before, after, resumed_at)

    def _stream(self) -> ShardStream:
        t, spec = self.cfg.train, self.options.loader
        return ShardStream(self.plan, self.reader, batch_size=t.batch_size, epochs=t.epochs,
                           seed=t.seed, rank=self.info.rank, world=self.info.world,
                           window_rows=t.shuffle_window, window_min_shards=spec.window_min_shards,
                           pin_memory=self.place.cuda, lookahead_bytes=self.lookahead)

    def _wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.cfg.train.compile:
            if self.place.cuda:
                model = torch.compile(model)  # type: ignore[assignment]
            elif self.info.is_main:
                log.warning("train.compile is set but no CUDA device is in use: running eager")
        if self.info.distributed:
            ids = [self.place.device.index] if self.place.cuda else None
            model = DistributedDataParallel(model, device_ids=ids)
        return model

    # -- evaluation -------------------------------------------------------------------------
    def _eval(self, model: torch.nn.Module) -> EvalResult:
        batches = eval_batches(self.plan, self.reader, self.eval_pool, rank=self.info.rank,
                               world=self.info.world, lookahead_bytes=self.lookahead)
        return evaluate(model, batches, self.plan, self.place,
                        release=lambda b: self.eval_pool.release(b["image"]))

    def _evaluate_before(self, model: torch.nn.Module) -> EvalResult | None:
        if self.start.promoted is None:
            return None
        before_model = model if self.start.from_parent else promoted_model(
            self.registry, self.start, self.spec)
        if before_model is None:
            return None
        result = self._eval(self.place.prepare(before_model))
        if self.info.is_main:
            log.info("promoted model %d on the held-out set: accuracy %s",
                     self.start.parent_version, _fmt(result.accuracy))
        return result

    def _epoch_eval(self, model: torch.nn.Module, epoch: int) -> dict[str, Any]:
        if not self.options.eval_each_epoch and epoch < self.cfg.train.epochs - 1:
            return {}
        self.last_eval = self._eval(model)
        if self.info.is_main:
            log.info("epoch %d held-out accuracy %s (earlier data %s)", epoch,
                     _fmt(self.last_eval.accuracy), _fmt(self.last_eval.earlier_accuracy))
        return {"holdout_accuracy": self.last_eval.accuracy,
                "earlier_accuracy": self.last_eval.earlier_accuracy}

    # -- in-progress checkpoints -----------------------------------------------------------
    def _checkpoint(self, model: torch.nn.Module, opt: torch.optim.Optimizer, loader: Any,
                    state: LoopState, before: EvalResult | None) -> None:
        if not self.info.is_main:
            return
        tensors, rest = optimizer_parts(opt)
        blob = {**{f"model.{k}": v for k, v in model_tensors(model).items()},
                **{f"opt.{k}": v for k, v in tensors.items()}}
        self.registry.save_progress(self.run_key, blob, {
            "loop": state.to_dict(), "loader": loader.state_dict(), "optimizer": rest,
            "before": before.to_dict() if before else None,
            "last_eval": self.last_eval.to_dict() if self.last_eval else None})

    def _restore(self, model: torch.nn.Module, opt: torch.optim.Optimizer,
                 tensors: dict[str, torch.Tensor], saved: dict[str, Any]
                 ) -> tuple[LoopState, dict[str, Any], EvalResult | None]:
        where = self.registry.progress_key(self.run_key)
        load_model_tensors(model, {k[6:]: v for k, v in tensors.items()
                                   if k.startswith("model.")}, where)
        load_optimizer_parts(opt, {k[4:]: v for k, v in tensors.items() if k.startswith("opt.")},
                             saved["optimizer"], where)
        state = LoopState.from_dict(saved["loop"])
        if saved.get("last_eval"):
            self.last_eval = EvalResult(**saved["last_eval"])
        if self.info.is_main:
            log.info("resuming interrupted run %s at step %d", self.run_key, state.step)
        before = EvalResult(**saved["before"]) if saved.get("before") else None
        return state, saved["loader"], before


def _run_key(cfg: Config, dataset_version: int, start: Start, world: int) -> str:
    """Same inputs -> same key: what lets a restarted run find its in-progress checkpoint."""
    train = config_to_dict(cfg.train)
    for operational in ("cache_dir", "cache_max_gb", "fetch_threads"):
        train.pop(operational, None)
    ident = {"dataset": cfg.dataset.name, "dataset_version": dataset_version,
             "parent": start.parent_version, "from_parent": start.from_parent, "train": train,
             "world": world}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"
