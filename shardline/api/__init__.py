"""The public Python API: open any version of a dataset, list versions, read quarantined
rows, diff versions, read the model registry; read-only but for ``delete_rows``.

    import shardline
    ds = shardline.open_dataset("digits")          # latest; version=N for another
    df = ds.to_pandas()                             # or ds.to_table(), ds.to_dataset()
    loader = ds.torch_loader(batch_size=256)        # the trainer's loader: shuffle, resume, ranks
    model = shardline.load_model("digits")          # the live model; model.predict(batch)

Attributes load on first use, so ``import shardline`` stays light (torch is imported only
by the torch loader).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "open_dataset": "shardline.api.dataset",
    "list_dataset_versions": "shardline.api.dataset",
    "Dataset": "shardline.api.dataset",
    "VersionDiff": "shardline.api.dataset",
    "TorchLoader": "shardline.api.torch_data",
    "store_settings": "shardline.api.access",
    "load_model": "shardline.api.models",
    "delete_rows": "shardline.api.changes",
}


def list_models(dataset: str, model: str = "cnn", **where: Any) -> list[dict[str, Any]]:
    """Every model of ``dataset`` (``model`` architecture): dataset version, accuracies,
    gate decision, promoted or not. ``where``: ``store`` / ``bucket`` / ``endpoint_url``."""
    from shardline.api.access import store_for
    from shardline.resources import needs_extra

    with needs_extra("shardline.list_models", "train"):
        from shardline.api.models import model_rows

    return model_rows(store_for(**where), dataset, model)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'shardline.api' has no attribute {name!r}")
    from shardline.resources import needs_extra

    with needs_extra(f"shardline.{name}", "train"):   # torch: load_model, TorchLoader
        return getattr(importlib.import_module(module), name)


__all__ = [*_EXPORTS, "list_models"]
