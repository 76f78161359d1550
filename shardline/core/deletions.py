"""Deletion vectors: rows of published shards that a version no longer serves.

A deletion (``shardline delete``) or a correction masks rows instead of rewriting shards, as
Delta Lake's deletion vectors do, so its cost follows the shards it touches, not the
dataset:

- a **deletion vector** (``deletes/batch=<id>/dv-<shard>-<run>-v<N>.arrow``) per touched
  shard and per change: an Arrow IPC file with one ``row`` column, the ascending positions
  masked in that shard (its path and sha256 in the schema metadata). Written once, never
  changed; a later change of the same shard writes another one (a shard's mask is the
  union of its vectors), so no version ever stops naming a vector an older one names;
- a **deletions index** (``deletes/index-v<N>-<run>.json``) per change version: every live
  vector reference (shard, batch, key, sha256, rows masked), the parent's plus the new ones.
  The version document names it (``VersionDoc.deletions``, digest-checked) and every later
  version copies that reference until a compaction applies the masks (rewrites those shards
  without their masked rows) and drops it.

Totals of a version count live rows: masked rows are subtracted when the change commits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardline.core.errors import StoreError
from shardline.core.parts import Part, to_dict

VECTOR_KIND, INDEX_KIND = "deletion_vector", "deletions"
_META = b"shardline"


@dataclass(frozen=True)
class DeletionRef(Part):
    """One deletion vector: the shard it masks, where it is, its digest, rows it masks."""

    shard: str
    batch: str
    key: str
    sha256: str
    rows: int
    version: int                    # the version that masked these rows

    WHERE = "deletion-vector reference"


@dataclass(frozen=True)
class DeletionsRef(Part):
    """A version document's reference to its deletions index."""

    key: str
    sha256: str
    vectors: int                    # deletion vectors listed
    rows: int                       # rows they mask, all together

    WHERE = "deletions reference"


@dataclass(frozen=True)
class ChangeSummary(Part):
    """What a change version did (None on an ingest or compaction version): rows masked
    (``deleted``: ids removed; ``updated``: ids whose row a correction replaced)."""

    kind: str                       # "delete" | "correct"
    deleted: int = 0
    updated: int = 0

    WHERE = "change summary"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_vector(shard: str, shard_sha256: str, rows: np.ndarray) -> bytes:
    """The Arrow IPC bytes of a vector masking ``rows`` (positions) of ``shard``."""
    meta = {"format": 3, "kind": VECTOR_KIND, "shard": shard, "shard_sha256": shard_sha256}
    schema = pa.schema([("row", pa.int64())]).with_metadata(
        {_META: json.dumps(meta, sort_keys=True).encode()})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as w:
        w.write_table(pa.table({"row": np.unique(rows).astype(np.int64)}, schema=schema))
    return sink.getvalue().to_pybytes()


def decode_vector(data: bytes, ref: DeletionRef) -> np.ndarray:
    """The masked positions of ``ref`` (its digest checked first)."""
    if _sha(data) != ref.sha256:
        raise StoreError(f"{ref.key}: sha256 differs from the one the deletions index records; "
                         "the deletion vector was changed after it was published. Restore it "
                         "from a backup")
    try:
        table = ipc.open_file(pa.py_buffer(data)).read_all()
        meta = json.loads((table.schema.metadata or {})[_META])
    except (pa.ArrowInvalid, KeyError, ValueError) as exc:
        raise StoreError(f"{ref.key} is not a readable deletion vector ({exc})") from exc
    if meta.get("kind") != VECTOR_KIND or meta.get("shard") != ref.shard:
        raise StoreError(f"{ref.key}: not the deletion vector of {ref.shard}; the object is "
                         "damaged or misplaced: restore it from a backup")
    return np.asarray(table.column("row").to_numpy(), np.int64)


def encode_index(dataset: str, version: int, refs: Iterable[DeletionRef]) -> bytes:
    body = {"format": 3, "kind": INDEX_KIND, "dataset": dataset, "version": version,
            "vectors": [to_dict(r) for r in refs]}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def decode_index(data: bytes, ref: DeletionsRef) -> list[DeletionRef]:
    if _sha(data) != ref.sha256:
        raise StoreError(f"{ref.key}: sha256 differs from the one the version document "
                         "records; restore the deletions index from a backup")
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise StoreError(f"{ref.key} is not valid JSON: {exc}") from exc
    if not isinstance(body, dict) or body.get("kind") != INDEX_KIND:
        raise StoreError(f"{ref.key}: not a deletions index; restore it from a backup")
    return [DeletionRef.from_dict(r, ref.key) for r in body.get("vectors", [])]


def index_ref(key: str, data: bytes, refs: list[DeletionRef]) -> DeletionsRef:
    return DeletionsRef(key=key, sha256=_sha(data), vectors=len(refs),
                        rows=sum(r.rows for r in refs))


def union(masks: Iterable[np.ndarray]) -> np.ndarray:
    """Ascending distinct positions of several vectors of one shard."""
    arrays = [np.asarray(m, np.int64) for m in masks]
    return np.unique(np.concatenate(arrays)) if arrays else np.empty(0, np.int64)


def drop_masked(rows: np.ndarray, masked: np.ndarray | None) -> np.ndarray:
    """``rows`` (positions, any order) without the ``masked`` ones, order kept."""
    if masked is None or not len(masked) or not len(rows):
        return rows
    return rows[~np.isin(rows, masked)]
