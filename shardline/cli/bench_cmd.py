"""``shardline bench``: the benchmarks (``shardline.bench``, the checkout's ``bench/``).

    shardline bench loader  [--quick] [--json]    loader throughput, cold cache, memory
    shardline bench convert [--quick] [--json]    Spark conversion vs single-process pyarrow
    shardline bench pipeline [--rounds N] [--json] upload -> version -> training started
    shardline bench gpu     [--json]              GPU feed (CPU run without CUDA)
    shardline bench learning                      learning quality (bench/learning.py)
    shardline bench scale   [--quick] [--json]    stage costs vs history and new data
    shardline bench all     [--quick] [--json]    the above but learning, then the report

Results go to ``bench/results/*.json`` (of the checkout; from an installed wheel, of the
current folder); ``all`` without ``--quick`` also rewrites ``docs/benchmarks.md`` and its
plots. With ``--json`` stdout carries exactly one JSON
object (tables go to stderr).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import typer

QuickOpt = typer.Option(False, "--quick", help="CI-sized run (about a minute)")
JsonOpt = typer.Option(False, "--json", help="print one JSON object on stdout")


def _bench_env() -> None:
    """Quiet the benchmarks' dependencies (analytics, network look-ups)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def _emit(result: dict[str, Any], as_json: bool, printer: Any) -> None:
    printer(result, stderr=as_json)
    if as_json:
        print(json.dumps(result, default=str))


def _loader(quick: bool, scale: float = 1.0, rounds: int | None = None) -> dict[str, Any]:
    from shardline.bench import loader
    from shardline.bench.common import write_result

    r = loader.run(quick, scale, rounds)
    write_result("loader-quick" if quick else "loader", r)
    return r


def _convert(quick: bool) -> dict[str, Any]:
    from shardline.bench import convert
    from shardline.bench.common import write_result

    r = convert.run(quick)
    write_result("convert-quick" if quick else "convert", r)
    return r


def _pipeline(quick: bool, rounds: int | None = None, drop_mb: float = 10.0,
              debounce: int = 1) -> dict[str, Any]:
    from shardline.bench import pipeline
    from shardline.bench.common import write_result

    r = pipeline.run(rounds or (2 if quick else 3), drop_mb, debounce)
    write_result("pipeline-quick" if quick else "pipeline", r)
    return r


def _gpu(quick: bool) -> dict[str, Any]:
    from shardline.bench import gpu_feed
    from shardline.bench.common import write_result

    r = gpu_feed.run(rounds=3 if quick else 5, rows=10_000 if quick else 50_000)
    write_result("gpu-quick" if quick else "gpu", r)
    return r


def _scale(quick: bool, report: bool, budget_min: float | None = 25.0) -> dict[str, Any]:
    from shardline.bench import scale
    from shardline.bench.common import write_result

    r = scale.run(quick, budget_s=None if budget_min is None else budget_min * 60)
    write_result("scale-quick" if quick else "scale", r)
    if report:
        from shardline.bench import scale_report

        r["report"] = str(scale_report.write_section(r))
    return r


def register(app: typer.Typer) -> None:
    bench = typer.Typer(no_args_is_help=True, help="Benchmarks (bench/): loader, convert, "
                        "gpu, learning, all; results in bench/results/.")
    app.add_typer(bench, name="bench")

    @bench.command("loader")
    def loader_cmd(quick: bool = QuickOpt, as_json: bool = JsonOpt,
                   scale: float = typer.Option(1.0, "--scale", help="multiply set sizes"),
                   rounds: int = typer.Option(None, "--rounds", help="interleaved rounds "
                                              "(default 5, 3 with --quick)")) -> None:
        """Loader throughput (S and L sets), first epoch from S3, peak memory."""
        _bench_env()
        from shardline.bench.loader import print_tables

        _emit(_loader(quick, scale, rounds), as_json, print_tables)

    @bench.command("convert")
    def convert_cmd(quick: bool = QuickOpt, as_json: bool = JsonOpt) -> None:
        """Spark conversion at local[1]/local[2] vs single-process pyarrow."""
        _bench_env()
        from shardline.bench.convert import print_tables

        _emit(_convert(quick), as_json, print_tables)

    @bench.command("pipeline")
    def pipeline_cmd(quick: bool = QuickOpt, as_json: bool = JsonOpt,
                     rounds: int = typer.Option(None, "--rounds", help="uploads, one after "
                                                "another (default 3, 2 with --quick)"),
                     drop_mb: float = typer.Option(10.0, "--drop-mb", help="size of each drop"),
                     debounce: int = typer.Option(1, "--debounce", help="seconds the ingest "
                                                  "trigger waits (1: a reactive window, the run "
                                                  "due 1 s after the first upload; shardline "
                                                  "deploy's default 10 s is a debounce)"),
                     ) -> None:
        """Upload -> event -> version -> training started on the embedded stack, per hop."""
        _bench_env()
        from shardline.bench.pipeline import print_tables

        _emit(_pipeline(quick, rounds, drop_mb, debounce), as_json, print_tables)

    @bench.command("gpu")
    def gpu_cmd(quick: bool = QuickOpt, as_json: bool = JsonOpt) -> None:
        """ResNet-18 fed by the loader vs synthetic on-device batches (CPU without CUDA)."""
        _bench_env()
        from shardline.bench.common import print_table

        r = _gpu(quick)
        _emit(r, as_json, lambda res, stderr: print_table(
            f"GPU feed on {res['device']}", ["feed", "samples/s", "data wait"],
            [(n, res["samples_per_s"][n], res["data_wait_share"][n])
             for n in res["samples_per_s"]], stderr))

    @bench.command("learning", context_settings={"allow_extra_args": True,
                                                 "ignore_unknown_options": True})
    def learning_cmd(ctx: typer.Context) -> None:
        """Learning quality (bench/learning.py; extra arguments are passed through)."""
        _bench_env()
        from shardline.bench import learning

        raise typer.Exit(learning.main(list(ctx.args)))

    @bench.command("scale")
    def scale_cmd(quick: bool = QuickOpt, as_json: bool = JsonOpt,
                  report: bool = typer.Option(None, "--report/--no-report", help="rewrite the "
                                              "scale section of docs/benchmarks.md and its "
                                              "plots (default: without --quick only)"),
                  budget_min: float = typer.Option(25.0, "--budget-min", help="run the largest "
                                                   "rows point only if the run's estimate "
                                                   "stays within this many minutes"),
                  ) -> None:
        """Each stage's time, CPU, peak memory and object-store traffic as the history
        (versions) and the new data (rows, classes) grow; slopes and O(new)/O(history)."""
        _bench_env()
        from shardline.bench.scale_report import print_tables

        _emit(_scale(quick, (not quick) if report is None else report, budget_min), as_json,
              print_tables)

    @bench.command("all")
    def all_cmd(quick: bool = QuickOpt, as_json: bool = JsonOpt) -> None:
        """loader + convert + pipeline + gpu; without --quick also rewrites
        docs/benchmarks.md."""
        _bench_env()
        from shardline.bench import convert, loader, pipeline, report

        parts = {"loader": _loader(quick), "convert": _convert(quick),
                 "pipeline": _pipeline(quick), "gpu": _gpu(quick)}
        loader.print_tables(parts["loader"], stderr=as_json)
        convert.print_tables(parts["convert"], stderr=as_json)
        pipeline.print_tables(parts["pipeline"], stderr=as_json)
        if not quick:
            path = report.write_report()
            print(f"report: {path}", file=sys.stderr)
        bars = [b for p in parts.values() for b in p.get("bars", [])]
        report.print_bars(bars, stderr=as_json)
        if as_json:
            print(json.dumps({**parts, "bars": bars}, default=str))
