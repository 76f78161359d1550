"""GPU feed: can the shardline loader keep a compiled ResNet-18 busy?

A ResNet-18-style network (``trainer.model.ResNetStyle``, width 64, 4 stages of 2 basic
blocks, CIFAR-style stem) trains on S-size batches (256 x 32x32x3) with bf16 autocast,
built as ``train`` builds it (``trainer.accel``: fused AdamW, ``torch.compile``
``reduce-overhead``, TF32 on CUDA), with the trainer's own step (``trainer.loop.train_step``:
non-blocking copy from the pinned batch buffer, buffer handed back after the copy). Two feeds, in
interleaved rounds: the shardline loader (warm cache, prefetch thread as on CUDA) and
synthetic tensors already on the GPU (the step's upper bound). Reported: samples/s of both,
their ratio (bar >= 0.95) and the share of wall time the loop waited for data.

Without CUDA the same loop runs on CPU (float32, eager, fewer steps) so the script is
exercised, and the GPU figure is reported as missing.

    .venv/bin/python -m shardline.bench.gpu_feed [--json] [--steps N] [--rounds R]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from typing import Any

import torch

from shardline.bench.common import (
    bar,
    interleaved,
    machine,
    median,
    print_table,
    ratio,
    write_result,
)
from shardline.bench.contenders import BATCH, ShardlineSet
from shardline.bench.loader_data import SetFiles, SetSpec, pixels
from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from shardline.trainer.accel import apply_backends, compiled, plan_step
from shardline.trainer.device import Placement, choose
from shardline.trainer.dist import DistInfo
from shardline.trainer.loop import RunningSums, train_step
from shardline.trainer.model import arch, build_model
from shardline.trainer.parent import make_optimizer


class _OnDevice:
    """Synthetic batches already on the device; the same batch every step."""

    def __init__(self, place: Placement, shape: tuple[int, int, int]) -> None:
        h, w, c = shape
        g = torch.Generator(device="cpu").manual_seed(0)
        img = torch.randint(0, 256, (BATCH, h, w, c), dtype=torch.uint8, generator=g)
        self.batch = {"image": img.to(place.device).permute(0, 3, 1, 2),
                      "label": torch.randint(0, 10, (BATCH,), generator=g).to(place.device)}

    def release(self, batch: Any, event: Any = None) -> None:
        return None


def _loop(model: torch.nn.Module, opt: torch.optim.Optimizer, place: Placement, batches: Any,
          owner: Any, steps: int, warmup: int) -> tuple[float, float]:
    """(samples/s, data-wait share) over ``steps`` timed steps after ``warmup`` steps."""
    run = RunningSums(place.device)
    for _ in range(warmup):
        train_step(model, opt, place, owner, next(batches), run)
    if place.cuda:
        torch.cuda.synchronize()
    wait, t0 = 0.0, time.perf_counter()
    for _ in range(steps):
        t = time.perf_counter()
        batch = next(batches)
        wait += time.perf_counter() - t
        train_step(model, opt, place, owner, batch, run)
    run.read()                                  # one device sync, as at a log line
    elapsed = time.perf_counter() - t0
    return steps * BATCH / elapsed, wait / elapsed


def _shardline_batches(s: ShardlineSet) -> tuple[Any, Any]:
    from shardline.trainer.loader import make_train_loader

    stream = s.stream(10**6)
    return iter(make_train_loader(stream, s.spec)), stream


def run(steps: int | None = None, rounds: int = 5, rows: int = 50_000) -> dict[str, Any]:
    place = choose(None, DistInfo.from_env(), amp=True)
    cuda = place.cuda
    steps = steps or (200 if cuda else 3)
    width = 64 if cuda else 16        # CPU: a narrow smoke run, not the figure
    spec = SetSpec("S", rows, (32, 32, 3), png_rows=rows)
    images, labels = pixels(spec)
    files = SetFiles(spec, images, labels)
    store = ObjectStore(StoreSettings(bucket="unused", endpoint_url="http://127.0.0.1:9"))
    s = ShardlineSet(files, "none", store, pin_memory=cuda)
    torch.manual_seed(0)
    # the step as `train` builds it (trainer.accel): on CUDA fused AdamW, compile
    # reduce-overhead, TF32 and cudnn.benchmark; on the CPU eager and for-loop AdamW
    plan = plan_step("auto", "auto", None, None, cuda=cuda, distributed=False)
    apply_backends(plan)
    model = place.prepare(build_model(arch("resnet", width, 4, spec.shape, 10)))
    opt = make_optimizer(model, 1e-3, 0.01, plan.optimizer)
    model = compiled(model, plan)
    synthetic = _OnDevice(place, spec.shape)
    waits: dict[str, list[float]] = {"shardline": [], "synthetic": []}
    warm = 30 if cuda else 1

    def feed(name: str) -> float:
        if name == "synthetic":
            batches, owner = iter(lambda: synthetic.batch, None), synthetic
        else:
            batches, owner = _shardline_batches(s)
        rate, wait = _loop(model, opt, place, batches, owner, steps, warm)
        waits[name].append(wait)
        return rate

    _loop(model, opt, place, iter(lambda: synthetic.batch, None), synthetic, 1, warm)  # compile
    values = interleaved({n: functools.partial(feed, n) for n in waits}, rounds)
    s.close()
    result: dict[str, Any] = {
        "part": "gpu", "machine": machine(), "device": str(place.device), "amp": place.amp,
        "compiled": plan.compile_mode or "no", "optimizer": f"AdamW ({plan.optimizer})",
        "model": f"ResNet-18-style (trainer.model.ResNetStyle width {width} "
                 "depth 4)",
        "batch_size": BATCH, "steps_per_round": steps, "rounds": rounds,
        "samples_per_s": {n: median(v) for n, v in values.items()},
        "data_wait_share": {n: median(v) for n, v in waits.items()},
        "shardline_vs_synthetic": ratio(values["shardline"], values["synthetic"]),
    }
    if not cuda:
        result["note"] = ("no CUDA device: this is a CPU smoke run (float32, eager, width 16) "
                          "that only exercises the script; the GPU figure is missing")
    value = result["shardline_vs_synthetic"] if cuda else float("nan")
    result["bars"] = [bar("gpu.shardline_vs_synthetic", value, 0.95,
                          note="" if cuda else "missing: no CUDA device")]
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", type=int, default=50_000)
    args = ap.parse_args(argv)
    r = run(args.steps, args.rounds, args.rows)
    path = write_result("gpu", r)
    print_table(f"GPU feed on {r['device']}", ["feed", "samples/s", "data wait"],
                [(n, r["samples_per_s"][n], r["data_wait_share"][n]) for n in r["samples_per_s"]],
                stderr=args.json)
    print(json.dumps(r) if args.json else f"ratio {r['shardline_vs_synthetic']:.3f}; {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
