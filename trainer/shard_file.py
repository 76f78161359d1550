"""One shard opened for reading: memory-mapped Arrow IPC, pixels as numpy views.

An uncompressed shard is mapped, and each record batch's ``fixed_size_binary`` pixel buffer
becomes a ``[rows, H*W*C]`` uint8 numpy view into the map: opening costs microseconds and
no byte is copied until the batcher gathers rows. An LZ4 shard is decompressed by Arrow
once per record batch when opened; the decompressed batches are then used the same way.

``ShardIndex`` is what the loader needs to know about a shard without its pixels: labels
and the id hashes that decide the held-out split and the replay sample. It is small
(10 bytes per row) and kept for the whole run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core.errors import ShardlineError
from shardline.core.schema import META_SHAPE
from shardline.trainer.holdout import id_hash64


class ShardFormatError(ShardlineError):
    """A shard file does not have the dataset's published-row schema."""


@dataclass(frozen=True)
class ShardIndex:
    labels: np.ndarray      # int64 [rows]
    hashes: np.ndarray      # uint64 [rows], see trainer.holdout


def _fsb_view(col: pa.Array, nbytes: int) -> np.ndarray:
    """``[len, nbytes]`` uint8 view of a fixed_size_binary column (no copy)."""
    buf = col.buffers()[1]
    flat = np.frombuffer(buf, np.uint8, count=len(col) * nbytes, offset=col.offset * nbytes)
    return flat.reshape(len(col), nbytes)


class OpenShard:
    """A shard file with per-record-batch pixel views (``segments``) and labels.

    Raises:
        ShardFormatError: the image column is missing or not ``fixed_size_binary`` of the
            expected size, or the schema's shape metadata disagrees with ``shape``.
    """

    def __init__(self, path: str | Path, shape: tuple[int, ...], image_column: str = "image",
                 key: str | None = None) -> None:
        self.path = str(path)
        self.key = key or self.path
        self.nbytes = int(np.prod(shape))
        self._map = pa.memory_map(self.path, "r")
        reader = ipc.open_file(self._map)
        self._check_schema(reader.schema, shape, image_column)
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        self._batches = batches          # keeps decompressed (LZ4) buffers alive
        self.segments = [_fsb_view(b.column(image_column), self.nbytes) for b in batches]
        self.rows = sum(len(s) for s in self.segments)
        self.starts = np.cumsum([0] + [len(s) for s in self.segments], dtype=np.int64)

    def _check_schema(self, schema: pa.Schema, shape: tuple[int, ...], column: str) -> None:
        idx = schema.get_field_index(column)
        if idx < 0:
            raise ShardFormatError(f"shard {self.key} has no column {column!r} "
                                   f"(columns: {schema.names}); is this a dataset shard?")
        typ = schema.field(idx).type
        if not pa.types.is_fixed_size_binary(typ) or typ.byte_width != self.nbytes:
            raise ShardFormatError(
                f"shard {self.key}: column {column!r} has type {typ}, expected "
                f"fixed_size_binary({self.nbytes}) for image shape {list(shape)}; the shard was "
                "written for another [dataset.image] shape"
            )
        meta = schema.metadata or {}
        if META_SHAPE in meta and tuple(json.loads(meta[META_SHAPE])) != tuple(shape):
            raise ShardFormatError(
                f"shard {self.key} declares image shape {json.loads(meta[META_SHAPE])}, the "
                f"config says {list(shape)}; train with the config the dataset was built with"
            )

    def index(self, id_column: str = "id", label_column: str = "label") -> ShardIndex:
        """Labels and id hashes of every row (vectorised; touches no pixels)."""
        labels = [b.column(label_column).to_numpy(zero_copy_only=False) for b in self._batches]
        hashes = [id_hash64(b.column(id_column)) for b in self._batches]
        return ShardIndex(
            labels=np.concatenate(labels).astype(np.int64) if labels else np.empty(0, np.int64),
            hashes=np.concatenate(hashes) if hashes else np.empty(0, np.uint64),
        )

    def locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(segment index, row within segment) for shard-level row numbers."""
        seg = np.searchsorted(self.starts, rows, side="right") - 1
        return seg.astype(np.int32), (rows - self.starts[seg]).astype(np.int64)

    def ids(self, rows: np.ndarray, id_column: str = "id") -> list[str]:
        """Ids of some rows (Python strings: for tests and reports, not the hot path)."""
        table = pa.Table.from_batches(self._batches)
        return table.column(id_column).take(pa.array(rows)).to_pylist()

    def close(self) -> None:
        self.segments = []
        self._batches = []
        self._map.close()
