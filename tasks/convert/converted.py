"""A converted batch sitting in staging, not yet visible to any reader.

The driver holds only what follows the tasks, shards and classes: the staged shards, the
tasks' row files (``rowfiles``) with their counts, where the duplicate check removed rows
(8 bytes a duplicate) and the staged id file. The per-row table is read back from the row
files on demand: by validation one bucket range at a time (``iter_rows``), and whole only
where a caller asks for ``rows`` (tests; the set-aside record of a failed validation).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardline.core.field_stats import merge_stats
from shardline.core.store import Store
from shardline.tasks.batch import Batch
from shardline.tasks.convert.rowfiles import PLAIN_SCHEMA, RowFile, iter_chunks
from shardline.tasks.convert.shard_writer import WrittenShard
from shardline.tasks.id_index import open_reader

ROW_COLUMNS = ["id", "label", "source_key", "source_row", "status", "rule"]
EXAMPLES = 50


@dataclass
class Converted:
    batch: Batch
    run_id: str
    base_version: int | None          # the version whose ids were checked for duplicates
    data_shards: list[WrittenShard]
    quarantine_shards: list[WrittenShard]
    row_files: list[RowFile]          # the successful attempts' row files, by task
    store: Store                      # where they are (pickled: S3 as its settings)
    rows_in: int
    by_rule: dict[str, int]           # quarantined rows per rule (duplicates included)
    ids_key: str                      # the staged id file: the ids to publish
    dropped: dict[str, np.ndarray] = field(default_factory=dict)  # duplicates: shard -> rows
    timings: dict[str, float] = field(default_factory=dict)
    examples: list[dict] | None = None   # the first EXAMPLES quarantined rows (convert's)

    def _store(self, store: Store | None = None) -> Store:
        return self.store if store is None else store

    @property
    def rows_ok(self) -> int:
        return sum(s.rows for s in self.data_shards)

    @property
    def rows_quarantined(self) -> int:
        return self.rows_in - self.rows_ok

    def stats(self) -> dict[str, Any] | None:
        """Per-field statistics of the rows to publish (the data shards' merged; None when
        the shards recorded none: the shorthand's datasets)."""
        out: dict[str, Any] | None = None
        for s in self.data_shards:
            if s.stats:
                out = merge_stats(out, s.stats)
        return out

    def _mark(self, table: pa.Table, columns: list[str]) -> pa.Table:
        """``columns`` of ``table``; rows the duplicate check removed read ``quarantined`` /
        ``duplicate_id``. Text columns stay dictionary-encoded (pandas: categoricals)."""
        out = {c: table.column(c) for c in columns}
        if self.dropped and table.num_rows:
            shard, srow = table.column("shard"), table.column("shard_row")
            hit = np.zeros(table.num_rows, bool)
            for key, rows in self.dropped.items():
                on = pc.fill_null(pc.equal(shard, key), False).to_numpy(zero_copy_only=False)
                if on.any():
                    hit |= on & pc.is_in(srow, value_set=pa.array(rows, pa.int64())).to_numpy(
                        zero_copy_only=False)
            if hit.any():
                dup = pa.array(hit)
                for c, value in (("status", "quarantined"), ("rule", "duplicate_id")):
                    if c in out:
                        out[c] = pc.dictionary_encode(pc.if_else(
                            dup, value, pc.cast(out[c], pa.string())))
        return pa.table(out)

    def _read(self, store: Store | None, files: list[RowFile], max_rows: int | None,
              columns: list[str], passed_only: bool) -> Iterator[pa.Table]:
        need = list(columns) + [c for c in ("status",) if passed_only and c not in columns]
        if self.dropped:
            need += [c for c in ("shard", "shard_row") if c not in need]
        for _, table, _ in iter_chunks(self._store(store), files, max_rows, columns=need,
                                       passed_only=passed_only):
            if passed_only and self.dropped:
                marked = self._mark(table, need)
                marked = marked.filter(pc.equal(marked.column("status"), "ok"))
                yield marked.select(columns)
            else:
                yield self._mark(table, columns)

    def iter_rows(self, store: Store | None = None, max_rows: int | None = None,
                  passed_only: bool = False, columns: list[str] | None = None
                  ) -> Iterator[pa.Table]:
        """The per-row table (``columns``, default ``ROW_COLUMNS``; text columns
        dictionary-encoded), one id-bucket range (~``max_rows`` rows) at a time;
        ``passed_only``: only the rows to publish (duplicates left out)."""
        yield from self._read(store, self.row_files, max_rows, list(columns or ROW_COLUMNS),
                              passed_only)

    @property
    def rows(self) -> pa.Table:
        """Every input row in one plain table: O(rows) memory, for tests and small batches."""
        schema = pa.schema([PLAIN_SCHEMA.field(c) for c in ROW_COLUMNS])
        parts = [t.cast(schema) for t in self.iter_rows()]
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def quarantine_examples(self, n: int = EXAMPLES, store: Store | None = None
                            ) -> list[dict]:
        """The first ``n`` quarantined rows, task by task, each task's in source order
        (object key, row): kept from convert (the report and the flow's artifact ask for
        them after publish removed the staging folder), else read from the row files until
        there are ``n``."""
        if self.examples is not None and n <= EXAMPLES:
            return self.examples[:n]
        out: list[dict] = []
        for f in self.row_files:
            if len(out) >= n:
                break
            if not (f.rows > sum(f.ok_per_bucket) or self.dropped):
                continue
            for bad in self._read(store, [f], 1 << 62, ROW_COLUMNS, False):
                bad = bad.filter(pc.not_equal(bad.column("status"), "ok"))
                # a row file is in id-hash order: the task's first refused rows are the
                # first in source order (object, row), as a person reads the upload
                bad = pa.table({c: pc.cast(bad.column(c), PLAIN_SCHEMA.field(c).type)
                                for c in ("source_key", "source_row", "id", "rule")})
                bad = bad.sort_by([("source_key", "ascending"), ("source_row", "ascending")])
                out += bad.slice(0, n - len(out)).to_pylist()
        return out[:n]

    def iter_published_ids(self, store: Store | None = None) -> Iterator[pa.Array]:
        """The ids to publish, one hash bucket of the staged id file at a time."""
        reader = open_reader(self._store(store), self.ids_key)
        for k in range(reader.num_record_batches):
            yield reader.get_batch(k).column(0)

    def published_ids(self) -> pa.Array:
        """Every id to publish in one array (O(rows): tests and small batches)."""
        parts = list(self.iter_published_ids())
        return pa.chunked_array(parts, pa.string()).combine_chunks()
