"""Large objects cut into several Spark tasks (tasks.split) keep the exactly-once contract:
every row is published or quarantined once, with the line / row number it has within the
whole object, exactly as when the object is converted by one task.

Real parts: a moto S3 server over HTTP, a Spark Connect server, great-expectations, Arrow.
A tiny ``min_task_bytes`` and a fixed task count force the slicing on small inputs.
"""

from __future__ import annotations

import json
import re
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardline.core.errors import ObjectChanged
from shardline.core.manifest import latest_manifest
from shardline.infra.demo_data import CLASSES, bad_jsonl_lines, digits
from shardline.tasks.batch import Batch, Source
from shardline.tasks.convert.job import convert_group
from shardline.tasks.convert.plan import plan_parts
from shardline.tasks.convert.split import Part
from shardline.tasks.convert.stage import Converted, convert
from shardline.tasks.detect import detect
from tests.integration.ingest_helpers import (
    assert_exactly_once,
    dataset_config,
    ingest_batch,
    published_rows,
    quarantined_rows,
)

SPLIT = {"tasks": 4, "min_task_bytes": 1}   # 4 slices of a lone object, however small
WHOLE = {"tasks": 1}


def _ingest(store, cfg, spark, **convert_options) -> Converted:
    """One batch through the ingest driver, keeping the Converted (staged shard names)."""
    done = ingest_batch(store, cfg, spark, **convert_options)
    assert done is not None
    return done.conv


def _slice_of(parts: tuple[Part, ...], pos: int) -> int:
    """Index of the slice holding byte offset / row group ``pos``."""
    return next(i for i, p in enumerate(parts) if p.start <= pos < (p.stop or 0))


def _tasks_used(conv: Converted) -> set[str]:
    paths = [s.path for s in conv.data_shards + conv.quarantine_shards]
    assert len(paths) == len(set(paths)), "two staged shards share a key"
    return {m.group(1) for p in paths if (m := re.search(r"/t(\d{5})-", p))}


def _view(store, cfg) -> tuple[list, list]:
    """What a reader sees, with the dataset's incoming prefix taken out of keys/messages:
    published (id, label, image, source_row), quarantined (source_row, id, rule, message).
    PIL's messages name a Python object by address, which is dropped too."""
    m = latest_manifest(store, cfg.prefix)
    assert m is not None
    pub = published_rows(store, m).to_pylist()
    q = quarantined_rows(store, m).to_pylist()
    strip = cfg.incoming

    def message(text: str) -> str:
        return re.sub(r" at 0x[0-9a-f]+", "", text.replace(strip, ""))

    return (sorted((r["id"], r["label"], r["image"], r["source_key"].replace(strip, ""),
                    r["source_row"]) for r in pub),
            sorted((r["source_key"].replace(strip, ""), r["source_row"], r["id"] or "",
                    r["rule"], message(r["message"])) for r in q))


def _big_jsonl() -> tuple[bytes, list[str], dict[str, int], list[tuple[int, str, str]]]:
    """A JSONL body of 400 good digits with bad lines in every quarter, blank lines, an id
    repeated three quarters later and a cut-off last line. Returns (body, good ids,
    id -> line number, [(line number, rule, id or key fragment)] of the rows to quarantine).
    """
    good = digits(0, 400)
    unknown_label = next(line for line, rule in bad_jsonl_lines() if rule == "unknown_label")
    lines: list[str] = []
    line_of: dict[str, int] = {}
    expect: list[tuple[int, str, str]] = []

    def put_good(items) -> None:
        for d in items:
            line_of[d.id] = len(lines)
            lines.append(json.dumps({"id": d.id, "label": d.label, "image": d.b64()}))

    def put_bad(line: str, rule: str, ident: str) -> None:
        expect.append((len(lines), rule, ident))
        lines.append(line)

    put_good(good[:50])
    put_bad(unknown_label, "unknown_label", "bad-label")
    lines.append("")
    put_good(good[50:150])
    put_bad('{"id": "broken", "label": 1, "ima', "unparseable_record", "big.jsonl")
    lines.append("   ")
    put_good(good[150:250])
    put_bad("[1, 2, 3]", "unparseable_record", "big.jsonl")
    # a second row with the id of line 5 (three slices earlier): the later one loses
    put_bad(json.dumps({"id": good[5].id, "label": good[6].label, "image": good[6].b64()}),
            "duplicate_id", good[5].id)
    put_good(good[250:350])
    put_bad(json.dumps({"id": "no-image", "label": 2}), "missing_image", "no-image")
    put_good(good[350:])
    put_bad('{"id": "d00400", "lab', "truncated_file", "big.jsonl")   # no final newline
    return "\n".join(lines).encode(), [d.id for d in good], line_of, expect


def test_a_jsonl_object_cut_into_slices_converts_exactly_as_whole(store, spark):
    cfg = dataset_config(name="digits")
    whole_cfg = dataset_config(name="digits-whole", incoming="incoming/digits-whole/")
    body, good_ids, line_of, expect = _big_jsonl()
    store.put_bytes(f"{cfg.incoming}big.jsonl", body)
    store.put_bytes(f"{whole_cfg.incoming}big.jsonl", body)

    # the plan: >= 3 byte ranges on line boundaries, and the bad lines, the duplicate pair
    # and the cut-off tail are spread over different slices
    batch = detect(store, cfg)
    parts = plan_parts(store, batch.sources, SPLIT["tasks"], SPLIT["min_task_bytes"])
    assert len(parts) >= 3 and not any(p.whole for p in parts)
    assert [p.start for p in parts[1:]] == [p.stop for p in parts[:-1]]
    assert parts[0].start == 0 and parts[-1].stop == len(body)
    offsets = [0]
    for line in body.split(b"\n"):
        offsets.append(offsets[-1] + len(line) + 1)
    for p in parts:
        assert body[p.start - 1:p.start] in (b"", b"\n")
        assert p.first_row == body[:p.start].count(b"\n")
    bad_slices = {_slice_of(parts, offsets[n]) for n, _, _ in expect}
    assert len(bad_slices) >= 3, bad_slices
    dup_line = next(n for n, rule, _ in expect if rule == "duplicate_id")
    assert _slice_of(parts, offsets[line_of[digits(5, 6)[0].id]]) != \
        _slice_of(parts, offsets[dup_line])

    conv = _ingest(store, cfg, spark, **SPLIT)
    assert len(_tasks_used(conv)) >= 3, "the slices must run as separate tasks"
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, good_ids, [(ident, rule) for _, rule, ident in expect])
    # quarantine rows carry the real line numbers of the whole object
    q = quarantined_rows(store, m).to_pylist()
    assert sorted((r["source_row"], r["rule"]) for r in q) == \
        sorted((n, rule) for n, rule, _ in expect)
    assert all(r["source_key"] == f"{cfg.incoming}big.jsonl" for r in q)
    # and so do the published rows
    pub = published_rows(store, m).to_pylist()
    assert {r["id"]: r["source_row"] for r in pub} == line_of
    assert conv.rows_in == len(good_ids) + len(expect)

    # the same bytes converted by one task: the same rows, numbers, rules and messages
    whole = _ingest(store, whole_cfg, spark, **WHOLE)
    assert len(_tasks_used(whole)) == 1
    assert _view(store, whole_cfg) == _view(store, cfg)


def _parquet_body() -> tuple[bytes, list[str], list[tuple[int, str, str]]]:
    """200 rows in row groups of 20: good digits, with bad rows in different row groups."""
    good = digits(0, 200)
    ids = [d.id for d in good]
    labels: list[str | None] = [CLASSES[d.label] for d in good]
    images: list[bytes | None] = [d.png() for d in good]
    expect = []
    for row, rule in ((15, "unknown_label"), (75, "missing_image"), (130, "duplicate_id"),
                      (185, "undecodable_image")):
        if rule == "unknown_label":
            labels[row] = "eleven"
        elif rule == "missing_image":
            images[row] = None
        elif rule == "duplicate_id":
            ids[row] = ids[10]
        else:
            images[row] = b"not a png"
        expect.append((row, rule, ids[row]))
    table = pa.table({"id": ids, "label": labels, "image": pa.array(images, pa.binary())})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=20)
    good_ids = [rid for i, rid in enumerate(ids) if i not in {r for r, _, _ in expect}]
    return sink.getvalue().to_pybytes(), good_ids, expect


def test_a_parquet_object_cut_by_row_groups_converts_exactly_as_whole(store, spark):
    cfg = dataset_config(name="digits")
    whole_cfg = dataset_config(name="digits-whole", incoming="incoming/digits-whole/")
    body, good_ids, expect = _parquet_body()
    store.put_bytes(f"{cfg.incoming}big.parquet", body)
    store.put_bytes(f"{whole_cfg.incoming}big.parquet", body)

    parts = plan_parts(store, detect(store, cfg).sources, SPLIT["tasks"],
                       SPLIT["min_task_bytes"])
    assert len(parts) >= 3 and not any(p.whole for p in parts)
    assert [p.start for p in parts[1:]] == [p.stop for p in parts[:-1]]
    assert parts[0].start == 0 and parts[-1].stop == 10
    assert [p.first_row for p in parts] == [20 * p.start for p in parts]
    assert len({_slice_of(parts, row // 20) for row, _, _ in expect}) >= 3

    conv = _ingest(store, cfg, spark, **SPLIT)
    assert len(_tasks_used(conv)) >= 3
    m = latest_manifest(store, cfg.prefix)
    assert_exactly_once(store, m, good_ids, [(ident, rule) for _, rule, ident in expect])
    q = quarantined_rows(store, m).to_pylist()
    assert sorted((r["source_row"], r["rule"]) for r in q) == \
        sorted((n, rule) for n, rule, _ in expect)
    pub = published_rows(store, m).to_pylist()
    assert all(int(r["id"][1:]) == r["source_row"] for r in pub)   # d00042 is row 42

    _ingest(store, whole_cfg, spark, **WHOLE)
    assert _view(store, whole_cfg) == _view(store, cfg)


def test_a_corrupt_row_group_in_a_sliced_parquet_quarantines_its_rows_one_by_one(store, spark):
    """The footer parses, so the object is sliced; row group 3 does not decode. Its 20 rows
    are quarantined with their row numbers and the other slices' rows count as usual (the
    object converted whole is one unreadable_object row: pyarrow reads it all or nothing)."""
    cfg = dataset_config()
    body, good_ids, expect = _parquet_body()
    cc = pq.ParquetFile(pa.BufferReader(body)).metadata.row_group(3).column(2)
    off = min(o for o in (cc.dictionary_page_offset, cc.data_page_offset) if o is not None)
    body = body[:off] + b"\xff" * cc.total_compressed_size + body[off + cc.total_compressed_size:]
    store.put_bytes(f"{cfg.incoming}rg.parquet", body)
    batch = detect(store, cfg)
    assert batch is not None
    conv = convert(store, cfg, spark, batch, uuid.uuid4().hex[:12], None, **SPLIT)
    rows = conv.rows.to_pylist()
    assert sorted(r["source_row"] for r in rows) == list(range(200))
    lost = {r["source_row"] for r in rows if r["rule"] == "unparseable_record"}
    assert lost == set(range(60, 80))
    assert all(r["status"] == "quarantined" for r in rows if r["source_row"] in lost)
    assert {(r["source_row"], r["rule"]) for r in rows if r["status"] != "ok"} == \
        {(n, "unparseable_record") for n in lost} | \
        {(n, rule) for n, rule, _ in expect if n not in lost}   # row 75 is in row group 3
    assert sorted(r["id"] for r in rows if r["status"] == "ok") == \
        sorted(rid for rid in good_ids if not 60 <= int(rid[1:]) < 80)

    whole = convert(store, cfg, spark, batch, uuid.uuid4().hex[:12], None, **WHOLE)
    assert [(r["source_row"], r["rule"]) for r in whole.rows.to_pylist()] == \
        [(-1, "unreadable_object")]


def test_objects_that_cannot_be_planned_stay_whole_and_give_one_row(store, spark):
    """A truncated Parquet (no footer) and a JSONL object whose listed size is stale are not
    cut: each is one quarantine row with source_row = -1, as without splitting."""
    cfg = dataset_config()
    broken = _parquet_body()[0]
    store.put_bytes(f"{cfg.incoming}cut.parquet", broken[: len(broken) // 2])
    body = _big_jsonl()[0] + b"\n"
    store.put_bytes(f"{cfg.incoming}stale.jsonl", body)
    listed = {s.key: s for s in detect(store, cfg).sources}
    stale = listed[f"{cfg.incoming}stale.jsonl"]
    sources = (listed[f"{cfg.incoming}cut.parquet"],
               Source(stale.key, stale.etag, stale.size + 100, "jsonl"))
    parts = plan_parts(store, sources, SPLIT["tasks"], SPLIT["min_task_bytes"])
    assert parts == tuple(Part.of(s) for s in sources)

    conv = convert(store, cfg, spark, Batch("b-unplannable", sources), uuid.uuid4().hex[:12],
                   None, **SPLIT)
    rows = conv.rows.to_pylist()
    assert sorted((r["source_key"], r["source_row"], r["status"], r["rule"]) for r in rows) == [
        (f"{cfg.incoming}cut.parquet", -1, "quarantined", "truncated_file"),
        (f"{cfg.incoming}stale.jsonl", -1, "quarantined", "truncated_file")]


def test_an_object_overwritten_after_planning_fails_its_slices(store):
    """Slices read with If-Match on the planned ETag: a slice never mixes in a new upload;
    the task fails (the run publishes nothing) and names the object and what to do."""
    cfg = dataset_config()
    body = _big_jsonl()[0]
    key = f"{cfg.incoming}big.jsonl"
    store.put_bytes(key, body)
    parts = plan_parts(store, detect(store, cfg).sources, SPLIT["tasks"],
                       SPLIT["min_task_bytes"])
    assert len(parts) >= 3
    meta = convert_group(store, cfg, "r1", parts[1:2], task=1)   # before: converts fine
    assert meta.num_rows > 0
    store.put_bytes(key, body.replace(b'"label": 1', b'"label": 2'))
    with pytest.raises(ObjectChanged, match=re.escape(key) + " was replaced during ingest"):
        convert_group(store, cfg, "r2", parts[1:2], task=1)


def test_store_streams_in_chunks_and_refuses_another_version(store):
    body = _big_jsonl()[0]
    etag = store.put_bytes("x/big.jsonl", body)
    info, chunks = store.stream("x/big.jsonl", if_match=etag, chunk_bytes=1000)
    with chunks:
        got = list(chunks)
    assert (info.etag, info.size) == (etag, len(body))
    assert b"".join(got) == body and max(map(len, got)) == 1000
    info, chunks = store.stream("x/big.jsonl")
    with chunks:
        assert next(chunks) == body       # one chunk by default; left early, then closed
    assert store.get_bytes("x/big.jsonl", (10, 19), if_match=etag) == body[10:20]
    store.put_bytes("x/big.jsonl", body + b"\n")
    with pytest.raises(ObjectChanged, match="x/big.jsonl.*" + etag):
        store.stream("x/big.jsonl", if_match=etag)
    with pytest.raises(ObjectChanged, match="x/big.jsonl"):
        store.get_bytes("x/big.jsonl", (0, 9), if_match=etag)
