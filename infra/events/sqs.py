"""Consume S3 bucket notifications from an SQS queue and post them as Prefect events.

Each cycle long-polls up to 10 messages, turns every ``ObjectCreated:*`` record into an
``s3.object.created`` event, posts all of them in one request and deletes exactly the
messages whose events were accepted. A failed post deletes nothing: the messages come back
after their visibility timeout (at-least-once; the event id is deterministic, so a repeat
is recognisable). Test events and records of other kinds are deleted without an event.
A message that is not a bucket notification is logged and left on the queue, where a
redrive policy moves it to a dead-letter queue (``shardline up`` creates one).

Run as a service with ``python -m infra.events.sqs --queue-url URL`` (the embedded stack
does), or through ``shardline watch --sqs URL``. The SQS endpoint is the queue URL's host,
so the same code reaches AWS and the moto server.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from shardline.core.errors import ShardlineError
from shardline.infra.events.model import EventPostError, EventSink, ObjectCreated, pending_store
from shardline.infra.events.notifications import NotificationError, parse_notification
from shardline.infra.events.stopping import Interrupted, Stopper

log = logging.getLogger(__name__)
PERMANENT_CODES = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist",
                             "AccessDenied", "InvalidClientTokenId", "SignatureDoesNotMatch"})


@dataclass
class ConsumerStats:
    """What a consumer did; ``event_ids`` lists every accepted event, repeats included."""

    receives: int = 0
    messages: int = 0
    events: int = 0
    event_ids: list[str] = field(default_factory=list)
    skipped: int = 0
    undecodable: int = 0
    failed_posts: int = 0


def sqs_client(queue_url: str, region: str | None = None, access_key: str | None = None,
               secret_key: str | None = None) -> Any:
    """A boto3 SQS client whose endpoint is the queue URL's scheme and host (credentials:
    the arguments, else boto3's usual chain: AWS_* variables, profile, instance role)."""
    parts = urlsplit(queue_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.count("/") < 2:
        raise ShardlineError(f"SQS queue URL must look like https://sqs.REGION.amazonaws.com/"
                             f"ACCOUNT/NAME, got {queue_url!r}")
    region = region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return boto3.session.Session().client(
        "sqs", endpoint_url=f"{parts.scheme}://{parts.netloc}", region_name=region,
        aws_access_key_id=access_key, aws_secret_access_key=secret_key)


def check_queue(client: Any, queue_url: str) -> None:
    """Raises ShardlineError naming the queue when it cannot be read."""
    try:
        client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    except (ClientError, BotoCoreError) as exc:
        raise ShardlineError(f"cannot read SQS queue {queue_url}: {exc}; check the URL, the "
                             "credentials (AWS_* variables) and that the queue exists") from exc


def _permanent(exc: Exception) -> bool:
    """Errors that retrying cannot fix: no credentials, no such queue, access denied."""
    if isinstance(exc, NoCredentialsError):
        return True
    code = exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""
    return code in PERMANENT_CODES


def _decode(msg: dict[str, Any]) -> list[ObjectCreated] | None:
    """The uploads a message reports, or None when it is no bucket notification."""
    where = f"SQS message {msg.get('MessageId')}"
    try:
        return parse_notification(json.loads(msg.get("Body") or ""), where)
    except ValueError as exc:
        log.error("%s is not JSON (%s); left on the queue for its dead-letter queue", where, exc)
    except NotificationError as exc:
        log.error("%s; left on the queue for its dead-letter queue", exc)
    return None


def _delete(client: Any, queue_url: str, msgs: list[dict[str, Any]]) -> None:
    if not msgs:
        return
    entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)]
    try:
        failed = client.delete_message_batch(QueueUrl=queue_url, Entries=entries).get("Failed")
    except (ClientError, BotoCoreError) as exc:
        failed = [{"Message": str(exc)}]
    if failed:
        log.warning("deleting handled messages from %s failed (%s); they will be delivered "
                    "again and their events repeated", queue_url, failed[:3])


def handle_messages(client: Any, queue_url: str, msgs: Sequence[dict[str, Any]],
                    sink: EventSink, stats: ConsumerStats) -> bool:
    """Post the events of ``msgs``, delete what is done; False when the post failed."""
    done: list[dict[str, Any]] = []
    pending: list[tuple[dict[str, Any], list[ObjectCreated]]] = []
    for msg in msgs:
        events = _decode(msg)
        if events is None:
            stats.undecodable += 1
        elif not events:
            stats.skipped += 1
            done.append(msg)
        else:
            pending.append((msg, events))
    events = [e for _, evs in pending for e in evs]
    ok = True
    if events:
        try:
            sink.post(events)
        except EventPostError as exc:
            ok = False
            stats.failed_posts += 1
            log.error("%s; %d message(s) left on the queue for redelivery", exc, len(pending))
        else:
            done.extend(m for m, _ in pending)
            stats.events += len(events)
            stats.event_ids.extend(str(e.event_id) for e in events)
    _delete(client, queue_url, done)
    return ok


def run_consumer(client: Any, queue_url: str, sink: EventSink, *, stopper: Stopper | None = None,
                 max_events: int | None = None, once: bool = False, wait_s: int = 20,
                 visibility_s: int = 60) -> ConsumerStats:
    """Consume until stopped, ``once`` a single receive, or ``max_events`` were accepted.

    Receive errors and failed posts are logged and retried with a growing pause (up to 30 s).
    """
    stopper = stopper or Stopper()
    stats = ConsumerStats()
    pause = 0.0
    while not stopper.stopped:
        if pause:
            stopper.event.wait(pause)
        try:
            with stopper.interruptible():
                resp = client.receive_message(
                    QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_s,
                    VisibilityTimeout=visibility_s)
        except Interrupted:
            break
        except (ClientError, BotoCoreError) as exc:
            if _permanent(exc):
                raise ShardlineError(f"receiving from SQS queue {queue_url} failed: {exc}; "
                                     "check the queue URL and the credentials") from exc
            pause = min(30.0, max(1.0, pause * 2))
            log.error("receiving from %s failed: %s; retrying in %.0fs", queue_url, exc, pause)
            continue
        stats.receives += 1
        msgs = resp.get("Messages", [])
        stats.messages += len(msgs)
        ok = handle_messages(client, queue_url, msgs, sink, stats)
        pause = 0.0 if ok else min(30.0, max(1.0, pause * 2))
        if once or (max_events is not None and stats.events >= max_events):
            break
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m infra.events.sqs``: the consumer as a service (env: PREFECT_API_URL,
    PREFECT_API_KEY, AWS_*)."""
    p = argparse.ArgumentParser(prog="python -m infra.events.sqs", description=__doc__)
    p.add_argument("--queue-url", required=True)
    p.add_argument("--wait", type=int, default=20, help="long-poll seconds (max 20)")
    p.add_argument("--ready-file", type=Path, help="written once the queue is reachable")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    api_url = os.environ.get("PREFECT_API_URL")
    if not api_url:
        log.error("PREFECT_API_URL is not set; export it (e.g. http://127.0.0.1:4200/api)")
        return 2
    try:
        client = sqs_client(args.queue_url)
        check_queue(client, args.queue_url)
        with EventSink(api_url, api_key=os.environ.get("PREFECT_API_KEY"),
                       pending=pending_store()) as sink, \
                Stopper().installed() as stopper:
            if args.ready_file:
                args.ready_file.write_text(str(os.getpid()))
            log.info("consuming %s -> %s/events", args.queue_url, api_url.rstrip("/"))
            stats = run_consumer(client, args.queue_url, sink, stopper=stopper,
                                 wait_s=args.wait)
    except ShardlineError as exc:
        log.error("%s", exc)
        return 1
    log.info("stopped: %d message(s), %d event(s) accepted", stats.messages, stats.events)
    return 0


if __name__ == "__main__":
    sys.exit(main())
