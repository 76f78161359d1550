"""Which versions of a dataset were expired (``shardline expire``), and what a reader of one
is told.

Expiry is recorded like a commit, Delta-style: ``retention/expired.json`` maps each expired
version number to the store time it was expired, and is only ever replaced with a
conditional write (created with ``If-None-Match: *``, then ``If-Match: <ETag it was read
with>``), so two expiries never lose each other's entries. It never touches
``versions/v<N>.json`` of a version it does not expire nor the latest-version hint beyond
moving it forward, so a publish racing an expiry commits exactly as it would alone.

The record is read only when a version document is missing (``core.manifest``): reading a
kept version costs what it did before. An expired version's document moves to
``retention/v<N>.json`` and stays there one sweep window, so ``shardline vacuum`` keeps
what it referenced for readers that opened it before the expiry.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from shardline.core import layout
from shardline.core.errors import ObjectChanged, ObjectExists, PermanentStoreError, StoreError
from shardline.core.store import Store

RECORD_TRIES = 10


class VersionExpired(PermanentStoreError):
    """The version asked for was removed by ``shardline expire``."""


@dataclass(frozen=True)
class ExpiredRecord:
    """``retention/expired.json``: version -> store time (ISO) it was expired."""

    versions: dict[int, str] = field(default_factory=dict)
    etag: str | None = None          # None: no record yet

    def __contains__(self, version: object) -> bool:
        return version in self.versions


def read_expired(store: Store, prefix: str) -> ExpiredRecord:
    """The expiry record (empty when nothing was ever expired)."""
    key = layout.expired_record_key(prefix)
    info = store.head(key)
    if info is None:
        return ExpiredRecord()
    try:
        raw = json.loads(store.get_bytes(key, if_match=info.etag))
        versions = {int(v): str(at) for v, at in raw["versions"].items()}
    except ObjectChanged:
        return read_expired(store, prefix)         # another expiry replaced it meanwhile
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PermanentStoreError(
            f"{store.uri(key)} is not an expiry record ({exc}); restore it from a backup "
            "(or the bucket's object versions): it is how readers tell an expired version "
            "from a lost one") from exc
    return ExpiredRecord(versions, info.etag)


def record_expired(store: Store, prefix: str, versions: Iterable[int],
                   at: datetime) -> ExpiredRecord:
    """Add ``versions`` (expired at store time ``at``) to the record, by compare-and-swap;
    versions already recorded keep their first time. Returns the record written."""
    new = set(versions)
    key = layout.expired_record_key(prefix)
    for _ in range(RECORD_TRIES):
        rec = read_expired(store, prefix)
        merged = {**{v: at.isoformat() for v in new}, **rec.versions}
        body = json.dumps({"format": 1, "kind": "expired_versions",
                           "versions": {str(v): merged[v] for v in sorted(merged)}},
                          sort_keys=True).encode()
        try:
            if rec.etag is None:
                etag = store.put_bytes(key, body, if_none_match=True,
                                       content_type="application/json")
            else:
                etag = store.put_bytes(key, body, if_match=rec.etag,
                                       content_type="application/json")
            return ExpiredRecord(merged, etag)
        except (ObjectExists, ObjectChanged):
            continue              # another expiry wrote it first: merge with theirs
    raise StoreError(f"could not record expired versions in {store.uri(key)} after "
                     f"{RECORD_TRIES} races with other expiries; run expire again")


def oldest_kept(record: ExpiredRecord, latest: int) -> int:
    """The lowest version up to ``latest`` that was not expired (the latest never is)."""
    return next(v for v in range(1, latest + 1) if v not in record or v == latest)


def expired_error(store: Store, prefix: str, version: int, record: ExpiredRecord,
                  latest: int) -> VersionExpired:
    """The one line a reader of expired version ``version`` gets."""
    return VersionExpired(
        f"dataset version {version} under s3://{store.bucket}/{prefix}/ was expired at "
        f"{record.versions[version]} (`shardline expire`); the oldest kept version is "
        f"{oldest_kept(record, latest)} and the latest {latest}: read one of those")


# -- what a running training holds ----------------------------------------------------------
def hold(store: Store, prefix: str, run: str, version: int) -> None:
    """Take or refresh training run ``run``'s lease on dataset version ``version``
    (``leases/train-<run>``; its ``LastModified`` is the heartbeat): ``shardline expire``
    keeps that version while the lease is younger than the sweep window."""
    store.put_bytes(layout.training_lease_key(prefix, run),
                    json.dumps({"version": version}).encode(), content_type="application/json")


def release(store: Store, prefix: str, run: str) -> None:
    """Drop training run ``run``'s lease (the run ended)."""
    store.delete([layout.training_lease_key(prefix, run)])
