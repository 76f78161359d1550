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

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from shardline.core import retention
from shardline.core.config import Config
from shardline.core.errors import StoreError
from shardline.core.store import Store
from shardline.trainer import dist
from shardline.trainer.accel import apply_backends, compiled, plan_step
from shardline.trainer.balance import align_new_classes, logit_shift
from shardline.trainer.candidate import finish
from shardline.trainer.checkpoint import (
    load_model_tensors,
    load_optimizer_parts,
    model_tensors,
    optimizer_parts,
)
from shardline.trainer.context import RunContext, open_context
from shardline.trainer.device import choose
from shardline.trainer.dist import DistInfo
from shardline.trainer.distill import Distill
from shardline.trainer.evaluate import EvalResult, evaluate
from shardline.trainer.factory import build
from shardline.trainer.loader import eval_batches, make_train_loader
from shardline.trainer.loop import LoopHooks, LoopState, make_step, run_loop
from shardline.trainer.options import RunOptions
from shardline.trainer.parent import load_parent, make_optimizer, promoted_model
from shardline.trainer.plan import TrainPlan
from shardline.trainer.preprocess import Preprocessed
from shardline.trainer.result import TrainResult
from shardline.trainer.rows import rows_from_tensors, rows_tensors
from shardline.trainer.schedule import lr_at_step
from shardline.trainer.stream import Batch, ShardStream

__all__ = ["TrainResult", "train"]

log = logging.getLogger(__name__)


def train(cfg: Config, store: Store, dataset_version: int | None = None, *,
          options: RunOptions | None = None,
          on_batch: Callable[[int, Batch], None] | None = None) -> TrainResult:
    """Train on ``dataset_version`` (default: latest), continuing the promoted model.

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
        ctx = open_context(cfg, store, dataset_version, options, info, place)
        _hold(ctx)
        try:
            return _Trainer(ctx).run(on_batch)
        finally:
            ctx.fetcher.close()
            if info.is_main:       # a lease left behind ages out after the sweep window
                with contextlib.suppress(StoreError):
                    retention.release(store, cfg.dataset.prefix, ctx.run_key)
    finally:
        dist.shutdown(created)


def _hold(ctx: RunContext) -> None:
    """Rank 0 leases the dataset version it reads (refreshed with every checkpoint), so
    ``shardline expire`` keeps it until the run ends."""
    if ctx.info.is_main:
        retention.hold(ctx.store, ctx.cfg.dataset.prefix, ctx.run_key, ctx.manifest.version)


class _Trainer:
    """Drives one run over a frozen :class:`RunContext`; holds what changes while training
    (the last evaluation) and the evaluation buffers."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        loader = ctx.options.loader
        self.lookahead = int(loader.lookahead_mb * 2**20)
        self.eval_pool = ctx.reader.pool(loader.eval_batch_size, ctx.place.cuda)
        self.last_eval: EvalResult | None = None
        o = ctx.options
        self.step = plan_step(o.optimizer, o.compile_mode, o.tf32, o.cudnn_benchmark,
                              cuda=ctx.place.cuda, distributed=ctx.info.distributed,
                              legacy_compile=ctx.cfg.train.compile)
        apply_backends(self.step)

    def run(self, on_batch: Callable[[int, Batch], None] | None) -> TrainResult:
        ctx = self.ctx
        if ctx.info.is_main:
            log.info("dataset %s v%d: %s; %d shards (%d new), replay fraction %.3f",
                     ctx.cfg.dataset.name, ctx.dataset_version, ctx.start.reason,
                     len(ctx.plan.shards), sum(s.role == "new" for s in ctx.plan.shards),
                     ctx.plan.replay_fraction)
            log.info("step: %s AdamW, compile %s, tf32 %s, cudnn.benchmark %s, batch %d per "
                     "rank x %d", self.step.optimizer, self.step.compile_mode or "off (eager)",
                     self.step.tf32, self.step.cudnn_benchmark, ctx.cfg.train.batch_size,
                     ctx.info.world)
        return self._execute(on_batch)

    def _execute(self, on_batch: Callable[[int, Batch], None] | None) -> TrainResult:
        ctx = self.ctx
        torch.manual_seed(ctx.cfg.train.seed)
        # on its device before the optimizer exists: fused AdamW and loaded optimizer
        # state (load_state_dict moves it to each parameter's device) then agree
        model = ctx.place.prepare(Preprocessed(build(ctx.cfg.train, ctx.data), ctx.data))
        opt = make_optimizer(model, ctx.cfg.train.lr, ctx.cfg.train.weight_decay,
                             self.step.optimizer)
        if ctx.start.from_parent:
            load_parent(model, opt, ctx.registry, ctx.start)
        progress = ctx.registry.load_progress(ctx.run_key) if ctx.options.resume else None
        state, loader_state, before = LoopState(), None, None
        if progress is not None:
            state, loader_state, before = self._restore(model, opt, *progress)
        else:
            before = self._evaluate_before(model)
        stream = self._stream()
        loader = make_train_loader(stream, ctx.options.loader)
        if loader_state is not None:
            loader.load_state_dict(loader_state)
        train_model = self._wrap(model)
        hooks = LoopHooks(
            epoch_end=lambda st, ep: self._epoch_eval(model, ep),
            checkpoint=lambda st: self._checkpoint(model, opt, loader, st, before),
            on_batch=on_batch, log_every=ctx.options.log_every,
            checkpoint_every=ctx.options.checkpoint_every,
            curve_every=ctx.options.curve_every, is_main=ctx.info.is_main,
            lr_at=self._lr_at(ctx.plan))
        resumed_at = state.step if progress is not None else None
        step = make_step(ctx.data, ctx.objective, ctx.hooks.step, self._shift(),
                         self._keep(model))
        state = run_loop(train_model, opt, loader, stream, ctx.place, state, hooks,
                         ctx.info.world, step)
        if ctx.start.parent_classes is not None and ctx.cfg.train.align_head:
            factor = align_new_classes(model, ctx.start.parent_classes,
                                       ctx.objective.target.num_outputs)
            if factor is not None:
                self.last_eval = None        # the aligned model is evaluated again
                if ctx.info.is_main:
                    log.info("new classes' output rows scaled by %.3f (weight aligning)", factor)
        # a resumed run's saved evaluations carry no per-row results: the gate needs them
        after = self.last_eval if self.last_eval and self.last_eval.rows is not None \
            else self._eval(model)
        if ctx.start.parent_classes is not None:      # grown head: the parent's question too
            after = dataclasses.replace(
                after, rows_known=self._eval(model, ctx.start.parent_classes).rows)
        return finish(ctx, model, opt, stream, loader, state, before, after, resumed_at,
                      self.step)

    def _lr_at(self, plan: TrainPlan) -> Callable[[int], float] | None:
        """The run's learning rate per step (``trainer.schedule``): its steps are the
        plan's training rows of every epoch over the batch of all ranks."""
        t, world = self.ctx.cfg.train, self.ctx.info.world
        per_epoch = sum(plan.expected_rows(s) for s in plan.train_shards)
        return lr_at_step(t.lr_schedule, t.lr, t.lr_final,
                          per_epoch * t.epochs / (t.batch_size * world), t.lr_hold)

    def _stream(self) -> ShardStream:
        t, spec = self.ctx.cfg.train, self.ctx.options.loader
        return ShardStream(self.ctx.plan, self.ctx.reader, batch_size=t.batch_size, epochs=t.epochs,
                           seed=t.seed, rank=self.ctx.info.rank, world=self.ctx.info.world,
                           window_rows=t.shuffle_window, window_min_shards=spec.window_min_shards,
                           pin_memory=self.ctx.place.cuda, lookahead_bytes=self.lookahead,
                           arena_bytes=spec.arena_bytes)

    def _shift(self) -> torch.Tensor | None:
        """The loss's prior correction (``trainer.balance``) for a class target, if any."""
        ctx = self.ctx
        if not ctx.cfg.train.logit_adjust or ctx.objective.kind != "class" \
                or ctx.hooks.step is not None:
            return None
        shift = logit_shift(ctx.manifest.shard_columns, ctx.plan,
                            ctx.objective.target.num_outputs)
        if shift is not None and ctx.info.is_main:
            log.info("class mix of this update differs from the data's: loss logits shifted "
                     "by log(stream/data prior), %.2f to %.2f", float(shift.min()),
                     float(shift.max()))
        return None if shift is None else shift.to(ctx.place.device)

    def _keep(self, model: torch.nn.Module) -> Distill | None:
        """The parent distilled into an update that grew its head (``trainer.distill``), for
        a class target; before any step, so ``model`` holds the parent's weights. Not when
        the classes stayed: under drift the parent's answers are partly out of date, and
        holding the update to them slowed it down (bench learning --scenario drift)."""
        ctx, t = self.ctx, self.ctx.cfg.train
        known = ctx.start.parent_classes
        if t.distill <= 0 or known is None or not ctx.start.from_parent \
                or ctx.objective.kind != "class" or ctx.hooks.step is not None:
            return None
        return Distill.of(model, known, t.distill)

    def _wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        model = compiled(model, self.step)
        if self.ctx.info.distributed:
            ids = [self.ctx.place.device.index] if self.ctx.place.cuda else None
            model = DistributedDataParallel(model, device_ids=ids)
        return model

    # -- evaluation -------------------------------------------------------------------------
    def _eval(self, model: torch.nn.Module, known: int | None = None) -> EvalResult:
        ctx = self.ctx
        batches = eval_batches(ctx.plan, ctx.reader, self.eval_pool, rank=ctx.info.rank,
                               world=ctx.info.world, lookahead_bytes=self.lookahead)
        return evaluate(model, batches, ctx.plan, ctx.place, ctx.objective, ctx.hooks.score,
                        release=self.eval_pool.release,
                        hashes=lambda o: ctx.reader.index(ctx.plan.shards[o]).hashes,
                        known=known, parent_classes=ctx.start.parent_classes)

    def _evaluate_before(self, model: torch.nn.Module) -> EvalResult | None:
        if self.ctx.start.promoted is None:
            return None
        before_model = model if self.ctx.start.from_parent else promoted_model(
            self.ctx.registry, self.ctx.start, self.ctx.spec, self.ctx.data)
        if before_model is None:
            return None
        # a grown head's new classes are untrained: the parent is its first classes only
        result = self._eval(self.ctx.place.prepare(before_model), self.ctx.start.parent_classes
                            if self.ctx.start.from_parent else None)
        if self.ctx.info.is_main:
            log.info("promoted model %d on the held-out set: accuracy %s",
                     self.ctx.start.parent_number, _fmt(result.accuracy))
        return result

    def _epoch_eval(self, model: torch.nn.Module, epoch: int) -> dict[str, Any]:
        if not self.ctx.options.eval_each_epoch and epoch < self.ctx.cfg.train.epochs - 1:
            return {}
        self.last_eval = self._eval(model)
        if self.ctx.info.is_main:
            log.info("epoch %d held-out accuracy %s (earlier data %s)", epoch,
                     _fmt(self.last_eval.accuracy), _fmt(self.last_eval.earlier_accuracy))
        return {"holdout_accuracy": self.last_eval.accuracy,
                "earlier_accuracy": self.last_eval.earlier_accuracy}

    # -- in-progress checkpoints -----------------------------------------------------------
    def _checkpoint(self, model: torch.nn.Module, opt: torch.optim.Optimizer, loader: Any,
                    state: LoopState, before: EvalResult | None) -> None:
        if not self.ctx.info.is_main:
            return
        _hold(self.ctx)
        tensors, rest = optimizer_parts(opt)
        blob = {**{f"model.{k}": v for k, v in model_tensors(model).items()},
                **{f"opt.{k}": v for k, v in tensors.items()},
                **(rows_tensors(before.rows, "before.") if before and before.rows else {})}
        self.ctx.registry.save_progress(self.ctx.run_key, state.step, blob, {
            "loop": state.to_dict(), "loader": loader.state_dict(), "optimizer": rest,
            "before": before.to_dict() if before else None,
            "last_eval": self.last_eval.to_dict() if self.last_eval else None})

    def _restore(self, model: torch.nn.Module, opt: torch.optim.Optimizer, key: str,
                 tensors: dict[str, torch.Tensor], saved: dict[str, Any]
                 ) -> tuple[LoopState, dict[str, Any], EvalResult | None]:
        where = self.ctx.store.uri(key)
        load_model_tensors(model, {k[6:]: v for k, v in tensors.items()
                                   if k.startswith("model.")}, where)
        load_optimizer_parts(opt, {k[4:]: v for k, v in tensors.items() if k.startswith("opt.")},
                             saved["optimizer"], where)
        state = LoopState.from_dict(saved["loop"])
        if saved.get("last_eval"):
            self.last_eval = EvalResult(**saved["last_eval"])
        if self.ctx.info.is_main:
            log.info("resuming interrupted run %s at step %d", self.ctx.run_key, state.step)
        before = EvalResult(**saved["before"],
                            rows=rows_from_tensors(tensors, "before.", where)) \
            if saved.get("before") else None
        return state, saved["loader"], before


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"
