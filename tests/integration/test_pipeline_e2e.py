"""The proof: on the embedded stack, an upload made with boto3 becomes a trained model with
nobody calling a flow. upload -> S3 notification -> SQS -> consumer -> s3.object.created ->
ingest-on-upload -> version -> shardline.dataset.published -> train-on-publish -> model.

Everything is real: moto (S3 + SQS) over HTTP, a Prefect server with a process worker and
deployments from prefect.yaml, Spark Connect, great-expectations, torch. Latencies are
printed (not asserted).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shardline.core.manifest import list_versions, read_manifest
from shardline.infra import demo_data
from shardline.trainer.registry import ModelRegistry
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


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with deployed_stack(tmp_path_factory.mktemp("stack"), "e2e", epochs=2) as handles:
        yield handles


def finished(api: str, flow: str, pred: Any) -> list[dict[str, Any]]:
    return [r for r in runs(api, flow) if r["state_type"] in TERMINAL and pred(r)]


def test_upload_event_ingest_publish_event_train(embedded: dict[str, Any]) -> None:
    store, api, cfg = embedded["store"], embedded["api"], embedded["cfg"]
    prefix = cfg.dataset.prefix
    t0 = time.monotonic()
    store.put_bytes(f"{cfg.dataset.incoming}part-1/digits.jsonl",
                    demo_data.jsonl_bytes(demo_data.digits(0, 600)))
    wait("version 1", lambda: list_versions(store, prefix) == [1], 240)
    t_version = time.monotonic() - t0
    train = wait("a finished train run",
                 lambda: finished(api, "train", lambda r: r["parameters"].get("version") == 1),
                 300)[0]
    t_train = time.monotonic() - t0
    ingest = finished(api, "ingest", lambda r: True)
    assert [r["state_type"] for r in ingest] == ["COMPLETED"]
    assert ingest[0]["name"].startswith("ingest-e2e-v1-event-")
    assert "trigger:event" in ingest[0]["tags"]
    # deploy uploaded the TOML: the deployment names it by URI, never by this machine's path
    uri = ingest[0]["parameters"]["config"]
    assert uri.startswith("s3://") and "/tmp/" not in uri
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    assert store.get_bytes(key) == embedded["config"].read_bytes() and bucket == store.bucket
    assert train["state_type"] == "COMPLETED", train
    # parameters carried from the published event: the config by value, no host path
    import tomllib

    assert train["parameters"] == {"config": tomllib.loads(embedded["config"].read_text()),
                                   "version": 1}
    assert train["name"].startswith("train-e2e-v1-event-")
    assert {"e2e", "trigger:event"} <= set(train["tags"])
    registry = ModelRegistry(store, "e2e", cfg.train.model)
    promoted = registry.promoted()
    assert promoted is not None and promoted.number == 1
    assert registry.meta(1)["dataset_version"] == 1
    m = read_manifest(store, prefix, 1)
    assert m.rows == 600 and m.sources[0].key.endswith("part-1/digits.jsonl")
    started = httpx.get(f"{api}/flow_runs/{train['id']}", timeout=10).json()["start_time"]
    print(f"\nlatency: upload -> version {t_version:.1f}s; upload -> train finished "
          f"{t_train:.1f}s (train started at {started})")


def test_the_same_upload_notified_twice_makes_one_version(embedded: dict[str, Any]) -> None:
    """Two layers make repeats harmless: the notification bridge gives an upload a stable
    event id (Prefect keeps one event per id), and a duplicate that does start a run (a
    bridge without stable ids) finds nothing new, because batch ids derive from ETags."""
    store, api, cfg = embedded["store"], embedded["api"], embedded["cfg"]
    key = f"{cfg.dataset.incoming}part-1/digits.jsonl"
    body = demo_data.jsonl_bytes(demo_data.digits(0, 600))
    store.put_bytes(key, body)      # the same bytes again: two more notifications, same ETag
    store.put_bytes(key, body)
    before = len(finished(api, "ingest", lambda r: True))
    post_created_event(api, store, key, str(uuid.uuid4()))
    wait("the duplicate's ingest run", lambda: len(finished(api, "ingest", lambda r: True))
         > before, 180)
    wait("no ingest run in flight", lambda: not in_flight(api, "ingest"), 120)
    assert list_versions(store, cfg.dataset.prefix) == [1]
    latest = finished(api, "ingest", lambda r: True)[-1]
    assert latest["state_type"] == "COMPLETED" and latest["name"].startswith(
        "ingest-e2e-nothing-new-event-")
    assert len(finished(api, "train", lambda r: True)) == 1     # nothing new: no training


def test_the_nightly_deployment_picks_up_what_events_missed(embedded: dict[str, Any]) -> None:
    store, api, cfg = embedded["store"], embedded["api"], embedded["cfg"]
    with notifications_off(store):
        store.put_bytes(f"{cfg.dataset.incoming}part-2/digits.csv",
                        demo_data.csv_bytes(demo_data.digits(600, 900)))
        time.sleep(3)
        assert list_versions(store, cfg.dataset.prefix) == [1]   # no event, no ingest
    run_nightly_now(embedded["env"], api, "e2e")
    wait("version 2", lambda: list_versions(store, cfg.dataset.prefix) == [1, 2], 240)
    m2 = read_manifest(store, cfg.dataset.prefix, 2)
    assert m2.new_rows == 300 and m2.parent == 1
    train2 = wait("train run for v2", lambda: finished(
        api, "train", lambda r: r["parameters"].get("version") == 2), 300)[0]
    assert train2["state_type"] == "COMPLETED"
    meta = ModelRegistry(store, "e2e", cfg.train.model).meta(2)
    assert meta["parent_model_version"] == 1 and meta["dataset_version"] == 2
    print("\nnightly run:", json.dumps({"version": 2, "model": meta["model_version"],
                                         "gate": meta["gate"]}))


def test_an_upload_burst_is_one_ingest_run(embedded: dict[str, Any]) -> None:
    """30 uploads over ~3 s: the upload trigger is a debounce (it fires once no upload came
    for its window), so the burst makes ONE ingest run, which publishes all 30 as one
    version; no "nothing-new" runs (one 299-object upload used to make 7)."""
    store, api, cfg = embedded["store"], embedded["api"], embedded["cfg"]
    wait("no ingest run in flight", lambda: not in_flight(api, "ingest"), 240)
    before_runs = {r["id"] for r in runs(api, "ingest")}
    before = list_versions(store, cfg.dataset.prefix)
    for i in range(30):
        store.put_bytes(f"{cfg.dataset.incoming}burst/part-{i:02d}.csv",
                        demo_data.csv_bytes(demo_data.digits(900 + 10 * i, 910 + 10 * i)))
        time.sleep(0.1)
    wait("an ingest run after the burst", lambda: [
        r for r in runs(api, "ingest") if r["id"] not in before_runs], 120)
    time.sleep(20)   # another debounce window and proactive evaluation: nothing more fires
    wait("no ingest run in flight", lambda: not in_flight(api, "ingest"), 300)
    new = [r for r in runs(api, "ingest") if r["id"] not in before_runs]
    versions = list_versions(store, cfg.dataset.prefix)
    assert versions == [*before, before[-1] + 1], versions
    m = read_manifest(store, cfg.dataset.prefix, versions[-1])
    assert m.new_rows == 300 and len(m.sources) == 30
    assert [r["state_type"] for r in new] == ["COMPLETED"], [r["name"] for r in new]
    assert new[0]["name"].startswith(f"ingest-e2e-v{versions[-1]}-event-"), new[0]["name"]


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1400,1000"):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def _page_text(driver: Any, url: str, expect: list[str], timeout_s: float = 60) -> str:
    from selenium.webdriver.common.by import By

    driver.get(url)
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        text = driver.find_element(By.TAG_NAME, "body").text
        if all(e in text for e in expect):
            break
        time.sleep(1)
    return text


@pytest.mark.browser
@pytest.mark.skipif(not (Path("/usr/bin/chromium").exists() and
                         Path("/usr/bin/chromedriver").exists()),
                    reason="needs Debian chromium + chromium-driver (make test installs them)")
def test_the_prefect_ui_shows_the_runs_and_artifacts(embedded: dict[str, Any]) -> None:
    """A person opening the UI sees the story: named runs and the dataset's artifacts."""
    ui = embedded["state"].prefect_ui_url
    out = Path("tests/output")
    out.mkdir(parents=True, exist_ok=True)
    driver = _browser()
    try:
        runs_text = _page_text(driver, f"{ui}/runs", ["ingest-e2e-v1", "train-e2e-v1"])
        driver.save_screenshot(str(out / "prefect-ui-runs.png"))
        assert "ingest-e2e-v1" in runs_text and "train-e2e-v1" in runs_text
        keys = ["e2e-versions", "e2e-validation", "e2e-training", "e2e-training-curve"]
        arts_text = _page_text(driver, f"{ui}/artifacts", keys)
        driver.save_screenshot(str(out / "prefect-ui-artifacts.png"))
        for key in keys:
            assert key in arts_text, key
    finally:
        driver.quit()
