"""A version's tensor and image columns as numpy arrays (for ``Dataset.array`` and
``Dataset.to_pandas``).

A column of a field (``shardline.core.fields``) stored as ``fixed_shape_tensor`` (or the
legacy ``fixed_size_binary`` image) becomes one ``[N, *shape]`` array in the stored shape
(an image H, W, C), a view of the Arrow buffer when the table holds one chunk. In pandas
each row holds its own N-d array (a view into that block), not Arrow's flat list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from shardline.trainer.columns import Column, Layout

if TYPE_CHECKING:
    import pandas as pd


def column_array(table: pa.Table, col: Column) -> np.ndarray:
    """``[N, *col.stored]`` array of ``col`` in ``table`` (a scalar column: ``[N]``)."""
    chunked = table.column(col.source)
    if not col.stored:
        return chunked.to_numpy()
    if chunked.num_chunks == 0 or len(chunked) == 0:
        return np.empty((0, *col.stored), np.dtype(col.dtype))
    arr = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    raw = col.segment(arr)      # [N, nbytes] bytes, zero-copy for tensors and images
    return raw.view(np.dtype(col.dtype)).reshape(len(arr), *col.stored)


def tensor_columns(layout: Layout, names: list[str]) -> list[Column]:
    """The layout's N-d columns (tensors, images, multi-label or shaped targets) that
    ``names`` (a table's columns) holds."""
    return [c for c in layout.columns if c.stored and c.source in names]


def to_frame(table: pa.Table, layout: Layout) -> pd.DataFrame:
    """``table`` as a DataFrame whose tensor and image cells are numpy N-d arrays."""
    import pandas as pd

    cols = tensor_columns(layout, table.column_names)
    df = table.drop_columns([c.source for c in cols]).to_pandas()
    for c in cols:
        block = column_array(table, c)
        df[c.source] = pd.Series(list(block), index=df.index, dtype=object)
    return df[table.column_names]
