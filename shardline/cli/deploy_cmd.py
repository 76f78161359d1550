"""``shardline deploy``: deploy prefect.yaml's flows for one dataset to a Prefect server."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def deploy(
        config: str = typer.Option(..., "--config", "-c", help="dataset TOML"),
        work_pool: str = typer.Option(None, help="pool for ingest runs (env "
                                      "SHARDLINE_WORK_POOL, default shardline-process)"),
        train_pool: str = typer.Option(None, help="pool for training runs, a GPU pool in "
                                       "production (env SHARDLINE_TRAIN_POOL, default "
                                       "shardline-process)"),
        cron: str = typer.Option("0 2 * * *", help="nightly ingest schedule (UTC)"),
        debounce: int = typer.Option(1, help="seconds the upload trigger waits before the "
                                             "ingest run is due (at most one run per window)"),
        pending_timeout: int = typer.Option(None, min=10, help="seconds a flow run may stay "
                                            "PENDING (taken by a worker, not started) before it is "
                                            "rescheduled (env SHARDLINE_PENDING_TIMEOUT, "
                                            "default 600)"),
    ) -> None:
        """Create pools, the AwsCredentials block and the training concurrency limit, then
        `prefect deploy --all` (PREFECT_API_URL, or the embedded stack's server)."""
        import os

        from shardline.cli import preflight
        from shardline.cli.common import prepare
        from shardline.cli.output import fail, out
        from shardline.core.config import StoreSettings
        from shardline.core.errors import ConfigError, ShardlineError
        from shardline.core.settings import DeployEnv, read_env
        from shardline.infra.deploy import DeploySpec
        from shardline.infra.deploy import deploy as run_deploy

        prepare()
        try:
            preflight.config(config)
            api = os.environ.get("PREFECT_API_URL")
            if not api:
                raise ConfigError("PREFECT_API_URL is not set and no stack is up; start one "
                                  "with `shardline up` or point PREFECT_API_URL at your server")
            preflight.prefect()
            pools = read_env(DeployEnv)
            names = run_deploy(DeploySpec(Path(config), api, work_pool or pools.work_pool,
                                          train_pool or pools.train_pool, cron, debounce,
                                          pending_timeout or pools.pending_timeout_s),
                               StoreSettings.from_env())
        except ShardlineError as exc:
            fail(exc, False)
        out.print(f"deployed {', '.join(names)} to {api}", soft_wrap=True, markup=False)
