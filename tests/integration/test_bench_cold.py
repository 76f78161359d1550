"""``python -m bench.loader_cold``: the cold-cache benchmark on its own, with the S3 server
pinned away from the benchmark. Timings are never asserted (the machine is shared): only
that the figures exist and are positive, and that pinning puts every thread where it says."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from shardline.bench.loader_cold import Pinning

ROOT = Path(__file__).resolve().parents[2]
TWO_CPUS = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")


def _threads_affinity(pid: int) -> set[frozenset[int]]:
    return {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}


@TWO_CPUS
def test_pinning_moves_every_thread_of_both_processes_and_back() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    code = "import threading, time; [threading.Thread(target=time.sleep, args=(60,), " \
           "daemon=True).start() for _ in range(3)]; time.sleep(60)"
    other = subprocess.Popen([sys.executable, "-c", code])
    stop = threading.Event()
    mine = threading.Thread(target=stop.wait, daemon=True)   # a thread that exists already
    mine.start()
    pinning = Pinning(other.pid)
    try:
        while len(os.listdir(f"/proc/{other.pid}/task")) < 4:
            threading.Event().wait(0.01)
        pinning.apply("on")
        assert _threads_affinity(other.pid) == {frozenset(cpus[-1:])}
        assert _threads_affinity(os.getpid()) == {frozenset(cpus[:-1])}
    finally:
        pinning.apply("off")
        stop.set()
        other.kill()
        other.wait(10)
    assert _threads_affinity(os.getpid()) == {frozenset(cpus)}


@TWO_CPUS
@pytest.mark.timeout(600)
def test_standalone_quick_run_reports_pinned_and_unpinned_ratios(tmp_path: Path) -> None:
    env = dict(os.environ, SHARDLINE_BENCH_DATA=str(tmp_path / "data"),
               SHARDLINE_BENCH_RESULTS=str(tmp_path / "results"))
    proc = subprocess.run([sys.executable, "-m", "shardline.bench.loader_cold", "--set", "S",
                           "--quick", "--pin", "both", "--previous", "--rounds", "1", "--json"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    assert r["part"] == "loader_cold" and r["set"] == "S" and set(r["pin"]) == {"off", "on"}
    assert json.loads((tmp_path / "results" / "loader-cold-S-quick.json").read_text()) == r
    for m in r["pin"].values():
        for key in ("raw_get_mb_per_s", "shardline_cold_mb_per_s", "shardline_vs_raw_get",
                    "previous_vs_raw_get", "first_batch_s", "epoch_s"):
            assert isinstance(m[key], float) and math.isfinite(m[key]) and m[key] > 0, key
        assert m["first_batch_s"] <= m["epoch_s"]
        assert m["fetch_threads"] >= 1 and m["shards"] >= 1
