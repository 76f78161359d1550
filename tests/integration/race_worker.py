"""One racing ingest in its own process (as separate flow runs are): upload ``u<k>.jsonl``,
wait for the start file, ingest one batch through the ingest driver (a lost race retried
from detect); prints one JSON line."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import uuid
from pathlib import Path

from shardline.core.config import SparkSettings, StoreSettings
from shardline.core.store import ObjectStore
from shardline.infra.demo_data import digits, jsonl_bytes
from shardline.tasks.driver import Policy, run_ingest
from shardline.tasks.driver_stages import plain
from tests.integration.ingest_helpers import dataset_config


def main(endpoint: str, bucket: str, spark_url: str, k: int, rows: int, go: str) -> None:
    store = ObjectStore(StoreSettings(bucket=bucket, endpoint_url=endpoint,
                                      access_key="testing", secret_key="testing"))
    cfg = dataset_config()
    spark = SparkSettings(remote=spark_url)
    store.put_bytes(f"{cfg.incoming}u{k}.jsonl", jsonl_bytes(digits(k * rows, (k + 1) * rows)))
    deadline = time.monotonic() + 120
    while not Path(go).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    attempts = []
    stages = plain(store, cfg, spark)

    def detect():
        attempts.append(len(attempts))
        return stages.detect()

    done = run_ingest(dataclasses.replace(stages, detect=detect), uuid.uuid4().hex[:12],
                      Policy(max_batches=1, backoff_s=0.5, seed=k))
    pub = done[0].pub if done else None
    print(json.dumps({"k": k, "attempts": len(attempts),
                      "version": pub.version if pub else None,
                      "created": bool(pub and pub.created)}))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[2], int(a[3]), int(a[4]), a[5])
