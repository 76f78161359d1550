"""The model registry as rows: every model of a dataset, what it was trained on, how it
scored, and which one is promoted. Read-only (``models/<dataset>/<model>/``)."""

from __future__ import annotations

from typing import Any

from shardline.core.errors import StoreError
from shardline.core.store import ObjectStore


def _acc(metrics: dict[str, Any] | None, key: str) -> float | None:
    value = (metrics or {}).get(key)
    return None if value is None else float(value)


def model_rows(store: ObjectStore, dataset: str, model: str) -> list[dict[str, Any]]:
    """One row per model number (ascending): dataset version, parent, held-out accuracy
    (overall, on the run's new data, on earlier data), gate decision, promoted or not.

    A claimed number whose ``meta.json`` is not written yet (a run in progress, or one that
    died) shows with ``status`` "incomplete"."""
    from shardline.trainer.registry import ModelRegistry

    registry = ModelRegistry(store, dataset, model)
    promoted = registry.promoted()
    out = []
    for n in registry.numbers():
        try:
            meta = registry.meta(n)
        except StoreError:
            out.append({"model": n, "status": "incomplete", "promoted": False})
            continue
        after = (meta.get("metrics") or {}).get("after")
        gate = meta.get("gate") or {}
        out.append({
            "model": n, "status": "complete", "dataset_version": meta.get("dataset_version"),
            "parent": meta.get("parent_model_version"), "created": meta.get("created_at"),
            "accuracy": _acc(after, "accuracy"), "accuracy_new": _acc(after, "new_accuracy"),
            "accuracy_earlier": _acc(after, "earlier_accuracy"),
            "samples_seen": meta.get("samples_seen"),
            "gate": "passed" if gate.get("passed") else "refused",
            "promoted": promoted is not None and promoted.number == n,
            "reason": gate.get("reason"),
        })
    return out
