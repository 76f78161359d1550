from datetime import UTC, datetime

from shardline.core.store import ObjectInfo
from shardline.tasks.batch import batch_id
from shardline.tasks.detect import group_sources, new_sources

T = datetime(2026, 1, 1, tzinfo=UTC)


def obj(key, etag="e", size=10):
    return ObjectInfo(key, etag, size, T)


def test_sources_by_format_and_zarr_groups_are_one_source():
    listing = [obj("in/a.jsonl"), obj("in/b.CSV"), obj("in/c.parquet"), obj("in/x/3/1.png"),
               obj("in/z.zarr/zarr.json", "1", 5), obj("in/z.zarr/images/c/0/0/0/0", "2", 7),
               obj("in/notes.txt"), obj("in/folder/")]
    got = {s.key: (s.format, s.size) for s in group_sources(listing)}
    assert got == {"in/a.jsonl": ("jsonl", 10), "in/b.CSV": ("csv", 10),
                   "in/c.parquet": ("parquet", 10), "in/x/3/1.png": ("image", 10),
                   "in/z.zarr/": ("zarr", 12), "in/notes.txt": ("unknown", 10)}


def test_zarr_group_etag_changes_when_a_member_changes():
    a = group_sources([obj("in/z.zarr/zarr.json", "1"), obj("in/z.zarr/images/0", "2")])
    b = group_sources([obj("in/z.zarr/zarr.json", "1"), obj("in/z.zarr/images/0", "3")])
    assert a[0].etag != b[0].etag


def test_batch_id_is_order_independent_and_content_sensitive():
    s1 = group_sources([obj("in/a.jsonl", "1"), obj("in/b.jsonl", "2")])
    assert batch_id(s1) == batch_id(list(reversed(s1)))
    s2 = group_sources([obj("in/a.jsonl", "1"), obj("in/b.jsonl", "changed")])
    assert batch_id(s1) != batch_id(s2)


def test_new_sources_diff_against_claimed():
    sources = group_sources([obj("in/a.jsonl", "1"), obj("in/b.jsonl", "2")])
    assert new_sources(sources, {("in/a.jsonl", "1"), ("in/b.jsonl", "2")}) is None
    batch = new_sources(sources, {("in/a.jsonl", "1")})
    assert [s.key for s in batch.sources] == ["in/b.jsonl"]
    # a re-upload with new content (new ETag) is new again
    again = new_sources(group_sources([obj("in/a.jsonl", "9")]), {("in/a.jsonl", "1")})
    assert again is not None and again.sources[0].etag == "9"
    # detecting the same uploads twice yields the same batch id
    assert new_sources(sources, set()).id == new_sources(list(sources), set()).id
