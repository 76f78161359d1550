"""One shard opened for reading: memory-mapped Arrow IPC, each gathered column as numpy views.

An uncompressed shard is mapped, and each record batch's column of every field (and of a
gathered target) becomes a ``[rows, nbytes]`` uint8 numpy view into the map
(``trainer.columns``): opening costs microseconds and no byte is copied until the batcher
gathers rows. An LZ4 shard is decompressed by Arrow once per record batch when opened; the
decompressed batches are then used the same way.

``ShardIndex`` is what the loader needs to know about a shard without its payload: class
labels (zeros for other targets) and the id hashes that decide the held-out split and the
replay sample. It is small (16 bytes per row) and kept for the whole run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core.schema import META_SHAPE
from shardline.trainer.columns import Column, Layout, ShardFormatError
from shardline.trainer.holdout import id_hash64

__all__ = ["OpenShard", "ShardFormatError", "ShardIndex", "image_layout"]


@dataclass(frozen=True)
class ShardIndex:
    labels: np.ndarray      # int64 [rows] (class targets; zeros otherwise)
    hashes: np.ndarray      # uint64 [rows], see trainer.holdout


def image_layout(shape: tuple[int, ...], image_column: str = "image") -> Layout:
    """The legacy layout: one uint8 HWC ``image`` column and a class ``label``."""
    h, w, c = shape
    return Layout((Column("image", image_column, "uint8", (h, w, c), image=True),),
                  "label", "label")


class OpenShard:
    """A shard file with per-record-batch column views (``segments[i][c]``: record batch
    ``i``, column ``c`` of the layout).

    ``layout``: the dataset's :class:`Layout`, or an image shape (H, W, C) for the legacy
    image + label layout.

    Raises:
        ShardFormatError: a column is missing or stored with another type or shape than
            declared, or the legacy shape metadata disagrees with the image's shape.
    """

    def __init__(self, path: str | Path, layout: Layout | tuple[int, ...],
                 image_column: str = "image", key: str | None = None) -> None:
        if not isinstance(layout, Layout):
            layout = image_layout(tuple(layout), image_column)
        self.path = str(path)
        self.key = key or self.path
        self.layout = layout
        self.nbytes = layout.row_bytes
        self._map = pa.memory_map(self.path, "r")
        reader = ipc.open_file(self._map)
        self._check_schema(reader.schema)
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        self._batches = batches          # keeps decompressed (LZ4) buffers alive
        self.segments = [tuple(c.read(b) for c in layout.columns) for b in batches]
        self.rows = sum(b.num_rows for b in batches)
        self.starts = np.cumsum([0] + [b.num_rows for b in batches], dtype=np.int64)

    def _check_schema(self, schema: pa.Schema) -> None:
        for col in self.layout.columns:
            col.check(schema, self.key)
        meta = schema.metadata or {}
        images = [c for c in self.layout.columns if c.image]
        if META_SHAPE in meta and len(images) == 1:
            declared = tuple(json.loads(meta[META_SHAPE]))
            if declared != images[0].stored:
                raise ShardFormatError(
                    f"shard {self.key} declares image shape {list(declared)}, the config "
                    f"says {list(images[0].stored)}; train with the config the dataset was "
                    "built with")

    def index(self, id_column: str | None = None, label_column: str | None = None
              ) -> ShardIndex:
        """Class labels and id hashes of every row (vectorised; touches no payload)."""
        id_column = id_column or self.layout.id_source
        label_column = label_column or self.layout.label_source
        if label_column is None:
            labels = [np.zeros(b.num_rows, np.int64) for b in self._batches]
        else:
            labels = [b.column(label_column).to_numpy(zero_copy_only=False)
                      for b in self._batches]
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
