"""Classes that grow: resume a parent into a wider output layer.

A dataset's class list may only grow at the end (the data side records it per version);
the parent's list is the one its build record holds (meta.json ``build.target.classes``).
When the new list extends it and nothing else in the build changed, every parent tensor is
loaded as is, except those whose leading dimension is the class count (the output layer's
weight and bias: ``nn.Linear(in, classes)``): their first ``old`` rows are the parent's,
the new classes' rows keep the fresh model's initialisation. AdamW's moments grow the same way
(zeros for the new rows). A model with another kind of head defines the hook

    def grow_classes(self, state: dict[str, Tensor], old: int) -> dict[str, Tensor]

returning the parent's ``state`` fitted to its own (wider) parameters; it is called
instead of the rule above (on the user's network inside the trainer's ``Preprocessed``).

A class removed, renamed or moved is refused (:class:`ClassListChanged`): the parent's
output ``i`` would silently mean another class.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from shardline.core.errors import ConfigError
from shardline.trainer.checkpoint import CheckpointError
from shardline.trainer.model import unwrap
from shardline.trainer.trust import UntrustedInput


class ClassListChanged(ConfigError):
    """The dataset's class list does not extend the promoted model's."""


def _classes(build: Any, where: str) -> tuple[str, ...] | None:
    """The class list of a build record's target (None when it records none)."""
    target = build.get("target") if isinstance(build, dict) else None
    found = target.get("classes") if isinstance(target, dict) else None
    if found is None:
        return None
    if not isinstance(found, list | tuple) or not all(isinstance(c, str) for c in found):
        raise UntrustedInput(f"{where}: build.target.classes is not a list of names "
                             f"({str(found)[:80]}); restore meta.json")
    return tuple(found)


def _change(old: tuple[str, ...], new: tuple[str, ...]) -> str:
    gone = [c for c in old if c not in new]
    if gone:
        return f"class {gone[0]!r} removed"
    i = next(i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b)
    return f"position {i} holds {new[i]!r}, was {old[i]!r} (reordered)"


def class_growth(parent: Any, spec: dict[str, Any], where: str
                 ) -> tuple[int, tuple[str, ...]] | None:
    """(the parent's class count, this run's classes) when this run appends classes to the
    parent's build record's list (``spec``: this run's record); None when nothing grew.

    Raises:
        ClassListChanged: this run's classes do not start with the parent's.
        UntrustedInput: the parent's record holds no list of names."""
    old, new = _classes(parent, where), _classes(spec, "this run's build record")
    if old is None or new is None:
        return None
    if new[:len(old)] != old:
        raise ClassListChanged(
            f"classes {list(new)[:12]} do not extend the promoted model's {list(old)[:12]} "
            f"({where}): {_change(old, new)}; classes may only be appended at the end: "
            "restore the order, or train a new dataset name")
    return (len(old), new) if len(new) > len(old) else None


def _widen(fresh: torch.Tensor, parent: torch.Tensor, old: int) -> torch.Tensor | None:
    if (parent.dim() == fresh.dim() and parent.shape[0] == old and fresh.shape[0] > old
            and parent.shape[1:] == fresh.shape[1:]):
        out = fresh.detach().to("cpu").clone()
        out[:old] = parent.to(out.dtype)
        return out
    return None


def grow_tensors(model: nn.Module, parent: dict[str, torch.Tensor], old: int,
                 where: str) -> dict[str, torch.Tensor]:
    """The parent's tensors fitted to ``model``'s wider head (see the module docstring).

    Raises:
        CheckpointError: a tensor differs in another way than the class dimension."""
    target = unwrap(model)                  # the user's network: what the registry saves
    hook = getattr(target, "grow_classes", None)
    if callable(hook):
        return dict(hook(dict(parent), old))
    own = target.state_dict()
    out = dict(parent)
    for k, fresh in own.items():
        if k in parent and parent[k].shape != fresh.shape:
            grown = _widen(fresh, parent[k], old)
            if grown is None:
                raise CheckpointError(f"weights at {where}: {k} is {list(parent[k].shape)}, "
                                      f"the grown model's {list(fresh.shape)}: only the "
                                      f"class dimension ({old} -> more) may grow; define "
                                      "grow_classes() on the model (trainer.grow)")
            out[k] = grown
    return out


def grow_moments(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor],
                 rest: dict[str, Any], old: int) -> dict[str, torch.Tensor]:
    """AdamW's stored moments (``state.<param index>.<name>``) widened like their
    parameters: zeros for the new classes' rows."""
    stored = [i for g in rest.get("param_groups") or [] for i in g.get("params") or []]
    live = [p for g in opt.param_groups for p in g["params"]]
    shape = {str(i): p.shape for i, p in zip(stored, live, strict=False)}
    out = dict(tensors)
    for key, t in tensors.items():
        _, idx, _name = key.split(".", 2)
        want = shape.get(idx)
        if want is not None and t.dim() > 0 and t.shape != want:
            grown = _widen(torch.zeros(want, dtype=t.dtype), t, old)
            if grown is not None:
                out[key] = grown
    return out
