"""The ``shardline`` command line.

It sits on top of everything: it finds the embedded stack (when one is up under
``SHARDLINE_HOME``) and fills in the environment the flows read, checks what a command
needs before anything runs (config, bucket, dataset version, S3 / Prefect / Spark Connect
answering: :mod:`shardline.cli.preflight`), then runs flows through Prefect (the stack's
server, or Prefect's ephemeral mode when no stack is up). Variables already set in the
environment always win over the stack's.

Every error reaches the user as one line on stderr and a non-zero exit; ``--debug`` adds
the traceback.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from typing import Any

import typer

from shardline import __version__
from shardline.cli import preflight
from shardline.cli.common import (
    RUN_WARNINGS,
    ConfigOpt,
    JsonOpt,
    check_ingest,
    prepare,
    print_ingest,
    quiet_dependencies,
    run_ingest,
    use_stack_env,
)
from shardline.cli.examples import add_examples
from shardline.cli.output import emit_json, err, fail, one_line, out, rows, set_debug
from shardline.core.errors import ShardlineError, ValidationFailed

__all__ = ["ConfigOpt", "JsonOpt", "app", "err", "fail", "out", "prepare", "use_stack_env"]


class _App(typer.Typer):
    """Typer, but an error that escapes a command prints one line, not a traceback."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        quiet_dependencies()   # every command, before anything imports pyspark or gRPC
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:  # the last line of defence: one line, exit 1
            from shardline.cli.output import debug

            if debug():
                raise
            if isinstance(exc, ImportError):   # an extra not installed (a reader's install)
                exc = _extra_hint(exc, kwargs.get("args") or sys.argv[1:]) or exc
            err.print(f"[bold red]error:[/] {_escape(one_line(exc))}", soft_wrap=True)
            sys.exit(1)


# What a command needs in full, where that is more than the extra of the module it misses
# first (`ingest` runs a Prefect flow; `up` / `demo` run every service and flow).
COMMAND_EXTRAS = {"ingest": "ingest", "up": "all", "demo": "all", "deploy": "orchestrate",
                  "watch": "orchestrate"}


def _extra_hint(exc: ImportError, argv: list[str]) -> Exception | None:
    from shardline.resources import missing_extra

    command = next((a for a in argv if not a.startswith("-")), "")
    return missing_extra(exc, f"shardline {command}".strip(), COMMAND_EXTRAS.get(command))


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


app = _App(no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False,
           help="shardline: S3 uploads -> validated Arrow dataset versions -> training.")


def _version(value: bool) -> None:
    if value:
        print(f"shardline {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the version and exit"),
    debug: bool = typer.Option(False, "--debug", envvar="SHARDLINE_DEBUG",
                               help="show tracebacks with errors"),
) -> None:
    """shardline: S3 uploads -> validated Arrow dataset versions -> training."""
    set_debug(debug)


@app.command()
def ingest(config: str = ConfigOpt, as_json: bool = JsonOpt,
           full: bool = typer.Option(False, "--full", help="list all of the incoming prefix "
                                     "(a dataset with incremental_listing otherwise lists "
                                     "from the newest partition it knows)")) -> None:
    """Ingest what is new under the dataset's incoming prefix (one Prefect flow run)."""
    prepare()
    try:
        check_ingest(config)
        result = run_ingest(config, full=full, stages=not as_json)
    except ValidationFailed as exc:   # the line names the mistakes; the rows are one command away
        aside = len({m.group(1) for w in RUN_WARNINGS
                     if (m := re.search(r"(s3://\S+) \(ETag \S+\) is set aside", w))})
        again = [f"{aside} source(s) set aside: upload again (fixed) to retry"] if aside else []
        head = getattr(exc, "headline", None) or str(exc)
        line = ValidationFailed(f"{head} (rows: shardline quarantine -c {config})",
                                *getattr(exc, "details", []), *again)
        line.__cause__ = exc
        fail(line, as_json)
    except ShardlineError as exc:
        fail(exc, as_json)
    for w in RUN_WARNINGS:
        err.print(f"[yellow]warning:[/] {_escape(w)}", soft_wrap=True)
    if as_json:
        emit_json(result)
        return
    if result["version"] is None:
        out.print(f"[yellow]{_escape(result['message'])}[/]")
        return
    print_ingest(result)


@app.command()
def versions(config: str = ConfigOpt, as_json: bool = JsonOpt) -> None:
    """List the dataset's versions with their counts (latest first)."""
    prepare()
    from shardline.api.versions import version_rows

    try:
        cfg, store = preflight.config_and_store(config)
        table = version_rows(store, cfg.dataset.prefix)
    except ShardlineError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json({"dataset": cfg.dataset.name, "versions": table})
        return
    rows(table, title=f"{cfg.dataset.name} versions (s3://{store.bucket}/{cfg.dataset.prefix}/)",
         empty=f"no versions of {cfg.dataset.name} yet under "
               f"s3://{store.bucket}/{cfg.dataset.prefix}/")


def _register_optional() -> None:
    """Commands that live beside their own layer (stack, training, demo, data views)."""
    for name in ("stack_cmds", "deploy_cmd", "demo_cmd", "train_cmd", "watch_cmd", "bench_cmd",
                 "data_cmds", "models_cmd", "config_cmd", "compact_cmd", "migrate_cmd",
                 "verify_cmd", "upload_cmd", "delete_cmd", "retention_cmd", "example_cmd"):
        if importlib.util.find_spec(f"shardline.cli.{name}") is not None:
            importlib.import_module(f"shardline.cli.{name}").register(app)


def _one_line_summaries() -> None:
    """Command list summaries: the docstring's first sentence on one line (docstrings wrap
    at 100 columns; the list would otherwise break them mid-sentence)."""
    for info in app.registered_commands:
        if info.short_help is None and info.callback is not None:
            doc = (info.help or info.callback.__doc__ or "").strip().split("\n\n")[0]
            text = " ".join(doc.split())
            first = text.split(". ")[0].rstrip(".")
            info.short_help = first + "." if first else None


_register_optional()
_one_line_summaries()
add_examples(app)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
