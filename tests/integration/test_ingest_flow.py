"""The ``ingest`` flow on a real Prefect server (test harness) and the ``shardline`` CLI in
Prefect's ephemeral mode: results, artifacts, the published event, the failure path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from shardline.core.errors import ValidationFailed
from shardline.infra.demo_data import bad_jsonl_lines, digits, jsonl_bytes
from tests.integration.cli_helpers import write_config


def artifacts(keys: list[str]) -> dict:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
    return {a.key: a for a in found}


def published_events(dataset: str, timeout_s: float = 20.0) -> list[dict]:
    from prefect.settings import PREFECT_API_URL

    url = f"{PREFECT_API_URL.value()}/events/filter"
    body = {"filter": {"event": {"name": ["shardline.dataset.published"]},
                       "resource": {"id": [f"shardline.dataset.{dataset}"]}}, "limit": 50}
    deadline = time.monotonic() + timeout_s
    while True:   # events are sent in the background; wait for them (bounded)
        events = httpx.post(url, json=body, timeout=10).json()["events"]
        if events or time.monotonic() > deadline:
            return events
        time.sleep(0.5)


def test_flow_publishes_leaves_artifacts_and_emits_the_event(
        prefect_harness, stack_env, store, spark_remote, monkeypatch, tmp_path):
    from shardline.flows.ingest import ingest

    monkeypatch.setenv("SHARDLINE_SPARK_REMOTE", spark_remote)
    cfg = write_config(tmp_path, "flowdigits", 0.2)
    bad = "\n".join(line for line, _ in bad_jsonl_lines()[:3]) + "\n"
    store.put_bytes("incoming/flowdigits/a.jsonl", jsonl_bytes(digits(0, 100)) + bad.encode())
    result = ingest(config=str(cfg))
    assert result["version"] == 1 and result["created"]
    assert (result["rows_published"], result["rows_quarantined"]) == (100, 3)
    assert result["manifest"].endswith("/lake/flowdigits/versions/v000001.json")
    assert result["quarantine_by_rule"] == {"missing_id": 1, "missing_label": 1,
                                            "unknown_label": 1}

    arts = artifacts(["flowdigits-versions", "flowdigits-validation", "flowdigits-quarantine"])
    assert set(arts) == {"flowdigits-versions", "flowdigits-validation", "flowdigits-quarantine"}
    table = arts["flowdigits-versions"].data
    rows = json.loads(table) if isinstance(table, str) else table
    assert rows[0]["version"] == 1 and rows[0]["new rows"] == 100
    assert "PASSED" in arts["flowdigits-validation"].data
    assert "expect_column_values_to_be_unique" in arts["flowdigits-validation"].data

    events = published_events("flowdigits")
    assert len(events) == 1
    assert events[0]["payload"]["version"] == 1
    # the config travels by value (no host path): the TOML document as a dict, which the
    # train flow (on another machine) parses into the same configuration
    import tomllib

    from shardline.core.config import load_config
    from shardline.flows.config_source import load_flow_config

    payload_config = events[0]["payload"]["config"]
    assert payload_config == tomllib.loads(cfg.read_text())
    assert str(tmp_path) not in json.dumps(events[0]["payload"])
    assert load_flow_config(payload_config).dataset == load_config(cfg).dataset

    again = ingest(config=payload_config)                   # by value into ingest too
    assert again["version"] is None and "nothing new" in again["message"]
    assert len(published_events("flowdigits", timeout_s=2)) == 1   # no second event
    names = sorted(r.name for r in flow_runs("ingest"))
    assert [n.rsplit("-", 1)[0] for n in names if "flowdigits" in n] == [
        "ingest-flowdigits-nothing-new-cli", "ingest-flowdigits-v1-cli"]
    assert all({"shardline", "ingest", "flowdigits", "trigger:cli"} <= set(r.tags)
               for r in flow_runs("ingest") if "flowdigits" in r.name)


def flow_runs(flow: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    with get_client(sync_client=True) as client:
        return list(client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(
            any_=[flow]))))


def test_flow_fails_on_a_failing_suite_and_reports_it(
        prefect_harness, stack_env, store, spark_remote, monkeypatch, tmp_path):
    from shardline.flows.ingest import ingest

    monkeypatch.setenv("SHARDLINE_SPARK_REMOTE", spark_remote)
    cfg = write_config(tmp_path, "baddigits", 0.2)
    lines = "\n".join(line for line, _ in bad_jsonl_lines()) + "\n"
    store.put_bytes("incoming/baddigits/a.jsonl", jsonl_bytes(digits(0, 10)) + lines.encode())
    with pytest.raises(ValidationFailed, match="nothing was published"):
        ingest(config=str(cfg))
    arts = artifacts(["baddigits-validation"])
    assert "FAILED" in arts["baddigits-validation"].data
    assert list(store.list("lake/baddigits/versions/")) == []


def test_a_failed_batch_is_bisected_in_the_same_run(
        prefect_harness, stack_env, store, spark_remote, monkeypatch, tmp_path):
    """One upload over the gate beside a clean one: the run fails its first batch, then
    (same run) publishes the clean upload alone and sets the bad one aside after trying it
    alone; it still ends Failed, naming the first failure."""
    from shardline.core.config import load_config
    from shardline.core.manifest import latest_manifest
    from shardline.flows.ingest import ingest
    from shardline.tasks.detect import detect
    from shardline.tasks.setaside import set_aside

    monkeypatch.setenv("SHARDLINE_SPARK_REMOTE", spark_remote)
    path = write_config(tmp_path, "bisect", 0.2)
    lines = "\n".join(line for line, _ in bad_jsonl_lines()) + "\n"
    store.put_bytes("incoming/bisect/bad.jsonl", lines.encode())          # 100 % bad
    store.put_bytes("incoming/bisect/good.jsonl", jsonl_bytes(digits(0, 10)))
    with pytest.raises(ValidationFailed, match="nothing was published"):
        ingest(config=str(path))
    cfg = load_config(path).dataset
    m = latest_manifest(store, cfg.prefix)
    assert m is not None and m.version == 1 and m.rows == 10
    assert [s.key for s in m.sources] == ["incoming/bisect/good.jsonl"]
    assert {k for k, _ in set_aside(store, cfg)} == {"incoming/bisect/bad.jsonl"}
    assert detect(store, cfg) is None


def test_cli_ingest_json_in_ephemeral_mode(stack_env, store, spark_remote, tmp_path):
    cfg = write_config(tmp_path, "clidigits", 0.2)
    store.put_bytes("incoming/clidigits/a.jsonl", jsonl_bytes(digits(0, 50)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(SHARDLINE_SPARK_REMOTE=spark_remote, SHARDLINE_HOME=str(tmp_path / "nostack"),
               PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               # Prefect's ephemeral server gives up after 20 s by default: a loaded
               # 2-core machine took longer to start it (the run's time is not asserted)
               PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180")
    cli = [sys.executable, "-m", "shardline.cli.main"]
    run = subprocess.run([*cli, "ingest", "--config", str(cfg), "--json"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    # one small batch -> one train shard holding all ten labels (shards span a batch, not a
    # label) and one shard of its held-out rows
    assert out["version"] == 1 and out["rows_published"] == 50 and out["shards"] == 2
    assert out["more"] == []
    assert out["manifest"] == f"s3://{store.bucket}/lake/clidigits/versions/v000001.json"
    listing = subprocess.run([*cli, "versions", "--config", str(cfg), "--json"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert json.loads(listing.stdout)["versions"][0]["rows"] == 50
    bad = subprocess.run([*cli, "ingest", "--config", str(cfg), "--json"],
                         env={**env, "SHARDLINE_BUCKET": ""}, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 1 and "SHARDLINE_BUCKET" in json.loads(bad.stdout)["error"]
