"""The model registry as rows, for notebooks (``shardline.list_models``) and the CLI: the
trainer's own reading (``shardline.trainer.registry_view``)."""

from __future__ import annotations

from shardline.trainer.registry_view import model_history, model_rows

__all__ = ["model_history", "model_rows"]
