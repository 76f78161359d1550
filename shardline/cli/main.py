"""The ``shardline`` command line.

It sits on top of everything: it finds the embedded stack (when one is up under
``SHARDLINE_HOME``) and fills in the environment the flows read, then runs flows through
Prefect (the stack's server, or Prefect's ephemeral mode when no stack is up).
Variables already set in the environment always win over the stack's.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from shardline.core.errors import ShardlineError

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="shardline: S3 uploads -> validated Arrow dataset versions -> training.")
err = Console(stderr=True)
out = Console()

ConfigOpt = typer.Option(..., "--config", "-c", help="dataset TOML file", exists=True,
                         dir_okay=False, readable=True)
JsonOpt = typer.Option(False, "--json", help="print one JSON object on stdout")


def use_stack_env() -> dict[str, str] | None:
    """When an embedded stack is up, set its endpoints for variables not already set."""
    from shardline.infra.stack import running_stack
    from shardline.infra.stack_state import resolve_home, stack_env

    state = running_stack(resolve_home())
    if state is None:
        return None
    env = stack_env(state)
    for k, v in env.items():
        os.environ.setdefault(k, v)
    return env


def _prepare() -> None:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    use_stack_env()


def fail(exc: Exception, as_json: bool) -> None:
    """Print a user error (no traceback) and exit 1."""
    if as_json:
        print(json.dumps({"error": str(exc), "type": type(exc).__name__}))
    err.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(1)


def run_ingest(config: str, quiet: bool = False) -> dict[str, Any]:
    """Run the ingest flow once (used by ``ingest`` and ``demo``)."""
    from shardline.flows.ingest import ingest as ingest_flow

    with err.status(f"ingesting with {config} (Prefect: "
                    f"{os.environ.get('PREFECT_API_URL') or 'ephemeral'})", spinner="dots"):
        if quiet:
            logging.getLogger("prefect").setLevel(logging.WARNING)
        return ingest_flow(config=str(config))


@app.command()
def ingest(config: str = ConfigOpt, as_json: bool = JsonOpt) -> None:
    """Ingest what is new under the dataset's incoming prefix (one Prefect flow run)."""
    _prepare()
    try:
        result = run_ingest(config)
    except ShardlineError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps(result))
        return
    if result["version"] is None:
        out.print(f"[yellow]{result['message']}[/]")
        return
    print_ingest(result)


def print_ingest(r: dict[str, Any]) -> None:
    verb = "published" if r["created"] else "already published as"
    rules = ", ".join(f"{k}: {v}" for k, v in r["quarantine_by_rule"].items()) or "none"
    out.print(f"[bold green]{r['dataset']}[/] {verb} [bold]version {r['version']}[/]: "
              f"{r['rows_published']} rows in {r['shards']} new shards, "
              f"{r['rows_quarantined']} quarantined ({rules})\n  manifest {r['manifest']}")


@app.command()
def versions(config: str = ConfigOpt, as_json: bool = JsonOpt) -> None:
    """List the dataset's versions with their counts (latest first)."""
    _prepare()
    from shardline.core.config import StoreSettings, load_config
    from shardline.core.manifest import list_versions, read_manifest
    from shardline.core.store import ObjectStore
    from shardline.flows.artifacts import versions_rows

    try:
        cfg = load_config(config).dataset
        store = ObjectStore(StoreSettings.from_env())
        rows = versions_rows([read_manifest(store, cfg.prefix, v)
                              for v in list_versions(store, cfg.prefix)])
    except ShardlineError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps({"dataset": cfg.name, "versions": rows}))
        return
    if not rows:
        out.print(f"no versions of {cfg.name} yet under s3://{store.bucket}/{cfg.prefix}/")
        return
    table = Table(title=f"{cfg.name} versions (s3://{store.bucket}/{cfg.prefix}/)")
    for col in rows[0]:
        table.add_column(col, justify="right" if isinstance(rows[0][col], int) else "left")
    for r in rows:
        table.add_row(*(str(v) for v in r.values()))
    out.print(table)


def _register_optional() -> None:
    """Commands that live beside their own layer (stack, training, demo)."""
    for name in ("stack_cmds", "deploy_cmd", "demo_cmd", "train_cmd", "watch_cmd", "bench_cmd"):
        if importlib.util.find_spec(f"shardline.cli.{name}") is not None:
            importlib.import_module(f"shardline.cli.{name}").register(app)


_register_optional()


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
