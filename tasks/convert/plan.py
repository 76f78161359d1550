"""Convert planning: the units of work (whole sources, and slices of large objects where a
batch has fewer objects than useful tasks, see ``split``) and their packing into
size-balanced groups, one Spark task per group (largest first onto the least-loaded task).
Pure functions of the batch, except :func:`plan_parts`, which reads the objects it cuts."""

from __future__ import annotations

import heapq
import logging
from collections.abc import Sequence

from shardline.core.config import DatasetConfig
from shardline.core.store import Store
from shardline.tasks.batch import Source
from shardline.tasks.convert.formats import splitter
from shardline.tasks.convert.split import Part

log = logging.getLogger(__name__)


def plan_groups(units: Sequence[Source | Part], tasks: int) -> tuple[tuple[Part, ...], ...]:
    """Pack units of work (sources, taken whole, or parts from :func:`plan_parts`) into at
    most ``tasks`` groups of similar byte size (LPT scheduling)."""
    parts = [u if isinstance(u, Part) else Part.of(u) for u in units]
    n = max(1, min(tasks, len(parts)))
    heap = [(0, i) for i in range(n)]
    groups: list[list[Part]] = [[] for _ in range(n)]
    for part in sorted(parts, key=lambda p: (-p.size, p.key, p.start)):
        load, i = heapq.heappop(heap)
        groups[i].append(part)
        heapq.heappush(heap, (load + max(part.size, 1), i))
    return tuple(tuple(sorted(g, key=lambda p: (p.key, p.start))) for g in groups if g)


# Below this much input per task, splitting further costs more (more, smaller shards and
# per-task start-up) than the parallelism gains.
MIN_TASK_BYTES = 8 * 1024 * 1024


def useful_tasks(total_bytes: int, parallelism: int, min_task_bytes: int = MIN_TASK_BYTES
                 ) -> int:
    """Two tasks per core for large batches (stragglers even out), fewer for small ones."""
    by_size = -(-total_bytes // max(1, min_task_bytes))
    return max(1, min(2 * parallelism, by_size))


def slice_counts(sources: Sequence[Source], tasks: int, min_task_bytes: int = MIN_TASK_BYTES
                 ) -> list[int]:
    """How many slices to cut each source into (1: keep it whole). Only when there are fewer
    sources than ``tasks``: then each JSONL or Parquet object larger than a task's share of
    the bytes (never less than ``min_task_bytes``) gets about one slice per share."""
    if len(sources) >= tasks:
        return [1] * len(sources)
    share = max(1, min_task_bytes, -(-sum(s.size for s in sources) // tasks))
    return [-(-s.size // share) if splitter(s.format) is not None else 1 for s in sources]


def plan_parts(store: Store, sources: Sequence[Source], tasks: int,
               min_task_bytes: int = MIN_TASK_BYTES, cfg: DatasetConfig | None = None
               ) -> tuple[Part, ...]:
    """The units of work for ``tasks`` tasks: whole sources, and slices of the large objects
    :func:`slice_counts` picks, so that one large upload keeps every core busy. The driver
    reads each object it cuts once (JSONL, streamed) or only its footer (Parquet), see
    ``split``; an object it cannot plan stays whole. A Zarr group is cut only with ``cfg``
    (typed fields: which arrays and sample axes)."""
    parts: list[Part] = []
    for src, pieces in zip(sources, slice_counts(sources, tasks, min_task_bytes), strict=True):
        if pieces < 2:
            parts.append(Part.of(src))
            continue
        split = splitter(src.format)
        assert split is not None   # slice_counts cuts only formats with a splitter
        sliced = split(store, src, pieces, cfg)
        if len(sliced) > 1:
            log.info("%s: %d bytes in %d slices (%s)", src.key, src.size, len(sliced),
                     ", ".join(f"{p.start}..{p.stop} from row {p.first_row}" for p in sliced))
        parts.extend(sliced)
    return tuple(parts)
