"""S3 uploads -> Prefect ``s3.object.created`` events.

The OSS Prefect server has no webhooks, so three bridges turn an upload into the same event
and post it to the server's events API (``POST {PREFECT_API_URL}/events``):

- :mod:`infra.events.sqs`: a consumer of S3 bucket notifications delivered to an SQS queue
  (AWS, or the embedded moto server, which ``shardline up`` wires this way);
- :mod:`infra.events.webhook`: an authenticated HTTP receiver for MinIO-style bucket
  notifications (the same ``Records`` document, POSTed);
- :mod:`infra.events.poll`: a polling sensor with a durable (key, ETag) cursor, for stores
  that can notify nobody.

Every source builds :class:`infra.events.model.ObjectCreated` and posts it with
:class:`infra.events.model.EventSink`. The event id is a uuid5 of bucket, key and ETag, so the
same upload seen twice (or by two sources) carries the same id. Delivery is at-least-once:
each source acknowledges its input (deletes the message, answers 2xx, writes the cursor)
only after the events API accepted the events, and ingest is idempotent by batch id.
Before posting, the sink records each upload's key as pending in the store
(``events/pending/<key>/<ETag>``), which the upload-triggered ingest reads instead of
listing the incoming prefix (``tasks.pending``).
"""
