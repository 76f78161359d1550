"""The automation that reschedules flow runs stuck in PENDING (``infra/automations.py``),
on a real ``prefect server start`` (SQLite, 127.0.0.1, stopped by PID).

A run "taken by a worker that then died" is made exactly as a worker takes one: the run is
moved SCHEDULED -> PENDING through the API, and nothing ever starts it. The automation must
move it back to SCHEDULED after the timeout; a run that starts in time, and a run of
someone else's (no ``shardline`` tag), are left alone. Without the automation the stuck run
stays PENDING and the test fails.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import httpx

from shardline.infra.automations import PENDING_AUTOMATION, ensure_pending_automation

TIMEOUT_S = 10


def sync_client(api: str) -> Any:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api}):
        return get_client(sync_client=True)


def new_run(api: str, flow_id: str, tags: list[str]) -> str:
    r = httpx.post(f"{api}/flow_runs/", json={"flow_id": flow_id, "tags": tags,
                                              "state": {"type": "SCHEDULED"}}, timeout=10)
    r.raise_for_status()
    return str(r.json()["id"])


def set_state(api: str, run: str, kind: str) -> None:
    r = httpx.post(f"{api}/flow_runs/{run}/set_state",
                   json={"state": {"type": kind}, "force": False}, timeout=10)
    r.raise_for_status()
    assert r.json()["status"] == "ACCEPT", r.json()


def state(api: str, run: str) -> tuple[str, str, str | None]:
    s = httpx.get(f"{api}/flow_runs/{run}", timeout=10).json()["state"]
    return s["type"], s["name"], s.get("message")


def test_a_run_left_pending_is_rescheduled_and_others_are_left_alone(api: str) -> None:
    with sync_client(api) as client:
        first = ensure_pending_automation(client, TIMEOUT_S)
        again = ensure_pending_automation(client, TIMEOUT_S)   # a re-deploy
        assert first == again
        assert len(client.read_automations_by_name(PENDING_AUTOMATION)) == 1
    time.sleep(2)   # the triggers service loads automations on change events
    flow = httpx.post(f"{api}/flows/", json={"name": "pending-check"}, timeout=10).json()["id"]
    stuck = new_run(api, flow, ["shardline", "ingest"])
    started = new_run(api, flow, ["shardline", "train"])
    foreign = new_run(api, flow, ["other"])
    for run in (stuck, started, foreign):
        set_state(api, run, "PENDING")        # what a worker does when it takes a run
    set_state(api, started, "RUNNING")        # this one's process started in time
    t0 = time.monotonic()
    while state(api, stuck)[0] == "PENDING" and time.monotonic() - t0 < 120:
        time.sleep(1)
    waited = time.monotonic() - t0
    kind, name, message = state(api, stuck)
    print(f"pending-automation: stuck run {kind}/{name} after {waited:.1f}s "
          f"(timeout {TIMEOUT_S}s): {message}")
    assert (kind, name) == ("SCHEDULED", "Scheduled"), (kind, name, message)
    assert "shardline" in (message or "")
    history = httpx.get(f"{api}/flow_run_states/", params={"flow_run_id": stuck},
                        timeout=10).json()
    at = {kind: max(datetime.fromisoformat(h["timestamp"]) for h in history
                    if h["type"] == kind) for kind in ("PENDING", "SCHEDULED")}
    assert (at["SCHEDULED"] - at["PENDING"]).total_seconds() >= TIMEOUT_S, history
    time.sleep(TIMEOUT_S)           # one more window: the others are still where they were
    assert state(api, started)[0] == "RUNNING"
    assert state(api, foreign)[0] == "PENDING"
    assert state(api, stuck)[0] == "SCHEDULED"   # not moved again while nobody took it
