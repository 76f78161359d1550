"""The run context: everything a training run decided before its first step, frozen.

Built once by :func:`open_context` (dataset version resolved, start point chosen, shards
planned, the cache and reader opened) and then only read: by the loop's driver
(``trainer.run``), by the end of the run (``trainer.candidate``) and by promotion. Nothing
in it changes while the run trains; state that does (the loop state, the last evaluation)
lives with the driver.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from shardline.core import layout
from shardline.core.config import Config, config_to_dict
from shardline.core.fields import DatasetInfo, dataset_info
from shardline.core.manifest import Manifest, resolve_version
from shardline.core.store import Store
from shardline.trainer.cache import ShardCache
from shardline.trainer.device import Placement
from shardline.trainer.dist import DistInfo
from shardline.trainer.factory import Hooks, build_record, hooks, model_inputs
from shardline.trainer.fetch import ShardFetcher
from shardline.trainer.learned import OPERATIONAL, AlreadyLearned, check_not_learned
from shardline.trainer.objectives import Objective, objective
from shardline.trainer.options import RunOptions
from shardline.trainer.parent import Start, resolve_start
from shardline.trainer.plan import TrainPlan, make_plan
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.shard_reader import ShardReader
from shardline.trainer.trust import check_shard_columns

_OPERATIONAL = OPERATIONAL


@dataclass(frozen=True)
class RunContext:
    cfg: Config
    store: Store
    options: RunOptions
    info: DistInfo
    place: Placement
    manifest: Manifest                 # the dataset version trained on
    registry: ModelRegistry
    data: DatasetInfo                  # what the model factory is told about the data
    objective: Objective               # loss, metrics, primary metric of the target kind
    hooks: Hooks                       # the user's step / score hooks, if configured
    spec: dict[str, Any]               # what builds this run's model (``factory.build_record``)
    start: Start                       # the promoted parent, or scratch
    plan: TrainPlan
    fetcher: ShardFetcher
    reader: ShardReader
    run_key: str                       # identity of the inputs: finds in-progress state

    @property
    def dataset_version(self) -> int:
        return self.manifest.version


def open_context(cfg: Config, store: Store, dataset_version: int | None,
                 options: RunOptions, dist_info: DistInfo, place: Placement) -> RunContext:
    """Resolve, plan and open everything a run needs; close ``ctx.fetcher`` when done.

    Raises:
        StoreError: the dataset version does not exist.
        UntrustedInput: a shard entry of its manifest breaks ``trainer.trust``'s rules.
        NothingToTrain: the version adds nothing beyond the parent's dataset version.
    """
    t = cfg.train
    manifest = resolve_version(store, cfg.dataset.prefix, dataset_version)
    check_shard_columns(manifest.shard_columns, cfg.dataset.prefix,
                        store.uri(layout.version_key(cfg.dataset.prefix, manifest.version)))
    registry = ModelRegistry(store, cfg.dataset.name, t.registry_name)
    data = model_inputs(dataset_info(cfg.dataset, manifest.stats))
    spec = build_record(t, data)
    start = resolve_start(registry, spec)
    _not_learned(cfg, registry, manifest.version, start, dist_info.world)
    plan = make_plan(manifest, start.since_dataset_version, t.replay_ratio,
                     t.holdout_fraction, t.seed, resample=t.replay_resample)
    fetcher = ShardFetcher(ShardCache(t.cache_dir, int(t.cache_max_gb * 2**30), store),
                           t.fetch_threads)
    reader = ShardReader(fetcher, cfg.dataset,
                         keep_open_bytes=int(options.loader.keep_open_mb * 2**20))
    return RunContext(cfg, store, options, dist_info, place, manifest, registry, data,
                      objective(data.target), hooks(t), spec, start, plan, fetcher, reader,
                      run_key(cfg, manifest.version, start, dist_info.world))


def _not_learned(cfg: Config, registry: ModelRegistry, version: int, start: Start,
                 world: int) -> None:
    """``learned.check_not_learned`` with the keys the killed run may have saved under: the
    one its model records, else those of a run from the promoted model's own parent."""
    if start.parent_meta is None:
        return
    parent = start.parent_meta.get("parent_model_version")
    check_not_learned(cfg, registry, version, start, [
        str(start.parent_meta.get("run_key") or ""),
        *(key_for(cfg, version, parent, warm, world)
          for warm in ((True, False) if parent is not None else (False,)))])


def already_learned(cfg: Config, store: Store, version: int, world: int = 1) -> str | None:
    """Why training ``version`` would add nothing (the promoted model already learned it
    with these settings; the killed run's progress is deleted on the way), or None: what the
    train flow asks before it starts any training process."""
    manifest = resolve_version(store, cfg.dataset.prefix, version)
    registry = ModelRegistry(store, cfg.dataset.name, cfg.train.registry_name)
    spec = build_record(cfg.train, model_inputs(dataset_info(cfg.dataset, manifest.stats)))
    try:
        _not_learned(cfg, registry, manifest.version, resolve_start(registry, spec), world)
    except AlreadyLearned as exc:
        return str(exc)
    return None


def run_key(cfg: Config, dataset_version: int, start: Start, world: int) -> str:
    """Same inputs -> same key: what lets a restarted run find its in-progress checkpoint."""
    return key_for(cfg, dataset_version, start.parent_number, start.from_parent, world)


def key_for(cfg: Config, dataset_version: int, parent: int | None, from_parent: bool,
            world: int) -> str:
    train = config_to_dict(cfg.train)
    for operational in _OPERATIONAL:
        train.pop(operational, None)
    ident = {"dataset": cfg.dataset.name, "dataset_version": dataset_version,
             "parent": parent, "from_parent": from_parent, "train": train,
             "world": world}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
