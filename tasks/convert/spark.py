"""Spark sessions: a Spark Connect client when ``SHARDLINE_SPARK_REMOTE`` is set (the embedded
stack runs a Connect server, so no ingest pays the JVM start), else an in-process local
session kept on loopback. Sessions are cached per setting for the life of the process."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from typing import Any
from urllib.parse import urlparse

from shardline.core.config import SparkSettings
from shardline.core.errors import ServiceUnavailable

log = logging.getLogger(__name__)
_lock = threading.Lock()
_sessions: dict[tuple[str | None, str], Any] = {}

# pyspark's default Connect retry policy waits at least 10 minutes for a lost server (15
# retries, back-off x4 up to 60 s). An ingest run should fail within about half a minute
# instead, naming the server: 50 ms, 0.2, 0.8, 3.2, 10, 10 s of back-off, ~25 s in all.
CONNECT_RETRIES = 6
CONNECT_MAX_BACKOFF_MS = 10_000
PROBE_TIMEOUT_S = 5.0


def get_session(settings: SparkSettings) -> Any:
    """A SparkSession (classic or Connect) for ``settings``."""
    key = (settings.remote, settings.master)
    with _lock:
        spark = _sessions.get(key)
        if spark is not None and _alive(spark):
            return spark
        spark = (_remote(settings.remote, settings.connect_url()) if settings.remote
                 else _local(settings.master))
        _sessions[key] = spark
        return spark


def close_sessions(remote: str | None = None) -> None:
    """Stop the cached sessions (those on ``remote`` only, when given).

    Call it before stopping a Spark Connect server this process used: an open Connect
    client sends clean-up calls at interpreter exit and retries them, with back-off, for
    minutes against a server that is gone."""
    with _lock:
        for key in [k for k in _sessions if remote is None or k[0] == remote]:
            spark = _sessions.pop(key)
            try:
                spark.stop()
            except Exception as exc:  # a lost server: nothing left to release
                log.debug("stopping Spark session %s: %s", key, exc)


def _alive(spark: Any) -> bool:
    try:
        spark.range(1).count()
    except Exception:  # a stopped session or a lost server: build a new one
        return False
    return True


def probe_connect(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail at once, naming the server, when nothing listens at a ``sc://host:port`` URL.

    Raises:
        ServiceUnavailable: the TCP connect was refused or timed out.
    """
    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 15002
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except OSError as exc:
        raise ServiceUnavailable(
            "Spark Connect", url, f"does not answer ({exc.strerror or exc})",
            "start it (`shardline up`) or point SHARDLINE_SPARK_REMOTE at a running "
            "Spark Connect server") from exc


def _remote(url: str, with_token: str | None = None) -> Any:
    """A Connect session on ``url``; ``with_token`` is the same URL with the endpoint's
    token (never logged)."""
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    probe_connect(url)
    log.info("using Spark Connect at %s", url)
    # create(), not getOrCreate(): getOrCreate() hands back the process's default session
    # whatever the URL (a second server, or a new one after a restart, was never reached).
    spark = SparkSession.builder.remote(with_token or url).create()
    spark.client.set_retry_policies([DefaultPolicy(max_retries=CONNECT_RETRIES,
                                                   max_backoff=CONNECT_MAX_BACKOFF_MS)])
    return spark


def _local(master: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable   # workers need this venv's pyarrow
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    log.info("starting an in-process Spark session (%s); set SHARDLINE_SPARK_REMOTE to use "
             "a Spark Connect server instead", master)
    return (
        SparkSession.builder.master(master)
        .appName("shardline-ingest")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2048")
        .getOrCreate()
    )


def default_parallelism(spark: Any) -> int:
    """Cores Spark can use; Connect has no SparkContext, so ask the server's config."""
    for key in ("spark.default.parallelism", "spark.master"):
        try:
            value = spark.conf.get(key, None)
        except Exception as exc:
            # A key the server does not know reads as None above; anything raised here is
            # the server itself failing (it went away): say so instead of guessing a default.
            raise ServiceUnavailable("Spark Connect", "this session's server",
                                     f"did not answer a read of {key} ({exc})",
                                     "check the Spark Connect server's log and restart it "
                                     "(`shardline up`)") from exc
        if key == "spark.default.parallelism" and value:
            return max(1, int(value))
        if key == "spark.master" and value and value.startswith("local["):
            inner = value[len("local["):].split(",")[0].rstrip("]")
            return os.cpu_count() or 1 if inner == "*" else max(1, int(inner))
    return os.cpu_count() or 1
