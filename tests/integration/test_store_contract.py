"""One contract for every store: the S3 store on a moto server (HTTP) and the folder store
behave the same for each operation of :class:`shardline.core.store_api.Store`, the
conditional-write failures included. The counting wrapper passes everything through."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path

import pytest

from shardline.core.counting_store import CountingStore, Counts
from shardline.core.errors import ObjectChanged, ObjectExists, PermanentStoreError
from shardline.core.folder_store import FolderStore
from shardline.core.store import ObjectStore, Store

BODY = bytes(range(256)) * 40          # 10,240 bytes


@pytest.fixture(params=["s3", "folder"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "folder":
        return FolderStore(tmp_path / "bucket")
    return ObjectStore(request.getfixturevalue("store_settings"))


def test_put_get_head_list_agree_on_bytes_size_and_etag(any_store: Store) -> None:
    etag = any_store.put_bytes("d/x.bin", BODY)
    head = any_store.head("d/x.bin")
    assert head is not None and (head.key, head.etag, head.size) == ("d/x.bin", etag, len(BODY))
    assert [(o.key, o.etag, o.size) for o in any_store.list("d/")] == [
        ("d/x.bin", etag, len(BODY))]
    assert any_store.get_bytes("d/x.bin") == BODY
    assert any_store.get_bytes("d/x.bin", (10, 19)) == BODY[10:20]           # inclusive
    assert any_store.get_bytes("d/x.bin", (len(BODY) - 5, len(BODY) + 100)) == BODY[-5:]
    assert any_store.get_bytes("d/x.bin", (0, 3), if_match=etag) == BODY[:4]
    doc = {"b": [1, 2], "a": "ü"}
    any_store.put_json("d/doc.json", doc)
    assert any_store.get_json("d/doc.json") == doc
    assert any_store.uri("d/x.bin").endswith("d/x.bin")


def test_a_missing_object_is_none_on_head_and_a_permanent_error_naming_it_on_reads(
        any_store: Store) -> None:
    assert any_store.head("d/missing") is None
    reads = [lambda: any_store.get_bytes("d/missing"),
             lambda: any_store.get_bytes("d/missing", (0, 9)),
             lambda: any_store.stream("d/missing"),
             lambda: any_store.read_into("d/missing", memoryview(bytearray(16)), print),
             lambda: any_store.copy("d/missing", "d/copy")]
    for read in reads:
        with pytest.raises(PermanentStoreError, match="d/missing") as err:
            read()
        assert not isinstance(err.value, ObjectChanged | ObjectExists)
    assert any_store.head("d/copy") is None


def test_if_none_match_creates_once_and_raises_object_exists_after(any_store: Store) -> None:
    first = any_store.put_bytes("m/v1.json", b"one", if_none_match=True)
    with pytest.raises(ObjectExists, match="m/v1.json"):
        any_store.put_bytes("m/v1.json", b"two", if_none_match=True)
    assert any_store.get_bytes("m/v1.json") == b"one"
    assert any_store.head("m/v1.json").etag == first  # type: ignore[union-attr]


def test_if_match_swaps_only_the_version_read(any_store: Store) -> None:
    old = any_store.put_bytes("m/head.json", b"one")
    new = any_store.put_bytes("m/head.json", b"two", if_match=old)
    assert new != old and any_store.get_bytes("m/head.json") == b"two"
    with pytest.raises(ObjectChanged, match="m/head.json"):
        any_store.put_bytes("m/head.json", b"three", if_match=old)     # stale ETag
    assert any_store.get_bytes("m/head.json") == b"two"
    with pytest.raises(ObjectChanged, match="m/head.json"):
        any_store.get_bytes("m/head.json", if_match=old)                # reads pin too
    with pytest.raises(ObjectChanged, match="m/head.json"):
        any_store.stream("m/head.json", if_match=old)
    with pytest.raises(PermanentStoreError, match="m/absent"):
        any_store.put_bytes("m/absent", b"x", if_match=new)             # nothing to match
    assert any_store.head("m/absent") is None


def test_racing_creates_have_exactly_one_winner(any_store: Store) -> None:
    won, lost = [], []

    def create(i: int) -> None:
        try:
            any_store.put_bytes("race/v7.json", str(i).encode(), if_none_match=True)
            won.append(i)
        except ObjectExists:
            lost.append(i)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 7
    assert any_store.get_bytes("race/v7.json") == str(won[0]).encode()


def test_list_matches_a_string_prefix_in_key_order(any_store: Store) -> None:
    keys = ["a/c/d/e", "a/b/2", "a/bc", "b", "a/b/1"]
    for k in keys:
        any_store.put_bytes(k, k.encode())
    assert [o.key for o in any_store.list("")] == sorted(keys)
    assert [o.key for o in any_store.list("a/b")] == ["a/b/1", "a/b/2", "a/bc"]
    assert [o.key for o in any_store.list("a/b/")] == ["a/b/1", "a/b/2"]
    assert list(any_store.list("zz/")) == []
    assert any_store.list_prefixes("a/") == ["a/b/", "a/c/"]


def test_copy_upload_and_delete(any_store: Store, tmp_path: Path) -> None:
    any_store.put_bytes("s/src", BODY)
    any_store.copy("s/src", "t/dst")
    assert any_store.get_bytes("t/dst") == BODY
    big = tmp_path / "big.bin"
    big.write_bytes(BODY * 1000)                   # 10 MB: multipart on S3
    any_store.upload_file("u/big.bin", str(big))
    assert any_store.get_bytes("u/big.bin") == BODY * 1000
    assert any_store.delete(["s/src", "t/dst", "t/never-there"]) == 3
    assert [o.key for o in any_store.list("")] == ["u/big.bin"]


def test_stream_and_read_into_deliver_the_whole_object(any_store: Store) -> None:
    etag = any_store.put_bytes("r/obj", BODY)
    info, chunks = any_store.stream("r/obj", if_match=etag, chunk_bytes=3000)
    with chunks:
        parts = list(chunks)
    assert (info.etag, info.size) == (etag, len(BODY))
    assert b"".join(parts) == BODY and max(map(len, parts)) <= 3000
    got: list[bytes] = []
    received = any_store.read_into("r/obj", memoryview(bytearray(1000)),
                                   lambda view: got.append(bytes(view)))
    assert received.size == len(BODY) and b"".join(got) == BODY
    assert max(map(len, got)) <= 1000


def test_a_store_pickles_to_one_that_reads_the_same_objects(any_store: Store) -> None:
    any_store.put_bytes("p/k", b"pickled")
    again = pickle.loads(pickle.dumps(any_store))
    assert again.get_bytes("p/k") == b"pickled"
    counting = CountingStore(any_store, Counts(lambda key: key))
    copied = pickle.loads(pickle.dumps(counting))      # the wrapped store, not the counts
    assert type(copied) is type(any_store) and copied.get_bytes("p/k") == b"pickled"


def test_counting_wraps_any_store_and_counts_by_kind(any_store: Store) -> None:
    counting = CountingStore(any_store, Counts(kind=lambda key: key.split("/")[0]))
    counting.put_json("docs/a.json", {"n": 1})
    counting.put_bytes("blobs/b", BODY)
    assert counting.get_json("docs/a.json") == {"n": 1}             # counted as a get
    assert counting.get_bytes("blobs/b", (0, 99)) == BODY[:100]
    assert counting.head("blobs/none") is None
    assert [o.key for o in counting.list("blobs/")] == ["blobs/b"]
    counting.delete(["blobs/b"])
    c = counting.counts.to_dict()
    assert c["get"] == {"docs": {"n": 1, "bytes": len(any_store.get_bytes("docs/a.json"))},
                        "blobs": {"n": 1, "bytes": 100}}
    assert c["put"]["blobs"] == {"n": 1, "bytes": len(BODY)}
    assert (c["head"]["blobs"]["n"], c["list"]["blobs"]["n"], c["delete"]["blobs"]["n"]) == (
        1, 1, 1)
    assert any_store.head("blobs/b") is None           # the wrapper wrote through
