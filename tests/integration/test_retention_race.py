"""Expire and vacuum racing a publisher on moto (two threads): every version is published
exactly once and is either kept (and sound: every object it references present, digests as
recorded) or recorded as expired; what was garbage before the race is gone.

The files of the race are judged by the store's clock as a vacuum a window after the setup
would see them: ``now`` = (store time when the setup ended) + window, so the setup's objects
are old and everything the publisher writes during the race is young, as it is for a real
publish that takes less than the window."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import numpy as np

from shardline.core import layout
from shardline.core.latest import latest_version
from shardline.core.manifest import read_manifest
from shardline.core.retention import read_expired
from shardline.core.store import ObjectStore
from shardline.tasks.expire import expire
from shardline.tasks.lease import store_now
from shardline.tasks.vacuum import kept_versions, vacuum
from shardline.tasks.verify import verify
from tests.integration.compact_data import ROWS, publish_small
from tests.integration.trainer_data import digits_config, publish_version

RACED = 4              # versions the publisher adds during the race


def test_expire_and_vacuum_racing_a_publisher_lose_nothing(store: ObjectStore) -> None:
    ds = digits_config().dataset
    publish_small(store, ds, batches=3)
    orphan = layout.shard_key(ds.prefix, "crashed", None, 0, "deadrun")
    store.put_bytes(orphan, b"a crashed run's copy")
    time.sleep(1.1)                  # the setup is strictly before setup_end
    setup_end = store_now(store, ds.prefix)
    time.sleep(1.1)                  # LastModified has one-second steps: the race is after
    now = setup_end + timedelta(minutes=ds.sweep_after_minutes)
    done = threading.Event()
    errors: list[BaseException] = []
    rounds = [0]

    def publisher() -> None:
        try:
            for i in range(3, 3 + RACED):
                publish_version(store, ds, np.arange(i * ROWS, (i + 1) * ROWS))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            done.set()

    def cleaner() -> None:
        try:
            while not done.is_set() or rounds[0] < 2:
                expire(store, ds, keep=1)
                vacuum(store, ds, now=now)
                rounds[0] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=publisher), threading.Thread(target=cleaner)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert rounds[0] >= 2

    total = 3 + RACED
    assert latest_version(store, ds.prefix) == total
    kept = kept_versions(store, ds.prefix)
    expired = set(read_expired(store, ds.prefix).versions)
    assert set(kept) | expired == set(range(1, total + 1)) and not set(kept) & expired
    assert total in kept
    for v in kept:
        assert verify(store, ds, v).sound, v
    assert read_manifest(store, ds.prefix, total).rows == total * ROWS
    assert store.head(orphan) is None
