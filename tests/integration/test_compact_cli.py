"""``shardline compact`` as a user runs it (a subprocess, stdout a pipe) on a moto bucket:
dry run, compaction, re-run, and a user error as one line."""

from __future__ import annotations

import json
from pathlib import Path

from shardline.core.config import StoreSettings
from shardline.core.manifest import list_versions, read_manifest
from shardline.core.store import ObjectStore
from tests.integration.cli_helpers import cli_runner
from tests.integration.compact_data import BATCHES, publish_small
from tests.integration.trainer_data import digits_config


def test_compact_command(store: ObjectStore, store_settings: StoreSettings,
                         tmp_path: Path) -> None:
    cfg = digits_config()
    publish_small(store, cfg.dataset)
    run = cli_runner(cfg, store_settings, tmp_path, "compact")

    dry = run("--target-mb", "1", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] and plan["version"] is None
    assert (plan["shards_before"], plan["shards_after"]) == (BATCHES * 10, BATCHES)
    assert list_versions(store, cfg.dataset.prefix) == list(range(1, BATCHES + 1))

    text = run("--target-mb", "1", "--dry-run")
    assert text.returncode == 0, text.stderr
    print(text.stdout)
    assert f"{BATCHES * 10} shards" in text.stdout and "dry run: nothing written" in text.stdout
    assert text.stdout.count("\n") >= BATCHES + 2            # the groups, one per batch

    done = run("--target-mb", "1", "--json")
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    assert r["created"] and r["version"] == BATCHES + 1 and r["shards_after"] == BATCHES
    assert read_manifest(store, cfg.dataset.prefix, BATCHES + 1).totals.shards == BATCHES

    again = run("--target-mb", "1")
    assert again.returncode == 0, again.stderr
    assert "nothing to compact" in again.stdout
    assert list_versions(store, cfg.dataset.prefix)[-1] == BATCHES + 1

    bad = run("--target-mb", "0")
    assert bad.returncode == 1 and "error:" in bad.stderr and "Traceback" not in bad.stderr
