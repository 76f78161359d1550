"""First epoch from the object store (cold cache) against raw GETs of the same bytes.

Reference: the version's shard objects fetched with boto3 ``get_object().read()`` on as
many threads as the trainer fetches with (``train.fetch_threads``), bytes kept in memory
and dropped. Contender: the trainer's loader with an empty shard cache, iterated for one
epoch (download + sha256 check + write to the cache folder + map + gather every training
sample). Both move the same bytes from the same server; the ratio compares bytes/s.
"""

from __future__ import annotations

import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import interleaved, median, ratio
from bench.contenders import ShardlineSet
from bench.loader_data import SetFiles
from shardline.core.config import TrainConfig
from shardline.core.manifest import ShardEntry
from shardline.core.store import ObjectStore


def upload(store: ObjectStore, files: SetFiles, compression: str = "none"
           ) -> list[ShardEntry]:
    """Put the version's shards under their manifest keys (skipping ones already there)."""
    manifest = files.manifest(compression)
    folder = files.cache_dir(compression)

    def put(e: ShardEntry) -> None:
        head = store.head(e.path)
        if head is None or head.size != e.bytes:
            store.put_bytes(e.path, (folder / f"{e.sha256}.arrow").read_bytes())

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(put, manifest.shards))
    return manifest.shards


def raw_get(store: ObjectStore, entries: list[ShardEntry], threads: int) -> float:
    """Bytes/s of plain GETs of ``entries``."""
    def get(e: ShardEntry) -> int:
        body = store.client.get_object(Bucket=store.bucket, Key=e.path)["Body"]
        return len(body.read())

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(get, entries))
    return total / (time.perf_counter() - t0)


def first_epoch(files: SetFiles, store: ObjectStore, scratch: Path) -> tuple[float, float]:
    """(samples/s, shard bytes/s) of one epoch of the trainer's loader from an empty cache."""
    cache = scratch / f"cold-{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    s = ShardlineSet(files, "none", store, cache_root=cache)
    try:
        n = sum(len(labels) for _, labels in s.batches(epochs=1))
        elapsed = time.perf_counter() - t0
    finally:
        s.close()
        shutil.rmtree(cache, ignore_errors=True)
    return n / elapsed, s.manifest.bytes / elapsed


def measure(files: SetFiles, store: ObjectStore, scratch: Path, rounds: int) -> dict[str, Any]:
    entries = upload(store, files)
    threads = TrainConfig().fetch_threads
    samples: list[float] = []

    def shardline() -> float:
        rate, bps = first_epoch(files, store, scratch)
        samples.append(rate)
        return bps

    values = interleaved({"raw_get": lambda: raw_get(store, entries, threads),
                          "shardline_cold": shardline}, rounds)
    return {
        "bytes": sum(e.bytes for e in entries), "shards": len(entries), "fetch_threads": threads,
        "raw_get_mb_per_s": median(values["raw_get"]) / 1e6,
        "shardline_cold_mb_per_s": median(values["shardline_cold"]) / 1e6,
        "shardline_cold_samples_per_s": median(samples),
        "rounds": {k: [round(v / 1e6, 1) for v in vs] for k, vs in values.items()},
        "shardline_vs_raw_get": ratio(values["shardline_cold"], values["raw_get"]),
    }
