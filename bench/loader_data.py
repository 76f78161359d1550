"""The loader benchmark's data: synthetic images written once in every contender's format.

Pixels are synthetic (throughput does not depend on what they show): a random image at
half the resolution, upsampled 2x, so LZ4 and PNG compress it roughly 2-3x, like smooth
photographs more than like noise. Labels are uniform over 10 classes. Every format holds
the same pixels and labels; everything is cached under ``.shardline/bench/<key>/`` and
rebuilt only when the set's spec (or ``FORMAT_VERSION``) changes.

Shardline's shards are written as the ingest writes them (``tasks.shards.encode_ipc``,
``data_schema``, partitioned by label, sized by ``ShardSpec.rows_per_shard``), straight
into a shard-cache folder under their sha256 names, i.e. a warm trainer cache; the
version document (built by ``shardline.core.builder``, as ingest does) and the objects it
references are kept beside them. The PNG folder of the large set holds a subset (encoding
224x224 PNGs is slow and the reader's cost per image does not depend on the folder size).
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from shardline.bench.common import DATA
from shardline.core import layout
from shardline.core.builder import NewBatch, build_version
from shardline.core.config import DatasetConfig, ImageSpec, ShardSpec, config_to_dict
from shardline.core.manifest import Manifest
from shardline.core.parts import ShardEntry, ValidationSummary, content_digests
from shardline.core.schema import data_schema, schema_info
from shardline.tasks.convert.shard_writer import encode_ipc

FORMAT_VERSION = 3   # 2: manifests carry xxh3_128; 3: format-2 manifest + its objects


@dataclass(frozen=True)
class SetSpec:
    name: str                          # "S" or "L"
    rows: int
    shape: tuple[int, int, int]
    png_rows: int                      # images in the PNG folder (a subset for L)
    classes: int = 10
    seed: int = 0

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape))

    @property
    def key(self) -> str:
        h, w, c = self.shape
        return (f"{self.name}-{self.rows}-{h}x{w}x{c}-png{self.png_rows}-s{self.seed}"
                f"-v{FORMAT_VERSION}")

    def dataset(self, compression: str = "none") -> DatasetConfig:
        return DatasetConfig(name=f"bench-{self.name.lower()}", incoming="incoming/bench/",
                             classes=tuple(str(i) for i in range(self.classes)),
                             image=ImageSpec(shape=self.shape),
                             shards=ShardSpec(compression=compression))  # type: ignore[arg-type]


def pixels(spec: SetSpec) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [rows, H*W*C], labels int64 [rows]), deterministic for the spec."""
    rng = np.random.default_rng(spec.seed)
    labels = rng.integers(0, spec.classes, spec.rows).astype(np.int64)
    h, w, c = spec.shape
    out = np.empty((spec.rows, spec.nbytes), np.uint8)
    step = max(1, (64 << 20) // spec.nbytes)
    for lo in range(0, spec.rows, step):
        hi = min(spec.rows, lo + step)
        small = rng.integers(0, 256, (hi - lo, -(-h // 2), -(-w // 2), c), dtype=np.uint8)
        big = small.repeat(2, axis=1).repeat(2, axis=2)[:, :h, :w]
        out[lo:hi] = big.reshape(hi - lo, -1)
    return out, labels


class SetFiles:
    """Paths of one set's files; ``ensure(fmt)`` builds a format once."""

    def __init__(self, spec: SetSpec, images: np.ndarray, labels: np.ndarray,
                 root: Path | None = None) -> None:
        self.spec, self.images, self.labels = spec, images, labels
        self.root = (root or DATA) / spec.key
        self.root.mkdir(parents=True, exist_ok=True)
        self.raw = self.root / "raw.arrow"
        self.parquet = self.root / "data.parquet"
        self.png = self.root / "png"
        self.wds = self.root / "wds"
        self.hf = self.root / "hf"

    def cache_dir(self, compression: str) -> Path:
        return self.root / f"cache-{compression}"

    def manifest(self, compression: str) -> Manifest:
        self.ensure(f"shards-{compression}")
        folder = self.cache_dir(compression)
        data = json.loads((folder / "manifest.json").read_text())
        return Manifest(data, lambda key: (folder / "objects" / key).read_bytes())

    def ensure(self, fmt: str) -> None:
        done = self.root / f".done-{fmt}"
        if done.exists():
            return
        builders: dict[str, Callable[[], None]] = {
            "raw": self._raw, "parquet": self._parquet, "png": self._png, "wds": self._wds,
            "hf": self._hf, "shards-none": lambda: self._shards("none"),
            "shards-lz4": lambda: self._shards("lz4")}
        builders[fmt]()
        done.touch()

    def ids(self, rows: np.ndarray) -> list[str]:
        return [f"{self.spec.name}-{i:07d}" for i in rows.tolist()]

    def _fsb(self, rows: np.ndarray | slice) -> pa.FixedSizeBinaryArray:
        block = np.ascontiguousarray(self.images[rows])
        return pa.FixedSizeBinaryArray.from_buffers(pa.binary(self.spec.nbytes), len(block),
                                                    [None, pa.py_buffer(block)])

    def _shards(self, compression: str) -> None:
        cfg = self.spec.dataset(compression)
        folder = self.cache_dir(compression)
        folder.mkdir(exist_ok=True)
        per_shard = cfg.shards.rows_per_shard(cfg.image.nbytes + 32)
        batch = f"bench{self.spec.rows}"
        entries = []
        for label in range(self.spec.classes):
            rows = np.flatnonzero(self.labels == label)
            for part, lo in enumerate(range(0, len(rows), per_shard)):
                r = rows[lo:lo + per_shard]
                table = pa.Table.from_arrays(
                    [pa.array(self.ids(r), pa.string()),
                     pa.array(self.labels[r].astype(np.int16)), self._fsb(r),
                     pa.array(["incoming/bench/synthetic"] * len(r), pa.string()),
                     pa.array(r.astype(np.int64))], schema=data_schema(cfg))
                buf = encode_ipc(table, compression, cfg.shards.record_batch_rows)
                sha, xxh = content_digests(memoryview(buf))
                (folder / f"{sha}.arrow").write_bytes(memoryview(buf))
                entries.append(ShardEntry(
                    path=layout.shard_key(cfg.prefix, batch, label, part, "bench"), rows=len(r),
                    bytes=buf.size, sha256=sha, xxh3_128=xxh, batch=batch,
                    partition={"batch": batch, "label": str(label)}, compression=compression,
                    stats={"label": {"min": label, "max": label}},
                    label_counts={str(label): len(r)}))
        draft = build_version(
            cfg.prefix, dataset=cfg.name, schema=schema_info(cfg), config=config_to_dict(cfg),
            parent=None, batch=NewBatch(id=batch, run="bench", shards=entries, ids_path=""),
            validation=ValidationSummary(success=True))
        for key, body in draft.objects.items():
            path = folder / "objects" / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
        (folder / "manifest.json").write_bytes(draft.body)

    def _raw(self) -> None:
        table = pa.table({"image": self._fsb(slice(None)), "label": pa.array(self.labels)})
        with ipc.new_file(str(self.raw), table.schema) as w:
            w.write_table(table, max_chunksize=self.spec.rows)   # one record batch

    def _parquet(self) -> None:
        table = pa.table({"image": self._fsb(slice(None)), "label": pa.array(self.labels)})
        pq.write_table(table, str(self.parquet), row_group_size=parquet_row_group(self.spec),
                       use_dictionary=["label"])

    def _png(self) -> None:
        from PIL import Image

        h, w, c = self.spec.shape
        for i in range(self.spec.png_rows):
            folder = self.png / str(int(self.labels[i]))
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(self.images[i].reshape(h, w, c)).save(
                folder / f"{i:07d}.png", compress_level=1)

    def _wds(self) -> None:
        """WebDataset tar shards of ~64 MB: ``<key>.pix`` (raw HWC bytes) + ``<key>.cls``."""
        self.wds.mkdir(exist_ok=True)
        per_tar = max(1, (64 << 20) // self.spec.nbytes)
        for t, lo in enumerate(range(0, self.spec.rows, per_tar)):
            with tarfile.open(self.wds / f"shard-{t:05d}.tar", "w") as tar:
                for i in range(lo, min(self.spec.rows, lo + per_tar)):
                    for ext, data in (("pix", self.images[i].tobytes()),
                                      ("cls", str(int(self.labels[i])).encode())):
                        info = tarfile.TarInfo(f"{i:07d}.{ext}")
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))

    def _hf(self) -> None:
        import datasets
        from datasets import Features, List, Value

        datasets.disable_progress_bars()
        col = pa.FixedSizeListArray.from_arrays(pa.array(self.images.reshape(-1)),
                                                self.spec.nbytes)
        feats = Features({"image": List(Value("uint8"), length=self.spec.nbytes),
                          "label": Value("int64")})
        ds = datasets.Dataset(pa.table({"image": col, "label": pa.array(self.labels)}),
                              info=datasets.DatasetInfo(features=feats))
        ds.save_to_disk(str(self.hf))


def parquet_row_group(spec: SetSpec) -> int:
    """About 8 MB row groups (1/8 of pyarrow's 64 MB default, so a shuffle can mix more)."""
    return max(256, (8 << 20) // spec.nbytes)
