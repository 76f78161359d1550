"""``shardline demo``: the whole story on the embedded stack, in one command.

Starts the stack (if it is not up), uploads part 1 of the demo data (real digits images),
ingests it, uploads part 2, ingests again, trains after each version when the trainer is
installed, and prints the versions and the Prefect UI address. Running it again uploads the
same bytes (same ETags), so it publishes nothing new and shows what is there.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import typer

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "examples" / "digits.toml"


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(config: str = typer.Option(str(DEFAULT_CONFIG), "--config", "-c",
                                        help="dataset TOML (default: the digits example)"),
             train: bool = typer.Option(True, help="train after each version")) -> None:
        """Run the end-to-end demo on the embedded stack."""
        from infra import demo_data, stack
        from infra.stack_state import StackConfig
        from shardline.config import StoreSettings, load_config
        from shardline.store import ObjectStore
        from shardline_cli.main import err, out, print_ingest, run_ingest, use_stack_env

        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        with err.status("starting the embedded stack (S3, Prefect, Spark Connect)..."):
            result = stack.up(StackConfig.resolve())
        state = result.state
        out.print(("stack already up" if result.already_running else "stack up") +
                  f": S3 {state.s3_endpoint}, Prefect UI {state.prefect_ui_url}, "
                  f"Spark {state.spark_remote}")
        use_stack_env()
        cfg = load_config(config)
        store = ObjectStore(StoreSettings.from_env())
        store.ensure_bucket()
        can_train = train and importlib.util.find_spec("flows.train") is not None
        for part in (1, 2):
            up = demo_data.upload_demo_part(store, cfg.dataset.incoming, part)
            out.print(f"[bold]upload {part}[/]: {up['objects']} object(s), {up['rows']} rows "
                      f"under s3://{store.bucket}/{cfg.dataset.incoming}")
            r = run_ingest(config)
            if r["version"] is None:
                out.print(f"[yellow]{r['message']}[/]")
            else:
                print_ingest(r)
            if can_train and r.get("created"):
                from shardline_cli.train_cmd import run_train_and_print
                run_train_and_print(config, r["version"])
        out.print(f"\n[bold]Prefect UI:[/] {state.prefect_ui_url}  (runs, artifacts: versions, "
                  "validation, quarantine)\nstop the stack with: .venv/bin/shardline down")
