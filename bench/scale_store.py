"""The scale bench's stores: an ``ObjectStore`` that counts what a stage reads and writes,
by kind of object, and a local folder with the same reads (for the synthetic sizes).

Counts are the deterministic side of a measurement (times vary with the machine's load):
requests and bytes per *kind* of key, so a stage's reads of the history (id files, batch
lists, claims) can be told apart from its reads of the new data.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from shardline.core.store import ObjectInfo, ObjectStore

# key fragment -> kind (first match wins; the order matters: "/manifests/checkpoint-" before
# "/manifests/")
KINDS = (("/versions/", "version_doc"), ("/manifests/checkpoint-", "checkpoint"),
         ("/manifests/batch=", "batch_list"), ("/manifests/", "schema_config"),
         ("/ids/", "id_index"), ("/batches/", "claim"),
         ("/ledger/claims-", "claims_checkpoint"), ("/staging/", "staging"),
         ("/shards/", "shard"), ("/quarantine/", "quarantine"), ("/reports/", "report"),
         ("incoming/", "incoming"))


def kind_of(key: str) -> str:
    key = "/" + key
    for frag, kind in KINDS:
        if frag in key:
            return kind
    return "other"


class Counts:
    """Requests and bytes per (operation, kind); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ops: dict[str, dict[str, list[int]]] = {}

    def add(self, op: str, key: str, nbytes: int = 0, n: int = 1) -> None:
        with self._lock:
            cell = self.ops.setdefault(op, {}).setdefault(kind_of(key), [0, 0])
            cell[0] += n
            cell[1] += nbytes

    def to_dict(self) -> dict[str, dict[str, dict[str, int]]]:
        """{op: {kind: {"n": requests (list: entries), "bytes": bytes}}}"""
        return {op: {k: {"n": v[0], "bytes": v[1]} for k, v in sorted(kinds.items())}
                for op, kinds in sorted(self.ops.items())}


def total(counts: dict[str, Any], op: str, kinds: Iterable[str] | None = None,
          field: str = "n", exclude: Iterable[str] = ()) -> int:
    """Sum of ``field`` over ``kinds`` (all when None) of operation ``op``."""
    cells = counts.get(op, {})
    skip = set(exclude)
    want = set(cells) if kinds is None else set(kinds)
    return sum(int(v[field]) for k, v in cells.items() if k in want and k not in skip)


class CountingStore(ObjectStore):
    """The real S3 store, counting GET/HEAD/LIST/PUT/COPY/DELETE per kind of key."""

    counts: Counts

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        n = 0
        try:
            for o in super().list(prefix):
                n += 1
                self.counts.add("list_entries", o.key)
                yield o
        finally:                      # one request per page of up to 1,000 entries
            self.counts.add("list", prefix, 0, 1 + max(0, n - 1) // 1000)

    def head(self, key: str) -> ObjectInfo | None:
        self.counts.add("head", key)
        return super().head(key)

    def get_bytes(self, key: str, range_: tuple[int, int] | None = None, **kw: Any) -> bytes:
        data = super().get_bytes(key, range_, **kw)
        self.counts.add("get", key, len(data))
        return data

    def put_bytes(self, key: str, data: Any, **kw: Any) -> str:
        out = super().put_bytes(key, data, **kw)
        self.counts.add("put", key, len(data))
        return out

    def copy(self, src: str, dst: str) -> None:
        super().copy(src, dst)
        self.counts.add("copy", dst)

    def delete(self, keys: Iterable[str]) -> int:
        keys = list(keys)
        for k in keys:
            self.counts.add("delete", k)
        return super().delete(keys)


def counting(store: ObjectStore) -> CountingStore:
    out = CountingStore(store.settings)
    out.counts = Counts()
    return out


class FolderStore:
    """The reads the id index and the manifest reader make, over files in a folder (the
    synthetic 10M/100M-id indexes and the 100k-shard history live on local disk)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.bucket = f"local:{self.root}"
        self.counts = Counts()

    def uri(self, key: str) -> str:
        return str(self.root / key)

    def head(self, key: str) -> ObjectInfo | None:
        p = self.root / key
        self.counts.add("head", key)
        return ObjectInfo(key, "", p.stat().st_size, dt.datetime.now(dt.UTC)) \
            if p.exists() else None

    def get_bytes(self, key: str, range_: tuple[int, int] | None = None, **_: Any) -> bytes:
        with open(self.root / key, "rb") as f:
            if range_ is None:
                data = f.read()
            else:
                f.seek(range_[0])
                data = f.read(range_[1] - range_[0] + 1)
        self.counts.add("get", key, len(data))
        return data

    def put_bytes(self, key: str, data: bytes, **_: Any) -> str:
        p = self.root / key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        self.counts.add("put", key, len(data))
        return ""
