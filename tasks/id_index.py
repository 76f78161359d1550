"""The published-id index, hash-partitioned: what the duplicate check reads.

Each published batch has one id file (``ids/batch=<id>-<run>.arrow``, named by the batch's
``ids_path``): an Arrow IPC file with one ``id`` column whose record batch ``k`` holds the
batch's ids in bucket ``k`` = xxh3_64(id) mod ``ID_BUCKETS`` (the bucket count is in the
file's schema metadata). The duplicate check hashes only the *new* batch's ids; for each
published file it probes, bucket by bucket, the new ids of bucket k against record batch k.
A file up to ``WHOLE_FILE_BYTES`` is read in one GET; a larger one by ranged GETs of its
footer and of only the buckets the new batch has ids in. The driver holds the new batch's
ids plus, per worker, one small published file or one bucket of a large one: its memory
follows the new data, never the history. Time is one pass over the published ids
(O(history) bytes read, in parallel).

Files written before bucketing (one ``id`` column, no bucket metadata) are still read: their
record batches are probed with every new id.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import xxhash

from shardline.core.errors import StoreError
from shardline.core.ranged import RangedObject
from shardline.core.store import Store

ID_BUCKETS = 64                 # fixed: every id file of every dataset uses the same rule
# An id file up to this size is read in one GET (per worker in memory at once: 4 x 32 MB);
# a larger one (a batch of more than ~1M ids) bucket by bucket with ranged GETs.
WHOLE_FILE_BYTES = 32 << 20
BUCKETS_KEY = b"shardline_id_buckets"
IDS_SCHEMA = pa.schema([("id", pa.string())])


def buckets_of(ids: pa.Array, n: int = ID_BUCKETS) -> np.ndarray:
    """The bucket of each id: xxh3_64 of its UTF-8 bytes, mod ``n``."""
    h = xxhash.xxh3_64_intdigest
    return np.fromiter((h(s.encode()) % n for s in ids.to_pylist()), np.int64, len(ids))


def bucketed_table(ids: pa.Array, n: int = ID_BUCKETS) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """``ids`` as ``n`` record batches, batch ``k`` holding the ids of bucket ``k``
    (order within a bucket kept)."""
    ids = ids.cast(pa.string())
    b = buckets_of(ids, n)
    order = np.argsort(b, kind="stable")
    cuts = np.searchsorted(b[order], np.arange(n + 1))
    sorted_ids = ids.take(pa.array(order))
    schema = IDS_SCHEMA.with_metadata({BUCKETS_KEY: str(n).encode(), b"hash": b"xxh3_64"})
    batches = [pa.record_batch([sorted_ids.slice(int(cuts[k]), int(cuts[k + 1] - cuts[k]))],
                               schema=schema) for k in range(n)]
    return schema, batches


def encode_ids(ids: pa.Array, n: int = ID_BUCKETS) -> bytes:
    """The bytes of a batch's bucketed id file (uncompressed Arrow IPC)."""
    schema, batches = bucketed_table(ids, n)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as w:
        for rb in batches:
            w.write_batch(rb)
    return sink.getvalue().to_pybytes()


MISSING_IDS = ("the id index of a published batch is missing; the duplicate check cannot be "
               "exact without it. Restore it from a backup")


def open_reader(store: Store, key: str, whole: bool | None = None,
                missing: str = MISSING_IDS) -> ipc.RecordBatchFileReader:
    """A reader of one bucketed file: the whole file in one GET when it is small (one request
    per published batch), else ranged GETs of the footer and of the buckets asked for.
    ``whole`` forces either (a caller that reads one file a bucket range at a time asks for
    ranged reads, so it never reads a file whole more than once)."""
    info = store.head(key)
    if info is None:
        raise StoreError(f"{store.uri(key)}: {missing}")
    if whole if whole is not None else info.size <= WHOLE_FILE_BYTES:
        return ipc.open_file(pa.py_buffer(store.get_bytes(key)))
    return ipc.open_file(pa.PythonFile(RangedObject(store, key, info.size, info.etag), mode="r"))


def published_mask(store: Store, ids_paths: Iterable[str], ids: pa.Array,
                   workers: int = 4, whole: bool | None = None,
                   buckets: np.ndarray | None = None) -> np.ndarray:
    """For each of ``ids``, whether any published id file in ``ids_paths`` holds it.
    ``whole``: see :func:`open_reader` (``False`` when ``ids`` is one range of buckets of
    several the caller probes one after another). ``buckets``: each id's bucket of
    ``ID_BUCKETS``, when the caller knows them (no hashing here, no Python string per id)."""
    ids = ids.cast(pa.string())
    hit = np.zeros(len(ids), bool)
    paths = list(ids_paths)
    if not len(ids) or not paths:
        return hit
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}   # bucket count -> (order, cuts)
    lock = threading.Lock()

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        with lock:
            if n not in cache:
                b = buckets if buckets is not None and n == ID_BUCKETS else buckets_of(ids, n)
                order = np.argsort(b, kind="stable")
                cache[n] = order, np.searchsorted(b[order], np.arange(n + 1))
            return cache[n]

    def probe(key: str) -> list[np.ndarray]:
        """Positions (into ``ids``) found in ``key``."""
        reader = open_reader(store, key, whole)
        meta = reader.schema.metadata or {}
        found = []
        if BUCKETS_KEY not in meta:                 # written before bucketing
            for i in range(reader.num_record_batches):
                col = reader.get_batch(i).column(0)
                found.append(np.flatnonzero(pc.is_in(ids, value_set=col).to_numpy(
                    zero_copy_only=False)))
            return found
        n = int(meta[BUCKETS_KEY])
        order, cuts = split(n)
        for k in range(n):
            lo, hi = int(cuts[k]), int(cuts[k + 1])
            if lo == hi:
                continue                            # the new batch has no id in bucket k
            col = reader.get_batch(k).column(0)
            if not len(col):
                continue
            mine = order[lo:hi]
            m = pc.is_in(ids.take(pa.array(mine)), value_set=col).to_numpy(zero_copy_only=False)
            found.append(mine[m])
        return found

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(paths)))) as pool:
        for found in pool.map(probe, paths):
            for f in found:
                hit[f] = True
    return hit
