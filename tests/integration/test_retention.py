"""Retention on moto: ``shardline expire`` keeps the latest, a live model's version and a
running training's, and readers of what it removed get one line naming the oldest kept
version; a publish after it lands on the chain as usual."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from shardline.cli.main import app
from shardline.core import layout, retention
from shardline.core.config import StoreSettings
from shardline.core.latest import latest_version
from shardline.core.manifest import VersionExpired, read_manifest, recent_manifests
from shardline.core.references import referenced
from shardline.core.store import ObjectStore
from shardline.tasks.compact import compact
from shardline.tasks.expire import ExpireResult, expire
from shardline.tasks.lease import store_now
from shardline.tasks.vacuum import vacuum
from shardline.tasks.verify import verify
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.retention import expire_models, versions_in_use
from tests.integration.cli_helpers import EXE, cli_env
from tests.integration.compact_data import publish_small
from tests.integration.retention_data import live_model
from tests.integration.trainer_data import config_toml, digits_config, publish_version


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
    """The commands in this process (typer's runner, the real app), the reader of an
    expired version as a user runs it (a subprocess: one line on stderr)."""
    cfg = digits_config()
    publish_small(store, cfg.dataset, batches=3)
    path = tmp_path / "dataset.toml"
    path.write_text(config_toml(cfg))
    env = cli_env(store_settings, tmp_path)

    def run(*args: str) -> Result:
        return CliRunner().invoke(app, [*args, "-c", str(path)], env=env)

    none = run("expire")
    assert none.exit_code == 1 and "--keep N" in none.output
    dry = run("expire", "--keep", "1", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "would expire 2 version(s) (v1-2); latest v3" in dry.output
    assert latest_version(store, cfg.dataset.prefix) == 3
    assert store.head(layout.version_key(cfg.dataset.prefix, 1)) is not None
    real = run("expire", "--keep", "1")
    assert real.exit_code == 0 and "expired 2 version(s) (v1-2)" in real.output
    vac = run("vacuum", "--dry-run", "--json")
    assert vac.exit_code == 0, vac.output
    assert '"removed": []' in vac.output and '"grace_versions": [1, 2]' in vac.output
    models = run("models", "expire", "--keep", "1", "--dry-run")
    assert models.exit_code == 0 and "would remove model(s) none" in models.output

    old = subprocess.run([EXE, "verify", "--version", "1", "-c", str(path)], env=env,
                         capture_output=True, text=True, timeout=180)
    assert old.returncode == 1 and "Traceback" not in old.stderr
    assert "version 1 " in old.stderr and "oldest kept version is 3" in old.stderr


def test_registry_retention_keeps_promoted_history_and_the_last_candidates(
        store: ObjectStore) -> None:
    cfg = digits_config()
    ds, name = cfg.dataset, cfg.train.registry_name
    reg = ModelRegistry(store, ds.name, name)
    for version in range(1, 6):                  # models 1..5; 1 and 2 promoted, 2 live
        n = reg.claim(f"run{version}")
        reg.save(n, b"w", b"o", {"dataset_version": version})
        if n <= 2:
            reg.promote(n, reg.promoted(), {"history": list(range(1, n + 1))})
    now = store_now(store, ds.prefix)
    window = timedelta(minutes=ds.sweep_after_minutes)
    fresh = expire_models(store, ds.name, name, 1, now, window)
    assert fresh.removed == [] and "within the sweep window" in fresh.kept[3]
    later = now + window + timedelta(minutes=1)
    assert expire_models(store, ds.name, name, 1, later, window, dry_run=True).removed == [3, 4]
    done = expire_models(store, ds.name, name, 1, later, window)
    assert done.removed == [3, 4] and set(done.kept) == {1, 2, 5}
    assert reg.numbers() == [1, 2, 5]
    assert not list(store.list(f"{reg.prefix}/000003/"))
    assert store.head(reg.key(1, "weights.safetensors")) is not None
    assert reg.promoted() is not None and reg.promoted().number == 2


def test_vacuum_removes_what_no_kept_version_references(store: ObjectStore) -> None:
    ds = digits_config().dataset
    publish_small(store, ds, batches=3)
    before = set(o.key for o in store.list(f"{ds.prefix}/shards/"))
    v4 = compact(store, ds, target_mb=1.0)            # replaces every small shard
    assert v4.version == 4
    orphan = layout.shard_key(ds.prefix, "crashed", None, 0, "deadrun")
    store.put_bytes(orphan, b"a crashed run's copy")
    leftover = layout.staging_prefix(ds.prefix, "deadrun") + "data/t00000-0000-a0.arrow"
    store.put_bytes(leftover, b"staged")
    assert expire(store, ds, keep=1).expired == [1, 2, 3]
    live = referenced(read_manifest(store, ds.prefix, 4))

    young = vacuum(store, ds)                          # everything is younger than the window
    assert young.removed == [] and young.grace_versions == [1, 2, 3]
    later = store_now(store, ds.prefix) + timedelta(minutes=ds.sweep_after_minutes + 1)
    dry = vacuum(store, ds, now=later, dry_run=True)
    assert store.head(orphan) is not None
    done = vacuum(store, ds, now=later)
    assert sorted(done.removed) == sorted(dry.removed) and done.kept_versions == [4]
    gone = set(done.removed)
    assert before <= gone and {orphan, leftover} <= gone       # replaced, crashed, staged
    assert {layout.expired_doc_key(ds.prefix, v) for v in (1, 2, 3)} <= gone
    assert not gone & live
    left = {o.key for o in store.list(f"{ds.prefix}/")}
    assert live <= left and not gone & left
    assert verify(store, ds).sound
    assert read_manifest(store, ds.prefix, 4).rows == 750
    assert vacuum(store, ds, now=later).removed == []          # nothing left to do


def test_a_running_training_holds_its_version(store: ObjectStore, tmp_path: Path) -> None:
    """Real training (CPU): while it runs, expire keeps the version it reads; after it, the
    lease is gone and the version stays because the promoted model was trained on it."""
    import dataclasses

    import numpy as np

    from shardline.trainer.options import RunOptions
    from shardline.trainer.run import train

    cfg = digits_config(cache_dir=str(tmp_path / "cache"), width=8, epochs=1, batch_size=64)
    ds = cfg.dataset
    for i in range(3):
        publish_version(store, ds, np.arange(i * 300, (i + 1) * 300))
    seen: list[ExpireResult] = []

    def during(step: int, _batch: object) -> None:
        if not seen:
            seen.append(expire(store, ds, keep=1, held=versions_in_use(store, ds.name),
                               dry_run=True))

    result = train(cfg, store, 2, options=RunOptions(log_every=100, checkpoint_every=1000),
                   on_batch=during)
    assert seen[0].expired == [1] and "read by running training" in seen[0].kept[2]
    assert not list(store.list(layout.leases_prefix(ds.prefix) + "train-"))
    assert result.promoted and result.dataset_version == 2
    after = expire(store, ds, keep=1, held=versions_in_use(store, ds.name))
    assert after.expired == [1] and "trained live model 1" in after.kept[2]
    assert dataclasses.asdict(after)["latest"] == 3
