"""``shardline expire``, ``shardline vacuum`` and ``shardline audit``: retention of dataset
versions and where an id is (``shardline.tasks.expire``, ``.vacuum``, ``.audit``).

Runs in this process against the bucket (no Prefect, no Spark). The versions live models
use are read from the registry here (``trainer.retention``) and handed to the task, which
also keeps the versions of running trainings (their leases) and the latest.
"""

from __future__ import annotations

import typer

from shardline.cli.common import ConfigOpt, JsonOpt, prepare
from shardline.cli.output import emit_json, fail, line
from shardline.core.errors import ShardlineError

KeepOpt = typer.Option(None, "--keep", min=1, help="keep the N newest versions")
OlderOpt = typer.Option(None, "--older-than",
                        help="expire versions written longer ago than this (30d, 36h, 90m; "
                        "by the store's clock)")
DryOpt = typer.Option(False, "--dry-run", help="say what would go; change nothing")


def expire(config: str = ConfigOpt, keep: int | None = KeepOpt,
           older_than: str | None = OlderOpt, dry_run: bool = DryOpt,
           as_json: bool = JsonOpt) -> None:
    """Expire old dataset versions: their documents go (never the latest, a live model's
    version or a running training's); `shardline vacuum` then removes their files."""
    prepare()
    from shardline.cli import preflight
    from shardline.tasks.expire import expire as run_expire
    from shardline.tasks.expire import parse_age
    from shardline.trainer.retention import versions_in_use

    try:
        cfg, store = preflight.config_and_store(config)
        age = None if older_than is None else parse_age(older_than)
        result = run_expire(store, cfg.dataset, keep=keep, older_than=age,
                            held=versions_in_use(store, cfg.dataset.name), dry_run=dry_run)
    except (ShardlineError, ValueError) as exc:
        fail(exc, as_json)
    if as_json:
        emit_json({"dataset": result.dataset, "latest": result.latest,
                   "expired": result.expired, "kept": result.kept, "dry_run": dry_run})
    else:
        line(result.summary())


def vacuum(config: str = ConfigOpt, dry_run: bool = DryOpt, as_json: bool = JsonOpt) -> None:
    """Remove every file no kept version references (shards, batch lists, checkpoints, id
    files, deletion vectors, dead staging), once older than the sweep window by the store's
    clock; an expired version's files stay a window after its expiry."""
    prepare()
    from shardline.cli import preflight
    from shardline.tasks.vacuum import vacuum as run_vacuum

    try:
        cfg, store = preflight.config_and_store(config)
        result = run_vacuum(store, cfg.dataset, dry_run=dry_run)
    except (ShardlineError, ValueError) as exc:
        fail(exc, as_json)
    if as_json:
        emit_json({"dataset": result.dataset, "kept_versions": result.kept_versions,
                   "grace_versions": result.grace_versions, "removed": result.removed,
                   "removed_bytes": result.removed_bytes, "dry_run": dry_run})
    else:
        line(result.summary())


def audit(config: str = ConfigOpt,
          id_: str = typer.Option(..., "--id", help="the row id to look for"),
          as_json: bool = JsonOpt) -> None:
    """Where an id is today: which versions serve it (or mask it), which files hold its row
    (and whether vacuum removes them), which models were trained on versions that held it."""
    prepare()
    from shardline.cli import preflight
    from shardline.tasks.audit import audit as run_audit
    from shardline.trainer.registry_view import model_rows
    from shardline.trainer.retention import model_names

    try:
        cfg, store = preflight.config_and_store(config)
        name = cfg.dataset.name
        models = [{"registry": reg, **row} for reg in model_names(store, name)
                  for row in model_rows(store, name, reg)]
        result = run_audit(store, cfg.dataset, id_, models)
    except (ShardlineError, ValueError) as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(result.to_dict())
    else:
        for text in result.lines():
            line(text)


def register(app: typer.Typer) -> None:
    app.command()(expire)
    app.command()(vacuum)
    app.command()(audit)
