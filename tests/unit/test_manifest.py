"""The version document: built by the one builder, read back through ``Manifest`` (format 3:
Arrow batch lists), and format-1 and format-2 (JSON batch lists) documents still loading
through the same reader."""

from __future__ import annotations

import json

import pytest

from shardline.core import layout
from shardline.core.builder import build_version
from shardline.core.errors import SchemaChange, StoreError
from shardline.core.manifest import Manifest
from shardline.core.parts import SchemaInfo, ValidationSummary
from tests.unit.manifest_fixtures import (
    PREFIX,
    SCHEMA,
    Bucket,
    as_format2,
    format1_doc,
    new_batch,
    publish,
)


def history(n: int, **kw: object) -> tuple[Bucket, list[Manifest]]:
    bucket, out, parent = Bucket(), [], None
    for i in range(1, n + 1):
        parent = publish(bucket, parent, i, **kw)
        out.append(parent)
    return bucket, out


def test_first_version_references_its_batch_list_schema_and_config() -> None:
    bucket, [m] = history(1)
    doc = json.loads(bucket.objects[layout.version_key(PREFIX, 1)])
    assert doc["format"] == 3 and doc["parent"] is None and doc["checkpoint"] is None
    [ref] = doc["batch_lists"]
    assert ref["key"] == layout.batch_list_key(PREFIX, new_batch(1).id, "run1")
    assert ref["rows"] == 200 and ref["shards"] == 2 and ref["quarantined"] == 3
    assert "shards" not in doc and "sources" not in doc      # not inline: in the batch list
    assert m.schema == SCHEMA and m.config == {"name": "toy"}
    assert [s.path for s in m.shards] == [s.path for s in new_batch(1).shards]
    assert m.new_shards == [s.path for s in new_batch(1).shards]
    assert m.rows == m.new_rows == 200 and m.bytes == 200 * 96
    assert m.sources == new_batch(1).sources
    assert m.quarantine.rows == 3 and m.quarantine["by_rule"] == {"missing_label": 3}
    assert [s.rows for s in m.quarantine.shards] == [3]
    assert m.validation.success and m.validation["suites"] == ["toy.batch"]


def test_every_version_resolves_to_exactly_its_shards() -> None:
    bucket, ms = history(25)
    for v in range(1, 26):
        m = bucket.open(v)          # fresh reader: nothing cached
        want = [s.path for i in range(1, v + 1) for s in new_batch(i).shards]
        assert [s.path for s in m.shards] == want
        assert [b.id for b in m.batches] == [new_batch(i).id for i in range(1, v + 1)]
        assert [b.version for b in m.batches] == list(range(1, v + 1))
        assert m.new_shards == [s.path for s in new_batch(v).shards]
        assert m.rows == 200 * v and m.totals.shards == 2 * v and m.totals.batches == v
        assert m.quarantine.total_rows == 3 * v and len(m.quarantine.shards) == v
        assert m.parent == (v - 1 or None)


def test_checkpoint_every_ten_keeps_the_document_small() -> None:
    bucket, ms = history(25)
    refs = [len(m.doc.batch_lists) for m in ms if m.doc]
    assert refs == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] * 2 + [1, 2, 3, 4, 5]
    assert ms[9].doc and ms[9].doc.checkpoint is None
    ck = ms[10].doc.checkpoint if ms[10].doc else None
    assert ck is not None and ck.version == 10 and ck.batches == 10
    assert ck.key == layout.checkpoint_key(PREFIX, 10, "run11")
    ck2 = ms[20].doc.checkpoint if ms[20].doc else None
    assert ck2 is not None and ck2.version == 20 and ck2.batches == 20
    size = {m.version: len(bucket.objects[layout.version_key(PREFIX, m.version)]) for m in ms}
    assert size[12] <= 2.0 * size[2] and max(size.values()) <= 2.0 * size[10] + 1


def test_shards_since_reads_only_the_newer_batch_lists() -> None:
    bucket, _ = history(14)
    m = bucket.open(14)
    bucket.reads.clear()
    newer = m.shards_since(12)
    assert [s.batch for s in newer] == [new_batch(13).id] * 2 + [new_batch(14).id] * 2
    lists = [k for k in bucket.reads if "/manifests/batch=" in k]
    assert len(lists) == 2
    bucket.reads.clear()
    assert m.new_rows == 200 and m.rows == 2800 and len(m.batches) == 14
    assert not [k for k in bucket.reads if "/manifests/batch=" in k]   # counts need no list


def test_a_changed_batch_list_is_refused_naming_the_key() -> None:
    bucket, _ = history(2)
    key = layout.batch_list_key(PREFIX, new_batch(1).id, "run1")
    data = bytearray(bucket.objects[key])
    data[len(data) // 2] ^= 1                # one bit of the Arrow file
    bucket.objects[key] = bytes(data)
    with pytest.raises(StoreError, match=f"{key}: sha256 .* changed after it was published"):
        bucket.open(2).shards   # noqa: B018


def test_format1_manifest_loads_through_the_same_reader() -> None:
    m = Manifest(format1_doc(2))
    assert m.format == 1 and m.version == 2 and m.parent == 1
    assert len(m.shards) == 4 and m.rows == 400 and m.new_rows == 200
    assert m.new_shards == [s.path for s in new_batch(2).shards]
    assert [s.path for s in m.shards_since(1)] == m.new_shards
    assert m.batch(new_batch(1).id) is not None and m.new_batch == m.batches[-1]
    assert m.schema["shape"] == [8, 8, 1] and m.validation["success"]
    assert m.quarantine["rows"] == 3 and len(m.quarantine["shards"]) == 2
    assert m.sources[0].key == "incoming/toy/2.csv" and m.shards[0].label_counts == {}
    assert m.totals.quarantined == 6


def test_format2_child_of_a_format1_parent_migrates_the_history_once() -> None:
    bucket = Bucket()
    v1doc = format1_doc(3)
    bucket.objects[layout.version_key(PREFIX, 3)] = json.dumps(v1doc).encode()
    v4 = publish(bucket, bucket.open(3), 4)
    assert v4.doc and v4.doc.checkpoint is not None and v4.doc.checkpoint.version == 3
    assert len(v4.doc.batch_lists) == 1
    m = bucket.open(4)
    assert [s.path for s in m.shards] == \
        [s["path"] for s in v1doc["shards"]] + [s.path for s in new_batch(4).shards]
    assert [b.version for b in m.batches] == [1, 2, 3, 4]
    assert len(m.quarantine.shards) == 4 and m.quarantine.total_rows == 12
    v5 = publish(bucket, m, 5)
    assert v5.doc and v5.doc.checkpoint == v4.doc.checkpoint and len(v5.shards) == 10


def test_a_different_schema_is_refused() -> None:
    bucket, [m] = history(1)
    other = SchemaInfo(fingerprint="e" * 16, fields=[], shape=[4, 4, 1], classes=["a"])
    # a refusal, not a lost race: SchemaChange is never retried (core.evolution)
    with pytest.raises(SchemaChange, match="new dataset name"):
        build_version(PREFIX, dataset="toy", schema=other, config={}, parent=m,
                      batch=new_batch(2), validation=ValidationSummary(success=True))


def test_unknown_format_and_missing_fields_are_named() -> None:
    with pytest.raises(StoreError, match="has format 9; this shardline reads formats"):
        Manifest({**format1_doc(1), "format": 9})
    bucket, _ = history(1)
    key = layout.version_key(PREFIX, 1)
    doc = json.loads(bucket.objects[key])
    del doc["batch_lists"][0]["sha256"]
    with pytest.raises(StoreError, match=r"BatchListRef lacks field\(s\) \['sha256'\]"):
        Manifest(doc, bucket.get, key)
    with pytest.raises(StoreError, match="needs a way to read"):
        Manifest(json.loads(bucket.objects[key]))


def test_draft_reads_as_the_committed_version() -> None:
    bucket, [m1] = history(1)
    draft = build_version(PREFIX, dataset="toy", schema=SCHEMA, config={"name": "toy"},
                          parent=m1, batch=new_batch(2),
                          validation=ValidationSummary(success=True))
    seen = draft.manifest()                  # before the commit: no bucket write needed
    assert [s.path for s in seen.shards] == [s.path for s in bucket.commit(draft).shards]


def test_draft_names_the_objects_only_its_run_writes() -> None:
    bucket, ms = history(10)
    draft = build_version(PREFIX, dataset="toy", schema=SCHEMA, config={"name": "toy"},
                          parent=ms[-1], batch=new_batch(11),
                          validation=ValidationSummary(success=True))
    assert draft.new_checkpoint == layout.checkpoint_key(PREFIX, 10, "run11")
    assert sorted(draft.run_objects) == sorted(
        [layout.batch_list_key(PREFIX, new_batch(11).id, "run11"), draft.new_checkpoint])
    assert draft.doc.schema.key in draft.objects and draft.doc.schema.key not in \
        draft.run_objects                 # shared, content-addressed: never deleted
    plain = build_version(PREFIX, dataset="toy", schema=SCHEMA, config={"name": "toy"},
                          parent=ms[4], batch=new_batch(6),
                          validation=ValidationSummary(success=True))
    assert plain.new_checkpoint is None


def test_format2_json_history_loads_and_continues_as_format3() -> None:
    bucket, _ = history(14)
    as_format2(bucket)
    m = bucket.open(14)
    assert m.format == 2 and all(r.key.endswith(".json") for r in m.batch_lists)
    want = [s.path for i in range(1, 15) for s in new_batch(i).shards]
    assert [s.path for s in m.shards] == want
    assert [s.path for s in m.shard_columns.entries()] == want
    assert m.shards[0] == new_batch(1).shards[0] and m.sources == new_batch(14).sources
    assert len(m.quarantine.shards) == 14
    v15 = publish(bucket, m, 15)
    assert v15.format == 3 and v15.batch_lists[-1].key.endswith(".arrow")
    m15 = bucket.open(15)
    assert [s.path for s in m15.shard_columns.entries()] == \
        want + [s.path for s in new_batch(15).shards]
    assert [s.path for s in m15.shards] == want + [s.path for s in new_batch(15).shards]
    assert m15.shards[-1] == new_batch(15).shards[-1]


def test_arrow_batch_list_round_trips_every_field() -> None:
    bucket, [m] = history(1)
    assert bucket.objects[m.batch_lists[0].key][:6] == b"ARROW1"
    fresh = bucket.open(1)
    assert fresh.shard_columns.entries() == new_batch(1).shards
    assert fresh.new() == new_batch(1).shards
    assert fresh.new_quarantine() == new_batch(1).quarantine_shards
    assert fresh.sources == new_batch(1).sources
