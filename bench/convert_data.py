"""Conversion benchmark input: N records of 32x32x3 PNG images, as JSONL (base64 PNG) and as
Parquet (PNG bytes), each split over several objects (one Spark task reads whole objects:
a single large object would be a single task). Cached under ``.shardline/bench/``.

Pixels are synthetic (a random 16x16 image upsampled 2x: the PNGs are ~1.1 KB, so decoding
costs what real small photos cost); labels uniform over 10 classes.
"""

from __future__ import annotations

import base64
import io
import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardline.bench.common import DATA

FORMAT_VERSION = 1
FORMATS = ("jsonl", "parquet")


@dataclass(frozen=True)
class InputSpec:
    records: int
    objects: int = 8
    shape: tuple[int, int, int] = (32, 32, 3)
    classes: int = 10
    seed: int = 1

    @property
    def key(self) -> str:
        h, w, c = self.shape
        return f"convert-{self.records}-{self.objects}-{h}x{w}x{c}-s{self.seed}-v{FORMAT_VERSION}"

    def parts(self) -> list[tuple[int, int]]:
        """Record ranges [lo, hi) of the objects."""
        step = -(-self.records // self.objects)
        return [(lo, min(self.records, lo + step)) for lo in range(0, self.records, step)]


def _encode(args: tuple[InputSpec, int, int]) -> tuple[list[int], list[bytes]]:
    from PIL import Image

    spec, lo, hi = args
    rng = np.random.default_rng([spec.seed, lo])
    h, w, c = spec.shape
    labels = rng.integers(0, spec.classes, hi - lo).tolist()
    small = rng.integers(0, 256, (hi - lo, -(-h // 2), -(-w // 2), c), dtype=np.uint8)
    big = small.repeat(2, axis=1).repeat(2, axis=2)[:, :h, :w]
    pngs = []
    for img in big:
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG", compress_level=1)
        pngs.append(buf.getvalue())
    return labels, pngs


def ensure_inputs(spec: InputSpec, root: Path | None = None) -> dict[str, list[Path]]:
    """Write (once) and return the input objects per format."""
    base = (root or DATA) / spec.key
    out = {f: [base / f / f"part-{i:03d}.{f}" for i in range(len(spec.parts()))]
           for f in FORMATS}
    if (base / ".done").exists():
        return out
    for f in FORMATS:
        (base / f).mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(2) as pool:
        encoded = pool.map(_encode, [(spec, lo, hi) for lo, hi in spec.parts()])
        for i, ((lo, _), (labels, pngs)) in enumerate(zip(spec.parts(), encoded, strict=True)):
            ids = [f"c-{lo + j:08d}" for j in range(len(pngs))]
            lines = [json.dumps({"id": rid, "label": lab, "image": base64.b64encode(p).decode()})
                     for rid, lab, p in zip(ids, labels, pngs, strict=True)]
            out["jsonl"][i].write_text("\n".join(lines) + "\n")
            table = pa.table({"id": ids, "label": pa.array(labels, pa.int64()),
                              "image": pa.array(pngs, pa.binary())})
            pq.write_table(table, str(out["parquet"][i]))
    (base / ".done").touch()
    return out
