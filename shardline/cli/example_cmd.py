"""``shardline example NAME [--out DIR] [--rows N]``: write a typed example's upload
(``examples/<NAME>.toml``: sentinel, diabetes, tags) into a local folder, generated or from
scikit-learn, with no download; then ``shardline upload DIR -c examples/<NAME>.toml`` puts it
under the dataset's incoming prefix, as any user's files go. The output ends with the
commands that follow (upload, ingest, train, models).
"""

from __future__ import annotations

from pathlib import Path

import typer

from shardline.cli.common import JsonOpt
from shardline.cli.output import emit_json, fail, line
from shardline.core.errors import ShardlineError


def config_hint(name: str) -> str:
    """How to name example ``name``'s TOML: ``examples/<name>.toml`` where that is the file
    (a checkout's root), else the path of the copy installed with shardline."""
    local = Path("examples") / f"{name}.toml"
    if local.is_file():
        return local.as_posix()
    from shardline.resources import MissingResource, example_config

    try:
        return str(example_config(f"{name}.toml"))
    except MissingResource:
        return local.as_posix()


def example(name: str = typer.Argument(..., help="sentinel, diabetes or tags"),
            out: Path = typer.Option(None, "--out", "-o", help="folder to write into "
                                     "(default: example-data/NAME)"),
            rows: int = typer.Option(None, "--rows", help="rows to write (default: the "
                                     "example's: sentinel 512, diabetes 442 = all, tags 600)"),
            as_json: bool = JsonOpt) -> None:
    """Write a typed example's data (sentinel, diabetes, tags) into a local folder."""
    from shardline.infra.example_data import write_example

    folder = out or Path("example-data") / name
    try:
        done = write_example(name, folder, rows)
    except ShardlineError as exc:
        fail(exc, as_json)
    config = config_hint(name)
    steps = [f"shardline upload {folder} -c {config}", f"shardline ingest -c {config}",
             f"shardline train -c {config}", f"shardline models -c {config}"]
    if as_json:
        emit_json({"example": name, "path": str(done.path), "rows": done.rows,
                   "bytes": done.bytes, "config": config, "next": steps})
        return
    line(f"wrote {done.path} ({done.rows} rows, {done.bytes:,} bytes); next:")
    for step in steps:
        line(f"  {step}")


def register(app: typer.Typer) -> None:
    app.command("example")(example)
