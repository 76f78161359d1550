"""In-memory dataset histories for the manifest tests: versions built by the real builder
over a dict of objects (what a bucket would hold), and a format-1 document as the code
before format 2 wrote it."""

from __future__ import annotations

from dataclasses import dataclass, field

from shardline.core import layout
from shardline.core.builder import NewBatch, VersionDraft, build_version
from shardline.core.manifest import Manifest
from shardline.core.parts import SchemaInfo, ShardEntry, SourceEntry, ValidationSummary

PREFIX = "lake/toy"
SCHEMA = SchemaInfo(fingerprint="f" * 16, fields=[{"name": "id", "type": "string",
                                                  "nullable": "False"}],
                    shape=[8, 8, 1], classes=[str(i) for i in range(10)])


def shard(batch: str, part: int, rows: int = 100, label: int | None = None) -> ShardEntry:
    return ShardEntry(path=layout.shard_key(PREFIX, batch, label, part, "r"), rows=rows,
                      bytes=rows * 96, sha256=f"{batch}{part}".ljust(64, "0"), batch=batch,
                      partition={"batch": batch}, xxh3_128="0" * 32,
                      label_counts={"0": rows // 2, "1": rows - rows // 2})


def new_batch(i: int, shards: int = 2) -> NewBatch:
    bid = f"b{i:015d}"
    return NewBatch(id=bid, run=f"run{i}", shards=[shard(bid, p) for p in range(shards)],
                    ids_path=layout.ids_key(PREFIX, bid, f"run{i}"),
                    quarantine_shards=[shard(bid, 99, rows=3)],
                    sources=[SourceEntry(f"incoming/toy/{i}.csv", f"etag{i}", 1000, "csv")],
                    by_rule={"missing_label": 3})


@dataclass
class Bucket:
    """Objects by key, and every key read (to check what a reader fetched)."""

    objects: dict[str, bytes] = field(default_factory=dict)
    reads: list[str] = field(default_factory=list)

    def get(self, key: str) -> bytes:
        self.reads.append(key)
        return self.objects[key]

    def commit(self, draft: VersionDraft) -> Manifest:
        assert draft.key not in self.objects
        self.objects.update(draft.objects)
        self.objects[draft.key] = draft.body
        return self.open(draft.doc.version)

    def open(self, version: int) -> Manifest:
        import json
        key = layout.version_key(PREFIX, version)
        return Manifest(json.loads(self.objects[key]), self.get, key)


def publish(bucket: Bucket, parent: Manifest | None, i: int, **kw: object) -> Manifest:
    draft = build_version(PREFIX, dataset="toy", schema=SCHEMA, config={"name": "toy"},
                          parent=parent, batch=new_batch(i),
                          validation=ValidationSummary(success=True, suites=["toy.batch"]),
                          **kw)  # type: ignore[arg-type]
    return bucket.commit(draft)


def format1_doc(batches: int = 2) -> dict:
    """A cumulative format-1 manifest of ``batches`` batches, field for field as
    ``tasks/publish.py`` wrote it before format 2 (``Manifest.to_dict()``)."""
    shards, q, entries = [], [], []
    for i in range(1, batches + 1):
        b = new_batch(i)
        shards += [_v1(s) for s in b.shards]
        q += [_v1(s) for s in b.quarantine_shards]
        entries.append({"id": b.id, "version": i, "rows": b.rows, "quarantined": 3,
                        "ids_path": b.ids_path, "sources": 1})
    last = new_batch(batches)
    return {
        "dataset": "toy", "version": batches, "parent": batches - 1 or None,
        "created_at": "2026-11-20T10:00:00+00:00",
        "schema": {**SCHEMA.__dict__, "ipc_b64": ""},
        "shards": shards, "new_shards": [s.path for s in last.shards], "batches": entries,
        "sources": [s.__dict__ for s in last.sources],
        "validation": {"suites": ["toy.batch"], "success": True, "counts": {"rows": 203},
                       "evaluated": 4, "failed": [], "report": "s3://b/r.json"},
        "quarantine": {"rows": 3, "by_rule": {"missing_label": 3}, "total_rows": 3 * batches,
                       "shards": q},
        "code_version": "0.1.0", "config": {"name": "toy"}, "format": 1,
    }


def _v1(s: ShardEntry) -> dict:
    """A shard entry as format 1 wrote it (no label_counts)."""
    return {k: v for k, v in s.__dict__.items() if k != "label_counts"}


def as_format2(bucket: Bucket) -> None:
    """Rewrite every version in ``bucket`` as format 2 wrote it: JSON batch lists under
    ``.json`` keys, references and checkpoints re-pointed, documents marked format 2."""
    import json

    from shardline.core.parts import to_dict
    from shardline.core.version_doc import BatchList, digest, encode
    moved: dict[str, tuple[str, str]] = {}
    for key in [k for k in bucket.objects if k.endswith(".arrow")]:
        bl = BatchList.from_bytes(bucket.objects.pop(key), key)
        body = encode({**to_dict(bl), "format": 2})
        new = key[:-len(".arrow")] + ".json"
        bucket.objects[new] = body
        moved[key] = (new, digest(body))

    def repoint(refs: list[dict]) -> None:
        for r in refs:
            if r["key"] in moved:
                r["key"], r["sha256"] = moved[r["key"]]
    ck_moved: dict[str, str] = {}
    for key in [k for k in bucket.objects if "/checkpoint-" in k]:
        d = json.loads(bucket.objects[key])
        repoint(d["batch_lists"])
        d["format"] = 2
        bucket.objects[key] = encode(d)
        ck_moved[key] = digest(bucket.objects[key])
    for key in [k for k in bucket.objects if "/versions/" in k]:
        d = json.loads(bucket.objects[key])
        repoint(d["batch_lists"])
        if d.get("checkpoint"):
            d["checkpoint"]["sha256"] = ck_moved[d["checkpoint"]["key"]]
        d["format"] = 2
        bucket.objects[key] = encode(d)
