"""Conversion benchmark: N records (JSONL with base64 PNG, and Parquet with PNG bytes) ->
Arrow IPC shards, shardline's Spark stage at local[1] and local[2] against a single-process
pyarrow conversion of the same input, writing to local disk and to the S3 server.

    .venv/bin/python -m shardline.bench.convert [--quick] [--records N] [--json]
    .venv/bin/shardline bench convert [--quick] [--json]

The input is split over several objects (``--objects``, default 8), packed into Spark tasks
by size. One more cell converts the same records as ONE JSONL object on the S3 server at
local[1] and local[2]: the driver cuts it into byte-range slices (``tasks.split``), or it
would be a single task. Figures: rows/s and input MB/s per cell (median of
interleaved rounds), the split of a Spark run (JVM start, first job, conversion: session
check + Spark job + driver-side dedupe, validation with great-expectations).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shardline.bench import convert_spark as cs
from shardline.bench.common import (
    bar,
    interleaved,
    machine,
    median,
    moto_bucket,
    print_table,
    ratio,
    write_result,
)
from shardline.bench.convert_data import FORMATS, InputSpec, ensure_inputs
from shardline.bench.convert_ref import pyarrow_convert
from shardline.core.config import DatasetConfig, ImageSpec
from shardline.core.folder_store import FolderStore
from shardline.core.store import ObjectStore
from shardline.tasks.batch import Batch, Source
from shardline.tasks.convert.stage import Converted

IN = "incoming/bench-convert"


def dataset(spec: InputSpec) -> DatasetConfig:
    return DatasetConfig(name="bench-convert", incoming=f"{IN}/", image=ImageSpec(shape=spec.shape),
                         classes=tuple(str(i) for i in range(spec.classes)))


def _batch(fmt: str, keys: list[str], sizes: list[int]) -> Batch:
    return Batch(id=f"bench-{fmt}", sources=tuple(
        Source(k, "", s, fmt) for k, s in zip(keys, sizes, strict=True)))


class Cells:
    """One function per (target, format, contender), each timing one conversion pass."""

    def __init__(self, spec: InputSpec, paths: dict[str, list[Path]], store: ObjectStore,
                 servers: dict[str, cs.SparkServer], scratch: Path, prefix: str = IN) -> None:
        self.spec, self.store, self.servers, self.scratch = spec, store, servers, scratch
        self.cfg = dataset(spec)
        self.local = FolderStore(scratch / "local")
        self.keys = {f: [f"{prefix}/{f}/{p.name}" for p in ps] for f, ps in paths.items()}
        self.sizes = {f: [p.stat().st_size for p in ps] for f, ps in paths.items()}
        for f, ps in paths.items():
            for key, p in zip(self.keys[f], ps, strict=True):
                target = self.local.root / key
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, target)
                if store.head(key) is None:
                    store.put_bytes(key, p.read_bytes())
        self.extra: dict[str, list[dict[str, float]]] = {}
        self.last: dict[str, Converted] = {}
        self.validation: dict[str, dict[str, Any]] = {}

    def fns(self, target: str, plan: dict[str, list[str]]) -> dict[str, Callable[[], float]]:
        """``plan``: format -> contenders."""
        return {f"{target}/{fmt}/{c}": functools.partial(self.run, target, fmt, c)
                for fmt, contenders in plan.items() for c in contenders}

    def run(self, target: str, fmt: str, contender: str) -> float:
        """One pass; returns rows/s (input records / wall seconds) and cleans its output."""
        name, run_id = f"{target}/{fmt}/{contender}", uuid.uuid4().hex[:12]
        batch = _batch(fmt, self.keys[fmt], self.sizes[fmt])
        t0 = time.perf_counter()
        if contender == "pyarrow":
            out = f"bench-ref/{run_id}/"
            if target == "local":
                rows = pyarrow_convert(self.local.get_bytes, self.keys[fmt], fmt, self.cfg,
                                       self.local.put_bytes, out)
            else:
                rows = pyarrow_convert(self.store.get_bytes, self.keys[fmt], fmt, self.cfg,
                                       lambda k, b: self.store.put_bytes(k, b), out)
            timings: dict[str, float] = {}
        else:
            server = self.servers[contender]
            conv = cs.convert_on(server, self.local if target == "local" else self.store,
                                 self.cfg, batch, run_id)
            rows, timings, out = conv.rows_ok, conv.timings, f"{self.cfg.prefix}/staging/{run_id}/"
            self.last[name] = conv
        elapsed = time.perf_counter() - t0
        if rows != self.spec.records:
            raise RuntimeError(f"{name} converted {rows} of {self.spec.records} rows")
        self.extra.setdefault(name, []).append({"seconds": elapsed, **timings})
        if contender == "local[2]" and name not in self.validation:
            # untimed here; before _clean: validation reads the conversion's row files
            self.validation[name] = _validate_twice(self.cfg, self.last[name])
        self._clean(target, out)
        return self.spec.records / elapsed

    def _clean(self, target: str, prefix: str) -> None:
        if target == "local":
            shutil.rmtree(self.local.root / prefix, ignore_errors=True)
        else:
            self.store.delete(o.key for o in self.store.list(prefix))


def _validate_twice(cfg: DatasetConfig, conv: Converted) -> dict[str, Any]:
    """Seconds of the great-expectations suites on one conversion, twice (the process's
    first call includes importing great-expectations and building its context)."""
    from shardline.tasks.validate import run_suites

    times, ok = [], False
    for _ in range(2):
        t0 = time.perf_counter()
        ok, _ = run_suites(cfg, conv)
        times.append(time.perf_counter() - t0)
    return {"first_s": times[0], "warm_s": times[1], "success": ok}


def _validation(cells: Cells) -> dict[str, Any]:
    """The suites' seconds on the first local[2] result per cell (measured in ``run``,
    while its row files were still there)."""
    return {name.rsplit("/", 1)[0]: v for name, v in sorted(cells.validation.items())}


def _summary(spec: InputSpec, values: dict[str, list[float]], cells: Cells,
             input_mb: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, vals in values.items():
        target, fmt, contender = name.split("/")
        cell = out.setdefault(f"{target}/{fmt}", {})
        secs = [e["seconds"] for e in cells.extra[name]]
        split = {k: median([e[k] for e in cells.extra[name]])
                 for k in cells.extra[name][0] if k != "seconds"}
        cell[contender] = {"rows_per_s": median(vals), "input_mb_per_s":
                           median(vals) * input_mb[fmt] / spec.records,
                           "seconds": median(secs), "rounds": [round(v) for v in vals],
                           "split": split}
    for key, cell in out.items():
        ref = values[f"{key}/pyarrow"]
        for c in cell:
            cell[c]["vs_pyarrow"] = ratio(values[f"{key}/{c}"], ref)
        if "local[1]" in cell:
            cell["local2_vs_local1"] = ratio(values[f"{key}/local[2]"], values[f"{key}/local[1]"])
    return out


def run(quick: bool = False, records: int | None = None, objects: int = 8,
        rounds: int | None = None, log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)
        ) -> dict[str, Any]:
    t_start = time.perf_counter()
    spec = InputSpec(records or (8_000 if quick else 100_000), objects)
    paths = ensure_inputs(spec)
    input_mb = {f: sum(p.stat().st_size for p in ps) / 1e6 for f, ps in paths.items()}
    log(f"inputs ready: {spec.records} records x {len(spec.parts())} objects {input_mb}")
    with moto_bucket("shardline-bench-convert-") as (scratch, _, store), \
            contextlib.ExitStack() as stop:
        servers = cs.start_servers(["local[1]", "local[2]"], scratch)
        stop.callback(cs.stop_servers, servers)
        log("spark: " + ", ".join(f"{s.master} JVM {s.jvm_start_s:.1f}s first job "
                                  f"{s.first_job_s:.1f}s" for s in servers))
        cells = Cells(spec, paths, store, {s.master: s for s in servers}, scratch)
        n_local = rounds or 3
        n_s3 = rounds or (2 if not quick else 1)
        # local[1] only where its bar is (JSONL on local disk) in full runs: it is the
        # slowest contender and tells nothing new elsewhere.
        both, one = ["pyarrow", "local[1]", "local[2]"], ["pyarrow", "local[2]"]
        local = {"jsonl": both, "parquet": both if quick else one}
        values = interleaved(cells.fns("local", local), n_local,
                             lambda r: log(f"local disk: round {r + 1} of {n_local} done"))
        values |= interleaved(cells.fns("s3", {f: one for f in FORMATS}), n_s3,
                              lambda r: log(f"S3: round {r + 1} of {n_s3} done"))
        # the same records as one JSONL object: sliced by the driver into byte ranges
        big = InputSpec(spec.records, 1)
        big_cells = Cells(big, {"jsonl": ensure_inputs(big)["jsonl"]}, store,
                          {s.master: s for s in servers}, scratch, prefix=f"{IN}/one-object")
        big_values = interleaved(big_cells.fns("s3-1obj", {"jsonl": both}), n_s3,
                                 lambda r: log(f"S3, one object: round {r + 1} of {n_s3} done"))
        result: dict[str, Any] = {
            "part": "convert", "quick": quick, "machine": machine(), "records": spec.records,
            "objects": len(spec.parts()), "shape": list(spec.shape), "input_mb": input_mb,
            "output_mb": spec.records * (spec.shape[0] * spec.shape[1] * spec.shape[2]) / 1e6,
            "rounds": {"local": n_local, "s3": n_s3},
            "spark": {s.master: {"jvm_start_s": s.jvm_start_s, "first_job_s": s.first_job_s}
                      for s in servers},
            "cells": _summary(spec, values, cells, input_mb)
            | _summary(big, big_values, big_cells, input_mb),
            "validation": _validation(cells)}
    result["bars"] = bars(result)
    result["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    return result


def bars(r: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for fmt in FORMATS:
        cell = r["cells"][f"local/{fmt}"]
        out.append(bar(f"convert.local.{fmt}.local2_vs_pyarrow",
                       cell["local[2]"]["vs_pyarrow"], 0.5))
        if "local2_vs_local1" in cell:
            out.append(bar(f"convert.local.{fmt}.local2_vs_local1", cell["local2_vs_local1"],
                           1.0, op=">", note="local[2] faster than local[1]"))
    one = r["cells"].get("s3-1obj/jsonl")
    if one and "local2_vs_local1" in one:
        out.append(bar("convert.s3.one_jsonl_object.local2_vs_local1", one["local2_vs_local1"],
                       1.0, op=">", note="the input as one object, cut into slices"))
    return out


def print_tables(r: dict[str, Any], stderr: bool = False) -> None:
    rows = []
    for key, cell in r["cells"].items():
        for c in ("pyarrow", "local[1]", "local[2]"):
            if c in cell:
                v = cell[c]
                rows.append((f"{key} {c}", v["rows_per_s"], v["input_mb_per_s"], v["seconds"],
                             v["vs_pyarrow"], v["split"].get("spark_job_s"),
                             v["split"].get("dedupe_s")))
    print_table(f"conversion: {r['records']} records in {r['objects']} objects",
                ["cell", "rows/s", "input MB/s", "s", "x pyarrow", "spark job s", "dedupe s"],
                rows, stderr)
    print_table("spark start", ["master", "JVM start s", "first job s"],
                [(m, v["jvm_start_s"], v["first_job_s"]) for m, v in r["spark"].items()], stderr)
    print_table("bars", ["bar", "value", "target", "met"],
                [(b["name"], b["value"], f"{b['op']} {b['target']}", b["met"]) for b in r["bars"]],
                stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--objects", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    r = run(args.quick, args.records, args.objects, args.rounds)
    path = write_result("convert-quick" if args.quick else "convert", r)
    print_tables(r, stderr=args.json)
    print(json.dumps(r) if args.json else f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
