import json
import random

import pyarrow as pa
import pytest

from shardline.tasks.batch import Source
from shardline.tasks.convert.dedupe import find_duplicates
from shardline.tasks.convert.plan import plan_groups, slice_counts, useful_tasks
from shardline.tasks.convert.split import Part, jsonl_cuts, jsonl_parts, row_group_parts


def test_plan_groups_balances_bytes_and_keeps_every_source_once():
    sources = tuple(Source(f"k{i:02d}", "e", size, "jsonl")
                    for i, size in enumerate([100, 90, 50, 40, 30, 20, 10, 5]))
    groups = plan_groups(sources, 3)
    assert len(groups) == 3
    flat = [s for g in groups for s in g]
    assert sorted(s.key for s in flat) == sorted(s.key for s in sources)
    loads = [sum(s.size for s in g) for g in groups]
    assert max(loads) - min(loads) <= 30   # LPT on this input: 115, 115, 115
    assert plan_groups(sources[:2], 8) and len(plan_groups(sources[:2], 8)) == 2


def test_task_count_follows_size_and_cores():
    assert useful_tasks(100 * 1000, 2) == 1           # a small batch: one task
    assert useful_tasks(10 * (50 << 20), 2) == 4      # large: two tasks per core
    assert useful_tasks(500 << 20, 1) == 2


def test_duplicates_first_occurrence_wins_and_published_ids_lose():
    ok = pa.table({"id": ["a", "b", "a", "c", "b"],
                   "source_key": ["k2", "k1", "k1", "k1", "k3"],
                   "source_row": [0, 5, 9, 1, 0]})
    dups = find_duplicates(ok, pa.array(["c"]))
    by_index = {d.meta_index: d.message for d in dups}
    # "a": k1 row 9 (index 2) comes before k2 row 0 (index 0) in (key, row) order
    assert set(by_index) == {0, 3, 4}
    assert "k1 row 9" in by_index[0] and "already appears" in by_index[0]
    assert "published" in by_index[3]
    assert "k1 row 5" in by_index[4]
    assert find_duplicates(ok.slice(0, 0), pa.array([], pa.string())) == []


# -- slicing large objects (tasks.split) -------------------------------------------------
def _jsonl(n_lines: int, seed: int) -> bytes:
    """Lines of varied length, some blank, some very long (longer than a slice)."""
    rng = random.Random(seed)
    lines = []
    for i in range(n_lines):
        kind = rng.random()
        if kind < 0.1:
            lines.append("")
        elif kind < 0.13:
            lines.append(json.dumps({"id": str(i), "x": "y" * rng.randint(500, 3000)}))
        else:
            lines.append(json.dumps({"id": str(i), "x": "y" * rng.randint(0, 80)}))
    return ("\n".join(lines) + "\n").encode()


def _chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def _numbered_lines(data: bytes, parts) -> list[tuple[int, bytes]]:
    """(line number, line) of every line, read slice by slice as the tasks read them."""
    out = []
    for p in parts:
        start, stop = (0, len(data)) if p.whole else (p.start, p.stop)
        for j, line in enumerate(data[start:stop].split(b"\n")):
            out.append((p.first_row + j, line))
    return [(i, line) for i, line in out if line]


@pytest.mark.parametrize("tail", [b"", b'{"id": "cut", "x": "yy'])
@pytest.mark.parametrize("pieces", [2, 3, 7, 40])
def test_jsonl_cuts_land_after_newlines_and_count_lines(pieces, tail):
    data = _jsonl(400, seed=pieces) + tail
    size = len(data)
    targets = [size * j // pieces for j in range(1, pieces)]
    cuts = jsonl_cuts([data], targets, size)
    assert cuts, "a 400-line object must be cut"
    offsets = [c for c, _ in cuts]
    assert offsets == sorted(set(offsets)) and offsets[0] > 0 and offsets[-1] < size
    for off, lines in cuts:
        assert data[off - 1:off] == b"\n", f"cut at {off} is not at a line start"
        assert lines == data[:off].count(b"\n")
    # each cut is the first line start at or after its target (or a merged target)
    for t in targets:
        nxt = [c for c in offsets if c >= t]
        if nxt:
            assert b"\n" not in data[t:nxt[0] - 1]
    # the chunking of the stream does not matter (1-byte chunks: newlines at every edge)
    for chunk in (1, 7, 64, 4096):
        assert jsonl_cuts(_chunked(data, chunk), targets, size) == cuts


@pytest.mark.parametrize("tail", [b"", b'{"id": "cut", "x": "yy'])
def test_jsonl_parts_cover_the_object_once_with_whole_object_line_numbers(tail):
    data = _jsonl(300, seed=3) + tail
    src = Source("k.jsonl", "etag", len(data), "jsonl")
    size = len(data)
    parts = jsonl_parts(src, "etag", jsonl_cuts([data], [size // 4, size // 2, size * 3 // 4],
                                                size))
    assert len(parts) == 4 and not any(p.whole for p in parts)
    assert [p.start for p in parts] == [0] + [p.stop for p in parts[:-1]], "gap or overlap"
    assert parts[-1].stop == size
    assert sum(p.size for p in parts) == size
    assert all(p.etag == "etag" and p.key == "k.jsonl" for p in parts)
    assert _numbered_lines(data, parts) == _numbered_lines(data, [Part.of(src)])
    # only the last slice may end without a newline (a cut-off tail stays in the last slice)
    assert all(data[p.stop - 1:p.stop] == b"\n" for p in parts[:-1])


def test_jsonl_lines_longer_than_a_slice_merge_cuts_and_no_cut_at_the_end():
    data = b'{"a": 1}\n' + b'{"long": "' + b"x" * 1000 + b'"}\n' + b'{"b": 2}\n'
    size = len(data)
    # three targets inside the long line collapse into one cut after it
    assert jsonl_cuts([data], [20, 400, 800], size) == [(size - 9, 2)]
    # a target inside the last line: its newline is the object's last byte, and a cut
    # there would leave an empty slice, so there is no cut
    assert jsonl_cuts([data], [size - 5], size) == []
    one_line = b'{"only": "' + b"x" * 100 + b'"}'       # no newline at all
    assert jsonl_cuts([one_line], [30, 60], len(one_line)) == []
    src = Source("k", "e", len(one_line), "jsonl")
    assert jsonl_parts(src, "e", []) == (Part.of(src),)


def test_jsonl_cuts_stop_reading_once_the_last_cut_is_known():
    data = _jsonl(200, seed=5)
    read = []

    def chunks():
        for c in _chunked(data, 100):
            read.append(len(c))
            yield c

    cuts = jsonl_cuts(chunks(), [len(data) // 3], len(data))
    assert len(cuts) == 1 and sum(read) < len(data) // 2


def test_row_group_parts_balance_bytes_and_number_rows_from_the_file_start():
    src = Source("k.parquet", "e", 10_000, "parquet")
    groups = [(100, 1000), (100, 1000), (50, 500), (100, 1000), (100, 1000), (20, 200)]
    parts = row_group_parts(src, "e", groups, 3)
    assert [(p.start, p.stop) for p in parts] == [(0, 2), (2, 4), (4, 6)]
    assert [p.first_row for p in parts] == [0, 200, 350]
    assert [p.size for p in parts] == [2000, 1500, 1200]
    # more pieces than row groups: one per row group; one row group: whole
    assert len(row_group_parts(src, "e", groups, 50)) == len(groups)
    assert row_group_parts(src, "e", groups[:1], 4) == (Part.of(src),)


def test_only_large_jsonl_parquet_zarr_objects_are_sliced_when_sources_are_few():
    mb = 1 << 20
    big = Source("big.jsonl", "e", 160 * mb, "jsonl")
    # enough sources for the tasks: nothing is cut, however large
    many = tuple(Source(f"k{i}.jsonl", "e", 160 * mb, "jsonl") for i in range(4))
    assert slice_counts(many, 4) == [1, 1, 1, 1]
    # one large object, 4 useful tasks: 4 slices of ~40 MB
    assert useful_tasks(big.size, 2) == 4
    assert slice_counts((big,), 4) == [4]
    # a small object beside it stays whole; a task's share never drops below the minimum
    small = Source("small.jsonl", "e", 3 * mb, "jsonl")
    assert slice_counts((big, small), 4) == [4, 1]
    assert slice_counts((Source("m.jsonl", "e", 20 * mb, "jsonl"),), 4) == [3]
    assert slice_counts((Source("m.jsonl", "e", 20 * mb, "jsonl"),), 4, min_task_bytes=1) == [4]
    # CSV (newlines inside quoted fields) and images are never cut; a Zarr group may be
    # (zarr_typed.split_zarr: typed groups only, between whole chunks)
    for fmt in ("csv", "image", "unknown"):
        assert slice_counts((Source("x", "e", 160 * mb, fmt),), 4) == [1]
    assert slice_counts((Source("g.zarr/", "e", 160 * mb, "zarr"),), 4) == [4]
    assert slice_counts((Source("p.parquet", "e", 160 * mb, "parquet"),), 4) == [4]


def test_plan_groups_keeps_slices_of_one_object_apart_and_whole():
    data = _jsonl(500, seed=9)
    src = Source("big.jsonl", "e", len(data), "jsonl")
    size = len(data)
    parts = jsonl_parts(src, "e", jsonl_cuts([data], [size // 4, size // 2, size * 3 // 4],
                                             size))
    other = Source("small.jsonl", "e", 10, "jsonl")
    groups = plan_groups((*parts, other), 4)
    assert len(groups) == 4
    flat = [p for g in groups for p in g]
    assert sorted(flat, key=lambda p: (p.key, p.start)) == sorted(
        (*parts, Part.of(other)), key=lambda p: (p.key, p.start))
    # the four slices are the four largest units: one per task
    assert all(sum(p.key == "big.jsonl" for p in g) == 1 for g in groups)


def _reference_duplicates(ok: pa.Table, published: set[str]) -> dict[int, str]:
    """The rule spelled out one row at a time: (key, row) order, first occurrence wins,
    a published id always loses. Index -> 'published' | index of the kept row."""
    order = sorted(range(ok.num_rows), key=lambda i: (ok["source_key"][i].as_py(),
                                                     ok["source_row"][i].as_py()))
    first: dict[str, int] = {}
    out: dict[int, str] = {}
    for i in order:
        rid = ok["id"][i].as_py()
        if rid in published:
            out[i] = "published"
        elif rid in first:
            out[i] = f"kept {first[rid]}"
        else:
            first[rid] = i
    return out


def test_vectorised_duplicates_match_the_row_by_row_rule():
    import random

    import numpy as np

    rng = random.Random(11)
    for trial in range(40):
        n = rng.randint(1, 400)
        pool = [f"id{rng.randint(0, n)}" for _ in range(n)]       # many repeats
        ok = pa.table({"id": pool,
                       "source_key": [f"k{rng.randint(0, 5)}" for _ in range(n)],
                       "source_row": rng.sample(range(10 * n), n)})
        published = set(rng.sample(pool, rng.randint(0, min(5, n))))
        want = _reference_duplicates(ok, published)
        as_ids = find_duplicates(ok, pa.array(sorted(published), pa.string()))
        as_mask = find_duplicates(ok, np.array([i in published for i in pool]))
        for dups in (as_ids, as_mask):
            assert {d.meta_index for d in dups} == set(want), trial
            for d in dups:
                if want[d.meta_index] == "published":
                    assert "published version" in d.message
                else:
                    k = int(want[d.meta_index].split()[1])
                    kept = f"{ok['source_key'][k].as_py()} row {ok['source_row'][k].as_py()}"
                    assert f"already appears at {kept} in" in d.message
