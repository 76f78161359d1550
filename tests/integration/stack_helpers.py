"""The embedded stack as the end-to-end and chaos suites drive it: one deployed stack per
module (moto S3 + SQS, a Prefect server with its process worker and the deployments from
prefect.yaml, Spark Connect), and the few client calls the tests make against it (flow-run
listings, waiting, posting an upload event, running the nightly deployment by hand)."""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from shardline.core.config import StoreSettings, load_config
from shardline.core.store import ObjectStore
from shardline.infra import procs, stack
from shardline.infra.deploy import DeploySpec, deploy
from shardline.infra.stack_state import StackConfig, stack_env
from shardline.infra.waiting import wait_for

TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


@contextmanager
def deployed_stack(home: Path, name: str, epochs: int, debounce_seconds: int | None = None,
                   pending_timeout_seconds: int | None = None) -> Iterator[dict[str, Any]]:
    """Start the stack under ``home`` on free ports (bucket ``<name>-bucket``) and deploy
    examples/digits.toml renamed ``name`` (uploads under ``incoming/<name>/``, ``epochs``
    training epochs); ``debounce_seconds`` overrides the upload trigger's default and
    ``pending_timeout_seconds`` the Pending automation's.

    Yields the handles: ``state``, ``stack_cfg``, ``env``, ``store``, ``config`` (the TOML's
    path), ``cfg`` (it loaded), ``api`` (the Prefect API URL) and ``home``. The stack is
    stopped by PID and its files discarded whatever happens."""
    cfg_path = home / f"{name}.toml"
    cfg_path.write_text(Path("examples/digits.toml").read_text()
                        .replace('name = "digits"', f'name = "{name}"')
                        .replace('incoming = "incoming/digits/"', f'incoming = "incoming/{name}/"')
                        .replace("epochs = 8", f"epochs = {epochs}"))
    ports = {"s3": procs.free_port(), "prefect": procs.free_port(), "spark": procs.free_port()}
    cfg = StackConfig.resolve(home=home, ports=ports, bucket=f"{name}-bucket")
    try:
        state = stack.up(cfg).state
        env = stack_env(state)
        store = ObjectStore(StoreSettings.from_env(env))
        spec = DeploySpec(config=cfg_path, api_url=state.prefect_api_url)
        if debounce_seconds is not None:
            spec = dataclasses.replace(spec, debounce_seconds=debounce_seconds)
        if pending_timeout_seconds is not None:
            spec = dataclasses.replace(spec, pending_timeout_seconds=pending_timeout_seconds)
        deploy(spec, store.settings)
        yield {"state": state, "stack_cfg": cfg, "env": env, "store": store, "config": cfg_path,
               "cfg": load_config(cfg_path), "api": state.prefect_api_url, "home": home}
    finally:
        stack.down(home, discard=True)


def process_args() -> Iterator[tuple[int, list[str]]]:
    """(pid, command-line arguments) of every process that can be read now."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            args = (d / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        yield int(d.name), args


def runs(api: str, flow: str) -> list[dict[str, Any]]:
    """The flow's runs (up to 200), oldest expected start first."""
    body = {"flows": {"name": {"any_": [flow]}}, "sort": "EXPECTED_START_TIME_ASC",
            "limit": 200}
    return httpx.post(f"{api}/flow_runs/filter", json=body, timeout=10).json()


def in_flight(api: str, flow: str) -> list[dict[str, Any]]:
    """Runs not finished yet, ignoring the nightly schedule's runs hours ahead."""
    soon = datetime.now(UTC) + timedelta(minutes=10)
    return [r for r in runs(api, flow) if r["state_type"] not in TERMINAL and
            datetime.fromisoformat(r["expected_start_time"]) < soon]


# poll every 0.5 s until the check returns something truthy; TimeoutError names what
wait = functools.partial(wait_for, every_s=0.5)


def post_created_event(api: str, store: ObjectStore, key: str, event_id: str) -> None:
    """Post the ``s3.object.created`` event the notification bridge would for ``key``."""
    info = store.head(key)
    assert info is not None, f"{key} is not in the bucket"
    event = {"id": event_id, "occurred": datetime.now(UTC).isoformat(),
             "event": "s3.object.created",
             "resource": {"prefect.resource.id": f"s3://{store.bucket}/{key}"},
             "payload": {"bucket": store.bucket, "key": key, "size": info.size,
                         "etag": info.etag}}
    assert httpx.post(f"{api}/events", json=[event], timeout=10).status_code == 204


@contextmanager
def notifications_off(store: ObjectStore) -> Iterator[None]:
    """The bucket sends no upload notifications inside the block (the events are lost);
    its configuration is put back afterwards."""
    client = store.client
    saved = client.get_bucket_notification_configuration(Bucket=store.bucket)
    saved.pop("ResponseMetadata", None)
    client.put_bucket_notification_configuration(Bucket=store.bucket,
                                                 NotificationConfiguration={})
    try:
        yield
    finally:
        client.put_bucket_notification_configuration(Bucket=store.bucket,
                                                     NotificationConfiguration=saved)


def run_nightly_now(env: dict[str, str], api: str, dataset: str) -> None:
    """Start a run of ``dataset``'s nightly ingest deployment now, as its schedule would,
    with the ``prefect`` CLI of this interpreter's environment (it does not wait for the
    run)."""
    full = {**os.environ, **env, "PREFECT_API_URL": api}
    out = subprocess.run([str(Path(sys.executable).parent / "prefect"), "deployment", "run",
                          f"ingest/{dataset}-nightly"], env=full, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
