"""Peer loaders: MosaicML Streaming (MDS) and LitData, each written with its own writer and
read with its own loader at its recommended settings.

- **MDS** (``mosaicml-streaming``): ``MDSWriter`` with an ``ndarray:uint8:H,W,C`` column and an
  ``int64`` label, no compression, 64 MB shards (its default ``size_limit``); read with
  ``StreamingDataset(local=..., shuffle=True, batch_size=256)`` (default ``py1e`` shuffle)
  and ``StreamingDataLoader`` with one worker per usable core, persistent workers.
- **LitData** (``litdata``): ``optimize`` (a generator per input range, numpy serializer),
  64 MB chunks, no compression; read with ``StreamingDataset(dir, shuffle=True,
  drop_last=True)`` and ``StreamingDataLoader``, in the calling process by default
  (``SHARDLINE_BENCH_LITDATA_WORKERS``, default 0): on the 2-core machine its worker
  processes stalled ~0.35 s per batch (S 50,000: ~500-700 samples/s with 2 workers,
  ~49,000 with none, 2026-11-23), so the faster setting is the one measured.

Both packages declare ``torchvision`` as a requirement; the bench environment installs
them with ``--no-deps`` plus their real runtime dependencies (Makefile ``bench``), so no
CUDA torch is pulled in. ``mosaicml-streaming`` 0.13 imports ``torchvision`` when the
package is imported (``streaming.vision``): where no torchvision loads (a CPU-only torch),
it cannot run, and ``peer_errors`` says so with the import error.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shardline.bench.contenders import raw_view

PEERS = {"mds": "streaming", "litdata": "litdata"}
CHUNK_BYTES = 64 << 20
Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]


@functools.cache
def peer_errors() -> dict[str, str]:
    """name -> why the peer cannot run here (the import error); absent when it can."""
    out = {}
    for name, module in PEERS.items():
        try:
            __import__(module)
        except Exception as exc:   # noqa: BLE001 - any import failure means "cannot run"
            out[name] = f"import {module}: {type(exc).__name__}: {exc}"
    return out


def workers() -> int:
    return len(os.sched_getaffinity(0))


# -- writers ----------------------------------------------------------------------------
def write_mds(raw: Path, shape: tuple[int, int, int], out: Path) -> None:
    """The set (from the raw Arrow file) as MDS shards, written by ``MDSWriter``."""
    from streaming import MDSWriter

    images, labels = raw_view(raw)
    h, w, c = shape
    shutil.rmtree(out, ignore_errors=True)
    cols = {"image": f"ndarray:uint8:{h},{w},{c}", "label": "int64"}
    with MDSWriter(out=str(out), columns=cols, compression=None, size_limit=CHUNK_BYTES) as wr:
        for i in range(len(images)):
            wr.write({"image": images[i].reshape(shape), "label": np.int64(labels[i])})


def _litdata_items(span: tuple[int, int], raw: str, shape: tuple[int, int, int]
                   ) -> Iterator[dict[str, Any]]:
    images, labels = raw_view(Path(raw))
    for i in range(*span):
        yield {"image": np.array(images[i].reshape(shape)), "label": int(labels[i])}


def write_litdata(raw: Path, shape: tuple[int, int, int], out: Path) -> None:
    """The set as LitData chunks, written by ``litdata.optimize``."""
    from litdata import optimize

    rows = len(raw_view(raw)[1])
    step = max(1, rows // (4 * workers()))
    spans = [(lo, min(rows, lo + step)) for lo in range(0, rows, step)]
    shutil.rmtree(out, ignore_errors=True)
    optimize(fn=functools.partial(_litdata_items, raw=str(raw), shape=shape), inputs=spans,
             output_dir=str(out), chunk_bytes=CHUNK_BYTES, num_workers=workers(),
             mode="overwrite")


# -- readers ----------------------------------------------------------------------------
def _nchw(images: torch.Tensor) -> torch.Tensor:
    return images.permute(0, 3, 1, 2)       # [B, H, W, C] -> channels-last [B, C, H, W]


def mds(folder: Path, batch: int) -> Batches:
    """MDS through ``streaming.StreamingDataset`` + ``StreamingDataLoader``."""
    from streaming import StreamingDataLoader, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()     # a previous round's dataset in this process
    ds = StreamingDataset(local=str(folder), shuffle=True, batch_size=batch)
    n = workers()
    dl = StreamingDataLoader(ds, batch_size=batch, num_workers=n, drop_last=True,
                             persistent_workers=n > 0)
    try:
        while True:
            for b in dl:
                yield _nchw(b["image"]), b["label"].to(torch.int64)
    finally:
        del dl, ds


def litdata(folder: Path, batch: int) -> Batches:
    """LitData through ``litdata.StreamingDataset`` + ``StreamingDataLoader``."""
    from litdata import StreamingDataLoader, StreamingDataset

    ds = StreamingDataset(str(folder), shuffle=True, drop_last=True)
    n = int(os.environ.get("SHARDLINE_BENCH_LITDATA_WORKERS", "0"))
    dl = StreamingDataLoader(ds, batch_size=batch, num_workers=n, drop_last=True,
                             persistent_workers=n > 0)
    while True:
        for b in dl:
            yield _nchw(b["image"]), b["label"].to(torch.int64)


WRITERS = {"mds": write_mds, "litdata": write_litdata}
READERS = {"mds": mds, "litdata": litdata}


def ensure(name: str, root: Path, raw: Path, shape: tuple[int, int, int]) -> Path:
    """The peer's copy of the set under ``root/<name>``, written once, by a child process:
    ``litdata.optimize`` sets the process-wide multiprocessing start method to ``spawn``
    (which would slow the DataLoader contenders measured in this process) and prints to
    stdout (which carries the JSON result); the child's stdout goes to our stderr."""
    out, done = root / name, root / f".done-{name}"
    if not done.exists():
        subprocess.run([sys.executable, "-m", "shardline.bench.peers", name, str(raw), str(out),
                        ",".join(map(str, shape))], check=True, stdout=sys.stderr,
                       cwd=Path(__file__).resolve().parents[1])
        done.touch()
    return out


def best_peer_ratio(values: dict[str, list[float]], name: str = "shardline") -> float:
    """Median over rounds of ``name`` / the best peer of the same round (NaN: no peer ran)."""
    peers = [values[p] for p in PEERS if p in values]
    if not peers:
        return float("nan")
    best = [max(vs) for vs in zip(*peers, strict=True)]
    pairs = sorted(a / b for a, b in zip(values[name], best, strict=True) if b > 0)
    if not pairs:
        return float("nan")
    mid = len(pairs) // 2
    return pairs[mid] if len(pairs) % 2 else (pairs[mid - 1] + pairs[mid]) / 2


if __name__ == "__main__":    # python -m shardline.bench.peers NAME RAW OUT H,W,C (see ``ensure``)
    _name, _raw, _out, _shape = sys.argv[1:5]
    h, w, c = (int(x) for x in _shape.split(","))
    WRITERS[_name](Path(_raw), (h, w, c), Path(_out))
