"""Model/optimizer state through safetensors bytes (no pickle) and back, exactly."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shardline.trainer.checkpoint import (
    CheckpointError,
    bytes_to_tensors,
    header_metadata,
    load_model_tensors,
    load_optimizer_parts,
    model_tensors,
    optimizer_parts,
    tensors_to_bytes,
)
from shardline.trainer.model import arch, build_model
from shardline.trainer.parent import make_optimizer

SPEC = arch("cnn", 8, 2, (8, 8, 1), 10)


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 256, (16, 1, 8, 8), generator=g, dtype=torch.uint8),
            torch.randint(0, 10, (16,), generator=g))


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
    x, y = batch(seed)
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()


def test_weights_and_adamw_state_round_trip_exactly() -> None:
    torch.manual_seed(0)
    model = build_model(SPEC)
    opt = make_optimizer(model, 1e-3, 1e-4)
    for s in range(3):
        step(model, opt, s)
    weights = tensors_to_bytes(model_tensors(model))
    opt_tensors, rest = optimizer_parts(opt)
    opt_bytes = tensors_to_bytes(opt_tensors)

    clone = build_model(SPEC)
    clone_opt = make_optimizer(clone, 1e-3, 1e-4)
    load_model_tensors(clone, bytes_to_tensors(weights), "test")
    load_optimizer_parts(clone_opt, bytes_to_tensors(opt_bytes), rest, "test")
    step(model, opt, 99)
    step(clone, clone_opt, 99)
    for (k, a), b in zip(model.state_dict().items(), clone.state_dict().values(), strict=True):
        assert torch.equal(a, b), k


def test_this_runs_learning_rate_wins_over_the_stored_one() -> None:
    model = build_model(SPEC)
    opt = make_optimizer(model, 1e-3, 1e-4)
    step(model, opt, 0)
    tensors, rest = optimizer_parts(opt)
    new_opt = make_optimizer(model, 5e-4, 0.0)
    load_optimizer_parts(new_opt, tensors, rest, "test")
    assert new_opt.param_groups[0]["lr"] == 5e-4 and new_opt.param_groups[0]["weight_decay"] == 0


def test_weights_of_another_architecture_are_refused_with_the_reason() -> None:
    wide = build_model(arch("cnn", 16, 2, (8, 8, 1), 10))
    with pytest.raises(CheckpointError, match="wrong shape"):
        load_model_tensors(build_model(SPEC), model_tensors(wide), "s3://b/models/x/000001/")


def test_state_travels_in_the_safetensors_header() -> None:
    data = tensors_to_bytes({"w": torch.ones(2)}, {"state": '{"step": 7}'})
    assert header_metadata(data) == {"state": '{"step": 7}'}
    with pytest.raises(CheckpointError, match="not a safetensors"):
        header_metadata(b"\xff" * 16)
