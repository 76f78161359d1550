"""Kills and event faults on the embedded stack (issue 11, test plan): a real Prefect server
(PostgreSQL), its process worker, the deployments from prefect.yaml, moto (S3 + SQS
notifications), Spark Connect; the ingest and train flows run as the worker's subprocesses.

- the flow-run process of an ingest is SIGKILLed mid-run: Prefect marks the run CRASHED and
  the next run (the nightly deployment, run by hand) publishes every row exactly once;
- the worker is SIGKILLed mid-ingest (its flow-run process lives on) and restarted: the run
  finishes or crashes, and nothing is published twice; a run the killed worker had taken
  (PENDING, never started) is rescheduled by the deploy's automation after
  ``PENDING_TIMEOUT_S`` and run by the new worker;
- upload events posted twice (same event id; a new id for the same object), out of order,
  and one upload with no event at all: no duplicate version, and the nightly deployment
  publishes what the events missed.

After each case :mod:`tests.chaos.invariants` checks the dataset (and at the end the model
registry). The stack is stopped by PID (``stack.down``) whatever happens. ``make chaos``
only: the stack and its flow runs take minutes on a small machine.
"""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from shardline.core.manifest import list_versions
from shardline.infra import demo_data
from shardline.infra import worker as worker_mod
from tests.chaos.invariants import Expected, check_dataset, check_models
from tests.integration.stack_helpers import (
    TERMINAL,
    deployed_stack,
    in_flight,
    notifications_off,
    post_created_event,
    run_nightly_now,
    runs,
    wait,
)

FULL = os.environ.get("SHARDLINE_CHAOS_FULL") == "1"
SEED = int(os.environ.get("SHARDLINE_SOAK_SEED", "11"))
PENDING_TIMEOUT_S = 20   # the deploy's Pending automation (default 600 s in production)
pytestmark = [pytest.mark.chaos,
              pytest.mark.skipif(not FULL, reason="make chaos (SHARDLINE_CHAOS_FULL=1)")]


@pytest.fixture(scope="module")
def st(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with deployed_stack(tmp_path_factory.mktemp("chaos-stack"), "chaos", epochs=1,
                        debounce_seconds=3, pending_timeout_seconds=PENDING_TIMEOUT_S) as h:
        yield {**h, "expected": Expected(), "next": [0], "log": []}


def upload(st: dict[str, Any], name: str, n: int) -> str:
    """``n`` new digits as JSONL under the incoming prefix; recorded as expected."""
    start = st["next"][0]
    st["next"][0] += n
    items = demo_data.digits(start % 1500, start % 1500 + n, prefix=f"{name}-")
    key = f"{st['cfg'].dataset.incoming}{name}/digits.jsonl"
    st["store"].put_bytes(key, demo_data.jsonl_bytes(items))
    st["expected"].add(key, {d.id for d in items})
    return key


def settle(st: dict[str, Any], timeout_s: float = 420) -> None:
    """Wait until no ingest or train run is in flight, PENDING ones included (nightly runs
    hours ahead excluded)."""
    api = st["api"]
    time.sleep(5)            # a trigger's debounce window and the worker's poll
    wait("no run in flight", lambda: not [r for f in ("ingest", "train")
                                          for r in in_flight(api, f)], timeout_s)


def take_like_a_worker(st: dict[str, Any], deployment: str) -> str:
    """A run of ``deployment`` moved SCHEDULED -> PENDING as a worker does when it takes a
    run, and never started: what a worker killed while submitting leaves behind (seen in
    this test by chance before; made here so that every run checks it)."""
    api = st["api"]
    dep = httpx.get(f"{api}/deployments/name/{deployment}", timeout=10).json()["id"]
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()  # no worker polls it first
    run = httpx.post(f"{api}/deployments/{dep}/create_flow_run", json={"state": {
        "type": "SCHEDULED", "state_details": {"scheduled_time": later}}},
        timeout=10).json()["id"]
    got = httpx.post(f"{api}/flow_runs/{run}/set_state",
                     json={"state": {"type": "PENDING"}, "force": False}, timeout=10).json()
    assert got["status"] == "ACCEPT", got
    return str(run)


def states_of(st: dict[str, Any], run_id: str) -> list[str]:
    """The run's state names, oldest first."""
    hist = httpx.get(f"{st['api']}/flow_run_states/", params={"flow_run_id": run_id},
                     timeout=10).json()
    return [h["name"] for h in sorted(hist, key=lambda h: h["timestamp"])]


def nightly(st: dict[str, Any]) -> dict[str, Any]:
    """Run the nightly ingest deployment now (as its schedule would) and wait for it."""
    before = {r["id"] for r in runs(st["api"], "ingest")}
    run_nightly_now(st["env"], st["api"], "chaos")
    soon = datetime.now(UTC).timestamp() + 600

    def done() -> list[dict[str, Any]]:
        return [r for r in runs(st["api"], "ingest") if r["id"] not in before and
                r["state_type"] in TERMINAL and
                datetime.fromisoformat(r["expected_start_time"]).timestamp() < soon]
    return wait("the nightly run", done, 420)[0]


def running_ingest(st: dict[str, Any]) -> dict[str, Any]:
    return wait("a running ingest", lambda: [r for r in runs(st["api"], "ingest")
                                             if r["state_type"] == "RUNNING"], 300)[0]


def flow_run_pid(run_id: str) -> int | None:
    """The process whose environment names this flow run (the worker's subprocess)."""
    needle = f"PREFECT__FLOW_RUN_ID={run_id}".encode()
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if needle in (p / "environ").read_bytes().split(b"\0"):
                    return int(p.name)
            except OSError:
                continue
    return None


def state_of(st: dict[str, Any], run_id: str) -> str:
    return str(httpx.get(f"{st['api']}/flow_runs/{run_id}", timeout=10).json()["state_type"])


def check(st: dict[str, Any], what: str, **extra: Any) -> None:
    ds = check_dataset(st["store"], st["cfg"].dataset, st["expected"])
    row = {"case": what, "versions": ds.versions, "published": ds.published, **extra}
    st["log"].append(row)
    print("chaos-stack:", row)


def test_a_killed_flow_run_process_crashes_the_run_and_the_next_run_publishes_once(st):
    rng = random.Random(SEED)
    upload(st, "k1", 400)
    run = running_ingest(st)
    time.sleep(rng.uniform(2.0, 10.0))
    pid = wait("the flow run's process", lambda: flow_run_pid(run["id"]), 60)
    os.kill(pid, signal.SIGKILL)
    final = wait("the killed run's final state", lambda: (s := state_of(st, run["id"])) in
                 TERMINAL and s, 180)
    settle(st)
    versions_before = list_versions(st["store"], st["cfg"].dataset.prefix)
    follow = nightly(st)
    settle(st)
    check(st, "flow-run process SIGKILLed", killed_run_state=final,
          versions_at_kill=versions_before, nightly=follow["state_type"])
    assert final == "CRASHED", f"the killed run ended {final}, not CRASHED"
    assert follow["state_type"] == "COMPLETED"


def test_a_killed_worker_mid_ingest_publishes_once(st):
    rng = random.Random(SEED + 1)
    state, cfg = st["state"], st["stack_cfg"]
    upload(st, "k2", 300)
    run = running_ingest(st)
    time.sleep(rng.uniform(1.0, 8.0))
    old = state.services["worker"]
    taken = take_like_a_worker(st, "ingest/chaos-nightly")
    os.kill(old.pid, signal.SIGKILL)
    launch = worker_mod.launch_worker(cfg)     # a new worker, recorded so down stops it
    state.services["worker"] = launch.service
    state.save()
    wait("the new worker", lambda: launch.poll(120), 130)
    final = wait("the run's final state", lambda: (s := state_of(st, run["id"])) in TERMINAL
                 and s, 420)
    # the run the killed worker had taken: rescheduled after PENDING_TIMEOUT_S by the
    # automation, then run by the new worker (without the automation it stays PENDING)
    taken_final = wait("the taken run to be rescheduled and run", lambda: (
        s := state_of(st, taken)) in TERMINAL and s, PENDING_TIMEOUT_S + 300)
    settle(st)               # any other run the kill left PENDING is rescheduled as well
    follow = nightly(st)
    settle(st)
    check(st, "worker SIGKILLed mid-ingest", run_state=final, nightly=follow["state_type"],
          taken_run=states_of(st, taken))
    assert final in ("COMPLETED", "CRASHED")
    assert taken_final == "COMPLETED", states_of(st, taken)
    assert states_of(st, taken)[1:3] == ["Pending", "Scheduled"], states_of(st, taken)
    assert follow["state_type"] == "COMPLETED"


def test_duplicate_reordered_and_dropped_events(st):
    store, prefix = st["store"], st["cfg"].dataset.prefix
    with notifications_off(store):
        v0 = list_versions(store, prefix)
        a, b = upload(st, "e-a", 150), upload(st, "e-b", 150)
        eid = str(uuid.uuid4())
        def post(key: str, eid: str) -> None:
            post_created_event(st["api"], store, key, eid)
        post(b, eid)                             # b's event before a's: out of order
        post(a, str(uuid.uuid4()))
        post(b, eid)                             # the same event again (same id)
        post(b, str(uuid.uuid4()))               # the same upload under a new event id
        settle(st)
        v1 = list_versions(store, prefix)
        check(st, "events: out of order + duplicates", versions=v1)
        assert len(v1) == len(v0) + 1, f"one version for one burst of events, got {v1}"
        n_runs = len(runs(st["api"], "ingest"))
        post(a, str(uuid.uuid4()))               # a late duplicate, after its ingest ran
        wait("the late duplicate's run", lambda: len(runs(st["api"], "ingest")) > n_runs, 120)
        settle(st)
        assert list_versions(store, prefix) == v1, "a late duplicate event made a version"
        late = max(runs(st["api"], "ingest"), key=lambda r: r["created"])
        assert late["state_type"] == "COMPLETED" and "nothing-new" in late["name"], late["name"]
        upload(st, "e-dropped", 120)            # its event is lost
        time.sleep(8)
        assert list_versions(store, prefix) == v1          # no event, no ingest
    follow = nightly(st)
    settle(st)
    check(st, "event dropped, nightly run", nightly=follow["state_type"])
    assert follow["state_type"] == "COMPLETED"
    assert list_versions(store, prefix) == [*v1, v1[-1] + 1]
    models = check_models(store, st["cfg"].dataset.name, st["cfg"].train.model)
    print("chaos-stack: models", models, "ingest runs",
          sorted((r["name"], r["state_type"]) for r in runs(st["api"], "ingest")))


def restart(st: dict[str, Any], name: str) -> None:
    """Start service ``name`` again as ``up`` would, recorded in the state so that
    ``down`` stops the new process by its PID."""
    from shardline.infra.stack_specs import service_specs

    state, cfg = st["state"], st["stack_cfg"]
    spec = next(s for s in service_specs(cfg) if s.name == name)
    launch = spec.launch(cfg, {n: state.services[n] for n in spec.after})
    state.services[name] = launch.service
    state.save()
    wait(f"{name} again", lambda: launch.poll(spec.timeout_s), spec.timeout_s + 10)


def test_a_killed_prefect_server_mid_ingest_publishes_once(st):
    """SIGKILL the Prefect server while an ingest runs, start it again after a few seconds
    (PostgreSQL keeps its state): the run finishes, or ends crashed/failed and the nightly
    run publishes; either way every row is published once."""
    rng = random.Random(SEED + 2)
    upload(st, "k3", 300)
    run = running_ingest(st)
    time.sleep(rng.uniform(1.0, 6.0))
    server = st["state"].services["prefect"]
    os.kill(server.pid, signal.SIGKILL)
    down_s = rng.uniform(3.0, 10.0)
    time.sleep(down_s)
    restart(st, "prefect")
    final = wait("the run's final state", lambda: (s := state_of(st, run["id"])) in TERMINAL
                 and s, 420)
    settle(st)
    follow = nightly(st)
    settle(st)
    check(st, "Prefect server SIGKILLed mid-ingest", server_down_s=round(down_s, 1),
          run_state=final, nightly=follow["state_type"])
    assert follow["state_type"] == "COMPLETED"
