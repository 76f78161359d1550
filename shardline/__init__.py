"""shardline: S3 uploads -> Spark -> validated Arrow IPC dataset versions -> PyTorch training.

The public Python API (read-only, see README "Python API")::

    import shardline
    ds = shardline.open_dataset("digits")      # latest version; version=N for another
    table, df = ds.to_table(), ds.to_pandas()
    loader = ds.torch_loader(batch_size=256)
    model = shardline.load_model("digits")     # the live model: model.predict(batch)

Names load on first use (``shardline.api``), so importing the package stays light.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = ("open_dataset", "list_dataset_versions", "list_models", "load_model", "Dataset",
        "VersionDiff", "TorchLoader", "delete_rows")


def __getattr__(name: str) -> Any:
    if name in _API:
        from shardline import api

        return getattr(api, name)
    raise AttributeError(f"module 'shardline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])


__all__ = ["__version__", *_API]
