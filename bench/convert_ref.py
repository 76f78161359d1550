"""The single-process reference conversion.

``pyarrow_convert`` is what one would write without shardline or Spark: read each input
object, parse it (``json.loads`` per line, or ``pq.read_table``), decode every PNG with PIL,
check the shape, append pixels to one buffer and write an Arrow IPC file (same schema,
compression and shard size as shardline's) each time a shard is full. It does not
partition by label, quarantine bad rows with reasons, deduplicate ids or validate; the
Spark path does all of that, so the ratio charges shardline for its extra work.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from shardline.core.config import DatasetConfig
from shardline.core.schema import data_schema
from shardline.tasks.convert.shard_writer import encode_ipc


def _records(data: bytes, fmt: str) -> Iterator[tuple[str, int, bytes]]:
    if fmt == "jsonl":
        for line in data.splitlines():
            if line.strip():
                obj = json.loads(line)
                yield obj["id"], int(obj["label"]), base64.b64decode(obj["image"])
        return
    table = pq.read_table(pa.BufferReader(data))
    yield from zip(table.column("id").to_pylist(), table.column("label").to_pylist(),
                   table.column("image").to_pylist(), strict=True)


def pyarrow_convert(read: Callable[[str], bytes], keys: list[str], fmt: str,
                    cfg: DatasetConfig, write: Callable[[str, bytes], object],
                    out_prefix: str) -> int:
    """Convert ``keys`` into Arrow IPC shards under ``out_prefix``; returns rows written."""
    schema = data_schema(cfg)
    limit = cfg.shards.rows_per_shard(cfg.image.nbytes + 32)
    ids: list[str] = []
    labels: list[int] = []
    pixels = bytearray()
    rows, part = 0, 0

    def flush() -> None:
        nonlocal ids, labels, pixels, part
        n = len(ids)
        image = pa.FixedSizeBinaryArray.from_buffers(pa.binary(cfg.image.nbytes), n,
                                                     [None, pa.py_buffer(bytes(pixels))])
        table = pa.Table.from_arrays(
            [pa.array(ids, pa.string()), pa.array(labels, pa.int16()), image,
             pa.array(["ref"] * n, pa.string()), pa.array(np.arange(n), pa.int64())],
            schema=schema)
        buf = encode_ipc(table, cfg.shards.compression, cfg.shards.record_batch_rows)
        write(f"{out_prefix}part-{part:05d}.arrow", buf.to_pybytes())
        ids, labels, pixels, part = [], [], bytearray(), part + 1

    for key in keys:
        for rid, label, png in _records(read(key), fmt):
            with Image.open(io.BytesIO(png)) as img:
                arr = np.asarray(img.convert("RGB") if img.mode != "RGB" else img)
            if arr.shape != cfg.image.shape:
                continue
            ids.append(rid)
            labels.append(label)
            pixels += arr.tobytes()
            rows += 1
            if len(ids) >= limit:
                flush()
    if ids:
        flush()
    return rows
