"""The training step's speed settings, resolved for the device a run uses.

Measured on one H100 (issue 14; the trainer's ResNet-18-style model, 32 px, batch 256):
the step is launch-bound, not GPU-bound. Eager AdamW ran 18.8k samples/s; a fused AdamW
under ``torch.compile`` 27.5k; ``max-autotune-no-cudagraphs`` + fused 30.5k; CUDA graphs
(``mode="reduce-overhead"``) + fused 63.1k. Hence, on CUDA:

* optimizer: ``fused`` AdamW (one kernel for all parameters instead of several per
  parameter); ``foreach`` is the multi-tensor fallback; ``for-loop`` is torch's reference;
* compile: ``reduce-overhead`` (CUDA graphs replay the whole step's kernels in one launch)
  for a single process; under DDP ``max-autotune-no-cudagraphs`` (DDP's gradient
  all-reduce hooks break the graph, so CUDA graphs would not capture the step);
* backends: TF32 for the float32 matmuls/convolutions that bf16 autocast leaves, and
  ``cudnn.benchmark`` (input shapes are fixed per run, so the per-shape search pays once).

On the CPU every one of these stays off: eager, torch's default (for-loop) AdamW, no
backend flags, so a CPU run is bit-for-bit what it was and resumes exactly. Each choice can
be forced through :class:`~shardline.trainer.options.RunOptions` (``optimizer``,
``compile_mode``, ``tf32``, ``cudnn_benchmark``). The decisions are pure functions of
(setting, device), tested on a CPU; the CUDA paths themselves run only on a GPU
(``tests/integration/test_train_gpu.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger(__name__)

OPTIMIZERS = ("auto", "fused", "foreach", "for-loop")
COMPILE_MODES = ("auto", "none", "default", "reduce-overhead", "max-autotune",
                 "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class StepPlan:
    """What a run's training step will use (logged once, and put in the result)."""

    optimizer: str                 # fused | foreach | for-loop
    compile_mode: str | None       # None: eager
    tf32: bool
    cudnn_benchmark: bool


def optimizer_impl(requested: str, cuda: bool) -> str:
    """``auto``: fused on CUDA, torch's for-loop reference on the CPU."""
    if requested not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {list(OPTIMIZERS)}, got {requested!r}")
    if requested == "auto":
        return "fused" if cuda else "for-loop"
    return requested


def optimizer_kwargs(impl: str) -> dict[str, Any]:
    """AdamW keyword arguments selecting ``impl`` (``fused`` / ``foreach`` / ``for-loop``)."""
    return {"fused": {"fused": True}, "foreach": {"foreach": True},
            "for-loop": {"foreach": False, "fused": False}}[impl]


def compile_mode(requested: str, cuda: bool, distributed: bool, legacy_flag: bool) -> str | None:
    """The ``torch.compile`` mode for a run, or None for eager.

    ``auto``: ``reduce-overhead`` on one CUDA device, ``max-autotune-no-cudagraphs`` under
    DDP, eager on the CPU. ``legacy_flag`` is ``[train] compile``: it only matters on the
    CPU, where a requested compile is refused with a warning (as before)."""
    if requested not in COMPILE_MODES:
        raise ValueError(f"compile_mode must be one of {list(COMPILE_MODES)}, got "
                         f"{requested!r}")
    if not cuda:
        if requested not in ("auto", "none") or legacy_flag:
            log.warning("torch.compile was asked for (%s) but no CUDA device is in use: "
                        "running eager", requested if requested != "auto" else "train.compile")
        return None
    if requested == "none":
        return None
    if requested == "auto":
        return "max-autotune-no-cudagraphs" if distributed else "reduce-overhead"
    return requested


def plan_step(optimizer: str, compile_request: str, tf32: bool | None,
              cudnn_benchmark: bool | None, *, cuda: bool, distributed: bool,
              legacy_compile: bool = False) -> StepPlan:
    """Every speed choice for a run on ``cuda`` or not (None: the device's default)."""
    return StepPlan(optimizer_impl(optimizer, cuda),
                    compile_mode(compile_request, cuda, distributed, legacy_compile),
                    cuda if tf32 is None else tf32 and cuda,
                    cuda if cudnn_benchmark is None else cudnn_benchmark and cuda)


def apply_backends(plan: StepPlan) -> None:
    """Set the process-wide ``torch.backends`` flags ``plan`` asks for (CUDA only: on the
    CPU nothing is touched)."""
    if plan.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if plan.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True


def compiled(model: torch.nn.Module, plan: StepPlan) -> torch.nn.Module:
    """``model`` under ``torch.compile`` in the plan's mode (itself when the plan is eager).
    The one place the trainer and the step benchmark (``bench/gpu_step.py``) compile."""
    if plan.compile_mode is None:
        return model
    return torch.compile(model, mode=plan.compile_mode)  # type: ignore[return-value]
