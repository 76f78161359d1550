"""Vacuum's window on the folder store (whose ``LastModified`` is a file's mtime, so a test
can age files): what an expired version referenced stays while its document, kept under
``retention/``, is younger than the window, and goes after."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from shardline.bench.digits_data import digits_config, publish_version
from shardline.core import layout
from shardline.core.folder_store import FolderStore
from shardline.core.manifest import read_manifest
from shardline.core.references import referenced
from shardline.tasks.compact import compact
from shardline.tasks.expire import expire
from shardline.tasks.vacuum import vacuum


def _age(root: Path, days: float, *, skip: str | None = None) -> None:
    """Set every file's mtime ``days`` back (except those whose path contains ``skip``)."""
    t = time.time() - days * 86400
    for d, _, files in os.walk(root):
        for f in files:
            path = os.path.join(d, f)
            if skip is None or skip not in path:
                os.utime(path, (t, t))


def test_expired_versions_keep_their_files_for_a_window(tmp_path: Path) -> None:
    store, ds = FolderStore(tmp_path), digits_config().dataset
    for i in range(2):
        publish_version(store, ds, np.arange(i * 250, (i + 1) * 250))
    v1_files = referenced(read_manifest(store, ds.prefix, 1))
    compact(store, ds, target_mb=1.0)                       # v3: v1's shards replaced
    assert expire(store, ds, keep=1).expired == [1, 2]
    live = referenced(read_manifest(store, ds.prefix, 3))
    replaced = {k for k in v1_files if "/shards/" in k} - live
    assert replaced

    _age(tmp_path, 4, skip="/retention/")       # data 4 days old, the expiry just now
    young = vacuum(store, ds)
    assert young.grace_versions == [1, 2]
    assert not replaced & set(young.removed)
    assert all(store.head(k) is not None for k in replaced)

    _age(tmp_path, 4)                           # the expiry, too, a window ago
    old = vacuum(store, ds)
    assert old.grace_versions == [] and replaced <= set(old.removed)
    assert all(store.head(k) is None for k in replaced)
    assert all(store.head(k) is not None for k in live)
    assert store.head(layout.expired_doc_key(ds.prefix, 1)) is None
