"""Slices of large objects: the units of work convert packs into Spark tasks.

Convert runs one Spark task per group of units. A unit is a whole source, except where a
batch has fewer objects than useful tasks (``plan.plan_parts``): then a large
JSONL or Parquet object is cut into slices, so that a single 160 MB upload is several tasks
rather than one. Splitting is a planning detail of convert only: the batch, its id and the
ledger still name whole objects, and every row keeps the ``source_row`` it has unsplit.

- JSONL is cut right after a newline: JSON Lines cannot hold a raw newline inside a value,
  so no record is ever cut in two. The driver streams the object once, finds the newline
  after each nominal cut and counts the lines before it, so each slice knows the line
  number of its first line; tasks then GET their byte range only.
- Parquet is cut between row groups, from the footer alone (ranged reads); a slice's first
  row is the number of rows in the row groups before it. A task reads one row group at a
  time; one that does not decode has its rows quarantined one by one (unsliced, pyarrow
  reads the file all or nothing, and the object is one ``unreadable_object`` row).
- A Zarr group (typed fields) is cut between whole chunks of the sample axis, after the
  driver has proven its layout from the metadata alone (``zarr_typed.split_zarr``).
- CSV is never cut: a quoted field may hold a newline, so only a parse from the start of
  the object knows where a record begins.

A slice remembers the ETag its plan was made on and every read of it sends ``If-Match``, so
all slices of an object read the same version, the one the batch lists. An object that
cannot be planned (gone, changed since the listing, a Parquet footer that does not parse)
stays whole: the task then reports it exactly as without splitting (one quarantine row
with ``source_row = -1`` where the object is unreadable).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from shardline.core.errors import StoreError
from shardline.core.ranged import RangedObject
from shardline.core.store import Store
from shardline.tasks.batch import Source

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Part:
    """A unit of conversion work: a whole source (``stop is None``) or one slice of it."""

    source: Source
    size: int                   # bytes of input: what the size balancing weighs
    start: int = 0              # JSONL: first byte; Parquet: first row group
    stop: int | None = None     # end, exclusive (byte / row group); None: the whole source
    first_row: int = 0          # source_row of the slice's first line / row
    etag: str = ""              # the object version the slice was planned on (If-Match)

    @classmethod
    def of(cls, src: Source) -> Part:
        return cls(src, src.size)

    @property
    def key(self) -> str:
        return self.source.key

    @property
    def whole(self) -> bool:
        return self.stop is None

    def describe(self) -> str:
        if self.whole:
            return self.key
        unit = {"jsonl": "bytes", "zarr": "rows"}.get(self.source.format, "row groups")
        return f"{self.key} ({unit} {self.start}..{self.stop}, first row {self.first_row})"


# -- JSONL ------------------------------------------------------------------------------
def jsonl_cuts(chunks: Iterable[bytes], targets: Sequence[int], size: int
               ) -> list[tuple[int, int]]:
    """Where to cut an object of ``size`` bytes, read as ``chunks``, near each target offset.

    Each cut is ``(offset, lines)``: ``offset`` is the first line start at or after the
    target (just after a newline), ``lines`` the number of newlines before it, i.e. the
    0-based line number of the line that starts there. Offsets strictly increase and lie
    inside the object (a cut at its end would leave an empty slice); a target that falls
    inside a line running past the next target is merged into that line's cut. Stops reading
    ``chunks`` as soon as the last cut is known.
    """
    pending = sorted(t for t in targets if 0 < t < size)
    cuts: list[tuple[int, int]] = []
    pos = 0        # object offset of the current chunk
    lines = 0      # newlines in the object before pos + seen
    i = 0
    for chunk in chunks:
        seen = 0   # newlines of this chunk before index `seen` are counted in `lines`
        while i < len(pending):
            # a cut for target t is just after the first newline at index >= t - 1
            lo = max(pending[i] - 1, cuts[-1][0] if cuts else 0) - pos
            if lo >= len(chunk):
                break
            q = chunk.find(b"\n", max(lo, 0))
            if q < 0:
                break
            lines += chunk.count(b"\n", seen, q + 1)
            seen = q + 1
            cut = pos + q + 1
            if cut >= size:
                return cuts
            cuts.append((cut, lines))
            while i < len(pending) and pending[i] <= cut:
                i += 1
        if i == len(pending):
            return cuts
        lines += chunk.count(b"\n", seen)
        pos += len(chunk)
    return cuts


def jsonl_parts(src: Source, etag: str, cuts: Sequence[tuple[int, int]]) -> tuple[Part, ...]:
    """Byte-range slices of ``src`` between the ``cuts`` (from :func:`jsonl_cuts`); the
    whole source when there is no cut."""
    if not cuts:
        return (Part.of(src),)
    bounds = [(0, 0), *cuts, (src.size, -1)]
    return tuple(Part(src, b - a, start=a, stop=b, first_row=first, etag=etag)
                 for (a, first), (b, _) in zip(bounds, bounds[1:], strict=False))


def split_jsonl(store: Store, src: Source, pieces: int, cfg: object = None
                ) -> tuple[Part, ...]:
    """Cut a JSONL object into about ``pieces`` slices of similar size (one streamed read)."""
    targets = [src.size * j // pieces for j in range(1, pieces)]
    try:
        info, chunks = store.stream(src.key, if_match=src.etag or None)
        with chunks:
            if info.size != src.size:
                return _keep_whole(src, f"it is {info.size} bytes, the listing said {src.size}")
            cuts = jsonl_cuts(chunks, targets, src.size)
    except StoreError as exc:
        return _keep_whole(src, str(exc))
    return jsonl_parts(src, info.etag, cuts)


# -- Parquet ----------------------------------------------------------------------------
def row_group_parts(src: Source, etag: str, groups: Sequence[tuple[int, int]], pieces: int
                    ) -> tuple[Part, ...]:
    """Slices of consecutive row groups of similar byte size; ``groups`` holds (rows, bytes)
    of each row group in file order. The whole source when it cannot be cut."""
    total = sum(b for _, b in groups)
    if total <= 0 or len(groups) < 2:
        return (Part.of(src),)
    bounds = [0]
    done = 0
    for g, (_, b) in enumerate(groups[:-1]):
        done += b
        # cut after row group g once it reaches the next multiple of total / pieces
        if done * pieces >= total * len(bounds):
            bounds.append(g + 1)
    bounds.append(len(groups))
    if len(bounds) <= 2:
        return (Part.of(src),)
    parts = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        parts.append(Part(src, sum(x for _, x in groups[a:b]), start=a, stop=b,
                          first_row=sum(r for r, _ in groups[:a]), etag=etag))
    return tuple(parts)


def split_parquet(store: Store, src: Source, pieces: int, cfg: object = None
                  ) -> tuple[Part, ...]:
    """Cut a Parquet object into about ``pieces`` row-group ranges (reads the footer only)."""
    try:
        etag = src.etag
        if not etag:   # a hand-built source (benchmarks): pin the version there is now
            info = store.head(src.key)
            if info is None or info.size != src.size:
                return _keep_whole(src, "it is gone or its size changed since the listing")
            etag = info.etag
        with pq.ParquetFile(RangedObject(store, src.key, src.size, etag)) as pf:
            md = pf.metadata
    except (pa.ArrowException, OSError, StoreError) as exc:
        return _keep_whole(src, f"its footer cannot be read ({exc})")
    groups = []
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        groups.append((rg.num_rows, sum(rg.column(c).total_compressed_size
                                        for c in range(rg.num_columns))))
    return row_group_parts(src, etag, groups, pieces)


def _keep_whole(src: Source, why: str) -> tuple[Part, ...]:
    log.warning("not splitting %s: %s; one task converts it whole", src.key, why)
    return (Part.of(src),)
