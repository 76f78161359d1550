"""The strike a failed validation records (``setaside.record_validation_failure``): the
same suspects and ``final`` flag from the whole row table as from its bucket-range chunks
(dictionary-encoded, as ``Converted.iter_rows`` yields them), so the flow can pass chunks
and never hold every row. The store is a folder holding the one document written: what is
tested is which sources the strike names."""

from __future__ import annotations

import tempfile

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from shardline.core.config import parse_config
from shardline.core.folder_store import FolderStore
from shardline.tasks.batch import Batch, Source
from shardline.tasks.setaside import record_validation_failure

CFG = parse_config({"dataset": {
    "name": "d", "incoming": "in/", "classes": ["a", "b"], "image": {"shape": [8, 8, 1]},
    "validation": {"max_quarantine_fraction": 0.5}}}).dataset
SOURCES = tuple(Source(f"in/{n}.jsonl", f"e{n}", 10, "jsonl") for n in "abcd")
BATCH = Batch("b1", SOURCES)


def _rows(spec: dict[str, list[str | None]]) -> pa.Table:
    """source letter -> each row's rule (None: the row passed)."""
    keys, status, rules = [], [], []
    for letter, row_rules in spec.items():
        for r in row_rules:
            keys.append(f"in/{letter}.jsonl")
            status.append("ok" if r is None else "quarantined")
            rules.append(r)
    return pa.table({"source_key": keys, "status": status, "rule": rules})


def _chunks(table: pa.Table, size: int) -> list[pa.Table]:
    out = []
    for i in range(0, table.num_rows, size):
        part = table.slice(i, size)
        out.append(pa.table({c: pc.dictionary_encode(part.column(c)) for c in part.column_names}))
    return out


def _strike(rows: object) -> tuple[set[str], bool]:
    with tempfile.TemporaryDirectory() as root:
        store = FolderStore(root)
        record_validation_failure(store, CFG, BATCH, "run1", rows, "validation failed")  # type: ignore[arg-type]
        (written,) = store.list("")
        doc = store.get_json(written.key)
    return {s["key"] for s in doc["suspects"]}, doc["final"]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_chunks_give_the_strike_the_whole_table_gives(size: int) -> None:
    table = _rows({"a": [None] * 5,                          # clean
                   "b": [None, "bad_label", "bad_label"],    # 2/3 bad: over the 0.5 limit
                   "c": [None, None, "bad_image"]})          # 1/3 bad: under it; d: no rows
    whole = _strike(table)
    assert whole == ({"in/b.jsonl", "in/d.jsonl"}, False)
    assert _strike(_chunks(table, size)) == whole
    assert _strike(iter(_chunks(table, size))) == whole     # a generator, read once


def test_only_empty_objects_is_a_final_strike_either_way() -> None:
    table = _rows({"a": ["empty_object"], "b": ["empty_object"], "c": ["empty_object"],
                   "d": ["empty_object"]})
    assert _strike(table) == ({s.key for s in SOURCES}, True)
    assert _strike(_chunks(table, 2)) == ({s.key for s in SOURCES}, True)
    mixed = _rows({"a": ["empty_object"], "b": [None], "c": ["empty_object"],
                   "d": ["empty_object"]})
    assert _strike(_chunks(mixed, 1))[1] is False          # a passing row: not final
