"""The embedded stack's event bridge: bucket notifications -> SQS (moto) -> consumer.

moto serves SQS on the S3 endpoint. On every ``shardline up`` (moto keeps nothing across a
restart, and the bucket snapshot keeps only objects):

1. :func:`launch` (once S3 and Prefect answer) creates the queue ``shardline-s3-events``
   and its dead-letter queue, then starts ``python -m infra.events.sqs`` with the stack's
   environment; it is ready once it has read the queue. Its Service ``url`` is the queue
   URL, so ``shardline status --json`` shows it.
2. :func:`configure` (after the snapshot is restored, so restored objects raise no events)
   makes the bucket notify the queue of ``s3:ObjectCreated:*`` under ``incoming/``.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from shardline.core.errors import ShardlineError
from shardline.infra import procs, services
from shardline.infra.stack_state import ACCESS_KEY, REGION, SECRET_KEY, StackConfig, StackState

log = logging.getLogger(__name__)

NAME = "events"
QUEUE = "shardline-s3-events"
DEAD_LETTERS = "shardline-s3-events-dlq"
NOTIFY_PREFIX = "incoming/"  # DESIGN: uploads land under incoming/<source>/
MAX_RECEIVES = 5  # deliveries before an undecodable message moves to the dead-letter queue


def ready_file(home: Path) -> Path:
    """Written by the consumer once it has read the queue (its readiness check)."""
    return home / NAME / "consumer.ready"


def _endpoint(cfg: StackConfig) -> str:
    return f"http://127.0.0.1:{cfg.ports['s3']}"


def _client(service: str, cfg: StackConfig) -> Any:
    return boto3.session.Session().client(
        service, endpoint_url=_endpoint(cfg), aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY, region_name=REGION)


def ensure_queue(sqs: Any) -> str:
    """Create (or find) the queue and its dead-letter queue; returns the queue URL."""
    dlq = sqs.create_queue(QueueName=DEAD_LETTERS)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])
    redrive = {"deadLetterTargetArn": dlq_arn["Attributes"]["QueueArn"],
               "maxReceiveCount": str(MAX_RECEIVES)}
    return str(sqs.create_queue(QueueName=QUEUE, Attributes={
        "RedrivePolicy": json.dumps(redrive)})["QueueUrl"])


def consumer_env(cfg: StackConfig) -> dict[str, str]:
    """The consumer's environment: the stack's endpoints and keys, none of the caller's
    AWS_* settings (profiles, session tokens) or Prefect Cloud key."""
    env = services.base_env()
    env.update(
        SHARDLINE_S3_ENDPOINT_URL=_endpoint(cfg), SHARDLINE_BUCKET=cfg.bucket,
        AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
        AWS_DEFAULT_REGION=REGION,
        PREFECT_API_URL=f"http://127.0.0.1:{cfg.ports['prefect']}/api",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    return env


def launch(cfg: StackConfig) -> services.Launch:
    """Create the queue and start the consumer (S3 and Prefect already answer).

    Raises:
        ShardlineError: the queue cannot be created on the stack's S3 endpoint.
    """
    try:
        queue_url = ensure_queue(_client("sqs", cfg))
    except (ClientError, BotoCoreError) as exc:
        raise ShardlineError(f"creating SQS queue {QUEUE} on {_endpoint(cfg)} failed: {exc}; "
                             "see the S3 server log in " + str(cfg.log_dir)) from exc
    ready = ready_file(cfg.home)
    ready.parent.mkdir(parents=True, exist_ok=True)
    ready.unlink(missing_ok=True)
    log_path = cfg.log_dir / "events.log"
    cmd = [sys.executable, "-m", "shardline.infra.events.sqs", "--queue-url", queue_url,
           "--ready-file", str(ready)]
    proc = procs.start(cmd, log_path, env=consumer_env(cfg), cwd=cfg.home)
    svc = services.Service(NAME, proc.pid, None, queue_url, str(log_path),
                           started_ticks=procs.start_ticks(proc.pid))
    return services.Launch(svc, proc, ready.exists)


def configure(cfg: StackConfig, state: StackState) -> None:
    """Make ``cfg.bucket`` notify the queue of uploads under :data:`NOTIFY_PREFIX`.

    Raises:
        ShardlineError: naming the bucket and queue when S3 refuses the configuration.
    """
    queue_url = state.services[NAME].url
    try:
        sqs, s3 = _client("sqs", cfg), _client("s3", cfg)
        arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
        s3.put_bucket_notification_configuration(
            Bucket=cfg.bucket, NotificationConfiguration={"QueueConfigurations": [{
                "Id": "shardline-uploads", "QueueArn": arn["Attributes"]["QueueArn"],
                "Events": ["s3:ObjectCreated:*"],
                "Filter": {"Key": {"FilterRules": [
                    {"Name": "prefix", "Value": NOTIFY_PREFIX}]}}}]})
    except (ClientError, BotoCoreError) as exc:
        raise ShardlineError(f"configuring notifications of bucket {cfg.bucket} to "
                             f"{queue_url} failed: {exc}") from exc
    log.info("s3://%s/%s* uploads -> %s", cfg.bucket, NOTIFY_PREFIX, queue_url)
