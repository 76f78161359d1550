"""Prefect automations that ``shardline deploy`` creates beside the deployments.

**Runs stuck in Pending.** A worker takes a scheduled run by moving it to PENDING, then
starts its process (or pod), which moves it to RUNNING. A worker killed between the two
leaves the run PENDING for good: workers poll only SCHEDULED runs, and Prefect crashes a
run only when it can see its process die. The automation below is the server-side answer,
built like Prefect's own "zombie flow run" automation: a *proactive* event trigger per flow
run (``for_each`` its resource id) starts its clock on ``prefect.flow-run.Pending`` and
expects any later state within ``pending_timeout_s``; when none came, it moves the run back
to SCHEDULED, so a live worker runs it. PENDING -> SCHEDULED releases the deployment
concurrency slot the run held. Re-running is safe: ingest is idempotent (claims and
conditional manifest writes) and training resumes from the registry.

The timeout must exceed the longest legitimate start: a process worker starts a run in
seconds, a Kubernetes pool may wait minutes for a GPU node (``SHARDLINE_PENDING_TIMEOUT``,
default 600 s). A run rescheduled while its process was in fact still starting would run
twice; that is harmless for the same reasons, only wasteful.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

log = logging.getLogger(__name__)

PENDING_AUTOMATION = "shardline: reschedule runs stuck in Pending"
# every state name a flow run can take after Pending, except Pending's own sub-states
# (Submitting, InfrastructurePending): a run stuck in those is stuck all the same
LEFT_PENDING = ("Running", "Rerunning", "Retrying", "Completed", "Failed", "Crashed",
                "Cancelled", "Cancelling", "Scheduled", "AwaitingRetry",
                "AwaitingConcurrencySlot", "Late", "Paused", "Suspended")


def pending_automation(timeout_s: int, tag: str = "shardline") -> Any:
    """The automation (a ``prefect.events.schemas.automations.AutomationCore``) that moves
    flow runs tagged ``tag`` back to SCHEDULED after ``timeout_s`` seconds in PENDING."""
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    if timeout_s < 1:
        raise ValueError(f"the Pending timeout must be at least 1 s, got {timeout_s}")
    return AutomationCore(
        name=PENDING_AUTOMATION,
        description=(f"A flow run tagged {tag!r} still PENDING {timeout_s} s after a worker "
                     "took it (the worker died before starting it) is moved back to "
                     "SCHEDULED, so a live worker runs it. Created by `shardline deploy`."),
        enabled=True,
        trigger=EventTrigger(
            match=ResourceSpecification({"prefect.resource.id": "prefect.flow-run.*"}),
            match_related=ResourceSpecification({"prefect.resource.role": "tag",
                                                 "prefect.resource.id": f"prefect.tag.{tag}"}),
            after={"prefect.flow-run.Pending"},
            expect={f"prefect.flow-run.{name}" for name in LEFT_PENDING},
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=timeout_s),
        ),
        actions=[ChangeFlowRunState(
            state=StateType.SCHEDULED, name="Scheduled", force=False,
            message=(f"shardline: PENDING for {timeout_s} s without starting (the worker "
                     "that took it is gone); rescheduled for a live worker"))],
    )


def ensure_pending_automation(client: Any, timeout_s: int, tag: str = "shardline") -> str:
    """Create the automation on ``client``'s server, or update it in place (re-deploying
    never duplicates it). Returns its id."""
    automation = pending_automation(timeout_s, tag)
    found = client.read_automations_by_name(PENDING_AUTOMATION)
    if not found:
        return str(client.create_automation(automation))
    client.update_automation(found[0].id, automation)
    for extra in found[1:]:     # left by an older deploy: keep one
        client.delete_automation(extra.id)
    log.info("updated automation %r (%s s)", PENDING_AUTOMATION, timeout_s)
    return str(found[0].id)
