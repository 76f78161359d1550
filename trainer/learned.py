"""Has the promoted model already learned this dataset version? (issue 23)

A training run killed just after it promoted its model (before it deleted its in-progress
checkpoint) is started again by its retry, by the Pending automation or by a repeated
``shardline.dataset.published`` event. Without this check the re-run would train the same
dataset version again on top of the model that already learned it (a second pass over the
same new rows) and leave the killed run's progress checkpoint in the registry forever.

The promoted model learned version N with this run's inputs when its ``meta.json`` records
dataset version N, it was built like this run's model (``parent.resolve_start`` warm-starts
from it only then) and its ``[train]`` settings equal this run's, operational ones (cache)
aside. Then nothing is trained: the run says so, and deletes the killed run's progress,
whose key (``context.run_key``) is recomputed from the promoted model's own parent. A
changed ``[train]`` setting (more epochs, another learning rate) trains again, as asked.
"""

from __future__ import annotations

import logging
from typing import Any

from shardline.core.config import Config, config_to_dict
from shardline.trainer.parent import Start
from shardline.trainer.plan import NothingToTrain
from shardline.trainer.registry import ModelRegistry

log = logging.getLogger(__name__)

# [train] settings that decide where bytes are cached, not what is learned
OPERATIONAL = ("cache_dir", "cache_max_gb", "fetch_threads")


class AlreadyLearned(NothingToTrain):
    """The promoted model already learned this dataset version with these settings."""


def learning_settings(train: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in train.items() if k not in OPERATIONAL}


def check_not_learned(cfg: Config, registry: ModelRegistry, version: int, start: Start,
                      keys: list[str]) -> None:
    """Raise :class:`AlreadyLearned` (after deleting the progress saved under ``keys``: the
    killed run's possible run keys) when the promoted model learned ``version`` with this
    run's inputs; return otherwise."""
    meta = start.parent_meta
    if not start.from_parent or meta is None or start.since_dataset_version != version:
        return
    recorded = (meta.get("config") or {}).get("train")
    if not isinstance(recorded, dict) or \
            learning_settings(recorded) != learning_settings(config_to_dict(cfg.train)):
        return          # the same data with other settings: trained again, as asked
    cleaned = 0
    for key in dict.fromkeys(k for k in keys if k):
        steps = registry.progress_steps(key)
        if steps:
            registry.clear_progress(key)
            cleaned += len(steps)
    number = start.parent_number
    done = f"; deleted the interrupted run's progress ({cleaned} save(s))" if cleaned else ""
    raise AlreadyLearned(
        f"dataset {cfg.dataset.name} v{version} was already learned by the promoted model "
        f"{number} ({registry.uri(number or 0)}) with these [train] settings: nothing "
        f"trained{done}. Publish new data to train again, or change a [train] setting to "
        "retrain")
