"""The ``train`` flow: one training run (``trainer.run.train``) and its artifacts
(``flows/train_tasks.py``). Wiring only.

``config`` is the dataset config by value (a dict, as ``shardline.dataset.published``
carries it, or TOML text), an ``s3://`` URI of the TOML object, or a local path (the CLI);
see ``flows/config_source.py``. The dataset version is resolved (latest when not given)
before training, so the run is named and tagged with the version it really trains on
(``flows/runs.py``: ``train-<dataset>-v<N>-<trigger>-<id6>``).
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from shardline.core.manifest import resolve_version
from shardline.core.store import ObjectStore
from shardline.flows.config_source import dataset_name, load_flow_config
from shardline.flows.runs import label_run, short_id
from shardline.flows.settings import store_settings
from shardline.flows.train_tasks import publish_artifacts, train_model


def _run_name() -> str:
    """The name until the version is resolved (then ``label_run`` renames the run)."""
    params = flow_run.parameters
    version = params.get("version")
    return (f"train-{dataset_name(params.get('config'))}-"
            f"{f'v{version}' if version is not None else 'resolving'}-{short_id()}")


@flow(name="train", flow_run_name=_run_name)
def train(config: str | dict[str, Any], version: int | None = None) -> dict[str, Any]:
    """Train on dataset ``version`` (default: latest) and leave the run's artifacts. The
    config is read and validated here, once; the tasks receive the parsed :class:`Config`."""
    cfg = load_flow_config(config)
    store = ObjectStore(store_settings())
    version = resolve_version(store, cfg.dataset.prefix, version).version
    name = label_run("train", cfg.dataset.name, version)
    result = train_model(cfg, store, version)
    publish_artifacts(result, store)
    get_run_logger().info("%s: model %d (%s): %s", name, result.model_version,
                          "promoted" if result.promoted else "not promoted", result.decision)
    return result.to_dict()
