"""``python -m shardline.bench.scale_detect``: detect's object-store requests against the
history, per scope (issue 23, "Detect in O(new)"), and publish's beside it.

For each history size (versions of ``--uploads`` claimed upload objects each, all still under
incoming/, as uploads stay; with ``--publish`` each measured batch is a version too), on a
private moto S3 server:

1. the history is extended (``bench.scale_data.extend_history``) and one untimed detect runs:
   the previous ingest's last detect (it writes the ledger's claims checkpoint once 64 claim
   documents are uncovered, and the listing mark);
2. a new batch is uploaded and its keys recorded as pending, as the event bridge does;
3. detect runs once per scope through a ``CountingStore``: ``full`` (a reconciling run
   listing all of incoming/, the only way before), ``incremental`` (a reconciling run of a
   dataset with ``incremental_listing``: from the mark), ``events`` (the upload-triggered
   run: the pending keys, no listing of incoming/); all three must find the same batch;
4. with ``--publish`` (needs a Spark Connect server, started here) the batch goes through
   convert, validate and publish, each in its own process (``bench.scale_stages``), and
   publish's requests are recorded.

Requests and listing entries are counted, not timed: they do not depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from shardline.bench.common import machine, write_result
from shardline.bench.scale_data import config, extend_history, upload
from shardline.bench.scale_store import counting, total
from shardline.core.config import DatasetConfig, config_to_dict, parse_config
from shardline.core.store import ObjectStore
from shardline.infra.events.model import EventSink, ObjectCreated
from shardline.tasks.detect import Scope, detect

SCOPES = {"full": Scope(), "incremental": Scope(), "events": Scope(events=True)}


def _configs(name: str) -> dict[str, DatasetConfig]:
    base = config_to_dict(config(name, 10))
    inc = parse_config({"dataset": {**base, "incremental_listing": True}}).dataset
    return {"full": parse_config({"dataset": base}).dataset, "incremental": inc,
            "events": inc}


def measure(store: ObjectStore, cfg: DatasetConfig, scope: Scope) -> dict[str, Any]:
    """One detect through a counting store: requests per operation and kind of key."""
    c = counting(store)
    batch = detect(c, cfg, scope)
    counts = c.counts.to_dict()
    ops = ("list", "get", "head", "put", "delete")
    return {"batch": batch.id if batch else None,
            "sources": len(batch.sources) if batch else 0,
            "requests": sum(total(counts, op) for op in ops),
            "by_op": {op: total(counts, op) for op in ops},
            "list_entries": total(counts, "list_entries"),
            "incoming_lists": total(counts, "list", ["incoming"]), "counts": counts}


def _record_pending(store: ObjectStore, keys: list[str]) -> None:
    events = []
    for k in keys:
        info = store.head(k)
        assert info is not None, k
        events.append(ObjectCreated(store.bucket, k, info.size, info.etag))
    with EventSink("http://127.0.0.1:9/api", pending=store) as sink:
        sink.record_pending(events)        # what the bridge does before posting the events


def point(store: ObjectStore, cfgs: dict[str, DatasetConfig], history: int, uploads: int,
          rows: int) -> tuple[dict[str, Any], Any]:
    cfg = cfgs["incremental"]
    extend_history(store, cfg, history, 100, uploads=uploads)
    detect(store, cfg)                     # the previous ingest's last detect (untimed)
    tag = f"n{history:06d}"
    up = upload(store, cfg, rows, tag)
    _record_pending(store, [f"{cfg.incoming}{tag}-{o:03d}.parquet"
                            for o in range(up["objects"])])
    got = {mode: measure(store, cfgs[mode], scope) for mode, scope in SCOPES.items()}
    ids = {r["batch"] for r in got.values()}
    assert len(ids) == 1 and None not in ids, f"the scopes found different batches: {got}"
    batch = detect(store, cfg, Scope(events=True))
    listed = got["full"]["counts"]["list_entries"]["incoming"]["n"]
    return {"history": history, "uploads_under_incoming": listed, "detect": got}, batch


def _publish(srv: Any, cfg: DatasetConfig, batch: Any, work: Path) -> dict[str, Any]:
    from shardline.bench.scale import run_stage

    work.mkdir(parents=True, exist_ok=True)
    (work / "batch.pkl").write_bytes(pickle.dumps(batch))
    params = {"work": str(work), "dataset": config_to_dict(cfg),
              "store": srv.settings.__dict__, "spark": srv.spark.url,
              "run_id": uuid.uuid4().hex[:12]}
    out = {}
    for stage in ("convert", "validate", "publish"):
        out[stage] = run_stage(stage, params, work)
    counts = out["publish"]["counts"]
    return {"requests": sum(total(counts, op) for op in ("list", "get", "head", "put",
                                                          "delete", "copy")),
            "list_entries": total(counts, "list_entries"),
            "versions_lists": total(counts, "list", ["version_doc", "latest_hint"]),
            "counts": counts}


def run(history: tuple[int, ...], uploads: int, rows: int, publish: bool) -> dict[str, Any]:
    from shardline.bench.scale import Servers

    tmp = Path(tempfile.mkdtemp(prefix="shardline-scale-detect-"))
    srv = Servers(tmp / "servers")
    result: dict[str, Any] = {"part": "scale-detect", "machine": machine(),
                              "uploads_per_version": uploads, "rows": rows, "points": []}
    try:
        cfgs = _configs("det")
        for h in history:
            r, batch = point(srv.store, cfgs, h, uploads, rows)
            if publish:
                r["publish"] = _publish(srv, cfgs["incremental"], batch, tmp / f"h{h}")
                detect(srv.store, cfgs["incremental"], Scope(events=True))  # consumes
            result["points"].append(r)
            print(_line(r), file=sys.stderr, flush=True)
    finally:
        srv.stop()
    return result


def _line(r: dict[str, Any]) -> str:
    d = r["detect"]
    pub = f"; publish {r['publish']['requests']}" if "publish" in r else ""
    return (f"H={r['history']:4d} ({r['uploads_under_incoming']:5d} uploads): detect requests "
            + ", ".join(f"{m} {d[m]['requests']} ({d[m]['list_entries']} entries)" for m in d)
            + pub)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardline.bench.scale_detect",
                                description=__doc__.splitlines()[0])
    p.add_argument("--history", default="1,10,50,200")
    p.add_argument("--uploads", type=int, default=10, help="upload objects per version")
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--publish", action="store_true", help="also convert, validate, publish")
    a = p.parse_args(argv)
    result = run(tuple(int(x) for x in a.history.split(",")), a.uploads, a.rows, a.publish)
    path = write_result("scale-detect", result)
    print(json.dumps([{k: v for k, v in r.items()} | {"detect": {
        m: {k: x[k] for k in ("requests", "by_op", "list_entries", "incoming_lists")}
        for m, x in r["detect"].items()}} | ({"publish": {
            k: r["publish"][k] for k in ("requests", "list_entries", "versions_lists")}}
            if "publish" in r else {}) for r in result["points"]], indent=1))
    print(f"written {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
