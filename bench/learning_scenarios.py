"""The issue-21 learning scenarios, run on the real trainer over a moto S3 server.

- ``drift``: 8 uploads of noisy 16x16x3 patterns (600 rows each) whose class mix and
  appearance drift. The chain continues the promoted model after each upload; a full
  retrain on the last version is the reference. Every candidate is also scored, with the
  model it would replace, on a large fresh sample of the data as it is then (the *oracle*:
  what the held-out rows estimate); a candidate is *truly worse* when it loses more than
  ``promote_tolerance`` there.
- ``classes``: 10 classes arriving in 5 stages (2 new each plus some of the earlier ones),
  the class list extended in the config at each stage; a full retrain on everything with
  all 10 classes is the reference.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import numpy as np
import torch

from shardline.bench.digits_data import Rows, publish_version
from shardline.bench.learning_data import Patterns, class_stages, drifting_uploads, oracle_set
from shardline.core.config import Config, DatasetConfig, ImageSpec, StoreSettings
from shardline.core.errors import ShardlineError
from shardline.core.store import ObjectStore
from shardline.trainer.options import RunOptions
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.reload import rebuild
from shardline.trainer.rows import load_rows
from shardline.trainer.run import TrainResult, train

OPTS = RunOptions(log_every=10_000, eval_each_epoch=False)
ORACLE_PER_CLASS = 2000   # fresh rows a class the classes scenario scores both models on


def _progress(what: str, r: TrainResult) -> None:
    print(f"{what}: model {r.model_version} acc {r.eval_accuracy:.4f} samples "
          f"{r.samples_seen} {'PROMOTED' if r.promoted else 'refused'}: {r.decision[:200]}",
          flush=True)


def new_store(settings: StoreSettings) -> ObjectStore:
    store = ObjectStore(dataclasses.replace(settings, bucket=f"bench-{uuid.uuid4().hex[:10]}"))
    store.ensure_bucket()
    return store


def with_classes(cfg: Config, n: int) -> Config:
    ds = dataclasses.replace(cfg.dataset, classes=tuple(str(i) for i in range(n)))
    return dataclasses.replace(cfg, dataset=ds)


def patterns_config(base: Config, name: str) -> Config:
    ds = dataclasses.replace(base.dataset, name=name, incoming=f"incoming/{name}/",
                             image=ImageSpec(shape=(16, 16, 3)))
    return dataclasses.replace(base, dataset=ds)


def run_drift(settings: StoreSettings, cfg: Config, scratch_cfg: Config, uploads: int,
              rows: int, seed: int, noise: float) -> dict[str, Any]:
    gen = Patterns(seed=seed, noise=noise)
    ids, labels, images, parts = drifting_uploads(gen, uploads, rows, seed)
    data: Rows = (ids, labels, images)
    chain_store, scratch_store = new_store(settings), new_store(settings)
    chain: list[TrainResult] = []
    truth: list[dict[str, Any]] = []
    for u, part in enumerate(parts):
        publish_version(chain_store, cfg.dataset, part, data=data)
        publish_version(scratch_store, cfg.dataset, part, data=data)
        r = train(cfg, chain_store, options=OPTS)
        chain.append(r)
        _progress(f"seed {seed} upload {u + 1}", r)
        if r.parent_model_version is not None:
            o_lab, o_img = oracle_set(gen, u + 1, uploads, 2000, seed)
            cand = oracle_accuracy(chain_store, cfg, r.model_version, o_lab, o_img)
            live = oracle_accuracy(chain_store, cfg, r.parent_model_version, o_lab, o_img)
            truth.append({"upload": u + 1, "candidate": cand, "live": live,
                          "truly_worse": cand < live - cfg.train.promote_tolerance,
                          "promoted": r.promoted, "decision": r.decision})
    scratch = train(scratch_cfg, scratch_store, options=OPTS)
    last = chain[-1]
    return {
        "seed": seed, "incremental_accuracy": last.eval_accuracy,
        "scratch_accuracy": scratch.eval_accuracy,
        "last_step_samples": last.samples_seen, "scratch_samples": scratch.samples_seen,
        "promoted": [r.promoted for r in chain], "truth": truth,
        "wrongly_refused": sum(1 for t in truth if not t["promoted"] and not t["truly_worse"]),
        "chain_accuracy": [r.eval_accuracy for r in chain],
    }


def _first_classes(store: ObjectStore, cfg: Config, number: int, k: int) -> float | None:
    rows = load_rows(ModelRegistry(store, cfg.dataset.name, cfg.train.registry_name), number)
    if rows is None:
        return None
    mask = rows.labels < k
    return float(rows.scores[mask].mean()) if mask.any() else None


def publish_stage(store: ObjectStore, ds: DatasetConfig, full: DatasetConfig,
                  part: np.ndarray, data: Rows) -> str:
    """Publish with the stage's class list; a data side that does not accept appended
    classes yet gets the full list (the trainer still reads the stage's from its config)."""
    try:
        publish_version(store, ds, part, data=data)
        return "stage"
    except ShardlineError:
        publish_version(store, full, part, data=data)
        return "full"


@torch.no_grad()
def per_class_accuracy(store: ObjectStore, cfg: Config, number: int, labels: np.ndarray,
                       images: np.ndarray) -> np.ndarray:
    """Accuracy per class of model ``number`` on (labels, images): the model as the
    registry rebuilds it (``trainer.reload``), fed the raw uint8 rows."""
    model = rebuild(ModelRegistry(store, cfg.dataset.name, cfg.train.registry_name), number)
    x = torch.from_numpy(images.reshape(len(images), *cfg.dataset.image.shape))
    pred = np.concatenate([model.predict(x[lo:lo + 2048]).numpy()
                           for lo in range(0, len(x), 2048)])
    k = len(cfg.dataset.classes)
    hit = np.bincount(labels, weights=(pred == labels), minlength=k)
    return hit / np.maximum(np.bincount(labels, minlength=k), 1)


def oracle_accuracy(store: ObjectStore, cfg: Config, number: int, labels: np.ndarray,
                    images: np.ndarray) -> float:
    """Accuracy of model ``number`` on (labels, images)."""
    per = per_class_accuracy(store, cfg, number, labels, images)
    return float((per * np.bincount(labels, minlength=len(per))).sum() / len(labels))


def run_classes(settings: StoreSettings, cfg: Config, scratch_cfg: Config, stages: int,
                per_class: int, seed: int, noise: float) -> dict[str, Any]:
    gen = Patterns(seed=seed, drift=0.0, noise=noise)
    ids, labels, images, parts = class_stages(gen, stages, per_class, seed)
    data: Rows = (ids, labels, images)
    chain_store, scratch_store = new_store(settings), new_store(settings)
    full = with_classes(cfg, gen.classes).dataset
    per = gen.classes // stages
    chain, schemas = [], []
    for s, part in enumerate(parts):
        stage_cfg = with_classes(cfg, per * (s + 1))
        schemas.append(publish_stage(chain_store, stage_cfg.dataset, full, part, data))
        publish_version(scratch_store, full, part, data=data)
        chain.append(train(stage_cfg, chain_store, options=OPTS))
        _progress(f"seed {seed} stage {s + 1} ({schemas[-1]} class list in the data)",
                  chain[-1])
    scratch = train(with_classes(scratch_cfg, gen.classes), scratch_store, options=OPTS)
    last = chain[-1]
    ev = last.eval or {}
    # the truth the held-out rows estimate: a large fresh sample, every class equally
    o_lab = np.repeat(np.arange(gen.classes), ORACLE_PER_CLASS)
    o_img = gen.sample(o_lab, 0.0, salt=10**6 + seed)
    full_cfg = with_classes(cfg, gen.classes)
    inc = per_class_accuracy(chain_store, full_cfg, last.model_version, o_lab, o_img)
    ref = per_class_accuracy(scratch_store, full_cfg, scratch.model_version, o_lab, o_img)
    return {
        "oracle_rows_per_class": ORACLE_PER_CLASS, "first_classes": per,
        "oracle_incremental": inc.tolist(),
        "oracle_scratch": ref.tolist(),
        "seed": seed, "stage_rows": [len(p) for p in parts], "schemas": schemas,
        "incremental_accuracy": last.eval_accuracy, "scratch_accuracy": scratch.eval_accuracy,
        "incremental_first": _first_classes(chain_store, cfg, last.model_version, per),
        "scratch_first": _first_classes(scratch_store, cfg, scratch.model_version, per),
        "old_classes_accuracy": ev.get("old_classes_accuracy"),
        "new_classes_accuracy": ev.get("new_classes_accuracy"),
        "last_step_samples": last.samples_seen, "scratch_samples": scratch.samples_seen,
        "promoted": [r.promoted for r in chain],
        "chain_accuracy": [r.eval_accuracy for r in chain],
        "decisions": [r.decision for r in chain],
    }
