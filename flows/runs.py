"""Flow-run names, tags and final states that tell runs apart in the Prefect UI.

Every run of a dataset is named ``<flow>-<dataset>-<outcome>-<trigger>-<id6>`` and tagged
``shardline``, the flow, the dataset and ``trigger:<cli|event|schedule|manual>`` (added to
whatever the deployment set) from its start, whatever becomes of it, so filtering the runs
list by the dataset's tag shows its failures too. The outcome is ``running`` until it is
known: the version actually used (``v3``, never ``latest``), ``nothing-new``, or ``failed``
(:func:`mark_failed`, the flows' ``on_failure``/``on_crashed`` hook); the six hex digits of
the flow run's id keep names unique. A training run whose model the gate refused ends in a
Completed state named ``Refused`` with the gate's reason as its message, and carries the tag
``gate:refused`` (``gate:promoted`` otherwise; :func:`gate_outcome`).

The trigger is read from the flow run itself: no deployment -> ``cli`` (the CLI or a Python
call); created by an automation -> ``event``; ``auto_scheduled`` -> ``schedule``; any other
deployment run (UI, API, ``prefect deployment run``) -> ``manual``.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from prefect.runtime import flow_run

if TYPE_CHECKING:
    from prefect import Flow
    from prefect.client.schemas.objects import FlowRun
    from prefect.states import State

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


def run_name(flow: str, dataset: str, version: int | str | None, trigger: str,
             rid: str | None = None) -> str:
    v = f"v{version}" if isinstance(version, int) else (version or "none")
    return f"{flow}-{dataset}-{v}-{trigger}-{rid or short_id()}"


def run_tags(flow: str, dataset: str, trigger: str) -> list[str]:
    return ["shardline", flow, dataset, f"trigger:{trigger}"]


RUNNING, FAILED = "running", "failed"


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
              trigger: str | None = None, extra_tags: tuple[str, ...] = ()) -> str:
    """Rename this flow run and add its tags; returns the name."""
    trigger = trigger or current_trigger()
    name = run_name(flow, dataset, version, trigger)
    if not flow_run.id:
        return name
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        tags = sorted({*(flow_run.tags or []), *run_tags(flow, dataset, trigger), *extra_tags})
        client.update_flow_run(flow_run.id, name=name, tags=tags)
    return name


def start_run(flow: str, dataset: str) -> str:
    """Name and tag this run as the dataset's at its start (outcome ``running``), so a run
    that fails later is found under the dataset's tag all the same; returns the trigger."""
    trigger = current_trigger()
    try:
        label_run(flow, dataset, RUNNING, trigger)
    except Exception as exc:   # a label is not worth failing a run for
        log.warning("could not label flow run %s: %s", flow_run.id, exc)
    return trigger


def failed_name(name: str, flow: str, dataset: str, trigger: str, rid: str) -> str:
    """The name a failed run ends with, ``<flow>-<dataset>-<outcome>-<trigger>-<id6>``:
    outcome ``failed``, or ``v3-failed`` when it had got as far as naming its version; a
    run that failed before it was labelled (its placeholder name) gets the pattern too."""
    head, tail = f"{flow}-{dataset}-", f"-{trigger}-{rid}"
    if name.startswith(head) and name.endswith(tail) and len(name) > len(head) + len(tail):
        outcome = name[len(head):-len(tail)]
        if outcome == RUNNING:
            outcome = FAILED
        elif not outcome.endswith(f"-{FAILED}") and outcome != FAILED:
            outcome = f"{outcome}-{FAILED}"
        return f"{head}{outcome}{tail}"
    return run_name(flow, dataset, FAILED, trigger, rid)


def mark_failed(flow: Flow[..., Any], flow_run: FlowRun, state: State[Any]) -> None:
    """``on_failure``/``on_crashed`` hook: rename the run ``...-failed-...`` and make sure it
    carries the dataset's tags (a run can fail before it read its config)."""
    from prefect.client.orchestration import get_client

    from shardline.flows.config_source import dataset_name

    flow_name = str(flow.name)
    try:
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(flow_run.id)    # as renamed and tagged meanwhile
            tags = list(run.tags or [])
            trigger = trigger_of(run)
            known = [t for t in tags if t not in ("shardline", flow_name) and ":" not in t]
            dataset = (known[0] if len(known) == 1 else
                       dataset_name((run.parameters or {}).get("config")))
            client.update_flow_run(
                run.id, name=failed_name(str(run.name), flow_name, dataset, trigger,
                                         run.id.hex[:6]),
                tags=sorted({*tags, *run_tags(flow_name, dataset, trigger)}))
    except Exception as exc:   # the run has failed already; the hook must not add to it
        log.warning("could not mark flow run %s failed: %s", flow_run.id, exc)


def gate_outcome(result: dict[str, Any], promoted: bool, decision: str) -> Any:
    """What the train flow returns: ``result`` as is for a promoted model; for a refused
    one a Completed state named ``Refused`` whose message is the gate's reason (the runs
    list shows it), with ``result`` as its data. Tags the run ``gate:<promoted|refused>``."""
    verdict = "promoted" if promoted else "refused"
    if flow_run.id:
        try:
            from prefect.client.orchestration import get_client

            with get_client(sync_client=True) as client:
                client.update_flow_run(flow_run.id, tags=sorted(
                    {*(client.read_flow_run(flow_run.id).tags or []), f"gate:{verdict}"}))
        except Exception as exc:   # a label is not worth failing a run for
            log.warning("could not tag flow run %s: %s", flow_run.id, exc)
    if promoted:
        return result
    from prefect.states import Completed

    model = result.get("model_version")
    return Completed(name="Refused", message=f"model {model} refused: {decision}"[:500],
                     data=result)
