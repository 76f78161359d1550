"""Uploads for the typed-field examples (``examples/*.toml``), generated or shipped with a
package, so every example runs without a download:

- ``sentinel``: a multi-band float32 Zarr group (13 bands of 32 x 32 per sample, a land-cover
  class), generated with per-class band means so a model can learn it;
- ``diabetes``: scikit-learn's diabetes table (442 rows, 10 float64 features, a float
  progression target) as Parquet with a fixed-size-list feature column;
- ``tags``: 16 x 16 RGB PNG images in JSONL with a multi-label target (which of red, green,
  blue the image holds).

Each ``put_*`` writes the upload under an ``incoming/`` prefix and returns the rows it wrote
(id -> the values a round trip must give back bit for bit). :func:`write_example` writes the
same files into a local folder (``shardline example NAME``), for ``shardline upload``.
"""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from shardline.core.errors import ConfigError
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
    from zarr.storage import FsspecStore

    url, options = store.fsspec_url(key.rstrip("/"))
    return _sentinel_group(FsspecStore.from_url(url, storage_options=options), n, seed, chunk,
                           **arrays)


def _sentinel_group(zstore: Any, n: int, seed: int, chunk: int,
                    **arrays: Any) -> dict[str, tuple[np.ndarray, int]]:
    """Write the sentinel group into ``zstore`` (a zarr store, or a local folder's path)."""
    import zarr

    ids, bands, labels = sentinel_arrays(n, seed)
    data: dict[str, Any] = {"ids": ids, "bands": bands, "label": labels, **arrays}
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
    part, data = _diabetes_parquet(rows)
    store.put_bytes(key, data)
    return part


def _diabetes_parquet(rows: slice) -> tuple[pa.Table, bytes]:
    """``rows`` of :func:`diabetes_table`, and those rows as a Parquet file."""
    table = diabetes_table()
    start, stop, _ = rows.indices(table.num_rows)
    part = table.slice(start, stop - start)
    buf = io.BytesIO()
    pq.write_table(part, buf)
    return part, buf.getvalue()


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
    store.put_bytes(key, _tags_jsonl(rows, extra_lines))


def _tags_jsonl(rows: list[dict[str, Any]], extra_lines: tuple[str, ...] | list[str] = ()
                ) -> bytes:
    lines = [json.dumps({"id": r["id"], "tags": r["tags"], "image": r["image"]})
             for r in rows]
    return ("\n".join([*lines, *extra_lines]) + "\n").encode()


@dataclass(frozen=True)
class Example:
    """One example's upload as ``shardline example NAME`` writes it: ``file`` under the
    output folder, ``rows`` rows by default (at most ``max_rows`` where the data is fixed)."""

    file: str
    what: str
    rows: int
    max_rows: int | None = None


EXAMPLES = {
    "sentinel": Example("sentinel.zarr", "a Zarr group of 13-band 32 x 32 float32 tiles, "
                        "4 land-cover classes", 512),
    "diabetes": Example("diabetes.parquet", "scikit-learn's diabetes table as Parquet "
                        "(10 float64 features, a regression target)", 442, 442),
    "tags": Example("tags.jsonl", "16 x 16 RGB PNGs in JSONL, each tagged with a subset of "
                    "red, green, blue", 600),
}


@dataclass(frozen=True)
class Written:
    example: str
    path: Path       # the file, or the Zarr group's folder
    rows: int
    bytes: int


def write_example(name: str, out: Path, rows: int | None = None) -> Written:
    """Write example ``name``'s upload into the folder ``out`` (made if absent; an earlier
    copy of the same file is replaced), ``rows`` rows (default: the example's).

    Raises:
        ConfigError: an unknown name, a row count out of range, ``out`` being a file.
    """
    ex = EXAMPLES.get(name)
    if ex is None:
        raise ConfigError(f"unknown example {name!r}: choose one of {', '.join(EXAMPLES)} "
                          "(each has its dataset TOML in examples/)")
    n = ex.rows if rows is None else rows
    top = ex.max_rows or n
    if not 1 <= n <= top:
        limit = f"1..{ex.max_rows} (the data has {ex.max_rows} rows)" if ex.max_rows \
            else "at least 1"
        raise ConfigError(f"--rows {n}: the {name} example takes {limit}; give --rows in range "
                          "or leave it out")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} is a file: give --out a folder to write the example into")
    out.mkdir(parents=True, exist_ok=True)
    path = out / ex.file
    if name == "sentinel":
        require_extra("zarr", "ingest", "the sentinel example's Zarr group")
        _sentinel_group(str(path), n, seed=0, chunk=64)
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    else:
        data = _diabetes_parquet(slice(0, n))[1] if name == "diabetes" \
            else _tags_jsonl(tag_rows(n))
        path.write_bytes(data)
        size = len(data)
    return Written(name, path, n, size)
