"""The training stage for Prefect: the trainer run as a task, and what a person looks at in
the Prefect UI afterwards (pure builders plus the artifact task).

Artifacts, keyed per dataset so each key's history is that dataset's runs:
  ``<dataset>-training``        table: dataset version, new/replay samples, epochs, loader
                                samples/s, data-wait share, accuracy before/after (overall
                                and on earlier data; another target kind: its primary
                                metric, and its row score by name), promotion decision and why
  ``<dataset>-training-curve``  markdown: loss and accuracy (another kind: its row score)
                                per step/epoch as a PNG (inline data: URI, rendered by the
                                UI) plus the same numbers as text
  ``<dataset>-training-progress`` progress (0-100 %), updated during the run from the
                                trainer's ``on_batch`` callback (a plain callable: the
                                trainer never imports Prefect)
  ``<dataset>-models``, ``<dataset>-models-trend``  every model and its primary metric's trend
                                (``flows/artifacts.py``), after each run
"""

from __future__ import annotations

import base64
import io
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.concurrency.sync import concurrency
from prefect.logging.handlers import APILogHandler

from shardline.core.config import Config
from shardline.core.store import ObjectStore
from shardline.flows.artifacts import artifact_key, fitted_limits, publish_model_view
from shardline.tasks.launch import train_ranks
from shardline.trainer.gate import is_fraction, score_name
from shardline.trainer.objectives import kind_of
from shardline.trainer.result import held_out_primary
from shardline.trainer.run import TrainResult
from shardline.trainer.run import train as run_training


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100.0 * x:.2f} %"


def _metrics(ev: dict[str, Any]) -> str:
    """The target kind's metrics, its primary one first (``trainer.objectives``)."""
    m, primary = ev.get("metrics") or {}, ev.get("primary")
    order = sorted(m, key=lambda k: k != primary)
    return ", ".join(f"{k} {'n/a' if m[k] is None else f'{m[k]:.4f}'}"
                     f"{' (primary)' if k == primary else ''}" for k in order) or "n/a"


def row_score(r: TrainResult) -> str:
    """What the run's mean row score is (``trainer.objectives``): ``accuracy`` for a class
    target, else its own name (``row F1``, ``negative MSE``; ``score`` from a hook is
    not known here: ``mean row score``), never labelled accuracy."""
    primary = r.eval.get("primary", "accuracy")
    if primary == "accuracy":
        return "accuracy"
    kind = kind_of(primary)
    return "mean row score" if kind is None else score_name(kind)


def _score_text(x: float | None, score: str) -> str:
    if x is None:
        return "n/a"
    return f"{100.0 * x:.2f} %" if is_fraction(score) else f"{x:.4g}"


def _primary_rows(r: TrainResult) -> list[tuple[str, str]]:
    """Before (the live model) and after (the candidate) on the held-out rows: the accuracy
    for a class target, else the kind's primary metric (``held_out_primary``)."""
    name, before, after = held_out_primary(r.eval, r.eval_before, r.accuracy_before,
                                           r.eval_accuracy)
    show = _pct if name == "accuracy" else (lambda v: "n/a" if v is None else f"{v:.4f}")
    return [(f"held-out {name} before (promoted model)", show(before)),
            (f"held-out {name} after (candidate)", show(after))]


def _grown_rows(r: TrainResult) -> list[tuple[str, str]]:
    """After classes were appended: the candidate's held-out accuracy on the parent's
    classes and on the new ones, apart (a forgotten old class shows here first)."""
    old, new = r.eval.get("old_classes_accuracy"), r.eval.get("new_classes_accuracy")
    if old is None and new is None:
        return []
    return [("held-out accuracy: the parent's classes / the new ones",
             f"{_pct(old)} / {_pct(new)}")]


def _fallen_rows(r: TrainResult) -> list[tuple[str, str]]:
    """A class target with a live model: the classes that fell most against it, on the
    same held-out rows (``trainer.evaluate.fallen_classes``); no row when not known."""
    fallen = r.eval.get("fallen_classes")
    if fallen is None or r.eval.get("primary", "accuracy") != "accuracy":
        return []
    text = "; ".join(f"{f.get('name', f['class'])}: {100 * f['before']:.1f} -> "
                     f"{100 * f['after']:.1f} % ({f['rows']} rows)" for f in fallen)
    return [("classes that fell most vs the live model (held-out)", text or "none")]


def run_table(r: TrainResult) -> list[dict[str, str]]:
    earlier_before = (r.eval_before or {}).get("earlier_accuracy")
    score = row_score(r)
    earlier = "earlier versions' data" if score == "accuracy" else \
        f"earlier versions' data ({score})"
    rows = [
        ("dataset version", f"v{r.dataset_version}"),
        ("model version", f"{r.model_version} (parent {r.parent_model_version or 'none'})"),
        ("start", r.start),
        ("new samples / epoch", f"{r.new_samples:,}"),
        ("replay samples / epoch", f"{r.replay_samples:,}"),
        ("epochs", str(r.epochs)),
        ("samples seen", f"{r.samples_seen:,}"),
        ("loader samples/s", f"{r.loader_samples_per_s:,.0f}"),
        ("training samples/s", f"{r.train_samples_per_s:,.0f}"),
        ("data-wait share of step time", _pct(r.data_wait_share)),
        ("held-out metrics (candidate)", _metrics(r.eval)),
        *_primary_rows(r),
        (f"{earlier}: before -> after", f"{_score_text(earlier_before, score)} -> "
                                         f"{_score_text(r.eval.get('earlier_accuracy'), score)}"),
        *_grown_rows(r),
        *_fallen_rows(r),
        ("promoted", "yes" if r.promoted else "no"),
        ("decision", r.decision),
        ("checkpoint", r.checkpoint),
    ]
    return [{"metric": k, "value": v} for k, v in rows]


def curve_png(r: TrainResult) -> bytes:
    """Loss and accuracy per logged step (and held-out accuracy per epoch) as a PNG; for
    another target kind its mean row score (:func:`row_score`) on a fitted, unclipped axis
    (0..1 for a fraction)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=90)
    steps = [p["step"] for p in r.curve_steps]
    ax_loss.plot(steps, [p["loss"] for p in r.curve_steps], marker=".", label="train loss")
    ax_loss.set(xlabel="step", ylabel="loss", title="training loss")
    ax_acc.plot(steps, [p["train_accuracy"] for p in r.curve_steps], marker=".",
                label="train (interval)")
    held = [(e["step"], e["holdout_accuracy"]) for e in r.curve_epochs
            if e.get("holdout_accuracy") is not None]
    if held:
        ax_acc.plot(*zip(*held, strict=True), marker="o", label="held-out (epoch end)")
    if r.accuracy_before is not None:
        ax_acc.axhline(r.accuracy_before, color="grey", linestyle="--", label="promoted before")
    values = [p["train_accuracy"] for p in r.curve_steps] + [a for _, a in held] + (
        [r.accuracy_before] if r.accuracy_before is not None else [])
    score = row_score(r)
    bounds = (0.0, 1.0) if is_fraction(score) else (None, None)
    ax_acc.set(xlabel="step", ylabel=score, title=score,
               ylim=fitted_limits(values, bounds=bounds))
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def curve_markdown(r: TrainResult) -> str:
    png = base64.b64encode(curve_png(r)).decode()
    score = row_score(r)
    name = "acc" if score == "accuracy" else score
    lines = [
        f"## Training curve: {r.dataset} v{r.dataset_version} -> model {r.model_version}",
        "",
        f"![training curve](data:image/png;base64,{png})",
        "",
        f"| epoch | step | train loss | train {name} | held-out {name} | earlier-data {name} |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for e in r.curve_epochs:
        lines.append(f"| {e['epoch']} | {e['step']} | {e['loss']:.4f} | "
                     f"{_score_text(e['train_accuracy'], score)} | "
                     f"{_score_text(e.get('holdout_accuracy'), score)} | "
                     f"{_score_text(e.get('earlier_accuracy'), score)} |")
    lines += ["", f"**{'Promoted' if r.promoted else 'Not promoted'}**: {r.decision}"]
    return "\n".join(lines)


@contextmanager
def trainer_logs_to_prefect() -> Iterator[None]:
    """Send the trainer's progress lines (plain ``logging``) to this flow run's log."""
    handler = APILogHandler()
    logger = logging.getLogger("shardline.trainer")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class EpochProgress:
    """A plain ``on_batch(step, batch)`` callable for the trainer that moves a Prefect
    progress artifact: at each epoch end, and within epochs (from the second one on, once
    the steps per epoch are known) at most every ``every_s`` seconds. An API error never
    stops training: it is logged once and updates stop."""

    def __init__(self, update: Callable[[float], object], epochs: int,
                 every_s: float = 2.0) -> None:
        self.update, self.epochs, self.every_s = update, max(epochs, 1), every_s
        self.steps_per_epoch: int | None = None
        self.last_t, self.last_pct, self.broken = 0.0, -1.0, False

    def __call__(self, step: int, batch: Any) -> None:
        epoch, end = int(batch["epoch"]), bool(batch["epoch_end"])
        if end and self.steps_per_epoch is None and epoch == 0:
            self.steps_per_epoch = step + 1
        if end:
            pct = 100.0 * (epoch + 1) / self.epochs
        elif self.steps_per_epoch and time.monotonic() - self.last_t >= self.every_s:
            within = min((step % self.steps_per_epoch) / self.steps_per_epoch, 0.99)
            pct = 100.0 * (epoch + within) / self.epochs
        else:
            return
        pct = min(pct, 99.0)               # 100 % once the model is saved and gated
        if pct > self.last_pct:
            self.send(pct)

    def send(self, pct: float) -> None:
        if self.broken:
            return
        try:
            self.update(pct)
        except Exception as exc:   # progress is not worth failing a training run for
            self.broken = True
            logging.getLogger(__name__).warning("training progress artifact: %s", exc)
        self.last_t, self.last_pct = time.monotonic(), pct


def progress_tracker(cfg: Config, version: int) -> EpochProgress:
    art = create_progress_artifact(0.0, key=artifact_key(cfg.dataset.name, "training-progress"),
                                   description=f"training {cfg.dataset.name} v{version}: "
                                               f"{cfg.train.epochs} epochs")
    if not isinstance(art, uuid.UUID):   # a coroutine only for an async caller
        raise TypeError(f"create_progress_artifact returned {type(art).__name__}")
    return EpochProgress(lambda pct: update_progress_artifact(art, pct), cfg.train.epochs)


@task(name="train-model", cache_policy=NO_CACHE)
def train_model(cfg: Config, store: ObjectStore, version: int,
                processes: int = 1) -> TrainResult:
    """One trainer run on ``version`` of the dataset ``cfg`` (parsed once, by the flow); with
    ``processes`` > 1, torchrun ranks on this worker (``tasks/launch.py``)."""
    # One training run per dataset at a time, however it was started (the limit is created
    # by `shardline deploy`; without it, this is a no-op).
    with concurrency(f"train-{cfg.dataset.name}", occupy=1), trainer_logs_to_prefect():
        progress = progress_tracker(cfg, version)
        if processes > 1:
            # the task run's logger carries the run's ids: usable from the reader thread
            result = train_ranks(cfg, store.settings, version, processes,
                                 log=get_run_logger().info)
        else:
            result = run_training(cfg, store, version, on_batch=progress)
        progress.send(100.0)
        return result


@task(name="training-artifacts", cache_policy=NO_CACHE)
def publish_artifacts(result: TrainResult, store: ObjectStore) -> None:
    create_table_artifact(
        table=run_table(result), key=artifact_key(result.dataset, "training"),
        description=f"{result.dataset} v{result.dataset_version}: model {result.model_version}, "
                    f"{'promoted' if result.promoted else 'not promoted'}")
    create_markdown_artifact(
        markdown=curve_markdown(result), key=artifact_key(result.dataset, "training-curve"),
        description=f"loss and accuracy of model {result.model_version}")
    publish_model_view(store, result.dataset, result.model)
