"""The claims ledger reads O(new batches), not one document per batch ever published.

Real parts: a moto S3 server over HTTP. Claims are written with ``write_claim`` as publish
does; ``claimed_sources`` is what detect calls.
"""

from __future__ import annotations

from shardline.core import layout
from shardline.core.counting_store import CountingStore, Counts
from shardline.core.store import ObjectStore
from shardline.tasks import ledger
from shardline.tasks.batch import Batch, Source
from tests.integration.ingest_helpers import dataset_config


def _claim_or_other(key: str) -> str:
    return "claim" if "/batches/" in key else "other"


def _batch(i: int) -> Batch:
    srcs = (Source(f"incoming/digits/u{i}/a.jsonl", f"ea{i}", 10, "jsonl"),
            Source(f"incoming/digits/u{i}/b.csv", f"eb{i}", 20, "csv"))
    return Batch(f"{i:032x}", srcs)


def _expected(n: int) -> set[tuple[str, str]]:
    return {(s.key, s.etag) for i in range(n) for s in _batch(i).sources}


def test_claims_checkpoint_bounds_the_reads_and_keeps_every_claim(store: ObjectStore):
    cfg = dataset_config()
    counting = CountingStore(store, Counts(_claim_or_other))
    n1 = ledger.CHECKPOINT_AFTER + 6
    for i in range(n1):
        ledger.write_claim(store, cfg, _batch(i), version=i + 1)
    counting.counts = Counts(_claim_or_other)
    assert ledger.claimed_sources(counting, cfg) == _expected(n1)
    assert counting.counts.n("get", "claim") == n1   # first read: every document once
    cps = [o.key for o in store.list(layout.claims_checkpoint_prefix(cfg.prefix))]
    assert cps == [layout.claims_checkpoint_key(cfg.prefix, n1)]

    for i in range(n1, n1 + 5):                         # five more publishes
        ledger.write_claim(store, cfg, _batch(i), version=i + 1)
    counting.counts = Counts(_claim_or_other)
    assert ledger.claimed_sources(counting, cfg) == _expected(n1 + 5)
    assert counting.counts.n("get", "claim") == 5    # only what the checkpoint lacks

    # two more checkpoint generations: only the newest two are kept, claims stay exact
    total = n1 + 5
    for _ in range(2):
        for i in range(total, total + ledger.CHECKPOINT_AFTER):
            ledger.write_claim(store, cfg, _batch(i), version=i + 1)
        total += ledger.CHECKPOINT_AFTER
        assert ledger.claimed_sources(counting, cfg) == _expected(total)
    cps = sorted(o.key for o in store.list(layout.claims_checkpoint_prefix(cfg.prefix)))
    assert len(cps) == ledger.KEEP_CHECKPOINTS
    assert cps[-1] == layout.claims_checkpoint_key(cfg.prefix, total)


def test_a_claim_document_missing_from_the_checkpoint_is_still_read(store: ObjectStore):
    """A claim written by a racing publisher after the checkpoint was taken is not lost."""
    cfg = dataset_config()
    for i in range(ledger.CHECKPOINT_AFTER):
        ledger.write_claim(store, cfg, _batch(i), version=i + 1)
    assert ledger.claimed_sources(store, cfg) == _expected(ledger.CHECKPOINT_AFTER)
    late = _batch(10_000)
    ledger.write_claim(store, cfg, late, version=999)
    got = ledger.claimed_sources(store, cfg)
    assert {(s.key, s.etag) for s in late.sources} <= got
