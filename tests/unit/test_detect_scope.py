"""Detect in O(new): the listing decisions (``tasks.listing``, pure), and detect's scopes on a
folder store counting its requests: an event run HEADs exactly the pending keys and lists
nothing under incoming/; a reconciling run lists from its high-water mark, in full when due
or asked, and finds what the event path missed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shardline.core import layout
from shardline.core.config import parse_config
from shardline.core.counting_store import CountingStore
from shardline.core.errors import ConfigError
from shardline.core.folder_store import FolderStore
from shardline.infra.events.model import EventSink, ObjectCreated
from shardline.tasks import listing, pending
from shardline.tasks.detect import Scope, detect, resolve_scope, settle_scope
from shardline.tasks.ledger import write_claim

T = datetime(2026, 11, 26, 12, tzinfo=UTC)
WEEK = timedelta(days=7)
IN = "incoming/d/"


def cfg(incremental: bool = True, every_h: float = 168.0):
    return parse_config({"dataset": {
        "name": "d", "incoming": IN, "root": "lake", "classes": ["a", "b"],
        "image": {"shape": [8, 8, 1]}, "incremental_listing": incremental,
        "full_listing_every_hours": every_h}}).dataset


# -- the decisions ----------------------------------------------------------------------
@pytest.mark.parametrize(("state", "incremental", "now", "force", "full", "marks"), [
    (None, True, T, False, True, {}),                                    # nothing recorded
    (listing.ListingState({"": "m"}, None), True, T, False, True, {}),       # never listed in full
    (listing.ListingState({"": "m"}, T - WEEK), True, T, False, True, {}),        # full is due
    (listing.ListingState({"": "m"}, T - timedelta(days=6)), True, T, False, False, {"": "m"}),
    (listing.ListingState({"": "m"}, T - timedelta(days=6)), True, T, True, True, {}),  # --full
    (listing.ListingState({"": "m"}, T - timedelta(days=6)), False, T, False, True, {}),  # off
    (listing.ListingState({}, T), True, T, False, False, {}),        # incremental, empty
])
def test_plan_listing(state, incremental, now, force, full, marks):
    plan = listing.plan_listing(state, incremental, WEEK, now, force)
    assert (plan.full, plan.marks) == (full, marks) and plan.why


def test_the_mark_stays_before_the_oldest_unresolved_partition_else_the_newest():
    keys = [f"{IN}2026-11-24/a.jsonl", f"{IN}2026-11-25/b.jsonl", f"{IN}2026-11-26/c.jsonl"]
    resolved_all = listing.next_marks(IN, keys, [], {"": "old"})[""]
    waiting = listing.next_marks(IN, keys, [keys[1]], {"": "old"})[""]
    assert listing.next_marks(IN, [], [], {"": "old"}) == {"": "old"}
    # the newest partition is listed again (uploads may still land in it), nothing before
    assert [k for k in keys if k > resolved_all] == keys[2:]
    assert [k for k in keys if k > waiting] == keys[1:]
    # flat keys: the partition is the name; StartAfter excludes only keys before it
    flat = [f"{IN}hist-000001.parquet", f"{IN}hist-000002.parquet"]
    mark = listing.next_marks(IN, flat, [flat[1]], {})[""]
    assert [k for k in flat if k > mark] == flat[1:]


def test_folder_store_lists_after_a_key_in_byte_order(tmp_path):
    store = FolderStore(tmp_path)
    for k in ("p/a", "p/b", "p/c/d", "p/\u00e9"):
        store.put_bytes(k, b"x")
    assert [o.key for o in store.list("p/", "p/b")] == ["p/c/d", "p/\u00e9"]
    assert [o.key for o in store.list("p/")][0] == "p/a"


# -- the event path -----------------------------------------------------------------------
def _requests(store: CountingStore, op: str, prefix: str = IN) -> int:
    return sum(v[0] for k, v in store.counts.ops.get(op, {}).items() if k.startswith(prefix))


def _upload(store, key: str, body: bytes = b'{"id": 1}\n') -> ObjectCreated:
    etag = store.put_bytes(key, body)
    return ObjectCreated(store.bucket, key, len(body), etag)


def _record(store, events) -> None:
    """What a bridge does before posting the events (no Prefect server needed for it)."""
    with EventSink("http://127.0.0.1:9/api", pending=store) as sink:
        sink.record_pending(events)


def test_an_event_run_heads_exactly_its_keys_and_consumes_them_once_claimed(tmp_path):
    inner, c = FolderStore(tmp_path), cfg()
    for i in range(50):                                   # history: not looked at
        _upload(inner, f"{IN}2026-01-01/old-{i:03d}.jsonl")
    new = [_upload(inner, f"{IN}2026-11-26/new-{i}.jsonl") for i in range(3)]
    _record(inner, new)
    store = CountingStore(inner)
    batch = detect(store, c, Scope(events=True))
    assert batch is not None and sorted(s.key for s in batch.sources) == [e.key for e in new]
    assert _requests(store, "list") == 0 and _requests(store, "head") == 3
    write_claim(inner, c, batch, 1)
    assert detect(store, c, Scope(events=True)) is None
    assert pending.markers(inner, IN) == {}          # resolved: consumed
    assert _requests(store, "list") == 0


def test_a_marker_outlives_a_run_that_died_and_a_gone_upload_drops_it(tmp_path):
    store, c = FolderStore(tmp_path), cfg()
    ev = [_upload(store, f"{IN}p/a.jsonl"), _upload(store, f"{IN}p/b.jsonl")]
    _record(store, ev)
    assert detect(store, c, Scope(events=True)) is not None     # the run dies here
    store.delete([f"{IN}p/b.jsonl"])
    batch = detect(store, c, Scope(events=True))                # the next run
    assert batch is not None and [s.key for s in batch.sources] == [f"{IN}p/a.jsonl"]
    assert set(pending.markers(store, IN)) == {f"{IN}p/a.jsonl"}


def test_an_event_run_without_pending_keys_reconciles_and_keys_stay_in_the_dataset(tmp_path):
    store, c = FolderStore(tmp_path), cfg()
    assert resolve_scope(store, c, Scope(events=True)) == Scope()
    _record(store, [_upload(store, f"{IN}p/a.jsonl")])
    assert resolve_scope(store, c, Scope(events=True)) == Scope(events=True)
    assert settle_scope(store, c, Scope(events=True)) == (layout.pending_prefix(IN), None)
    with pytest.raises(ConfigError, match="incoming/other/x.jsonl.*not under"):
        detect(store, c, Scope(keys=("incoming/other/x.jsonl",)))


# -- reconciling ------------------------------------------------------------------------
def test_a_reconciling_run_lists_after_its_mark_and_in_full_when_due(tmp_path):
    inner, c = FolderStore(tmp_path), cfg()
    for d in range(1, 21):
        _upload(inner, f"{IN}2026-11-{d:02d}/x.jsonl")
    store = CountingStore(inner)
    batch = detect(store, c)                                # first: a full listing
    assert batch is not None and len(batch.sources) == 20
    write_claim(inner, c, batch, 1)
    assert detect(store, c) is None                         # moves the mark to the newest
    state = listing.read_state(inner, c.prefix)
    assert state is not None and state.full_at is not None
    lost = _upload(inner, f"{IN}2026-11-21/lost-event.jsonl")      # its event was lost
    late = _upload(inner, f"{IN}2026-11-05/late.jsonl")     # into a partition long passed
    store.counts.ops.clear()
    batch = detect(store, c)
    assert batch is not None and [s.key for s in batch.sources] == [lost.key]
    assert _requests(store, "list_entries") == 2            # from the mark: 11-20 and 11-21
    write_claim(inner, c, batch, 2)
    assert detect(store, c) is None                         # the late one: not seen yet
    batch = detect(store, c, Scope(full=True))              # `shardline ingest --full`
    assert batch is not None and [s.key for s in batch.sources] == [late.key]


def test_a_full_listing_comes_back_on_schedule_and_off_means_always(tmp_path):
    store = FolderStore(tmp_path)
    c = cfg(every_h=1e-9)                                  # always due
    _upload(store, f"{IN}2026-11-01/x.jsonl")
    assert detect(store, c) is not None
    late = _upload(store, f"{IN}2026-10-01/late.jsonl")
    batch = detect(store, c)
    assert batch is not None and late.key in [s.key for s in batch.sources]
    off = cfg(incremental=False)
    assert settle_scope(store, off, Scope()) == (IN, None)
    assert len(detect(store, off).sources) == 2


def test_corrections_are_a_stream_of_their_own_that_hides_no_new_date(tmp_path):
    inner, c = FolderStore(tmp_path), cfg()
    for d in range(1, 11):
        _upload(inner, f"{IN}2026-11-{d:02d}/x.jsonl")
        _upload(inner, f"{IN}corrections/2026-11-{d:02d}/fix.jsonl")
    store = CountingStore(inner)
    batch = detect(store, c)
    assert batch is not None and len(batch.sources) == 20
    write_claim(inner, c, batch, 1)
    assert detect(store, c) is None
    new = _upload(inner, f"{IN}2026-11-11/x.jsonl")      # sorts before corrections/
    fix = _upload(inner, f"{IN}corrections/2026-11-11/fix.jsonl")
    store.counts.ops.clear()
    batch = detect(store, c)
    assert batch is not None and sorted(s.key for s in batch.sources) == [new.key, fix.key]
    # each stream from its own mark: its newest old partition and the new one, plus the
    # first corrections key the main stream's listing meets before it jumps over the folder
    assert _requests(store, "list_entries") == 2 + 1 + 2


def test_a_reconciling_run_deletes_only_the_pending_keys_of_what_it_listed_claimed(tmp_path):
    store, c = FolderStore(tmp_path), cfg()
    old = _upload(store, f"{IN}2026-11-01/a.jsonl")
    batch = detect(store, c)
    write_claim(store, c, batch, 1)
    assert detect(store, c) is None                       # the mark: before 2026-11-01
    new = _upload(store, f"{IN}2026-11-02/b.jsonl")
    _record(store, [old, new])                            # events arrive late
    batch = detect(store, c)                              # the nightly run
    assert batch is not None and [s.key for s in batch.sources] == [new.key]
    # old is claimed: its key is consumed; new is not claimed yet: its key stays
    assert set(pending.markers(store, IN)) == {new.key}
    write_claim(store, c, batch, 2)
    assert detect(store, c) is None and pending.markers(store, IN) == {}
