"""Loader contenders. Each is a generator of ``(images, labels)``: images a uint8 tensor
[B, C, H, W] (a channels-last view of HWC bytes, as shardline delivers it), labels int64
[B], shuffled, endless (epoch after epoch). A generator may reuse its batch buffer once the
consumer asks for the next batch, as shardline's trainer loop allows (it releases a batch
after its step).

The shardline contender is the trainer's own pipeline: ``ShardCache`` + ``ShardFetcher`` +
``ShardReader`` + ``make_plan`` + ``ShardStream`` + ``make_train_loader`` with the
trainer's defaults (``TrainConfig``, ``LoaderSpec``), built the way ``trainer.run`` builds
them; nothing is stripped. The peers (MosaicML Streaming, LitData) are in ``bench.peers``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import torch

from shardline.bench.loader_data import SetFiles
from shardline.core.config import TrainConfig
from shardline.core.store import ObjectStore
from shardline.trainer.cache import ShardCache
from shardline.trainer.fetch import ShardFetcher
from shardline.trainer.loader import make_train_loader
from shardline.trainer.options import LoaderSpec
from shardline.trainer.plan import make_plan
from shardline.trainer.shard_reader import ShardReader
from shardline.trainer.stream import ShardStream

BATCH = 256
# Batches are views of read-only maps (shardline, raw Arrow); consumers only read them.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]


def nchw(images: np.ndarray, shape: tuple[int, int, int]) -> torch.Tensor:
    h, w, c = shape
    return torch.from_numpy(images).view(-1, h, w, c).permute(0, 3, 1, 2)


def _epochs(n: int, seed: int = 0) -> Iterator[np.ndarray]:
    rng = np.random.default_rng(seed)
    while True:
        perm = rng.permutation(n)
        for lo in range(0, n - BATCH + 1, BATCH):
            yield perm[lo:lo + BATCH]


def numpy_gather(images: np.ndarray, labels: np.ndarray, shape: tuple[int, int, int]) -> Batches:
    """Shuffled batch gather from one [N, nbytes] array (in RAM, or a view of a map)."""
    buf = np.empty((BATCH, images.shape[1]), np.uint8)
    out = nchw(buf, shape)
    for idx in _epochs(len(images)):
        images.take(idx, 0, buf, "clip")
        yield out, torch.from_numpy(labels.take(idx))


def raw_view(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images as a rows x bytes uint8 view, labels) of a memory-mapped raw Arrow IPC file
    (one record batch)."""
    batch = ipc.open_file(pa.memory_map(str(path))).get_batch(0)
    col = batch.column(0)
    nbytes = col.type.byte_width
    view = np.frombuffer(col.buffers()[1], np.uint8, count=len(col) * nbytes,
                         offset=col.offset * nbytes).reshape(len(col), nbytes)
    return view, batch.column(1).to_numpy()


def raw_arrow(path: Path, shape: tuple[int, int, int]) -> Batches:
    """Memory-mapped Arrow IPC file (one record batch), numpy gather, no framework."""
    yield from numpy_gather(*raw_view(path), shape)


class ShardlineSet:
    """The trainer's loader objects over one published version sitting in a shard cache."""

    def __init__(self, files: SetFiles, compression: str, store: ObjectStore,
                 cache_root: Path | None = None, spec: LoaderSpec | None = None,
                 train: TrainConfig | None = None, pin_memory: bool = False,
                 prebuild: bool = True, arena: bool = True) -> None:
        self.cfg = files.spec.dataset(compression)
        self.pin_memory, self.prebuild, self.arena = pin_memory, prebuild, arena
        self.spec, self.train = spec or LoaderSpec(), train or TrainConfig(batch_size=BATCH)
        self.manifest = files.manifest(compression)
        cache = ShardCache(cache_root or files.cache_dir(compression),
                           int(self.train.cache_max_gb * 2**30), store)
        self.fetcher = ShardFetcher(cache, self.train.fetch_threads)
        self.reader = ShardReader(self.fetcher, self.cfg,
                                  keep_open_bytes=int(self.spec.keep_open_mb * 2**20))
        self.plan = make_plan(self.manifest, None, self.train.replay_ratio,
                              self.train.holdout_fraction, self.train.seed)

    def stream(self, epochs: int) -> ShardStream:
        t = self.train
        return ShardStream(self.plan, self.reader, batch_size=t.batch_size, epochs=epochs,
                           seed=t.seed, window_rows=t.shuffle_window,
                           window_min_shards=self.spec.window_min_shards,
                           pin_memory=self.pin_memory,
                           lookahead_bytes=int(self.spec.lookahead_mb * 2**20),
                           prebuild=self.prebuild, arena_bytes=None if self.arena else 0)

    def batches(self, epochs: int = 10**6) -> Batches:
        stream = self.stream(epochs)
        for b in make_train_loader(stream, self.spec):
            yield b["image"], b["label"]
            stream.release(b)          # what the trainer's step does once it is done

    def close(self) -> None:
        self.fetcher.close()


def parquet_row_groups(path: Path, shape: tuple[int, int, int], seed: int = 0) -> Batches:
    """Row groups in shuffled order, rows shuffled within each group, batches across them."""
    pf = pq.ParquetFile(str(path), memory_map=True)
    rng = np.random.default_rng(seed)
    nbytes = int(np.prod(shape))
    buf, lab = np.empty((BATCH, nbytes), np.uint8), np.empty(BATCH, np.int64)
    out, n = nchw(buf, shape), 0
    while True:
        for g in rng.permutation(pf.num_row_groups).tolist():
            t = pf.read_row_group(g, columns=["image", "label"])
            col = t.column(0).combine_chunks()
            view = np.frombuffer(col.buffers()[1], np.uint8, count=len(col) * nbytes,
                                 offset=col.offset * nbytes).reshape(len(col), nbytes)
            labels = t.column(1).to_numpy()
            perm, pos = rng.permutation(len(view)), 0
            while pos < len(perm):
                k = min(BATCH - n, len(perm) - pos)
                view.take(perm[pos:pos + k], 0, buf[n:n + k], "clip")
                lab[n:n + k] = labels[perm[pos:pos + k]]
                n, pos = n + k, pos + k
                if n == BATCH:
                    yield out, torch.from_numpy(lab)
                    n = 0


def webdataset(folder: Path, shape: tuple[int, int, int]) -> Batches:
    """WebDataset tar shards (raw pixel members), shard shuffle + a 1,000-sample buffer."""
    import webdataset as wds

    def collate(samples: list[tuple[bytes, bytes]]) -> tuple[torch.Tensor, torch.Tensor]:
        pix = np.frombuffer(b"".join(s[0] for s in samples), np.uint8)
        labels = torch.tensor([int(s[1]) for s in samples], dtype=torch.int64)
        return nchw(pix.reshape(len(samples), -1), shape), labels

    urls = sorted(str(p) for p in folder.glob("*.tar"))
    ds = (wds.WebDataset(urls, shardshuffle=len(urls), seed=0, empty_check=False)
          .shuffle(1000).to_tuple("pix", "cls").batched(BATCH, collation_fn=collate,
                                                        partial=False))
    while True:
        yield from ds


def hf_datasets(folder: Path, shape: tuple[int, int, int]) -> Batches:
    """Hugging Face ``datasets`` from disk (memory-mapped Arrow), numpy format, shuffled
    index batches (``ds[indices]``)."""
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.load_from_disk(str(folder)).with_format("numpy", dtype=np.uint8)
    for idx in _epochs(len(ds)):
        b = ds[idx]
        yield nchw(b["image"], shape), torch.from_numpy(b["label"].astype(np.int64))


class PngFolder(torch.utils.data.Dataset):  # type: ignore[type-arg,unused-ignore]
    """``<root>/<class>/<file>.png``, decoded with PIL per item (the classic path)."""

    def __init__(self, root: Path) -> None:
        self.files = sorted(root.glob("*/*.png"))
        self.labels = [int(p.parent.name) for p in self.files]

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        with Image.open(self.files[i]) as img:
            return torch.from_numpy(np.asarray(img.convert("RGB"))), self.labels[i]


def png_dataloader(root: Path, workers: int) -> Batches:
    """PNG files + PIL + ``torch.utils.data.DataLoader`` (shuffle, batch 256)."""
    dl = torch.utils.data.DataLoader(PngFolder(root), batch_size=BATCH, shuffle=True,
                                     num_workers=workers, drop_last=True)
    while True:
        for x, y in dl:
            yield x.permute(0, 3, 1, 2), y


def memcpy_gbps(nbytes: int, seconds: float) -> float:
    """Copy bandwidth of one thread (GB/s of bytes copied) between two pre-faulted buffers."""
    src = np.ones(nbytes, np.uint8)
    dst = np.zeros(nbytes, np.uint8)
    np.copyto(dst, src)
    n, t0 = 0, time.perf_counter()
    while True:
        np.copyto(dst, src)
        n += 1
        elapsed = time.perf_counter() - t0
        if n >= 3 and elapsed >= seconds:
            return n * nbytes / elapsed / 1e9
