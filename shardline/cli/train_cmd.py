"""``shardline train``: train on a dataset version and continue the promoted model.

By default it runs the Prefect ``train`` flow (the run, its logs and artifacts show in the
UI: the stack's server, or Prefect's ephemeral mode). ``--no-flow`` calls the trainer
directly, as does any launch under torchrun (each rank must not create its own flow run).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from typing import Any

import typer


def _train(config: str, version: int | None, use_flow: bool,
           processes: int = 1) -> dict[str, Any]:
    """Train; on a terminal a single process's epochs show as a bar
    (:mod:`shardline.cli.progress`; torchrun ranks print their own lines)."""
    from shardline.cli.progress import epoch_bar
    from shardline.core.config import StoreSettings, load_config

    cfg = load_config(config)
    under_torchrun = int(os.environ.get("WORLD_SIZE", "1")) > 1
    bar = epoch_bar(cfg.train.epochs, f"training {cfg.dataset.name}") \
        if processes == 1 and not under_torchrun else contextlib.nullcontext()
    if use_flow and not under_torchrun:
        from shardline.flows.train import train as train_flow

        with bar:
            return dict(train_flow(config=config, version=version, processes=processes))
    from shardline.core.manifest import resolve_version
    from shardline.core.store import ObjectStore
    from shardline.tasks.launch import processes_for, train_ranks
    from shardline.trainer.run import train

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")
    store = ObjectStore(StoreSettings.from_env())
    ranks = 1 if under_torchrun else processes_for(processes)
    if ranks > 1:       # torchrun ranks on this machine, each calling the trainer
        number = resolve_version(store, cfg.dataset.prefix, version).version
        return train_ranks(cfg, store.settings, number, ranks,
                           log=lambda line: print(line, file=sys.stderr)).to_dict()
    with bar:
        return train(cfg, store, version).to_dict()


def check_train(config: str, version: int | None, use_flow: bool) -> None:
    """What a training run needs, checked before its flow run is created: the config, S3
    and the bucket, the dataset version, the Prefect API (for a flow run)."""
    from shardline.cli import preflight

    preflight.config_and_store(config, versions=True, version=version)
    if use_flow:
        preflight.prefect()


def held_out(r: dict[str, Any]) -> tuple[str, str, str]:
    """The held-out figure a run's line shows, before (the live model) and after
    (``trainer.result.held_out_primary``), as text."""
    from shardline.trainer.result import held_out_primary

    def text(x: Any) -> str:
        return "n/a" if not isinstance(x, int | float) else f"{x:.4f}"

    name, before, after = held_out_primary(r.get("eval"), r.get("eval_before"),
                                           r.get("accuracy_before"), r.get("eval_accuracy"))
    return name, text(before), text(after)


def print_result(r: dict[str, Any]) -> None:
    from rich.markup import escape

    from shardline.cli.output import out

    if "already_learned" in r:      # nothing trained: the promoted model learned it
        out.print(escape(str(r["already_learned"])))
        return
    verdict = "[bold green]promoted[/]" if r["promoted"] else "[bold yellow]not promoted[/]"
    name, before, after = held_out(r)
    out.print(f"[bold]{r['dataset']}[/] v{r['dataset_version']} -> model {r['model_version']} "
              f"(parent {r['parent_model_version']}): {verdict}\n"
              f"  held-out {name} {before} -> {after}; {escape(str(r['decision']))}\n"
              f"  {r['new_samples']} new + {r['replay_samples']} replay samples x {r['epochs']} "
              f"epochs; loader {r['loader_samples_per_s']:,.0f} samples/s, data wait "
              f"{100 * r['data_wait_share']:.1f} %\n  checkpoint {r['checkpoint']}")


def register(app: typer.Typer) -> None:
    @app.command()
    def train(
        config: str = typer.Option(..., "--config", "-c", help="dataset TOML file"),
        version: int = typer.Option(None, "--version", help="dataset version (default: latest)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
        use_flow: bool = typer.Option(True, "--flow/--no-flow",
                                      help="run as the Prefect `train` flow (artifacts in the "
                                           "UI) or call the trainer directly"),
        processes: int = typer.Option(1, "--processes", "-p", min=0,
                                      help="training processes on this machine (torchrun "
                                           "ranks, DDP: one per GPU; gloo on the CPU); 0: one "
                                           "per visible GPU"),
    ) -> None:
        """Train on a dataset version, continuing from the promoted model."""
        from shardline.cli.common import prepare
        from shardline.cli.output import fail
        from shardline.core.errors import ShardlineError

        prepare()
        try:
            check_train(config, version, use_flow)
            result = _train(config, version, use_flow, processes)
        except ShardlineError as exc:
            fail(exc, as_json)
        if as_json:
            print(json.dumps(result))
        else:
            print_result(result)
