"""prefect.yaml names no folder of the deploying machine: module entrypoints that import
from the installed package, no pull step, no variable to set (it deploys the demo dataset
as written), and the per-dataset rendering of infra/deploy_render.py."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PREFECT_YAML = ROOT / "prefect.yaml"


def test_deployments_load_code_from_the_installed_package() -> None:
    from prefect.flows import Flow
    from prefect.utilities.importtools import import_object

    doc = yaml.safe_load(PREFECT_YAML.read_text())
    assert doc["pull"] == []  # no set_working_directory (Prefect's default adds one)
    for dep in doc["deployments"]:
        entry = dep["entrypoint"]
        assert re.fullmatch(r"shardline(\.\w+)+:\w+", entry), entry
        assert isinstance(import_object(entry), Flow), entry


def test_no_absolute_path() -> None:
    text = PREFECT_YAML.read_text()
    body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    assert not re.search(r"(^|[\s\"'])/(?!/)", body), "an absolute path in prefect.yaml"


def _doc() -> dict:
    return yaml.safe_load(PREFECT_YAML.read_text())


def test_the_file_deploys_as_written_with_no_variable_left_to_set() -> None:
    """`prefect deploy --all` here needs no environment: Prefect 3.8 leaves an unset
    `{{ $VAR }}` as the literal text (no default syntax), which became a pool name."""
    body = "\n".join(ln for ln in PREFECT_YAML.read_text().splitlines()
                     if not ln.lstrip().startswith("#"))
    assert "{{ $" not in body and "prefect.variables" not in body
    from prefect.utilities.templating import find_placeholders

    for dep in _doc()["deployments"]:   # only the event's own templates, filled per event
        for t in dep.get("triggers", []):
            assert {p.name.split(".")[0] for p in find_placeholders(t)} <= {"event"}, t


def test_render_for_the_demo_is_the_file_itself() -> None:
    from shardline.infra.deploy_render import DEMO, render

    doc = _doc()
    assert render(doc, DEMO) == doc      # the file and infra/deploy_render.py agree


def test_render_for_another_dataset_leaves_nothing_of_the_demo() -> None:
    import json

    from prefect.events.schemas.deployment_triggers import DeploymentEventTrigger

    from shardline.infra.deploy_render import DatasetValues, full_names, render

    v = DatasetValues(dataset="cats", config="s3://b/lake/cats/deploy/config.toml",
                      bucket="b", incoming="incoming/cats/", work_pool="cpu",
                      train_pool="gpu", cron="0 3 * * *", debounce_s=12,
                      credentials_block="blk")
    doc = render(_doc(), v)
    assert "digits" not in json.dumps(doc)
    deps = {d["name"]: d for d in doc["deployments"]}
    assert sorted(deps) == ["cats-nightly", "cats-on-publish", "cats-on-upload"]
    assert full_names("cats") == ["ingest/cats-nightly", "ingest/cats-on-upload",
                                  "train/cats-on-publish"]
    for d in deps.values():
        assert "cats" in d["tags"] and d["parameters"]["config"] == v.config
        assert d["work_pool"]["job_variables"]["env"]["SHARDLINE_AWS_CREDENTIALS_BLOCK"] == "blk"
    # the upload-triggered run reads its events' pending keys; the nightly one reconciles
    assert deps["cats-on-upload"]["parameters"]["events"] is True
    assert "events" not in deps["cats-nightly"]["parameters"]
    assert deps["cats-nightly"]["schedules"][0]["cron"] == "0 3 * * *"
    assert deps["cats-nightly"]["work_pool"]["name"] == "cpu"
    assert deps["cats-on-publish"]["work_pool"]["name"] == "gpu"
    up = DeploymentEventTrigger.model_validate(deps["cats-on-upload"]["triggers"][0])
    assert up.match.get("prefect.resource.id") == ["s3://b/incoming/cats/*"]
    assert up.within.total_seconds() == 12 and "cats" in (up.name or "")
    assert "s3.object.created" in (up.name or "")
    pub = DeploymentEventTrigger.model_validate(deps["cats-on-publish"]["triggers"][0])
    assert pub.match.get("prefect.resource.id") == ["shardline.dataset.cats"]
    assert "cats" in (pub.name or "") and "shardline.dataset.published" in (pub.name or "")


def test_the_upload_trigger_is_a_debounce() -> None:
    """Every upload restarts the window; the trigger fires once none came for `within`
    (a burst of uploads is one run, not one per window)."""
    from prefect.events.schemas.automations import Posture
    from prefect.events.schemas.deployment_triggers import DeploymentEventTrigger

    dep = next(d for d in _doc()["deployments"] if d["name"].endswith("-on-upload"))
    t = DeploymentEventTrigger.model_validate(dep["triggers"][0])
    assert t.posture == Posture.Proactive and t.threshold == 1
    assert t.after == t.expect == {"s3.object.created"}


def test_a_debounce_under_prefects_proactive_minimum_is_a_reactive_window() -> None:
    """Prefect refuses proactive windows under 10 s; a shorter debounce (benchmarks) fires
    at most once per window, the run due at its end."""
    import dataclasses

    from prefect.events.schemas.automations import Posture
    from prefect.events.schemas.deployment_triggers import DeploymentEventTrigger

    from shardline.infra.deploy_render import DEMO, render

    for s, posture in ((1, Posture.Reactive), (9, Posture.Reactive), (10, Posture.Proactive)):
        doc = render(_doc(), dataclasses.replace(DEMO, debounce_s=s))
        dep = next(d for d in doc["deployments"] if d["name"].endswith("-on-upload"))
        t = DeploymentEventTrigger.model_validate(dep["triggers"][0])
        assert t.posture == posture and t.within.total_seconds() == s
        if posture == Posture.Reactive:
            assert not t.after and t.schedule_after.total_seconds() == s


def test_pool_names_agree_everywhere() -> None:
    """prefect.yaml, `shardline deploy`'s defaults, the embedded stack's workers, compose's
    workers and the infra README's Kubernetes pool name the same two pools."""
    from shardline.core.settings import DeployEnv, read_env
    from shardline.infra.worker import WORKERS

    pools = {d["name"].rsplit("-", 1)[-1] if d["name"].endswith("publish") else "ingest":
             d["work_pool"]["name"] for d in _doc()["deployments"]}
    env = read_env(DeployEnv, {})
    assert pools == {"ingest": env.work_pool, "publish": env.train_pool}
    assert (env.work_pool, env.train_pool) == ("shardline-process", "shardline-train")
    assert set(WORKERS.values()) == {env.work_pool, env.train_pool}
    compose = yaml.safe_load((ROOT / "infra" / "compose.yaml").read_text())["services"]
    assert f"--pool {env.work_pool} " in compose["worker"]["command"]
    assert f"--pool {env.train_pool} " in compose["train-worker"]["command"]
    assert f"work-pool create {env.train_pool} --type kubernetes" in \
        (ROOT / "infra" / "README.md").read_text()


def test_overlapping_upload_prefixes_are_found() -> None:
    from shardline.infra.deploy_render import overlapping

    deployed = {"a": "s3://b/incoming/a/", "all": "s3://b/incoming/", "c": "s3://other/x/"}
    assert overlapping("b", "incoming/a/", "a", deployed) == ["all"]
    assert overlapping("b", "incoming/new/", "new", deployed) == ["all"]
    assert overlapping("b", "incoming/new/", "new", {"a": "s3://b/incoming/a/"}) == []
    assert overlapping("b", "x/", "c", deployed) == []          # another bucket
    assert overlapping("b", "incoming/a/sub/", "s", {"a": "s3://b/incoming/a/"}) == ["a"]
