"""The model registry as rows: every model of a dataset, what it was trained on, how it
scored, and which one is promoted. Read-only (``models/<dataset>/<model>/``).

One reading for everyone: the flows' model view (``flows/artifacts.py``), the CLI's
``shardline models`` and the notebook API (``shardline.api.models``) all build their rows
here, from the registry's own reader.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from shardline.core.errors import StoreError
from shardline.core.manifest import read_manifest
from shardline.core.store import Store
from shardline.trainer.registry import ModelRegistry, history, moves


def _acc(metrics: dict[str, Any] | None, key: str) -> float | None:
    value = (metrics or {}).get(key)
    return None if value is None else float(value)


def model_history(store: Store, dataset: str, model: str) -> dict[str, Any]:
    """The registry's history: ``live`` (the model ``promoted.json`` names, or None),
    ``promoted_history`` (every model number ever promoted, oldest first) and ``models``
    (:func:`model_rows`: promoted and refused candidates alike)."""
    promoted = ModelRegistry(store, dataset, model).promoted()
    pin = promoted.pointer.get("pinned") if promoted is not None else None
    return {"live": None if promoted is None else promoted.number,
            "pinned": pin if isinstance(pin, dict) else None,
            "promoted_history": history(promoted), "moves": moves(promoted),
            "models": model_rows(store, dataset, model)}


def primary_name(after: Any) -> str:
    """The name of the target kind's primary held-out metric (``objectives``): ``accuracy``
    for a class target and for a model recorded before metrics per kind."""
    name = after.get("primary") if isinstance(after, dict) else None
    return name if isinstance(name, str) else "accuracy"


def primary_text(after: Any) -> str:
    """The target kind's primary held-out metric as ``name value`` (``rmse 12.3``), or ""
    for a model recorded before metrics per kind."""
    if not isinstance(after, dict) or not isinstance(after.get("metrics"), dict):
        return ""
    name = after.get("primary")
    value = after["metrics"].get(name) if isinstance(name, str) else None
    return f"{name} {value:.4f}" if isinstance(value, int | float) else ""


def move_text(m: dict[str, Any]) -> str:
    """One move of the live pointer as a line: ``2026-11-26T10:02 pin by alice (from 3:
    reason)``."""
    at = str(m.get("at", ""))[:16]
    why = f": {m['reason']}" if m.get("reason") else ""
    return f"{at} {m.get('action', 'promote')} by {m.get('by', '?')} (from {m.get('from')}{why})"


def model_rows(store: Store, dataset: str, model: str) -> list[dict[str, Any]]:
    """One row per model number (ascending): dataset version, parent, held-out accuracy
    (overall, on the run's new data, on earlier data; None unless the target is a class),
    the kind's ``primary`` metric's name and ``metric`` (its name and value), ``metrics``
    (all of the kind's held-out metrics), gate decision and its reason,
    ``promoted`` (it is the live model) and ``promotion``: ``live``, ``earlier`` (promoted
    once, since replaced) or ``no`` (a refused candidate).

    A claimed number whose ``meta.json`` is not written yet (a run in progress, or one that
    died) shows with ``status`` "incomplete"."""
    registry = ModelRegistry(store, dataset, model)
    promoted = registry.promoted()
    ever = set(history(promoted))
    moved: dict[int, list[str]] = {}
    for m in moves(promoted):
        if isinstance(m.get("to"), int):
            moved.setdefault(m["to"], []).append(move_text(m))

    def promotion(n: int) -> str:
        return "live" if promoted is not None and promoted.number == n else \
            "earlier" if n in ever else "no"

    out = []
    for n in registry.numbers():
        try:
            meta = registry.meta(n)
        except StoreError:
            out.append({"model": n, "status": "incomplete", "promoted": False,
                        "promotion": promotion(n)})
            continue
        after = (meta.get("metrics") or {}).get("after")
        gate = meta.get("gate") or {}
        # the mean row score is an accuracy for a class target only (row F1, minus the MSE
        # for other kinds): the accuracy columns stay empty for those
        acc = {k: _acc(after, f) if primary_name(after) == "accuracy" else None
               for k, f in (("accuracy", "accuracy"), ("accuracy_new", "new_accuracy"),
                            ("accuracy_earlier", "earlier_accuracy"))}
        out.append({
            "model": n, "status": "complete", "dataset_version": meta.get("dataset_version"),
            "parent": meta.get("parent_model_version"), "created": meta.get("created_at"),
            **acc,
            "samples_seen": meta.get("samples_seen"),
            "gate": "passed" if gate.get("passed") else "refused",
            "promoted": promoted is not None and promoted.number == n,
            "promotion": promotion(n), "reason": gate.get("reason"),
            "factory": (meta.get("build") or {}).get("factory"),
            "metrics": after.get("metrics") if isinstance(after, dict) else None,
            "primary": primary_name(after), "metric": primary_text(after),
            "moves": "; ".join(moved.get(n, [])),
        })
    return out


def _change(store: Store, prefix: str, version: int) -> tuple[int, int]:
    """(rows corrected, rows deleted) by version ``version`` ((0, 0): none, or the document
    is gone: expired, or in a format not read any more)."""
    with contextlib.suppress(StoreError):
        c = read_manifest(store, prefix, version).doc.changes
        if c is not None:
            return c.updated, c.deleted
    return 0, 0


def with_changes_seen(store: Store, prefix: str, rows: list[dict[str, Any]]
                      ) -> list[dict[str, Any]]:
    """``rows`` (:func:`model_rows`) with the corrections and deletions each model learned:
    those of the dataset versions after its parent model's version, up to its own
    (``corrected`` / ``deleted`` rows, and ``changes``: per version, e.g. ``v5: 100
    corrected``). Reads version documents only."""
    by_number = {r["model"]: r for r in rows}
    spans = {}
    for r in rows:
        v = r.get("dataset_version")
        if not isinstance(v, int):
            continue
        parent = by_number.get(r.get("parent"), {}).get("dataset_version")
        spans[r["model"]] = (parent if isinstance(parent, int) else 0, v)
    wanted = sorted({v for lo, hi in spans.values() for v in range(lo + 1, hi + 1)})
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(wanted)))) as pool:
        seen = dict(zip(wanted, pool.map(lambda v: _change(store, prefix, v), wanted),
                        strict=True))
    out = []
    for r in rows:
        lo, hi = spans.get(r["model"], (0, 0))
        mine = [(v, *seen[v]) for v in range(lo + 1, hi + 1) if seen[v] != (0, 0)]
        out.append({**r, "corrected": sum(u for _, u, _ in mine),
                    "deleted": sum(d for _, _, d in mine),
                    "changes": "; ".join(f"v{v}: " + ", ".join(
                        x for x in (f"{u} corrected" if u else "", f"{d} deleted" if d else "")
                        if x) for v, u, d in mine)})
    return out
