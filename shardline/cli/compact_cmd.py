"""``shardline compact``: rewrite a dataset's small shards into large ones as a new version.

Runs in this process against the bucket (no Prefect flow run, no Spark): it reads and writes
Arrow shards and commits one version document (``shardline.tasks.compact``).
"""

from __future__ import annotations

from typing import Any

import typer

from shardline.cli.common import ConfigOpt, JsonOpt, prepare
from shardline.cli.output import emit_json, fail, line, rows
from shardline.core.errors import ShardlineError

MinOpt = typer.Option(None, "--min-mb", min=0.0, help="shards under this many MiB are small "
                      "(default: half of --target-mb)")
TargetOpt = typer.Option(None, "--target-mb", min=0.0, help="size of a compacted shard in MiB "
                         "(default: dataset.shards.target_mb)")
DryOpt = typer.Option(False, "--dry-run", help="print the plan; write nothing")
SweepOpt = typer.Option(False, "--sweep", help="then sweep: remove objects that compactions "
                        "older than sweep_after_minutes replaced (as each ingest does)")

SHOWN = 20                 # groups listed in the plain output


def _print(r: dict[str, Any], grace: float) -> None:
    head = (f"{r['dataset']} v{r['parent']}: {r['shards_before']} shards; "
            f"{r['shards_in']} small shards of {r['batches']} batch(es) -> {r['shards_out']}")
    if r["dry_run"]:
        line(f"{head} (dry run: nothing written)")
    elif not r["created"]:
        line(f"{r['dataset']} v{r['parent']}: nothing to compact ({r['shards_before']} shards, "
             f"none in a group of small shards that would get fewer)")
        return
    else:
        line(f"{head}: version {r['version']} committed, {r['shards_after']} shards, "
             f"{r['rows_rewritten']} rows rewritten (same rows and ids, no new rows) in "
             f"{r['seconds']:.1f} s; the replaced shards stay readable for "
             f"{grace:g} min, then the sweep removes them")
    groups = r["groups"]
    if groups:
        rows([{**g, "key": ",".join(f"{k}={v}" for k, v in g["key"].items())}
              for g in groups[:SHOWN]], title="groups",
             columns=["batch", "key", "shards_in", "shards_out", "rows", "bytes_in"])
    if len(groups) > SHOWN:
        line(f"... and {len(groups) - SHOWN} more group(s) (--json lists all)")


def compact(config: str = ConfigOpt, min_mb: float = MinOpt, target_mb: float = TargetOpt,
            dry_run: bool = DryOpt, sweep: bool = SweepOpt, as_json: bool = JsonOpt) -> None:
    """Rewrite the small shards of published batches into large ones as a new version:
    the same rows and ids, new digests, no new rows for the trainer. Re-running when nothing
    is small publishes nothing."""
    prepare()
    from shardline.cli import preflight
    from shardline.tasks.compact import compact as run_compact

    try:
        cfg, store = preflight.config_and_store(config, versions=True)
        result = run_compact(store, cfg.dataset, min_mb=min_mb, target_mb=target_mb,
                             dry_run=dry_run).to_dict()
        if sweep and not dry_run:
            from shardline.tasks.sweep import sweep as run_sweep

            s = run_sweep(store, cfg.dataset)
            result["sweep"] = {"staging_runs": s.staging_runs, "orphans": s.orphans}
    except (ShardlineError, ValueError) as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(result)
        return
    _print(result, cfg.dataset.sweep_after_minutes)
    if "sweep" in result:
        line(f"sweep: removed {result['sweep']['orphans']} unreferenced object(s) past the "
             "grace period")


def register(app: typer.Typer) -> None:
    app.command()(compact)
