"""The ``s3.object.created`` event and how it reaches Prefect.

An event is built from (bucket, key, size, ETag) alone, whichever source saw the upload, so
the three bridges emit the same document::

    {"id": uuid5(bucket/key/etag), "occurred": <when the bridge saw it>,
     "event": "s3.object.created",
     "resource": {"prefect.resource.id": "s3://bucket/key", "prefect.resource.name": key,
                  "s3.bucket": bucket},
     "payload": {"bucket": ..., "key": ..., "size": ..., "etag": ...}}

The ``s3.bucket`` label is what the upload trigger's debounce buckets on (``for_each``:
all uploads under one dataset's prefix share one window; prefect.yaml).

``occurred`` is the time of detection, not the upload's Last-Modified: Prefect evaluates
triggers and retention on ``occurred``, and an object found by a first poll of an old bucket
must still start its deployment. Everything else is a function of the object version.

:class:`EventSink` posts batches with bounded retries (connection errors, 408/429/5xx) and
no Prefect client: ``POST {api}/events`` with a JSON list answers 204. A 4xx other than
408/429 means the events themselves were refused and is not retried.

With a ``pending`` store, the sink first records each upload of that store's bucket as a
pending key (``events/pending/<key>/<ETag>``, ``core.layout.pending_key``) and only then
posts its event: the ingest the event triggers reads exactly those keys instead of listing
``incoming/`` (``tasks.pending``). A failed record fails the post like a refused event, so
the bridge delivers it again (SQS keeps the message, the webhook answers 502, the poller
keeps its cursor): nothing is lost, and a lost event is found by the next reconciling run.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from shardline.core import layout
from shardline.core.errors import ShardlineError, StoreError
from shardline.core.store_api import Store

log = logging.getLogger(__name__)

EVENT_NAME = "s3.object.created"
# Fixed namespace: event ids must not change between releases, or duplicates look new.
EVENT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://shardline.dev/events/s3.object.created")
RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class EventPostError(ShardlineError):
    """The events API did not accept a batch; ``accepted`` events before it were accepted."""

    def __init__(self, message: str, accepted: int = 0) -> None:
        super().__init__(message)
        self.accepted = accepted


def normalize_etag(etag: str) -> str:
    """S3 returns ETags quoted in listings and bare in notifications; events carry them bare."""
    return etag.strip().strip('"').lower()


def is_upload(key: str) -> bool:
    """Folder markers ("a/b/", zero bytes, made by consoles) are not uploads of data."""
    return bool(key) and not key.endswith("/")


@dataclass(frozen=True)
class ObjectCreated:
    """One object version that appeared in a bucket."""

    bucket: str
    key: str
    size: int
    etag: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "etag", normalize_etag(self.etag))

    @property
    def resource_id(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @property
    def event_id(self) -> uuid.UUID:
        """Deterministic: the same object version always gets the same id."""
        return uuid.uuid5(EVENT_NAMESPACE, f"{self.bucket}/{self.key}/{self.etag}")

    def to_event(self, occurred: datetime | None = None) -> dict[str, Any]:
        """The JSON document the events API takes."""
        when = occurred or datetime.now(UTC)
        return {
            "id": str(self.event_id),
            "occurred": when.isoformat(),
            "event": EVENT_NAME,
            "resource": {"prefect.resource.id": self.resource_id,
                         "prefect.resource.name": self.key, "s3.bucket": self.bucket},
            "payload": {"bucket": self.bucket, "key": self.key, "size": self.size,
                        "etag": self.etag},
        }


def pending_store() -> Store | None:
    """The store the bridges record pending upload keys in (``SHARDLINE_BUCKET``,
    ``SHARDLINE_S3_ENDPOINT_URL``, ``AWS_*``); None, with a warning, when it is not set."""
    from shardline.core.config import StoreSettings
    from shardline.core.errors import ConfigError
    from shardline.core.store import ObjectStore

    try:
        return ObjectStore(StoreSettings.from_env())
    except ConfigError as exc:
        log.warning("upload keys are not recorded as pending (%s): triggered ingests will "
                    "list incoming/ instead", exc)
        return None


class EventSink:
    """Posts events to ``{api_url}/events`` with bounded retries.

    Args:
        api_url: the Prefect API, e.g. ``http://127.0.0.1:4200/api``.
        api_key: sent as ``Authorization: Bearer`` (Prefect Cloud, or a proxy in front).
        attempts: tries per batch (1 = no retry); waits ``backoff_s * 2**n`` between tries.
        batch_size: events per request.
        pending: where uploads of its bucket are recorded as pending keys before their
            events are posted (None: not recorded; the triggered ingest then reconciles).
    """

    def __init__(self, api_url: str, *, api_key: str | None = None, attempts: int = 4,
                 backoff_s: float = 0.5, timeout_s: float = 60.0, batch_size: int = 200,
                 pending: Store | None = None) -> None:
        self.pending = pending
        if not api_url.startswith(("http://", "https://")):
            raise ShardlineError(f"Prefect API URL must start with http:// or https://, got "
                                 f"{api_url!r}; set PREFECT_API_URL (e.g. "
                                 "http://127.0.0.1:4200/api)")
        self.url = api_url.rstrip("/") + "/events"
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.batch_size = max(1, batch_size)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers)

    def __enter__(self) -> EventSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def post(self, events: Sequence[ObjectCreated]) -> None:
        """Post ``events`` (in batches); returns once the API accepted all of them.

        Raises:
            EventPostError: a batch was refused or the API stayed unreachable; its
                ``accepted`` counts the events of earlier batches, which were accepted.
        """
        now = datetime.now(UTC)
        for start in range(0, len(events), self.batch_size):
            chunk = events[start:start + self.batch_size]
            try:
                self.record_pending(chunk)
                self._post_batch([e.to_event(now) for e in chunk])
            except EventPostError as exc:
                raise EventPostError(str(exc), accepted=start) from exc
        if events:
            log.info("accepted %d event(s): %s", len(events),
                     ", ".join(e.resource_id for e in events[:5])
                     + (" ..." if len(events) > 5 else ""))

    def record_pending(self, events: Sequence[ObjectCreated]) -> None:
        """Write the pending-key marker of each upload to the ``pending`` store's bucket.

        Raises:
            EventPostError: a marker could not be written (the events are not posted).
        """
        store = self.pending
        if store is None:
            return
        mine = [e for e in events if e.bucket == store.bucket and is_upload(e.key)
                and not e.key.startswith(layout.PENDING_ROOT)]

        def put(e: ObjectCreated) -> None:
            body = json.dumps({"bucket": e.bucket, "key": e.key, "etag": e.etag,
                               "size": e.size}).encode()
            store.put_bytes(layout.pending_key(e.key, e.etag), body,
                            content_type="application/json")
        try:
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(put, mine))
        except StoreError as exc:
            raise EventPostError(f"recording the pending upload keys in s3://{store.bucket}/"
                                 f"{layout.PENDING_ROOT} failed ({exc}); the events were not "
                                 "posted and will be sent again") from exc

    def _post_batch(self, docs: list[dict[str, Any]]) -> None:
        problem = ""
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                r = self._client.post(self.url, json=docs)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                log.warning("POST %s failed (try %d/%d): %s", self.url, attempt + 1,
                            self.attempts, problem)
                continue
            if r.status_code in (200, 202, 204):
                return
            problem = f"HTTP {r.status_code}: {r.text[:300]}"
            if r.status_code not in RETRY_STATUS:
                raise EventPostError(f"the events API at {self.url} refused {len(docs)} "
                                     f"event(s) with {problem}; check the event documents "
                                     "and the API key")
            log.warning("POST %s answered %s (try %d/%d)", self.url, r.status_code,
                        attempt + 1, self.attempts)
        raise EventPostError(f"the events API at {self.url} did not accept {len(docs)} "
                             f"event(s) after {self.attempts} tries ({problem}); is the "
                             "Prefect server up there (check PREFECT_API_URL)?")
