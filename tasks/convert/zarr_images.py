"""The shorthand's Zarr reader: a group with ``images`` (N, H, W, C) uint8, ``labels``
(N,) and optional ``ids`` (N,), for ``[dataset.image]`` + ``classes`` configs. A typed
dataset's groups (one array per declared field) are ``zarr_typed``'s; both prove their rows
the same way (``zarr_typed.chunks_present``: a chunk absent from the store is never read as
fill values)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

import numpy as np

from shardline.core.config import DatasetConfig
from shardline.core.store import Store
from shardline.tasks.batch import Source
from shardline.tasks.convert.records import Problem, Record, Unreadable
from shardline.tasks.convert.zarr_typed import (
    FILL_NOTE,
    chunks_present,
    object_rows,
    object_word,
    raise_if_environment,
    read_zarr_typed,
)

ZARR_CHUNK_ROWS = 4096


def read_zarr(store: Store, src: Source, cfg: DatasetConfig
              ) -> Iterator[Record | Problem]:
    """Typed fields: one array per field by name (``zarr_typed``); the shorthand: a group
    with ``images`` (N, H, W, C) uint8, ``labels`` (N,), optional ``ids``."""
    if cfg.typed:
        yield from read_zarr_typed(store, src, cfg)
        return
    yield from _read_zarr_images(store, src, cfg)


def _read_zarr_images(store: Store, src: Source, cfg: DatasetConfig
                      ) -> Iterator[Record | Problem]:
    """A Zarr group with ``images`` (N, H, W, C) uint8, ``labels`` (N,), optional ``ids``.
    Reads chunk-aligned row ranges, so memory stays bounded for large groups."""
    import zarr
    from zarr.storage import FsspecStore

    url, options = store.fsspec_url(src.key.rstrip("/"))
    try:
        zstore = FsspecStore.from_url(url, storage_options=options, read_only=True)
        group = zarr.open_group(store=zstore, mode="r")
        images, labels = group["images"], group["labels"]
        ids = group.get("ids", None)
        if not (isinstance(images, zarr.Array) and isinstance(labels, zarr.Array)
                and (ids is None or isinstance(ids, zarr.Array))):
            raise TypeError("'images', 'labels' and 'ids' must be arrays, not groups")
    except Exception as exc:  # zarr raises many types for a broken group; all mean the same
        raise_if_environment(exc, store, src)
        raise Unreadable("unreadable_object",
                         f"not a readable Zarr group with 'images' and 'labels' arrays: "
                         f"{type(exc).__name__}: {exc}") from exc
    n = images.shape[0]
    if labels.shape[0] != n or (ids is not None and ids.shape[0] != n):
        raise Unreadable("length_mismatch",
                         f"array lengths differ: images {n}, labels {labels.shape[0]}"
                         + (f", ids {ids.shape[0]}" if ids is not None else ""))
    bad_layout = images.ndim != 4 or images.dtype != np.uint8
    # A chunk absent from the store would read as fill values (zeros): prove the rows.
    arrays = {"images": images, "labels": labels, **({"ids": ids} if ids is not None else {})}
    # (a wrong layout is reported first, row by row, whatever chunks exist)
    ok = {k: chunks_present(store, src, a) for k, a in arrays.items()} \
        if n and not bad_layout else {}
    empty = [k for k, v in ok.items() if not v.any()]
    if empty:
        raise Unreadable("missing_chunk", f"array {empty[0]!r} declares {n} rows but none of "
                         "its chunks is in the store (Zarr would read fill values): upload "
                         f"the chunks ({FILL_NOTE})")
    stem = posixpath.basename(src.key.rstrip("/")).removesuffix(".zarr")
    for start in range(0, n, ZARR_CHUNK_ROWS):
        stop = min(n, start + ZARR_CHUNK_ROWS)
        try:
            lab = np.asarray(labels[start:stop])
            idv = np.asarray(ids[start:stop]) if ids is not None else None
            pix = None if bad_layout else np.asarray(images[start:stop])
        except OSError as exc:
            raise_if_environment(exc, store, src)
            raise
        for j in range(stop - start):
            i = start + j
            rid = (idv[j].item() if hasattr(idv[j], "item") else idv[j]) if idv is not None \
                else f"{stem}-{i:07d}"
            gap = next((k for k, v in ok.items()
                        if not v[i // object_rows(arrays[k])]), None)
            if gap is not None:
                word = object_word(arrays[gap])
                yield Problem(i, "missing_chunk", f"row {i}: array {gap!r} has no {word} "
                              f"{i // object_rows(arrays[gap])} in the store; the row is not "
                              f"read as fill values: upload the {word} ({FILL_NOTE})", id=rid)
                continue
            if bad_layout:
                yield Problem(i, "wrong_shape",
                              f"images array is {images.dtype}{list(images.shape)}; expected "
                              f"uint8 [N, {', '.join(map(str, cfg.image.shape))}]", id=rid)
                continue
            assert pix is not None   # bad_layout is False
            lv = lab[j]
            yield Record(i, rid, lv.item() if hasattr(lv, "item") else lv, pix[j])
