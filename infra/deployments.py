"""The datasets deployed on a Prefect server: list them (``shardline status``), find their
upload prefixes (``shardline deploy`` refuses overlaps), remove one (``shardline undeploy``).

A deployment is a dataset's when its name is ``<dataset>-<role>`` (:mod:`infra.deploy_render`)
and it carries the ``shardline`` tag; its automations are the ones whose action runs it.
Removing a dataset removes its deployments (Prefect deletes their scheduled runs), their
automations and its ``train-<dataset>`` concurrency limit; its data and models stay in the
bucket.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from shardline.infra.deploy_render import UPLOAD_EVENT, full_names, role_of

TAG = "shardline"


@dataclass
class DeployedDeployment:
    name: str                        # flow/deployment
    role: str                        # nightly | on-upload | on-publish
    work_pool: str
    schedule: str = ""               # cron (UTC) of an active schedule
    triggers: list[str] = field(default_factory=list)    # automation names
    paused: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextlib.contextmanager
def client_for(api_url: str) -> Iterator[Any]:
    """A sync Prefect client for ``api_url`` (not the process settings: a caller may sit
    inside another Prefect context)."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api_url}), \
            get_client(sync_client=True) as client:
        yield client


def _ours(client: Any) -> list[tuple[Any, str, str]]:
    """(deployment, dataset, role) of every shardline deployment."""
    out = []
    for d in client.read_deployments():
        found = role_of(d.name)
        if found is not None and TAG in (d.tags or []):
            out.append((d, *found))
    return out


def _automations_by_deployment(client: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for a in client.read_automations():
        for act in a.actions:
            dep = getattr(act, "deployment_id", None)
            if dep is not None:
                out.setdefault(str(dep), []).append(a)
    return out


def _resource_id(trigger: Any) -> str:
    rid = (getattr(trigger, "match", None) or {}).get("prefect.resource.id", "")
    return str(rid[0] if isinstance(rid, list) and rid else rid)


def upload_prefixes(client: Any) -> dict[str, str]:
    """dataset -> ``s3://bucket/prefix`` its upload trigger watches."""
    autos = _automations_by_deployment(client)
    out = {}
    for d, ds, role in _ours(client):
        for a in autos.get(str(d.id), []):
            if role == "on-upload" and UPLOAD_EVENT in (getattr(a.trigger, "expect", None)
                                                        or ()):
                out[ds] = _resource_id(a.trigger).rstrip("*")
    return out


def _cron(d: Any) -> str:
    for s in getattr(d, "schedules", None) or []:
        cron = getattr(getattr(s, "schedule", None), "cron", None)
        if cron and getattr(s, "active", True):
            return str(cron)
    return ""


def datasets(api_url: str) -> dict[str, list[DeployedDeployment]]:
    """Every deployed dataset's deployments, by dataset name (sorted)."""
    with client_for(api_url) as client:
        flows = {str(f.id): f.name for f in client.read_flows()}
        autos = _automations_by_deployment(client)
        out: dict[str, list[DeployedDeployment]] = {}
        for d, ds, role in _ours(client):
            out.setdefault(ds, []).append(DeployedDeployment(
                name=f"{flows.get(str(d.flow_id), '?')}/{d.name}", role=role,
                work_pool=d.work_pool_name or "", schedule=_cron(d),
                triggers=sorted(a.name for a in autos.get(str(d.id), [])),
                paused=bool(d.paused)))
    return {ds: sorted(deps, key=lambda x: x.name) for ds, deps in sorted(out.items())}


# the fixed names every dataset shared before deployments were per dataset: a stack
# deployed then still has them (PostgreSQL keeps them across `down`/`up`), and their
# triggers would start a second run for every upload and publish of that dataset
LEGACY = ("ingest/ingest-nightly", "ingest/ingest-on-upload", "train/train-on-publish")


def _remove(client: Any, names: tuple[str, ...] | list[str]) -> list[str]:
    from prefect.exceptions import ObjectNotFound

    autos = _automations_by_deployment(client)
    removed = []
    for name in names:
        try:
            dep = client.read_deployment_by_name(name)
        except ObjectNotFound:
            continue
        for a in autos.get(str(dep.id), []):
            client.delete_automation(a.id)
        client.delete_deployment(dep.id)
        removed.append(name)
    return removed


def remove_legacy(client: Any) -> list[str]:
    """Delete the deployments of :data:`LEGACY` (and their automations); returns their
    names. ``shardline deploy`` calls it: the per-dataset deployments replace them."""
    return _remove(client, LEGACY)


def undeploy(dataset: str, api_url: str) -> list[str]:
    """Remove ``dataset``'s deployments, their automations and its training concurrency
    limit; returns the ``flow/deployment`` names removed (empty: nothing was deployed)."""
    from prefect.exceptions import ObjectNotFound

    with client_for(api_url) as client:
        removed = _remove(client, full_names(dataset))
        with contextlib.suppress(ObjectNotFound):
            client.delete_global_concurrency_limit_by_name(f"train-{dataset}")
    return removed
