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
    ds = cfg.dataset
    if ds.typed:
        t = ds.target_spec
        fields = ", ".join(f"{n} {f.kind} {f.resolved_dtype}{list(f.shape) if f.shape else ''}"
                           for n, f in ds.field_specs)
        what = f"fields: {fields}; target {t.name} ({t.kind}, {len(ds.classes)} classes)"
    else:
        what = f"{len(ds.classes)} classes, image {list(ds.image.shape)}"
    line(f"{config}: valid (dataset {ds.name}, {what}, model {cfg.train.model}, prefix "
         f"{ds.prefix}/)")


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
