"""One ingest in its own process, for kill -9 tests: prints ``go`` (flushed) just before the
ingest starts, then one JSON line with the outcome."""

from __future__ import annotations

import json
import sys

from shardline.core.config import SparkSettings, StoreSettings
from shardline.core.store import ObjectStore
from tests.integration.ingest_helpers import dataset_config, run_pipeline


def main(endpoint: str, bucket: str, spark_url: str) -> None:
    store = ObjectStore(StoreSettings(bucket=bucket, endpoint_url=endpoint,
                                      access_key="testing", secret_key="testing"))
    print("go", flush=True)
    pub = run_pipeline(store, dataset_config(), SparkSettings(remote=spark_url))
    print(json.dumps({"version": pub.version if pub else None}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
