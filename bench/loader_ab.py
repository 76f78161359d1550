"""The S loader against raw mmap Arrow in one process, and where its time goes.

    .venv/bin/python -m shardline.bench.loader_ab [--rows N] [--rounds R] [--seconds S] [--profile]

Interleaved rounds (``bench.common``) of ``shardline`` (the trainer's loader, defaults as
``bench.loader``), ``shardline_noarena`` (the same without the shard arena: one ``take`` per
shard a batch touches), ``shardline_noprebuild`` (neither the arena nor the window helper),
``shardline_thread`` (the prefetch thread used on CUDA) and ``raw_arrow`` on one set; prints
the median per-round ratios to ``raw_arrow`` and to ``shardline_noarena``. ``--profile``
then runs the shardline loader alone under pyinstrument (bench extra) and prints the call
tree.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from shardline.bench import contenders as C
from shardline.bench import peers
from shardline.bench.common import cpu_rate, interleaved, machine, median, rate, ratio, write_result
from shardline.bench.loader_data import SetFiles, SetSpec, pixels
from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from shardline.trainer.options import LoaderSpec


def _set(rows: int, name: str = "S") -> SetFiles:
    shape = (32, 32, 3) if name == "S" else (224, 224, 3)
    spec = SetSpec(name, rows, shape, 512 if name == "S" else 256)
    images, labels = pixels(spec)
    files = SetFiles(spec, images, labels)
    for fmt in ("shards-none", "raw"):
        files.ensure(fmt)
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=("S", "L"), default="S", help="L: 224x224x3 images")
    ap.add_argument("--rows", type=int, default=None, help="default 50,000 (S), 5,000 (L)")
    ap.add_argument("--peers", action="store_true", help="add the peers that run here "
                    "(bench.peers) and print shardline / best peer")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--warmup", type=int, default=5,
                    help="batches before timing, the same for every contender (S: 400 = "
                         "~2.4 epochs, past shardline's one-time arena copy)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--cpu", action="store_true",
                    help="samples per CPU second of the consuming thread (time.thread_time) "
                         "instead of per wall second: the critical path, robust to a loaded "
                         "machine; work on helper threads is not counted")
    args = ap.parse_args(argv)
    args.rows = args.rows or (50_000 if args.set == "S" else 5_000)
    files = _set(args.rows, args.set)
    # the shards sit in a warm cache: the store is never reached
    store = ObjectStore(StoreSettings(bucket="unused", endpoint_url="http://127.0.0.1:9",
                                      access_key="x", secret_key="x"))
    sets = {"shardline": C.ShardlineSet(files, "none", store),
            "shardline_noarena": C.ShardlineSet(files, "none", store, arena=False),
            "shardline_noprebuild": C.ShardlineSet(files, "none", store, prebuild=False,
                                                   arena=False),
            "shardline_thread": C.ShardlineSet(files, "none", store,
                                               spec=LoaderSpec(prefetch_batches=4))}

    def timed(factory: Callable[[], Iterator[Any]]) -> Callable[[], float]:
        def run() -> float:
            it = factory()
            try:
                if args.cpu:
                    return cpu_rate(it, warmup=args.warmup, batches=int(args.seconds * 2000))
                return rate(it, warmup=args.warmup, seconds=args.seconds, min_batches=2)
            finally:
                it.close()  # type: ignore[attr-defined]
        return run

    fns = {name: timed(s.batches) for name, s in sets.items()}
    fns["raw_arrow"] = timed(lambda: C.raw_arrow(files.raw, files.spec.shape))
    for name in peers.PEERS if args.peers else ():
        if name not in peers.peer_errors():
            folder = peers.ensure(name, files.root, files.raw, files.spec.shape)
            fns[name] = timed(functools.partial(peers.READERS[name], folder, C.BATCH))
    values = interleaved(fns, args.rounds)
    out = {n: {"samples_per_s": round(median(v)), "vs_raw_arrow": round(ratio(v, values[
        "raw_arrow"]), 3)} for n, v in values.items()}
    for n, v in values.items():        # the arena's effect: same-round ratio to the loader without
        out[n]["vs_noarena"] = round(ratio(v, values["shardline_noarena"]), 3)
    extra: dict[str, Any] = {}
    if args.peers:
        extra = {"shardline_vs_best_peer": round(peers.best_peer_ratio(values), 3),
                 "peer_errors": peers.peer_errors()}
    print(json.dumps(out | extra, indent=1))
    tag = ("-cpu" if args.cpu else "") + (f"-w{args.warmup}" if args.warmup != 5 else "") + (
        "-peers" if args.peers else "") + ("-L" if args.set == "L" else "")
    write_result("loader-ab" + tag, extra | {"set": args.set,
        "part": "loader_ab", "machine": machine(), "rows": args.rows,
        "rounds": args.rounds, "cpu": args.cpu, "warmup": args.warmup, "contenders": out})
    if args.profile:
        from pyinstrument import Profiler

        it = sets["shardline"].batches()
        for _ in range(5):
            next(it)
        with Profiler(interval=0.0002) as prof:
            for _ in range(3000):
                next(it)
        it.close()  # type: ignore[attr-defined]
        print(prof.output_text(unicode=False, color=False, show_all=False))
    for s in sets.values():
        s.close()
    return 0


if __name__ == "__main__":
    tempfile.tempdir = None
    sys.exit(main())
