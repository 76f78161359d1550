"""Uploads for the typed-field examples (``examples/*.toml``), generated or shipped with a
package, so every example runs without a download:

- ``sentinel``: a multi-band float32 Zarr group (13 bands of 32 x 32 per sample, a land-cover
  class), generated with per-class band means so a model can learn it;
- ``diabetes``: scikit-learn's diabetes table (442 rows, 10 float64 features, a float
  progression target) as Parquet with a fixed-size-list feature column;
- ``tags``: 16 x 16 RGB PNG images in JSONL with a multi-label target (which of red, green,
  blue the image holds).

Each ``put_*`` writes the upload under an ``incoming/`` prefix and returns the rows it wrote
(id -> the values a round trip must give back bit for bit).
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from shardline.core.store import Store
from shardline.resources import require_extra

SENTINEL_CLASSES = ["water", "forest", "crops", "urban"]
TAGS = ["red", "green", "blue"]


def sentinel_arrays(n: int, seed: int = 0, start: int = 0
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, bands (n, 13, 32, 32) float32, labels (n,) int16)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(SENTINEL_CLASSES), n).astype(np.int16)
    means = np.linspace(0.0, 1.0, 13, dtype=np.float32)[None, :] * \
        (1 + np.arange(len(SENTINEL_CLASSES), dtype=np.float32))[:, None]
    bands = rng.standard_normal((n, 13, 32, 32), dtype=np.float32) * 0.5
    bands += means[labels][:, :, None, None]
    ids = np.array([f"s2-{start + i:06d}" for i in range(n)])
    return ids, bands, labels


def put_sentinel(store: Store, key: str, n: int, seed: int = 0, chunk: int = 64,
                 **arrays: Any) -> dict[str, tuple[np.ndarray, int]]:
    """A Zarr group at ``key`` (a folder ending ``.zarr``) with ``ids``, ``bands`` and
    ``label`` (``arrays`` may replace or add any, or drop one with None). Returns id ->
    (bands, label)."""
    import zarr
    from zarr.storage import FsspecStore

    ids, bands, labels = sentinel_arrays(n, seed)
    data: dict[str, Any] = {"ids": ids, "bands": bands, "label": labels, **arrays}
    url, options = store.fsspec_url(key.rstrip("/"))
    zstore = FsspecStore.from_url(url, storage_options=options)
    group = zarr.open_group(store=zstore, mode="w")
    for name, value in data.items():
        if value is None:
            continue
        value = np.asarray(value)
        dtype = str if value.dtype.kind == "U" else value.dtype
        arr = group.create_array(name, shape=value.shape, dtype=dtype,
                                 chunks=(min(chunk, max(len(value), 1)), *value.shape[1:]))
        arr[...] = value
    if data.get("ids") is None or data.get("bands") is None or data.get("label") is None:
        return {}
    ids, bands, labels = (np.asarray(data[k]) for k in ("ids", "bands", "label"))
    return {str(i): (b, int(lab)) for i, b, lab in zip(ids, bands, labels, strict=False)}


def diabetes_table() -> pa.Table:
    """scikit-learn's diabetes data: ``id``, ``features`` (fixed_size_list<double>[10]) and
    ``progression`` (double)."""
    require_extra("sklearn", "demo", "the diabetes example's data (scikit-learn)")
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    x = np.ascontiguousarray(d.data, np.float64)
    feats = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])
    return pa.table({"id": [f"db-{i:04d}" for i in range(len(x))], "features": feats,
                     "progression": pa.array(d.target.astype(np.float64))})


def put_diabetes(store: Store, key: str, rows: slice = slice(None)) -> pa.Table:
    table = diabetes_table()
    start, stop, _ = rows.indices(table.num_rows)
    part = table.slice(start, stop - start)
    buf = io.BytesIO()
    pq.write_table(part, buf)
    store.put_bytes(key, buf.getvalue())
    return part


def tag_rows(n: int, seed: int = 0, start: int = 0) -> list[dict[str, Any]]:
    """Rows of a 16 x 16 RGB image whose channels hold noise or a bright square; the tags
    are the channels with a square."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        tags = [t for t in TAGS if rng.random() < 0.5]
        img = rng.integers(0, 60, (16, 16, 3), dtype=np.uint8)
        for t in tags:
            img[4:12, 4:12, TAGS.index(t)] = 200 + rng.integers(0, 55)
        png = io.BytesIO()
        Image.fromarray(img).save(png, "PNG")
        out.append({"id": f"tag-{start + i:05d}", "tags": tags, "pixels": img,
                    "image": base64.b64encode(png.getvalue()).decode()})
    return out


def put_tags(store: Store, key: str, rows: list[dict[str, Any]],
             extra_lines: tuple[str, ...] | list[str] = ()) -> None:
    lines = [json.dumps({"id": r["id"], "tags": r["tags"], "image": r["image"]})
             for r in rows]
    store.put_bytes(key, ("\n".join([*lines, *extra_lines]) + "\n").encode())
