"""Version numbers without a ceiling, and the latest version found from a hint and a probe
(``shardline.core.latest``) on a real S3 server (moto over HTTP): past 1,000,000, with the
hint missing, behind or damaged, with a hole in the chain, and in a flat number of requests
whatever the history."""

from __future__ import annotations

import json

import pytest

from shardline.core import layout
from shardline.core.builder import build_version, commit_version
from shardline.core.counting_store import CountingStore
from shardline.core.latest import (
    VersionChainBroken,
    advance_hint,
    latest_version,
    list_versions,
    read_hint,
)
from shardline.core.manifest import (
    Manifest,
    latest_manifest,
    read_manifest,
    recent_manifests,
    resolve_version,
)
from shardline.core.parts import ValidationSummary
from shardline.core.store import ObjectStore
from tests.unit.manifest_fixtures import PREFIX, SCHEMA, new_batch


def _publish(store: ObjectStore, parent: Manifest | None, i: int) -> Manifest:
    draft = build_version(PREFIX, dataset="toy", schema=SCHEMA, config={"name": "toy"},
                          parent=parent, batch=new_batch(i),
                          validation=ValidationSummary(success=True))
    return commit_version(store, draft)


def _history(store: ObjectStore, n: int) -> Manifest:
    m = None
    for i in range(1, n + 1):
        m = _publish(store, latest_manifest(store, PREFIX), i)
    assert m is not None
    return m


def test_version_keys_have_no_ceiling_and_old_keys_still_read() -> None:
    for v in (1, 999_999, 1_000_000, 12_345_678_901):
        assert layout.version_of_key(layout.version_key(PREFIX, v)) == v
    assert layout.version_key(PREFIX, 7).endswith("/versions/v000007.json")   # as before
    assert layout.version_key(PREFIX, 1_000_000).endswith("/versions/v1000000.json")
    assert layout.version_of_key(f"{PREFIX}/versions/v0000007.json") is None  # no writer
    assert layout.version_of_key(layout.latest_pointer_key(PREFIX)) is None
    with pytest.raises(ValueError, match="start at 1"):
        layout.version_key(PREFIX, 0)


def test_publish_continues_past_version_999999(store: ObjectStore) -> None:
    v1 = _publish(store, None, 1)
    # make the history end at 999,999 (the document of v1 renumbered; readers need no more)
    doc = {**v1.to_dict(), "version": 999_999, "parent": 999_998}
    store.delete([layout.version_key(PREFIX, 1), layout.latest_pointer_key(PREFIX)])
    store.put_json(layout.version_key(PREFIX, 999_999), doc)
    assert latest_version(store, PREFIX) == 999_999            # no hint: one listing
    for i in (2, 3):
        m = _publish(store, latest_manifest(store, PREFIX), i)
    assert m.version == 1_000_001 and read_hint(store, PREFIX) == 1_000_001
    assert list_versions(store, PREFIX) == [999_999, 1_000_000, 1_000_001]
    store.delete([layout.latest_pointer_key(PREFIX)])          # listing order is not numeric
    assert latest_manifest(store, PREFIX).version == 1_000_001  # type: ignore[union-attr]
    assert read_manifest(store, PREFIX, 1_000_000).new_batch.id == new_batch(2).id  # type: ignore[union-attr]


def test_a_hint_behind_or_damaged_is_only_a_hint(store: ObjectStore) -> None:
    _history(store, 4)
    assert read_hint(store, PREFIX) == 4
    advance_hint(store, PREFIX, 2)                             # never moves backward
    assert read_hint(store, PREFIX) == 4
    store.put_json(layout.latest_pointer_key(PREFIX), {"version": 1})   # a killed publisher
    assert latest_version(store, PREFIX) == 4
    store.put_bytes(layout.latest_pointer_key(PREFIX), b"garbage")
    assert latest_version(store, PREFIX) == 4
    m = _publish(store, latest_manifest(store, PREFIX), 5)
    assert m.version == 5 and read_hint(store, PREFIX) == 5    # the next commit repairs it


def test_a_broken_chain_is_named_in_one_line(store: ObjectStore) -> None:
    _history(store, 4)
    store.delete([layout.version_key(PREFIX, 2)])
    assert latest_version(store, PREFIX) == 4                  # the latest is still whole
    with pytest.raises(VersionChainBroken) as e:
        read_manifest(store, PREFIX, 2)
    msg = str(e.value)
    assert "\n" not in msg and "v000002.json is missing" in msg and "version 4 exists" in msg
    with pytest.raises(Exception, match="version 9 does not exist.*the latest is 4"):
        resolve_version(store, PREFIX, 9)
    # a hole right after a stale hint would make the probe stop early: refused, not believed
    store.put_json(layout.latest_pointer_key(PREFIX), {"version": 1})
    with pytest.raises(VersionChainBroken, match="v000002.json is missing but version 3"):
        latest_manifest(store, PREFIX)
    # the latest document itself deleted ("undone" by hand): the hint still names it
    store.put_json(layout.latest_pointer_key(PREFIX), {"version": 4})
    store.delete([layout.version_key(PREFIX, 4)])
    with pytest.raises(VersionChainBroken, match="v000004.json is missing but the latest"):
        latest_manifest(store, PREFIX)


def test_reading_latest_and_publishing_cost_the_same_requests_at_any_history(
        store: ObjectStore) -> None:
    costs = {}
    for n in (2, 25):
        while (latest_version(store, PREFIX) or 0) < n:          # the history, uncounted
            _publish(store, latest_manifest(store, PREFIX), (latest_version(store, PREFIX)
                                                             or 0) + 1)
        measured = CountingStore(store)
        m = latest_manifest(measured, PREFIX)
        assert m is not None and m.version == n
        _publish(measured, m, 100 + n)
        c = measured.counts
        assert c.n("list") == 0, c.to_dict()                   # versions/ is never listed
        costs[n] = {op: c.n(op) for op in ("get", "head", "put")}
        store.delete([layout.version_key(PREFIX, n + 1)])       # measured again at 25
        store.put_json(layout.latest_pointer_key(PREFIX), {"version": n})
    print("requests (latest + publish):", costs)
    assert costs[2] == costs[25], costs
    assert sum(costs[2].values()) <= 16, costs


def test_recent_versions_are_found_without_listing_and_skip_what_cannot_be_read(
        store: ObjectStore) -> None:
    _history(store, 5)
    store.delete([layout.version_key(PREFIX, 3)])                         # a hole
    key = layout.version_key(PREFIX, 2)
    store.put_json(key, {**json.loads(store.get_bytes(key)), "format": 2})  # not migrated
    measured = CountingStore(store)
    assert [m.version for m in recent_manifests(measured, PREFIX, 4)] == [4, 5]
    assert measured.counts.n("list") == 0
    assert [m.version for m in recent_manifests(store, PREFIX, 1)] == [5]
