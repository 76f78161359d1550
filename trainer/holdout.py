"""Per-sample decisions that must never change between runs: hashes of the row id.

The held-out split is a pure function of the id, so a sample is held out in every version,
on every rank and in every run: the evaluation set of version N is exactly the held-out rows
of all shards so far, and it can never leak into training later.

The hash is computed vectorised over an Arrow string column (no Python per id):

    h(id) = splitmix64( sum_p (byte_p + 1) * K**p  +  len(id) * K_LEN )   (mod 2**64)

with ``K``/``K_LEN`` below and ``splitmix64`` the usual 64-bit finaliser. Anyone can
reproduce it (``reference_hash`` is the one-id-at-a-time definition the tests compare
against). A row is held out when ``top53(h) / 2**53 < fraction``; raising the fraction only
adds rows to the held-out set. Replay selection ranks rows by a salted re-mix of the same
hash, so it is deterministic per run salt and independent of shard layout.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

K = np.uint64(0x100000001B3)          # FNV-64 prime: odd, so powers never vanish mod 2**64
K_LEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def _splitmix(h: np.ndarray) -> np.ndarray:
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
    return _splitmix(sums + lengths.astype(np.uint64) * K_LEN)


def reference_hash(text: str) -> int:
    """The same hash for one id, written plainly (the definition, used by tests)."""
    acc, power = 0, 1
    for b in text.encode():
        acc = (acc + (b + 1) * power) & _MASK64
        power = (power * int(K)) & _MASK64
    acc = (acc + len(text.encode()) * int(K_LEN)) & _MASK64
    return int(_splitmix(np.array([acc], np.uint64))[0])


def unit_interval(hashes: np.ndarray) -> np.ndarray:
    """Map uint64 hashes to floats uniform in [0, 1) (top 53 bits)."""
    return (hashes >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def holdout_mask(hashes: np.ndarray, fraction: float) -> np.ndarray:
    """True where the row belongs to the held-out evaluation split."""
    return unit_interval(hashes) < fraction


def salted(hashes: np.ndarray, salt: int) -> np.ndarray:
    """A second, independent hash of the same ids (for per-run replay selection)."""
    return _splitmix(hashes ^ np.uint64(salt & _MASK64))


def pick_smallest(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` smallest scores, ascending by position (deterministic)."""
    if k >= len(scores):
        return np.arange(len(scores), dtype=np.int64)
    if k <= 0:
        return np.empty(0, np.int64)
    return np.sort(np.argpartition(scores, k - 1)[:k]).astype(np.int64)
