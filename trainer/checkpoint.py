"""Model and optimizer state as safetensors bytes; nothing is ever unpickled.

Weights are a flat ``name -> tensor`` safetensors file. Optimizer state is split: tensors
(``state.<param index>.<name>``) go into a safetensors file, everything else (param group
hyper-parameters, non-tensor state) into JSON. Loading rebuilds ``optimizer.state_dict()``
from those two (checked: ``trainer.trust``) and takes every hyper-parameter from the
current optimizer: this run's learning rate, weight decay and implementation win.
"""

from __future__ import annotations

from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn

from shardline.trainer.blobs import CheckpointError as CheckpointError
from shardline.trainer.blobs import header_metadata as header_metadata
from shardline.trainer.blobs import json_bytes as json_bytes
from shardline.trainer.model import unwrap
from shardline.trainer.trust import (
    OPTIMIZER_STATE_NAMES,
    UntrustedInput,
    check_param_groups,
)


def tensors_to_bytes(tensors: dict[str, torch.Tensor], meta: dict[str, str] | None = None) -> bytes:
    clean = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    return st_save(clean, metadata=meta)


def bytes_to_tensors(data: bytes) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors blob.

    Raises:
        CheckpointError: the bytes are not a safetensors file."""
    try:
        return st_load(data)
    except SafetensorError as exc:
        raise CheckpointError(f"not a safetensors blob ({len(data)} bytes: {exc})") from exc


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
    """Stored optimizer state into ``opt``, checked first (``trainer.trust``): only AdamW's
    known fields and state names, indices within the stored layout, moment tensors shaped
    like their parameters. Every hyper-parameter is this run's.

    Raises:
        UntrustedInput: the state breaks the format (unknown field, maximize=True, ...).
        CheckpointError: well-formed state for another parameter layout.
    """
    if not isinstance(rest, dict):
        raise UntrustedInput(f"optimizer state at {where} is {type(rest).__name__}, not an "
                             "object; delete it to start AdamW fresh")
    current = opt.state_dict()["param_groups"]
    groups = check_param_groups(rest.get("param_groups"), current, where)
    if [len(g["params"]) for g in groups] != [len(g["params"]) for g in current]:
        raise CheckpointError(f"optimizer state at {where} has a different parameter layout")
    # stored param id -> this run's parameter (load_state_dict maps them by position)
    params = {i: p for g, live in zip(groups, opt.param_groups, strict=True)
              for i, p in zip(g["params"], live["params"], strict=True)}
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        idx, name = _state_name(key, params, where)
        if name != "step" and tuple(value.shape) != tuple(params[idx].shape):
            raise CheckpointError(f"optimizer state at {where}: {key} has shape "
                                  f"{list(value.shape)}, its parameter {list(params[idx].shape)}")
        state.setdefault(idx, {})[name] = value
    plain = rest.get("plain_state", {})
    for sidx, values in (plain.items() if isinstance(plain, dict) else [("?", plain)]):
        if not isinstance(values, dict):
            raise UntrustedInput(f"optimizer state at {where}: plain_state[{sidx!r}] is not "
                                 "an object")
        for name, value in values.items():
            idx, _ = _state_name(f"state.{sidx}.{name}", params, where)
            if name != "step" or not isinstance(value, int | float) or not value >= 0:
                raise UntrustedInput(f"optimizer state at {where}: plain_state[{sidx!r}]"
                                     f"[{name!r}] = {value!r}; only a non-negative step count "
                                     "is stored outside tensors")
            state.setdefault(idx, {})[name] = value
    try:
        opt.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError) as exc:
        raise CheckpointError(f"optimizer state at {where} does not fit: {exc}") from exc


def _state_name(key: str, params: dict[int, Any], where: str) -> tuple[int, str]:
    """(param id, state name) of ``state.<id>.<name>``, both checked."""
    parts = key.split(".", 2)
    ok = len(parts) == 3 and parts[0] == "state" and parts[1].isdigit()
    if not ok or int(parts[1]) not in params or parts[2] not in OPTIMIZER_STATE_NAMES:
        raise UntrustedInput(f"optimizer state at {where}: entry {key[:80]!r} is not "
                             f"state.<param id>.<{'|'.join(sorted(OPTIMIZER_STATE_NAMES))}> "
                             "for a parameter of the stored layout")
    return int(parts[1]), parts[2]
