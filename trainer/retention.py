"""Retention seen from the model registry: which dataset versions live models need
(``shardline expire`` keeps them), and registry retention (``shardline models expire``).

A dataset version is needed by the live model of each registry under ``models/<dataset>/``
(the model ``promoted.json`` names, pinned or not): it is what the next incremental
training continues from and what ``shardline audit`` reports. Models promoted earlier need
only their weights (a rollback moves the pointer; training reads the number of the version,
never its document).

Registry retention keeps every model ever promoted (the rollback history), the pinned one,
the last ``keep`` candidates that were never promoted, and any model folder written within
the window (a running training's claim or its weights being saved, by the store's clock).
The others lose ``meta.json`` first (so they stop being complete models at once), then
their weights, optimizer state and claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from shardline.core.errors import StoreError
from shardline.core.store import Store
from shardline.trainer.promote import history
from shardline.trainer.registry import ModelRegistry


def model_names(store: Store, dataset: str) -> list[str]:
    """The registries (model names) under ``models/<dataset>/``."""
    root = f"models/{dataset}/"
    return sorted(p[len(root):].strip("/") for p in store.list_prefixes(root))


def versions_in_use(store: Store, dataset: str) -> dict[int, str]:
    """Dataset version -> why it is needed, for the live model of every registry."""
    out: dict[int, str] = {}
    for name in model_names(store, dataset):
        registry = ModelRegistry(store, dataset, name)
        try:
            promoted = registry.promoted()
            if promoted is None:
                continue
            version = registry.meta(promoted.number).get("dataset_version")
        except StoreError:
            continue                 # no complete live model: nothing it could need
        if isinstance(version, int):
            pin = " (pinned)" if isinstance(promoted.pointer.get("pinned"), dict) else ""
            out[version] = f"trained live model {promoted.number} of {name}{pin}"
    return out


@dataclass(frozen=True)
class ModelsExpired:
    model: str
    removed: list[int]
    kept: dict[int, str]
    dry_run: bool

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        gone = ", ".join(map(str, self.removed)) or "none"
        return (f"{self.model}: {verb} model(s) {gone}; kept "
                + ", ".join(f"{n} ({why})" for n, why in sorted(self.kept.items())))


def expire_models(store: Store, dataset: str, model: str, keep: int, now: datetime,
                  window: timedelta, dry_run: bool = False) -> ModelsExpired:
    """Remove the models of ``model`` that retention does not keep (module docstring).
    ``now``: the store's time; ``window``: the sweep window."""
    if keep < 0:
        raise ValueError(f"--keep {keep}: give 0 or more candidates to keep")
    registry = ModelRegistry(store, dataset, model)
    promoted = registry.promoted()
    ever = set(history(promoted))
    numbers = registry.numbers()
    candidates = [n for n in numbers if n not in ever]
    last = set(candidates[-keep:]) if keep else set()
    kept: dict[int, str] = {n: "promoted" + (" (live)" if promoted and n == promoted.number
                                             else " earlier") for n in numbers if n in ever}
    kept.update({n: f"among the last {keep} candidates" for n in last})
    removed: list[int] = []
    for n in candidates:
        if n in last:
            continue
        objs = list(store.list(f"{registry.prefix}/{n:06d}/"))
        if objs and max(o.last_modified for o in objs) >= now - window:
            kept[n] = "written within the sweep window"
            continue
        removed.append(n)
        if not dry_run:
            store.delete([registry.key(n, "meta.json")])
            store.delete([o.key for o in objs if not o.key.endswith(("/meta.json",
                                                                     "/claim.json"))])
            store.delete([registry.key(n, "claim.json")])
    return ModelsExpired(model, removed, kept, dry_run)
