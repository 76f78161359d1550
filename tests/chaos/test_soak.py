"""A soak (issue 11, test plan): many upload -> ingest -> train cycles with random faults,
every invariant of :mod:`tests.chaos.invariants` checked after every cycle.

Each cycle, from a seeded RNG: a clean upload (JSONL, CSV or Parquet, new ids) and hostile
objects (the quarantine catalogue with cycle-unique ids, a 100,000-deep JSON line, a "²"
label, a 400-digit label, an empty object, a re-upload of already published ids); the
ingest runs through the fault proxy at p in {0, 0.02, 0.05}; every third cycle an ingest in
its own process (cycles 0, 3, 6, ...) is first killed with SIGKILL at a random moment
(then the next run goes on); a reader polls the latest version all along; then a training
run through the proxy.

``make test``: 1 cycle (a kill, hostile objects, p = 0.05). ``make chaos``:
``SHARDLINE_SOAK_CYCLES`` (default 9). ``SHARDLINE_SOAK_SEED`` picks the run (default 11).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from shardline.core.config import Config, StoreSettings, TrainConfig
from shardline.core.store import ObjectStore
from shardline.infra.demo_data import (
    Digit,
    bad_jsonl_lines,
    csv_bytes,
    digits,
    jsonl_bytes,
    parquet_bytes,
)
from shardline.trainer.options import RunOptions
from shardline.trainer.run import train
from tests.chaos.faults_proxy import FaultProxy
from tests.chaos.invariants import Expected, VersionWatcher, check_dataset, check_models
from tests.integration.ingest_helpers import dataset_config, run_pipeline

FULL = os.environ.get("SHARDLINE_CHAOS_FULL") == "1"
CYCLES = int(os.environ.get("SHARDLINE_SOAK_CYCLES", "9" if FULL else "1"))
SEED = int(os.environ.get("SHARDLINE_SOAK_SEED", "11"))
PROXY_SEED = SEED
IN = "incoming/digits/"
pytestmark = pytest.mark.chaos


def hostile_lines(c: int) -> tuple[list[str], list[str]]:
    """(JSONL lines, their rules): the catalogue with ids unique to cycle ``c``."""
    lines, rules = [], []
    for line, rule in bad_jsonl_lines():
        try:
            doc = json.loads(line)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and "id" in doc:
            doc["id"] = f"{doc['id']}-c{c}"
            line = json.dumps(doc)
        lines.append(line)
        rules.append(str(rule))
    img = digits(0, 1)[0].b64()
    deep = "[" * 100_000
    lines += [f'{{"id": "deep-c{c}", "label": 1, "image": {deep}}}',
              json.dumps({"id": f"sup2-c{c}", "label": "\u00b2", "image": img}),
              json.dumps({"id": f"huge-c{c}", "label": 0, "image": img}).replace(
                  '"label": 0', '"label": 1' + "0" * 400)]
    rules += ["too_deeply_nested", "unknown_label", "unknown_label"]
    return lines, rules


class Soak:
    def __init__(self, store: ObjectStore, via: ObjectStore, spark_url: str, tmp: Path
                 ) -> None:
        self.store, self.via, self.spark_url, self.tmp = store, via, spark_url, tmp
        self.cfg = dataset_config()
        self.expected = Expected()
        self.published: list[Digit] = []
        self.next_id = 0
        self.log: list[dict] = []

    def upload(self, c: int, rng: random.Random) -> dict:
        n = rng.randint(60, 140)
        start = self.next_id % 1500
        items = digits(start, start + n, prefix=f"c{c:03d}-")
        self.next_id += n
        fmt = rng.choice(["jsonl", "csv", "parquet"])
        body = {"jsonl": jsonl_bytes, "csv": csv_bytes, "parquet": parquet_bytes}[fmt](items)
        key = f"{IN}c{c:03d}/clean.{fmt}"
        self.store.put_bytes(key, body)
        self.expected.add(key, {d.id for d in items})
        what = {"clean": n, "fmt": fmt}
        if rng.random() < 0.7:
            lines, rules = hostile_lines(c)
            few = digits(1500, 1505, prefix=f"c{c:03d}-h")
            body = jsonl_bytes(few) + ("\n".join(lines) + "\n").encode()
            self.store.put_bytes(f"{IN}c{c:03d}/hostile.jsonl", body)
            self.expected.add(f"{IN}c{c:03d}/hostile.jsonl", {d.id for d in few}, rules)
            what["hostile_rows"] = len(rules)
        if rng.random() < 0.3:
            self.store.put_bytes(f"{IN}c{c:03d}/empty.jsonl", b"")
            self.expected.add(f"{IN}c{c:03d}/empty.jsonl", bad=["empty_object"])
            what["empty"] = 1
        if self.published and rng.random() < 0.5:
            again = rng.sample(self.published, min(5, len(self.published)))
            self.store.put_bytes(f"{IN}c{c:03d}/again.csv", csv_bytes(again))
            self.expected.add(f"{IN}c{c:03d}/again.csv", bad=["duplicate_id"] * len(again))
            what["republished_ids"] = len(again)
        self.published += items
        return what

    def kill_an_ingest(self, rng: random.Random) -> dict:
        """Start an ingest in its own process and SIGKILL it at a random moment."""
        log = open(self.tmp / f"worker-{uuid.uuid4().hex[:6]}.log", "w")   # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.soak_worker", self.store.settings.endpoint_url
             or "", self.store.bucket, self.spark_url], stdout=subprocess.PIPE, stderr=log,
            text=True, cwd=Path(__file__).resolve().parents[2])
        try:
            assert proc.stdout is not None
            started = proc.stdout.readline().strip() == "go"
            delay = rng.uniform(0.5, 8.0)
            time.sleep(delay)
            finished = proc.poll() is not None
            if not finished:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            log.close()
        return {"killed_after_s": round(delay, 1), "started": started,
                "finished_first": finished}

    def ingest(self, p: float, proxy: FaultProxy) -> tuple[list[int | None], int]:
        f0 = proxy.counts.faults_before
        proxy.set_rates(p)
        versions = []
        try:
            for _ in range(3):                     # until nothing new is left
                pub = run_pipeline(self.via, self.cfg, self._spark())
                versions.append(pub.version if pub else None)
                if pub is None:
                    break
        finally:
            proxy.set_rates(0.0)
        return versions, proxy.counts.faults_before - f0

    def _spark(self):  # type: ignore[no-untyped-def]
        from shardline.core.config import SparkSettings
        return SparkSettings(remote=self.spark_url)

    def train(self, p: float, proxy: FaultProxy) -> dict:
        tcfg = Config(dataset=self.cfg, train=TrainConfig(
            width=8, depth=2, epochs=1, batch_size=32, lr=3e-3,
            cache_dir=str(self.tmp / "cache")))
        proxy.set_rates(p)
        try:
            r = train(tcfg, self.via, options=RunOptions(log_every=100, checkpoint_every=5))
        finally:
            proxy.set_rates(0.0)
        return {"model": r.model_version, "promoted": r.promoted,
                "accuracy": None if r.eval_accuracy is None else round(r.eval_accuracy, 3)}


def test_soak_cycles_keep_every_invariant(store_settings: StoreSettings, proxy: FaultProxy,
                                          spark_remote: str, tmp_path: Path) -> None:
    store = ObjectStore(store_settings)
    via = ObjectStore(dataclasses.replace(store_settings, endpoint_url=proxy.url))
    soak = Soak(store, via, spark_remote, tmp_path)
    kills = 0
    for c in range(CYCLES):
        rng = random.Random(SEED * 1000 + c)
        row: dict = {"cycle": c, **soak.upload(c, rng)}
        p = 0.05 if c == 0 else rng.choice([0.0, 0.02, 0.05, 0.05])
        with VersionWatcher(store, soak.cfg) as watcher:
            if c % 3 == 0:
                row["kill"] = soak.kill_an_ingest(rng)
                kills += not row["kill"]["finished_first"]
            row["versions"], row["ingest_faults"] = soak.ingest(p, proxy)
        assert not watcher.problems, watcher.problems[:5]
        ds = check_dataset(store, soak.cfg, soak.expected)
        f0 = proxy.counts.faults_before
        row["train"] = soak.train(p, proxy)
        row["train_faults"] = proxy.counts.faults_before - f0
        models = check_models(store, "digits", "cnn")
        row.update(p=p, dataset=dataclasses.asdict(ds), promoted=models.promoted,
                   watcher_reads=watcher.reads)
        print("soak:", json.dumps(row))
        soak.log.append(row)
    print(f"soak: seed {SEED}, {CYCLES} cycles, {kills} ingests killed mid-run, "
          f"{sum(r['ingest_faults'] + r['train_faults'] for r in soak.log)} faults injected")
    assert soak.expected.rows > 0
