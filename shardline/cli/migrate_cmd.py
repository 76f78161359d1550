"""``shardline migrate``: rewrite a dataset written in manifest format 1 or 2 as format 3,
once, as a new version (``shardline.tasks.migrate``). Runs in this process against the
bucket; safe to kill and run again; a second run finds nothing to migrate."""

from __future__ import annotations

import typer

from shardline.cli.common import ConfigOpt, JsonOpt, prepare
from shardline.cli.output import emit_json, fail, line
from shardline.core.errors import ShardlineError


def migrate(config: str = ConfigOpt, as_json: bool = JsonOpt) -> None:
    """Rewrite a dataset's manifests from format 1 or 2 to format 3 as a new version: the
    same rows, shards and ids, no new rows for the trainer. Re-running publishes nothing."""
    prepare()
    from shardline.cli import preflight
    from shardline.tasks.migrate import migrate as run_migrate

    try:
        cfg, store = preflight.config_and_store(config)
        r = run_migrate(store, cfg.dataset)
    except ShardlineError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(r.to_dict())
    elif r.version is None:
        line(f"{r.dataset} v{r.parent} is format 3 ({r.batches} batches): nothing to migrate")
    else:
        line(f"{r.dataset} v{r.parent} (format {r.found}) -> version {r.version} (format 3): "
             f"{r.batches} batches, {r.rewritten} batch list(s) rewritten, the same rows; "
             f"{r.seconds:.1f} s")


def register(app: typer.Typer) -> None:
    app.command()(migrate)
