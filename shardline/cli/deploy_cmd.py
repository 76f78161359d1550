"""``shardline deploy`` / ``undeploy``: one dataset's deployments (prefect.yaml rendered for
it) on a Prefect server, beside the other datasets'."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from shardline.core.errors import ConfigError


def api_url() -> str:
    """``PREFECT_API_URL`` (``shardline status --env`` exports the embedded stack's).

    Raises:
        ConfigError: it is not set.
    """
    api = os.environ.get("PREFECT_API_URL")
    if not api:
        raise ConfigError("PREFECT_API_URL is not set and no stack is up; start one "
                          "with `shardline up` or point PREFECT_API_URL at your server")
    return api


def register(app: typer.Typer) -> None:
    @app.command()
    def deploy(
        config: str = typer.Option(..., "--config", "-c", help="dataset TOML"),
        work_pool: str = typer.Option(None, help="pool for ingest runs (env "
                                      "SHARDLINE_WORK_POOL, default shardline-process)"),
        train_pool: str = typer.Option(None, help="pool for training runs, a GPU pool in "
                                       "production (env SHARDLINE_TRAIN_POOL, default "
                                       "shardline-train)"),
        cron: str = typer.Option("0 2 * * *", help="nightly ingest schedule (UTC)"),
        debounce: int = typer.Option(10, min=1, help="seconds without uploads after which the "
                                     "upload trigger starts one ingest run (a burst: one run); "
                                     "under 10, at most one run per window instead"),
        pending_timeout: int = typer.Option(None, min=10, help="seconds a flow run may stay "
                                            "PENDING (taken by a worker, not started) before it is "
                                            "rescheduled (env SHARDLINE_PENDING_TIMEOUT, "
                                            "default 600)"),
    ) -> None:
        """Deploy one dataset's flows: <dataset>-nightly, <dataset>-on-upload and
        <dataset>-on-publish (with pools, the AwsCredentials block and the training
        concurrency limit) to PREFECT_API_URL. Other datasets' deployments are left as
        they are; one whose upload prefix overlaps this one's is refused.

        Example: shardline deploy -c examples/digits.toml --train-pool gpu"""
        from shardline.cli import preflight
        from shardline.cli.common import prepare
        from shardline.cli.output import fail, out
        from shardline.core.config import StoreSettings
        from shardline.core.errors import ShardlineError
        from shardline.core.settings import DeployEnv, read_env
        from shardline.infra.deploy import DeploySpec
        from shardline.infra.deploy import deploy as run_deploy

        prepare()
        try:
            preflight.config(config)
            api = api_url()
            preflight.prefect()
            pools = read_env(DeployEnv)
            names = run_deploy(DeploySpec(Path(config), api, work_pool or pools.work_pool,
                                          train_pool or pools.train_pool, cron, debounce,
                                          pending_timeout or pools.pending_timeout_s),
                               StoreSettings.from_env())
        except ShardlineError as exc:
            fail(exc, False)
        out.print(f"deployed {', '.join(names)} to {api}", soft_wrap=True, markup=False)

    @app.command()
    def undeploy(config: str = typer.Option(..., "--config", "-c", help="dataset TOML")
                 ) -> None:
        """Remove one dataset's deployments, their triggers and its training concurrency
        limit from PREFECT_API_URL; its versions and models stay in the bucket.

        Example: shardline undeploy -c other.toml"""
        from shardline.cli import preflight
        from shardline.cli.common import prepare
        from shardline.cli.output import fail, out
        from shardline.core.config import load_config
        from shardline.core.errors import ShardlineError
        from shardline.infra.deployments import undeploy as run_undeploy

        prepare()
        try:
            preflight.config(config)
            name = load_config(config).dataset.name
            api = api_url()
            preflight.prefect()
            removed = run_undeploy(name, api)
        except ShardlineError as exc:
            fail(exc, False)
        if not removed:
            out.print(f"dataset {name!r} has no deployments on {api}; nothing removed",
                      soft_wrap=True, markup=False)
            return
        out.print(f"removed {', '.join(removed)} from {api}", soft_wrap=True, markup=False)
