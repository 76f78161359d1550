"""Demo and test data: scikit-learn's digits (1,797 real 8x8 grayscale images, 10 classes,
shipped inside the package; no download), written as uploads in every input format.

Pixels are scaled from 0..16 to 0..255 and PNG-encoded, as a labelling tool would export
them. ``corrupt`` helpers make the bad rows the pipeline must quarantine.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from shardline.core.store import Store
from shardline.resources import require_extra

CLASSES = [str(i) for i in range(10)]


@dataclass(frozen=True)
class Digit:
    id: str
    label: int
    pixels: np.ndarray   # (8, 8) uint8

    def png(self) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(self.pixels, mode="L").save(buf, format="PNG")
        return buf.getvalue()

    def b64(self) -> str:
        return base64.b64encode(self.png()).decode()


def digits(start: int = 0, stop: int | None = None, prefix: str = "d") -> list[Digit]:
    """Digits ``start:stop`` with ids ``<prefix>00000``..."""
    require_extra("sklearn", "demo", "the demo's digits data (scikit-learn)")
    from sklearn.datasets import load_digits

    data = load_digits()
    images = np.clip(data.images * 16, 0, 255).astype(np.uint8)
    stop = len(images) if stop is None else stop
    return [Digit(f"{prefix}{i:05d}", int(data.target[i]), images[i]) for i in range(start, stop)]


def jsonl_bytes(items: Iterable[Digit], label_as_name: bool = False) -> bytes:
    lines = [json.dumps({"id": d.id, "label": CLASSES[d.label] if label_as_name else d.label,
                         "image": d.b64()}) for d in items]
    return ("\n".join(lines) + "\n").encode()


def csv_bytes(items: Iterable[Digit]) -> bytes:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["id", "label", "image"])
    for d in items:
        w.writerow([d.id, d.label, d.b64()])
    return out.getvalue().encode()


def parquet_bytes(items: Iterable[Digit]) -> bytes:
    items = list(items)
    table = pa.table({"id": [d.id for d in items], "label": [d.label for d in items],
                      "image": pa.array([d.png() for d in items], pa.binary())})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def upload_image_folder(store: Store, prefix: str, items: Iterable[Digit]) -> int:
    """``<prefix>/<class name>/<id>.png`` per image; returns the count."""
    n = 0
    for d in items:
        store.put_bytes(f"{prefix.rstrip('/')}/{CLASSES[d.label]}/{d.id}.png", d.png(),
                        content_type="image/png")
        n += 1
    return n


def upload_zarr(store: Store, key: str, items: Iterable[Digit], with_ids: bool = True,
                chunk_rows: int = 256) -> int:
    """A Zarr v3 group at ``key`` (ending in .zarr) with images (N,8,8,1), labels, ids."""
    import zarr
    from zarr.storage import FsspecStore

    items = list(items)
    url, options = store.fsspec_url(key.rstrip("/"))
    zstore = FsspecStore.from_url(url, storage_options=options)
    group = zarr.open_group(store=zstore, mode="w")
    images = np.stack([d.pixels for d in items])[..., None]
    group.create_array("images", data=images, chunks=(chunk_rows, 8, 8, 1))
    group.create_array("labels", data=np.array([d.label for d in items], dtype=np.int64),
                       chunks=(chunk_rows,))
    if with_ids:
        ids = group.create_array("ids", shape=(len(items),), dtype=str, chunks=(chunk_rows,))
        ids[:] = np.array([d.id for d in items], dtype=object)
    return len(items)


def bad_jsonl_lines() -> list[tuple[str, str | None]]:
    """(line, expected rule, expected id) for rows every pipeline must quarantine."""
    good = digits(0, 1)[0]
    rgb = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8), mode="RGB").save(rgb, format="PNG")
    big = io.BytesIO()
    Image.fromarray(np.zeros((9, 8), np.uint8), mode="L").save(big, format="PNG")
    return [
        (json.dumps({"id": "bad-label", "label": "eleven", "image": good.b64()}), "unknown_label"),
        (json.dumps({"id": "no-label", "image": good.b64()}), "missing_label"),
        (json.dumps({"label": 3, "image": good.b64()}), "missing_id"),
        (json.dumps({"id": "not-png", "label": 1, "image": base64.b64encode(b"hello").decode()}),
         "undecodable_image"),
        (json.dumps({"id": "bad-b64", "label": 1, "image": "***"}), "undecodable_image"),
        (json.dumps({"id": "rgb", "label": 1, "image": base64.b64encode(rgb.getvalue()).decode()}),
         "wrong_shape"),
        (json.dumps({"id": "tall", "label": 2, "image": base64.b64encode(big.getvalue()).decode()}),
         "wrong_shape"),
        (json.dumps({"id": "no-image", "label": 2}), "missing_image"),
        ('{"id": "broken", "label": 1, "ima', "unparseable_record"),
        ("[1, 2, 3]", "unparseable_record"),
    ]


def upload_demo_part(store: Store, incoming: str, part: int) -> dict[str, int]:
    """The demo's uploads. Part 1: a JSONL export of 1,000 digits plus a few broken lines
    (so quarantine has something to show). Part 2: a Zarr group of 500 digits and an
    ImageFolder of the remaining 297 PNGs, one of which repeats a part-1 id."""
    base = incoming.rstrip("/")
    if part == 1:
        items = digits(0, 1000)
        bad = "\n".join(line for line, _ in bad_jsonl_lines()[:4]) + "\n"
        store.put_bytes(f"{base}/upload-1/digits.jsonl", jsonl_bytes(items) + bad.encode(),
                        content_type="application/x-ndjson")
        return {"objects": 1, "rows": len(items) + 4}
    if part == 2:
        n = upload_zarr(store, f"{base}/upload-2/digits.zarr", digits(1000, 1500))
        folder = digits(1500, 1797) + [digits(5, 6)[0]]   # d00005 is already in part 1
        m = upload_image_folder(store, f"{base}/upload-2/images", folder)
        return {"objects": 1 + m, "rows": n + m}
    raise ValueError(f"the demo has parts 1 and 2, not {part}")
