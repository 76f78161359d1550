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
import torch.nn.functional as F
from torch import nn
from torchdata.nodes import Loader

from shardline.trainer.device import Placement
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


class _Running:
    """Device-side sums since the last read-back."""

    def __init__(self, device: torch.device) -> None:
        self.loss = torch.zeros((), device=device, dtype=torch.float64)
        self.correct = torch.zeros((), device=device, dtype=torch.int64)
        self.seen = 0

    def read(self) -> tuple[float, float]:
        n = max(self.seen, 1)
        return float(self.loss) / n, float(self.correct) / n


def train_step(model: nn.Module, opt: torch.optim.Optimizer, place: Placement,
               stream: ShardStream, batch: Batch, run: _Running) -> None:
    if place.cuda:   # a new step for CUDA graphs (reduce-overhead): last step's outputs are dead
        torch.compiler.cudagraph_mark_step_begin()
    x = place.to_device(batch["image"])
    y = place.to_device(batch["label"])
    if place.cuda:   # the pinned buffer may be refilled once the copy has happened
        event = torch.cuda.Event()
        event.record()
        stream.release(batch, event)
    with place.autocast():
        logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if not place.cuda:
        stream.release(batch)
    n = int(y.shape[0])
    run.loss += loss.detach().double() * n
    run.correct += (logits.detach().argmax(1) == y).sum()
    run.seen += n


def run_loop(model: nn.Module, opt: torch.optim.Optimizer, loader: Loader[Batch],
             stream: ShardStream, place: Placement, state: LoopState, hooks: LoopHooks,
             world: int = 1) -> LoopState:
    """Train until the loader is exhausted (all epochs); returns the updated ``state``."""
    model.train()
    interval = _Running(place.device)
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
        train_step(model, opt, place, stream, batch, interval)
        state.step += 1
        state.samples += (interval.seen - seen) * world
        state.wall_s += time.perf_counter() - t0
        if state.step % hooks.curve_every == 0 or state.step % hooks.log_every == 0 or epoch_end:
            _add_point(state, interval, epoch, time.perf_counter() - t_point, wait_point, world)
            interval = _Running(place.device)
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


def _add_point(state: LoopState, run: _Running, epoch: int, seconds: float, wait: float,
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
