"""``shardline delete``: publish a version without the rows of some ids (``tasks.delete``).

Runs in this process against the bucket (no Prefect, no Spark): it reads the id index and
the touched shards' ids, writes a deletion vector per touched shard and commits one version
document. Unknown ids are refused (exit 1), naming the first.
"""

from __future__ import annotations

import typer

from shardline.cli.common import ConfigOpt, JsonOpt, prepare
from shardline.cli.output import emit_json, fail, line
from shardline.core.errors import ShardlineError

IdsOpt = typer.Option(..., "--ids", help="a text file with one id per line")


def delete(config: str = ConfigOpt, ids: str = IdsOpt, as_json: bool = JsonOpt) -> None:
    """Publish a new version without the rows of the ids in a file (deletion vectors: the
    touched shards are masked, not rewritten; earlier versions are unchanged)."""
    prepare()
    from shardline.cli import preflight
    from shardline.core.config import StoreSettings
    from shardline.core.store import ObjectStore
    from shardline.tasks.delete import delete_ids, read_ids

    try:
        wanted = read_ids(ids)
        cfg = preflight.config(config)
        store = ObjectStore(StoreSettings.from_env())
        preflight.s3(store.settings)
        preflight.dataset_versions(store.settings, cfg, None)
        result = delete_ids(store, cfg.dataset, wanted)
    except (ShardlineError, ValueError) as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(result.to_dict())
    else:
        line(result.summary())


def register(app: typer.Typer) -> None:
    app.command()(delete)
