"""The ``train`` flow: one training run (``trainer.run.train``) and its artifacts
(``flows/train_tasks.py``). Wiring only.

``config`` is the dataset config by value (a dict, as ``shardline.dataset.published``
carries it, or TOML text), an ``s3://`` URI of the TOML object, or a local path (the CLI);
see ``flows/config_source.py``. The dataset version is resolved (latest when not given)
before training, so the run is named and tagged with the version it really trains on
(``flows/runs.py``: ``train-<dataset>-v<N>-<trigger>-<id6>``, ``-failed-`` when it fails); a
run whose model the gate refused ends in a Completed state named ``Refused`` and is tagged
``gate:refused`` (``gate:promoted`` otherwise). A version the promoted model already
learned with the same ``[train]`` settings is not trained again (``trainer/learned.py``):
the run ends Completed, named ``AlreadyLearned``, saying so.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import Completed

from shardline.core.manifest import resolve_version
from shardline.core.store import ObjectStore
from shardline.flows.config_source import dataset_name, load_flow_config
from shardline.flows.runs import gate_outcome, label_run, mark_failed, short_id
from shardline.flows.settings import store_settings
from shardline.flows.train_tasks import publish_artifacts, train_model
from shardline.tasks.launch import processes_for
from shardline.trainer.context import already_learned


def _run_name() -> str:
    """The name until the version is resolved (then ``label_run`` renames the run)."""
    params = flow_run.parameters
    version = params.get("version")
    return (f"train-{dataset_name(params.get('config'))}-"
            f"{f'v{version}' if version is not None else 'resolving'}-{short_id()}")


@flow(name="train", flow_run_name=_run_name, on_failure=[mark_failed],
      on_crashed=[mark_failed])
def train(config: str | dict[str, Any], version: int | None = None,
          processes: int = 1) -> dict[str, Any]:
    """Train on dataset ``version`` (default: latest) and leave the run's artifacts. The
    config is read and validated here, once; the tasks receive the parsed :class:`Config`.
    ``processes``: training processes on this worker (torchrun ranks, DDP: one per GPU; gloo
    on the CPU); 0 for one per visible GPU. The artifacts and promotion are the same."""
    cfg = load_flow_config(config)
    store = ObjectStore(store_settings())
    version = resolve_version(store, cfg.dataset.prefix, version).version
    name = label_run("train", cfg.dataset.name, version)
    ranks = processes_for(processes)
    learned = already_learned(cfg, store, version, ranks)
    if learned is not None:        # e.g. a re-run after a kill that landed after promotion
        get_run_logger().info("%s: %s", name, learned)
        state: Any = Completed(message=learned, name="AlreadyLearned", data={
            "dataset": cfg.dataset.name, "dataset_version": version, "already_learned": learned})
        return state         # the flow's result is its data
    result = train_model(cfg, store, version, ranks)
    publish_artifacts(result, store)
    get_run_logger().info("%s: model %d (%s): %s", name, result.model_version,
                          "promoted" if result.promoted else "not promoted", result.decision)
    # a refused model ends in a Completed state named Refused (the reason as its message)
    return gate_outcome(result.to_dict(), result.promoted, result.decision)
