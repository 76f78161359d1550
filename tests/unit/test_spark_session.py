"""A Spark Connect server that is down fails an ingest at once, naming the server
(it used to sit through pyspark's ten-minute retry policy)."""

from __future__ import annotations

import time

import pytest

from shardline.core.config import SparkSettings
from shardline.core.errors import ServiceUnavailable
from shardline.infra import procs
from shardline.tasks.convert import spark as spark_sessions


def test_a_dead_connect_url_fails_fast_and_names_the_server() -> None:
    url = f"sc://127.0.0.1:{procs.free_port()}"          # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ServiceUnavailable) as err:
        spark_sessions.get_session(SparkSettings(remote=url))
    elapsed = time.monotonic() - t0
    assert url in str(err.value) and "SHARDLINE_SPARK_REMOTE" in str(err.value)
    assert elapsed < spark_sessions.PROBE_TIMEOUT_S * 3   # a refused connect, not a retry loop


def test_the_retry_budget_is_bounded() -> None:
    # pyspark's DefaultPolicy sleeps min(initial * mult**i, max_backoff) per retry
    waits = [min(50 * 4.0 ** i, spark_sessions.CONNECT_MAX_BACKOFF_MS)
             for i in range(spark_sessions.CONNECT_RETRIES)]
    assert sum(waits) / 1000 < 30
