"""Retention on moto: ``shardline expire`` keeps the latest, a live model's version and a
running training's, and readers of what it removed get one line naming the oldest kept
version; a publish after it lands on the chain as usual."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from shardline.core import layout, retention
from shardline.core.config import StoreSettings
from shardline.core.latest import latest_version
from shardline.core.manifest import VersionExpired, read_manifest, recent_manifests
from shardline.core.store import ObjectStore
from shardline.tasks.expire import expire
from shardline.tasks.lease import store_now
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.retention import versions_in_use
from tests.integration.cli_helpers import EXE, cli_env
from tests.integration.compact_data import publish_small
from tests.integration.trainer_data import config_toml, digits_config


def live_model(store: ObjectStore, dataset: str, model: str, version: int) -> int:
    """A complete model trained on dataset ``version``, promoted (the registry's own
    writes; weights are opaque bytes here: nothing loads them)."""
    reg = ModelRegistry(store, dataset, model)
    n = reg.claim("run-test")
    reg.save(n, b"weights", b"optimizer", {"dataset_version": version, "model_version": n})
    reg.promote(n, reg.promoted(), {"history": [n]})
    return n


def test_expire_keeps_the_held_and_readers_are_told(store: ObjectStore) -> None:
    cfg = digits_config()
    ds = cfg.dataset
    publish_small(store, ds, batches=5)
    n = live_model(store, ds.name, cfg.train.registry_name, 2)
    retention.hold(store, ds.prefix, "run-a", 3)
    held = versions_in_use(store, ds.name)
    assert held == {2: f"trained live model {n} of {cfg.train.registry_name}"}

    dry = expire(store, ds, keep=1, held=held, dry_run=True)
    assert dry.expired == [1, 4] and store.head(layout.version_key(ds.prefix, 1)) is not None
    done = expire(store, ds, keep=1, held=held)
    assert done.expired == [1, 4] and set(done.kept) == {2, 3}
    assert "read by running training run-a" in done.kept[3]

    for v in (1, 4):
        with pytest.raises(VersionExpired) as exc:
            read_manifest(store, ds.prefix, v)
        msg = str(exc.value)
        assert f"version {v} " in msg and "oldest kept version is 2" in msg
        assert "\n" not in msg
        assert store.head(layout.expired_doc_key(ds.prefix, v)) is not None   # for vacuum
    assert [m.version for m in recent_manifests(store, ds.prefix, 5)] == [2, 3, 5]
    assert read_manifest(store, ds.prefix, 3).rows == 750

    # the chain stays readable with no hint (a listing) and after the next publish
    store.delete([layout.latest_pointer_key(ds.prefix)])
    assert latest_version(store, ds.prefix) == 5
    v6 = publish_small(store, ds, batches=1, start=5)[0]
    assert v6.version == 6 and v6.parent == 5 and v6.rows == 6 * 250
    assert latest_version(store, ds.prefix) == 6

    # the training's lease stops moving: a window later its version may go
    later = store_now(store, ds.prefix) + timedelta(minutes=ds.sweep_after_minutes + 1)
    again = expire(store, ds, keep=1, held=versions_in_use(store, ds.name), now=later)
    assert again.expired == [3, 5] and set(again.kept) == {2}
    assert sorted(retention.read_expired(store, ds.prefix).versions) == [1, 3, 4, 5]


def test_cli_expire_and_a_reader_of_an_expired_version(store: ObjectStore,
                                                       store_settings: StoreSettings,
                                                       tmp_path: Path) -> None:
    cfg = digits_config()
    publish_small(store, cfg.dataset, batches=3)
    path = tmp_path / "dataset.toml"
    path.write_text(config_toml(cfg))
    env = cli_env(store_settings, tmp_path)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([EXE, *args, "-c", str(path)], env=env, capture_output=True,
                              text=True, timeout=180)

    none = run("expire")
    assert none.returncode == 1 and "--keep N" in none.stderr
    dry = run("expire", "--keep", "1", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would expire 2 version(s) (v1-2); latest v3" in dry.stdout
    assert latest_version(store, cfg.dataset.prefix) == 3
    real = run("expire", "--keep", "1")
    assert real.returncode == 0 and "expired 2 version(s) (v1-2)" in real.stdout
    old = run("verify", "--version", "1")
    assert old.returncode == 1 and "Traceback" not in old.stderr
    assert "version 1 " in old.stderr and "oldest kept version is 3" in old.stderr
    assert run("verify").returncode == 0
