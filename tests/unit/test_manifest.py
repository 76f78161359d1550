"""The version document: built by the one builder, read back through ``Manifest`` (format 3:
Arrow batch lists); format-1 and format-2 (JSON batch lists) documents refused in one line
naming the format and ``shardline migrate``."""

from __future__ import annotations

import json

import pytest

from shardline.core import layout
from shardline.core.builder import build_version
from shardline.core.errors import SchemaChange, StoreError
from shardline.core.manifest import Manifest
from shardline.core.parts import SchemaInfo, ValidationSummary
from shardline.core.version_doc import UnsupportedFormat, digest
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
    assert m.quarantine.rows == 3 and m.quarantine.by_rule == {"missing_label": 3}
    assert [s.rows for s in m.quarantine.shards] == [3]
    assert m.validation.success and m.validation.suites == ["toy.batch"]


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


def test_counts_and_the_new_batch_read_no_other_batch_list() -> None:
    bucket, _ = history(14)
    m = bucket.open(14)
    bucket.reads.clear()
    assert [s.batch for s in m.new()] == [new_batch(14).id] * 2
    assert [k for k in bucket.reads if "/manifests/batch=" in k] == [m.batch_lists[-1].key]
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


def test_a_different_schema_is_refused() -> None:
    bucket, [m] = history(1)
    other = SchemaInfo(fingerprint="e" * 16, fields=[], shape=[4, 4, 1], classes=["a"])
    # a refusal, not a lost race: SchemaChange is never retried (core.evolution)
    with pytest.raises(SchemaChange, match="new dataset name"):
        build_version(PREFIX, dataset="toy", schema=other, config={}, parent=m,
                      batch=new_batch(2), validation=ValidationSummary(success=True))


def _refusal(exc: pytest.ExceptionInfo[UnsupportedFormat]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and "reads format 3 only" in msg
    return msg


def test_old_formats_are_refused_naming_the_format_and_the_command() -> None:
    key = layout.version_key(PREFIX, 2)
    with pytest.raises(UnsupportedFormat) as e:
        Manifest(format1_doc(2), Bucket().get, key)
    msg = _refusal(e)
    assert msg.startswith(f"{key}: version document format 1;")
    assert "`shardline migrate --config F`" in msg and e.value.found == 1
    bucket, _ = history(3)
    as_format2(bucket)
    with pytest.raises(UnsupportedFormat, match="format 2; .*`shardline migrate --config F`"):
        bucket.open(3)
    # a format-3 document still naming a format-2 (JSON) batch list: refused when read
    bucket, _ = history(3)
    doc = json.loads(bucket.objects[layout.version_key(PREFIX, 3)])
    as_format2(bucket)
    for ref in doc["batch_lists"]:
        ref["key"] = ref["key"][:-len(".arrow")] + ".json"
        ref["sha256"] = digest(bucket.objects[ref["key"]])
    json_key = doc["batch_lists"][0]["key"]
    bucket.objects[layout.version_key(PREFIX, 3)] = json.dumps(doc).encode()
    m = bucket.open(3)
    with pytest.raises(UnsupportedFormat) as e:
        m.shards  # noqa: B018
    assert _refusal(e).startswith(f"{json_key}: batch list (JSON) format 2;")


def test_unknown_format_and_missing_fields_are_named() -> None:
    bucket, _ = history(1)
    key = layout.version_key(PREFIX, 1)
    doc = json.loads(bucket.objects[key])
    with pytest.raises(UnsupportedFormat) as e:
        Manifest({**doc, "format": 9}, bucket.get, key)
    assert "format 9; this shardline reads format 3 only" in _refusal(e)
    assert "upgrade shardline" in str(e.value) and "migrate" not in str(e.value)
    del doc["batch_lists"][0]["sha256"]
    with pytest.raises(StoreError, match=r"BatchListRef lacks field\(s\) \['sha256'\]"):
        Manifest(doc, bucket.get, key)


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


def test_arrow_batch_list_round_trips_every_field() -> None:
    bucket, [m] = history(1)
    assert bucket.objects[m.batch_lists[0].key][:6] == b"ARROW1"
    fresh = bucket.open(1)
    assert fresh.shard_columns.entries() == new_batch(1).shards
    assert fresh.new() == new_batch(1).shards
    assert fresh.new_quarantine() == new_batch(1).quarantine_shards
    assert fresh.sources == new_batch(1).sources
