"""Deletion vectors and the optional parts they add to a format-3 version document."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardline.core.deletions import (
    ChangeSummary,
    DeletionRef,
    DeletionsRef,
    decode_index,
    decode_vector,
    drop_masked,
    encode_index,
    encode_vector,
    index_ref,
    union,
)
from shardline.core.errors import StoreError
from shardline.core.version_doc import VersionDoc, digest
from tests.unit.manifest_fixtures import Bucket, publish


def _ref(body: bytes, shard: str = "p/shards/a.arrow") -> DeletionRef:
    return DeletionRef(shard=shard, batch="b", key="p/deletes/dv.arrow", sha256=digest(body),
                       rows=3, version=2)


def test_a_vector_round_trips_sorted_and_distinct_and_a_changed_one_is_refused() -> None:
    body = encode_vector("p/shards/a.arrow", "0" * 64, np.array([9, 2, 2, 5]))
    assert decode_vector(body, _ref(body)).tolist() == [2, 5, 9]
    with pytest.raises(StoreError, match="changed after it was published"):
        decode_vector(body, dataclasses.replace(_ref(body), sha256="f" * 64))
    with pytest.raises(StoreError, match="not the deletion vector of"):
        decode_vector(body, _ref(body, shard="p/shards/other.arrow"))


def test_the_index_round_trips_and_masks_are_unions() -> None:
    body = encode_vector("s", "0" * 64, np.array([1]))
    refs = [_ref(body, "s"), dataclasses.replace(_ref(body, "t"), rows=2)]
    data = encode_index("toy", 2, refs)
    ref = index_ref("p/deletes/index.json", data, refs)
    assert ref.vectors == 2 and ref.rows == 5
    assert decode_index(data, ref) == refs
    assert union([np.array([4, 1]), np.array([1, 7])]).tolist() == [1, 4, 7]
    assert drop_masked(np.array([7, 1, 4, 9]), np.array([1, 4])).tolist() == [7, 9]
    assert drop_masked(np.array([3]), None).tolist() == [3]


def test_documents_without_deletions_keep_their_bytes_and_with_them_read_back() -> None:
    bucket = Bucket()
    doc = publish(bucket, publish(bucket, None, 1), 2).doc
    plain = doc.to_dict()
    assert "deletions" not in plain and "changes" not in plain     # old documents unchanged
    with_dels = dataclasses.replace(
        doc, deletions=DeletionsRef(key="k", sha256="0" * 64, vectors=1, rows=4),
        changes=ChangeSummary(kind="delete", deleted=4))
    back = VersionDoc.from_dict(with_dels.to_dict(), "v")
    assert back == with_dels and VersionDoc.from_dict(plain, "v") == doc


def test_id_ranges_skip_batches_and_unset_ones_keep_the_bytes() -> None:
    bucket = Bucket()
    doc = publish(bucket, None, 1).doc
    ref = doc.batch_lists[0]
    assert ref.id_min is None and "id_min" not in doc.to_dict()["batch_lists"][0]
    assert ref.may_hold(["anything"])                        # no range recorded: probed
    ranged = dataclasses.replace(ref, id_min="d00100", id_max="d00199")
    assert ranged.may_hold(["d00050", "d00150"]) and ranged.may_hold(["d00199"])
    assert not ranged.may_hold(["d00050", "d00200", "e"]) and not ranged.may_hold([])
    back = VersionDoc.from_dict(dataclasses.replace(doc, batch_lists=[ranged]).to_dict(), "v")
    assert back.batch_lists[0] == ranged
