"""An upload replaced between detect and convert (issue 23): every read is pinned to the
ETag detect listed, so the replacement is never read under the old identity; the run detects
again and publishes the new object under its own ETag; no strike, no quarantine row.

Real moto server and Spark; the replacement is made by wrapping the driver's convert stage
(the only way to land a write exactly between the two stages)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from shardline.core.errors import SourceReplaced
from shardline.core.manifest import latest_manifest
from shardline.infra.demo_data import Digit, digits, jsonl_bytes
from shardline.tasks import setaside
from shardline.tasks.batch import Batch
from shardline.tasks.convert.formats import FORMATS
from shardline.tasks.convert.split import Part
from shardline.tasks.detect import detect
from shardline.tasks.driver import Policy, run_ingest
from shardline.tasks.driver_stages import plain
from tests.integration.ingest_helpers import dataset_config, published_rows, quarantined_rows


def _items(n: int, label_shift: int = 0, start: int = 0) -> list[Digit]:
    return [dataclasses.replace(d, label=(d.label + label_shift) % 10)
            for d in digits(start, start + n)]


def _lines(n: int, label_shift: int = 0, start: int = 0) -> bytes:
    return jsonl_bytes(_items(n, label_shift, start))


@pytest.mark.parametrize("same_size", [True, False])
def test_a_whole_object_read_refuses_the_replacement(store, same_size: bool) -> None:
    cfg = dataset_config()
    key = f"{cfg.incoming}a.jsonl"
    body = _lines(20)
    store.put_bytes(key, body)
    batch = detect(store, cfg)
    assert batch is not None
    (src,) = batch.sources
    new = body.replace(b'"label": 1', b'"label": 2') if same_size else body + _lines(1, 0, 30)
    assert (len(new) == len(body)) is same_size
    store.put_bytes(key, new)
    with pytest.raises(SourceReplaced, match="was replaced during ingest") as exc:
        list(FORMATS["jsonl"].read(store, Part.of(src), cfg))
    assert key in str(exc.value) and src.etag in str(exc.value)
    assert "truncated" not in str(exc.value)


def test_the_run_detects_the_replacement_and_publishes_it(store, spark) -> None:
    cfg = dataset_config()
    key = f"{cfg.incoming}a.jsonl"
    old, new = _lines(30), _lines(30, label_shift=1)
    assert len(old) == len(new)            # same size: only the ETag tells them apart
    store.put_bytes(key, old)
    stages = plain(store, cfg, spark)
    replaced: list[Batch] = []

    def convert_after_replacing(batch: Batch, pass_id: str):  # type: ignore[no-untyped-def]
        if not replaced:
            store.put_bytes(key, new)      # lands after detect listed the old version
            replaced.append(batch)
        return stages.convert(batch, pass_id)

    done = run_ingest(dataclasses.replace(stages, convert=convert_after_replacing),
                      uuid.uuid4().hex[:12], Policy(max_batches=1, backoff_s=0.01, seed=0))
    assert replaced, "the replacement was never injected"
    m = latest_manifest(store, cfg.prefix)
    assert m is not None and m.version == 1 and len(done) == 1
    (source,) = m.sources
    new_etag = store.head(key).etag
    assert source.etag == new_etag != replaced[0].sources[0].etag
    rows = published_rows(store, m).to_pylist()
    assert sorted((r["id"], r["label"]) for r in rows) == sorted(
        (d.id, d.label) for d in _items(30, label_shift=1))
    assert quarantined_rows(store, m).num_rows == 0
    # Nothing struck: the old listing was not the source's fault.
    assert list(store.list(setaside.strikes_prefix(cfg.prefix))) == []
