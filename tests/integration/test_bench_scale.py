"""``shardline bench scale --quick --json``: every stage measured at every point of every
sweep, slopes fitted, classes given, bars computed. Times are never asserted (the machine
is shared); what is asserted are the counts of objects read and written, which do not
depend on the machine: a stage whose cost should follow the new data reads and writes the
same objects whatever the history, and a stage that reads the history reads one object per
published batch."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SHARDLINE = Path(sys.executable).with_name("shardline")
STAGES = ["detect", "convert", "dedupe", "validate", "publish", "read", "plan", "evaluate"]


def _n(r: dict, op: str, kind: str | None = None, field: str = "n") -> int:
    cells = r["counts"].get(op, {})
    return sum(v[field] for k, v in cells.items() if kind is None or k == kind)


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("scale")
    env = dict(os.environ, SHARDLINE_BENCH_DATA=str(tmp / "data"),
               SHARDLINE_BENCH_RESULTS=str(tmp / "results"))
    proc = subprocess.run([str(SHARDLINE), "bench", "scale", "--quick", "--json", "--no-report"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)                     # exactly one JSON object
    assert (tmp / "results" / "scale-quick.json").is_file()
    return out


@pytest.mark.timeout(900)
def test_every_stage_measured_and_fitted(result: dict) -> None:
    assert result["part"] == "scale" and result["quick"] is True
    sizes = result["sizes"]
    for sweep, key in (("history", "history"), ("rows", "rows"), ("classes", "classes")):
        runs = result[sweep]
        assert [r[key] for r in runs] == list(sizes[key])
        for r in runs:
            assert list(r["stages"]) == STAGES
            for s in r["stages"].values():
                assert all(_number(s[m]) for m in ("wall_s", "cpu_s", "stage_rss_mb"))
                assert s["peak_rss_mb"] > 0
        curves = result["curves"][sweep]
        assert list(curves) == STAGES
        for c in curves.values():
            assert c["x"] == [float(x) for x in sizes[key]]
            for m in ("wall_s", "cpu_s", "requests", "bytes", "stage_rss_mb"):
                k = c["slopes"][m]["loglog"]
                assert k is None or math.isfinite(k)
            assert c["slopes"]["wall_s"]["loglog"] is not None
    assert set(result["classification"]) == set(STAGES)
    assert {c["verdict"] for c in result["classification"].values()} <= {
        "O(history)", "O(new)", "O(new) + O(batches) references"}
    assert {b["name"] for b in result["bars"]} == {
        "scale.plan_100k_shards_wall_s", "scale.plan_100k_shards_cpu_s",
        "scale.dedupe_peak_rss_mb", "scale.doc_bytes_v12_vs_v2"}


@pytest.mark.timeout(900)
def test_new_data_stages_do_not_read_the_history(result: dict) -> None:
    first, last = result["history"][0], result["history"][-1]
    assert last["history"] > first["history"]
    a, b = first["stages"], last["stages"]
    # convert (its inner duplicate check aside) and validate touch the same objects
    for op in ("get", "head", "list", "put", "copy", "delete"):
        assert (_n(a["convert"], op) - _n(a["convert"], op, "id_index")
                == _n(b["convert"], op) - _n(b["convert"], op, "id_index")), op
    # validate reads the new batch's row files (staging) and nothing else
    assert _n(a["validate"], "get") == _n(b["validate"], "get") > 0
    assert _n(a["validate"], "get", "staging") == _n(a["validate"], "get")
    assert _n(a["validate"], "put") == _n(b["validate"], "put") == 1
    # publish writes the same objects (a checkpoint aside) of the same sizes; the id file is
    # a copy of the one convert's duplicate check staged
    for kind in ("batch_list", "claim"):
        assert _n(a["publish"], "put", kind) == _n(b["publish"], "put", kind) == 1, kind
        assert _n(a["publish"], "put", kind, "bytes") == pytest.approx(
            _n(b["publish"], "put", kind, "bytes"), rel=0.05), kind
    assert _n(a["publish"], "copy", "id_index") == _n(b["publish"], "copy", "id_index") == 1
    assert _n(a["publish"], "put", "id_index") == _n(b["publish"], "put", "id_index") == 0
    assert _n(a["publish"], "copy") == _n(b["publish"], "copy") > 0
    assert _n(b["publish"], "put", "checkpoint") <= 1
    cl = result["classification"]
    assert cl["validate"]["verdict"] == cl["convert"]["verdict"] == "O(new)"
    # and the stages that read every batch's data are named so
    for stage in ("dedupe", "plan", "evaluate"):
        assert cl[stage]["verdict"] == "O(history)", (stage, cl[stage])
    # detect after the previous ingest's detect (the ledger's steady state): the same LIST
    # pages at any history (one per 1,000 entries), at most 9 claim documents read (the
    # rest from one claims checkpoint), never a listing of versions/
    assert _n(a["detect"], "list") == _n(b["detect"], "list")
    assert _n(b["detect"], "get", "claim") <= 9 and _n(b["detect"], "get", "claims_checkpoint") <= 1
    assert _n(b["detect"], "list", "version_doc") == 0
    assert cl["detect"]["verdict"] != "O(history)", cl["detect"]


@pytest.mark.timeout(900)
def test_history_stages_read_one_object_per_published_batch(result: dict) -> None:
    for run in result["history"]:
        h, s = run["history"], run["stages"]
        assert s["dedupe"]["published_files"] == h
        assert _n(s["dedupe"], "get", "id_index") == h          # every published id file
        assert _n(s["plan"], "get", "batch_list") == h + 1      # every batch list, once
        assert s["plan"]["batches"] == h + 1
        assert _n(s["read"], "get", "version_doc") == 1
        assert _n(s["read"], "get", "latest_hint") <= 1          # the hint, never a listing
        assert _n(s["read"], "list", "version_doc") == 0
        assert _n(s["read"], "get", "batch_list") == 1          # only the new batch's list
        assert s["publish"]["version"] == h + 1
        assert s["evaluate"]["shards"] >= h + 1                 # a held-out shard per batch
    runs = result["history"]
    assert runs[-1]["stages"]["evaluate"]["heldout_rows"] > runs[0]["stages"]["evaluate"][
        "heldout_rows"]


@pytest.mark.timeout(900)
def test_synthetic_sizes(result: dict) -> None:
    syn, sizes = result["synthetic"], result["sizes"]
    assert [r["published_ids"] for r in syn["ids"]] == [
        f * sizes["ids_per_file"] for f in sizes["id_files"]]
    for r in syn["ids"]:
        assert r["found"] > 0                    # the duplicates planted among the new ids
        assert _n(r, "get") == r["published_ids"] // sizes["ids_per_file"]   # a GET per file
    batches, per = sizes["plan"]
    assert syn["plan"]["shards"] == batches * per and syn["plan"]["batches"] == batches
    docs = {int(k): v for k, v in syn["doc_bytes"].items()}
    assert len(docs) == batches and docs[12] <= 2 * docs[2]
