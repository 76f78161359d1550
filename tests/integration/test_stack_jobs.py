"""Short-lived processes ``up`` starts beside the services (the Spark warm-up job) are
recorded by PID in ``stack.json`` and stopped by ``down`` when they still run.

No whole stack is needed: the warm-up job is started exactly as ``up`` starts it
(``stack_specs._warm_spark``), against a "Spark Connect server" that accepts connections
and never answers, so the job is certain to still run when ``down`` comes (a real warm-up
takes 2-5 s and has usually ended by then, which would prove nothing)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardline.infra import procs, stack
from shardline.infra.services import Service
from shardline.infra.stack_specs import _warm_spark
from shardline.infra.stack_state import StackConfig, StackState, load_state
from tests.integration.stack_helpers import process_args

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def silent_server() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


def warmup_processes(url: str) -> list[int]:
    """Live processes running the warm-up job against ``url``."""
    return [pid for pid, args in process_args()
            if "shardline.flows.warm_spark" in args and url in args and procs.alive(pid)]


def test_down_stops_a_warmup_job_that_still_runs(tmp_path: Path, silent_server: int) -> None:
    cfg = StackConfig(tmp_path / "home")
    cfg.home.mkdir()
    url = f"sc://127.0.0.1:{silent_server}"
    # stand-ins for the services (down stops them by PID too): one harmless process each
    stand_ins = {n: procs.start(["sleep", "120"], tmp_path / f"{n}.log")
                 for n in ("s3", "prefect", "spark")}
    state = StackState(str(cfg.home), "b", "now", {
        n: Service(n, p.pid, None, url if n == "spark" else "http://127.0.0.1:9",
                   str(tmp_path / f"{n}.log"), None, "SIGTERM", procs.start_ticks(p.pid))
        for n, p in stand_ins.items()}, phase="up")
    try:
        _warm_spark(cfg, state)                 # what `up` runs once the stack is up
        state.save()
        job = load_state(cfg.home).jobs["spark-warmup"]   # type: ignore[union-attr]
        time.sleep(1.0)
        assert job.alive() and warmup_processes(url) == [job.pid]
        result = stack.down(cfg.home, discard=True)
        assert "spark-warmup" in result.stop_seconds
        assert warmup_processes(url) == [], "down left the Spark warm-up job running"
        assert not procs.group_members(job.pid)
        assert all(not procs.alive(p.pid) for p in stand_ins.values())
    finally:
        for pid in [*warmup_processes(url), *(p.pid for p in stand_ins.values())]:
            procs.stop(pid, grace_s=2.0)        # left only when the test failed


def test_a_state_file_without_jobs_still_loads(tmp_path: Path) -> None:
    """stack.json written before jobs were recorded: read as no jobs."""
    svc = Service("x", 1, None, "http://127.0.0.1:9", "log")
    state = StackState(str(tmp_path), "b", "now", {n: svc for n in ("s3", "prefect", "spark")})
    data = state.to_json()
    assert data["jobs"] == {}
    del data["jobs"]
    assert StackState.from_json(data).jobs == {}
