"""The cold path of the shard cache (download, verify while receiving, publish by rename)
against a real S3 server (moto) and, for a transfer cut off mid-body, a real HTTP server on
127.0.0.1 that sends half of what its Content-Length promises."""

from __future__ import annotations

import hashlib
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash

from shardline.core.config import StoreSettings, TrainConfig
from shardline.core.errors import StoreError
from shardline.core.manifest import Manifest, ShardEntry
from shardline.core.store import ObjectStore
from shardline.trainer.cache import ShardCache, expected_digest
from shardline.trainer.fetch import ShardFetcher
from shardline.trainer.loader import make_train_loader
from shardline.trainer.options import LoaderSpec
from shardline.trainer.plan import make_plan
from shardline.trainer.shard_reader import ShardReader
from shardline.trainer.stream import ShardStream
from tests.integration.trainer_data import digits_config, publish_version

CFG = digits_config(name="coldtest")


@pytest.fixture
def version(store: ObjectStore) -> Manifest:
    m = publish_version(store, CFG.dataset, np.arange(600))
    assert len(m.shards) >= 4 and all(e.xxh3_128 for e in m.shards)
    return m


def test_shards_are_received_straight_into_the_buffer(store: ObjectStore, version: Manifest,
                                                     tmp_path: Path) -> None:
    """moto's plain responses take http.client's readinto (receive.py), not the fallback;
    the files are the published bytes and nothing else is left in the folder."""
    cache = ShardCache(tmp_path, 1 << 30, store)
    paths = [cache.ensure(e) for e in version.shards]
    assert cache.stats.received_direct == cache.stats.fetched == len(version.shards)
    for p, e in zip(paths, version.shards, strict=True):
        assert hashlib.sha256(p.read_bytes()).hexdigest() == e.sha256
        assert p.stat().st_size == e.bytes
    assert sorted(tmp_path.iterdir()) == sorted(paths)


def test_object_changed_mid_stream_is_rejected_naming_both_digests(
        store: ObjectStore, version: Manifest, tmp_path: Path) -> None:
    """Same size, one byte flipped in the middle: only the streamed digest can tell."""
    entry = version.shards[1]
    data = bytearray(store.get_bytes(entry.path))
    data[len(data) // 2] ^= 0x01
    store.put_bytes(entry.path, bytes(data))
    with pytest.raises(StoreError) as exc:
        ShardCache(tmp_path, 1 << 30, store).ensure(entry)
    algorithm, expected = expected_digest(entry)
    found = xxhash.xxh3_128(bytes(data)).hexdigest()
    assert algorithm == "xxh3_128"
    for part in (entry.path, expected, found):
        assert part in str(exc.value)
    assert not list(tmp_path.iterdir())       # neither a final file nor a .part


class _HalfBody(http.server.BaseHTTPRequestHandler):
    """Promises ``data``'s length, sends half, waits for the test, then hangs up."""

    data = b""
    sent = threading.Event()
    release = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.data)))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        self.wfile.write(self.data[: len(self.data) // 2])
        self.wfile.flush()
        self.sent.set()
        self.release.wait(30)
        self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def half_server(store: ObjectStore, version: Manifest) -> Iterator[tuple[str, ShardEntry]]:
    entry = version.shards[0]
    _HalfBody.data = store.get_bytes(entry.path)
    _HalfBody.sent.clear()
    _HalfBody.release.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HalfBody)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", entry
    finally:
        _HalfBody.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_cut_off_transfer_is_never_visible_under_the_final_name(
        half_server: tuple[str, ShardEntry], tmp_path: Path) -> None:
    url, entry = half_server
    store = ObjectStore(StoreSettings(bucket="half", endpoint_url=url, access_key="t",
                                      secret_key="t", max_attempts=1, read_timeout_s=30))
    cache = ShardCache(tmp_path, 1 << 30, store)
    final = cache.path_for(entry)
    errors: list[BaseException] = []

    def fetch() -> None:
        try:
            cache.ensure(entry)
        except BaseException as exc:  # noqa: BLE001 - checked below
            errors.append(exc)

    t = threading.Thread(target=fetch)
    t.start()
    assert _HalfBody.sent.wait(30)
    deadline = time.monotonic() + 30
    while not list(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.005)                   # until the receiving file has been created
    # half of the bytes are received or on their way: only a .part name exists
    assert not final.exists()
    assert [p.suffix for p in tmp_path.iterdir()] == [".part"]
    _HalfBody.release.set()
    t.join(30)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], StoreError), errors
    assert entry.path in str(errors[0])
    assert not list(tmp_path.iterdir())
    assert cache.stats.fetched == 0


def _epochs(store: ObjectStore, manifest: Manifest, cache_dir: Path, threads: int
            ) -> tuple[list[tuple[bytes, list[int], list[int], int]], ShardCache]:
    """Every batch of two epochs (pixels, labels, keys, epoch), windows of ~2 shards so
    that later windows are fetched while earlier ones are read."""
    t = TrainConfig()
    cache = ShardCache(cache_dir, 1 << 30, store)
    fetcher = ShardFetcher(cache, threads)
    try:
        reader = ShardReader(fetcher, CFG.dataset)
        plan = make_plan(manifest, None, t.replay_ratio, t.holdout_fraction, t.seed)
        stream = ShardStream(plan, reader, batch_size=48, epochs=2, seed=t.seed,
                             window_rows=150, window_min_shards=2, lookahead_bytes=1)
        out = [(b["image"].numpy().tobytes(), b["label"].tolist(), b["key"].tolist(),
                b["epoch"]) for b in make_train_loader(stream, LoaderSpec())]
    finally:
        fetcher.close()
    return out, cache


@pytest.mark.parametrize("threads", [1, 4])
def test_cold_first_epoch_yields_the_batches_of_a_warm_run(
        store: ObjectStore, version: Manifest, tmp_path: Path, threads: int) -> None:
    cold, cold_cache = _epochs(store, version, tmp_path, threads)
    assert cold_cache.stats.fetched == len(version.shards)
    warm, warm_cache = _epochs(store, version, tmp_path, threads)
    assert warm_cache.stats.fetched == 0 and warm_cache.stats.hits >= len(version.shards)
    assert len(cold) > 4 and {b[3] for b in cold} == {0, 1}
    assert cold == warm
    keys = [k for b in cold if b[3] == 0 for k in b[2]]
    assert len(keys) == len(set(keys))                      # an epoch repeats no sample
