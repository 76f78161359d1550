"""First epoch from the object store (cold cache) against raw GETs of the same bytes.

Reference: the version's shard objects fetched with boto3 ``get_object().read()`` on as
many threads as the trainer fetches with (``train.fetch_threads``), bytes kept in memory
and dropped. Contender: the trainer's loader with an empty shard cache, iterated for one
epoch (download + sha256 check + write to the cache folder + map + gather every training
sample). Both move the same bytes from the same server; the ratio compares bytes/s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from shardline.bench.common import interleaved, median, ratio, write_result
from shardline.bench.contenders import ShardlineSet
from shardline.bench.loader_data import SetFiles
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


def first_epoch(files: SetFiles, store: ObjectStore, scratch: Path,
                times: dict[str, list[float]] | None = None) -> tuple[float, float]:
    """(samples/s, shard bytes/s) of one epoch of the trainer's loader from an empty cache;
    appends the seconds to the first batch and to the end of the epoch to ``times``."""
    cache = scratch / f"cold-{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    s = ShardlineSet(files, "none", store, cache_root=cache)
    first = None
    try:
        n = 0
        for _, labels in s.batches(epochs=1):
            n += len(labels)
            first = first or time.perf_counter() - t0
        elapsed = time.perf_counter() - t0
    finally:
        s.close()
        shutil.rmtree(cache, ignore_errors=True)
        # untimed: the disk's writeback of this epoch's files (and the discard of their
        # blocks) finishes here, not in the next contender's timed run
        os.sync()
    if times is not None:
        times.setdefault("first_batch_s", []).append(first or elapsed)
        times.setdefault("epoch_s", []).append(elapsed)
    return n / elapsed, s.manifest.bytes / elapsed


@contextlib.contextmanager
def previous_cache() -> Iterator[None]:
    """The cache's receive path before this round of work: botocore's ``readinto``
    (urllib3 reads, then copies; botocore checks the CRC32). Only for a before/after in
    the same rounds."""
    from shardline.core import receive

    saved = receive.direct_response
    receive.direct_response = lambda raw: None
    try:
        yield
    finally:
        receive.direct_response = saved


def measure(files: SetFiles, store: ObjectStore, scratch: Path, rounds: int,
            previous: bool = False) -> dict[str, Any]:
    """Interleaved rounds of raw GETs and the cold first epoch (and, with ``previous``, the
    first epoch with the cache's previous receive path)."""
    entries = upload(store, files)
    threads = TrainConfig().fetch_threads
    samples: list[float] = []
    times: dict[str, list[float]] = {}

    def shardline() -> float:
        rate, bps = first_epoch(files, store, scratch, times)
        samples.append(rate)
        return bps

    def shardline_previous() -> float:
        with previous_cache():
            return first_epoch(files, store, scratch)[1]

    fns = {"raw_get": lambda: raw_get(store, entries, threads), "shardline_cold": shardline}
    if previous:
        fns["shardline_cold_previous"] = shardline_previous
    values = interleaved(fns, rounds)
    out = {
        "bytes": sum(e.bytes for e in entries), "shards": len(entries), "fetch_threads": threads,
        "raw_get_mb_per_s": median(values["raw_get"]) / 1e6,
        "shardline_cold_mb_per_s": median(values["shardline_cold"]) / 1e6,
        "shardline_cold_samples_per_s": median(samples),
        "first_batch_s": median(times["first_batch_s"]), "epoch_s": median(times["epoch_s"]),
        "rounds": {k: [round(v / 1e6, 1) for v in vs] for k, vs in values.items()},
        "shardline_vs_raw_get": ratio(values["shardline_cold"], values["raw_get"]),
    }
    if previous:
        out["previous_vs_raw_get"] = ratio(values["shardline_cold_previous"], values["raw_get"])
    return out


# -- standalone: python -m shardline.bench.loader_cold [--set S|L] [--quick] [--pin ...] --
def set_affinity(pid: int, cpus: set[int]) -> None:
    """Pin every thread of process ``pid`` (0: this one) to ``cpus``; threads started later
    inherit it from the thread that starts them."""
    pid = pid or os.getpid()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):  # thread ended
            os.sched_setaffinity(int(tid), cpus)


class Pinning:
    """``on``: the S3 server on the last CPU, this process on the others; ``off``: both
    on every CPU this process was given."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid, self.cpus = server_pid, sorted(os.sched_getaffinity(0))

    def apply(self, mode: str) -> None:
        if mode == "on" and len(self.cpus) < 2:
            raise SystemExit("--pin needs at least 2 usable CPUs")
        server = set(self.cpus[-1:]) if mode == "on" else set(self.cpus)
        ours = set(self.cpus[:-1]) if mode == "on" else set(self.cpus)
        set_affinity(self.server_pid, server)
        set_affinity(0, ours)


def run(set_name: str, quick: bool, pin: str, rounds: int, previous: bool = False,
        log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    from shardline.bench.common import machine, moto_bucket
    from shardline.bench.loader_data import SetSpec, pixels

    rows = {"S": 10_000 if quick else 50_000, "L": 600 if quick else 5_000}[set_name]
    spec = SetSpec(set_name, rows, (32, 32, 3) if set_name == "S" else (224, 224, 3),
                   512 if set_name == "S" else 256)
    files = SetFiles(spec, *pixels(spec))
    files.ensure("shards-none")
    modes = ["off", "on"] if pin == "both" else [pin]
    out: dict[str, Any] = {"part": "loader_cold", "set": set_name, "rows": rows,
                           "quick": quick, "machine": machine(), "pin": {}}
    with moto_bucket("shardline-cold-") as (scratch, moto, store), \
            contextlib.ExitStack() as stop:
        pinning = Pinning(moto.pid)
        stop.callback(pinning.apply, "off")
        upload(store, files)
        for mode in modes:
            pinning.apply(mode)
            out["pin"][mode] = measure(files, store, scratch, rounds, previous)
            log(f"{set_name} pin={mode}: ratio {out['pin'][mode]['shardline_vs_raw_get']:.3f}"
                f" rounds {out['pin'][mode]['rounds']}")
    out["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=("S", "L"), default="S")
    ap.add_argument("--quick", action="store_true", help="10,000 (S) / 600 (L) rows")
    ap.add_argument("--pin", choices=("off", "on", "both"), default="off",
                    help="on: the S3 server on the last usable CPU, the benchmark on the rest")
    ap.add_argument("--rounds", type=int, default=None, help="default 3 (quick) or 7")
    ap.add_argument("--previous", action="store_true",
                    help="also the cache's previous receive path, in the same rounds")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args(argv)
    r = run(args.set, args.quick, args.pin, args.rounds or (3 if args.quick else 7),
            args.previous)
    path = write_result(f"loader-cold-{args.set}" + ("-quick" if args.quick else ""), r)
    if args.json:
        print(json.dumps(r))
    else:
        for mode, m in r["pin"].items():
            print(f"{r['set']} pin={mode}: raw GET {m['raw_get_mb_per_s']:.0f} MB/s, "
                  f"shardline {m['shardline_cold_mb_per_s']:.0f} MB/s, "
                  f"ratio {m['shardline_vs_raw_get']:.3f} (previous cache: "
                  f"{m.get('previous_vs_raw_get', float('nan')):.3f}), first batch "
                  f"{m['first_batch_s']:.3f} s of {m['epoch_s']:.3f} s")
        print(f"load average {r['machine']['load_avg_at_start']} -> {r['load_avg_at_end']}; "
              f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
