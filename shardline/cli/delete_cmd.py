"""``shardline delete``: publish a version without the rows of some ids.

Runs in this process against the bucket (no Prefect, no Spark): it reads the id index and
the touched shards. By default it erases (``tasks.erase``, what a data subject's deletion
needs): the touched shards and id files are rewritten without the rows and the consumed raw
uploads that held them are removed, so that after ``expire`` and ``vacuum`` no object holds
them. ``--mask`` only masks them with a deletion vector per touched shard (``tasks.delete``:
cheaper, the bytes stay until a compaction and the ids stay in the id files). Unknown ids
are refused (exit 1), naming the first.
"""

from __future__ import annotations

import typer

from shardline.cli.common import ConfigOpt, JsonOpt, prepare
from shardline.cli.output import emit_json, fail, line
from shardline.core.errors import ShardlineError

IdsOpt = typer.Option(..., "--ids", help="a text file with one id per line")
MaskOpt = typer.Option(False, "--mask", help="only mask the rows (deletion vectors): their "
                       "bytes and ids stay in the bucket; default: erase them")


def delete(config: str = ConfigOpt, ids: str = IdsOpt, mask: bool = MaskOpt,
           as_json: bool = JsonOpt) -> None:
    """Publish a new version without the rows of the ids in a file: the touched shards and
    id files rewritten without them, their consumed raw uploads removed (``--mask``: masked
    by deletion vectors instead); earlier versions are unchanged until expire + vacuum."""
    prepare()
    from shardline.cli import preflight
    from shardline.tasks.delete import delete_ids, read_ids
    from shardline.tasks.erase import erase_ids

    try:
        wanted = read_ids(ids)
        cfg, store = preflight.config_and_store(config, versions=True)
        result = (delete_ids if mask else erase_ids)(store, cfg.dataset, wanted)
    except (ShardlineError, ValueError) as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(result.to_dict())
    else:
        line(result.summary())


def register(app: typer.Typer) -> None:
    app.command()(delete)
