"""``shardline verify`` as a user runs it (a subprocess) on a moto bucket: a sound version,
one whose shard was deleted, one whose shard bytes were changed (same size, and not)."""

from __future__ import annotations

import json
from pathlib import Path

from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from tests.integration.cli_helpers import cli_runner
from tests.integration.compact_data import publish_small
from tests.integration.trainer_data import digits_config


def test_verify_finds_a_deleted_and_a_changed_shard(store: ObjectStore,
                                                    store_settings: StoreSettings,
                                                    tmp_path: Path) -> None:
    cfg = digits_config()
    v1, v2 = publish_small(store, cfg.dataset, batches=2)
    run = cli_runner(cfg, store_settings, tmp_path, "verify")

    sound = run()
    assert sound.returncode == 0, sound.stderr
    assert sound.stdout.strip().splitlines() == [sound.stdout.strip()]      # one line
    assert "v2 is sound" in sound.stdout

    gone, flipped, cut = v1.shards[0], v1.shards[1], v2.new()[0]
    store.delete([gone.path])
    data = bytearray(store.get_bytes(flipped.path))
    data[len(data) // 2] ^= 0xFF
    store.put_bytes(flipped.path, bytes(data))                    # same size, other bytes
    store.put_bytes(cut.path, store.get_bytes(cut.path)[:-10])    # truncated

    old = run("--version", "1")
    assert old.returncode == 1
    lines = old.stdout.strip().splitlines()
    assert len(lines) == 3 and "v1 is broken: 2 problem(s)" in lines[-1]
    by_key = {ln.split(": ", 1)[0]: ln for ln in lines[:-1]}
    assert "missing" in by_key[store.uri(gone.path)] and "repair: restore" in \
        by_key[store.uri(gone.path)]
    assert "bytes were changed" in by_key[store.uri(flipped.path)]
    assert flipped.xxh3_128 in by_key[store.uri(flipped.path)]

    latest = run("--json")
    assert latest.returncode == 1
    r = json.loads(latest.stdout)
    assert r["version"] == 2 and not r["sound"]
    assert {p["key"] for p in r["problems"]} == \
        {store.uri(s.path) for s in (gone, flipped, cut)}
    cut_problem = next(p for p in r["problems"] if p["key"] == store.uri(cut.path))
    assert f"the version records {cut.bytes}" in cut_problem["problem"]

    missing = run("--version", "9")
    assert missing.returncode == 1 and "no version 9" in missing.stderr
    assert "Traceback" not in missing.stderr
