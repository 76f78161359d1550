"""An incoming object deleted after detect listed it (issue 23): a read pinned to its ETag
raises ObjectDeleted, and convert names it "deleted during ingest" (never a strike, never a
quarantine row; the run detects again without it). The folder store, as the S3 store
(`tests/chaos/test_body_faults.py` on moto)."""

from __future__ import annotations

import pytest

from shardline.core.errors import ObjectDeleted, source_replaced
from shardline.core.folder_store import FolderStore
from shardline.tasks.batch import Source
from shardline.tasks.convert.readers import replaced_during_ingest


def test_a_pinned_read_of_a_deleted_object_names_the_deletion(tmp_path):
    store = FolderStore(tmp_path)
    etag = store.put_bytes("incoming/d/a.jsonl", b'{"id": 1, "label": 1}\n')
    assert store.get_bytes("incoming/d/a.jsonl", if_match=etag)
    store.delete(["incoming/d/a.jsonl"])
    with pytest.raises(ObjectDeleted, match="deleted since it was listed") as err:
        store.get_bytes("incoming/d/a.jsonl", if_match=etag)
    named = replaced_during_ingest(Source("incoming/d/a.jsonl", etag, 22, "jsonl"),
                                   str(err.value))
    assert "incoming/d/a.jsonl was deleted during ingest" in str(named)
    assert source_replaced(named)           # the driver detects again: no strike
