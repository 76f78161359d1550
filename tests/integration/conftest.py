from __future__ import annotations

from collections.abc import Iterator

import pytest

from shardline.infra import procs, services


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API URL of a real ``prefect server start`` (SQLite, 127.0.0.1) of one module's
    own: a module that needs a server to itself (deployments, automations)."""
    home = tmp_path_factory.mktemp("prefect")
    svc = services.start_prefect(procs.free_port(), home / "prefect", home / "logs")
    try:
        yield f"{svc.url}/api"
    finally:
        # Prefect keeps one EventsWorker per client type, bound to the API URL in force when
        # it started: in-process calls under temporary_settings leave it bound to this
        # server. Stop it with the server, or later tests' flow events go to a dead address
        # (test_ingest_flow's published event never arrived after test_deploy_datasets).
        from prefect.events.worker import EventsWorker

        EventsWorker.drain_all(timeout=10, at_exit=False)
        svc.stop()
