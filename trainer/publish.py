"""The end of a run: gate the candidate, write it to the registry, move the pointer.

Every candidate is saved (a refused one too, with the reason in its meta.json), so a person
can inspect what the gate kept out. Only rank 0 writes; the model number and outcome are
then broadcast so every rank returns the same result.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

import torch

from shardline.core.config import config_to_dict
from shardline.core.errors import ObjectChanged, ObjectExists
from shardline.core.manifest import code_version, now_iso
from shardline.trainer.checkpoint import model_tensors, optimizer_parts, tensors_to_bytes
from shardline.trainer.dist import barrier
from shardline.trainer.evaluate import Decision, EvalResult, gate
from shardline.trainer.loop import LoopState
from shardline.trainer.stream import ShardStream

if TYPE_CHECKING:
    from shardline.trainer.run import TrainResult, _Run

log = logging.getLogger(__name__)


def decide(run: _Run, before: EvalResult | None, after: EvalResult) -> Decision:
    tol = run.cfg.train.promote_tolerance
    if run.start.promoted is not None and before is None:
        ok = after.accuracy is not None
        return Decision(ok, f"promoted model {run.start.parent_version} cannot be evaluated on "
                            f"this data (other input shape or classes); candidate accuracy "
                            f"{after.accuracy}" + ("" if ok else ": nothing to evaluate"))
    return gate(after.accuracy, before.accuracy if before else None, tol)


def sample_counts(run: _Run) -> tuple[int, int]:
    """(new, replay) training samples per epoch over all ranks."""
    new = replay = 0
    for s in run.plan.train_shards:
        n = len(run.plan.train_rows(s, run.reader.index(s)))
        if s.role == "new":
            new += n
        else:
            replay += n
    return new, replay


def _meta(run: _Run, number: int, state: LoopState, loader: Any, decision: Decision,
          before: EvalResult | None, after: EvalResult, rest: dict[str, Any]) -> dict[str, Any]:
    parent_total = int((run.start.parent_meta or {}).get("samples_seen_total", 0))
    return {
        "model_version": number, "dataset": run.cfg.dataset.name, "model": run.cfg.train.model,
        "arch": run.spec, "config": config_to_dict(run.cfg), "dataset_version":
        run.manifest.version, "parent_model_version": run.start.parent_version,
        "start": run.start.reason, "created_at": now_iso(), "code_version": code_version(),
        "samples_seen": state.samples, "samples_seen_total": parent_total + state.samples,
        "metrics": {"after": after.to_dict(), "before": before.to_dict() if before else None},
        "gate": {"passed": decision.promote, "reason": decision.reason},
        "loader_state": loader.state_dict(), "optimizer_state": rest,
        "plan": {"fingerprint": run.plan.fingerprint(), "since_version": run.plan.since_version,
                 "replay_fraction": run.plan.replay_fraction}, "world_size": run.info.world,
        "curve": {"steps": state.steps, "epochs": state.epochs},
    }


def _write(run: _Run, model: torch.nn.Module, opt: torch.optim.Optimizer, loader: Any,
           state: LoopState, decision: Decision, before: EvalResult | None,
           after: EvalResult) -> tuple[int, Decision]:
    number = run.registry.claim(uuid.uuid4().hex[:12])
    opt_tensors, rest = optimizer_parts(opt)
    meta = _meta(run, number, state, loader, decision, before, after, rest)
    run.registry.save(number, tensors_to_bytes(model_tensors(model)),
                      tensors_to_bytes(opt_tensors), meta)
    if decision.promote:
        try:
            run.registry.promote(number, run.start.promoted, {
                "accuracy": after.accuracy, "dataset_version": run.manifest.version})
        except (ObjectExists, ObjectChanged) as exc:
            decision = Decision(False, f"gate passed but another run moved the promoted "
                                       f"pointer meanwhile ({exc}); re-run training to compare "
                                       "against the new promoted model")
    run.registry.clear_progress(run.run_key)
    log.info("model %d saved at %s; %s: %s", number, run.registry.uri(number),
             "PROMOTED" if decision.promote else "not promoted", decision.reason)
    return number, decision


def publish(run: _Run, model: torch.nn.Module, opt: torch.optim.Optimizer, stream: ShardStream,
            loader: Any, state: LoopState, before: EvalResult | None, after: EvalResult,
            resumed_at: int | None) -> TrainResult:
    from shardline.trainer.run import TrainResult

    decision = decide(run, before, after)
    number = 0
    if run.info.is_main:
        number, decision = _write(run, model, opt, loader, state, decision, before, after)
    shared = torch.tensor([number, int(decision.promote)], dtype=torch.int64)
    if run.info.distributed:
        on_device = shared.to(run.place.device)
        torch.distributed.broadcast(on_device, src=0)
        shared = on_device.cpu()
        barrier()
    number, promoted = int(shared[0]), bool(shared[1])
    new, replay = sample_counts(run)
    return TrainResult(
        dataset=run.cfg.dataset.name, model=run.cfg.train.model, model_version=number,
        dataset_version=run.manifest.version, parent_model_version=run.start.parent_version,
        samples_seen=state.samples, new_samples=new, replay_samples=replay,
        epochs=run.cfg.train.epochs, eval_accuracy=after.accuracy,
        accuracy_before=before.accuracy if before else None, promoted=promoted,
        decision=decision.reason, checkpoint=run.registry.uri(number), start=run.start.reason,
        loader_samples_per_s=stream.stats()["samples_per_s"],
        train_samples_per_s=state.samples / state.wall_s if state.wall_s else 0.0,
        data_wait_share=state.wait_s / state.wall_s if state.wall_s else 0.0,
        resumed_at_step=resumed_at, eval=after.to_dict(),
        eval_before=before.to_dict() if before else None,
        curve_steps=state.steps, curve_epochs=state.epochs)
