"""Learning-quality benchmark: incremental training vs a full retrain, on the real trainer.

Scenarios (``--scenario``; the real ``trainer.run.train`` over real Arrow shards and
manifests on a moto S3 server, CPU torch):

- ``digits``: scikit-learn's digits (1797 real 8x8 images) split into ``--uploads``
  uploads whose class mix drifts; the trainer continues the promoted model after each one;
  a second bucket trains one model from scratch on the last version. Targets: within 1
  point of the scratch model, the last step <= 25 % of its samples, <= 1 point lost on
  earlier uploads.
- ``drift`` (issue 21): 8 drifting uploads of noisy 16x16x3 patterns, 600 rows each. Every
  candidate that is not truly worse (on a large fresh sample of the data as it is then,
  against the model it would replace) is promoted; the last update <= 25 % of a full
  retrain's samples, within 1 point of its accuracy.
- ``classes`` (issue 21): 10 classes arriving in 5 stages (2 new each, plus some earlier
  ones), the class list extended at each stage. After the last stage: within 0.5 point of a
  full retrain on all data, the last update <= 20 % of its samples, <= 1 point below it on
  the first stage's classes, every stage promoted. Both models are also scored on 2,000 fresh
  rows a class (the oracle: the truth the held-out rows estimate, per class).

    .venv/bin/python -m shardline.bench.learning --scenario drift --noise 8 [--seeds 0 1 2]
    .venv/bin/python -m shardline.bench.learning --scenario classes --noise 6 \
        --per-class 200 --epochs 7 --scratch-epochs 24 --replay 0.6 --seeds 0 1 2 3 4 5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from shardline.bench.common import RESULTS
from shardline.bench.digits_data import digits, digits_config, publish_version
from shardline.bench.learning_report import print_classes, print_drift
from shardline.bench.learning_scenarios import patterns_config, run_classes, run_drift
from shardline.core.config import Config, StoreSettings, TrainConfig
from shardline.core.store import ObjectStore
from shardline.infra import procs, services
from shardline.trainer.evaluate import EvalResult
from shardline.trainer.options import RunOptions
from shardline.trainer.run import TrainResult, train

# digits_data writes real label-partitioned Arrow shards and commits real manifests, so
# this benchmark needs neither Spark nor the ingest pipeline.



def drifting_uploads(n_uploads: int, seed: int) -> list[np.ndarray]:
    """Every digit goes to exactly one upload; upload u favours classes near 9*u/(n-1)."""
    _, labels, _ = digits()
    rng = np.random.default_rng(seed)
    centers = np.linspace(0, 9, n_uploads)
    weights = np.exp(-((np.arange(10)[None, :] - centers[:, None]) ** 2) / (2 * 2.5**2)) + 0.05
    probs = weights / weights.sum(0, keepdims=True)            # P(upload | class)
    choice = np.array([rng.choice(n_uploads, p=probs[:, c]) for c in labels])
    return [rng.permutation(np.flatnonzero(choice == u)) for u in range(n_uploads)]


def new_store(settings: StoreSettings) -> ObjectStore:
    store = ObjectStore(dataclasses.replace(settings, bucket=f"bench-{uuid.uuid4().hex[:10]}"))
    store.ensure_bucket()
    return store


def run_seed(settings: StoreSettings, cfg: Config, scratch_cfg: Config, uploads: int,
             seed: int) -> dict[str, Any]:
    parts = drifting_uploads(uploads, seed)
    chain_store, scratch_store = new_store(settings), new_store(settings)
    opts = RunOptions(log_every=10_000, eval_each_epoch=False)
    chain: list[TrainResult] = []
    for rows in parts:
        publish_version(chain_store, cfg.dataset, rows)
        publish_version(scratch_store, cfg.dataset, rows)
        chain.append(train(cfg, chain_store, options=opts))
    scratch = train(scratch_cfg, scratch_store, options=opts)
    last, earlier = chain[-1], range(1, uploads)
    inc_eval, scr_eval = EvalResult(**last.eval), EvalResult(**scratch.eval)
    before = EvalResult(**last.eval_before) if last.eval_before else None
    return {
        "seed": seed, "upload_sizes": [len(p) for p in parts],
        "incremental_accuracy": last.eval_accuracy, "scratch_accuracy": scratch.eval_accuracy,
        "incremental_earlier": inc_eval.accuracy_on(earlier),
        "scratch_earlier": scr_eval.accuracy_on(earlier),
        "earlier_before_last_step": before.accuracy_on(earlier) if before else None,
        "last_step_samples": last.samples_seen, "chain_samples": sum(r.samples_seen for r in chain),
        "scratch_samples": scratch.samples_seen,
        "promoted": [r.promoted for r in chain],
        "chain_accuracy": [r.eval_accuracy for r in chain],
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    def mean(key: str) -> float:
        return statistics.fmean(r[key] for r in rows)
    return {
        "acc_gap_points": 100 * (mean("scratch_accuracy") - mean("incremental_accuracy")),
        "sample_ratio": mean("last_step_samples") / mean("scratch_samples"),
        "chain_sample_ratio": mean("chain_samples") / mean("scratch_samples"),
        "earlier_gap_points": 100 * (mean("scratch_earlier") - mean("incremental_earlier")),
        "forgetting_points": 100 * (mean("earlier_before_last_step")
                                    - mean("incremental_earlier")),
    }


def print_table(rows: list[dict[str, Any]], s: dict[str, float], args: argparse.Namespace) -> None:
    print(f"\nincremental vs scratch on digits, {args.uploads} drifting uploads, "
          f"epochs {args.epochs} (scratch {args.scratch_epochs}), replay {args.replay}, "
          f"width {args.width}")
    print(f"{'seed':>4} {'inc acc':>8} {'scr acc':>8} {'inc earlier':>11} {'scr earlier':>11} "
          f"{'last-step samples':>17} {'scratch samples':>15} {'promoted':>9}")
    for r in rows:
        print(f"{r['seed']:>4} {r['incremental_accuracy']:>8.4f} {r['scratch_accuracy']:>8.4f} "
              f"{r['incremental_earlier']:>11.4f} {r['scratch_earlier']:>11.4f} "
              f"{r['last_step_samples']:>17,} {r['scratch_samples']:>15,} "
              f"{sum(r['promoted'])}/{len(r['promoted']):>7}")
    checks = [
        ("accuracy gap (scratch - incremental)", s["acc_gap_points"], "points", 1.0),
        ("last step samples / scratch samples", s["sample_ratio"], "", 0.25),
        ("earlier uploads: scratch - incremental", s["earlier_gap_points"], "points", 1.0),
    ]
    for name, value, unit, limit in checks:
        print(f"  {name:<42} {value:>7.3f} {unit:<6} target <= {limit:<5} "
              f"{'PASS' if value <= limit else 'MISS'}")
    print(f"  {'whole chain samples / scratch samples':<42} {s['chain_sample_ratio']:>7.3f}")
    print(f"  {'forgetting in the last step':<42} {s['forgetting_points']:>7.3f} points")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = TrainConfig()
    p.add_argument("--scenario", choices=("digits", "drift", "classes"), default="digits")
    p.add_argument("--uploads", type=int, default=8)
    p.add_argument("--rows", type=int, default=600, help="drift: rows per upload")
    p.add_argument("--per-class", type=int, default=300, help="classes: rows per class")
    p.add_argument("--noise", type=float, default=None,
                   help="patterns: pixel noise (default: drift 6, classes 8)")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--scratch-epochs", type=int, default=None, help="default: --epochs")
    p.add_argument("--replay", type=float, default=d.replay_ratio)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--width", type=int, default=d.width)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--holdout", type=float, default=0.3, help="held-out fraction (more rows: "
                   "less noise; digits is small)")
    p.add_argument("--alpha", type=float, default=d.gate_alpha)
    p.add_argument("--logit-adjust", type=int, choices=(0, 1), default=int(d.logit_adjust),
                   help="1: the update's loss corrects its class mix (trainer.balance)")
    p.add_argument("--distill", type=float, default=d.distill,
                   help="weight of the parent's answers in an update (trainer.distill); 0 off")
    p.add_argument("--align-head", type=int, choices=(0, 1), default=int(d.align_head),
                   help="1: weight aligning after an update that grew the head")
    p.add_argument("--resample", type=int, choices=(0, 1), default=int(d.replay_resample),
                   help="1: the replay sample is drawn afresh every epoch")
    p.add_argument("--lr-schedule", choices=("cosine", "constant"), default=d.lr_schedule,
                   help="the learning rate over a run (trainer.schedule)")
    p.add_argument("--lr-final", type=float, default=d.lr_final,
                   help="cosine: the last step's rate as a share of --lr")
    p.add_argument("--lr-hold", type=float, default=d.lr_hold,
                   help="cosine: share of a run's steps at --lr before the rate falls")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = p.parse_args(argv)
    args.scratch_epochs = args.scratch_epochs or args.epochs
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="shardline-bench-"))
    train_kw = dict(epochs=args.epochs, replay_ratio=args.replay, lr=args.lr, width=args.width,
                    batch_size=args.batch_size, holdout_fraction=args.holdout,
                    shuffle_window=TrainConfig().shuffle_window, gate_alpha=args.alpha,
                    logit_adjust=bool(args.logit_adjust), distill=args.distill,
                    align_head=bool(args.align_head), replay_resample=bool(args.resample),
                    lr_schedule=args.lr_schedule, lr_final=args.lr_final,
                    lr_hold=args.lr_hold,
                    cache_dir=str(work / "cache"))
    cfg = digits_config(name=f"{args.scenario}-bench", **train_kw)
    if args.scenario != "digits":
        cfg = patterns_config(cfg, f"{args.scenario}-bench")
    scratch_cfg = dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, epochs=args.scratch_epochs))
    moto = services.start_moto(procs.free_port(), work)
    try:
        settings = StoreSettings(bucket="unused", endpoint_url=moto.url, access_key="bench",
                                 secret_key="bench")
        rows = [run_one(args, settings, cfg, scratch_cfg, s) for s in args.seeds]
    finally:
        moto.stop()
    summary: dict[str, Any] = {}
    if args.scenario == "digits":
        summary = summarise(rows)
        print_table(rows, summary, args)
    elif args.scenario == "drift":
        summary = print_drift(rows, args)
    else:
        summary = print_classes(rows, args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"learning-{args.scenario}.json").write_text(json.dumps(
        {"args": vars(args), "summary": summary, "runs": rows}, indent=1, default=str))
    return 0


def run_one(args: argparse.Namespace, settings: StoreSettings, cfg: Config,
            scratch_cfg: Config, seed: int) -> dict[str, Any]:
    if args.scenario == "drift":
        return run_drift(settings, cfg, scratch_cfg, args.uploads, args.rows, seed,
                         args.noise or 6.0)
    if args.scenario == "classes":
        return run_classes(settings, cfg, scratch_cfg, 5, args.per_class, seed,
                           args.noise or 8.0)
    return run_seed(settings, cfg, scratch_cfg, args.uploads, seed)


if __name__ == "__main__":
    sys.exit(main())
