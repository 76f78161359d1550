"""The loader and GPU-feed benchmarks run on a GPU machine that carries only what they need
(docs/benchmarks.md, runbook): importing them must not load pyspark, prefect or
great-expectations (those stay lazy, inside the parts that use them), nor the peers'
packages (bench.peers imports them only when a peer is measured)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("module", ["shardline.bench.loader", "shardline.bench.gpu_feed",
                                    "shardline.bench.gpu_step", "shardline.bench.loader_ab"])
def test_bench_module_imports_no_spark_prefect_or_peers(module: str) -> None:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=180, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert module in loaded and "torch" in loaded        # the probe itself worked
    tops = {m.split(".")[0] for m in loaded}
    assert not tops & {"pyspark", "prefect", "great_expectations", "streaming", "litdata"}
