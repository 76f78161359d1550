"""The convert driver's memory follows the tasks and shards, not the rows.

The Spark tasks write their per-row metadata to row files (``tasks.convert.rowfiles``) and
return one metadata row per file; the duplicate check and validation read the row files one
id-bucket range at a time. These tests run the tasks' code (``convert_group``) directly
against a real moto S3 server (no Spark needed for what is checked here) and show:

- what the driver collects has one row per file written, however many input rows;
- the duplicate check in many small chunks finds exactly what one pass finds (same
  duplicates and messages, same published ids per bucket) and never reads more than a
  chunk's worth of rows at once;
- every input row is either in the id file or quarantined, once.
"""

from __future__ import annotations

import pyarrow as pa

from shardline.infra.demo_data import bad_jsonl_lines, digits, jsonl_bytes
from shardline.tasks.batch import Source
from shardline.tasks.convert import rowfiles
from shardline.tasks.convert.dedupe import dedupe_batch
from shardline.tasks.convert.job import convert_group
from shardline.tasks.convert.split import Part
from shardline.tasks.convert.stage import assemble
from shardline.tasks.id_index import open_reader
from shardline.tasks.ledger import write_ids
from shardline.tasks.validate import run_suites
from tests.integration.ingest_helpers import dataset_config, read_arrow


def _sources(store, cfg) -> list[Source]:
    bad = "\n".join(line for line, _ in bad_jsonl_lines()) + "\n"
    bodies = {
        "a.jsonl": jsonl_bytes(digits(0, 300)),
        # d00250..d00299 repeat a.jsonl's ids (a's rows come first and are kept)
        "b.jsonl": jsonl_bytes(digits(250, 450)) + bad.encode(),
        "c.jsonl": jsonl_bytes(digits(450, 700)),
    }
    out = []
    for name, body in bodies.items():
        key = f"{cfg.incoming}{name}"
        etag = store.put_bytes(key, body)
        out.append(Source(key, etag, len(body), "jsonl"))
    return out


def _meta(store, cfg, run_id: str, sources: list[Source]) -> pa.Table:
    return pa.Table.from_batches([convert_group(store, cfg, run_id, (Part.of(s),), task=t)
                                  for t, s in enumerate(sources)])


def test_driver_collects_one_row_per_file(store):
    cfg = dataset_config()
    sources = _sources(store, cfg)
    meta = _meta(store, cfg, "r-meta", sources)
    kinds = meta.column("kind").to_pylist()
    assert kinds.count("rows") == len(sources)             # one row file per task
    assert set(kinds) == {"rows", "shard"}                  # and nothing per input row
    assert meta.num_rows < 20
    rows_in = 300 + 200 + len(bad_jsonl_lines()) + 250
    assert sum(meta.filter(pa.compute.equal(meta.column("kind"), "rows"))
               .column("shard_row").to_pylist()) == rows_in


def _dedupe(store, cfg, run_id, sources, published, max_rows, seen, monkeypatch):
    meta = _meta(store, cfg, run_id, sources)
    conv = assemble(store, cfg, _batch(sources), run_id, None, meta)   # ids checked, no history
    files = conv.row_files
    stage = f"{cfg.prefix}/staging/{run_id}/"
    data = conv.data_shards
    real = rowfiles.read_buckets

    def spy(*args, **kwargs):
        table, buckets = real(*args, **kwargs)
        seen.append(table.num_rows)
        return table, buckets

    with monkeypatch.context() as m:
        m.setattr("shardline.tasks.convert.dedupe.read_buckets", spy)
        done = dedupe_batch(store, cfg, run_id + "x", files, published, data,
                            rowfiles.staged_ids_key(stage + "again-"), max_rows=max_rows)
    return conv, done


def _batch(sources):
    from shardline.tasks.batch import Batch
    return Batch("b-bounded", tuple(sources))


def test_chunked_dedupe_matches_one_pass_and_reads_a_chunk_at_a_time(store, monkeypatch):
    cfg = dataset_config()
    sources = _sources(store, cfg)
    published = f"{cfg.prefix}/ids/batch=old-r0.arrow"
    write_ids(store, published, pa.array(["d00010", "d00460", "gone"]))
    one: list[int] = []
    many: list[int] = []
    c1, whole = _dedupe(store, cfg, "r-one", sources, [published], 10_000_000, one, monkeypatch)
    c2, chunked = _dedupe(store, cfg, "r-many", sources, [published], 60, many, monkeypatch)

    assert len(one) == 1 and len(many) > 5
    per_bucket = max(sum(f.ok_per_bucket[k] for f in c2.row_files) for k in range(64))
    assert max(many) <= max(60, per_bucket)                 # never more than a chunk at once

    def dup_rows(d, run):
        return {(k.split(run)[1], tuple(v.tolist())) for k, v in d.dropped.items()}
    assert dup_rows(whole, "r-one") == dup_rows(chunked, "r-many")

    def qrows(d):
        return sorted((r["source_key"], r["source_row"], r["id"], r["rule"], r["message"])
                      for q in d.quarantine for r in read_arrow(store, q.path).to_pylist())
    assert qrows(whole) == qrows(chunked)
    assert len(qrows(whole)) == 50 + 2          # 50 repeats in the batch, 2 already published
    assert {r[2] for r in qrows(whole) if "published version" in r[4]} == {"d00010", "d00460"}

    def id_buckets(d):
        reader = open_reader(store, d.ids_key)
        return [sorted(reader.get_batch(k).column(0).to_pylist()) for k in range(64)]
    assert id_buckets(whole) == id_buckets(chunked)
    ids = [i for b in id_buckets(chunked) for i in b]
    expect = sorted({d.id for d in digits(0, 700)} - {"d00010", "d00460"})
    assert sorted(ids) == expect and chunked.ids == len(expect)  # each good id once
    # exactly once: every input row is published (a data shard row) or quarantined
    data_rows = sum(s.rows for s in chunked.data)
    quarantined = sum(f.rows - sum(f.ok_per_bucket) for f in c2.row_files) + chunked.count
    assert data_rows == len(expect)
    assert data_rows + quarantined == c2.rows_in == 700 + 50 + len(bad_jsonl_lines())


def test_validation_in_chunks_agrees_with_one_pass(store):
    cfg = dataset_config()
    sources = _sources(store, cfg)
    meta = _meta(store, cfg, "r-val", sources)
    conv = assemble(store, cfg, _batch(sources), "r-val", None, meta)
    ok1, one = run_suites(cfg, conv, store)
    ok2, many = run_suites(cfg, conv, store, max_rows=50)
    assert ok1 and ok2

    def key(rs):
        return [(r["suite"], r["expectation"], r["success"], r["detail"].split(", e.g.")[0])
                for r in rs]
    assert key(one) == key(many)
    status = next(r for r in one if r["column"] == "status")
    assert status["detail"].startswith(f"unexpected {conv.rows_quarantined} of {conv.rows_in}")
    strict = dataset_config(validation={"max_quarantine_fraction": 0.01})
    assert run_suites(strict, conv, store, max_rows=50)[0] is False


def test_quarantine_examples_come_in_source_order(store):
    """Row files are in id-hash order; the examples a person reads (report, artifact) are
    each task's first refused rows by (object, row), the id-less ones in their place."""
    cfg = dataset_config()
    sources = _sources(store, cfg)
    conv = assemble(store, cfg, _batch(sources), "r-examples", None,
                    _meta(store, cfg, "r-examples", sources))
    conv.examples = None                                  # read them from the row files
    got = conv.quarantine_examples()
    refused = conv.rows.filter(pa.compute.not_equal(conv.rows.column("status"), "ok"))
    want = sorted((r["source_key"], r["source_row"]) for r in refused.to_pylist())
    assert len(got) == min(len(want), 50) > 5
    assert [(e["source_key"], e["source_row"]) for e in got] == want[:len(got)]
