"""Where an id is today (``shardline audit``): what a data protection officer asks after a
deletion request.

- **Versions.** Every kept version (``tasks.vacuum.kept_versions``) and every expired one
  whose document still waits under ``retention/`` (its files are still there): ``served``
  (a live row), ``masked`` (its row is in a shard, masked by a deletion vector: readers
  never serve it, the bytes are still there) or ``absent``. Versions expired and vacuumed
  are listed as ``expired`` (unreadable by design).
- **Files.** Each object holding the id's row (a data or held-out shard) or the id itself
  (the batch's id file), with the versions that reference it and what vacuum does with it:
  ``kept`` while a kept version references it, else ``removed by vacuum`` (a window after
  the expiry that stopped referencing it).
- **Models.** Every model of every registry of the dataset trained on a version that
  served the id (``models`` rows come from the caller: ``trainer.registry_view``; tasks do
  not read the registry). For an expired version the answer is inferred: the id's batch
  was first published at or before it and no deletion had masked it yet.

Cost: the kept versions' documents and batch lists (shared), one probe of each distinct
id file, and the id column of each shard of the batches that hold the id: an operator's
tool, O(history) small reads plus the touched shards.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.manifest import Manifest
from shardline.core.parts import ShardEntry
from shardline.core.retention import read_expired
from shardline.core.store import Store
from shardline.tasks.id_index import published_mask
from shardline.tasks.locate import read_ids_of
from shardline.tasks.vacuum import ManifestCache, kept_versions

NEVER = 1 << 62


@dataclass
class AuditResult:
    dataset: str
    id: str
    versions: list[dict[str, Any]] = field(default_factory=list)   # version, state, rows
    files: list[dict[str, Any]] = field(default_factory=list)      # key, kind, referenced_by
    models: list[dict[str, Any]] = field(default_factory=list)     # registry, model, version

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        by: dict[str, list[int]] = {}
        for v in self.versions:
            by.setdefault(v["state"], []).append(v["version"])
        out = [f"{self.dataset} id {self.id!r}: " + "; ".join(
            f"{state} in v{', v'.join(map(str, vs))}" for state, vs in by.items())]
        out += [f"  {f['kind']} {f['key']}: referenced by "
                f"{', '.join(f'v{v}' for v in f['referenced_by']) or 'no kept version'} "
                f"-> {f['after_vacuum']}" for f in self.files]
        out += [f"  model {m['model']} of {m['registry']} ({m['promotion']}) trained on "
                f"v{m['dataset_version']}" for m in self.models]
        if len(out) == 1:
            out[0] += "; no file holds it"
        return out


def audit(store: Store, cfg: DatasetConfig, id_: str,
          models: list[dict[str, Any]] | None = None) -> AuditResult:
    """Where ``id_`` is in ``cfg``'s dataset (module docstring). ``models``: registry rows
    (``registry``, ``model``, ``dataset_version``, ``promotion``) to filter."""
    cache = ManifestCache(store)
    kept = kept_versions(store, cfg.prefix)
    readable: dict[int, Manifest] = {
        v: cache.manifest(layout.version_key(cfg.prefix, v), layout.expired_doc_key(cfg.prefix, v))
        for v in kept}
    root = layout.retention_prefix(cfg.prefix)
    for o in store.list(root):
        v = layout.version_of_key(o.key.replace("/retention/", "/versions/"))
        if v is not None and v not in readable:
            readable[v] = cache.manifest(o.key)
    ids = pa.array([id_], pa.string())
    id_files = sorted({b.ids_path for m in readable.values() for b in m.batches})
    with ThreadPoolExecutor(max_workers=8) as pool:
        hit = list(pool.map(lambda p: bool(published_mask(store, [p], ids, workers=1)[0]),
                            id_files))
    holding_files = {p for p, h in zip(id_files, hit, strict=True) if h}
    shards: dict[str, ShardEntry] = {}
    first = NEVER
    for m in readable.values():
        refs = [r for r, b in zip(m.batch_lists, m.batches, strict=True)
                if b.ids_path in holding_files]
        first = min([first, *(r.version for r in refs)])
        for bl in m.read_lists(refs):
            shards.update({s.path: s for s in bl.shards})
    with ThreadPoolExecutor(max_workers=8) as pool:
        found = dict(zip(shards, pool.map(lambda s: _positions(store, s, id_),
                                          shards.values()), strict=True))
    rows_in = {p: pos for p, pos in found.items() if len(pos)}
    out = AuditResult(cfg.name, id_)
    masked_since = NEVER
    refs_by: dict[str, list[int]] = {}
    for v in sorted(readable):
        m = readable[v]
        mine = {s.path for s in m.shards} & set(rows_in)
        for p in mine:
            refs_by.setdefault(p, []).append(v)
        masks = m.masks(mine)
        live = sum(len(np.setdiff1d(rows_in[p], masks.get(p, []))) for p in mine)
        state = "served" if live else "masked" if mine else "absent"
        if state != "served" and first <= v:
            masked_since = min(masked_since, v)
        out.versions.append({"version": v, "state": state if v in kept else
                             f"{state} (expired, files kept until vacuum)",
                             "rows": int(live)})
    expired = sorted(set(read_expired(store, cfg.prefix).versions) - set(readable))
    out.versions = [*({"version": v, "state": "expired", "rows": None} for v in expired),
                    *out.versions]
    for p, pos in sorted(rows_in.items()):
        out.files.append(_file(p, "shard", len(pos), refs_by.get(p, []), kept))
    for p in sorted(holding_files):
        users = [v for v in sorted(readable) if p in {b.ids_path for b in readable[v].batches}]
        out.files.append(_file(p, "id file", 1, users, kept))
    out.models = [{k: m.get(k) for k in ("registry", "model", "dataset_version", "promotion")}
                  for m in models or [] if isinstance(m.get("dataset_version"), int)
                  and first <= m["dataset_version"] < masked_since]
    return out


def _positions(store: Store, s: ShardEntry, id_: str) -> np.ndarray:
    col, _ = read_ids_of(store, s)
    return np.flatnonzero(pc.equal(col, id_).to_numpy(zero_copy_only=False))


def _file(key: str, kind: str, rows: int, users: list[int], kept: list[int]) -> dict[str, Any]:
    alive = [v for v in users if v in kept]
    return {"key": key, "kind": kind, "rows": rows, "referenced_by": users,
            "after_vacuum": "kept" if alive else "removed by vacuum"}
