"""``shardline watch``: turn S3 uploads into Prefect ``s3.object.created`` events.

One of three sources (see :mod:`infra.events`): ``--sqs QUEUE_URL`` consumes bucket
notifications from SQS, ``--webhook`` receives MinIO notifications over HTTP, ``--poll
SECONDS`` lists a prefix with a durable cursor. Events go to ``PREFECT_API_URL`` (the
stack's server when one is up). Runs until Ctrl-C / SIGTERM, ``--once`` or ``--max-events``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import typer

from shardline.core.errors import ShardlineError
from shardline.infra.events.model import EventSink, pending_store
from shardline.infra.events.stopping import Stopper

SqsOpt = typer.Option(None, "--sqs", metavar="QUEUE_URL",
                      help="consume S3 bucket notifications from this SQS queue")
WebhookOpt = typer.Option(False, "--webhook", help="receive MinIO bucket notifications "
                          "over HTTP (Authorization: Bearer <token>)")
PollOpt = typer.Option(None, "--poll", metavar="SECONDS", min=0.1,
                       help="list --prefix every SECONDS, with a durable cursor")
PrefixOpt = typer.Option("incoming/", "--prefix", help="poll: key prefix to watch")
CursorOpt = typer.Option(None, "--cursor", help="poll: cursor file (default: "
                         "<home>/events/poll-<bucket>-<prefix hash>.json)")
SkipOpt = typer.Option(False, "--skip-existing", help="poll: first run: remember the "
                       "objects already there without emitting them")
BucketOpt = typer.Option(None, "--bucket", help="poll: bucket (default SHARDLINE_BUCKET)")
HostOpt = typer.Option("127.0.0.1", "--host", help="webhook: address to listen on")
PortOpt = typer.Option(9320, "--port", help="webhook: port (0 = any free port)")
TokenEnvOpt = typer.Option("SHARDLINE_WEBHOOK_TOKEN", "--token-env", metavar="NAME",
                           help="webhook: environment variable holding the shared token")
MaxBytesOpt = typer.Option(256 * 1024, "--max-bytes", help="webhook: largest body accepted")
WaitOpt = typer.Option(20, "--wait", min=0, max=20, help="sqs: long-poll seconds")
MaxEventsOpt = typer.Option(None, "--max-events", min=1, help="stop after N accepted events")
OnceOpt = typer.Option(False, "--once", help="sqs, poll: one receive / one poll, then stop")
ApiOpt = typer.Option(None, "--api-url", help="Prefect API (default PREFECT_API_URL)")
HomeOpt = typer.Option(None, "--home", help="stack folder for the poll cursor "
                       "(env SHARDLINE_HOME, default ./.shardline)")
JsonOpt = typer.Option(False, "--json", help="print a JSON summary on stdout at the end")


def _sink(api_url: str | None) -> EventSink:
    url = api_url or os.environ.get("PREFECT_API_URL")
    if not url:
        raise ShardlineError("no Prefect server to post events to: PREFECT_API_URL is not set "
                             "and no stack is up; run `shardline up`, or pass --api-url / "
                             "export PREFECT_API_URL=http://HOST:4200/api")
    return EventSink(url, api_key=os.environ.get("PREFECT_API_KEY"), pending=pending_store())


def _watch_sqs(queue_url: str, sink: EventSink, stopper: Stopper, wait_s: int,
               max_events: int | None, once: bool) -> dict[str, Any]:
    from shardline.infra.events import sqs

    client = sqs.sqs_client(queue_url)
    sqs.check_queue(client, queue_url)
    logging.getLogger(__name__).info("consuming %s -> %s", queue_url, sink.url)
    stats = sqs.run_consumer(client, queue_url, sink, stopper=stopper, wait_s=wait_s,
                             max_events=max_events, once=once)
    return {"source": "sqs", "queue_url": queue_url, **dataclasses.asdict(stats)}


def _watch_webhook(sink: EventSink, stopper: Stopper, host: str, port: int, token_env: str,
                   max_bytes: int, max_events: int | None) -> dict[str, Any]:
    from shardline.infra.events.webhook import WebhookReceiver, WebhookSettings

    token = os.environ.get(token_env, "")
    if not token:
        raise ShardlineError(f"the webhook token variable {token_env} is not set; export "
                             f"{token_env}=<secret> (and give MinIO the same auth_token)")
    settings = WebhookSettings(token=token, host=host, port=port, max_bytes=max_bytes)
    receiver = WebhookReceiver(settings, sink, stopper=stopper, max_events=max_events)
    stats = receiver.serve()
    return {"source": "webhook", "url": f"http://{host}:{receiver.port}/",
            **dataclasses.asdict(stats)}


def _watch_poll(sink: EventSink, stopper: Stopper, interval_s: float, prefix: str,
                bucket: str | None, cursor: Path | None, home: Path | None,
                skip_existing: bool, max_events: int | None, once: bool) -> dict[str, Any]:
    from shardline.core.config import StoreSettings
    from shardline.core.store import ObjectStore
    from shardline.infra.events.poll import default_cursor_path, run_poller
    from shardline.infra.stack_state import resolve_home

    settings = StoreSettings.from_env()
    if bucket:
        settings = dataclasses.replace(settings, bucket=bucket)
    store = ObjectStore(settings)
    sink.pending = store          # the polled bucket's uploads are the pending keys
    path = cursor or default_cursor_path(resolve_home(home), store.bucket, prefix)
    logging.getLogger(__name__).info("polling s3://%s/%s every %ss (cursor %s) -> %s",
                                     store.bucket, prefix, interval_s, path, sink.url)
    stats = run_poller(store, sink, path, prefix, interval_s, stopper=stopper,
                       max_events=max_events, max_polls=1 if once else None,
                       skip_existing=skip_existing)
    return {"source": "poll", "bucket": store.bucket, "prefix": prefix, "cursor": str(path),
            **dataclasses.asdict(stats)}


def watch(sqs: str | None = SqsOpt, webhook: bool = WebhookOpt, poll: float | None = PollOpt,
          prefix: str = PrefixOpt, cursor: Path | None = CursorOpt,
          skip_existing: bool = SkipOpt, bucket: str | None = BucketOpt, host: str = HostOpt,
          port: int = PortOpt, token_env: str = TokenEnvOpt, max_bytes: int = MaxBytesOpt,
          wait: int = WaitOpt, max_events: int | None = MaxEventsOpt, once: bool = OnceOpt,
          api_url: str | None = ApiOpt, home: Path | None = HomeOpt,
          as_json: bool = JsonOpt) -> None:
    """Post an s3.object.created event to Prefect for every upload (one source at a time)."""
    from shardline.cli.common import prepare
    from shardline.cli.output import err, fail

    chosen = [name for name, on in (("--sqs", sqs), ("--webhook", webhook),
                                     ("--poll", poll is not None)) if on]
    if len(chosen) != 1:
        fail(ShardlineError(f"choose exactly one source of --sqs QUEUE_URL, --webhook, --poll "
                            f"SECONDS; got {chosen or 'none'}"), as_json)
    if once and webhook:
        fail(ShardlineError("--once applies to --sqs and --poll; use --max-events N with "
                            "--webhook"), as_json)
    prepare()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    try:
        with _sink(api_url) as sink, Stopper().installed() as stopper:
            if sqs:
                summary = _watch_sqs(sqs, sink, stopper, wait, max_events, once)
            elif webhook:
                summary = _watch_webhook(sink, stopper, host, port, token_env, max_bytes,
                                         max_events)
            else:
                summary = _watch_poll(sink, stopper, float(poll or 0), prefix, bucket, cursor,
                                      home, skip_existing, max_events, once)
    except ShardlineError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps(summary))
    else:
        err.print(f"stopped: {summary['events']} event(s) accepted")


def register(app: typer.Typer) -> None:
    """Add the `watch` command to ``app``."""
    app.command("watch")(watch)
