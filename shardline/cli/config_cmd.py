"""``shardline config schema`` / ``config check``: the dataset TOML's JSON Schema, and
validating a file without touching any service."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from shardline.cli.common import ConfigOpt, JsonOpt
from shardline.cli.output import emit_json, fail, line
from shardline.core.errors import ShardlineError

config_app = typer.Typer(no_args_is_help=True, help="The dataset TOML: schema and checks.")


@config_app.command("schema")
def schema(output: Path = typer.Option(None, "--output", "-o", dir_okay=False,
                                       help="write to this file instead of stdout")) -> None:
    """JSON Schema of the dataset TOML (editors: `#:schema ./shardline.schema.json` as the
    first line of the TOML, with Taplo / Even Better TOML)."""
    from shardline.core.config import config_schema

    text = json.dumps(config_schema(), indent=2, sort_keys=True)
    if output is None:
        print(text)
        return
    output.write_text(text + "\n")
    line(f"wrote {output}")


@config_app.command("check")
def check(config: str = ConfigOpt, as_json: bool = JsonOpt) -> None:
    """Validate a dataset TOML (and SHARDLINE_* overrides); print the resolved settings."""
    from shardline.core.config import config_to_dict, load_config

    try:
        cfg = load_config(config)
    except ShardlineError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(config_to_dict(cfg))
        return
    line(f"{config}: valid (dataset {cfg.dataset.name}, {len(cfg.dataset.classes)} classes, "
         f"image {list(cfg.dataset.image.shape)}, model {cfg.train.model}, prefix "
         f"{cfg.dataset.prefix}/)")


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
