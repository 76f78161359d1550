"""The format registry: one table, format name -> how a source of that format is found,
read and cut. A new input format is one entry in :data:`FORMATS` (plus its reader).

- ``suffixes``: how detect recognises it: the end of an object's name (lower-cased), or,
  for a ``group`` format, the end of a folder name: every object under that folder is one
  source (a Zarr group);
- ``read``: the reader of a whole source;
- ``read_slice`` and ``split``: for formats a large object of which may be cut into slices
  (``split``): where to cut it, and how to read one slice. ``split is None``: never cut.

Every format name a :class:`~shardline.tasks.batch.Source` can carry is a key here, except
``unknown`` (a file detect cannot place), which the converter quarantines with a reason.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from shardline.core.config import DatasetConfig
from shardline.core.errors import ObjectChanged
from shardline.core.store import Store
from shardline.tasks.batch import Source
from shardline.tasks.convert.limits import limits_for
from shardline.tasks.convert.readers import (
    Problem,
    Record,
    Unreadable,
    read_csv,
    read_image_file,
    read_jsonl,
    read_jsonl_slice,
    read_parquet,
    read_parquet_slice,
    replaced_during_ingest,
)
from shardline.tasks.convert.split import Part, split_jsonl, split_parquet
from shardline.tasks.convert.typed_readers import read_npy
from shardline.tasks.convert.zarr_images import read_zarr
from shardline.tasks.convert.zarr_typed import read_zarr_typed, split_zarr

Reader = Callable[[Store, Part, DatasetConfig], Iterator[Record | Problem]]
Parser = Callable[[bytes, Source, DatasetConfig], Iterator[Record | Problem]]
# (store, source, pieces, the dataset's config or None) -> slices
Splitter = Callable[[Store, Source, int, DatasetConfig | None], tuple[Part, ...]]

UNKNOWN = "unknown"


@dataclass(frozen=True)
class Format:
    name: str
    suffixes: tuple[str, ...]
    read: Reader
    hint: str                           # how the "unsupported file type" message names it
    read_slice: Reader | None = None
    split: Splitter | None = None
    group: bool = False


def whole_object(parse: Parser) -> Reader:
    """A reader that GETs the whole object once, checks its size against the listing, and
    hands the bytes to ``parse``."""

    def read(store: Store, part: Part, cfg: DatasetConfig) -> Iterator[Record | Problem]:
        src = part.source
        limit = limits_for(cfg).max_object_bytes
        if src.size > limit:   # refused before the GET: it would be held in memory whole
            raise Unreadable("object_too_large",
                             f"the object is {src.size} bytes; whole-object reads are limited "
                             f"to {limit} (limits.max_object_bytes): split it into smaller "
                             "objects")
        try:    # pinned to the version detect listed: a replacement is never read as it
            data = store.get_bytes(src.key, if_match=src.etag or None)
        except ObjectChanged as exc:
            raise replaced_during_ingest(src, str(exc)) from exc
        if len(data) != src.size:
            raise Unreadable("truncated_file",
                             f"read {len(data)} bytes but the listing said {src.size}")
        if not data or (data[:1].isspace() and not data.strip()):   # strip() only if blank-led
            raise Unreadable("empty_object", f"the object holds no data ({len(data)} bytes, "
                             "blank)")
        yield from parse(data, src, cfg)

    return read


def _zarr_group(store: Store, part: Part, cfg: DatasetConfig
                ) -> Iterator[Record | Problem]:
    return read_zarr(store, part.source, cfg)


def _zarr_slice(store: Store, part: Part, cfg: DatasetConfig) -> Iterator[Record | Problem]:
    assert part.stop is not None
    return read_zarr_typed(store, part.source, cfg, rows=(part.start, part.stop))


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("jsonl", (".jsonl", ".ndjson", ".json"), whole_object(read_jsonl), ".jsonl",
           read_slice=read_jsonl_slice, split=split_jsonl),
    # CSV is never cut: a quoted field may hold a newline, so a cut can land mid-record.
    Format("csv", (".csv",), whole_object(read_csv), ".csv"),
    Format("parquet", (".parquet", ".pq"), whole_object(read_parquet), ".parquet",
           read_slice=read_parquet_slice, split=split_parquet),
    # .tif/.webp decode for typed image fields only (the shorthand's images are PNG/JPEG)
    Format("image", (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp"),
           whole_object(read_image_file), ".png/.jpg (ImageFolder)"),
    Format("zarr", (".zarr",), _zarr_group, "a .zarr group", group=True,
           read_slice=_zarr_slice, split=split_zarr),
    # A tensor per object (typed fields): <class>/<stem>.npy, one sample or N on axis 0.
    Format("npy", (".npy",), whole_object(read_npy), ".npy (a tensor field)"),
)}


def format_of(key: str) -> str:
    """The format of a single object, by its name's suffix; ``unknown`` if none matches."""
    ext = posixpath.splitext(key)[1].lower()
    return next((f.name for f in FORMATS.values() if not f.group and ext in f.suffixes),
                UNKNOWN)


def group_root(key: str) -> tuple[str, str] | None:
    """``(folder, format)`` when ``key`` lies under a folder that is one source (a Zarr
    group: the first folder whose name ends in ``.zarr``); else ``None``."""
    parts = key.split("/")
    for i, part in enumerate(parts[:-1]):
        for f in FORMATS.values():
            if f.group and part.endswith(f.suffixes):
                return "/".join(parts[: i + 1]) + "/", f.name
    return None


def splitter(fmt: str) -> Splitter | None:
    """How to cut a large object of format ``fmt``; ``None``: it is never cut."""
    entry = FORMATS.get(fmt)
    return entry.split if entry is not None else None


def read_source(store: Store, part: Part, cfg: DatasetConfig
                ) -> Iterator[Record | Problem]:
    """Read ``part`` with its format's reader; a slice of a large object (see ``split``)
    reads only its byte range or row groups."""
    src = part.source
    entry = FORMATS.get(src.format)
    if entry is None:
        ext = posixpath.splitext(src.key)[1] or "(none)"
        hints = [f.hint for f in FORMATS.values()]
        raise Unreadable("unreadable_object",
                         f"unsupported file type {ext}; upload {', '.join(hints[:-1])} "
                         f"or {hints[-1]}")
    if part.whole:
        yield from entry.read(store, part, cfg)
    elif entry.read_slice is not None:
        yield from entry.read_slice(store, part, cfg)
    else:
        raise ValueError(f"{part.describe()}: format {src.format!r} has no slice reader; "
                         "only formats with a splitter are ever cut")
