"""Zarr conversion at scale: a float32 store (13 x 32 x 32 per sample, ``--gb`` of it) on the
embedded stack's S3 server, converted by shardline's convert stage (Spark Connect,
local[2]) versus a single-process zarr -> Arrow IPC copy of the same store to the same
server, in the same run.

Printed: the input size, each contender's seconds and MB/s, their ratio (shardline /
single process, higher is better), the client (driver) process's peak RSS during the
conversion and the peak RSS of the Spark Connect server's process tree (JVM + Python
workers). ``python -m shardline.bench.zarr_convert --gb 1``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from shardline.bench.common import moto_bucket, rss
from shardline.core.config import SparkSettings, StoreSettings, parse_config
from shardline.core.store import ObjectStore
from shardline.infra import procs, services
from shardline.tasks.convert import spark as spark_sessions
from shardline.tasks.convert.shard_writer import encode_ipc
from shardline.tasks.convert.stage import convert
from shardline.tasks.detect import detect

SAMPLE = (13, 32, 32)
CHUNK = 256                   # samples per Zarr chunk (13 MB of float32)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        # every thread's children: the JVM forks its Python workers from other threads than
        # its main one, so /proc/<pid>/task/<pid>/children alone misses them
        try:
            tids = [t.name for t in Path(f"/proc/{p}/task").iterdir()]
        except OSError:
            tids = []
        for tid in tids:
            with contextlib.suppress(OSError):
                todo += [int(k) for k in
                         Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
    return out


class Peak:
    """Peak RSS of this process, of a process tree, and of the tree's largest non-JVM
    process (a Spark Python worker: what one task holds), sampled every 50 ms."""

    def __init__(self, tree_root: int | None) -> None:
        self.root, self.self_peak, self.tree_peak, self.worker_peak = tree_root, 0, 0, 0
        self._stop = threading.Event()

    def __enter__(self) -> Peak:
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.self_peak = max(self.self_peak, rss(os.getpid()))
            if self.root:
                pids = _tree(self.root)
                self.tree_peak = max(self.tree_peak, sum(rss(p) for p in pids))
                py = [rss(p) for p in pids if _comm(p) != "java"]
                self.worker_peak = max([self.worker_peak, *py])

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def write_store(settings: StoreSettings, key: str, n: int) -> None:
    """A Zarr group of ``n`` samples: ``bands`` float32, ``label`` int16, written a chunk
    at a time (this process never holds the array)."""
    import zarr
    from zarr.storage import FsspecStore

    store = ObjectStore(settings)
    url, options = store.fsspec_url(key)
    group = zarr.open_group(store=FsspecStore.from_url(url, storage_options=options), mode="w")
    bands = group.create_array("bands", shape=(n, *SAMPLE), chunks=(CHUNK, *SAMPLE),
                               dtype="float32")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, n).astype(np.int16)
    group.create_array("label", shape=(n,), chunks=(CHUNK * 16,), dtype="int16")[:] = labels
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        bands[start:stop] = rng.standard_normal((stop - start, *SAMPLE), dtype=np.float32)


def single_process_copy(settings: StoreSettings, key: str, out: str, target_mb: int = 64
                        ) -> int:
    """The reference: read the store chunk-aligned, build fixed_shape_tensor columns, write
    ~``target_mb`` Arrow IPC files to the same server. Returns the bytes written."""
    import zarr
    from zarr.storage import FsspecStore

    store = ObjectStore(settings)
    url, options = store.fsspec_url(key)
    group = zarr.open_group(store=FsspecStore.from_url(url, storage_options=options),
                            mode="r")
    bands, labels = group["bands"], group["label"]
    assert isinstance(bands, zarr.Array) and isinstance(labels, zarr.Array)
    typ = pa.fixed_shape_tensor(pa.float32(), list(SAMPLE))
    size = int(np.prod(SAMPLE))
    rows = max(CHUNK, (target_mb << 20) // (size * 4) // CHUNK * CHUNK)
    written = 0
    for i, start in enumerate(range(0, bands.shape[0], rows)):
        block = np.asarray(bands[start:start + rows])
        lab = np.asarray(labels[start:start + rows])
        col = pa.ExtensionArray.from_storage(typ, pa.FixedSizeListArray.from_arrays(
            pa.array(block.reshape(-1)), size))
        table = pa.table({"label": pa.array(lab), "bands": col})
        buf = encode_ipc(table, "none", 8192)
        store.put_bytes(f"{out}/part-{i:05d}.arrow", memoryview(buf))
        written += buf.size
    return written


def _in_child(fn: Any, *args: Any) -> Any:
    """Run ``fn(*args)`` in a fresh process, so this (the driver) process's memory shows only
    the conversion; returns ``(result, seconds)``."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_timed, (fn, *args))


def _timed(fn: Any, *args: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def _config(name: str) -> Any:
    return parse_config({"dataset": {
        "name": name, "incoming": f"incoming/{name}/", "classes": ["a", "b", "c", "d"],
        "fields": {"bands": {"kind": "tensor", "dtype": "float32", "shape": list(SAMPLE)}},
        "target": {"kind": "class"}}}).dataset


def run(gb: float) -> dict[str, Any]:
    n = int(gb * (1 << 30) / (int(np.prod(SAMPLE)) * 4))
    with moto_bucket("shardline-bench-zarr-") as (scratch, _, store), \
            contextlib.ExitStack() as stop:
        spark = services.start_spark_connect(procs.free_port(), scratch / "spark")
        stop.callback(spark.stop)
        stop.callback(spark_sessions.close_sessions)
        settings_s3 = store.settings
        settings = SparkSettings(remote=spark.url)
        # warm-up: Python workers started and their imports done (not what is measured)
        warm = _config("zwarm")
        _in_child(write_store, settings_s3, f"{warm.incoming}w.zarr", CHUNK)
        warm_batch = detect(store, warm)
        assert warm_batch is not None
        convert(store, warm, settings, warm_batch, "warm", None)
        cfg = _config("zbench")
        key = f"{cfg.incoming}tiles.zarr"
        _, t_write = _in_child(write_store, settings_s3, key, n)
        nbytes = sum(o.size for o in store.list(key + "/"))
        print(f"store: {n} samples, {nbytes / 1e6:.0f} MB written in {t_write:.1f}s")
        ref_bytes, t_ref = _in_child(single_process_copy, settings_s3, key, "bench/reference")
        batch = detect(store, cfg)
        assert batch is not None
        with Peak(spark.pid) as peak:
            t0 = time.perf_counter()
            conv = convert(store, cfg, settings, batch, uuid.uuid4().hex[:12], None)
            t_conv = time.perf_counter() - t0
        assert conv.rows_ok == n, (conv.rows_ok, n, conv.by_rule)
        mb = nbytes / 1e6
        return {"samples": n, "store_mb": round(mb), "reference_s": round(t_ref, 2),
                "reference_out_mb": round(ref_bytes / 1e6), "shardline_s": round(t_conv, 2),
                "reference_mb_s": round(mb / t_ref, 1), "shardline_mb_s": round(mb / t_conv, 1),
                "ratio": round(t_ref / t_conv, 3),
                "driver_peak_rss_mb": round(peak.self_peak / 2**20),
                "spark_tree_peak_rss_mb": round(peak.tree_peak / 2**20),
                "largest_worker_peak_rss_mb": round(peak.worker_peak / 2**20),
                "spark_tasks": len(conv.row_files),
                "cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="store size (default 1 GB)")
    args = ap.parse_args()
    r = run(args.gb)
    for k, v in r.items():
        print(f"{k:>24}: {v}")
    print(f"bar: shardline / single process = {r['ratio']:.2f} (>= 0.5); driver peak RSS "
          f"{r['driver_peak_rss_mb']} MB (< 500)")


if __name__ == "__main__":
    main()
