"""Scale bench step "correct 100 rows": what a correction and a deletion cost as the history
grows (issue 24), counted in requests per kind of object (deterministic), not timed.

History: version 1 holds 200 digits (10 label shards); versions 2..H add 15 rows each. Then,
on a fresh read of the latest version, through a counting store:

- **correct**: 100 rows of version 1 uploaded again with new labels, published the way
  ingest publishes a corrections batch (its shards and id file, ``core.builder``, then
  ``tasks.corrections.with_corrections`` locates and masks the old rows, then the commit);
- **delete**: 100 other ids of version 1 (``tasks.delete.delete_ids``).

The same rows are touched at every history size, so any growth is the history's. Run alone:
``python -m shardline.bench.scale_corrections [--history 1 100]`` (its own moto server).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from shardline.bench.digits_data import digits, digits_config, draft_version, publish_version
from shardline.core.builder import commit_version
from shardline.core.config import DatasetConfig, StoreSettings
from shardline.core.counting_store import CountingStore, Counts
from shardline.core.manifest import latest_manifest
from shardline.core.store import ObjectStore
from shardline.tasks.corrections import with_corrections
from shardline.tasks.delete import delete_ids

FIRST, PER_VERSION, CHANGED = 200, 15, 100
_FOLDER = re.compile(r"/(versions|manifests|shards|ids|deletes|quarantine|batches)/")


def kind(key: str) -> str:
    """An object's folder (``versions``, ``ids``, ``shards``, ``deletes``, ...)."""
    m = _FOLDER.search(key)
    return m.group(1) if m else "other"


def _history(store: ObjectStore, cfg: DatasetConfig, versions: int) -> None:
    publish_version(store, cfg, np.arange(FIRST))
    for v in range(2, versions + 1):
        start = FIRST + (v - 2) * PER_VERSION
        publish_version(store, cfg, np.arange(start, start + PER_VERSION))


def _summary(counts: Counts) -> dict[str, Any]:
    ops = counts.to_dict()
    return {"requests": sum(c["n"] for kinds in ops.values() for c in kinds.values()),
            "gets": counts.n("get"), "id_file_gets": counts.n("get", "ids"),
            "shard_gets": counts.n("get", "shards"), "puts": counts.n("put"), "by_op": ops}


def _correct(store: ObjectStore, cfg: DatasetConfig) -> dict[str, Any]:
    ids, labels, images = digits()
    fixed = labels.copy()
    fixed[:CHANGED] = (fixed[:CHANGED] + 1) % 10
    counts = Counts(kind)
    counting = CountingStore(store, counts)
    parent = latest_manifest(counting, cfg.prefix)
    def put(key: str, body: bytes) -> None:
        counting.put_bytes(key, body)

    draft = draft_version(put, cfg, np.arange(CHANGED), parent, data=(ids, fixed, images))
    draft = with_corrections(counting, draft, parent, pa.array(ids[:CHANGED]), "fix")
    m = commit_version(counting, draft)
    assert m.doc.changes is not None and m.doc.changes.updated == CHANGED
    return _summary(counts)


def _delete(store: ObjectStore, cfg: DatasetConfig) -> dict[str, Any]:
    counts = Counts(kind)
    r = delete_ids(CountingStore(store, counts), cfg, digits()[0][CHANGED:2 * CHANGED])
    assert r.rows_deleted == CHANGED
    return _summary(counts)


def measure(store: ObjectStore, histories: tuple[int, ...]) -> list[dict[str, Any]]:
    """One point per history size: requests of a 100-row correction and deletion."""
    out = []
    for h in histories:
        cfg = digits_config(f"fix{h}-{uuid.uuid4().hex[:6]}").dataset
        _history(store, cfg, h)
        out.append({"history": h, "correct": _correct(store, cfg),
                    "delete": _delete(store, cfg)})
    return out


def lines(points: list[dict[str, Any]]) -> list[str]:
    return [f"history {p['history']:4d} versions: {step} {CHANGED} rows: "
            f"{p[step]['requests']} requests ({p[step]['gets']} GETs: "
            f"{p[step]['id_file_gets']} id files, {p[step]['shard_gets']} shards; "
            f"{p[step]['puts']} PUTs)" for p in points for step in ("correct", "delete")]


def main(argv: list[str] | None = None) -> int:
    from shardline.infra import procs, services

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--history", type=int, nargs="+", default=[1, 100])
    args = ap.parse_args(argv)
    s3 = services.start_moto(procs.free_port(), Path(tempfile.mkdtemp(prefix="fix-moto-")))
    try:
        store = ObjectStore(StoreSettings(bucket=f"fix-{uuid.uuid4().hex[:8]}",
                                          endpoint_url=s3.url, access_key="testing",
                                          secret_key="testing", region="us-east-1"))
        store.ensure_bucket()
        points = measure(store, tuple(args.history))
    finally:
        s3.stop()
    for ln in lines(points):
        print(ln, file=sys.stderr)
    print(json.dumps(points))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
