"""The training loop: steps over the loader, timing, progress lines, epoch-end hooks.

Time is split into *data wait* (blocked in ``next(loader)``) and the rest; the data-wait
share is wait / wall time of the loop. Loss and accuracy are accumulated on the device and
read back only at log intervals and epoch ends, so CUDA never syncs per step. Only rank 0
logs, one line per interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn
from torchdata.nodes import Loader

from shardline.core.fields import DatasetInfo
from shardline.trainer.device import Placement
from shardline.trainer.distill import Distill
from shardline.trainer.objectives import Objective
from shardline.trainer.stream import Batch, ShardStream

log = logging.getLogger(__name__)


@dataclass
class LoopState:
    """What the loop has done so far; saved in every in-progress checkpoint."""

    step: int = 0
    samples: int = 0                   # global (all ranks)
    wait_s: float = 0.0
    wall_s: float = 0.0
    steps: list[dict[str, Any]] = field(default_factory=list)    # curve points
    epochs: list[dict[str, Any]] = field(default_factory=list)   # per epoch

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoopState:
        return cls(**d)


@dataclass
class LoopHooks:
    epoch_end: Callable[[LoopState, int], dict[str, Any]]   # -> extra epoch metrics (eval)
    checkpoint: Callable[[LoopState], None]
    on_batch: Callable[[int, Batch], None] | None = None    # observe (tests, profiling)
    log_every: int = 50
    checkpoint_every: int = 200
    curve_every: int = 10
    is_main: bool = True
    lr_at: Callable[[int], float] | None = None              # step -> learning rate


class RunningSums:
    """Device-side sums since the last read-back."""

    def __init__(self, device: torch.device) -> None:
        self.loss = torch.zeros((), device=device, dtype=torch.float64)
        self.correct = torch.zeros((), device=device, dtype=torch.float64)   # row scores
        self.seen = 0

    def read(self) -> tuple[float, float]:
        n = max(self.seen, 1)
        return float(self.loss) / n, float(self.correct) / n


# (loss, rows, sum of the rows' scores) of one batch already on the device
Step = Callable[[nn.Module, dict[str, Any]], tuple[torch.Tensor, int, torch.Tensor | None]]


def make_step(info: DatasetInfo, objective: Objective,
              hook: Callable[..., Any] | None = None, shift: torch.Tensor | None = None,
              keep: Distill | None = None) -> Step:
    """The loss of a batch: the target kind's (``trainer.objectives``) on the model's output
    for the raw fields, or the user's ``step`` hook (``trainer.factory.Hooks``).

    ``shift`` (a class target's, on the model's device): added to the logits in the loss
    only, the prior correction of an update whose class mix is not the data's
    (``trainer.balance``); the training accuracy is the unshifted model's. ``keep``: the
    parent's answers distilled into the known classes' outputs (``trainer.distill``)."""
    names, target = [f.name for f in info.fields], info.target.name

    def builtin(model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, int,
                                                                  torch.Tensor | None]:
        out = model({n: batch[n] for n in names})
        y = batch[target]
        fitted = out if shift is None else out.float() + shift
        loss = objective.loss(fitted, y)
        if keep is not None:
            loss = loss + keep.loss(out, {n: batch[n] for n in names})
        return loss, int(y.shape[0]), objective.row_score(out.detach(), y).sum()

    def user(model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, int,
                                                               torch.Tensor | None]:
        got = hook(model, batch)  # type: ignore[misc]
        loss, metrics = got if isinstance(got, tuple) else (got, {})
        n = int(batch[target].shape[0])
        score = metrics.get("score") if isinstance(metrics, dict) else None
        return loss, n, None if score is None else torch.as_tensor(score).detach() * n

    return builtin if hook is None else user


def _image_label_step() -> Step:
    """The step of today's shorthand datasets (one ``image`` field, a ``label`` class)."""
    from shardline.core.fields import FieldInfo, TargetInfo
    from shardline.trainer.objectives import objective

    target = TargetInfo("label", "class", ("class",))
    return make_step(DatasetInfo((FieldInfo("image", "image", "uint8", ()),), target),
                     objective(target))


def train_step(model: nn.Module, opt: torch.optim.Optimizer, place: Placement,
               stream: ShardStream, batch: Batch, run: RunningSums, step: Step | None = None
               ) -> None:
    """One optimizer step on ``batch`` (``step``: :func:`make_step`'s; default: image and
    class label, as the benchmarks feed)."""
    step = step or _image_label_step()
    if place.cuda:   # a new step for CUDA graphs (reduce-overhead): last step's outputs are dead
        torch.compiler.cudagraph_mark_step_begin()
    on_device = {k: place.to_device(v) if isinstance(v, torch.Tensor) else v
                 for k, v in batch.items()}
    if place.cuda:   # the pinned buffer may be refilled once the copy has happened
        event = torch.cuda.Event()
        event.record()
        stream.release(batch, event)
    with place.autocast():
        loss, n, score = step(model, on_device)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if not place.cuda:
        stream.release(batch)
    run.loss += loss.detach().double() * n
    if score is not None:
        run.correct += score.double()
    run.seen += n


def run_loop(model: nn.Module, opt: torch.optim.Optimizer, loader: Loader[Batch],
             stream: ShardStream, place: Placement, state: LoopState, hooks: LoopHooks,
             world: int, step: Step) -> LoopState:
    """Train until the loader is exhausted (all epochs); returns the updated ``state``."""
    model.train()
    interval = RunningSums(place.device)
    t_point, wait_point, logged = time.perf_counter(), 0.0, len(state.steps)
    it = iter(loader)
    while True:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        wait = time.perf_counter() - t0
        state.wait_s += wait
        wait_point += wait
        if hooks.on_batch is not None:
            hooks.on_batch(state.step, batch)
        epoch, epoch_end = int(batch["epoch"]), bool(batch["epoch_end"])
        seen = interval.seen
        if hooks.lr_at is not None:
            lr = hooks.lr_at(state.step)
            for group in opt.param_groups:
                group["lr"] = lr
        train_step(model, opt, place, stream, batch, interval, step)
        state.step += 1
        state.samples += (interval.seen - seen) * world
        state.wall_s += time.perf_counter() - t0
        if state.step % hooks.curve_every == 0 or state.step % hooks.log_every == 0 or epoch_end:
            _add_point(state, interval, epoch, time.perf_counter() - t_point, wait_point, world)
            interval = RunningSums(place.device)
            t_point, wait_point = time.perf_counter(), 0.0
        if (state.step % hooks.log_every == 0 or epoch_end) and hooks.is_main:
            _log(state.steps[logged:], state.step, epoch)
        if state.step % hooks.log_every == 0 or epoch_end:
            logged = len(state.steps)
        if epoch_end:
            row = {"epoch": epoch, "step": state.step,
                   **_summary([p for p in state.steps if p["epoch"] == epoch])}
            row.update(hooks.epoch_end(state, epoch))
            state.epochs.append({k: row[k] for k in row if k not in ("samples_per_s",
                                                                     "data_wait")})
            hooks.checkpoint(state)
            t_point = time.perf_counter()     # evaluation time is not training throughput
        elif state.step % hooks.checkpoint_every == 0:
            hooks.checkpoint(state)
    return state


def _add_point(state: LoopState, run: RunningSums, epoch: int, seconds: float, wait: float,
               world: int) -> None:
    loss, acc = run.read()
    state.steps.append({"step": state.step, "epoch": epoch, "loss": loss, "train_accuracy": acc,
                        "samples": run.seen * world, "seconds": seconds, "wait_s": wait})


def _summary(points: list[dict[str, Any]]) -> dict[str, float]:
    """Sample-weighted loss/accuracy and rates over curve points."""
    n = sum(p["samples"] for p in points) or 1
    secs = sum(p["seconds"] for p in points) or 1e-9
    return {"loss": sum(p["loss"] * p["samples"] for p in points) / n,
            "train_accuracy": sum(p["train_accuracy"] * p["samples"] for p in points) / n,
            "samples_per_s": n / secs, "data_wait": sum(p["wait_s"] for p in points) / secs}


def _log(points: list[dict[str, Any]], step: int, epoch: int) -> None:
    if not points:
        return
    s = _summary(points)
    log.info("step %d epoch %d loss %.4f acc %.3f samples/s %.0f data-wait %.1f%%", step, epoch,
             s["loss"], s["train_accuracy"], s["samples_per_s"], 100.0 * s["data_wait"])
