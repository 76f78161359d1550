"""Flow-run names and tags that tell runs apart in the Prefect UI.

A run is named ``<flow>-<dataset>-v<version>-<trigger>-<id6>`` once its dataset version is
resolved (``train-digits-v3-event-1a2b3c``): the version actually used (never ``latest``),
what started it, and the first six hex digits of the flow run's id, so two runs never share
a name. Tags (added to whatever the deployment set): ``shardline``, the flow, the dataset
and ``trigger:<cli|event|schedule|manual>``.

The trigger is read from the flow run itself: no deployment -> ``cli`` (the CLI or a Python
call); created by an automation -> ``event``; ``auto_scheduled`` -> ``schedule``; any other
deployment run (UI, API, ``prefect deployment run``) -> ``manual``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from prefect.runtime import flow_run

log = logging.getLogger(__name__)


def short_id() -> str:
    rid = flow_run.id
    return (str(rid) if rid else uuid.uuid4().hex).replace("-", "")[:6]


def trigger_of(run: Any) -> str:
    """``cli`` / ``event`` / ``schedule`` / ``manual`` for a client ``FlowRun``."""
    if getattr(run, "deployment_id", None) is None:
        return "cli"
    created_by = getattr(run, "created_by", None)
    if created_by is not None and str(getattr(created_by, "type", "")).upper() == "AUTOMATION":
        return "event"
    if getattr(run, "auto_scheduled", False):
        return "schedule"
    return "manual"


def run_name(flow: str, dataset: str, version: int | str | None, trigger: str) -> str:
    v = f"v{version}" if isinstance(version, int) else (version or "none")
    return f"{flow}-{dataset}-{v}-{trigger}-{short_id()}"


def run_tags(flow: str, dataset: str, trigger: str) -> list[str]:
    return ["shardline", flow, dataset, f"trigger:{trigger}"]


def current_trigger() -> str:
    """This flow run's trigger (``cli`` outside a deployment or without an API)."""
    if not flow_run.id:
        return "cli"
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            return trigger_of(client.read_flow_run(flow_run.id))
    except Exception as exc:   # a label is not worth failing a run for
        log.warning("could not read flow run %s to tell its trigger: %s", flow_run.id, exc)
        return "cli" if flow_run.deployment_id is None else "manual"


def label_run(flow: str, dataset: str, version: int | str | None,
              trigger: str | None = None) -> str:
    """Rename this flow run and add its tags; returns the name."""
    trigger = trigger or current_trigger()
    name = run_name(flow, dataset, version, trigger)
    if not flow_run.id:
        return name
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        tags = sorted({*(flow_run.tags or []), *run_tags(flow, dataset, trigger)})
        client.update_flow_run(flow_run.id, name=name, tags=tags)
    return name
