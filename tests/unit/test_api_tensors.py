"""Tensor and image columns as numpy arrays for the notebook API (``shardline.api.tensors``):
one ``[N, *shape]`` block in the stored shape (a view of the Arrow buffer when it can be),
pandas cells as N-d arrays, the legacy ``fixed_size_binary`` image included, empty tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.api.tensors import column_array, to_frame
from shardline.core.fields import dataset_info
from shardline.trainer.columns import layout_for
from shardline.trainer.shard_file import image_layout
from tests.unit.trainer.typed_data import shard_bytes, typed_config, value


def test_typed_columns_become_arrays_and_pandas_cells(tmp_path: Path) -> None:
    cfg = typed_config(record_batch_rows=7)
    info, lay = dataset_info(cfg), layout_for(dataset_info(cfg))
    rows = np.arange(20, 40)
    path = tmp_path / "s.arrow"
    path.write_bytes(shard_bytes(cfg, rows, "none"))
    table = ipc.open_file(pa.memory_map(str(path))).read_all()       # three chunks
    cols = {c.name: c for c in lay.columns}
    bands = column_array(table, cols["bands"])
    assert bands.shape == (20, 13, 32, 32) and np.array_equal(bands, value(info, "bands", rows))
    one = column_array(table.slice(0, 5).combine_chunks(), cols["rgb16"])
    assert one.shape == (5, 6, 5, 3) and not one.flags.owndata          # a view
    df = to_frame(table, lay)
    assert list(df.columns) == table.column_names
    assert df["valid"].iloc[3].dtype == np.bool_ and df["valid"].iloc[3].shape == (4, 4)
    assert np.array_equal(df["valid"].iloc[3], value(info, "valid", rows[3:4])[0])
    assert np.array_equal(np.stack(df["tags"]), value(info, "tags", rows))
    assert df["note"].iloc[0] == "row 20" and df["elevation"].dtype == np.float32
    empty = to_frame(table.slice(0, 0), lay)
    assert len(empty) == 0 and list(empty.columns) == table.column_names
    assert column_array(table.slice(0, 0), cols["bands"]).shape == (0, 13, 32, 32)


def test_the_legacy_image_column_reads_as_hwc_arrays() -> None:
    pix = np.random.default_rng(0).integers(0, 256, (6, 4 * 3 * 2), dtype=np.uint8)
    image = pa.FixedSizeBinaryArray.from_buffers(pa.binary(24), 6,
                                                 [None, pa.py_buffer(pix.tobytes())])
    table = pa.table({"id": [str(i) for i in range(6)], "label": pa.array(range(6),
                      pa.int16()), "image": image})
    lay = image_layout((4, 3, 2))
    assert np.array_equal(column_array(table, lay.columns[0]), pix.reshape(6, 4, 3, 2))
    df = to_frame(table, lay)
    assert df["image"].iloc[2].shape == (4, 3, 2) and df["label"].tolist() == list(range(6))
