"""``shardline models``: the model history (every candidate, promoted or refused, and which
one is live), and the moves of the live pointer a person makes:

    shardline models -c digits.toml                      # the history
    shardline models promote 7 -c digits.toml --reason "A/B won"
    shardline models rollback -c digits.toml             # back to the model live before
    shardline models pin 7 -c digits.toml                # live = 7; training won't move it
    shardline models expire -c digits.toml --keep 5      # registry retention

A move is the gate's conditional write of ``promoted.json`` (``trainer/moves.py``) and is
logged in it with who asked (``--by``, default the user name) and why; the Prefect UI's
model view (``<dataset>-models``) is re-posted when a Prefect server is configured.
"""

from __future__ import annotations

import getpass
import os
from typing import Any

import typer

from shardline.cli.common import ConfigOpt, JsonOpt, prepare
from shardline.cli.output import emit_json, fail, line, rows
from shardline.core.errors import ShardlineError

ModelOpt = typer.Option(None, "--model", help="the registry's model name (default: [train] "
                        "name, or the model's short name)")
ByOpt = typer.Option(None, "--by", help="who asks for the move (default: your user name)")
ReasonOpt = typer.Option("", "--reason", help="why (kept in the pointer's log of moves)")
OptionalConfig = typer.Option(None, "--config", "-c", help="dataset TOML")

app = typer.Typer(help="Models of a dataset: the history, and promote / rollback / pin.",
                  no_args_is_help=False)


@app.callback(invoke_without_command=True)
def models(ctx: typer.Context, config: str | None = OptionalConfig,
           model: str | None = ModelOpt, as_json: bool = JsonOpt) -> None:
    """The model history: every candidate, promoted or refused, with its dataset version,
    held-out accuracy (overall, on the run's new data, on earlier data), the gate's decision
    and reason, which one is live (promoted: live / earlier / no), the pointer's moves, and
    the rows corrected and deleted in the dataset versions each model learned."""
    if ctx.invoked_subcommand is not None:
        return
    if config is None:
        raise typer.BadParameter("--config / -c is required", param_hint="--config")
    from shardline.trainer.registry_view import model_history, with_changes_seen

    cfg, store, name = _open(config, model, as_json)
    try:
        hist = model_history(store, cfg.dataset.name, name)
        hist["models"] = with_changes_seen(store, cfg.dataset.prefix, hist["models"])
    except ShardlineError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json({"dataset": cfg.dataset.name, "model": name, **hist})
        return
    cols = ["model", "status", "dataset_version", "parent", "accuracy", "accuracy_new",
            "accuracy_earlier", "metric", "gate", "promoted", "corrected", "deleted",
            "created", "reason"]
    live, pin = hist["live"], hist["pinned"]
    pinned = f", pinned by {pin.get('by')}" if pin else ""
    rows([{**r, "promoted": r["promotion"]} for r in reversed(hist["models"])],
         title=f"{cfg.dataset.name} / {name} models, latest first (live: "
               f"{'none' if live is None else f'model {live}'}{pinned}; s3://{store.bucket}/"
               f"models/{cfg.dataset.name}/{name}/)", columns=cols,
         empty=f"no {name} models of {cfg.dataset.name} yet; run `shardline train -c {config}`")


def _open(config: str, model: str | None, as_json: bool) -> tuple[Any, Any, str]:
    """The checked config, the store and the registry's model name (or the error line)."""
    prepare()
    from shardline.cli import preflight

    try:
        cfg, store = preflight.config_and_store(config)
    except ShardlineError as exc:
        fail(exc, as_json)
    return cfg, store, model or cfg.train.registry_name


def _move(action: str, config: str, number: int | None, model: str | None, by: str | None,
          reason: str, as_json: bool) -> None:
    from shardline.trainer.moves import move
    from shardline.trainer.registry import ModelRegistry

    cfg, store, name = _open(config, model, as_json)
    try:
        done = move(ModelRegistry(store, cfg.dataset.name, name), action,
                    by or getpass.getuser(), reason, number)
    except ShardlineError as exc:
        fail(exc, as_json)
    posted = _post_view(store, cfg.dataset.name, name)
    if as_json:
        emit_json({"dataset": cfg.dataset.name, "model": name, "action": done.action,
                   "before": done.before, "live": done.live, "by": done.by,
                   "reason": done.reason, "view_posted": posted})
        return
    line(f"{cfg.dataset.name} / {name}: {done.action} by {done.by}: live model "
         f"{done.before} -> {done.live}{' (pinned)' if action == 'pin' else ''}"
         f"{'' if posted else ' (Prefect model view not re-posted: no PREFECT_API_URL)'}")


def _post_view(store: Any, dataset: str, name: str) -> bool:
    """Re-post the UI's model view when a Prefect server is configured (never fails the
    move: the pointer has moved already)."""
    if not os.environ.get("PREFECT_API_URL"):
        return False
    try:
        from shardline.flows.artifacts import publish_model_view

        publish_model_view(store, dataset, name)
        return True
    except Exception as exc:  # noqa: BLE001 - the view is a view; the move is done
        line(f"model view not re-posted: {type(exc).__name__}: {exc}")
        return False


@app.command()
def promote(number: int = typer.Argument(..., help="model number to make live"),
            config: str = ConfigOpt, model: str | None = ModelOpt, by: str | None = ByOpt,
            reason: str = ReasonOpt, as_json: bool = JsonOpt) -> None:
    """Make model NUMBER the live model (unpins)."""
    _move("promote", config, number, model, by, reason, as_json)


@app.command()
def rollback(config: str = ConfigOpt, model: str | None = ModelOpt, by: str | None = ByOpt,
             reason: str = ReasonOpt, as_json: bool = JsonOpt) -> None:
    """Make the model that was live before the live one live again (unpins)."""
    _move("rollback", config, None, model, by, reason, as_json)


@app.command()
def pin(number: int = typer.Argument(..., help="model number to make live and pin"),
        config: str = ConfigOpt, model: str | None = ModelOpt, by: str | None = ByOpt,
        reason: str = ReasonOpt, as_json: bool = JsonOpt) -> None:
    """Make model NUMBER live and pin it: training runs keep saving candidates but do not
    promote them until someone promotes or rolls back."""
    _move("pin", config, number, model, by, reason, as_json)


@app.command("expire")
def expire_models(config: str = ConfigOpt,
                  keep: int = typer.Option(..., "--keep", min=0,
                                           help="candidates (never promoted) to keep"),
                  model: str | None = ModelOpt,
                  dry_run: bool = typer.Option(False, "--dry-run",
                                               help="say what would go; change nothing"),
                  as_json: bool = JsonOpt) -> None:
    """Remove old models' weights and checkpoints: every model ever promoted, the pinned one,
    the last N candidates and any written within the sweep window stay."""
    from datetime import timedelta

    from shardline.tasks.lease import store_now
    from shardline.trainer.retention import expire_models as run

    cfg, store, name = _open(config, model, as_json)
    try:
        done = run(store, cfg.dataset.name, name, keep, store_now(store, cfg.dataset.prefix),
                   timedelta(minutes=cfg.dataset.sweep_after_minutes), dry_run)
    except ShardlineError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json({"dataset": cfg.dataset.name, "model": name, "removed": done.removed,
                   "kept": done.kept, "dry_run": dry_run})
        return
    line(f"{cfg.dataset.name} / {done.summary()}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="models")
