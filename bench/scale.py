"""``shardline bench scale``: what each stage costs as the history and the new data grow.

Stages (each in its own process, see ``bench.scale_stages``): detect, convert (Spark), dedupe
(the duplicate check convert's driver makes), validate (GX), publish, version read, trainer
plan, evaluation; and, counted in requests in this process, correcting and deleting 100
rows against 1 and 100 versions (``bench.scale_corrections``). Three sweeps run the real
code on a private moto S3 server and a local Spark Connect server:

- **history**: the same new batch (``rows`` rows, 10 classes) ingested on top of 1, 10, 50,
  200 published versions (the history is synthetic, see ``bench.scale_data``);
- **rows**: 10k, 100k, 1M new rows on a one-version history;
- **classes**: 10, 100, 1,000 classes at 10k new rows (the issue's 6,000 rows over 1,000
  classes, rounded up).

Sizes this machine cannot hold or build through Spark in time are built synthetically and
measured through the same code: published-id indexes of 10M and 100M ids (the duplicate
check, ``bench.scale_ids`` layout on local disk) and a 100k-shard / 200-batch history (the
trainer's plan, manifests written by ``core.builder``).

Detect's cost per scope (the upload-triggered run's pending keys, an incremental or a full
reconciling listing) against the history, with many old uploads kept under incoming/, is
``bench.scale_detect`` (no Spark needed).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardline.bench.common import DATA, ROOT, machine
from shardline.bench.scale_data import config, extend_history, plan_history, upload
from shardline.core import layout
from shardline.core.config import StoreSettings, config_to_dict
from shardline.core.store import ObjectStore

STAGES = ("detect", "convert", "dedupe", "validate", "publish", "read", "plan", "evaluate")


@dataclass(frozen=True)
class Sizes:
    history: tuple[int, ...]          # versions before the measured ingest
    history_rows: int                 # rows of every version (synthetic and measured)
    rows: tuple[int, ...]             # new rows, 10 classes, one-version history
    classes: tuple[int, ...]          # classes at ``class_rows`` new rows
    class_rows: int
    id_files: tuple[int, ...]         # synthetic id index: files of ``ids_per_file`` ids
    ids_per_file: int
    new_ids: int
    plan: tuple[int, int]             # synthetic plan history: batches x shards per batch


FULL = Sizes(history=(1, 10, 50, 200), history_rows=10_000, rows=(10_000, 100_000, 1_000_000),
             classes=(10, 100, 1000), class_rows=10_000, id_files=(100, 1000),
             ids_per_file=100_000, new_ids=100_000, plan=(200, 500))
QUICK = Sizes(history=(1, 12), history_rows=1_000, rows=(1_000, 4_000), classes=(10, 100),
              class_rows=1_000, id_files=(4, 16), ids_per_file=10_000, new_ids=5_000,
              plan=(20, 50))


class Servers:
    """moto S3 and a Spark Connect server (local[2]) on 127.0.0.1, stopped by PID."""

    def __init__(self, log_dir: Path) -> None:
        from shardline.infra import procs, services

        self.s3 = services.start_moto(procs.free_port(), log_dir)
        try:
            self.spark = services.start_spark_connect(procs.free_port(), log_dir / "spark")
        except BaseException:
            self.s3.stop()
            raise
        self.settings = StoreSettings(bucket=f"scale-{uuid.uuid4().hex[:8]}",
                                      endpoint_url=self.s3.url, access_key="testing",
                                      secret_key="testing", region="us-east-1")
        self.store = ObjectStore(self.settings)
        self.store.ensure_bucket()

    def stop(self) -> None:
        self.spark.stop(grace_s=10.0)
        self.s3.stop()


def run_stage(stage: str, params: dict[str, Any], work: Path) -> dict[str, Any]:
    pf, out = work / f"{stage}.params.json", work / f"{stage}.out.json"
    pf.write_text(json.dumps(params, default=str))
    env = dict(os.environ, GX_ANALYTICS_ENABLED="false", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "shardline.bench.scale_stages", stage, str(pf), str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"stage {stage} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def chain(srv: Servers, cfg: Any, rows: int, history: int, history_rows: int, work: Path,
          log: Callable[[str], None], stages: tuple[str, ...] = STAGES) -> dict[str, Any]:
    """Build the history up to ``history`` versions of ``history_rows`` rows, upload ``rows``
    new rows, run every stage once on them (publishing version ``history + 1``)."""
    from shardline.tasks.detect import detect

    t0 = time.perf_counter()
    extend_history(srv.store, cfg, history, history_rows)
    detect(srv.store, cfg)   # the previous ingest's last detect: the ledger's steady state
    built = time.perf_counter() - t0
    up = upload(srv.store, cfg, rows, f"n{history:06d}")
    work.mkdir(parents=True, exist_ok=True)
    params = {"work": str(work), "dataset": config_to_dict(cfg),
              "store": srv.settings.__dict__, "spark": srv.spark.url,
              "run_id": uuid.uuid4().hex[:12]}
    out: dict[str, Any] = {"history": history, "rows": rows, "classes": len(cfg.classes),
                           "upload": up, "history_build_s": built, "stages": {}}
    for stage in stages:
        r = run_stage(stage, params, work)
        out["stages"][stage] = r
        log(f"  {cfg.name} H={history} rows={rows}: {stage:8s} {r['wall_s']:7.2f} s wall "
            f"{r['cpu_s']:6.2f} s CPU, peak {r['peak_rss_mb']:6.0f} MB "
            f"(+{r['stage_rss_mb']:.0f})")
    return out


def synthetic(sizes: Sizes, work: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """The duplicate check against big id indexes, the plan over a 100k-shard history."""
    from shardline.bench.scale_ids import build

    out: dict[str, Any] = {"ids": [], "plan": {}}
    work.mkdir(parents=True, exist_ok=True)
    root = DATA / f"scale-ids-{sizes.ids_per_file}"
    t0 = time.perf_counter()
    build(str(root), max(sizes.id_files) * sizes.ids_per_file, max(sizes.id_files))
    out["ids_build_s"] = time.perf_counter() - t0
    ds = config_to_dict(config("ids", 10))
    for files in sizes.id_files:
        r = run_stage("ids", {"work": str(work), "dataset": ds, "folder": str(root), "files": files,
                           "per_file": sizes.ids_per_file, "new": sizes.new_ids,
                           "duplicates": sizes.new_ids // 100}, work)
        out["ids"].append(r)
        log(f"  duplicate check vs {r['published_ids']:,} ids: {r['wall_s']:.2f} s wall, "
            f"{r['cpu_s']:.2f} s CPU, peak RSS {r['peak_rss_mb']:.0f} MB")
    batches, per = sizes.plan
    folder = DATA / f"scale-plan-{batches}x{per}"
    docs = plan_history(folder, batches, per)
    cfg = config("plan", 10)
    r = run_stage("plan", {"work": str(work), "dataset": config_to_dict(cfg), "folder": str(folder),
                        "doc_key": layout.version_key(cfg.prefix, batches)}, work)
    out["plan"] = r
    out["doc_bytes"] = docs
    log(f"  plan over {r['shards']:,} shards / {r['batches']} batches: {r['wall_s']:.3f} s "
        f"wall, {r['cpu_s']:.3f} s CPU")
    return out


def _corrections(srv: Servers, quick: bool, say: Callable[[str], None]
                 ) -> list[dict[str, Any]]:
    """The "correct 100 rows" step (``bench.scale_corrections``) at 1 and 12 / 100 versions."""
    from shardline.bench.scale_corrections import lines, measure

    points = measure(srv.store, (1, 12) if quick else (1, 100))
    for ln in lines(points):
        say(f"  {ln}")
    return points


def _guard(result: dict[str, Any], what: str, fn: Callable[[], Any],
           say: Callable[[str], None]) -> Any:
    """Run one point; a failure is recorded (and the point left out), the sweep goes on.
    The partial result is saved after every point."""
    from shardline.bench.common import write_result

    try:
        return fn()
    except Exception as exc:  # one failed point must not lose the others
        say(f"  FAILED {what}: {str(exc)[-1500:]}")
        result.setdefault("errors", []).append({"point": what, "error": str(exc)[-3000:]})
        return None
    finally:
        write_result("scale-quick.partial" if result["quick"] else "scale.partial", result)


def run(quick: bool = False, log: Callable[[str], None] | None = None,
        budget_s: float | None = 25 * 60) -> dict[str, Any]:
    from shardline.bench.scale_fit import analyse

    say = log or (lambda s: print(s, file=sys.stderr, flush=True))
    sizes = QUICK if quick else FULL
    t_start = time.perf_counter()
    result: dict[str, Any] = {"part": "scale", "quick": quick, "machine": machine(),
                              "sizes": sizes.__dict__, "history": [], "rows": [],
                              "classes": []}
    tmp = Path(tempfile.mkdtemp(prefix="shardline-scale-"))
    srv = Servers(tmp / "servers")
    try:
        hist, hr = config("hist", 10), sizes.history_rows
        say("warm-up (not recorded): the Spark server's first jobs start its Python workers")
        _guard(result, "warm-up", lambda: chain(srv, config("warmup", 10), 200, 1, 100,
                                                tmp / "warmup", say, ("detect", "convert")), say)
        say(f"history sweep: {sizes.history} versions, {hr:,} new rows")
        for h in sizes.history:
            r = _guard(result, f"history {h}",
                       functools.partial(chain, srv, hist, hr, h, hr, tmp / f"h{h}", say), say)
            if r is not None:
                result["history"].append(r)
        # a point already measured (same rows, classes and history) is not run again
        done: dict[tuple[int, int, int], Any] = {}
        if result["history"] and result["history"][0]["history"] == 1:
            done[hr, 10, 1] = result["history"][0]
        points = [("rows", n, 10) for n in sizes.rows[:-1]] + \
            [("classes", sizes.class_rows, k) for k in sizes.classes]
        say(f"rows sweep: {sizes.rows}; classes sweep: {sizes.classes} at "
            f"{sizes.class_rows:,} rows")

        def point(sweep: str, n: int, k: int) -> None:
            if (n, k, 1) not in done:
                done[n, k, 1] = _guard(
                    result, f"{sweep} {n} rows {k} classes",
                    functools.partial(chain, srv, config(f"r{n}-c{k}", k), n, 1, hr,
                                      tmp / f"r{n}-c{k}", say), say)
            if done[n, k, 1] is not None:
                result[sweep].append(done[n, k, 1])
        for sweep, n, k in points:
            point(sweep, n, k)
        say("correct 100 rows (and delete 100) against the history: requests")
        result["corrections"] = _guard(result, "corrections",
                                       lambda: _corrections(srv, quick, say), say) or []
        say("synthetic sizes")
        result["synthetic"] = _guard(result, "synthetic",
                                     lambda: synthetic(sizes, tmp / "synthetic", say), say) or {}
        # the largest rows point last, if its cost (a + b * rows through the two points
        # before) fits the time budget; otherwise the result says so
        big = sizes.rows[-1]
        prev = result["rows"][-1] if result["rows"] else None
        spent = time.perf_counter() - t_start
        guess = 0.0
        if len(result["rows"]) >= 2:
            (x0, c0), (x1, c1) = ((r["rows"], sum(st["wall_s"] + st.get("setup_s", 0)
                                                   for st in r["stages"].values()))
                                  for r in result["rows"][-2:])
            guess = c1 + max(0.0, (c1 - c0) / (x1 - x0)) * (big - x1)
        if budget_s is None or spent + guess <= budget_s:
            point("rows", big, 10)
        else:
            assert prev is not None
            result["skipped"] = {"rows": big, "why": f"{spent / 60:.1f} min spent, the point "
                                 f"would take ~{guess / 60:.1f} min more (linear in rows through "
                                 f"the points up to {prev['rows']:,} rows); budget "
                                 f"{budget_s / 60:.0f} min"}
            say(f"  skipped {big:,} rows: {result['skipped']['why']}")
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    result["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["seconds"] = time.perf_counter() - t_start
    result.update(analyse(result))
    return result
