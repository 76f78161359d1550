"""``shardline deploy``: deploy prefect.yaml's flows for one dataset to a Prefect server."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def deploy(
        config: Path = typer.Option(..., "--config", "-c", exists=True, dir_okay=False,
                                    help="dataset TOML"),
        work_pool: str = typer.Option("shardline-process", help="pool for ingest runs"),
        train_pool: str = typer.Option("shardline-process",
                                       help="pool for training runs (a GPU pool in production)"),
        cron: str = typer.Option("0 2 * * *", help="nightly ingest schedule (UTC)"),
        debounce: int = typer.Option(5, help="seconds a burst of uploads is gathered into "
                                             "one ingest run"),
    ) -> None:
        """Create pools, the AwsCredentials block and the training concurrency limit, then
        `prefect deploy --all` (PREFECT_API_URL, or the embedded stack's server)."""
        import os

        from shardline.cli.main import fail, out, use_stack_env
        from shardline.core.config import StoreSettings
        from shardline.core.errors import ShardlineError
        from shardline.infra.deploy import DeploySpec
        from shardline.infra.deploy import deploy as run_deploy

        use_stack_env()
        api = os.environ.get("PREFECT_API_URL")
        if not api:
            fail(ValueError("PREFECT_API_URL is not set and no stack is up; start one with "
                            "`shardline up` or point PREFECT_API_URL at your server"), False)
        try:
            names = run_deploy(DeploySpec(config, api, work_pool, train_pool, cron, debounce),
                               StoreSettings.from_env())
        except ShardlineError as exc:
            fail(exc, False)
        out.print(f"deployed {', '.join(names)} to {api}")
