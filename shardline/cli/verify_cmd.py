"""``shardline verify``: check a dataset version end to end (``shardline.tasks.verify``).

Runs in this process against the bucket (no Prefect, no Spark). Exit 0 with a one-line
summary when the version is sound; one line per problem (the object, what is wrong, how to
repair it) and exit 1 when it is not.
"""

from __future__ import annotations

import typer

from shardline.cli.common import ConfigOpt, JsonOpt, prepare
from shardline.cli.output import emit_json, fail, line
from shardline.core.errors import ShardlineError

VersionOpt = typer.Option(None, "--version", "-v", min=1,
                          help="the version to check (default: the latest)")


def verify(config: str = ConfigOpt, version: int | None = VersionOpt,
           as_json: bool = JsonOpt) -> None:
    """Check a dataset version end to end: every object it references is present, with the
    recorded size and digest (xxh3_128 where recorded, else sha256). Exit 1 if not."""
    prepare()
    from shardline.cli import preflight
    from shardline.tasks.verify import verify as run_verify

    try:
        cfg, store = preflight.config_and_store(config, versions=True, version=version)
        result = run_verify(store, cfg.dataset, version)
    except (ShardlineError, ValueError) as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(result.to_dict())
    else:
        for p in result.problems:
            line(p.line())
        line(result.summary())
    if not result.sound:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(verify)
