from __future__ import annotations

from collections.abc import Iterator

import pytest

from shardline.infra import services
from tests.chaos.faults_proxy import FaultProxy


@pytest.fixture(scope="module")
def proxy(request: pytest.FixtureRequest, s3_server: services.Service) -> Iterator[FaultProxy]:
    """A fault proxy in front of the session's S3 server, one per module, faults off until a
    test sets them; its draws seeded by the module's ``PROXY_SEED`` (default 11)."""
    with FaultProxy(s3_server.url, p=0.0, seed=getattr(request.module, "PROXY_SEED", 11)) as px:
        yield px
