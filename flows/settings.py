"""Where flow runs get object-store and Spark settings, secrets included.

Deployments name a prefect-aws ``AwsCredentials`` block in ``SHARDLINE_AWS_CREDENTIALS_BLOCK``
(its secret fields stay hidden in the UI and logs, and never travel as flow parameters or
artifacts); the endpoint and bucket still come from the environment. Without a block name
(the CLI, tests), or when the named block does not exist (prefect.yaml deployed by hand
on a server where `shardline deploy` never saved it: a warning in the run's log), the
standard environment variables are used (or the machine's IAM role).

The Spark Connect endpoint's token (Databricks and other managed endpoints) comes from the
Prefect ``Secret`` block named in ``SHARDLINE_SPARK_TOKEN_BLOCK`` (``shardline deploy``
saves ``SHARDLINE_SPARK_TOKEN`` of its environment as the block ``shardline-spark-token``
and names it in the deployments), else from ``SHARDLINE_SPARK_TOKEN`` in the environment.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
from typing import Any

from shardline.core.config import SparkSettings, StoreSettings
from shardline.core.errors import ConfigError

BLOCK_ENV = "SHARDLINE_AWS_CREDENTIALS_BLOCK"
SPARK_TOKEN_BLOCK_ENV = "SHARDLINE_SPARK_TOKEN_BLOCK"


def _named_block(env: str, module: str, kind: str, fix: str) -> Any:
    """The block ``module.kind`` named in ``env`` (None: unset); ConfigError if missing."""
    name = os.environ.get(env, "").strip()
    if not name:
        return None
    cls = getattr(importlib.import_module(module), kind)
    try:
        block = cls.load(name)
    except ValueError as exc:
        raise ConfigError(f"{kind} block {name!r} (from {env}) was not found; {fix}") from exc
    if not isinstance(block, cls):   # a coroutine: only when called from async code
        raise TypeError(f"{kind}.load({name!r}) returned {type(block).__name__}")
    return block


def spark_settings() -> SparkSettings:
    """:class:`SparkSettings` from the environment, the token from the Secret block named in
    ``SHARDLINE_SPARK_TOKEN_BLOCK`` when there is one.

    Raises:
        ConfigError: the named block does not exist.
    """
    base = SparkSettings.from_env()
    block = _named_block(SPARK_TOKEN_BLOCK_ENV, "prefect.blocks.system", "Secret",
                         "create it with `shardline deploy` (SHARDLINE_SPARK_TOKEN set) or "
                         "in the Prefect UI")
    return base if block is None else dataclasses.replace(base, token=str(block.get()))


def store_settings() -> StoreSettings:
    base = StoreSettings.from_env()
    try:
        creds = _named_block(BLOCK_ENV, "prefect_aws", "AwsCredentials", "using the "
                             "environment's S3 credentials (`shardline deploy` saves it)")
    except ConfigError as exc:
        # prefect.yaml as written names shardline-s3; on a server where no `shardline
        # deploy` saved it, the environment's keys (or the machine's IAM role) are the
        # credentials, as they are outside deployments
        logging.getLogger(__name__).warning("%s", exc)
        creds = None
    if creds is None:
        return base
    secret = creds.aws_secret_access_key
    endpoint = creds.aws_client_parameters.endpoint_url if creds.aws_client_parameters else None
    return dataclasses.replace(
        base,
        access_key=creds.aws_access_key_id or base.access_key,
        secret_key=secret.get_secret_value() if secret is not None else base.secret_key,
        region=creds.region_name or base.region,
        endpoint_url=endpoint or base.endpoint_url,
    )
