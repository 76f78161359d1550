"""A synthetic dataset history at the issue's plan scale (100k shards over 200 batches),
built by the real builder into a dict of objects: what a bucket would hold after 200
publishes of 500 shards each. No shard bytes exist; only the manifests."""

from __future__ import annotations

from shardline.core import layout
from shardline.core.builder import NewBatch, build_version
from shardline.core.manifest import Manifest
from shardline.core.parts import ShardEntry, SourceEntry, ValidationSummary
from tests.unit.manifest_fixtures import PREFIX, SCHEMA, Bucket


def batch_shards(i: int, per_batch: int, labels: int) -> list[ShardEntry]:
    bid = f"b{i:015d}"
    out = []
    for p in range(per_batch):
        rows = 1000 + (i * 7 + p) % 50
        base = (i + p) % 10
        counts = {str((base + k) % 10): rows // labels for k in range(labels - 1)}
        counts[str((base + labels - 1) % 10)] = rows - (labels - 1) * (rows // labels)
        out.append(ShardEntry(
            path=layout.shard_key(PREFIX, bid, None, p, f"run{i}"), rows=rows,
            bytes=rows * 80 + 512, sha256=f"{i:08x}{p:08x}".ljust(64, "a"), batch=bid,
            partition={"batch": bid}, xxh3_128=f"{p:032x}",
            stats={"label": {"min": min(map(int, counts)), "max": max(map(int, counts))}},
            label_counts=counts))
    return out


def synthetic_history(batches: int = 200, per_batch: int = 500, labels: int = 10
                      ) -> tuple[Bucket, Manifest]:
    """``batches`` versions of ``per_batch`` shards each; returns the bucket and the last
    version opened fresh (nothing cached), as a trainer would open it."""
    bucket = Bucket()
    parent: Manifest | None = None
    for i in range(1, batches + 1):
        bid = f"b{i:015d}"
        nb = NewBatch(id=bid, run=f"run{i}", shards=batch_shards(i, per_batch, labels),
                      ids_path=layout.ids_key(PREFIX, bid, f"run{i}"),
                      sources=[SourceEntry(f"incoming/toy/{i}.csv", f"etag{i}", 10**6, "csv")])
        draft = build_version(PREFIX, dataset="toy", schema=SCHEMA, config={"name": "toy"},
                              parent=parent, batch=nb,
                              validation=ValidationSummary(success=True, suites=["toy.batch"]),
                              created_at="2026-11-20T10:00:00+00:00", code="test")
        bucket.objects.update(draft.objects)
        bucket.objects[draft.key] = draft.body
        parent = draft.manifest(bucket.get)
    bucket.reads.clear()
    return bucket, bucket.open(batches)
