"""Verify one dataset version end to end (``shardline verify``): every object it references
is present, has the recorded size and the recorded digest.

What a version references: its document names the schema, the config, a checkpoint and
batch lists, each with a sha256; the batch lists name the data and quarantine shards (size,
xxh3_128 where recorded, else sha256) and each batch's id file; the deletions index names
each deletion vector (sha256). Every shard is downloaded
and hashed: this is the full check, O(bytes of the version), meant for an operator or a
schedule, not for every read (readers check each shard they download anyway).

Each problem names the object, what is wrong and how to repair it. The bytes of every
reference are content-addressed (the digest is recorded), so any copy with that digest
restores it: a backup, or an earlier object version where the bucket keeps versions.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import xxhash

from shardline.core.config import DatasetConfig
from shardline.core.errors import StoreError
from shardline.core.manifest import Manifest, resolve_version
from shardline.core.parts import ShardEntry
from shardline.core.store import Store


@dataclass(frozen=True)
class Problem:
    key: str          # s3:// URI of the object
    problem: str      # what is wrong
    fix: str          # how to repair it

    def line(self) -> str:
        return f"{self.key}: {self.problem}; repair: {self.fix}"


@dataclass
class Verified:
    dataset: str
    version: int
    objects: int = 0             # references checked
    bytes: int = 0               # bytes downloaded and hashed
    problems: list[Problem] = field(default_factory=list)

    @property
    def sound(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        if self.sound:
            return (f"{self.dataset} v{self.version} is sound: {self.objects} object(s) "
                    f"present, sizes and digests match ({self.bytes:,} bytes hashed)")
        return (f"{self.dataset} v{self.version} is broken: {len(self.problems)} problem(s) "
                f"in {self.objects} object(s) checked")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sound": self.sound}


def _restore(size: int | None, algo: str, digest: str | None) -> str:
    want = ", ".join(x for x in (f"{size} bytes" if size is not None else "",
                                 f"{algo} {digest}" if digest else "") if x)
    return (f"restore it from a backup or an earlier object version of the bucket ({want}); "
            "readers and training of this version fail until then")


def verify(store: Store, cfg: DatasetConfig, version: int | None = None,
           workers: int = 8) -> Verified:
    """Check version ``version`` (default: the latest) of ``cfg``'s dataset.

    Raises:
        StoreError: the version does not exist (nothing to verify).
    """
    m = resolve_version(store, cfg.prefix, version)
    out = Verified(cfg.name, m.version)
    if not _metadata(store, m, out):
        return out                      # the batch lists are unreadable: no shard list
    checks: list[Callable[[], tuple[int, Problem | None]]] = [
        functools.partial(_shard, store, s) for s in m.shards + m.quarantine.shards]
    checks += [functools.partial(_ids_file, store, b.ids_path, b.id) for b in m.batches]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for n, problem in pool.map(lambda c: c(), checks):
            out.objects += 1
            out.bytes += n
            if problem is not None:
                out.problems.append(problem)
    return out


def _metadata(store: Store, m: Manifest, out: Verified) -> bool:
    """Schema, config, checkpoint and batch lists: present and their sha256 as recorded
    (the manifest checks each digest as it reads it). False: the shard list is unknown."""
    ok = True
    for what, read in (("schema", lambda: m.schema), ("config", lambda: m.config),
                       ("checkpoint and batch lists", lambda: m.shard_columns),
                       ("deletions index and vectors", lambda: m.masks())):
        try:
            read()
        except StoreError as exc:
            out.objects += 1
            ok = ok and what != "checkpoint and batch lists"
            out.problems.append(Problem(
                store.uri(m.key), f"{what} of this version: {exc}",
                "restore the named object from a backup (its sha256 is in the version "
                "document); until then the version cannot be read"))
    if ok:
        out.objects += len(m.batch_lists) + 2
        if m.doc.deletions is not None:
            out.objects += len(m.deletion_refs) + 1
    return ok


def _ids_file(store: Store, key: str, batch: str) -> tuple[int, Problem | None]:
    return 0, None if store.head(key) is not None else Problem(
        store.uri(key), f"missing (the id file of batch {batch})",
        "restore it from a backup; until then later ingests' duplicate check cannot see "
        "this batch's ids")


def _shard(store: Store, s: ShardEntry) -> tuple[int, Problem | None]:
    algo, digest = ("xxh3_128", s.xxh3_128) if s.xxh3_128 else ("sha256", s.sha256)
    fix = _restore(s.bytes, algo, digest)
    where = f"batch {s.batch}, {s.rows} rows"
    info = store.head(s.path)
    if info is None:
        return 0, Problem(store.uri(s.path), f"missing (shard of {where})", fix)
    if info.size != s.bytes:
        return 0, Problem(store.uri(s.path), f"has {info.size} bytes, the version records "
                          f"{s.bytes} (shard of {where})", fix)
    data = store.get_bytes(s.path, if_match=info.etag)
    found = (xxhash.xxh3_128_hexdigest(data) if algo == "xxh3_128"
             else hashlib.sha256(data).hexdigest())
    if found != digest:
        return len(data), Problem(store.uri(s.path), f"{algo} is {found}, the version records "
                                  f"{digest}: the bytes were changed (shard of {where})", fix)
    return len(data), None
