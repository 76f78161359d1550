"""Registry entries for the retention and audit tests, written by the registry's own code."""

from __future__ import annotations

from shardline.core.store import ObjectStore
from shardline.trainer.registry import ModelRegistry


def live_model(store: ObjectStore, dataset: str, model: str, version: int) -> int:
    """A complete model trained on dataset ``version``, promoted (the registry's own
    writes; weights are opaque bytes here: nothing loads them)."""
    reg = ModelRegistry(store, dataset, model)
    n = reg.claim("run-test")
    reg.save(n, b"weights", b"optimizer", {"dataset_version": version, "model_version": n})
    reg.promote(n, reg.promoted(), {"history": [n]})
    return n
