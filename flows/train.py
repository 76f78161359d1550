"""The ``train`` flow: one training run (``trainer.run.train``) and its artifacts
(``flows/train_tasks.py``). Wiring only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from shardline.flows.train_tasks import publish_artifacts, train_model


def _run_name() -> str:


    params = flow_run.parameters
    version = params.get("version")
    return f"train-{Path(str(params.get('config', 'dataset'))).stem}-" + \
        (f"v{version}" if version is not None else "latest")


@flow(name="train", flow_run_name=_run_name)
def train(config: str, version: int | None = None) -> dict[str, Any]:
    """Train on dataset ``version`` (default: latest) and leave the run's artifacts."""
    result = train_model(config, version)
    publish_artifacts(result)
    get_run_logger().info("model %d (%s): %s", result.model_version,
                          "promoted" if result.promoted else "not promoted", result.decision)
    return result.to_dict()
