"""Per-field statistics that merge by addition: a shard's, a batch's, a version's.

One entry per numeric field (and regression target), per channel (an image's C, a tensor's
first axis, one for a scalar): ``count`` (finite values), ``nan`` (NaN/Inf values), ``sum``,
``sumsq``, ``min``, ``max``; class and multilabel targets record ``label_counts`` (class
index as text -> rows holding it) and ``rows``. Merging is a sum (min/max: the extremes), so
a batch list holds the merge of its shards' and a version the merge of its parent's and its
new batch's: O(shards) per batch and O(1) per version, never a pass over rows.
:func:`field_stats` turns an entry into the trainer's :class:`~shardline.core.fields.FieldStats`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def array_stats(block: np.ndarray, channel_axis: int | None) -> dict[str, Any]:
    """Statistics of ``block`` (rows first) per channel along ``channel_axis`` (None: one)."""
    a = np.asarray(block)
    # one channel at a time (a copy of that channel only, never of the whole block)
    channels = [a.reshape(-1)] if channel_axis is None else \
        (np.take(a, c, axis=channel_axis).reshape(-1) for c in range(a.shape[channel_axis]))
    out: dict[str, list[float]] = {k: [] for k in ("count", "nan", "sum", "sumsq", "min",
                                                    "max")}
    for ch in channels:
        if ch.dtype.kind == "f":
            fin = np.isfinite(ch)
            vals = ch[fin].astype(np.float64)
            out["nan"].append(int(ch.size - vals.size))
        else:
            vals = ch.astype(np.float64)
            out["nan"].append(0)
        out["count"].append(int(vals.size))
        out["sum"].append(float(vals.sum()))
        out["sumsq"].append(float(np.square(vals).sum()))
        out["min"].append(float(vals.min()) if vals.size else math.inf)
        out["max"].append(float(vals.max()) if vals.size else -math.inf)
    return _json_safe(out)


def _json_safe(d: dict[str, Any]) -> dict[str, Any]:
    """±inf (an empty channel's min/max) as None: JSON has no infinity."""
    return {k: [None if isinstance(x, float) and math.isinf(x) else x for x in v]
            if isinstance(v, list) else v for k, v in d.items()}


def merge_stats(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    """The statistics of two disjoint sets of rows (either may be empty or None)."""
    out: dict[str, Any] = dict(a or {})
    for name, sb in (b or {}).items():
        sa = out.get(name)
        out[name] = sb if sa is None else _merge_one(sa, sb)
    return out


def _merge_one(sa: dict[str, Any], sb: dict[str, Any]) -> dict[str, Any]:
    if "label_counts" in sa or "label_counts" in sb:
        counts = dict(sa.get("label_counts", {}))
        for k, n in sb.get("label_counts", {}).items():
            counts[k] = counts.get(k, 0) + n
        return {"label_counts": dict(sorted(counts.items(), key=lambda kv: int(kv[0]))),
                "rows": sa.get("rows", 0) + sb.get("rows", 0)}
    if len(sa.get("count", [])) != len(sb.get("count", [])):
        raise ValueError(f"statistics of {len(sa['count'])} and {len(sb['count'])} channels "
                         "cannot be merged")
    out: dict[str, Any] = {}
    for k in ("count", "nan", "sum", "sumsq"):
        out[k] = [x + y for x, y in zip(sa[k], sb[k], strict=True)]
    out["min"] = [_pick(min, x, y) for x, y in zip(sa["min"], sb["min"], strict=True)]
    out["max"] = [_pick(max, x, y) for x, y in zip(sa["max"], sb["max"], strict=True)]
    return out


def _pick(f: Any, x: float | None, y: float | None) -> float | None:
    if x is None or y is None:
        return y if x is None else x
    return f(x, y)


def mean_std(s: dict[str, Any]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per channel mean and population standard deviation of a merged entry."""
    means, stds = [], []
    for n, t, q in zip(s["count"], s["sum"], s["sumsq"], strict=True):
        m = t / n if n else 0.0
        means.append(m)
        stds.append(math.sqrt(max(q / n - m * m, 0.0)) if n else 0.0)
    return tuple(means), tuple(stds)
