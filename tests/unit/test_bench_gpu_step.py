"""bench/gpu_step.py on the CPU: the trainer's step runs through every variant and size,
and without CUDA the GPU figure is reported missing, never estimated. (The GPU figures
themselves need a CUDA device; none runs here.)"""

from __future__ import annotations

import math

import pytest

from shardline.bench import gpu_step


def test_variant_plans_follow_the_trainer_decisions() -> None:
    gpu = gpu_step.variant_plan("trainer", cuda=True)
    assert (gpu.optimizer, gpu.compile_mode, gpu.tf32, gpu.cudnn_benchmark) == (
        "fused", "reduce-overhead", True, True)
    cpu = gpu_step.variant_plan("trainer", cuda=False)
    assert (cpu.optimizer, cpu.compile_mode, cpu.tf32) == ("for-loop", None, False)
    assert gpu_step.variant_plan("eager", cuda=True).compile_mode is None
    custom = gpu_step.variant_plan("foreach:default", cuda=True)
    assert (custom.optimizer, custom.compile_mode) == ("foreach", "default")
    with pytest.raises(ValueError):
        gpu_step.variant_plan("fast:default", cuda=True)


@pytest.mark.timeout(300)
def test_cpu_smoke_measures_every_cell_and_reports_the_gpu_bar_missing(tmp_path, monkeypatch
                                                                      ) -> None:
    monkeypatch.setattr(gpu_step, "write_result", lambda part, r: tmp_path / f"{part}.json")
    r = gpu_step.run(steps=1, sizes=[16, 32], batches=[4], variants=["foreach:none"])
    cells = {(x["variant"], x["side"], x["batch"]) for x in r["rows"]}
    assert cells == {(v, s, 4) for v in ("trainer", "eager", "foreach:none") for s in (16, 32)}
    assert all(math.isfinite(x["samples_per_s"]) and x["samples_per_s"] > 0 for x in r["rows"])
    assert {x["plan"]["optimizer"] for x in r["rows"]} == {"for-loop", "foreach"}
    (b,) = r["bars"]
    assert b["met"] is None and "missing" in b["note"] and "missing" in r["note"]
