"""The loader on a float32 tensor field (13 bands of 32x32, as a Sentinel-2 tile) against raw
Arrow IPC reading the same shards, in the same run (issue 20: bar >= 0.9x).

    .venv/bin/python -m shardline.bench.loader_tensor [--rows N] [--rounds R] [--seconds S] [--cpu]

A typed dataset (``[dataset.fields.bands]`` tensor float32 [13, 32, 32], a class target over
10 classes) is written as its published schema says (``core.schema.data_schema``:
``fixed_shape_tensor`` column, LZ4-free shards of ``--shard-rows`` rows) with a manifest
from the builder ingest uses, then read by:

- ``shardline``: the trainer's loader as a run builds it (``ShardReader`` over the local
  shard files, ``make_plan``, ``ShardStream`` with the trainer's defaults,
  ``make_train_loader``), batches of 256 dicts ``{"bands": float32 [256, 13, 32, 32],
  "label", "key", ...}``, each released after use as the training step does;
- ``raw_arrow``: every shard memory-mapped with ``pyarrow.ipc``, the tensor column's value
  buffer viewed as ``[rows, 13*32*32]`` float32 per record batch, and each batch 256 rows
  drawn at random over all shards, grouped by record batch and copied with
  ``ndarray.take`` into one reused buffer (no framework, no windows, no held-out split).

Interleaved rounds, median of per-round ratios (``bench.common``). ``--cpu``: samples per
CPU second of the consuming thread (robust to a loaded machine).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import torch

from shardline.bench.common import cpu_rate, interleaved, machine, median, rate, ratio, write_result
from shardline.core import layout
from shardline.core.builder import NewBatch
from shardline.core.builder import build_version as build_draft
from shardline.core.config import DatasetConfig, config_to_dict
from shardline.core.field_spec import FieldSpec, TargetSpec
from shardline.core.manifest import Manifest
from shardline.core.parts import ShardEntry, SourceEntry, ValidationSummary, content_digests
from shardline.core.schema import data_schema, schema_info
from shardline.trainer.fetch import LocalShards
from shardline.trainer.loader import make_train_loader
from shardline.trainer.options import LoaderSpec
from shardline.trainer.plan import make_plan
from shardline.trainer.shard_reader import ShardReader
from shardline.trainer.stream import ShardStream

SHAPE = (13, 32, 32)
BATCH = 256
Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]


def tensor_config(shard_rows: int) -> DatasetConfig:
    return DatasetConfig(name="tiles", incoming="incoming/tiles/",
                         classes=tuple(str(i) for i in range(10)),
                         fields={"bands": FieldSpec(kind="tensor", dtype="float32",
                                                    shape=SHAPE)},
                         target=TargetSpec(kind="class"))


def _shard(cfg: DatasetConfig, rows: np.ndarray, rng: np.random.Generator) -> bytes:
    schema = data_schema(cfg)
    n, size = len(rows), int(np.prod(SHAPE))
    values = pa.array(rng.standard_normal(n * size, dtype=np.float32))
    bands = pa.ExtensionArray.from_storage(schema.field("bands").type,
                                           pa.FixedSizeListArray.from_arrays(values, size))
    cols = [pa.array([f"t{r:07d}" for r in rows]), pa.array(rows % 10, pa.int16()), bands,
            pa.array(["incoming/tiles/a.zarr"] * n), pa.array(rows.astype(np.int64))]
    table = pa.Table.from_arrays(cols, schema=schema)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=cfg.shards.record_batch_rows)
    return sink.getvalue().to_pybytes()


def write_set(root: Path, rows: int, shard_rows: int) -> tuple[DatasetConfig, Manifest]:
    """``rows`` tiles as shards of ``shard_rows`` under ``root``, and their version."""
    cfg = tensor_config(shard_rows)
    batch = hashlib.sha256(f"tiles:{rows}:{shard_rows}".encode()).hexdigest()[:16]
    rng, new = np.random.default_rng(0), []
    for part, lo in enumerate(range(0, rows, shard_rows)):
        data = _shard(cfg, np.arange(lo, min(rows, lo + shard_rows)), rng)
        key = layout.shard_key(cfg.prefix, batch, part, 0, "bench")
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
        sha, xxh = content_digests(data)
        new.append(ShardEntry(path=key, rows=min(rows, lo + shard_rows) - lo, bytes=len(data),
                              sha256=sha, xxh3_128=xxh, batch=batch,
                              partition={"batch": batch}, compression="none"))
    draft = build_draft(cfg.prefix, dataset=cfg.name, schema=schema_info(cfg),
                        config=config_to_dict(cfg), parent=None,
                        batch=NewBatch(id=batch, run="bench", shards=new, ids_path="",
                                       sources=[SourceEntry("incoming/tiles/a.zarr", "e", 0,
                                                            "zarr")]),
                        validation=ValidationSummary(success=True, counts={"rows": rows}))
    return cfg, draft.manifest()


def shardline_batches(root: Path, cfg: DatasetConfig, manifest: Manifest,
                      spec: LoaderSpec | None = None) -> Batches:
    """The trainer's loader over the local shards (defaults as a run; 15 % held out)."""
    plan = make_plan(manifest, None, 0.3, 0.15, 0)
    stream = ShardStream(plan, ShardReader(LocalShards(root), cfg), batch_size=BATCH,
                         epochs=10**6, seed=0)
    for b in make_train_loader(stream, spec or LoaderSpec()):
        yield b["bands"], b["label"]
        stream.release(b)


def raw_arrow(paths: list[Path], seed: int = 0) -> Batches:
    """Random batches over memory-mapped shards, one ``take`` per record batch touched."""
    views, labels = [], []
    for p in paths:
        reader = ipc.open_file(pa.memory_map(str(p)))
        for i in range(reader.num_record_batches):
            b = reader.get_batch(i)
            col = b.column("bands").storage
            buf = col.values.buffers()[1]
            views.append(np.frombuffer(buf, np.float32, count=len(col) * col.type.list_size,
                                       offset=col.values.offset * 4).reshape(len(col), -1))
            labels.append(b.column("label").to_numpy().astype(np.int64))
    starts = np.cumsum([0] + [len(v) for v in views])
    rng = np.random.default_rng(seed)
    out = np.empty((BATCH, int(np.prod(SHAPE))), np.float32)
    lab = np.empty(BATCH, np.int64)
    images = torch.from_numpy(out).view(BATCH, *SHAPE)
    while True:
        idx = np.sort(rng.integers(0, starts[-1], BATCH))
        seg = np.searchsorted(starts, idx, side="right") - 1
        cuts = np.flatnonzero(np.diff(seg)) + 1
        for a, b in zip(np.r_[0, cuts].tolist(), np.r_[cuts, BATCH].tolist(), strict=True):
            s = int(seg[a])
            rows = idx[a:b] - starts[s]
            views[s].take(rows, 0, out[a:b], "clip")
            lab[a:b] = labels[s][rows]
        yield images, torch.from_numpy(lab)


def measure(rows: int = 4_000, shard_rows: int = 512, rounds: int = 5, seconds: float = 0.5,
            cpu: bool = False, log: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Both contenders on one freshly written set; returns rates and the ratio."""
    with tempfile.TemporaryDirectory(prefix="shardline-tensor-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        cfg, manifest = write_set(root, rows, shard_rows)
        paths = [root / s.path for s in manifest.shards]
        log(f"T: {rows} x float32 {list(SHAPE)} in {len(paths)} shards, "
            f"{sum(p.stat().st_size for p in paths) / 2**20:.0f} MB, "
            f"{time.perf_counter() - t0:.1f}s")
        factories: dict[str, Callable[[], Batches]] = {
            "shardline": lambda: shardline_batches(root, cfg, manifest),
            "raw_arrow": lambda: raw_arrow(paths)}

        def timed(factory: Callable[[], Batches]) -> Callable[[], float]:
            def go() -> float:
                it = factory()
                try:
                    if cpu:
                        return cpu_rate(it, warmup=3, batches=max(4, int(seconds * 60)))
                    return rate(it, warmup=3, seconds=seconds, min_batches=3)
                finally:
                    it.close()  # type: ignore[attr-defined]
            return go

        values = interleaved({n: timed(f) for n, f in factories.items()}, rounds,
                             lambda r: log(f"T: round {r + 1} done"))
    return {"rows": rows, "shape": list(SHAPE), "dtype": "float32", "shards": len(paths),
            "sample_bytes": int(np.prod(SHAPE)) * 4, "cpu": cpu,
            "contenders": {n: {"samples_per_s": round(median(v)),
                               "rounds": [round(x) for x in v]} for n, v in values.items()},
            "shardline_vs_raw_arrow": round(ratio(values["shardline"], values["raw_arrow"]), 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4_000)
    ap.add_argument("--shard-rows", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--cpu", action="store_true")
    args = ap.parse_args(argv)
    r = measure(args.rows, args.shard_rows, args.rounds, args.seconds, args.cpu,
                lambda m: print(m, file=sys.stderr))
    r["machine"] = machine()
    write_result("loader-tensor" + ("-cpu" if args.cpu else ""), r)
    print(json.dumps({k: v for k, v in r.items() if k != "machine"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
