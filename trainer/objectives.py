"""What is learned and how it is scored, per target kind (``core.fields.TargetInfo.kind``).

| kind        | loss                     | metrics                          | primary (direction)  |
|-------------|--------------------------|----------------------------------|----------------------|
| class       | cross-entropy            | accuracy, macro-F1               | accuracy (higher)    |
| multilabel  | BCE with logits          | micro-F1, macro-F1, mAP          | mAP (higher)         |
| regression  | mean squared error       | RMSE, MAE, R²                    | RMSE (lower)         |
| mask        | per-pixel cross-entropy  | pixel accuracy, mean IoU         | mean IoU (higher)    |

Metrics are computed from *sums* (:meth:`Objective.sums`: one float64 vector per batch,
added over batches and ranks) so a held-out set of any size is scored in one pass with no
per-row storage, and ranks combine with one all-reduce. mAP is computed from per-class
score histograms (:data:`AP_BINS` bins over the sigmoid), exact to the bin width.

Every kind also has a **row score** (:meth:`Objective.row_score`), one number per row,
higher is better: 1/0 for a correct class, the row's F1 for multilabel, the pixel accuracy
for a mask, minus the row's mean squared error for regression. The gate compares models
row by row on the same held-out rows with it (a paired test), whatever the kind (regression
rows over the target's recorded variance: :meth:`Objective.target_variance`); its mean is
what ``EvalResult.accuracy`` holds (for ``class`` it *is* the accuracy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from shardline.core.errors import ConfigError
from shardline.core.fields import TargetInfo

AP_BINS = 200
_EPS = 1e-12


@dataclass(frozen=True)
class Objective:
    """The loss, the metrics and the primary metric of one target."""

    target: TargetInfo
    primary: str                    # name of the metric the gate and the UI lead with
    higher_is_better: bool          # direction of ``primary``

    @property
    def kind(self) -> str:
        return self.target.kind

    def target_variance(self) -> float | None:
        """Regression: the target's variance from the dataset version's recorded statistics
        (``TargetInfo.stats``; the mean of its per-channel variances), which the gate scales
        the squared errors by (``trainer.gate``). None for other kinds, or when none is
        recorded or it is not a positive finite number."""
        stats = self.target.stats
        if self.kind != "regression" or stats is None or not stats.std:
            return None
        var = sum(s * s for s in stats.std) / len(stats.std)
        return var if math.isfinite(var) and var > 0 else None

    # -- training -----------------------------------------------------------------------------
    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The kind's loss of model output ``out`` against the batch's target ``y``."""
        out = out.float()
        if self.kind == "class":
            return F.cross_entropy(out, y.long())
        if self.kind == "mask":
            return F.cross_entropy(out, y.long())          # [B, K, H, W] vs [B, H, W]
        if self.kind == "multilabel":
            return F.binary_cross_entropy_with_logits(out, y.float())
        return F.mse_loss(out.reshape(len(out), -1), y.float().reshape(len(y), -1))

    @torch.no_grad()
    def row_score(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One float per row, higher is better (see the module docstring)."""
        out = out.float()
        if self.kind == "class":
            return (out.argmax(1) == y.long()).float()
        if self.kind == "mask":
            return (out.argmax(1) == y.long()).float().flatten(1).mean(1)
        if self.kind == "multilabel":
            pred, truth = out > 0, y > 0
            tp = (pred & truth).sum(1).float()
            denom = pred.sum(1).float() + truth.sum(1).float()
            return torch.where(denom > 0, 2 * tp / denom.clamp(min=1), torch.ones_like(tp))
        err = out.reshape(len(out), -1) - y.float().reshape(len(y), -1)
        return -(err * err).mean(1)

    # -- evaluation ---------------------------------------------------------------------------
    def sums_size(self) -> int:
        k = self.target.num_outputs
        if self.kind in ("class", "mask"):
            return 2 + 3 * k                       # correct, total, tp/fp/fn per class
        if self.kind == "multilabel":
            return 1 + 3 * k + 2 * k * AP_BINS     # rows, tp/fp/fn, score histograms
        return 1 + 5 * k                           # rows, per output: SSE, SAE, Σy, Σy², n

    @torch.no_grad()
    def sums(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Sufficient statistics of one batch (float64, on ``out``'s device)."""
        k, dev = self.target.num_outputs, out.device
        out = out.float()
        if self.kind in ("class", "mask"):
            pred, truth = out.argmax(1).flatten(), y.long().flatten()
            p1, t1 = F.one_hot(pred, k).bool(), F.one_hot(truth.clamp(0, k - 1), k).bool()
            tp, fp, fn = (p1 & t1).sum(0), (p1 & ~t1).sum(0), (~p1 & t1).sum(0)
            head = torch.stack([(pred == truth).sum(), torch.tensor(len(truth), device=dev)])
            return torch.cat([head, tp, fp, fn]).double()
        if self.kind == "multilabel":
            prob, truth = torch.sigmoid(out), y > 0
            pred = prob > 0.5
            tp, fp, fn = (pred & truth).sum(0), (pred & ~truth).sum(0), (~pred & truth).sum(0)
            b = (prob * AP_BINS).long().clamp(0, AP_BINS - 1) + \
                torch.arange(k, device=dev) * AP_BINS
            pos = torch.bincount(b[truth], minlength=k * AP_BINS)
            neg = torch.bincount(b[~truth], minlength=k * AP_BINS)
            rows = torch.tensor([len(out)], device=dev)
            return torch.cat([rows, tp, fp, fn, pos, neg]).double()
        p, t = out.reshape(len(out), -1).double(), y.reshape(len(y), -1).double()
        e = p - t
        n = torch.full((k,), float(len(p)), device=dev, dtype=torch.float64)
        rows = torch.tensor([float(len(p))], device=dev, dtype=torch.float64)
        return torch.cat([rows, (e * e).sum(0), e.abs().sum(0), t.sum(0), (t * t).sum(0), n])

    def metrics(self, sums: torch.Tensor) -> dict[str, float | None]:
        """The kind's metrics from summed :meth:`sums` (None where nothing was scored)."""
        s, k = sums.double().cpu(), self.target.num_outputs
        if self.kind in ("class", "mask"):
            correct, total = float(s[0]), float(s[1])
            tp, fp, fn = s[2:2 + k], s[2 + k:2 + 2 * k], s[2 + 2 * k:2 + 3 * k]
            if not total:
                return {"accuracy": None, "macro_f1": None} if self.kind == "class" else \
                    {"pixel_accuracy": None, "mean_iou": None}
            present = (tp + fn) > 0
            if self.kind == "class":
                f1 = 2 * tp / (2 * tp + fp + fn).clamp(min=_EPS)
                return {"accuracy": correct / total, "macro_f1": float(f1[present].mean())}
            iou = tp / (tp + fp + fn).clamp(min=_EPS)
            return {"pixel_accuracy": correct / total, "mean_iou": float(iou[present].mean())}
        if self.kind == "multilabel":
            return _multilabel(s, k)
        return _regression(s, k)


def _multilabel(s: torch.Tensor, k: int) -> dict[str, float | None]:
    if not float(s[0]):
        return {"micro_f1": None, "macro_f1": None, "map": None}
    tp, fp, fn = s[1:1 + k], s[1 + k:1 + 2 * k], s[1 + 2 * k:1 + 3 * k]
    o = 1 + 3 * k
    pos = s[o:o + k * AP_BINS].reshape(k, AP_BINS)
    neg = s[o + k * AP_BINS:o + 2 * k * AP_BINS].reshape(k, AP_BINS)
    micro = float(2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum()).clamp(min=_EPS))
    present = (tp + fn) > 0
    f1 = 2 * tp / (2 * tp + fp + fn).clamp(min=_EPS)
    # average precision per class: thresholds at each bin edge, from the top bin down
    tp_at = pos.flip(1).cumsum(1)
    all_at = tp_at + neg.flip(1).cumsum(1)
    precision = tp_at / all_at.clamp(min=_EPS)
    ap = (precision * pos.flip(1)).sum(1) / pos.sum(1).clamp(min=_EPS)
    return {"micro_f1": micro, "macro_f1": float(f1[present].mean()) if present.any() else None,
            "map": float(ap[present].mean()) if present.any() else None}


def _regression(s: torch.Tensor, k: int) -> dict[str, float | None]:
    rows = float(s[0])
    if not rows:
        return {"rmse": None, "mae": None, "r2": None}
    sse, sae, sy, syy, n = (s[1 + i * k:1 + (i + 1) * k] for i in range(5))
    sst = syy - sy * sy / n.clamp(min=1)
    r2 = 1 - sse / sst.clamp(min=_EPS)
    return {"rmse": float((sse.sum() / n.sum()).sqrt()), "mae": float(sae.sum() / n.sum()),
            "r2": float(r2.mean()) if rows > 1 else None}


_PRIMARY = {"class": ("accuracy", True), "multilabel": ("map", True),
            "regression": ("rmse", False), "mask": ("mean_iou", True)}


def kind_of(primary: str) -> str | None:
    """The target kind that leads with metric ``primary`` (None: no built-in kind does)."""
    return next((k for k, (name, _) in _PRIMARY.items() if name == primary), None)


def objective(target: TargetInfo) -> Objective:
    """The :class:`Objective` of ``target``.

    Raises:
        ConfigError: an unknown target kind, or a class kind with no classes."""
    if target.kind not in _PRIMARY:
        raise ConfigError(f"target {target.name!r}: kind {target.kind!r} is not one of "
                          f"{sorted(_PRIMARY)}")
    if target.kind != "regression" and not target.classes:
        raise ConfigError(f"target {target.name!r} of kind {target.kind} has no classes; "
                          "declare them in the dataset's classes list")
    name, higher = _PRIMARY[target.kind]
    return Objective(target, name, higher)
