"""The step's speed settings (issue 14 item 1) decided per device, on a CPU.

What runs here: every decision (``plan_step`` for cuda=True and cuda=False), the AdamW
implementations that exist on the CPU (for-loop, foreach, fused) with real torch, the
backend flags left alone on the CPU, and the batch-size / learning-rate rule. What does not
run here: the CUDA paths themselves (fused AdamW on CUDA, ``torch.compile`` with
``reduce-overhead`` CUDA graphs or ``max-autotune-no-cudagraphs``, TF32 and cudnn.benchmark
taking effect); ``tests/integration/test_train_gpu.py`` runs them on a GPU machine."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from shardline.core.errors import ConfigError
from shardline.trainer.accel import StepPlan, apply_backends, plan_step
from shardline.trainer.context import run_key
from shardline.trainer.model import arch, build_model
from shardline.trainer.options import RunOptions, scaled_lr, with_batch_size
from shardline.trainer.parent import Start, make_optimizer
from tests.integration.trainer_data import digits_config


def test_the_cpu_keeps_every_speed_setting_off() -> None:
    plan = plan_step("auto", "auto", None, None, cuda=False, distributed=False)
    assert plan == StepPlan("for-loop", None, False, False)
    # forcing TF32 / benchmark cannot switch them on without CUDA
    assert plan_step("auto", "auto", True, True, cuda=False, distributed=False).tf32 is False


def test_cuda_defaults_decided_without_a_gpu() -> None:
    """Only the decision runs here; the CUDA path itself is test_train_gpu.py's."""
    assert plan_step("auto", "auto", None, None, cuda=True, distributed=False) == StepPlan(
        "fused", "reduce-overhead", True, True)
    ddp = plan_step("auto", "auto", None, None, cuda=True, distributed=True)
    assert ddp.compile_mode == "max-autotune-no-cudagraphs"     # DDP hooks break CUDA graphs
    forced = plan_step("foreach", "none", False, False, cuda=True, distributed=False)
    assert forced == StepPlan("foreach", None, False, False)
    assert plan_step("auto", "max-autotune", None, None, cuda=True,
                     distributed=False).compile_mode == "max-autotune"


def test_compile_asked_for_on_the_cpu_runs_eager_and_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        plan = plan_step("auto", "reduce-overhead", None, None, cuda=False, distributed=False)
        legacy = plan_step("auto", "auto", None, None, cuda=False, distributed=False,
                           legacy_compile=True)
    assert plan.compile_mode is None and legacy.compile_mode is None
    assert sum("running eager" in r.message for r in caplog.records) == 2


def test_unknown_choices_are_refused_with_the_list() -> None:
    with pytest.raises(ValueError, match="fused"):
        RunOptions(optimizer="lion")
    with pytest.raises(ValueError, match="reduce-overhead"):
        RunOptions(compile_mode="fast")


@pytest.mark.parametrize(("impl", "flags"), [("for-loop", (False, False)),
                                             ("foreach", (True, None)), ("fused", (None, True))])
def test_each_adamw_implementation_on_the_cpu_takes_the_same_step(
        impl: str, flags: tuple[bool | None, bool | None]) -> None:
    """fused/foreach are CUDA's fast paths; on the CPU they exist too and agree with the
    reference within float rounding (the default CPU run stays on the for-loop)."""
    spec = arch("cnn", 8, 2, (8, 8, 1), 10)
    x = torch.randint(0, 256, (16, 1, 8, 8), dtype=torch.uint8)
    y = torch.randint(0, 10, (16,))
    out = {}
    for name in ("for-loop", impl):
        torch.manual_seed(0)
        model = build_model(spec)
        opt = make_optimizer(model, 1e-2, 1e-4, name)
        for _ in range(3):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        out[name] = torch.cat([p.detach().flatten() for p in model.parameters()])
        group = opt.param_groups[0]
        if name == impl:
            assert (group.get("foreach"), group.get("fused")) == flags
    assert torch.allclose(out["for-loop"], out[impl], rtol=1e-5, atol=1e-6)


def test_backend_flags_are_untouched_on_the_cpu() -> None:
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
              torch.backends.cudnn.benchmark)
    apply_backends(plan_step("auto", "auto", None, None, cuda=False, distributed=False))
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark) == before


def test_learning_rate_follows_the_batch_size_rule() -> None:
    assert scaled_lr(1e-3, 256, 1024, "sqrt") == pytest.approx(2e-3)
    assert scaled_lr(1e-3, 256, 512, "linear") == pytest.approx(2e-3)
    assert scaled_lr(1e-3, 256, 64, "none") == 1e-3
    with pytest.raises(ConfigError, match="sqrt"):
        scaled_lr(1e-3, 256, 512, "cubic")
    cfg = digits_config(batch_size=32, lr=2e-3)
    big = with_batch_size(cfg, 128)
    assert (big.train.batch_size, big.train.lr) == (128, pytest.approx(4e-3))
    # a different batch size is a different run: it never resumes the other's progress
    start = Start(None, None, False, None, "scratch")
    assert run_key(cfg, 1, start, 1) != run_key(big, 1, start, 1)
