"""Logit adjustment for an incremental update: train on the stream, predict for the data.

An update reads the new rows whole and only a replay sample of the older ones, so its class
mix is not the dataset's: after classes grow, the two new classes can fill most of an epoch
while eight old ones share the replay budget. Plain cross-entropy then learns the stream's
prior into the head (the *recency bias* of class-incremental training: measured 43.6 % on
the old classes vs 88.9 % on the new ones, ``bench/learning.py --scenario classes``).

The correction (logit adjustment for label shift, as in Menon et al. 2021, "Long-tail
learning via logit adjustment", and Balanced Softmax): the loss sees the logits shifted by
``log p_stream(y) - log p_data(y)``. The model is then fitted so that its *unshifted*
logits are calibrated for the dataset's class mix, the one the held-out rows have, so
prediction and evaluation use the model as is and nothing is stored with it. Both priors
come from the manifest's per-shard label counts: the stream's weights each shard's counts
by the share of its training rows this run reads (``TrainPlan.fraction``: 1 for a new shard,
the replay fraction otherwise), the data's by 1. A full retrain reads every training row, so
its shift is zero and the loss is plain cross-entropy. Counts get a pseudo-count of one row
(the stream's scaled by its size over the data's), so a class the data holds but the
stream lacks gets a large negative shift (the loss does not push it down), and a class with
no rows at all none.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from shardline.core.parts import HOLDOUT
from shardline.core.shard_table import ShardColumns
from shardline.trainer.model import unwrap
from shardline.trainer.plan import TrainPlan
from shardline.trainer.replay import label_counts

PSEUDO_COUNT = 1.0
# below this (in nats, for every class) the stream's mix is the data's: no shift at all
NEGLIGIBLE = 1e-6


def class_priors(cols: ShardColumns, plan: TrainPlan, classes: int
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """(stream counts, data counts) per class index over the plan's training shards, from the
    manifest's label counts; None when a shard has none recorded or a label is not a class
    index below ``classes``."""
    found = label_counts(cols)
    if found is None:
        return None
    shard, keys, counts = found
    if not all(k.isdigit() and int(k) < classes for k in keys):
        return None
    label = np.asarray([int(k) for k in keys], np.int64)
    train = np.asarray([s.split != HOLDOUT for s in plan.shards], np.float64)
    read = np.asarray([plan.fraction(s) for s in plan.shards], np.float64) * train
    c = counts.astype(np.float64)
    stream = np.bincount(label, c * read[shard], minlength=classes)
    data = np.bincount(label, c * train[shard], minlength=classes)
    return stream, data


def prior_shift(stream: np.ndarray, data: np.ndarray) -> np.ndarray | None:
    """``log p_stream - log p_data`` per class (pseudo-counts for empty classes); None when
    it is negligible (the stream's mix is the data's: a full retrain)."""
    total_s, total_d = float(stream.sum()), float(data.sum())
    if total_s <= 0 or total_d <= 0:
        return None
    # the stream's pseudo-count is scaled so that a class with no rows at all is neutral
    s, d = stream + PSEUDO_COUNT * total_s / total_d, data + PSEUDO_COUNT
    shift = np.log(s / s.sum()) - np.log(d / d.sum())
    return None if np.abs(shift).max() < NEGLIGIBLE else shift


def logit_shift(cols: ShardColumns, plan: TrainPlan, classes: int) -> torch.Tensor | None:
    """The shift to add to a class target's logits in the training loss (float32, [classes]),
    or None when there is nothing to correct or no label counts to correct with."""
    priors = class_priors(cols, plan, classes)
    if priors is None:
        return None
    shift = prior_shift(*priors)
    return None if shift is None else torch.from_numpy(shift.astype(np.float32))


def output_layer(model: nn.Module, classes: int) -> nn.Linear | None:
    """The last ``nn.Linear`` of ``model`` with one output per class, or None."""
    found = [m for m in unwrap(model).modules()
             if isinstance(m, nn.Linear) and m.out_features == classes]
    return found[-1] if found else None


@torch.no_grad()
def align_new_classes(model: nn.Module, old: int, classes: int) -> float | None:
    """Weight aligning (Zhao et al. 2020, "Maintaining discrimination and fairness in class
    incremental learning"): scale the new classes' rows of the output layer so their mean
    norm is the old classes' (their logits no longer win by size alone). Returns the factor,
    or None when there is no such layer or nothing to align."""
    layer = output_layer(model, classes)
    if layer is None or not 0 < old < classes:
        return None
    norms = layer.weight.norm(dim=1)
    new_mean = float(norms[old:].mean())
    if new_mean <= 0:
        return None
    factor = float(norms[:old].mean()) / new_mean
    layer.weight[old:] *= factor
    if layer.bias is not None:
        layer.bias[old:] *= factor
    return factor
