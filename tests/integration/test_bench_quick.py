"""``shardline bench loader --quick --json`` on tiny sets: one JSON object on stdout with the
medians, the ratios the bars are checked with, and the machine. Timings are never asserted
(the machine is shared); only that every figure is a positive number."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SHARDLINE = Path(sys.executable).with_name("shardline")
RATIOS = ("S.shardline_vs_raw_arrow", "S.shardline_vs_png_dataloader",
          "L.shardline_vs_raw_arrow", "S.shardline_lz4_vs_raw_arrow")


# Contenders whose packages come from the `bench` extra (`make bench` installs it; `make test`
# does not): required only where their package is importable.
OPTIONAL_PRESENT = {name for name, pkg in (("webdataset", "webdataset"),
                                           ("hf_datasets", "datasets"))
                    if importlib.util.find_spec(pkg) is not None}
# Peers (bench.peers) run where their package imports; otherwise the result says why not.
PEERS = {"mds": "streaming", "litdata": "litdata"}


def _get(obj: dict, dotted: str) -> object:
    for part in dotted.split("."):
        obj = obj[part]
    return obj


def _positive(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_loader_quick_json_has_positive_medians_and_ratios(tmp_path: Path) -> None:
    env = dict(os.environ, SHARDLINE_BENCH_DATA=str(tmp_path / "data"),
               SHARDLINE_BENCH_RESULTS=str(tmp_path / "results"))
    proc = subprocess.run([str(SHARDLINE), "bench", "loader", "--quick", "--json",
                           "--scale", "0.1", "--rounds", "2"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)                    # exactly one JSON object
    assert result["part"] == "loader" and result["quick"] is True
    for key in RATIOS:
        assert _positive(_get(result, key)), (key, _get(result, key))
    for name in ("S", "L"):
        contenders = result[name]["contenders"]
        assert {"shardline", "raw_arrow", "numpy_ram", "png_dataloader_w0",
                "png_dataloader_w2", "parquet", "memcpy"} | OPTIONAL_PRESENT <= set(contenders)
        for c in contenders.values():
            assert _positive(c["samples_per_s"]) and _positive(c["vs_raw_arrow"])
            assert len(c["rounds"]) == 2
    for name, module in PEERS.items():
        if name in result["missing"]:              # cannot run here: the import error
            assert f"import {module}:" in result["missing"][name]
        else:
            assert name in result["S"]["contenders"] and name in result["L"]["contenders"]
    ran = set(PEERS) - set(result["missing"])
    for name in ("S", "L"):
        assert _positive(result[name]["shardline_vs_best_peer"]) == bool(ran)
    assert _positive(result["cold"]["S"]["shardline_vs_raw_get"])
    assert {b["name"] for b in result["bars"]} >= {"S.shardline_vs_raw_arrow",
                                                   "L.shardline_vs_raw_arrow",
                                                   "S.shardline_vs_png_dataloader",
                                                   "S.shardline_vs_best_peer",
                                                   "L.shardline_vs_best_peer"}
    m = result["machine"]
    assert m["cores"] >= 1 and m["memory_gb"] > 0 and "gpu" in m
    assert (tmp_path / "results" / "loader-quick.json").is_file()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pipeline_bench_times_every_hop_in_order(tmp_path: Path) -> None:
    """One small drop through the real embedded stack: every hop is timed, the points of
    the timeline come in causal order, and the version holds the drop's rows."""
    env = dict(os.environ, SHARDLINE_BENCH_RESULTS=str(tmp_path / "results"))
    proc = subprocess.run([str(SHARDLINE), "bench", "pipeline", "--rounds", "1", "--json",
                           "--drop-mb", "0.5", "--debounce", "1"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["part"] == "pipeline" and len(result["rounds"]) == 1
    r = result["rounds"][0]
    assert r["rows_published"] == r["rows"] > 0 and r["bytes"] >= 0.5e6
    t = r["timeline"]
    order = ["put_start", "uploaded", "event_received", "ingest_created", "ingest_started",
             "version_created", "train_created", "train_started", "train_finished"]
    assert all(_positive(t[k]) for k in [*order, "ingest_due"]), t
    # Prefect's clock and ours are the same machine's; allow 50 ms of timestamp rounding
    assert all(t[a] <= t[b] + 0.05 for a, b in zip(order, order[1:], strict=False)), t
    # the trigger schedules the run 1 s (the debounce) after the event; it starts no earlier
    # than Prefect allows: the server rounds the wait for the due time to whole seconds
    assert t["ingest_due"] - t["event_received"] >= 0.9
    assert t["ingest_started"] >= t["ingest_due"] - 0.5
    # the state history and task runs give every point of the hop table, in causal order
    chain = ["ingest_created", "ingest_pending", "ingest_running", "settle_end",
             "detect_end", "convert_end", "validate_end", "publish_end", "version_published",
             "train_created", "train_pending", "train_running"]
    assert all(t[a] <= t[b] + 0.05 for a, b in zip(chain, chain[1:], strict=False)), t
    assert set(r["hops"]) >= set(r["hops_s"]) and all(
        h["stack_cpu_s"] is None or h["stack_cpu_s"] >= 0 for h in r["hops"].values())
    assert all(isinstance(v, float) and v > -0.05 for v in r["hops_s"].values()), r["hops_s"]
    assert {"convert", "validate", "publish"} <= set(r["ingest_tasks_s"])
    assert {b["name"] for b in result["bars"]} == {
        "pipeline.upload_to_train_started_s.worst",
        "pipeline.upload_to_train_started_s.median_warm"}
    assert (tmp_path / "results" / "pipeline.json").is_file()
