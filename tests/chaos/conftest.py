from __future__ import annotations

import pytest

from shardline.core.config import SparkSettings


@pytest.fixture(scope="session")
def spark(spark_remote: str) -> SparkSettings:
    """Ingest runs through the session's Spark Connect server, as on the embedded stack."""
    return SparkSettings(remote=spark_remote)
