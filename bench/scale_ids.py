"""Duplicate check against a synthetic published-id index (issue 10: 10M / 100M ids).

Builds ``--batches`` id files of ``--ids`` total ids the way publish writes them
(``tasks.id_index.encode_ids``) in a local folder, then, in a fresh process, checks a new
batch of ``--new`` ids (``--overlap`` of them already published) through
``ledger.published_in`` and reports its time and the process's peak RSS and Arrow pool
peak. The folder stands in for the bucket (``FolderStore``: ranged reads of local files),
so the numbers are the driver's own work and memory, not S3 latency.

    python -m shardline.bench.scale_ids --ids 10000000 --batches 100 --dir /tmp/ids10m
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from shardline.core.folder_store import FolderStore


def _id(b: int, i: np.ndarray) -> list[str]:
    return [f"batch{b:05d}-row{x:09d}" for x in i.tolist()]


def build(root: str, ids: int, batches: int) -> None:
    from shardline.tasks.id_index import encode_ids
    os.makedirs(root, exist_ok=True)
    per = ids // batches
    for b in range(batches):
        p = Path(root) / f"ids/batch={b:05d}.arrow"
        if p.exists():
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(encode_ids(pa.array(_id(b, np.arange(per)), pa.string())))


def check(root: str, batches: int, per: int, new: int, overlap: float) -> dict[str, float]:
    from shardline.core.parts import BatchEntry
    from shardline.tasks.ledger import published_in
    rng = np.random.default_rng(0)
    dup = int(new * overlap)
    ids = _id(batches, np.arange(new - dup)) + [
        f"batch{b:05d}-row{i:09d}" for b, i in zip(rng.integers(0, batches, dup).tolist(),
                                                  rng.integers(0, per, dup).tolist(), strict=True)]
    arr = pa.array(ids, pa.string())
    entries = [BatchEntry(id=str(b), version=b + 1, rows=per, quarantined=0,
                          ids_path=f"ids/batch={b:05d}.arrow", sources=1) for b in range(batches)]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    mask = published_in(FolderStore(root), entries, arr)
    took = time.perf_counter() - t0
    assert int(mask.sum()) == dup, (int(mask.sum()), dup)
    return {"seconds": took, "found": int(mask.sum()),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_before_check_mb": rss0 / 1024,
            "arrow_pool_peak_mb": pa.default_memory_pool().max_memory() / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", type=int, default=10_000_000)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--new", type=int, default=100_000)
    ap.add_argument("--overlap", type=float, default=0.01)
    ap.add_argument("--dir", default="/tmp/shardline-ids")
    ap.add_argument("--check-only", action="store_true")
    a = ap.parse_args()
    if a.check_only:
        print(json.dumps(check(a.dir, a.batches, a.ids // a.batches, a.new, a.overlap)))
        return
    t0 = time.perf_counter()
    build(a.dir, a.ids, a.batches)
    print(f"built {a.ids} ids in {a.batches} files: {time.perf_counter() - t0:.1f} s",
          flush=True)
    out = subprocess.run([sys.executable, "-m", "shardline.bench.scale_ids", "--check-only",
                          *sys.argv[1:]], check=True, capture_output=True, text=True)
    print(out.stdout.strip())


if __name__ == "__main__":
    main()
