"""Many datasets on one Prefect server: a real ``prefect server start`` (SQLite, 127.0.0.1,
stopped by PID), the moto server for the uploaded configs, and ``shardline deploy``'s code
path (``prefect deploy --all`` over prefect.yaml rendered per dataset). No worker: the runs
the triggers create stay SCHEDULED, so which deployment each event started is plain.

- a second dataset deployed beside the first keeps both datasets' nightly, upload and
  publish deployments; re-deploying one leaves the other as it was;
- an upload burst under one dataset's prefix makes ONE run of that dataset's upload
  deployment (the debounce), and none of the other's; a published event trains only its
  own dataset;
- a dataset whose prefix overlaps a deployed one's is refused; ``undeploy`` removes one
  dataset's deployments and automations and leaves the other's;
- a plain ``prefect deploy --all`` of prefect.yaml as written deploys the demo dataset.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from shardline.core.config import StoreSettings
from shardline.infra.deploy import DeployError, DeploySpec, deploy
from shardline.infra.deployments import datasets, undeploy
from shardline.infra.events.model import ObjectCreated
from shardline.resources import project_dir
from tests.integration.stack_helpers import wait

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[2]


def dataset_toml(tmp: Path, name: str, incoming: str) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text((ROOT / "examples" / "digits.toml").read_text()
                    .replace('name = "digits"', f'name = "{name}"')
                    .replace('incoming = "incoming/digits/"', f'incoming = "{incoming}"'))
    return path


def deployments(api: str) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in httpx.post(f"{api}/deployments/filter", json={},
                                             timeout=10).json()}


def runs_by_deployment(api: str) -> dict[str, int]:
    """Flow runs created by automations (the triggers), per deployment name."""
    names = {d["id"]: n for n, d in deployments(api).items()}
    out: dict[str, int] = {}
    for r in httpx.post(f"{api}/flow_runs/filter", json={"limit": 200}, timeout=10).json():
        if (r.get("created_by") or {}).get("type") == "AUTOMATION":
            name = names.get(r["deployment_id"], "?")
            out[name] = out.get(name, 0) + 1
    return out


def post(api: str, event: str, resource: str, payload: dict[str, Any]) -> None:
    body = [{"id": str(uuid.uuid4()), "occurred": datetime.now(UTC).isoformat(),
             "event": event, "resource": {"prefect.resource.id": resource},
             "payload": payload}]
    assert httpx.post(f"{api}/events", json=body, timeout=10).status_code == 204


def upload_event(api: str, bucket: str, key: str) -> None:
    """The event every bridge (SQS, webhook, poll) posts for an upload."""
    doc = ObjectCreated(bucket, key, 10, uuid.uuid4().hex).to_event()
    assert httpx.post(f"{api}/events", json=[doc], timeout=10).status_code == 204


def test_two_datasets_side_by_side(api: str, store_settings: StoreSettings,
                                   tmp_path: Path) -> None:
    alpha = dataset_toml(tmp_path, "alpha", "incoming/alpha/")
    beta = dataset_toml(tmp_path, "beta", "incoming/beta/")
    assert deploy(DeploySpec(alpha, api), store_settings) == [
        "ingest/alpha-nightly", "ingest/alpha-on-upload", "train/alpha-on-publish"]
    deploy(DeploySpec(beta, api, nightly_cron="0 4 * * *"), store_settings)
    deploy(DeploySpec(alpha, api), store_settings)            # re-deploying the first
    deps = deployments(api)
    for ds in ("alpha", "beta"):
        assert {f"{ds}-nightly", f"{ds}-on-upload", f"{ds}-on-publish"} <= set(deps)
        assert ds in deps[f"{ds}-on-upload"]["tags"]
        assert deps[f"{ds}-nightly"]["schedules"], f"{ds} lost its nightly schedule"
        assert deps[f"{ds}-on-publish"]["work_pool_name"] == "shardline-train"
        config = deps[f"{ds}-nightly"]["parameters"]["config"]
        assert config == f"s3://{store_settings.bucket}/lake/{ds}/deploy/config.toml"
    assert deps["beta-nightly"]["schedules"][0]["schedule"]["cron"] == "0 4 * * *"
    listed = datasets(api)
    assert {"alpha", "beta"} <= set(listed)
    upload = next(d for d in listed["beta"] if d.role == "on-upload")
    assert upload.triggers == [
        f"beta: s3.object.created under s3://{store_settings.bucket}/incoming/beta/ -> ingest"]

    # a burst of uploads for alpha, one upload for beta: one run each, of its own deployment
    bucket = store_settings.bucket
    for i in range(6):
        upload_event(api, bucket, f"incoming/alpha/part-{i}.csv")
        time.sleep(0.3)
    upload_event(api, bucket, "incoming/beta/x.csv")
    upload_event(api, bucket, "elsewhere/y.csv")
    wait("both upload runs", lambda: {"alpha-on-upload", "beta-on-upload"}
             <= set(runs_by_deployment(api)), 60)
    time.sleep(27)   # two debounce windows and proactive evaluations more: nothing else fires
    assert runs_by_deployment(api) == {"alpha-on-upload": 1, "beta-on-upload": 1}

    # a published event trains its own dataset only, with the event's config and version
    post(api, "shardline.dataset.published", "shardline.dataset.beta",
         {"dataset": "beta", "version": 3, "config": {"dataset": {"name": "beta"}}})
    wait("the training run", lambda: "beta-on-publish" in runs_by_deployment(api), 30)
    time.sleep(3)
    assert runs_by_deployment(api) == {"alpha-on-upload": 1, "beta-on-upload": 1,
                                       "beta-on-publish": 1}
    train = httpx.post(f"{api}/flow_runs/filter", json={"deployments": {"id": {"any_": [
        deps["beta-on-publish"]["id"]]}}}, timeout=10).json()[0]
    assert train["parameters"]["version"] == 3 and "beta" in train["tags"]

    # overlapping prefixes are refused, naming the other dataset
    gamma = dataset_toml(tmp_path, "gamma", "incoming/alpha/sub/")
    with pytest.raises(DeployError, match=r"'gamma'.*overlaps.*alpha"):
        deploy(DeploySpec(gamma, api), store_settings)
    assert "gamma-nightly" not in deployments(api)

    # undeploy removes one dataset: deployments, automations, limit; the other stays
    assert undeploy("beta", api) == ["ingest/beta-nightly", "ingest/beta-on-upload",
                                     "train/beta-on-publish"]
    deps = deployments(api)
    assert not [n for n in deps if n.startswith("beta-")]
    assert {"alpha-nightly", "alpha-on-upload", "alpha-on-publish"} <= set(deps)
    autos = httpx.post(f"{api}/automations/filter", json={}, timeout=10).json()
    assert not [a["name"] for a in autos if a["name"].startswith("beta:")]
    assert [a["name"] for a in autos if a["name"].startswith("alpha:")]
    assert undeploy("beta", api) == []


def test_plain_prefect_deploy_all_works_as_written(api: str, store_settings: StoreSettings,
                                                   tmp_path: Path) -> None:
    """`prefect --no-prompt deploy --all` in the project folder, no SHARDLINE_* variable
    set, deploys the demo dataset (its pools exist once `shardline deploy` or `up` ran)."""
    deploy(DeploySpec(dataset_toml(tmp_path, "other", "incoming/other/"), api), store_settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDLINE_")}
    env.update(PREFECT_API_URL=api, PREFECT_SERVER_ANALYTICS_ENABLED="false")
    prefect = Path(sys.executable).parent / "prefect"
    run = subprocess.run([str(prefect), "--no-prompt", "deploy", "--all"], cwd=project_dir(),
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    deps = deployments(api)
    assert {"digits-nightly", "digits-on-upload", "digits-on-publish"} <= set(deps)
    assert deps["digits-on-upload"]["work_pool_name"] == "shardline-process"
    assert deps["digits-nightly"]["parameters"]["config"] == "examples/digits.toml"
    assert "other-nightly" in deps                               # left as it was


def test_the_spark_token_travels_as_a_secret_block(api: str, store_settings: StoreSettings,
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`shardline deploy` with SHARDLINE_SPARK_TOKEN set saves it as a Prefect Secret block
    and names the block in the deployments (never the token); a flow run reads it back."""
    import json

    from prefect.settings import PREFECT_API_URL, temporary_settings

    from shardline.flows.settings import spark_settings

    monkeypatch.setenv("SHARDLINE_SPARK_REMOTE", "sc://spark.example:443")
    monkeypatch.setenv("SHARDLINE_SPARK_TOKEN", "tok-0123456789")
    deploy(DeploySpec(dataset_toml(tmp_path, "tok", "incoming/tok/"), api), store_settings)
    deps = {n: d for n, d in deployments(api).items() if n.startswith("tok-")}
    assert len(deps) == 3 and "tok-0123456789" not in json.dumps(deps)
    assert all(d["job_variables"]["env"]["SHARDLINE_SPARK_TOKEN_BLOCK"] ==
               "shardline-spark-token" for d in deps.values())
    monkeypatch.delenv("SHARDLINE_SPARK_TOKEN")
    monkeypatch.setenv("SHARDLINE_SPARK_TOKEN_BLOCK", "shardline-spark-token")
    with temporary_settings(updates={PREFECT_API_URL: api}):
        spark = spark_settings()
    assert spark.connect_url() == "sc://spark.example:443/;token=tok-0123456789"


def test_s3_keys_come_from_the_block_else_the_environment(
        api: str, store_settings: StoreSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The AwsCredentials block `shardline deploy` saved wins; a block name that no deploy
    saved (prefect.yaml deployed by hand) falls back to the environment's keys."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from shardline.flows.settings import store_settings as flow_store_settings
    from shardline.infra.deploy import save_credentials_block

    monkeypatch.setenv("SHARDLINE_BUCKET", store_settings.bucket)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    with temporary_settings(updates={PREFECT_API_URL: api}):
        block = save_credentials_block(store_settings)        # keys "testing"
        monkeypatch.setenv("SHARDLINE_AWS_CREDENTIALS_BLOCK", block)
        assert flow_store_settings().access_key == store_settings.access_key == "testing"
        monkeypatch.setenv("SHARDLINE_AWS_CREDENTIALS_BLOCK", "never-saved")
        got = flow_store_settings()
    assert (got.access_key, got.secret_key) == ("env-key", "env-secret")


def test_the_cli_deploys_lists_and_undeploys_one_dataset(
        api: str, store_settings: StoreSettings, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from shardline.cli.main import app

    cfg, home = dataset_toml(tmp_path, "clids", "incoming/clids/"), tmp_path / "no-stack"
    env = {"PREFECT_API_URL": api, "SHARDLINE_BUCKET": store_settings.bucket,
           "SHARDLINE_S3_ENDPOINT_URL": str(store_settings.endpoint_url),
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "SHARDLINE_HOME": str(home)}
    run = CliRunner().invoke(app, ["deploy", "-c", str(cfg)], env=env)
    assert run.exit_code == 0 and "train/clids-on-publish" in run.output, run.output
    run = CliRunner().invoke(app, ["status", "--home", str(home)], env=env)
    assert run.exit_code == 1, run.output                         # no stack here, but:
    rows = [ln.split("\t") for ln in run.output.splitlines() if ln.startswith("clids\t")]
    assert [(r[1], r[2]) for r in rows] == [("ingest/clids-nightly", "shardline-process"),
                                            ("ingest/clids-on-upload", "shardline-process"),
                                            ("train/clids-on-publish", "shardline-train")]
    assert "cron 0 2 * * * UTC" in rows[0][3] and "s3.object.created" in rows[1][3]
    run = CliRunner().invoke(app, ["undeploy", "-c", str(cfg)], env=env)
    assert run.exit_code == 0 and "removed ingest/clids-nightly" in run.output, run.output
    run = CliRunner().invoke(app, ["undeploy", "-c", str(cfg)], env=env)
    assert run.exit_code == 0 and "has no deployments" in run.output, run.output


def test_deploy_removes_the_deployments_every_dataset_used_to_share(
        api: str, store_settings: StoreSettings, tmp_path: Path) -> None:
    """A stack deployed by an older shardline keeps `ingest/ingest-nightly` etc. in its
    database; left there, their triggers would start a second run per upload."""
    for flow, name in (("ingest", "ingest-nightly"), ("ingest", "ingest-on-upload"),
                       ("train", "train-on-publish")):
        flow_id = httpx.post(f"{api}/flows/", json={"name": flow}, timeout=10).json()["id"]
        r = httpx.post(f"{api}/deployments/", json={"name": name, "flow_id": flow_id},
                       timeout=10)
        assert r.status_code in (200, 201), r.text
    assert {"ingest-nightly", "ingest-on-upload", "train-on-publish"} <= set(deployments(api))
    deploy(DeploySpec(dataset_toml(tmp_path, "fresh", "incoming/fresh/"), api), store_settings)
    deps = set(deployments(api))
    assert not deps & {"ingest-nightly", "ingest-on-upload", "train-on-publish"}, deps
    assert {"fresh-nightly", "fresh-on-upload", "fresh-on-publish"} <= deps
