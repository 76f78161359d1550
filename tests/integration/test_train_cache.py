"""The shard cache against a real S3 API (moto server): reuse across runs, refetch of a
corrupt or partial file, verification against the manifest, the size bound, read-ahead."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from shardline.core.errors import StoreError
from shardline.core.store import ObjectStore
from shardline.trainer.cache import ShardCache, expected_digest
from shardline.trainer.fetch import ShardFetcher
from tests.integration.trainer_data import digits_config, publish_version


@pytest.fixture(params=["xxh3_128", "sha256-only"])
def version(store: ObjectStore, request: pytest.FixtureRequest) -> Any:
    """A published version's shard entries; "sha256-only" is how entries written before the
    xxh3_128 field look (the cache then verifies sha256)."""
    cfg = digits_config(name="cachetest")
    m = publish_version(store, cfg.dataset, np.arange(600))
    assert all(e.xxh3_128 for e in m.shards)
    shards = m.shards
    if request.param == "sha256-only":
        shards = [dataclasses.replace(e, xxh3_128=None) for e in m.shards]
    assert {expected_digest(e)[0] for e in shards} == {request.param.split("-")[0]}
    return SimpleNamespace(shards=shards)


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_cached_shards_are_reused_by_the_next_run(store: ObjectStore, version: Any,
                                                   tmp_path: Path) -> None:
    first = ShardCache(tmp_path, 1 << 30, store)
    paths = [first.ensure(e) for e in version.shards]
    assert first.stats.fetched == len(version.shards) and first.stats.hits == 0
    assert [sha(p) for p in paths] == [e.sha256 for e in version.shards]
    second = ShardCache(tmp_path, 1 << 30, store)          # a later run, same cache dir
    assert [second.ensure(e) for e in version.shards] == paths
    assert second.stats.fetched == 0 and second.stats.hits == len(version.shards)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_or_partial_cached_shard_is_refetched(store: ObjectStore, version: Any,
                                                      tmp_path: Path, damage: str) -> None:
    entry = version.shards[0]
    path = ShardCache(tmp_path, 1 << 30, store).ensure(entry)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF                    # same size, wrong bytes
    else:
        data = data[: len(data) // 3]                   # a cut-off copy under the final name
    path.write_bytes(bytes(data))
    cache = ShardCache(tmp_path, 1 << 30, store)
    assert cache.ensure(entry) == path
    assert cache.stats.refetched_corrupt == 1 and cache.stats.fetched == 1
    assert sha(path) == entry.sha256


def test_partial_downloads_are_never_used_and_stale_ones_are_swept(
        store: ObjectStore, version: Any, tmp_path: Path) -> None:
    entry = version.shards[0]
    part = tmp_path / f"{entry.sha256}.deadbeef.part"
    part.write_bytes(b"half a shard")
    old = time.time() - 2 * 3600
    os.utime(part, (old, old))
    cache = ShardCache(tmp_path, 1 << 30, store)
    assert not part.exists()                            # swept at start
    assert sha(cache.ensure(entry)) == entry.sha256
    assert cache.stats.fetched == 1
    assert not list(tmp_path.glob("*.part"))


def test_object_that_no_longer_matches_its_manifest_is_refused(
        store: ObjectStore, version: Any, tmp_path: Path) -> None:
    entry = version.shards[0]
    store.put_bytes(entry.path, b"not the published bytes")
    with pytest.raises(StoreError, match=entry.path) as exc:
        ShardCache(tmp_path, 1 << 30, store).ensure(entry)
    algorithm, digest = expected_digest(entry)
    assert f"{algorithm} " in str(exc.value) and digest in str(exc.value)
    assert "re-publish" in str(exc.value)
    assert not list(tmp_path.iterdir())                 # nothing left behind


def test_cache_stays_within_its_bound_least_recently_used_first(
        store: ObjectStore, version: Any, tmp_path: Path) -> None:
    entries = version.shards[:5]
    bound = sum(e.bytes for e in entries[:3]) + 10      # room for three shards
    cache = ShardCache(tmp_path, bound, store)
    for e in entries:
        cache.ensure(e)
        time.sleep(0.01)                                # distinct mtimes
    on_disk = {p.stem for p in tmp_path.glob("*.arrow")}
    assert sum(p.stat().st_size for p in tmp_path.glob("*.arrow")) <= bound
    assert on_disk == {e.sha256 for e in entries[2:]}   # the two oldest went
    assert cache.stats.evicted == 2


def test_fetcher_reads_ahead_in_the_background(store: ObjectStore, version: Any,
                                               tmp_path: Path) -> None:
    fetcher = ShardFetcher(ShardCache(tmp_path, 1 << 30, store), threads=3)
    try:
        fetcher.prefetch(version.shards)
        deadline = time.time() + 30
        while len(list(tmp_path.glob("*.arrow"))) < len(version.shards):
            assert time.time() < deadline, "read-ahead did not fetch the announced shards"
            time.sleep(0.02)
        assert fetcher.cache.stats.fetched == len(version.shards)
        assert [fetcher.path(e).stem for e in version.shards] == [
            e.sha256 for e in version.shards]
        assert fetcher.cache.stats.fetched == len(version.shards)   # path() fetched nothing new
    finally:
        fetcher.close()


def test_read_ahead_is_bounded_by_bytes(store: ObjectStore, version: Any,
                                        tmp_path: Path) -> None:
    fetcher = ShardFetcher(ShardCache(tmp_path, 1 << 30, store), threads=2)
    try:
        first_two = version.shards[0].bytes + version.shards[1].bytes
        fetcher.prefetch(version.shards, max_bytes=first_two)
        fetcher.path(version.shards[1])
        fetcher.path(version.shards[0])
        time.sleep(0.3)
        assert {p.stem for p in tmp_path.glob("*.arrow")} == {
            e.sha256 for e in version.shards[:2]}
    finally:
        fetcher.close()
