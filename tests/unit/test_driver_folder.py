"""The whole ingest driver on the folder store: no server, no Spark. The stages are the
driver's plain ones (real detect, validation with great-expectations, publish, strikes,
sweep) but for convert, which runs shardline's own task and driver code in-process
(``convert_group`` per source, then ``assemble``: duplicate check, id file, row files),
as the benchmark's local-disk contender does. One upload crashes its conversion (as a lost
Spark executor does), so the run bisects it out within itself.

The invariant: every input row ends published or quarantined exactly once, and the one
poison upload is set aside, its rows in neither."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from shardline.core.folder_store import FolderStore
from shardline.core.manifest import latest_manifest, list_versions
from shardline.infra.demo_data import bad_jsonl_lines, csv_bytes, digits, jsonl_bytes
from shardline.tasks.batch import Batch
from shardline.tasks.convert.converted import Converted
from shardline.tasks.convert.job import convert_group
from shardline.tasks.convert.split import Part
from shardline.tasks.convert.stage import assemble
from shardline.tasks.detect import detect
from shardline.tasks.driver import run_ingest
from shardline.tasks.driver_stages import plain, summarise
from shardline.tasks.setaside import set_aside
from tests.integration.ingest_helpers import dataset_config, published_rows, quarantined_rows


def _local_convert(store: FolderStore, cfg, poison: str):
    def convert(batch: Batch, run_id: str) -> Converted:
        if any(s.key.endswith(poison) for s in batch.sources):
            raise RuntimeError("Python worker exited unexpectedly (crashed)")
        meta = pa.Table.from_batches([convert_group(store, cfg, run_id, (Part.of(s),), task=t)
                                      for t, s in enumerate(batch.sources)])
        return assemble(store, cfg, batch, run_id, latest_manifest(store, cfg.prefix), meta)
    return convert


def test_the_driver_on_the_folder_store_publishes_or_quarantines_every_row_once(
        tmp_path: Path) -> None:
    store, cfg = FolderStore(tmp_path), dataset_config()
    bad = [line for line, _ in bad_jsonl_lines()]
    uploads = {"a.jsonl": jsonl_bytes(digits(0, 120)),
               "b.jsonl": jsonl_bytes(digits(100, 200)) + ("\n".join(bad) + "\n").encode(),
               "c.csv": csv_bytes(digits(200, 260)),
               "poison.jsonl": jsonl_bytes(digits(260, 270))}
    rows = {"a.jsonl": 120, "b.jsonl": 100 + len(bad), "c.csv": 60}
    for name, body in uploads.items():
        store.put_bytes(f"{cfg.incoming}{name}", body)
    stages = dataclasses.replace(plain(store, cfg),
                                 convert=_local_convert(store, cfg, "poison.jsonl"))
    done: list = []
    with pytest.raises(RuntimeError, match="crashed"):       # the run's first failure, last
        run_ingest(dataclasses.replace(stages, published=done.append), "r1")
    assert len(list_versions(store, cfg.prefix)) == len(done) >= 2   # bisected in the run
    assert {k for k, _ in set_aside(store, cfg)} == {f"{cfg.incoming}poison.jsonl"}
    assert detect(store, cfg) is None and run_ingest(stages, "r2") == []

    m = latest_manifest(store, cfg.prefix)
    assert m is not None
    pub, q = published_rows(store, m), quarantined_rows(store, m)
    seen = Counter(zip(pub.column("source_key").to_pylist(),
                       pub.column("source_row").to_pylist(), strict=True))
    seen.update(zip(q.column("source_key").to_pylist(), q.column("source_row").to_pylist(),
                    strict=True))
    assert max(seen.values()) == 1, "a row was published or quarantined twice"
    want = {(f"{cfg.incoming}{name}", i) for name, n in rows.items() for i in range(n)}
    assert set(seen) == want                                  # every row, poison's none
    assert sorted(pub.column("id").to_pylist()) == [d.id for d in digits(0, 260)]
    assert Counter(q.column("rule").to_pylist())["duplicate_id"] == 20   # b repeats a's ids
    result = summarise(cfg.name, done, store.uri(cfg.incoming))
    assert result.created and 1 + len(result.more) == len(done)
