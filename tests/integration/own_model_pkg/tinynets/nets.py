"""Two factories of the kind shardline calls: ``factory(info, **model_args) -> nn.Module``."""

from __future__ import annotations

from typing import Any

from torch import nn


def _inputs(info: Any) -> int:
    n = 1
    for s in info.fields[0].shape:
        n *= s
    return n


def tiny(info: Any, hidden: int = 64) -> nn.Module:
    """A two-layer perceptron over the one (already normalised) field."""
    return nn.Sequential(nn.Flatten(), nn.Linear(_inputs(info), hidden), nn.ReLU(),
                         nn.Linear(hidden, info.target.num_outputs))


def other(info: Any, hidden: int = 64) -> nn.Module:
    """Another network with the same args: a warm start from ``tiny`` must be refused."""
    return nn.Sequential(nn.Flatten(), nn.Linear(_inputs(info), hidden), nn.Tanh(),
                         nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, info.target.num_outputs))
