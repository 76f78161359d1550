"""Store errors against a real S3 server: what a retry can fix and what it cannot."""

from __future__ import annotations

import dataclasses

import pytest

from shardline.core.config import StoreSettings
from shardline.core.errors import PermanentStoreError, TransientStoreError, is_transient
from shardline.core.store import ObjectStore
from shardline.infra import procs


def test_missing_bucket_is_permanent_and_says_so(store_settings: StoreSettings) -> None:
    store = ObjectStore(dataclasses.replace(store_settings, bucket="no-such-bucket-here"))
    with pytest.raises(PermanentStoreError, match="SHARDLINE_BUCKET") as e:
        list(store.list("lake/"))
    assert "s3://no-such-bucket-here/" in str(e.value)
    assert not is_transient(e.value)


def test_missing_key_is_permanent(store: ObjectStore) -> None:
    with pytest.raises(PermanentStoreError, match="does not exist"):
        store.get_bytes("lake/none.json")


def test_unreachable_endpoint_is_transient() -> None:
    port = procs.free_port()          # nothing listens there
    store = ObjectStore(StoreSettings(bucket="b", endpoint_url=f"http://127.0.0.1:{port}",
                                      access_key="k", secret_key="s", max_attempts=1,
                                      connect_timeout_s=1))
    with pytest.raises(TransientStoreError, match=f"127.0.0.1:{port}") as e:
        store.head("x")
    assert is_transient(e.value)


def test_check_bucket_passes_and_names_a_missing_bucket(store: ObjectStore) -> None:
    store.check_bucket()
    other = ObjectStore(dataclasses.replace(store.settings, bucket="not-made-yet"))
    with pytest.raises(PermanentStoreError, match="SHARDLINE_BUCKET"):
        other.check_bucket()
    other.ensure_bucket()
    other.check_bucket()


def test_upload_file_streams_a_large_file_in_parts(store: ObjectStore, tmp_path) -> None:
    """A file over the multipart threshold arrives whole (its ETag is a multipart one), and
    a failed upload names the key."""
    path = tmp_path / "big.bin"
    body = bytes(range(256)) * (40 * 1024 + 7)              # ~10 MB: above 8 MB, two parts
    path.write_bytes(body)
    store.upload_file("staging/x/big.bin", str(path))
    assert store.get_bytes("staging/x/big.bin") == body
    info = store.head("staging/x/big.bin")
    assert info is not None and "-" in info.etag            # multipart: "<md5>-<parts>"
    missing = dataclasses.replace(store.settings, bucket="no-such-bucket-upload")
    with pytest.raises(PermanentStoreError, match="no-such-bucket-upload"):
        ObjectStore(missing).upload_file("k", str(path))
