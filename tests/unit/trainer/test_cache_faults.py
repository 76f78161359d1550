"""The shard cache under faults of the network and of the disk.

The store is the project's folder store (real files); the faults are injected where nothing
real can make them on demand: a response whose bytes change on the way (the instance's
``read_into`` is wrapped to flip a byte), and a full disk (a real 1 MiB tmpfs when this
process may mount one, as root here and in CI; the test skips, saying so, where it may not).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import xxhash

from shardline.core.errors import StoreError
from shardline.core.folder_store import FolderStore
from shardline.core.manifest import ShardEntry
from shardline.trainer.cache import CacheFull, ShardCache


def _shard(store: FolderStore, name: str, size: int) -> ShardEntry:
    import hashlib

    data = os.urandom(size)
    key = f"lake/ds/shards/batch=b/{name}.arrow"
    store.put_bytes(key, data)
    return ShardEntry(path=key, rows=1, bytes=size, sha256=hashlib.sha256(data).hexdigest(),
                      batch="b", partition={"batch": "b"},
                      xxh3_128=xxhash.xxh3_128(data).hexdigest())


def _flip_first(store: FolderStore, times: int) -> list[int]:
    """Wrap ``store.read_into`` so its first ``times`` responses arrive with one byte
    flipped (a different byte each time); returns the list of injected faults."""
    real = store.read_into
    injected: list[int] = []

    def flaky(key: str, buf: memoryview, sink: Any) -> Any:
        if len(injected) >= times:
            return real(key, buf, sink)
        at = len(injected)

        def corrupt(view: memoryview) -> None:
            data = bytearray(view)
            data[at % len(data)] ^= 0xFF
            sink(memoryview(data))

        injected.append(at)
        return real(key, buf, corrupt)

    store.read_into = flaky  # type: ignore[method-assign]
    return injected


def test_a_corrupted_response_is_fetched_again(tmp_path: Path) -> None:
    store = FolderStore(tmp_path / "bucket")
    entry = _shard(store, "a", 50_000)
    injected = _flip_first(store, 2)
    path = ShardCache(tmp_path / "cache", 1 << 30, store).ensure(entry)
    assert len(injected) == 2
    assert xxhash.xxh3_128(path.read_bytes()).hexdigest() == entry.xxh3_128


def test_a_download_that_keeps_failing_says_so_and_blames_no_shard(tmp_path: Path) -> None:
    store = FolderStore(tmp_path / "bucket")
    entry = _shard(store, "a", 50_000)
    injected = _flip_first(store, 100)
    with pytest.raises(StoreError) as exc:
        ShardCache(tmp_path / "cache", 1 << 30, store).ensure(entry)
    assert len(injected) == 3
    msg = str(exc.value)
    assert "the download kept failing: 3 downloads" in msg and entry.path in msg
    assert "re-publish" not in msg and "modified" in msg  # "not shown to be modified"
    assert not list((tmp_path / "cache").iterdir())


def test_the_same_wrong_bytes_twice_are_the_stored_object(tmp_path: Path) -> None:
    store = FolderStore(tmp_path / "bucket")
    entry = _shard(store, "a", 50_000)
    store.put_bytes(entry.path, b"replaced after publishing")
    with pytest.raises(StoreError) as exc:
        ShardCache(tmp_path / "cache", 1 << 30, store).ensure(entry)
    assert "two downloads gave the same" in str(exc.value)
    assert "re-publish the dataset version" in str(exc.value)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "tiny"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): the full-disk "
                    "path needs a real small filesystem")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_evicts_then_names_the_folder_and_the_setting(
        tmp_path: Path, tiny_disk: Path) -> None:
    store = FolderStore(tmp_path / "bucket")
    old = [_shard(store, f"old{i}", 300_000) for i in range(3)]
    new = _shard(store, "new", 300_000)
    cache = ShardCache(tiny_disk, 1 << 30, store)   # a bound far above the disk's size
    for e in old:
        cache.ensure(e)
    # 900 KB cached on a 1 MiB disk: the next 300 KB only fit once older shards go.
    path = cache.ensure(new)
    assert xxhash.xxh3_128(path.read_bytes()).hexdigest() == new.xxh3_128
    assert cache.stats.evicted >= 1
    huge = _shard(store, "huge", 2 << 20)           # larger than the whole disk
    with pytest.raises(CacheFull) as exc:
        cache.ensure(huge)
    msg = str(exc.value)
    assert str(tiny_disk) in msg and "SHARDLINE_CACHE_DIR" in msg and huge.path in msg
    assert not list(tiny_disk.glob("*.part"))
