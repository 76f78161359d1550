"""What the command modules share: common options, the environment set-up, the ingest run.

Kept out of :mod:`shardline.cli.main` so that command modules never import ``main`` (which
imports them): ``python -m shardline.cli.main`` then loads every module once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import typer
from rich.markup import escape

from shardline.cli import preflight
from shardline.cli.output import err, out

ConfigOpt = typer.Option(..., "--config", "-c", help="dataset TOML file")
JsonOpt = typer.Option(False, "--json", help="print one JSON object on stdout")


def _escape(text: str) -> str:
    return escape(text)


def use_stack_env() -> dict[str, str] | None:
    """When an embedded stack is up, set its endpoints for variables not already set."""
    from shardline.infra.stack_state import resolve_home, running_stack, stack_env

    state = running_stack(resolve_home())
    if state is None:
        return None
    env = stack_env(state)
    for k, v in env.items():
        os.environ.setdefault(k, v)
    return env


def quiet_dependencies() -> None:
    """What the command line (and only it: never library code) does about dependencies'
    noise, before any command runs. Variables a user set win.

    - ``GRPC_VERBOSITY=ERROR``: gRPC core (the Spark Connect client) logs at INFO
      "Other threads are currently calling into gRPC, skipping fork() handlers" on every
      ``fork()`` while a Spark Connect call is in flight; read when gRPC starts, so set
      before pyspark is imported. Fork support itself stays as it is (the stack's processes
      inherit this environment and the warm flow-run server forks children that use gRPC).
    - warnings filters: PySpark's FutureWarning about pandas 3 and DeprecationWarnings of
      dependencies (Python shows those only in ``__main__``'s code by default, but
      ``python -m shardline.cli.main`` is ``__main__``).
    - Prefect and great-expectations analytics off (no network here; each would log errors);
      great-expectations' INFO logs ("Created temporary directory ... for ephemeral docs
      site" on every validation) below WARNING are dropped.
    """
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark(\..*)?$")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    # this one sets its own level to INFO when imported: a filter outlives that
    gx_base = logging.getLogger("great_expectations.data_context.types.base")
    if not any(isinstance(f, _WarningsUp) for f in gx_base.filters):
        gx_base.addFilter(_WarningsUp())


class _WarningsUp(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


def prepare() -> None:
    """Quiet third-party noise, read ``.env`` (``SHARDLINE_ENV_FILE``) into the variables
    left unset, then pick up the embedded stack's endpoints for those still unset."""
    from shardline.core.settings import load_env_file

    quiet_dependencies()
    load_env_file()
    use_stack_env()


def run_ingest(config: str, quiet: bool = False, full: bool = False,
               stages: bool = False) -> dict[str, Any]:
    """Run the ingest flow once (used by ``ingest`` and ``demo``). ``stages``: where the
    console is no terminal (CI, a Prefect worker's log), print each stage's line on stdout
    as it ends (``detect: 3 new objects ...``); a terminal shows them in the spinner."""
    from shardline.flows.ingest import ingest as ingest_flow

    with err.status(f"ingesting with {config} (Prefect: "
                    f"{os.environ.get('PREFECT_API_URL') or 'ephemeral'})",
                    spinner="dots") as status, _run_logs_off_console(status, stages):
        if quiet:
            logging.getLogger("prefect").setLevel(logging.WARNING)
        return dict(ingest_flow(config=str(config), full=full))


# Warnings of our own code during the last CLI ingest (kept off the console while it runs).
RUN_WARNINGS: list[str] = []


class _RunLogs(logging.Filter):
    """Keeps flow- and task-run records off the console (they still reach the Prefect API
    and its UI): the command prints its outcome, or one error line. On a terminal the
    spinner shows the latest stage's message; in a pipe, with ``stages``, each stage's own
    line (not Prefect's engine lines) is printed once on stdout, stderr staying for the
    error line."""

    def __init__(self, status: Any, stages: bool = False) -> None:
        super().__init__()
        self.status, self.stages = status, stages
        self.last: logging.LogRecord | None = None   # a record reaches each console handler

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("shardline") and record.levelno >= logging.WARNING:
            RUN_WARNINGS.append(" ".join(record.getMessage().split()))
            return False   # printed after the run, or summed up in its error line
        if not record.name.startswith(("prefect.flow_runs", "prefect.task_runs")):
            return True
        if record.levelno == logging.INFO and err.is_terminal:
            task = getattr(record, "task_run_name", None) or ""
            text = " ".join(record.getMessage().split())[:100]
            self.status.update(f"{task}: {escape(text)}" if task else escape(text))
        elif self.stages and record is not self.last:
            self.last = record
            line = stage_line(record)
            if line:   # not print(): a flow with log_prints sends print() to logging
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
        return False


def stage_line(record: logging.LogRecord) -> str | None:
    """``stage: message`` for an INFO line a stage task logged itself, else None (Prefect's
    engine lines, flow-level lines, warnings: those go to the UI or the error line)."""
    stage = getattr(record, "task_name", None)
    if record.levelno != logging.INFO or not stage or _from_prefect(record.pathname):
        return None
    text = " ".join(record.getMessage().split())
    return f"{stage}: {text.removeprefix(f'{stage}: ')}"


def _from_prefect(path: str) -> bool:
    import prefect

    return path.startswith(os.path.dirname(prefect.__file__) + os.sep)


@contextlib.contextmanager
def _run_logs_off_console(status: Any, stages: bool = False) -> Iterator[None]:
    """Without --debug, :class:`_RunLogs` on the console handlers (the root logger's)."""
    from shardline.cli.output import debug

    if debug():
        yield
        return
    handlers = [h for h in logging.getLogger().handlers
                if isinstance(h, logging.StreamHandler)]
    quiet = _RunLogs(status, stages)
    RUN_WARNINGS.clear()
    for h in handlers:
        h.addFilter(quiet)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(quiet)


def check_ingest(config: str) -> None:
    """Everything an ingest run needs, checked before its flow run is created."""
    from shardline.core.config import StoreSettings
    from shardline.resources import ensure_extra

    ensure_extra("shardline ingest", "ingest")   # a reader's install has no Spark, Prefect, GX

    preflight.config(config)
    preflight.s3(StoreSettings.from_env())
    preflight.prefect()
    preflight.spark()


def print_ingest(r: dict[str, Any]) -> None:
    verb = "published" if r["created"] else "already published as"
    rules = ", ".join(f"{k}: {v}" for k, v in r["quarantine_by_rule"].items())
    why = f" ({_escape(rules)})" if rules else ""   # an already-published batch: no rules
    out.print(f"[bold green]{r['dataset']}[/] {verb} [bold]version {r['version']}[/]: "
              f"{r['rows_published']} rows in {r['shards']} new shards, "
              f"{r['rows_quarantined']} quarantined{why}\n"
              f"  manifest {r['manifest']}", soft_wrap=True)


