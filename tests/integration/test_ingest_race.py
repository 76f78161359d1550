"""Liveness under concurrency (issue 11, item 2): uploads each followed at once by its own
ingest. Each ingest detects every unclaimed upload, so the batches overlap; a loser of the
publish race gets ``PublishConflict`` (its ids were just published by another batch) and
``until_published`` goes back to detect, which now sees only what is still unpublished.

``make chaos`` races 5 uploads (the issue's bar), ``make test`` 3. Bar: every row of every
upload is published exactly once, each upload in exactly one
batch, no ingest left failed, no duplicate_id quarantine rows (an upload is never counted
twice). Real parts: moto S3 server, Spark Connect, great-expectations; the real stages as
the flow wires them, one process per ingest (its own Spark Connect session), as separate
flow runs are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from shardline.core.manifest import latest_manifest
from shardline.infra.demo_data import digits
from tests.integration.ingest_helpers import assert_exactly_once, dataset_config

IN = "incoming/digits/"
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.chaos


def race(store, spark_url: str, uploads: int, rows: int, tmp) -> list[dict]:
    """Start one process per upload; each uploads, waits for the go file, then ingests."""
    go = tmp / "go"
    procs = [subprocess.Popen(
        [sys.executable, "-m", "tests.integration.race_worker", store.settings.endpoint_url,
         store.bucket, spark_url, str(k), str(rows), str(go)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        for k in range(uploads)]
    time.sleep(3)                       # let every worker upload and import
    go.write_text("go")
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=560)
        assert p.returncode == 0, stderr[-3000:]
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_racing_ingests_of_different_uploads_converge(store, spark, tmp_path):
    cfg = dataset_config()
    uploads, rows = (5, 40) if os.environ.get("SHARDLINE_CHAOS_FULL") == "1" else (3, 40)
    results = race(store, spark.remote, uploads, rows, tmp_path)
    m = latest_manifest(store, cfg.prefix)
    assert m is not None
    assert_exactly_once(store, m, [d.id for d in digits(0, uploads * rows)], [])
    claims = Counter()
    for o in store.list(f"{cfg.prefix}/batches/"):
        for s in store.get_json(o.key)["sources"]:
            claims[s["key"]] += 1
    assert claims == Counter({f"{IN}u{k}.jsonl": 1 for k in range(uploads)})
    created = [r for r in results if r["created"]]
    assert 1 <= len(created) <= uploads and m.version == len(created)
    print("race:", sorted((r["k"], r["attempts"], r["version"]) for r in results))
