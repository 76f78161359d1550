"""Model and optimizer state as safetensors bytes; nothing is ever unpickled.

Weights are a flat ``name -> tensor`` safetensors file. Optimizer state is split: tensors
(``state.<param index>.<name>``) go into a safetensors file, everything else (param group
hyper-parameters, non-tensor state) into JSON. Loading rebuilds ``optimizer.state_dict()``
from those two and lets the current config's learning rate and weight decay win.
"""

from __future__ import annotations

import json
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn

from shardline.core.errors import ShardlineError
from shardline.trainer.model import unwrap


class CheckpointError(ShardlineError):
    """A stored checkpoint cannot be loaded into the current model/optimizer."""


def tensors_to_bytes(tensors: dict[str, torch.Tensor], meta: dict[str, str] | None = None) -> bytes:
    clean = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    return st_save(clean, metadata=meta)


def bytes_to_tensors(data: bytes) -> dict[str, torch.Tensor]:
    return st_load(data)


def header_metadata(data: bytes) -> dict[str, str]:
    """The string metadata of a safetensors blob (its JSON header's ``__metadata__``)."""
    n = int.from_bytes(data[:8], "little")
    if n <= 0 or n > len(data) - 8:
        raise CheckpointError(f"not a safetensors blob (header length {n}, {len(data)} bytes)")
    return dict(json.loads(data[8:8 + n]).get("__metadata__") or {})


def model_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers of the unwrapped model (copies on the CPU)."""
    return {k: v.detach().to("cpu").clone() for k, v in unwrap(model).state_dict().items()}


def load_model_tensors(model: nn.Module, tensors: dict[str, torch.Tensor], where: str) -> None:
    target = unwrap(model)
    own = target.state_dict()
    missing = sorted(set(own) - set(tensors))
    extra = sorted(set(tensors) - set(own))
    bad = sorted(k for k in set(own) & set(tensors) if own[k].shape != tensors[k].shape)
    if missing or extra or bad:
        raise CheckpointError(
            f"weights at {where} do not fit the model: missing {missing[:5]}, unexpected "
            f"{extra[:5]}, wrong shape {bad[:5]}; the architecture changed: train from scratch"
        )
    target.load_state_dict(tensors)


def optimizer_parts(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, JSON-able rest) of an optimizer's state."""
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    plain: dict[str, dict[str, Any]] = {}
    for idx, state in sd["state"].items():
        for name, value in state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{idx}.{name}"] = value
            else:
                plain.setdefault(str(idx), {})[name] = value
    return tensors, {"param_groups": sd["param_groups"], "plain_state": plain}


def load_optimizer_parts(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor],
                         rest: dict[str, Any], where: str) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, idx, name = key.split(".", 2)
        state.setdefault(int(idx), {})[name] = value
    for idx, values in rest.get("plain_state", {}).items():
        state.setdefault(int(idx), {}).update(values)
    current = opt.state_dict()["param_groups"]
    groups = rest["param_groups"]
    if [len(g["params"]) for g in groups] != [len(g["params"]) for g in current]:
        raise CheckpointError(f"optimizer state at {where} has a different parameter layout")
    for old, new in zip(groups, current, strict=True):   # this run's hyper-parameters win
        old.update({k: new[k] for k in ("lr", "weight_decay", "betas", "eps") if k in new})
    try:
        opt.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError) as exc:
        raise CheckpointError(f"optimizer state at {where} does not fit: {exc}") from exc


def json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, default=str).encode()
