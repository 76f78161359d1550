"""``shardline demo``: the whole story on the embedded stack, in one command.

1. start the stack (S3, Prefect server + worker + deployments, Spark Connect, the SQS
   consumer that turns bucket notifications into Prefect events), unless it is up;
2. upload part 1 of the demo data and run the ingest flow directly (the CLI path); the
   published event starts the ``<dataset>-on-publish`` deployment, which the demo waits for;
3. upload part 2 and touch nothing else: S3 notification -> SQS -> ``s3.object.created``
   -> ``<dataset>-on-upload`` -> version 2 -> ``shardline.dataset.published`` ->
   ``<dataset>-on-publish`` (incremental, from model 1); the demo waits and reports each hop.
Running it again uploads the same bytes (same ETags): nothing new is published.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import typer

from shardline.infra.waiting import wait_for
from shardline.resources import default_example_config

DEFAULT_CONFIG = default_example_config()   # examples/digits.toml (checkout or wheel)
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def train_run(api: str, version: int, since: datetime) -> dict[str, Any] | None:
    """The newest ``train`` flow run for dataset ``version`` created after ``since``, if any.

    Prefect's database outlives the S3 objects (``shardline down --discard``, a deleted
    snapshot), so runs of an earlier demo for the same version number may still be there."""
    body = {"flows": {"name": {"any_": ["train"]}}, "sort": "EXPECTED_START_TIME_DESC",
            "limit": 50}
    runs = httpx.post(f"{api}/flow_runs/filter", json=body, timeout=10).json()
    return next((r for r in runs if r["parameters"].get("version") == version
                 and datetime.fromisoformat(r["created"]) >= since), None)


def model_for(store: Any, cfg: Any, dataset_version: int) -> dict[str, Any] | None:
    from shardline.trainer.registry import ModelRegistry

    reg = ModelRegistry(store, cfg.dataset.name, cfg.train.registry_name)
    for n in reversed(reg.numbers()):
        try:
            meta = reg.meta(n)
        except Exception:  # a claimed number whose meta.json is not written yet
            continue
        if meta.get("dataset_version") == dataset_version:
            return meta
    return None


def report_training(api: str, store: Any, cfg: Any, version: int, t0: float,
                    since: datetime) -> None:
    """``t0``: monotonic time of the upload; ``since``: wall time of the upload (UTC)."""
    from shardline.cli.output import out

    wait_for(f"the training run for version {version}",
             lambda: train_run(api, version, since), 120)
    created = time.monotonic() - t0

    def finished() -> dict[str, Any]:
        r = train_run(api, version, since)
        return r if r is not None and r["state_type"] in TERMINAL else {}

    run = wait_for("training to finish", finished, 600)
    if run["state_type"] != "COMPLETED":
        out.print(f"[red]training run {run['name']} ended {run['state_type']}[/]")
        return
    meta = model_for(store, cfg, version) or {}
    after = (meta.get("metrics") or {}).get("after") or {}
    before = (meta.get("metrics") or {}).get("before") or {}
    gate = meta.get("gate") or {}
    out.print(f"  train run [bold]{run['name']}[/] (created {created:.1f}s after the upload): "
              f"model {meta.get('model_version')} from parent "
              f"{meta.get('parent_model_version')}, held-out accuracy "
              f"{_acc(before)} -> {_acc(after)}, "
              f"{'promoted' if gate.get('passed') else 'not promoted'} ({gate.get('reason')})")


def _acc(result: dict[str, Any]) -> str:
    value = result.get("accuracy")
    return "n/a" if value is None else f"{value:.4f}"


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(config: str = typer.Option(str(DEFAULT_CONFIG), "--config", "-c",
                                        help="dataset TOML (default: the digits example)")
             ) -> None:
        """Run the end-to-end demo on the embedded stack."""
        from shardline.cli.common import print_ingest, run_ingest, use_stack_env
        from shardline.cli.output import err, out
        from shardline.core.config import StoreSettings, load_config
        from shardline.core.manifest import list_versions
        from shardline.core.store import ObjectStore
        from shardline.infra import demo_data, stack
        from shardline.infra.deploy import DeploySpec, deploy
        from shardline.infra.stack_state import StackConfig

        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        with err.status("starting the embedded stack (S3, Prefect + worker, Spark Connect)"):
            state = stack.up(StackConfig.resolve()).state
        use_stack_env()
        cfg = load_config(config)
        store = ObjectStore(StoreSettings.from_env())
        with err.status("deploying the flows"):
            deploy(DeploySpec(config=Path(config), api_url=state.prefect_api_url),
                   store.settings)
        out.print(f"stack up: S3 {state.s3_endpoint}, Prefect UI {state.prefect_ui_url}, "
                  f"Spark {state.spark_remote}")
        api = state.prefect_api_url

        since = datetime.now(UTC)
        up = demo_data.upload_demo_part(store, cfg.dataset.incoming, 1)
        out.print(f"[bold]upload 1[/]: {up['objects']} object, {up['rows']} rows -> "
                  "ingest flow (direct run)")
        t0 = time.monotonic()
        r = run_ingest(config, quiet=True)
        if r["version"] is None:
            out.print(f"[yellow]{r['message']}[/]")
        else:
            print_ingest(r)
            # created by this run or by the on-upload run the same upload triggered (which
            # may win the race): either way the published event started a training run
            report_training(api, store, cfg, r["version"], t0, since)

        before = list_versions(store, cfg.dataset.prefix)
        since = datetime.now(UTC)
        up = demo_data.upload_demo_part(store, cfg.dataset.incoming, 2)
        t0 = time.monotonic()
        out.print(f"[bold]upload 2[/]: {up['objects']} objects, {up['rows']} rows -> S3 "
                  f"notification -> SQS -> event -> {cfg.dataset.name}-on-upload")
        from shardline.tasks.detect import detect
        if detect(store, cfg.dataset) is None:
            out.print("[yellow]these uploads were ingested before: nothing new[/]")
        else:
            v = wait_for("version 2 to be published", lambda: [
                x for x in list_versions(store, cfg.dataset.prefix) if x not in before], 300)[0]
            out.print(f"  version {v} published {time.monotonic() - t0:.1f}s after the upload")
            report_training(api, store, cfg, v, t0, since)
        out.print(f"\n[bold]Prefect UI:[/] {state.prefect_ui_url}  (flow runs; artifacts "
                  f"{cfg.dataset.name}-versions, -validation, -quarantine, -training, "
                  "-training-curve)\nstop the stack with: .venv/bin/shardline down")
