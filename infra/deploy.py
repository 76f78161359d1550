"""Deploy shardline's flows to a Prefect server: work pools, the AwsCredentials block, the
training concurrency limit, the automation that reschedules runs stuck in Pending
(:mod:`infra.automations`), then ``prefect --no-prompt deploy --all`` over ``prefect.yaml``.

``prefect.yaml`` holds the deployments; the values that differ per dataset and environment
(config path, bucket, incoming prefix, pools, cron, debounce window) are passed to it as
``SHARDLINE_*`` environment variables, which its ``{{ $VAR }}`` templates read.
Re-deploying updates the deployments in place (no duplicate automations).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardline.core import layout
from shardline.core.config import StoreSettings, load_config
from shardline.core.errors import ShardlineError
from shardline.core.settings import DeployEnv, read_env
from shardline.core.store import ObjectStore
from shardline.infra.automations import ensure_pending_automation
from shardline.resources import project_dir

log = logging.getLogger(__name__)

BLOCK_NAME = "shardline-s3"
DEPLOYMENTS = ("ingest/ingest-nightly", "ingest/ingest-on-upload", "train/train-on-publish")


class DeployError(ShardlineError):
    """``prefect deploy`` or a Prefect API call failed; the message carries its output."""


@dataclass(frozen=True)
class DeploySpec:
    config: Path
    api_url: str
    work_pool: str = "shardline-process"
    train_pool: str = "shardline-process"
    nightly_cron: str = "0 2 * * *"
    # the upload trigger fires at most once per this many seconds, the run due at the end
    debounce_seconds: int = 1
    # a run PENDING this long is rescheduled (infra/automations.py); None: the environment's
    # SHARDLINE_PENDING_TIMEOUT, default 600
    pending_timeout_seconds: int | None = None


def _ensure_pool(client: Any, name: str) -> None:
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    with contextlib.suppress(ObjectAlreadyExists):
        client.create_work_pool(WorkPoolCreate(name=name, type="process"))


def _ensure_limit(client: Any, name: str) -> None:
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, PrefectHTTPStatusError

    with contextlib.suppress(ObjectAlreadyExists, PrefectHTTPStatusError):  # exists (409)
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))


def save_credentials_block(store: StoreSettings) -> str:
    """Store the S3 credentials as a prefect-aws AwsCredentials block (secret fields)."""
    from prefect_aws import AwsCredentials
    from prefect_aws.client_parameters import AwsClientParameters
    from pydantic import SecretStr

    secret = SecretStr(store.secret_key) if store.secret_key is not None else None
    AwsCredentials(
        aws_access_key_id=store.access_key, aws_secret_access_key=secret,
        region_name=store.region,
        aws_client_parameters=AwsClientParameters(endpoint_url=store.endpoint_url),
    ).save(BLOCK_NAME, overwrite=True)
    return BLOCK_NAME


def upload_config(path: Path, prefix: str, store: StoreSettings) -> str:
    """Put the dataset TOML in the bucket and return its ``s3://`` URI.

    The deployments carry this URI, never the deploying machine's path: ingest and training
    may run in another container or on a Kubernetes GPU node."""
    key = layout.deployed_config_key(prefix)
    ObjectStore(store).put_bytes(key, Path(path).read_bytes())
    return f"s3://{store.bucket}/{key}"


def deploy(spec: DeploySpec, store: StoreSettings) -> list[str]:
    """Create pools, block and limit on ``spec.api_url`` and deploy every deployment."""
    cfg = load_config(spec.config)
    pending = spec.pending_timeout_seconds or read_env(DeployEnv).pending_timeout_s
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    # Explicit, not from the process settings: a caller may run inside another Prefect
    # context (a test harness, a flow) whose API is not the one being deployed to.
    with temporary_settings(updates={PREFECT_API_URL: spec.api_url}):
        with get_client(sync_client=True) as client:
            for pool in {spec.work_pool, spec.train_pool}:
                _ensure_pool(client, pool)
            _ensure_limit(client, f"train-{cfg.dataset.name}")
            ensure_pending_automation(client, pending)
        block = save_credentials_block(store)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_SECRET", "AWS_ACCESS"))}
    env.update(
        PREFECT_API_URL=spec.api_url, PREFECT_SERVER_ANALYTICS_ENABLED="false",
        SHARDLINE_CONFIG=upload_config(spec.config, cfg.dataset.prefix, store),
        SHARDLINE_DATASET=cfg.dataset.name, SHARDLINE_BUCKET=store.bucket,
        SHARDLINE_INCOMING=cfg.dataset.incoming,
        SHARDLINE_WORK_POOL=spec.work_pool, SHARDLINE_TRAIN_POOL=spec.train_pool,
        SHARDLINE_NIGHTLY_CRON=spec.nightly_cron,
        SHARDLINE_DEBOUNCE=f"PT{int(spec.debounce_seconds)}S",   # ISO 8601 duration
        SHARDLINE_AWS_CREDENTIALS_BLOCK=block,
    )
    prefect = Path(sys.executable).parent / "prefect"
    run = subprocess.run([str(prefect), "--no-prompt", "deploy", "--all"], cwd=project_dir(),
                         env=env, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise DeployError(f"`prefect deploy --all` failed (exit {run.returncode}):\n"
                          f"{(run.stdout + run.stderr)[-3000:]}")
    log.info("deployed %s to %s", ", ".join(DEPLOYMENTS), spec.api_url)
    return list(DEPLOYMENTS)
