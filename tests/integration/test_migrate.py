"""``shardline migrate`` on moto S3 with real digits shards: a format-1 and a format-2 dataset
are refused by every reader in one line naming the format and the command, migrate once
into format 3 (the same rows), then train and open; a second run writes nothing; a run
killed at its Nth store write, for every N, re-runs to the same result with nothing
half-visible in between; the command itself, once, with the others naming it."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import shardline
from shardline.core import layout
from shardline.core.latest import latest_version
from shardline.core.manifest import read_manifest
from shardline.core.store import ObjectStore
from shardline.core.version_doc import UnsupportedFormat
from shardline.tasks.migrate import migrate
from shardline.tasks.sweep import sweep
from shardline.trainer.options import RunOptions
from shardline.trainer.run import train
from tests.integration.cli_helpers import cli_runner
from tests.integration.compact_data import as_format1, as_format2, rows_of
from tests.integration.trainer_data import digits_config, publish_version

ORDER = np.random.default_rng(11).permutation(1797)
FAST = RunOptions(log_every=50, checkpoint_every=1000, eval_each_epoch=False)
CFG = digits_config(width=8, epochs=1, batch_size=64)
PREFIX = CFG.dataset.prefix


def _old_dataset(store: ObjectStore, fmt: int) -> Any:
    """Two versions of digits, rewritten as format ``fmt`` wrote them; their rows."""
    for part in (ORDER[:300], ORDER[300:700]):
        publish_version(store, CFG.dataset, part)
    m = read_manifest(store, PREFIX, 2)
    rows, batches = rows_of(store, m), [(b.id, b.version, b.ids_path) for b in m.batches]
    if fmt == 1:
        as_format1(store, PREFIX, 2)
    else:
        as_format2(store, PREFIX)
    return rows, batches


def _snapshot(store: ObjectStore) -> dict[str, bytes]:
    return {o.key: store.get_bytes(o.key) for o in store.list("")}


def _restore(store: ObjectStore, snap: dict[str, bytes]) -> None:
    store.delete(k for k in (o.key for o in store.list("")) if k not in snap)
    for k, body in snap.items():
        store.put_bytes(k, body)


def _comparable(snap: dict[str, bytes]) -> dict[str, Any]:
    """A bucket's objects, with the migration document's timestamps left out."""
    out: dict[str, Any] = dict(snap)
    key = layout.version_key(PREFIX, 3)
    if key in out:
        doc = json.loads(out[key])
        out[key] = {k: v for k, v in doc.items() if k not in ("created_at", "code_version")}
    return out


@pytest.mark.parametrize("fmt", [1, 2])
def test_an_old_dataset_is_refused_then_migrates_once_then_trains_and_opens(
        store: ObjectStore, tmp_path, fmt: int) -> None:  # type: ignore[no-untyped-def]
    rows, batches = _old_dataset(store, fmt)
    readers: list[Callable[[], Any]] = [
        lambda: shardline.open_dataset(CFG, store=store),
        lambda: train(digits_config(cache_dir=str(tmp_path / "c0")), store, options=FAST),
        lambda: read_manifest(store, PREFIX, 2).shards]
    for read in readers:
        with pytest.raises(UnsupportedFormat) as err:
            read()
        msg = str(err.value)
        assert "\n" not in msg and f"format {fmt}" in msg, msg
        assert "`shardline migrate --config F`" in msg and "reads format 3 only" in msg

    r = migrate(store, CFG.dataset)
    assert (r.parent, r.version, r.found, r.batches) == (2, 3, fmt, 2)
    m = read_manifest(store, PREFIX, 3)
    assert m.format == 3 and m.new_batch is None and m.new() == [] and m.rows == 700
    assert [(b.id, b.version, b.ids_path) for b in m.batches] == batches
    assert rows_of(store, m).equals(rows)                       # the same rows, every column
    assert all(r.key.endswith(".arrow") for r in m.batch_lists)
    if fmt == 1:                              # sources come from each batch's own document
        assert [len(bl.sources) for bl in m.read_lists(m.batch_lists)] == [1, 1]

    before = _snapshot(store)
    again = migrate(store, CFG.dataset)
    assert (again.version, again.parent, again.found) == (None, 3, 3)
    assert _snapshot(store) == before                           # wrote nothing

    swept = sweep(store, CFG.dataset, full=True)        # young old-format history: skipped
    assert swept.orphans == 0
    ds = shardline.open_dataset(CFG, store=store)
    assert ds.version == 3 and ds.rows == 700
    assert sorted(ds.to_table(columns=["id"]).column("id").to_pylist()) == \
        sorted(rows.column("id").to_pylist())
    cfg = digits_config(cache_dir=str(tmp_path / "cache"), width=8, epochs=1, batch_size=64)
    result = train(cfg, store, options=FAST)
    assert result.dataset_version == 3 and result.new_samples > 0


class Killed(BaseException):
    """The process dying at a store write (not an error anything may catch)."""


def _killing(store: ObjectStore, at: int) -> tuple[ObjectStore, list[str]]:
    """A store on the same bucket whose ``at``-th write dies before it reaches S3."""
    killer = ObjectStore(store.settings)
    lock, seen = threading.Lock(), []
    real = killer.put_bytes

    def put_bytes(key: str, data: Any, **kw: Any) -> str:
        with lock:
            seen.append(key)
            n = len(seen)
        if n == at:
            raise Killed(key)
        return real(key, data, **kw)
    killer.put_bytes = put_bytes  # type: ignore[method-assign]
    return killer, seen


@pytest.mark.parametrize("fmt", [1, 2])
def test_killed_at_every_write_then_rerun_gives_the_same_result(store: ObjectStore,
                                                                fmt: int) -> None:
    _old_dataset(store, fmt)
    old = _snapshot(store)
    migrate(store, CFG.dataset)
    want = _comparable(_snapshot(store))
    writes = len({k for k in want if k not in old or want[k] != old[k]})
    assert writes >= 4                    # lists (and schema, config), checkpoint, doc, hint
    kills = 0
    for at in range(1, writes + 2):
        _restore(store, old)
        killer, seen = _killing(store, at)
        try:
            migrate(killer, CFG.dataset)
        except Killed:
            kills += 1
            committed = store.head(layout.version_key(PREFIX, 3)) is not None
            # nothing half-visible: before the commit the latest is still the old version
            assert latest_version(store, PREFIX) == (3 if committed else 2)
            if not committed:
                with pytest.raises(UnsupportedFormat):
                    read_manifest(store, PREFIX, 2)
        r = migrate(store, CFG.dataset)
        assert r.version in (3, None) and latest_version(store, PREFIX) == 3
        assert _comparable(_snapshot(store)) == want, f"killed at write {at} ({seen[-1:]})"
    assert kills == writes                # every write was killed once, the last run was not


def test_the_command_migrates_once_and_the_others_name_it(store: ObjectStore,
                                                        tmp_path) -> None:  # type: ignore[no-untyped-def]
    _old_dataset(store, 1)
    run = cli_runner(CFG, store.settings, tmp_path)
    refused = run("compact", "--dry-run")
    lines = [x for x in refused.stderr.splitlines() if x.strip()]
    assert refused.returncode == 1 and len(lines) == 1, refused.stderr
    assert "format 1;" in lines[0] and "`shardline migrate --config F`" in lines[0]
    first = run("migrate")
    assert first.returncode == 0, first.stderr
    assert "v2 (format 1) -> version 3 (format 3): 2 batches" in first.stdout
    again = run("migrate", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["version"] is None
    table = run("versions", "--json")
    assert table.returncode == 0, table.stderr
    rows = {r["version"]: r for r in json.loads(table.stdout)["versions"]}
    assert rows[3]["rows"] == 700 and rows[3]["new_rows"] == 0
    assert rows[1]["validation"] == rows[2]["validation"] == "format 1: not read"
