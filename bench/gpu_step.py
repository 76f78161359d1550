"""The trainer's training step on synthetic on-device batches (issue 14, item 1).

What ``train`` runs, built by the same functions ``trainer.run`` uses: the ResNet-18-style
model (``trainer.model``, width 64, 4 stages), placed by ``trainer.device`` (bf16 autocast,
channels-last on CUDA), AdamW from ``trainer.parent.make_optimizer`` in the implementation
``trainer.accel.plan_step`` picks, ``torch.backends`` flags from ``apply_backends``, the
``torch.compile`` mode from the same plan (``accel.compiled``), and ``trainer.loop.train_step``
(loss, backward, step, on-device metric sums). The batches are uint8 images already on the
device, so the figure is the step alone: the ceiling the loader has to feed (the GPU feed,
``bench/gpu_feed.py``, compares the two).

Variants, each over image side x batch size (default 32 and 224 px, batch 256 and 512):

* ``trainer``: the defaults ``train`` uses on this device (on CUDA: fused AdamW, compile
  ``reduce-overhead``, TF32, cudnn.benchmark) -- the issue's bar (>= 55,000 samples/s at
  32 px, batch 256, on an H100-class GPU);
* ``eager``: no compile, for-loop AdamW (the trainer before issue 14), for the ratio;
* ``--variants`` adds others by ``optimizer:compile_mode`` (e.g. ``fused:default``).

Without CUDA the script runs a narrow CPU smoke (width 8, a few steps, small sizes): it
exercises the code path; the GPU figures are reported as missing, never estimated.

    .venv/bin/python -m shardline.bench.gpu_step [--json] [--steps N] [--sizes 32,224]
                                       [--batches 256,512] [--variants fused:default,...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import Any

import torch

from shardline.bench.common import bar, machine, print_table, write_result
from shardline.trainer.accel import StepPlan, apply_backends, compiled, plan_step
from shardline.trainer.device import Placement, choose
from shardline.trainer.dist import DistInfo
from shardline.trainer.loop import RunningSums, train_step
from shardline.trainer.model import arch, build_model
from shardline.trainer.parent import make_optimizer

CLASSES = 10
BAR_SAMPLES_PER_S = 55_000.0          # 32 px, batch 256, H100-class GPU (issue 14)


class _Synthetic:
    """One uint8 batch already on the device, handed out every step (``release`` as the
    trainer's stream has it, a no-op here)."""

    def __init__(self, place: Placement, side: int, batch: int) -> None:
        g = torch.Generator(device="cpu").manual_seed(side * 7919 + batch)
        img = torch.randint(0, 256, (batch, side, side, 3), dtype=torch.uint8, generator=g)
        self.batch = {"image": img.to(place.device).permute(0, 3, 1, 2),
                      "label": torch.randint(0, CLASSES, (batch,), generator=g).to(place.device)}

    def release(self, batch: Any, event: Any = None) -> None:
        return None


def variant_plan(name: str, cuda: bool) -> StepPlan:
    """``trainer`` (train's defaults here), ``eager`` (no compile, for-loop AdamW), or
    ``<optimizer>:<compile mode>`` -- all through ``accel.plan_step``, as ``train`` decides."""
    if name == "trainer":
        return plan_step("auto", "auto", None, None, cuda=cuda, distributed=False)
    if name == "eager":
        return plan_step("for-loop", "none", None, None, cuda=cuda, distributed=False)
    optimizer, _, mode = name.partition(":")
    return plan_step(optimizer or "auto", mode or "auto", None, None, cuda=cuda,
                     distributed=False)


def measure(place: Placement, plan: StepPlan, side: int, batch: int, width: int, steps: int,
            warmup: int) -> float:
    """Samples/s of ``steps`` trainer steps after ``warmup`` (compile happens in warm-up)."""
    torch._dynamo.reset()          # each cell compiles afresh, as its own `train` run would
    if place.cuda:
        torch.cuda.empty_cache()
    apply_backends(plan)
    torch.manual_seed(0)
    model = place.prepare(build_model(arch("resnet", width, 4, (side, side, 3), CLASSES)))
    opt = make_optimizer(model, 1e-3, 0.01, plan.optimizer)
    model = compiled(model, plan)
    model.train()
    feed = _Synthetic(place, side, batch)
    run = RunningSums(place.device)
    for _ in range(warmup):
        train_step(model, opt, place, feed, feed.batch, run)  # type: ignore[arg-type]
    if place.cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        train_step(model, opt, place, feed, feed.batch, run)  # type: ignore[arg-type]
    run.read()                                   # one device sync, as at a log line
    elapsed = time.perf_counter() - t0
    loss, _ = run.read()
    if loss != loss:                             # NaN: the step did not train
        raise RuntimeError(f"loss is NaN at {side} px, batch {batch}, plan {plan}")
    return steps * batch / elapsed


def run(steps: int | None = None, sizes: list[int] | None = None,
        batches: list[int] | None = None, variants: list[str] | None = None) -> dict[str, Any]:
    place = choose(None, DistInfo.from_env(), amp=True)
    cuda = place.cuda
    steps = steps or (100 if cuda else 2)
    warmup = 20 if cuda else 1
    width = 64 if cuda else 8                       # CPU: a smoke run, not the figure
    sizes = sizes or ([32, 224] if cuda else [32, 64])
    batches = batches or ([256, 512] if cuda else [8, 16])
    names = ["trainer", "eager", *(variants or [])]
    rows: list[dict[str, Any]] = []
    for name in names:
        plan = variant_plan(name, cuda)
        for side in sizes:
            for b in batches:
                rate = measure(place, plan, side, b, width, steps, warmup)
                rows.append({"variant": name, "plan": asdict(plan), "side": side, "batch": b,
                             "samples_per_s": rate})
    result: dict[str, Any] = {
        "part": "gpu_step", "machine": machine(), "device": str(place.device),
        "device_name": torch.cuda.get_device_name(place.device) if cuda else "cpu",
        "amp": place.amp, "model": f"ResNet-18-style (trainer.model.ResNetStyle width {width} "
                                   "depth 4)", "steps": steps, "warmup": warmup, "rows": rows,
    }
    head = next((r["samples_per_s"] for r in rows
                 if (r["variant"], r["side"], r["batch"]) == ("trainer", 32, 256)), None)
    if not cuda or head is None:
        result["note"] = ("no CUDA device: a CPU smoke run (float32, eager, width 8) that only "
                          "exercises the step; the GPU figures are missing")
        value = float("nan")
    else:
        value = head
    result["bars"] = [bar("gpu.trainer_step_32px_b256_samples_per_s", value, BAR_SAMPLES_PER_S,
                          note="" if cuda else "missing: no CUDA device")]
    return result


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--sizes", type=_ints, default=None, help="image sides, e.g. 32,224")
    ap.add_argument("--batches", type=_ints, default=None, help="batch sizes, e.g. 256,512")
    ap.add_argument("--variants", default="",
                    help="extra optimizer:compile_mode pairs, e.g. fused:default,foreach:none")
    args = ap.parse_args(argv)
    r = run(args.steps, args.sizes, args.batches, [v for v in args.variants.split(",") if v])
    path = write_result("gpu_step", r)
    print_table(f"trainer step on {r['device_name']}", ["variant", "px", "batch", "samples/s"],
                [(x["variant"], x["side"], x["batch"], x["samples_per_s"]) for x in r["rows"]],
                stderr=args.json)
    print(json.dumps(r) if args.json else f"{r.get('note', 'ok')}; {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
