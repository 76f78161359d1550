"""Shared fixtures: real servers on 127.0.0.1, started once per session, always stopped.

- ``s3_server``: a moto S3 server (a real HTTP endpoint reached with boto3/s3fs/pyarrow).
- ``store``: an ObjectStore on a fresh bucket per test.
- ``spark_remote``: a Spark Connect server in local mode; ``sc://`` URL; ``spark``: the
  SparkSettings on it (ingest runs through it, as on the embedded stack).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

from shardline.core.config import SparkSettings, StoreSettings  # noqa: E402
from shardline.core.store import ObjectStore  # noqa: E402
from shardline.infra import procs, services  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run only when a ``-m`` expression names them (``make
    test-slow``, ``make wheels``): they repeat what faster tests already show (a benchmark's
    smoke run, a second stack) and would push ``make test`` past CI's 30 minutes."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: make test-slow (-m slow)")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def server_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("servers")


@pytest.fixture(scope="session")
def s3_server(server_dir: Path) -> Iterator[services.Service]:
    svc = services.start_moto(procs.free_port(), server_dir)
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture
def store_settings(s3_server: services.Service) -> StoreSettings:
    settings = StoreSettings(
        bucket=f"t-{uuid.uuid4().hex[:12]}", endpoint_url=s3_server.url,
        access_key="testing", secret_key="testing", region="us-east-1",
    )
    ObjectStore(settings).ensure_bucket()
    return settings


@pytest.fixture
def store(store_settings: StoreSettings) -> ObjectStore:
    return ObjectStore(store_settings)


@pytest.fixture(scope="session")
def spark_remote(server_dir: Path) -> Iterator[str]:
    from shardline.tasks.convert.spark import close_sessions

    svc = services.start_spark_connect(procs.free_port(), server_dir / "spark")
    try:
        yield svc.url
    finally:
        close_sessions(svc.url)   # else the client retries its exit clean-up for minutes
        svc.stop()


@pytest.fixture(scope="session")
def spark(spark_remote: str) -> SparkSettings:
    """Ingest runs through the session's Spark Connect server, as on the embedded stack."""
    return SparkSettings(remote=spark_remote)


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """A real Prefect server (SQLite, temporary) for the whole session; flows, artifacts and
    events go to it."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture
def stack_env(monkeypatch: pytest.MonkeyPatch, store_settings: StoreSettings) -> StoreSettings:
    """Environment that points the flows and the CLI at the test S3 server and bucket."""
    monkeypatch.setenv("SHARDLINE_BUCKET", store_settings.bucket)
    monkeypatch.setenv("SHARDLINE_S3_ENDPOINT_URL", store_settings.endpoint_url or "")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return store_settings
