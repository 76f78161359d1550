"""``shardline up`` / ``down`` / ``status``: the embedded stack (see :mod:`infra.stack`)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from shardline.cli.output import err, fail, is_tty, out
from shardline.core.errors import ShardlineError
from shardline.infra import stack
from shardline.infra.snapshot import SnapshotSummary
from shardline.infra.stack_state import StackConfig, StackState, resolve_home, stack_env
from shardline.resources import default_example_config

HomeOpt = typer.Option(None, "--home", help="stack folder (logs, state, snapshot) "
                       "(env SHARDLINE_HOME, default ./.shardline)")
S3PortOpt = typer.Option(None, "--s3-port", help="S3 (moto) port "
                         "(env SHARDLINE_S3_PORT, default 9310)")
PrefectPortOpt = typer.Option(None, "--prefect-port", help="Prefect server port "
                              "(env SHARDLINE_PREFECT_PORT, default 4200)")
SparkPortOpt = typer.Option(None, "--spark-port", help="Spark Connect port "
                            "(env SHARDLINE_SPARK_PORT, default 15002)")
BucketOpt = typer.Option(None, "--bucket", help="bucket created on up "
                         "(env SHARDLINE_BUCKET, default shardline)")
DiscardOpt = typer.Option(False, "--discard", help="do not save the buckets: objects "
                          "written since up are dropped")
SparkWorkersOpt = typer.Option(None, "--spark-workers", help="start a standalone Spark "
                               "master and N workers (env SHARDLINE_SPARK_WORKERS, default 0: "
                               "local mode)")
JsonOpt = typer.Option(False, "--json", help="print one JSON object on stdout")
DEFAULT_CONFIG = default_example_config()   # examples/digits.toml (checkout or wheel)
ConfigOpt = typer.Option(DEFAULT_CONFIG, "--config", "-c", envvar="SHARDLINE_CONFIG",
                         help="dataset TOML whose flows are deployed", exists=True,
                         dir_okay=False)
DeployOpt = typer.Option(True, "--deploy/--no-deploy",
                         help="deploy the flows to the stack's Prefect server")
EnvOpt = typer.Option(False, "--env", help="print `export VAR=value` lines for clients")


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _counts(s: SnapshotSummary) -> str:
    return f"{s.objects} objects ({_size(s.bytes)}) in {s.buckets} bucket(s)"


def _table(st: dict[str, Any]) -> Table:
    table = Table(show_edge=False)
    for col in ("service", "state", "pid", "url"):
        table.add_column(col, overflow="fold")   # never cut a value with an ellipsis
    table.add_column("log", overflow="fold")
    for name, s in st["services"].items():
        state = ("[green]healthy[/]" if s["healthy"] else "[yellow]not answering[/]") \
            if s["alive"] else "[red]dead[/]"
        table.add_row(name, state, str(s["pid"]), s["url"], s["log"])
    return table


def _state_word(s: dict[str, Any]) -> str:
    return ("healthy" if s["healthy"] else "not answering") if s["alive"] else "dead"


def _endpoints(st: dict[str, Any]) -> list[tuple[str, str]]:
    return [("S3 endpoint", st["s3_endpoint"]), ("bucket", st["bucket"]),
            ("Prefect API", st["prefect_api_url"]), ("Prefect UI", st["prefect_ui_url"]),
            ("Spark Connect", st["spark_remote"]), ("Prefect DB", str(st.get("database", "?")))]


def _deployed(api: str | None) -> dict[str, Any] | None:
    """dataset -> its deployments on ``api`` (None: no API, or it did not answer)."""
    if not api:
        return None
    from shardline.infra.deployments import datasets

    try:
        return {ds: [d.to_dict() for d in deps] for ds, deps in datasets(api).items()}
    except Exception as exc:   # noqa: BLE001 - a listing is not worth failing status for
        err.print(escape(f"could not list the deployed datasets on {api}: {exc}"),
                  soft_wrap=True)
        return None


def _how(d: dict[str, Any]) -> str:
    what = [f"cron {d['schedule']} UTC"] if d["schedule"] else []
    what += [f"trigger {t!r}" for t in d["triggers"]]
    return "; ".join(what) + (" (paused)" if d["paused"] else "")


def _print_datasets(deployed: dict[str, Any] | None) -> None:
    if deployed is None:
        return
    if not is_tty():
        print("dataset\tdeployment\tpool\tstarts")
        for ds, deps in deployed.items():
            for d in deps:
                print(f"{ds}\t{d['name']}\t{d['work_pool']}\t{_how(d)}")
        return
    if not deployed:
        out.print("  no dataset deployed (`shardline deploy -c DATASET.toml`)")
        return
    table = Table(show_edge=False)
    for col in ("dataset", "deployment", "pool", "starts"):
        table.add_column(col, overflow="fold")
    for ds, deps in deployed.items():
        for d in deps:
            table.add_row(escape(ds), escape(d["name"]), escape(d["work_pool"]),
                          escape(_how(d)))
    out.print(table)


def _print_status(st: dict[str, Any]) -> None:
    """A table on a terminal; in a pipe, tab-separated rows with every value in full."""
    if not is_tty():
        print(f"stack\t{st['home']}\tstarted {st['started_at']}\tphase {st['phase']}")
        print("service\tstate\tpid\turl\tlog")
        for name, s in st["services"].items():
            print(f"{name}\t{_state_word(s)}\t{s['pid']}\t{s['url']}\t{s['log']}")
        for label, value in _endpoints(st):
            print(f"{label}\t{value}")
        _print_datasets(st.get("datasets"))
        return
    out.print(f"stack in [bold]{escape(str(st['home']))}[/] (started {st['started_at']}, "
              f"phase {st['phase']})", soft_wrap=True)
    out.print(_table(st))
    for label, value in _endpoints(st):
        out.print(f"  {label:<14} {escape(str(value))}", soft_wrap=True)
    _print_datasets(st.get("datasets"))


def bin_dir() -> Path:
    """The folder of the interpreter running this command (a venv's ``bin``), not resolved:
    a venv's python is a link to the base interpreter, whose folder has no ``shardline``."""
    return Path(sys.executable).absolute().parent


def command_path() -> str:
    """How to call ``shardline`` from any shell: the script beside the interpreter when it is
    there (a venv, active or not), else the bare name."""
    script = bin_dir() / "shardline"
    return str(script) if script.is_file() else "shardline"


def env_exports(env: dict[str, str], home: Path) -> str:
    """``export`` lines that work in a shell where no venv is active: absolute paths only
    (the venv's ``bin`` first on ``PATH``, so ``shardline`` and ``prefect`` resolve to this
    installation), the stack's endpoints and keys, and its home folder."""
    lines = [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    lines.append(f"export SHARDLINE_HOME={shlex.quote(str(home))}")
    if sys.prefix != sys.base_prefix:
        lines.append(f"export VIRTUAL_ENV={shlex.quote(sys.prefix)}")
    lines.append(f'export PATH={shlex.quote(str(bin_dir()))}:"$PATH"')
    return "\n".join(lines)


def _fail(exc: Exception) -> None:
    fail(exc)


def up(home: Path | None = HomeOpt, s3_port: int | None = S3PortOpt,
       prefect_port: int | None = PrefectPortOpt, spark_port: int | None = SparkPortOpt,
       bucket: str | None = BucketOpt, config: Path = ConfigOpt,
       deploy: bool = DeployOpt, spark_workers: int | None = SparkWorkersOpt) -> None:
    """Start the embedded stack in the background: S3 (moto), Prefect server + worker,
    Spark Connect; then deploy the flows for --config (nightly, on-upload, on-publish).

    Loads the buckets saved by the last `down` and creates the default bucket.
    """
    try:
        cfg = StackConfig.resolve(home, {"s3": s3_port, "prefect": prefect_port,
                                         "spark": spark_port}, bucket,
                                    spark_workers=spark_workers)
        with err.status(f"starting {', '.join(s.name for s in stack.service_specs(cfg))} "
                        f"in {cfg.home}", spinner="dots"):
            result = stack.up(cfg)
    except ShardlineError as exc:
        _fail(exc)
    if result.already_running:
        out.print(f"[yellow]already up[/] in {cfg.home}; nothing changed "
                  "(`shardline down` stops it)")
    else:
        out.print(f"[bold green]stack up[/] in {result.seconds:.1f}s")
        if result.restored is not None:
            out.print(f"restored {_counts(result.restored)} from {result.restored.path} "
                      f"(saved {result.restored.taken_at})")
            if result.restored.etag_changed:
                out.print(f"[yellow]{len(result.restored.etag_changed)} object(s) got a new "
                          f"ETag[/], e.g. {result.restored.etag_changed[:3]}")
    if deploy:
        _deploy(result.state, config)
    _print_status(stack.status(cfg.home))
    out.print(f"clients: eval \"$({shlex.quote(command_path())} status --env --home "
              f"{shlex.quote(str(cfg.home))})\"", soft_wrap=True, markup=False)


def _deploy(state: StackState, config: Path) -> None:
    from shardline.core.config import StoreSettings
    from shardline.infra.deploy import DeploySpec, deploy

    try:
        with err.status(f"deploying flows for {config}", spinner="dots"):
            names = deploy(DeploySpec(config=config, api_url=state.prefect_api_url),
                           StoreSettings.from_env(stack_env(state)))
    except ShardlineError as exc:
        _fail(exc)
    out.print(f"deployed {', '.join(names)} (dataset config {config})")


def down(home: Path | None = HomeOpt, discard: bool = DiscardOpt) -> None:
    """Save every bucket to <home>/s3-snapshot, then stop the stack's processes.

    The S3 server keeps objects only in memory: the snapshot is what the next `up` loads.
    With --discard nothing is saved and the next `up` loads the previous snapshot.
    """
    where = resolve_home(home)
    try:
        with err.status(f"saving buckets and stopping the stack in {where}", spinner="dots"):
            result = stack.down(where, discard=discard)
    except ShardlineError as exc:
        _fail(exc)
    if not result.was_running:
        out.print(f"no stack in {where}; nothing to stop")
        return
    if result.snapshot is not None:
        s = result.snapshot
        out.print(f"saved {_counts(s)} to {s.path} in {s.seconds:.1f}s")
    for note in result.notes:
        out.print(f"[yellow]{note}[/]")
    for name, seconds in result.stop_seconds.items():
        how = " [red](killed)[/]" if name in result.killed else ""
        out.print(f"stopped {name} in {seconds:.1f}s{how}")


def status(home: Path | None = HomeOpt, as_json: bool = JsonOpt,
           as_env: bool = EnvOpt) -> None:
    """What runs where: endpoints, bucket, each service alive or not, pids, logs, and the
    datasets deployed on the stack's Prefect server with their deployments.

    Exits 1 when no stack runs under the home folder (or a service died).
    """
    where = resolve_home(home)
    try:
        st = stack.status(where)
    except ShardlineError as exc:
        _fail(exc)
    if st["running"] and not as_env:
        st["datasets"] = _deployed(st.get("prefect_api_url"))
    if as_json:
        print(json.dumps(st))
    elif as_env:
        state = stack.running_stack(where)
        if state is not None:
            print(env_exports(stack_env(state), where))
        else:
            err.print(escape(f"no running stack in {where}; nothing exported "
                             "(`shardline up` starts one)"), soft_wrap=True)
    elif not st["services"]:
        out.print(f"no stack in {where} (`shardline up` starts one)")
        api = os.environ.get("PREFECT_API_URL")
        if api:     # a server of one's own (compose, Kubernetes): its datasets
            out.print(f"datasets deployed on {api}:", soft_wrap=True, markup=False)
            _print_datasets(_deployed(api))
    else:
        _print_status(st)
    if not st["running"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the `up`, `down` and `status` commands to ``app``."""
    app.command("up")(up)
    app.command("down")(down)
    app.command("status")(status)
