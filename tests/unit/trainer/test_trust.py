"""The trainer's checks on stored objects, without a server: optimizer state (real torch
AdamW), architecture limits, model numbers, manifest entries."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from shardline.core.errors import ConfigError
from shardline.trainer.checkpoint import CheckpointError, load_optimizer_parts, optimizer_parts
from shardline.trainer.model import LIMITS, arch, build_model
from shardline.trainer.parent import make_optimizer
from shardline.trainer.trust import UntrustedInput, check_entries, check_key, model_number

SPEC = arch("cnn", 8, 2, (8, 8, 1), 10)


def trained() -> tuple[torch.nn.Module, dict[str, torch.Tensor], dict[str, Any]]:
    torch.manual_seed(0)
    model = build_model(SPEC)
    opt = make_optimizer(model, 1e-3, 1e-4)
    x = torch.randint(0, 256, (16, 1, 8, 8), dtype=torch.uint8)
    F.cross_entropy(model(x), torch.randint(0, 10, (16,))).backward()
    opt.step()
    tensors, rest = optimizer_parts(opt)
    return model, tensors, rest


@pytest.mark.parametrize(("edit", "says"), [
    (lambda r: r["param_groups"][0].update(maximize=True), "maximize = True"),
    (lambda r: r["param_groups"][0].update(differentiable=True), "differentiable"),
    (lambda r: r["param_groups"][0].update(momentum=0.9), "unknown param-group field"),
    (lambda r: r.update(param_groups="all"), "not a list of objects"),
    (lambda r: r["param_groups"][0].update(params=["0", "1"]), "not a list of integers"),
    (lambda r: r.update(plain_state={"0": {"step": -1}}), "non-negative step"),
    (lambda r: r.update(plain_state={"0": {"evil": 1}}), "is not state"),
])
def test_optimizer_state_outside_the_format_is_refused(edit: Any, says: str) -> None:
    model, tensors, rest = trained()
    rest = copy.deepcopy(rest)
    edit(rest)
    with pytest.raises(UntrustedInput, match=says):
        load_optimizer_parts(make_optimizer(model, 1e-3, 1e-4), tensors, rest, "s3://b/m/")


def test_optimizer_tensors_with_unknown_names_or_ids_or_shapes_are_refused() -> None:
    model, tensors, rest = trained()
    with pytest.raises(UntrustedInput, match="state.0.momentum_buffer"):
        load_optimizer_parts(make_optimizer(model, 1e-3, 1e-4),
                             {**tensors, "state.0.momentum_buffer": torch.zeros(1)}, rest, "x")
    with pytest.raises(UntrustedInput, match="state.999.exp_avg"):
        load_optimizer_parts(make_optimizer(model, 1e-3, 1e-4),
                             {**tensors, "state.999.exp_avg": torch.zeros(1)}, rest, "x")
    with pytest.raises(CheckpointError, match="shape"):
        load_optimizer_parts(make_optimizer(model, 1e-3, 1e-4),
                             {**tensors, "state.0.exp_avg": torch.zeros(3)}, rest, "x")


def test_every_hyper_parameter_is_this_runs() -> None:
    model, tensors, rest = trained()
    rest = copy.deepcopy(rest)
    rest["param_groups"][0].update(lr=99.0, eps=0.5, foreach=True, betas=[0.1, 0.2])
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0, foreach=False)
    load_optimizer_parts(opt, tensors, rest, "x")
    g = opt.param_groups[0]
    assert (g["lr"], g["eps"], g["foreach"], tuple(g["betas"])) == (2e-3, 1e-8, False,
                                                                       (0.9, 0.999))
    assert torch.equal(opt.state[next(model.parameters())]["exp_avg"], tensors["state.0.exp_avg"])


@pytest.mark.parametrize(("change", "says"), [
    ({"width": 4_000_000}, "width 4000000"), ({"depth": 40}, "depth 40"),
    ({"width": 1024, "depth": 8}, "width \\* 2\\*\\*\\(depth-1\\)"),
    ({"classes": 10**9}, "classes"), ({"shape": [100_000, 8, 1]}, "px a side"),
    ({"shape": [8, 8, 2000]}, "channels"),
    ({"width": "8"}, "must be integers"), ({"model": "vit"}, "one of"),
])
def test_arch_limits(change: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        build_model({**SPEC, **change})


def test_the_largest_allowed_arch_is_allowed() -> None:
    with torch.device("meta"):
        build_model(arch("resnet", LIMITS["widest"] // 8, 4, (224, 224, 3), 1000))


@pytest.mark.parametrize("value", [0, -1, True, 1.0, "1", None, [1]])
def test_model_numbers_are_positive_integers(value: Any) -> None:
    with pytest.raises(UntrustedInput, match="promoted.json"):
        model_number(value, "s3://b/models/d/m/promoted.json")
    assert model_number(7, "x") == 7


@pytest.mark.parametrize("key", ["lake/d/../x", "lake/d//x", "/lake/d/x", "lake/dx/a",
                                 "lake/d/a\\b", "lake/d/a\x00", "lake/d/./a", 5])
def test_keys_must_lie_under_the_prefix(key: Any) -> None:
    with pytest.raises(UntrustedInput, match="prefix lake/d/"):
        check_key(key, "lake/d", "manifest m")
    assert check_key("lake/d/data/batch=b/x.arrow", "lake/d", "m")


def test_entries_name_the_manifest_the_shard_and_the_field() -> None:
    class E:
        path, sha256, xxh3_128, rows, bytes = "lake/d/x.arrow", "0" * 64, None, -1, 3
    with pytest.raises(UntrustedInput) as err:
        check_entries([E()], "lake/d", "s3://b/lake/d/versions/v000002.json")
    assert "v000002.json" in str(err.value) and "lake/d/x.arrow" in str(err.value)
    assert "rows = -1" in str(err.value)


def _columns(**change: Any) -> Any:
    from shardline.core.parts import ShardEntry
    from shardline.core.shard_table import ShardColumns, as_table
    good = [ShardEntry(path=f"lake/d/shards/batch=b/part-{i}.arrow", rows=10, bytes=100,
                       sha256=f"{i:064x}", batch="b", partition={"batch": "b"},
                       xxh3_128=None if i % 2 else f"{i:032x}") for i in range(5)]
    good[3] = ShardEntry(**{**good[3].__dict__, **change})
    return ShardColumns(table=as_table(good))


@pytest.mark.parametrize("change, says", [
    ({"path": "lake/d/../x"}, "shard entry 3: field path"),
    ({"path": "lake/d//x"}, "shard entry 3"), ({"path": "lake/d/./x"}, "shard entry 3"),
    ({"path": "lake/dx/a"}, "shard entry 3"), ({"path": "lake/d/a\\b"}, "shard entry 3"),
    ({"path": "lake/d/a\x00"}, "shard entry 3"), ({"path": "lake/d/a/"}, "shard entry 3"),
    ({"sha256": "A" * 64}, "field sha256"), ({"sha256": "0" * 63}, "field sha256"),
    ({"xxh3_128": "z" * 32}, "field xxh3_128"), ({"rows": -1}, "rows = -1"),
    ({"bytes": -5}, "bytes = -5")])
def test_shard_columns_are_checked_like_entries(change: dict[str, Any], says: str) -> None:
    from shardline.trainer.trust import check_shard_columns
    with pytest.raises(UntrustedInput, match=re.escape(says)):
        check_shard_columns(_columns(**change), "lake/d", "s3://b/lake/d/versions/v000002.json")
    check_shard_columns(_columns(), "lake/d", "m")          # the good ones pass
