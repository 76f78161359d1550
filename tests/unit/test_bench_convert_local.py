"""The conversion benchmark's local-disk contender runs shardline's own task and driver code
(``convert_group``, ``assemble``: duplicate check, id file, row files) and validation with
the folder store standing in for the bucket (validation reads the row files back through
the store the conversion kept, so it must still be there when the suites run)."""

from __future__ import annotations

from pathlib import Path

from shardline.core.folder_store import FolderStore
from shardline.infra.demo_data import bad_jsonl_lines, digits, jsonl_bytes
from shardline.tasks.batch import Batch, Source
from shardline.tasks.convert.job import convert_group
from shardline.tasks.convert.split import Part
from shardline.tasks.convert.stage import assemble
from shardline.tasks.validate import run_suites
from tests.integration.ingest_helpers import dataset_config


def test_local_dir_store_carries_convert_and_validation(tmp_path: Path) -> None:
    import pyarrow as pa

    store, cfg = FolderStore(tmp_path), dataset_config()
    bad = "\n".join(line for line, _ in bad_jsonl_lines()) + "\n"
    bodies = {"a.jsonl": jsonl_bytes(digits(0, 120)),
              "b.jsonl": jsonl_bytes(digits(100, 200)) + bad.encode()}   # 20 repeat a's ids
    sources = []
    for name, body in bodies.items():
        key = f"{cfg.incoming}{name}"
        sources.append(Source(key, store.put_bytes(key, body), len(body), "jsonl"))
    meta = pa.Table.from_batches([convert_group(store, cfg, "r-local", (Part.of(s),), task=t)
                                  for t, s in enumerate(sources)])
    conv = assemble(store, cfg, Batch("b-local", tuple(sources)), "r-local", None, meta)
    rows_in = 120 + 100 + len(bad_jsonl_lines())
    assert conv.rows_in == rows_in
    assert conv.rows_ok == 200                               # 220 minus the 20 repeated ids
    assert conv.by_rule.get("duplicate_id") == 20
    assert len(conv.published_ids()) == 200
    ok, results = run_suites(cfg, conv)
    assert results and isinstance(ok, bool)
