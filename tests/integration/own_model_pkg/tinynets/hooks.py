"""A step and a score hook of the kind shardline calls (``[train] step`` / ``score``)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

CALLS = {"step": 0, "score": 0}


def smoothed_step(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
    """Cross-entropy with label smoothing; the batch accuracy as the curve's score."""
    CALLS["step"] += 1
    out = model(batch)
    y = batch["label"].long()
    hit = (out.argmax(1) == y).float().mean()
    return F.cross_entropy(out.float(), y, label_smoothing=0.1), {"score": hit}


def top2(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """1 where the label is among the two highest logits."""
    CALLS["score"] += 1
    best = model(batch).topk(2, dim=1).indices
    return (best == batch["label"].long()[:, None]).any(1).float()
