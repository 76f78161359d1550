"""A Zarr group as typed rows: one array per field (and the target, and optionally the id)
by name, read chunk-aligned through s3fs inside the Spark task.

Every array has its samples on its declared ``sample_axis``; a row is index ``i`` of that
axis in every array. The group must prove its rows before any is read:

- the arrays agree in length (else the group is quarantined whole: ``length_mismatch``,
  naming each array's length);
- each array's per-sample shape and dtype are the declared ones (else the whole group:
  ``wrong_shape`` / ``wrong_dtype``; a per-row check would fail every row the same way);
- each chunk a row needs exists in the store: a missing chunk is not read as fill values
  (Zarr's default) unless the field declares ``missing_chunks = "fill_value"``; its rows are
  quarantined (``missing_chunk``), and a group with no chunk at all is quarantined whole.
  The unit of this proof is a stored object: a chunk, or in a sharded (Zarr v3) array a
  shard (``object_rows``), since a shard is one object holding many inner chunks. An inner
  chunk absent from a present shard (Zarr leaves out inner chunks equal to the fill value)
  is read as fill values: a shard is written whole, so an interrupted upload leaves the
  shard missing, not part of it.

Memory: a block of rows (about :data:`BLOCK_BYTES` over all arrays, whole read units of the
array whose units are largest in bytes; ``_block_rows``) is read at a time, so a task holds
a few chunks of each array and its shard buffers (``shard_writer``), never an array. The
read unit is a chunk, or a whole Zarr shard where one fits in a block (one GET, not one per
inner chunk); a larger shard is read a few inner chunks at a time.
"""

from __future__ import annotations

import itertools
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardline.core.config import DatasetConfig
from shardline.core.errors import TransientStoreError
from shardline.core.field_arrow import storage_dtype
from shardline.core.store import Store
from shardline.tasks.batch import Source
from shardline.tasks.convert.records import Problem, Record, Unreadable
from shardline.tasks.convert.split import Part
from shardline.tasks.convert.typed_readers import require_columns

BLOCK_BYTES = 32 << 20     # rows read at once, over all arrays (rounded to whole chunks)
FILL_NOTE = ("Zarr v3 does not write a chunk equal to the array's fill value: write the "
             "array with write_empty_chunks=True to store such chunks")


@dataclass
class _Col:
    name: str             # field or target name ("" for the id array)
    column: str           # the array's name in the group
    array: Any            # zarr.Array
    axis: int
    fill: bool            # missing chunks read as fill values
    ok: np.ndarray | None = None   # per sample-axis object (chunk or shard): all exist

    @property
    def object_rows(self) -> int:
        """Samples per stored object on the sample axis: the unit ``ok`` is indexed by."""
        return object_rows(self.array, self.axis)

    @property
    def read_rows(self) -> int:
        """Samples per read unit: a whole object if one fits in a block, else a chunk (the
        inner chunk of a shard). A multiple of the chunk and a divisor of the object."""
        whole = self.object_rows
        return whole if whole * self.row_bytes() <= BLOCK_BYTES else int(
            self.array.chunks[self.axis])

    def row_bytes(self) -> int:
        return int(np.prod(self.sample_shape())) * self.array.dtype.itemsize

    def sample_shape(self) -> tuple[int, ...]:
        return tuple(s for i, s in enumerate(self.array.shape) if i != self.axis)


def raise_if_environment(exc: BaseException, store: Store, src: Source) -> None:
    """s3fs (which Zarr reads through) turns S3 errors into ``OSError``s once its retries
    are spent: a 5xx or a dropped connection is the environment's, not the group's, so it
    fails the task as transient (retried, never a quarantine row or a strike). A missing
    key (``FileNotFoundError``, also zarr's not-found errors) or a refusal is the group's."""
    if isinstance(exc, OSError) and not isinstance(
            exc, FileNotFoundError | IsADirectoryError | NotADirectoryError | PermissionError):
        raise TransientStoreError(
            f"reading the Zarr group {store.uri(src.key)} failed: "
            f"{type(exc).__name__}: {exc} (retrying may help)") from exc


def _open(store: Store, src: Source) -> Any:
    import zarr
    from zarr.storage import FsspecStore

    url, options = store.fsspec_url(src.key.rstrip("/"))
    try:
        zstore = FsspecStore.from_url(url, storage_options=options, read_only=True)
        return zarr.open_group(store=zstore, mode="r")
    except Exception as exc:  # zarr raises many types for a broken group; all mean the same
        raise_if_environment(exc, store, src)
        raise Unreadable("unreadable_object", f"not a readable Zarr group: "
                         f"{type(exc).__name__}: {exc}") from exc


def _columns(cfg: DatasetConfig, group: Any) -> list[_Col]:
    import zarr

    arrays = {k: v for k, v in group.members() if isinstance(v, zarr.Array)}
    require_columns(cfg, arrays, "arrays")
    t = cfg.target_spec
    cols = [_Col(t.name, cfg.source_column(t.name), None, t.sample_axis,
                 t.missing_chunks == "fill_value")]
    for name, spec in cfg.field_specs:
        cols.append(_Col(name, cfg.source_column(name), None, spec.sample_axis,
                         spec.missing_chunks == "fill_value"))
    if cfg.id_column in arrays:
        cols.append(_Col("", cfg.id_column, None, 0, False))
    out = []
    for c in cols:
        if c.column not in arrays:
            continue                    # an optional field this group does not have
        c.array = arrays[c.column]
        if c.axis >= c.array.ndim:
            raise Unreadable("wrong_shape", f"array {c.column!r} has {c.array.ndim} axes; "
                             f"sample_axis = {c.axis} does not exist")
        out.append(c)
    return out


def _expect(cfg: DatasetConfig, c: _Col) -> tuple[tuple[int, ...] | None, str | None]:
    """The per-sample shape and exact dtype an array must have (None: not fixed)."""
    if not c.name:
        return (), None
    t = cfg.target_spec
    if c.name == t.name:
        if t.kind == "multilabel":
            return None, None        # (N,) of strings or (N, K) 0/1: judged per row
        if t.kind == "class":
            return (), None
        return tuple(t.shape), None
    spec = dict(cfg.field_specs)[c.name]
    if spec.kind == "scalar":
        return (), None
    return tuple(spec.shape), spec.resolved_dtype


def _check_layout(cfg: DatasetConfig, cols: list[_Col]) -> int:
    lengths = {c.column: int(c.array.shape[c.axis]) for c in cols}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k} {v}" for k, v in lengths.items())
        raise Unreadable("length_mismatch", f"the group's arrays disagree in length ({shown} "
                         "samples on their sample axes); every array needs one entry per "
                         "sample: fix the arrays or their sample_axis")
    for c in cols:
        shape, dtype = _expect(cfg, c)
        got = c.sample_shape()
        if shape is not None and got != shape:
            raise Unreadable("wrong_shape", f"array {c.column!r} is {list(c.array.shape)} with "
                             f"samples on axis {c.axis}: {list(got)} per sample, the field "
                             f"declares {list(shape)}")
        if dtype is not None and np.dtype(c.array.dtype) != np.dtype(
                "bool" if dtype == "bool" else storage_dtype(dtype)):
            raise Unreadable("wrong_dtype", f"array {c.column!r} is {c.array.dtype}, the field "
                             f"{c.name!r} declares {dtype}: convert the array or declare "
                             f"dtype = \"{c.array.dtype}\"")
    return next(iter(lengths.values()))


def object_rows(arr: Any, axis: int = 0) -> int:
    """Samples on ``axis`` per stored object of ``arr`` (a zarr.Array): its shard in a
    sharded array (one object holding many inner chunks), else its chunk."""
    return int((arr.shards or arr.chunks)[axis])


def object_word(arr: Any) -> str:
    """What a stored object of ``arr`` is called in messages: "shard" or "chunk"."""
    return "shard" if arr.shards else "chunk"


def chunks_present(store: Store, src: Source, arr: Any, axis: int = 0) -> np.ndarray:
    """Per stored object index along ``axis`` (the sample axis; objects of
    :func:`object_rows` samples: chunks, or shards in a sharded array) of ``arr`` (a
    zarr.Array of the group ``src``): whether every object of it (every position on the
    other axes) exists in the store. One listing of the array's keys; Zarr itself would read
    absent ones as fill."""
    prefix = f"{src.key.rstrip('/')}/{arr.path.strip('/')}/"
    present = {o.key[len(prefix):] for o in store.list(prefix)}
    grid = tuple(-(-s // k) for s, k in zip(arr.shape, arr.shards or arr.chunks, strict=True))
    encode = arr.metadata.encode_chunk_key
    ok = np.ones(grid[axis] if grid else 1, bool)
    for coords in itertools.product(*(range(g) for g in grid)):
        if encode(coords) not in present:
            ok[coords[axis] if grid else 0] = False
    return ok


def _proven(store: Store, src: Source, cfg: DatasetConfig, whole: bool
            ) -> tuple[list[_Col], int]:
    """The group's columns and length, its layout proven (see the module docstring)."""
    group = _open(store, src)
    cols = _columns(cfg, group)
    n = _check_layout(cfg, cols)
    if n == 0:
        raise Unreadable("empty_object", "the group's arrays hold 0 samples")
    for c in cols:
        if not c.fill:
            c.ok = chunks_present(store, src, c.array, c.axis)
            if whole and not c.ok.any():
                word = object_word(c.array)
                raise Unreadable("missing_chunk", f"array {c.column!r} declares {n} samples "
                                 f"but none of its {word}s is in the store (Zarr would read "
                                 f"fill values): upload the {word}s, or declare "
                                 "missing_chunks = \"fill_value\" if that is what they mean "
                                 f"({FILL_NOTE})")
    return cols, n


def read_zarr_typed(store: Store, src: Source, cfg: DatasetConfig,
                    rows: tuple[int, int] | None = None) -> Iterator[Record | Problem]:
    """The group's rows (``rows``: only ``[start, stop)``, a slice ``split_zarr`` planned)."""
    cols, n = _proven(store, src, cfg, whole=rows is None)
    lo, hi = rows if rows is not None else (0, n)
    stem = posixpath.basename(src.key.rstrip("/")).removesuffix(".zarr")
    step = _block_rows(cols)
    for start in range(lo, min(hi, n), step):
        yield from _block(cfg, cols, start, min(hi, n, start + step), stem)


def _block_rows(cols: list[_Col]) -> int:
    """Rows read at once: whole read units (``_Col.read_rows``) of the array whose units are
    largest in bytes, about :data:`BLOCK_BYTES` over all arrays. Not the longest unit in
    rows: a label array chunked by 4096 rows beside 256-row tensor chunks would make every
    block 4096 tensor rows (218 MB of 13x32x32 float32, measured). Smaller arrays are read
    part of a unit at a time."""
    row_bytes = max(1, sum(c.row_bytes() for c in cols))
    unit = max(cols, key=lambda c: c.read_rows * c.row_bytes()).read_rows
    return unit * max(1, BLOCK_BYTES // (row_bytes * unit))


def split_zarr(store: Store, src: Source, pieces: int, cfg: DatasetConfig | None = None
               ) -> tuple[Part, ...]:
    """Cut a group into about ``pieces`` row ranges of whole sample-axis read units
    (chunks, or shards that fit in a block: ``_Col.read_rows``), after
    proving its layout from the metadata and the chunk listing (in the driver: no chunk is
    read). A group that is not proven, or the shorthand's, stays whole: its task then
    reports it once, as without splitting."""
    whole = (Part.of(src),)
    if cfg is None or not cfg.typed or pieces < 2:
        return whole
    try:
        cols, n = _proven(store, src, cfg, whole=True)
    except Unreadable:
        return whole
    unit = max(c.read_rows for c in cols)
    chunks = -(-n // unit)
    bounds = sorted({min(n, unit * (chunks * j // pieces)) for j in range(pieces + 1)})
    if len(bounds) < 3:
        return whole
    return tuple(Part(src, max(1, src.size * (b - a) // n), start=a, stop=b, first_row=a,
                      etag=src.etag) for a, b in zip(bounds, bounds[1:], strict=False))


def _block(cfg: DatasetConfig, cols: list[_Col], start: int, stop: int, stem: str
           ) -> Iterator[Record | Problem]:
    data: dict[str, np.ndarray] = {}
    for c in cols:
        sel = tuple(slice(start, stop) if i == c.axis else slice(None)
                    for i in range(c.array.ndim))
        data[c.column] = np.moveaxis(np.asarray(c.array[sel]), c.axis, 0)
    t = cfg.target_spec
    by_name = {c.name: c for c in cols}
    ids = data.get(cfg.id_column) if "" in by_name else None
    for j in range(stop - start):
        i = start + j
        rid = _item(ids[j]) if ids is not None else f"{stem}-{i:07d}"
        gap = next((c for c in cols if c.ok is not None and not c.ok[i // c.object_rows]),
                   None)
        if gap is not None:
            field, word = gap.name or "id", object_word(gap.array)
            yield Problem(i, "missing_chunk", f"row {i}: array {gap.column!r} has no {word} "
                          f"{i // gap.object_rows} on axis {gap.axis} in the store; the row "
                          f"is not read as fill values. Upload the {word}, or declare "
                          f"missing_chunks = \"fill_value\" for {field!r} ({FILL_NOTE})",
                          id=rid)
            continue
        label = _item(data[by_name[t.name].column][j], copy=True)
        # a copy: a view would keep the whole block alive as long as any of its rows waits
        # in a shard buffer (held-out rows wait longest), i.e. most of the store
        values = {c.name: _item(data[c.column][j], copy=True) for c in cols
                  if c.name and c.name != t.name}
        yield Record(i, rid, label, None, values=values)


def _item(v: Any, copy: bool = False) -> Any:
    """A 0-d value as a Python scalar; arrays (a sample's tensor) as they are, or copied."""
    if isinstance(v, np.ndarray):
        return v.item() if v.ndim == 0 else (v.copy() if copy else v)
    return v.item() if isinstance(v, np.generic) else v
