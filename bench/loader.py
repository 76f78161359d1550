"""Loader benchmark: shardline's trainer loader against raw and classic ways of feeding
shuffled uint8 batches, on a small-image set S and a large-image set L.

    .venv/bin/python -m shardline.bench.loader [--quick] [--scale F] [--json]
    .venv/bin/shardline bench loader [--quick] [--json]

Every contender delivers the same thing (uint8 [256, C, H, W] tensor + int64 labels,
shuffled), with a warm cache, after a warm-up, timed per round; see ``bench.common`` for
the rounds/medians/ratios method and ``bench.contenders`` for what each contender does.
Then: the first epoch from the object store with a cold cache against raw GETs of the same
bytes (``bench.loader_cold``), one extra untimed pass per contender for peak memory, and
the loader on a float32 tensor field (13x32x32) against raw Arrow IPC reading the same
shards (set T, ``bench.loader_tensor``).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from shardline.bench import contenders as C
from shardline.bench import loader_cold, loader_tensor, peers
from shardline.bench.common import (
    PeakMemory,
    bar,
    interleaved,
    machine,
    median,
    moto_bucket,
    print_table,
    rate,
    ratio,
    write_result,
)
from shardline.bench.loader_data import SetFiles, SetSpec, pixels
from shardline.trainer.options import LoaderSpec

REFERENCE = "raw_arrow"
# Contenders whose package is not installed (pip install -e '.[bench]' torch==2.13.0).
MISSING = {name: pkg for name, pkg in (("webdataset", "webdataset"), ("hf_datasets", "datasets"))
           if importlib.util.find_spec(pkg) is None}


@dataclass(frozen=True)
class Plan:
    quick: bool
    scale: float
    rounds: int
    seconds: float        # timed seconds per contender and round (S; L gets 1.5x)
    cold: bool = True

    @classmethod
    def make(cls, quick: bool, scale: float = 1.0, rounds: int | None = None) -> Plan:
        return cls(quick, scale, rounds or (3 if quick else 5), 0.15 if quick else 0.5)

    def sets(self) -> list[SetSpec]:
        s, big, png = (10_000, 600, 256) if self.quick else (50_000, 5_000, 1_024)
        f = self.scale
        return [SetSpec("S", max(1_024, int(s * f)), (32, 32, 3), max(512, int(s * f))),
                SetSpec("L", max(300, int(big * f)), (224, 224, 3), max(256, int(png * f)))]


def _contenders(files: SetFiles, sets: dict[str, C.ShardlineSet]
                ) -> dict[str, tuple[Callable[[], Iterator[Any]], int]]:
    """name -> (batch generator factory, warm-up batches)."""
    shape = files.spec.shape
    w = 5 if files.spec.nbytes < 100_000 else 2
    found = {
        "numpy_ram": (lambda: C.numpy_gather(files.images, files.labels, shape), w),
        REFERENCE: (lambda: C.raw_arrow(files.raw, shape), w),
        "shardline": (lambda: sets["none"].batches(), w),
        "shardline_lz4": (lambda: sets["lz4"].batches(), w),
        "shardline_thread": (lambda: sets["thread"].batches(), w),
        "parquet": (lambda: C.parquet_row_groups(files.parquet, shape), w),
        "webdataset": (lambda: C.webdataset(files.wds, shape), w),
        "hf_datasets": (lambda: C.hf_datasets(files.hf, shape), 2),
        "png_dataloader_w0": (lambda: C.png_dataloader(files.png, 0), 1),
        "png_dataloader_w2": (lambda: C.png_dataloader(files.png, 2), 2),
    }
    for name in peers.PEERS:          # built in measure_set where the peer imports
        found[name] = (_peer_factory(name, files.root / name), 3)
    return {k: v for k, v in found.items() if k not in MISSING and k not in peers.peer_errors()}


def _peer_factory(name: str, folder: Path) -> Callable[[], Iterator[Any]]:
    return lambda: peers.READERS[name](folder, C.BATCH)


def _timed(factory: Callable[[], Iterator[Any]], warmup: int, seconds: float) -> float:
    it = factory()
    try:
        return rate(it, warmup=warmup, seconds=seconds, min_batches=2)
    finally:
        it.close()  # type: ignore[attr-defined]


def _open_sets(files: SetFiles, store: Any) -> dict[str, C.ShardlineSet]:
    return {"none": C.ShardlineSet(files, "none", store),
            "lz4": C.ShardlineSet(files, "lz4", store),
            "thread": C.ShardlineSet(files, "none", store, spec=LoaderSpec(prefetch_batches=4))}


def measure_set(spec: SetSpec, plan: Plan, store: Any, log: Callable[[str], None]
                ) -> tuple[SetFiles, dict[str, Any]]:
    t0 = time.perf_counter()
    images, labels = pixels(spec)
    files = SetFiles(spec, images, labels)
    for fmt in ("shards-none", "shards-lz4", "raw", "parquet", "png", "wds", "hf"):
        if not (fmt == "hf" and "hf_datasets" in MISSING):
            files.ensure(fmt)
    for name in peers.PEERS:
        if name not in peers.peer_errors():
            peers.ensure(name, files.root, files.raw, spec.shape)
    log(f"{spec.name}: {spec.rows} x {spec.shape} ready in {time.perf_counter() - t0:.1f}s "
        f"({files.root})")
    sets = _open_sets(files, store)
    seconds = plan.seconds * (1.0 if spec.nbytes < 100_000 else 1.5)
    found = _contenders(files, sets)
    fns: dict[str, Callable[[], float]] = {
        name: functools.partial(_timed, f, w, seconds) for name, (f, w) in found.items()}
    fns["memcpy"] = lambda: C.memcpy_gbps(256 << 20, seconds) * 1e9 / spec.nbytes
    values = interleaved(fns, plan.rounds, lambda r: log(f"{spec.name}: round {r + 1} done"))
    for s in sets.values():
        s.close()
    memory = _peak_memory(files, store, found)
    out: dict[str, Any] = {"rows": spec.rows, "shape": list(spec.shape),
                           "png_rows": spec.png_rows, "sample_bytes": spec.nbytes,
                           "shards": len(sets["none"].manifest.shards),
                           "shard_bytes": {c: sets[c].manifest.bytes for c in ("none", "lz4")},
                           "memcpy_gbps": median(values["memcpy"]) * spec.nbytes / 1e9,
                           "contenders": {}}
    for name, vals in values.items():
        out["contenders"][name] = {
            "samples_per_s": median(vals), "rounds": [round(v) for v in vals],
            "vs_raw_arrow": ratio(vals, values[REFERENCE]),
            "peak_memory": memory.get(name)}
    for name in ("shardline", "shardline_lz4", "shardline_thread"):
        out[f"{name}_vs_raw_arrow"] = ratio(values[name], values[REFERENCE])
    out["shardline_vs_png_dataloader"] = ratio(values["shardline"], values["png_dataloader_w2"])
    out["shardline_vs_png_dataloader_w0"] = ratio(values["shardline"],
                                                  values["png_dataloader_w0"])
    out["shardline_vs_best_peer"] = peers.best_peer_ratio(values)
    out["raw_arrow_vs_numpy_ram"] = ratio(values[REFERENCE], values["numpy_ram"])
    return files, out


def _peak_memory(files: SetFiles, store: Any, found: dict[str, Any]) -> dict[str, Any]:
    """One untimed pass per contender (fresh shardline objects) under ``PeakMemory``."""
    out = {}
    for name, (factory, warmup) in found.items():
        fresh = _open_sets(files, store) if name.startswith("shardline") else None
        if fresh is not None:
            key = {"shardline": "none", "shardline_lz4": "lz4"}.get(name, "thread")
            factory = fresh[key].batches
        with PeakMemory() as peak:
            _timed(factory, warmup, 0.2)
        out[name] = peak.to_dict()
        for s in (fresh or {}).values():
            s.close()
    return out


def run(quick: bool = False, scale: float = 1.0, rounds: int | None = None,
        log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    plan = Plan.make(quick, scale, rounds)
    t0 = time.perf_counter()
    with moto_bucket("shardline-bench-") as (scratch, _, store):
        result: dict[str, Any] = {"part": "loader", "quick": quick, "machine": machine(),
                                  "plan": asdict(plan), "batch_size": C.BATCH,
                                  "pixels": "synthetic (random half-resolution, upsampled 2x)",
                                  "missing": {k: f"not installed: {v}" for k, v in MISSING.items()}
                                  | peers.peer_errors(),
                                  "cold": {}}
        for spec in plan.sets():
            files, result[spec.name] = measure_set(spec, plan, store, log)
            if plan.cold and (spec.name == "S" or not quick):
                result["cold"][spec.name] = loader_cold.measure(files, store, scratch,
                                                                plan.rounds)
                log(f"{spec.name}: cold-cache rounds done")
        result["T"] = loader_tensor.measure(2_000 if quick else 8_000, rounds=plan.rounds,
                                            seconds=plan.seconds * 2, log=log)
    result["bars"] = bars(result)
    result["elapsed_s"] = round(time.perf_counter() - t0, 1)
    return result


def bars(r: dict[str, Any]) -> list[dict[str, Any]]:
    out = [bar("S.shardline_vs_raw_arrow", r["S"]["shardline_vs_raw_arrow"], 0.9),
           bar("L.shardline_vs_raw_arrow", r["L"]["shardline_vs_raw_arrow"], 0.9),
           bar("T.shardline_vs_raw_arrow", r["T"]["shardline_vs_raw_arrow"], 0.9,
               note="float32 tensor field 13x32x32"),
           bar("S.shardline_vs_png_dataloader", r["S"]["shardline_vs_png_dataloader"], 50.0,
               note="vs DataLoader with 2 workers")]
    ran = [p for p in peers.PEERS if p not in peers.peer_errors()]
    note = (f"best of {', '.join(ran)}" if ran else "no peer could run here") + (
        "; " + "; ".join(f"{p}: cannot run here" for p in peers.peer_errors()) if
        peers.peer_errors() else "")
    for name, target in (("S", 10.0), ("L", 3.0)):
        out.append(bar(f"{name}.shardline_vs_best_peer", r[name]["shardline_vs_best_peer"],
                       target, note=note))
    for name, cold in r["cold"].items():
        out.append(bar(f"cold.{name}.shardline_vs_raw_get", cold["shardline_vs_raw_get"], 0.8))
    return out


def print_tables(r: dict[str, Any], stderr: bool = False) -> None:
    for name in ("S", "L"):
        s = r[name]
        rows = [(c, v["samples_per_s"], v["samples_per_s"] * s["sample_bytes"] / 1e9,
                 v["vs_raw_arrow"], (v["peak_memory"] or {}).get("anon_mb"),
                 (v["peak_memory"] or {}).get("workers_mb"))
                for c, v in sorted(s["contenders"].items(), key=lambda kv: -kv[1]["samples_per_s"])]
        print_table(f"loader {name}: {s['rows']} x {s['shape']}, batch 256, median of "
                    f"{r['plan']['rounds']} rounds", ["contender", "samples/s", "GB/s",
                    "x raw_arrow", "peak anon MB", "workers MB"], rows, stderr)
    rows2 = [(n, c["raw_get_mb_per_s"], c["shardline_cold_mb_per_s"],
             c["shardline_cold_samples_per_s"], c["shardline_vs_raw_get"])
             for n, c in r["cold"].items()]
    print_table("first epoch, cold cache, from the S3 server", ["set", "raw GET MB/s",
                "shardline MB/s", "shardline samples/s", "ratio"], rows2, stderr)
    t = r["T"]
    print_table(f"loader T: {t['rows']} x float32 {t['shape']}, batch 256",
                ["contender", "samples/s", "GB/s"],
                [(c, v["samples_per_s"], v["samples_per_s"] * t["sample_bytes"] / 1e9)
                 for c, v in t["contenders"].items()], stderr)
    print_table("bars", ["bar", "value", "target", "met"],
                [(b["name"], b["value"], f"{b['op']} {b['target']}", b["met"]) for b in r["bars"]],
                stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI-sized run (under a minute)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the set sizes")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args(argv)
    r = run(args.quick, args.scale, args.rounds)
    path = write_result("loader-quick" if args.quick else "loader", r)
    print_tables(r, stderr=args.json)
    if args.json:
        print(json.dumps(r))
    else:
        print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
