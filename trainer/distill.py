"""Keep what the parent knew: distil its answers on the known classes into the update.

An update sees the old classes only through a replay sample, so its features drift towards
the new rows and the old classes' accuracy falls (forgetting). Learning without Forgetting
(Li and Hoiem 2016) and iCaRL (Rebuffi et al. 2017) add a second loss: on every training
row, the new model's softened distribution over the parent's classes should match the
parent's, ``T^2 * KL(softmax(parent / T) || softmax(model[:, :known] / T))``. It costs one
forward pass of the frozen parent per batch and no extra samples. The parent's classes are
the first ``known`` outputs (classes are only appended, ``trainer.grow``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Distill:
    """The frozen parent and how much its answers weigh."""

    teacher: nn.Module
    known: int                  # the parent's class count: outputs [0, known) are its classes
    weight: float = 1.0
    temperature: float = 2.0

    @classmethod
    def of(cls, model: nn.Module, known: int, weight: float,
           temperature: float = 2.0) -> Distill:
        """A frozen copy of ``model`` (holding the parent's weights) as the teacher."""
        teacher = copy.deepcopy(model).eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        return cls(teacher, known, weight, temperature)

    def loss(self, out: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
        """The weighted distillation loss of the model's output ``out`` on ``inputs``."""
        with torch.no_grad():
            parent = self.teacher(inputs).float()[:, :self.known]
        t = self.temperature
        mine = F.log_softmax(out.float()[:, :self.known] / t, dim=1)
        theirs = F.log_softmax(parent / t, dim=1)
        kl = F.kl_div(mine, theirs, log_target=True, reduction="batchmean")
        return self.weight * t * t * kl
