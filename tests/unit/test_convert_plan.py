
import pyarrow as pa

from tasks.convert import plan_groups, plan_task_count
from tasks.dedupe import find_duplicates
from tasks.detect import Batch, Source


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
    small = Batch("b", tuple(Source(f"k{i}", "e", 1000, "image") for i in range(100)))
    assert plan_task_count(small, 2) == 1
    big = Batch("b", tuple(Source(f"k{i}", "e", 50 << 20, "jsonl") for i in range(10)))
    assert plan_task_count(big, 2) == 4
    one = Batch("b", (Source("k", "e", 500 << 20, "jsonl"),))
    assert plan_task_count(one, 2) == 1


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
