"""Deploy shardline's flows for one dataset to a Prefect server: work pools, the
AwsCredentials block, the training concurrency limit, the automation that reschedules runs
stuck in Pending (:mod:`infra.automations`), then ``prefect --no-prompt deploy --all`` over
``prefect.yaml`` rendered for the dataset (:mod:`infra.deploy_render`).

Deployments, their automations, tags and the ``train-<dataset>`` limit carry the dataset's
name, so deploying a second dataset leaves the first's in place; re-deploying one updates
its deployments in place (no duplicate automations). A dataset whose upload prefix overlaps
another deployed dataset's is refused (each would ingest the other's uploads).
:mod:`infra.deployments` lists and removes them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardline.core import layout
from shardline.core.config import SparkSettings, StoreSettings, load_config
from shardline.core.errors import ShardlineError
from shardline.core.settings import DeployEnv, read_env
from shardline.core.store import ObjectStore
from shardline.infra.automations import ensure_pending_automation
from shardline.infra.deploy_render import DatasetValues, full_names, overlapping, render
from shardline.resources import prefect_yaml, project_dir

log = logging.getLogger(__name__)

BLOCK_NAME = "shardline-s3"
SPARK_TOKEN_BLOCK = "shardline-spark-token"


class DeployError(ShardlineError):
    """``prefect deploy`` or a Prefect API call failed; the message carries its output."""


@dataclass(frozen=True)
class DeploySpec:
    config: Path
    api_url: str
    work_pool: str = "shardline-process"
    # a GPU pool in production (compose's train-worker, infra/k8s); the embedded stack runs
    # a process worker for it
    train_pool: str = "shardline-train"
    nightly_cron: str = "0 2 * * *"
    # the upload trigger fires once no upload came for this many seconds (a burst: one run;
    # under 10 s a reactive window instead: infra/deploy_render.py)
    debounce_seconds: int = 10
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


def save_spark_token_block() -> str | None:
    """``SHARDLINE_SPARK_TOKEN`` of this environment (or .env) saved as the Prefect Secret
    block :data:`SPARK_TOKEN_BLOCK`, whose name the deployments carry; None without one."""
    from prefect.blocks.system import Secret

    token = SparkSettings.from_env().token
    if not token:
        return None
    from pydantic import SecretStr

    Secret(value=SecretStr(token)).save(SPARK_TOKEN_BLOCK, overwrite=True)
    return SPARK_TOKEN_BLOCK


def upload_config(path: Path, prefix: str, store: StoreSettings) -> str:
    """Put the dataset TOML in the bucket and return its ``s3://`` URI.

    The deployments carry this URI, never the deploying machine's path: ingest and training
    may run in another container or on a Kubernetes GPU node."""
    key = layout.deployed_config_key(prefix)
    ObjectStore(store).put_bytes(key, Path(path).read_bytes())
    return f"s3://{store.bucket}/{key}"


def _prefect_deploy(doc: dict[str, Any], api_url: str) -> None:
    """``prefect --no-prompt deploy --all`` over ``doc`` written to a temporary file."""
    import yaml

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_SECRET", "AWS_ACCESS"))}
    env.update(PREFECT_API_URL=api_url, PREFECT_SERVER_ANALYTICS_ENABLED="false")
    prefect = Path(sys.executable).parent / "prefect"
    with tempfile.TemporaryDirectory(prefix="shardline-deploy-") as tmp:
        path = Path(tmp) / "prefect.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        run = subprocess.run([str(prefect), "--no-prompt", "deploy", "--all",
                              "--prefect-file", str(path)], cwd=project_dir(), env=env,
                             capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise DeployError(f"`prefect deploy --all` failed (exit {run.returncode}):\n"
                          f"{(run.stdout + run.stderr)[-3000:]}")


def deploy(spec: DeploySpec, store: StoreSettings) -> list[str]:
    """Create pools, block and limit on ``spec.api_url`` and deploy the dataset's
    deployments; returns their ``flow/deployment`` names.

    Raises:
        DeployError: another deployed dataset's upload prefix overlaps this one's, or
            ``prefect deploy`` failed.
    """
    import yaml

    from shardline.infra.deployments import remove_legacy, upload_prefixes

    cfg = load_config(spec.config)
    name = cfg.dataset.name
    pending = spec.pending_timeout_seconds or read_env(DeployEnv).pending_timeout_s
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    # Explicit, not from the process settings: a caller may run inside another Prefect
    # context (a test harness, a flow) whose API is not the one being deployed to.
    with temporary_settings(updates={PREFECT_API_URL: spec.api_url}):
        with get_client(sync_client=True) as client:
            clash = overlapping(store.bucket, cfg.dataset.incoming, name,
                                upload_prefixes(client))
            if clash:
                raise DeployError(
                    f"dataset {name!r} watches s3://{store.bucket}/{cfg.dataset.incoming}, "
                    f"which overlaps the upload prefix of the deployed dataset(s) "
                    f"{', '.join(clash)}: each would ingest the other's uploads; give "
                    f"{name!r} its own [dataset] incoming prefix (or `shardline undeploy` "
                    "the other)")
            for pool in {spec.work_pool, spec.train_pool}:
                _ensure_pool(client, pool)
            _ensure_limit(client, f"train-{name}")
            ensure_pending_automation(client, pending)
            for old in remove_legacy(client):
                log.warning("removed the deployment %s (one name for every dataset, from an "
                            "older shardline); %s's deployments replace it", old, name)
        block = save_credentials_block(store)
        spark_block = save_spark_token_block()
    values = DatasetValues(
        dataset=name, config=upload_config(spec.config, cfg.dataset.prefix, store),
        bucket=store.bucket, incoming=cfg.dataset.incoming, work_pool=spec.work_pool,
        train_pool=spec.train_pool, cron=spec.nightly_cron,
        debounce_s=int(spec.debounce_seconds), credentials_block=block,
        spark_token_block=spark_block)
    _prefect_deploy(render(yaml.safe_load(prefect_yaml().read_text()), values), spec.api_url)
    names = full_names(name)
    log.info("deployed %s to %s", ", ".join(names), spec.api_url)
    return names
