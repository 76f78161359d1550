"""``prefect.yaml`` for one dataset: the file as written deploys the demo dataset
(``digits``); :func:`render` replaces what differs per dataset and environment, so one
Prefect server holds every dataset's deployments side by side.

Pure (a parsed document in, a new one out): tested without a server, and
``render(doc, DEMO) == doc`` keeps the file and this module in step.

Every name carries the dataset: deployments ``<dataset>-nightly``, ``<dataset>-on-upload``,
``<dataset>-on-publish`` (Prefect shows them as ``ingest/<dataset>-nightly`` ...), their tags,
their triggers' automations; the upload trigger matches only the dataset's own prefix and
the training trigger only its own ``shardline.dataset.<dataset>`` events.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

# role -> the flow its deployment runs
ROLES: dict[str, str] = {"nightly": "ingest", "on-upload": "ingest", "on-publish": "train"}
UPLOAD_EVENT = "s3.object.created"
PUBLISHED_EVENT = "shardline.dataset.published"


@dataclass(frozen=True)
class DatasetValues:
    """What ``shardline deploy`` fills in for one dataset."""

    dataset: str
    config: str                      # s3:// URI of the uploaded TOML (or a path)
    bucket: str
    incoming: str                    # the dataset's upload prefix, ending in "/"
    work_pool: str = "shardline-process"
    train_pool: str = "shardline-train"
    cron: str = "0 2 * * *"
    debounce_s: int = 10
    credentials_block: str = "shardline-s3"
    # the Prefect Secret block holding the Spark Connect token (None: no token)
    spark_token_block: str | None = None


# the values prefect.yaml is written with (a plain `prefect deploy --all`)
DEMO = DatasetValues(dataset="digits", config="examples/digits.toml", bucket="shardline",
                     incoming="incoming/digits/")


def deployment_name(dataset: str, role: str) -> str:
    return f"{dataset}-{role}"


def full_names(dataset: str) -> list[str]:
    """``flow/deployment`` of each of the dataset's deployments."""
    return [f"{flow}/{deployment_name(dataset, role)}" for role, flow in ROLES.items()]


def role_of(name: str, dataset: str | None = None) -> tuple[str, str] | None:
    """(dataset, role) of a deployment name, or None for a name that is not ours."""
    for role in ROLES:
        suffix = f"-{role}"
        if name.endswith(suffix) and len(name) > len(suffix):
            ds = name[: -len(suffix)]
            if dataset is None or ds == dataset:
                return ds, role
    return None


def upload_trigger_name(v: DatasetValues) -> str:
    return f"{v.dataset}: {UPLOAD_EVENT} under s3://{v.bucket}/{v.incoming} -> ingest"


def publish_trigger_name(dataset: str) -> str:
    return f"{dataset}: {PUBLISHED_EVENT} -> train"


# Prefect refuses proactive triggers with a shorter window
MIN_DEBOUNCE_S = 10
DEBOUNCE_LABEL = "s3.bucket"


def _upload_window(t: dict[str, Any], debounce_s: int) -> None:
    """A debounce of ``debounce_s`` >= 10 s: the proactive trigger with the upload event in
    both ``after`` and ``expect`` (each upload restarts the window; it fires once none came
    for ``within``: one run per burst). Shorter (benchmarks, tests that need a quick
    reaction): a reactive trigger that fires at most once per window, the run due at its
    end (``schedule_after`` = ``within``, so an upload after a run's detect always has a
    trigger of its own), at the price of one run per window in a long burst."""
    if debounce_s < 1:
        raise ValueError(f"the upload debounce must be at least 1 s, got {debounce_s}")
    for k in ("after", "posture", "schedule_after", "for_each"):
        t.pop(k, None)
    t["within"] = int(debounce_s)
    if debounce_s >= MIN_DEBOUNCE_S:
        # for_each: without it Prefect's proactive evaluation keeps an event-less window
        # open and fires on every empty one; with it, only an upload opens a window. Every
        # upload event carries the label (infra/events/model.py); one without it buckets
        # under "" (the same window all the same)
        t.update(posture="Proactive", after=[UPLOAD_EVENT], for_each=[DEBOUNCE_LABEL])
    else:
        t.update(posture="Reactive", schedule_after=int(debounce_s))


def _trigger(trig: dict[str, Any], role: str, v: DatasetValues) -> dict[str, Any]:
    t = copy.deepcopy(trig)
    if role == "on-upload":
        t["name"] = upload_trigger_name(v)
        t["match"] = {"prefect.resource.id": f"s3://{v.bucket}/{v.incoming}*"}
        _upload_window(t, v.debounce_s)
    else:
        t["name"] = publish_trigger_name(v.dataset)
        t["match"] = {"prefect.resource.id": f"shardline.dataset.{v.dataset}"}
    return t


def _deployment(dep: dict[str, Any], v: DatasetValues) -> dict[str, Any]:
    found = role_of(dep["name"], DEMO.dataset)
    if found is None:
        raise ValueError(f"prefect.yaml deployment {dep['name']!r} is not named "
                         f"{DEMO.dataset}-<role> (roles: {', '.join(ROLES)})")
    role = found[1]
    d = copy.deepcopy(dep)
    d["name"] = deployment_name(v.dataset, role)
    d["tags"] = [v.dataset if t == DEMO.dataset else t for t in d.get("tags", [])]
    d.setdefault("parameters", {})["config"] = v.config
    for sched in d.get("schedules") or []:
        sched["cron"] = v.cron
    d["work_pool"]["name"] = v.train_pool if ROLES[role] == "train" else v.work_pool
    env = d["work_pool"].setdefault("job_variables", {}).setdefault("env", {})
    env["SHARDLINE_AWS_CREDENTIALS_BLOCK"] = v.credentials_block
    if v.spark_token_block:
        env["SHARDLINE_SPARK_TOKEN_BLOCK"] = v.spark_token_block
    d["triggers"] = [_trigger(t, role, v) for t in d.get("triggers") or []]
    if not d["triggers"]:
        del d["triggers"]
    return d


def render(doc: dict[str, Any], v: DatasetValues) -> dict[str, Any]:
    """The prefect.yaml document ``doc`` (as written, for :data:`DEMO`) for dataset ``v``.

    Raises:
        ValueError: a deployment of ``doc`` is not named ``digits-<role>``, or a bad debounce.
    """
    out = copy.deepcopy({k: val for k, val in doc.items() if k != "deployments"})
    out["deployments"] = [_deployment(d, v) for d in doc["deployments"]]
    return out


def overlapping(bucket: str, incoming: str, dataset: str,
                deployed: dict[str, str]) -> list[str]:
    """Datasets of ``deployed`` (dataset -> ``s3://bucket/prefix``) other than ``dataset``
    whose upload prefix contains, or lies inside, ``s3://bucket/incoming``: their upload
    triggers would fire for each other's uploads, and their ingests read each other's files."""
    mine = f"s3://{bucket}/{incoming}"
    return sorted(ds for ds, uri in deployed.items()
                  if ds != dataset and (uri.startswith(mine) or mine.startswith(uri)))
