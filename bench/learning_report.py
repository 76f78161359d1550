"""Tables and bar checks of the issue-21 learning scenarios (``bench/learning.py``)."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import numpy as np


def _check(name: str, value: float, unit: str, limit: float, higher_ok: bool = False) -> None:
    ok = value >= limit if higher_ok else value <= limit
    print(f"  {name:<52} {value:>8.3f} {unit:<7} target {'>=' if higher_ok else '<='} "
          f"{limit:<5} {'PASS' if ok else 'MISS'}")


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.fmean(float(r[key]) for r in rows if r[key] is not None)


def print_drift(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, float]:
    print(f"\ndrift: {args.uploads} uploads x {args.rows} rows of noisy 16x16x3 patterns, "
          f"epochs {args.epochs} (full retrain {args.scratch_epochs}), replay {args.replay}, "
          f"width {args.width}, gate_alpha {args.alpha}")
    print(f"{'seed':>4} {'inc acc':>8} {'full acc':>8} {'last/full samples':>17} "
          f"{'promoted':>9} {'truly worse':>11} {'wrongly refused':>15}")
    for r in rows:
        worse = sum(t["truly_worse"] for t in r["truth"])
        print(f"{r['seed']:>4} {r['incremental_accuracy']:>8.4f} {r['scratch_accuracy']:>8.4f} "
              f"{r['last_step_samples'] / r['scratch_samples']:>17.3f} "
              f"{sum(r['promoted'])}/{len(r['promoted']):>7} {worse:>11} "
              f"{r['wrongly_refused']:>15}")
        for t in r["truth"]:
            if not t["promoted"]:
                print(f"     upload {t['upload']} refused (oracle {t['candidate']:.4f} vs live "
                      f"{t['live']:.4f}): {t['decision'][:160]}")
    s = {"acc_gap_points": 100 * (_mean(rows, "scratch_accuracy")
                                  - _mean(rows, "incremental_accuracy")),
         "sample_ratio": _mean(rows, "last_step_samples") / _mean(rows, "scratch_samples"),
         "wrongly_refused": float(sum(r["wrongly_refused"] for r in rows))}
    _check("accuracy gap (full retrain - incremental)", s["acc_gap_points"], "points", 1.0)
    _check("last update samples / full retrain samples", s["sample_ratio"], "", 0.25)
    _check("candidates not truly worse but refused (all seeds)", s["wrongly_refused"], "", 0)
    return s


def print_classes(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, float]:
    print(f"\nclasses: 10 classes in 5 stages, {args.per_class} rows a class, epochs "
          f"{args.epochs} (full retrain {args.scratch_epochs}), replay {args.replay}, width "
          f"{args.width}, gate_alpha {args.alpha}")
    print(f"{'seed':>4} {'inc acc':>8} {'full acc':>8} {'inc first':>9} {'full first':>10} "
          f"{'old cls':>8} {'new cls':>8} {'last/full':>9} {'promoted':>9} {'schema':>7}")
    for r in rows:
        print(f"{r['seed']:>4} {r['incremental_accuracy']:>8.4f} {r['scratch_accuracy']:>8.4f} "
              f"{r['incremental_first']:>9.4f} {r['scratch_first']:>10.4f} "
              f"{r['old_classes_accuracy'] or 0:>8.4f} {r['new_classes_accuracy'] or 0:>8.4f} "
              f"{r['last_step_samples'] / r['scratch_samples']:>9.3f} "
              f"{sum(r['promoted'])}/{len(r['promoted']):>7} {r['schemas'][-1]:>7}")
    s = {"acc_gap_points": 100 * (_mean(rows, "scratch_accuracy")
                                  - _mean(rows, "incremental_accuracy")),
         "first_gap_points": 100 * (_mean(rows, "scratch_first")
                                    - _mean(rows, "incremental_first")),
         "sample_ratio": _mean(rows, "last_step_samples") / _mean(rows, "scratch_samples"),
         "stages_refused": float(sum(len(r["promoted"]) - sum(r["promoted"]) for r in rows))}
    if all("oracle_scratch" in r for r in rows):
        per = rows[0]["first_classes"]
        gaps = np.asarray([np.subtract(r["oracle_scratch"], r["oracle_incremental"])
                           for r in rows])
        s["oracle_gap_points"] = 100 * float(gaps.mean())
        s["oracle_first_gap_points"] = 100 * float(gaps[:, :per].mean())
        se = 100 * gaps[:, :per].mean(1).std(ddof=1) / np.sqrt(len(rows)) if len(rows) > 1 else 0
        print(f"  on {rows[0]['oracle_rows_per_class']} fresh rows a class (no held-out noise): "
              f"gap {s['oracle_gap_points']:.2f} points, first stage's classes "
              f"{s['oracle_first_gap_points']:.2f} ± {se:.2f} (one s.e. over seeds); per class "
              + " ".join(f"{100 * g:.1f}" for g in gaps.mean(0)))
    _check("accuracy gap (full retrain - incremental)", s["acc_gap_points"], "points", 0.5)
    _check("last update samples / full retrain samples", s["sample_ratio"], "", 0.20)
    _check("first stage's classes: full retrain - incremental", s["first_gap_points"],
           "points", 1.0)
    _check("stages refused (all seeds)", s["stages_refused"], "", 0)
    return s
