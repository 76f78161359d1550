"""The sweep keeps a running ingest's files (its lease is fresh), however old they are, and
sweeps a dead run's once its lease is as old as the window. Folder store: its LastModified
is the file's mtime, which the test sets back (the store's clock is the real one here)."""

from __future__ import annotations

import os
import time

import pytest

from shardline.core import layout
from shardline.core.config import parse_config
from shardline.core.errors import ConfigError
from shardline.core.folder_store import FolderStore
from shardline.tasks.lease import heartbeat, protected
from shardline.tasks.sweep import sweep

CFG = parse_config({"dataset": {"name": "d", "incoming": "in/", "classes": ["a", "b"]}}).dataset


def _age(store: FolderStore, root, key: str, days: float) -> None:
    t = time.time() - days * 86400
    os.utime(root / key, (t, t))


def test_a_live_lease_keeps_old_staging_and_copies_a_dead_one_does_not(tmp_path) -> None:
    store, p = FolderStore(tmp_path), CFG.prefix
    old = 4.0                                          # days: past the 3-day window
    keys = {run: [f"{p}/staging/{run}/data/x.arrow", f"{p}/staging/{run}r1/data/y.arrow",
                  layout.shard_key(p, "b1", None, 0, f"{run}r1"), layout.ids_key(p, "b1", run)]
            for run in ("alive", "dead", "nolease")}
    for ks in keys.values():
        for k in ks:
            store.put_bytes(k, b"x")
            _age(store, tmp_path, k, old)
    heartbeat(store, p, "alive")                       # refreshed now
    heartbeat(store, p, "dead")
    _age(store, tmp_path, layout.leases_prefix(p) + "dead", old)
    result = sweep(store, CFG)
    assert all(store.head(k) is not None for k in keys["alive"])
    assert all(store.head(k) is None for k in keys["dead"] + keys["nolease"])
    assert result.staging_runs == 4


def test_young_files_stay_without_a_lease(tmp_path) -> None:
    store = FolderStore(tmp_path)
    k = f"{CFG.prefix}/staging/r/x"
    store.put_bytes(k, b"x")
    _age(store, tmp_path, k, 2.9)
    assert sweep(store, CFG).staging_runs == 0 and store.head(k) is not None


def test_protected_matches_run_and_pass_ids_only() -> None:
    assert protected("p/shards/batch=b/part-00000-abc.arrow", {"abc"})
    assert protected("p/shards/batch=b/part-00000-abcr2.arrow", {"abc"})
    assert not protected("p/shards/batch=b/part-00000-abcd.arrow", {"abc"})
    assert not protected("p/staging/xabc/x", {"abc"})


@pytest.mark.parametrize("minutes", [60, 1439.9, 0])
def test_a_window_under_a_day_is_refused_in_one_line(minutes) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({"dataset": {"name": "d", "incoming": "in/", "classes": ["a", "b"],
                                  "sweep_after_minutes": minutes}})
    msg = str(e.value)
    assert "\n" not in msg and "sweep_after_minutes" in msg and "1440" in msg
