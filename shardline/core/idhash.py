"""The id hash: one 64-bit hash per row id, and the held-out split it decides.

Ingest (``tasks.convert.shard_writer``) uses it to write each batch's held-out rows into
their own shards; the trainer (``trainer.holdout`` re-exports it) uses it to mask shards
written before that (mixed train/held-out shards) and to pick replay rows. Both sides call
this one function, so the split is the same bit for bit whoever computes it.

Computed vectorised over an Arrow string column (no Python per id):

    h(id) = splitmix64( sum_p (byte_p + 1) * K**p  +  len(id) * K_LEN )   (mod 2**64)

with ``K``/``K_LEN`` below and ``splitmix64`` the usual 64-bit finaliser. Anyone can
reproduce it (``reference_hash`` is the one-id-at-a-time definition the tests compare
against). A row is held out when ``top53(h) / 2**53 < fraction``; raising the fraction only
adds rows to the held-out set.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from shardline.core.config import HOLDOUT_FRACTION
from shardline.core.errors import ShardlineError

K = np.uint64(0x100000001B3)          # FNV-64 prime: odd, so powers never vanish mod 2**64
K_LEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def splitmix64(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(30))
    h = h * _M1
    h = h ^ (h >> np.uint64(27))
    h = h * _M2
    return h ^ (h >> np.uint64(31))


def _powers(n: int) -> np.ndarray:
    out = np.empty(max(n, 1), np.uint64)
    out[0] = 1
    if n > 1:
        # cumulative product with wrap-around: K**p mod 2**64
        out[1:] = K
        out = np.multiply.accumulate(out, dtype=np.uint64)
    return out


def id_hash64(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """64-bit hash of every id in a string column (uint64 array, one per row)."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks() if ids.num_chunks != 1 else ids.chunk(0)
    off_dtype: type[np.signedinteger[Any]]
    if pa.types.is_large_string(ids.type):
        off_dtype = np.int64
    elif pa.types.is_string(ids.type):
        off_dtype = np.int32
    else:
        raise TypeError(f"id column must be an Arrow string column, got type {ids.type}")
    n = len(ids)
    if n == 0:
        return np.empty(0, np.uint64)
    if ids.null_count:
        raise ValueError(f"id column has {ids.null_count} null(s); ids must be non-null")
    bufs = ids.buffers()
    width = np.dtype(off_dtype).itemsize
    offsets = np.frombuffer(bufs[1], off_dtype, count=n + 1,
                            offset=ids.offset * width).astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
    start, end = int(offsets[0]), int(offsets[-1])
    lengths = np.diff(offsets)
    pos = np.arange(end - start, dtype=np.int64) - np.repeat(offsets[:-1] - start, lengths)
    vals = (data[start:end].astype(np.uint64) + np.uint64(1)) * _powers(int(lengths.max()))[pos]
    sums = np.zeros(n, np.uint64)
    nonempty = lengths > 0
    if nonempty.any():
        starts = ((offsets[:-1] - start)[nonempty]).astype(np.intp)
        sums[nonempty] = np.add.reduceat(vals, starts)
    return splitmix64(sums + lengths.astype(np.uint64) * K_LEN)


def reference_hash(text: str) -> int:
    """The same hash for one id, written plainly (the definition, used by tests)."""
    acc, power = 0, 1
    for b in text.encode():
        acc = (acc + (b + 1) * power) & _MASK64
        power = (power * int(K)) & _MASK64
    acc = (acc + len(text.encode()) * int(K_LEN)) & _MASK64
    return int(splitmix64(np.array([acc], np.uint64))[0])


def unit_interval(hashes: np.ndarray) -> np.ndarray:
    """Map uint64 hashes to floats uniform in [0, 1) (top 53 bits)."""
    return (hashes >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def holdout_mask(hashes: np.ndarray, fraction: float) -> np.ndarray:
    """True where the row belongs to the held-out evaluation split."""
    return unit_interval(hashes) < fraction


def holdout_ids(ids: pa.Array | pa.ChunkedArray, fraction: float) -> np.ndarray:
    """``holdout_mask(id_hash64(ids), fraction)``: True where the id is held out."""
    return holdout_mask(id_hash64(ids), fraction)


class HoldoutMismatch(ShardlineError):
    """A reader's holdout fraction differs from the one the dataset fixed at ingest."""


class _Version(Protocol):
    dataset: str
    version: int

    @property
    def holdout_fraction(self) -> float | None: ...


def dataset_fraction(manifest: _Version, configured: float | None) -> float:
    """The held-out fraction to read ``manifest`` with: the one the dataset recorded at
    ingest (when it materialised the split), else ``configured`` (else the default).

    Raises:
        HoldoutMismatch: ``configured`` differs from the recorded fraction (the reader
            would mask other rows than the held-out shards hold).
    """
    recorded = manifest.holdout_fraction
    if recorded is None:
        return HOLDOUT_FRACTION if configured is None else configured
    if configured is not None and configured != recorded:
        raise HoldoutMismatch(
            f"dataset {manifest.dataset} v{manifest.version} holds out {recorded} of its rows "
            f"(fixed at ingest), the trainer is configured with holdout_fraction = "
            f"{configured}; set [train] holdout_fraction = {recorded} (or leave it unset: it "
            "defaults to [dataset] holdout_fraction)")
    return recorded
