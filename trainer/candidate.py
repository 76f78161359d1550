"""The end of a run: save the candidate model under a new model number, let the gate
decide (``trainer.promote``), and build the run's result.

Every candidate is saved (a refused one too, with the reason and the gate's evidence in
its meta.json, and its per-row held-out scores beside its weights: ``trainer.rows``), so a
person can inspect what the gate kept out and later candidates are compared on its rows.
Only rank 0 writes; the model number and outcome are then broadcast so every rank returns
the same result.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, replace
from typing import Any

import torch

from shardline.core.config import config_to_dict
from shardline.core.manifest import code_version, now_iso
from shardline.trainer.accel import StepPlan
from shardline.trainer.checkpoint import model_tensors, optimizer_parts, tensors_to_bytes
from shardline.trainer.context import RunContext
from shardline.trainer.dist import barrier
from shardline.trainer.evaluate import EvalResult, fallen_classes
from shardline.trainer.factory import info_record
from shardline.trainer.gate import score_name
from shardline.trainer.loop import LoopState
from shardline.trainer.moves import pinned
from shardline.trainer.promote import Decision, decide, promote
from shardline.trainer.result import TrainResult
from shardline.trainer.rows import save_rows
from shardline.trainer.stream import ShardStream

log = logging.getLogger(__name__)


def sample_counts(ctx: RunContext) -> tuple[int, int]:
    """(new, replay) training samples per epoch over all ranks."""
    new = replay = 0
    for s in ctx.plan.train_shards:
        n = len(ctx.plan.train_rows(s, ctx.reader.index(s)))
        if s.role == "new":
            new += n
        else:
            replay += n
    return new, replay


def _meta(ctx: RunContext, model_number: int, state: LoopState, loader: Any,
          decision: Decision, before: EvalResult | None, after: EvalResult,
          rest: dict[str, Any], step: StepPlan) -> dict[str, Any]:
    start, plan = ctx.start, ctx.plan
    parent_total = int((start.parent_meta or {}).get("samples_seen_total", 0))
    return {
        # "model_version" holds the model number (the registry's stored field name)
        "model_version": model_number, "dataset": ctx.cfg.dataset.name,
        "model": ctx.cfg.train.registry_name, "build": ctx.spec,
        "inputs": info_record(ctx.data), "objective": {
            "kind": ctx.objective.kind, "primary": ctx.objective.primary,
            "higher_is_better": ctx.objective.higher_is_better,
            "score": ctx.cfg.train.score or "built-in"},
        "config": config_to_dict(ctx.cfg),
        "dataset_version": ctx.dataset_version, "parent_model_version": start.parent_number,
        "run_key": ctx.run_key,     # a re-run after a kill finds (and deletes) its progress
        "start": start.reason, "created_at": now_iso(), "code_version": code_version(),
        "samples_seen": state.samples, "samples_seen_total": parent_total + state.samples,
        "metrics": {"after": after.to_dict(), "before": before.to_dict() if before else None},
        "gate": {"passed": decision.promote, "reason": decision.reason,
                 "evidence": decision.evidence},
        "loader_state": loader.state_dict(), "optimizer_state": rest,
        "plan": {"fingerprint": plan.fingerprint(), "since_version": plan.since_dataset_version,
                 "replay_fraction": plan.replay_fraction}, "world_size": ctx.info.world,
        "curve": {"steps": state.steps, "epochs": state.epochs},
        # how it ran (not what it learned): device, step speed settings as resolved
        "run": {"device": str(ctx.place.device), "amp": ctx.place.amp, **asdict(step)},
    }


def _save(ctx: RunContext, model: torch.nn.Module, opt: torch.optim.Optimizer, loader: Any,
          state: LoopState, decision: Decision, before: EvalResult | None,
          after: EvalResult, step: StepPlan) -> tuple[int, Decision]:
    registry = ctx.registry
    number = registry.claim(uuid.uuid4().hex[:12])
    opt_tensors, rest = optimizer_parts(opt)
    meta = _meta(ctx, number, state, loader, decision, before, after, rest, step)
    if after.rows is not None:       # before meta.json: a model exists with its rows
        save_rows(registry, number, after.rows)
    registry.save(number, tensors_to_bytes(model_tensors(model)),
                  tensors_to_bytes(opt_tensors), meta)
    pin = pinned(ctx.start.promoted)
    if decision.promote and pin is not None:
        decision = Decision(False, f"gate passed ({decision.reason}) but the live model "
                            f"{ctx.start.parent_number} is pinned by {pin.get('by')} "
                            f"({pin.get('reason') or 'no reason given'}); `shardline models "
                            "promote` or `rollback` unpins it")
    decision = promote(registry, number, ctx.start, decision, after.accuracy,
                       ctx.dataset_version)
    registry.clear_progress(ctx.run_key)
    log.info("model %d saved at %s; %s: %s", number, registry.uri(number),
             "PROMOTED" if decision.promote else "not promoted", decision.reason)
    return number, decision


def finish(ctx: RunContext, model: torch.nn.Module, opt: torch.optim.Optimizer,
           stream: ShardStream, loader: Any, state: LoopState, before: EvalResult | None,
           after: EvalResult, resumed_at: int | None, step: StepPlan) -> TrainResult:
    """Gate, save (rank 0), promote, and return the same result on every rank."""
    # the kind's row score (a regression target's over its recorded variance), or the hook's
    variance = ctx.objective.target_variance() if ctx.hooks.score is None else None
    if before is not None and before.rows is not None and after.rows is not None:
        after = replace(after, fallen_classes=fallen_classes(
            before.rows, after.rows, ctx.data.target.classes))
    decision = decide(ctx.registry, ctx.start, before, after, ctx.cfg.train,
                      ctx.dataset_version, score_name(ctx.objective.kind, variance)
                      if ctx.hooks.score is None else "score", variance)
    number = 0
    if ctx.info.is_main:
        number, decision = _save(ctx, model, opt, loader, state, decision, before, after,
                                 step)
    shared = torch.tensor([number, int(decision.promote)], dtype=torch.int64)
    if ctx.info.distributed:
        on_device = shared.to(ctx.place.device)
        torch.distributed.broadcast(on_device, src=0)
        shared = on_device.cpu()
        barrier()
    number, promoted = int(shared[0]), bool(shared[1])
    new, replay = sample_counts(ctx)
    return TrainResult(
        dataset=ctx.cfg.dataset.name, model=ctx.cfg.train.registry_name, model_version=number,
        dataset_version=ctx.dataset_version, parent_model_version=ctx.start.parent_number,
        samples_seen=state.samples, new_samples=new, replay_samples=replay,
        epochs=ctx.cfg.train.epochs, eval_accuracy=after.accuracy,
        accuracy_before=before.accuracy if before else None, promoted=promoted,
        decision=decision.reason, checkpoint=ctx.registry.uri(number), start=ctx.start.reason,
        loader_samples_per_s=stream.stats()["samples_per_s"],
        train_samples_per_s=state.samples / state.wall_s if state.wall_s else 0.0,
        data_wait_share=state.wait_s / state.wall_s if state.wall_s else 0.0,
        resumed_at_step=resumed_at, eval=after.to_dict(),
        eval_before=before.to_dict() if before else None,
        curve_steps=state.steps, curve_epochs=state.epochs)
