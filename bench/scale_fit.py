"""Slopes and classes of the scale bench's curves, and its bars.

A curve is one stage's cost against one size (versions of history, new rows, classes). Its
slope is the exponent k of cost ~ size^k, fitted by least squares on log-log axes over all
points (``loglog``) and between the two largest sizes (``local``: fixed costs flatten the
fit at small sizes, the local slope is what the next size up will cost). Costs: wall and
CPU seconds, the stage's own peak memory, and the deterministic ones, requests and bytes
to and from the object store (per kind of object, ``bench.scale_store``).

A stage is **O(history)** when each version of history adds a request per two versions or a
KiB or more to what it reads (it reads every old batch's data), **O(new)** when nothing it
reads or writes changes with the history, and "O(new) + O(batches) references" when only
references grow (a checkpoint entry, a listing entry: a few hundred bytes per version).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shardline.bench.common import bar
from shardline.bench.scale_store import total

OPS = ("get", "head", "list", "put", "copy", "delete")
# what each stage's row stands for, and why its cost follows what it follows
WHY = {
    "detect": "a reconciling detect with a full listing: the incoming prefix (every upload "
              "ever kept there, one LIST page per 1,000) and every claim key, and the claim "
              "documents not yet in a claims checkpoint (at most 9: the run before wrote "
              "one after 10); the upload-triggered run lists no incoming/ at all and a "
              "dataset with incremental_listing lists from its mark "
              "(`python -m shardline.bench.scale_detect`)",
    "convert": "Spark reads only the new batch's sources and writes its shards and row "
               "files; the driver plans from their sizes (the duplicate check inside it is "
               "the dedupe row)",
    "dedupe": "reads the new batch's row files one id-bucket range at a time, then streams "
              "every published batch's id file bucket by bucket: memory follows the range, "
              "bytes read follow the history",
    "validate": "two GX suites over the new batch's row files, one id-bucket range at a "
                "time; reads nothing else",
    "publish": "copies the new shards and the staged id file, writes the batch list and a "
               "<= 10-reference "
               "document; lists versions and reads the latest checkpoint (O(batches) bytes), "
               "and every 10th version writes a checkpoint of all batch references",
    "read": "the latest document, its checkpoint (one reference per batch), the new batch's "
            "list and the schema; listing the versions is one entry per version",
    "plan": "reads every batch list (replay samples all of history) as Arrow columns: "
            "O(shards)",
    "evaluate": "opens the held-out shard(s) of every version (ingest writes each batch's "
                "held-out rows apart) and gathers their rows: O(held-out rows of the history)",
}


def requests(counts: dict[str, Any], exclude: tuple[str, ...] = ()) -> int:
    return sum(total(counts, op, exclude=exclude) for op in OPS)


def moved(counts: dict[str, Any], exclude: tuple[str, ...] = ()) -> int:
    return sum(total(counts, op, field="bytes", exclude=exclude) for op in ("get", "put"))


def metrics(stage: str, r: dict[str, Any]) -> dict[str, float]:
    """The figures a curve is drawn from; convert leaves out its inner duplicate check
    (its own row, dedupe)."""
    c = r["counts"]
    ex = ("id_index",) if stage == "convert" else ()
    wall = r["wall_s"] - (r.get("timings", {}).get("dedupe_s", 0.0) if stage == "convert"
                          else 0.0)
    return {"wall_s": wall, "cpu_s": r["cpu_s"], "stage_rss_mb": r["stage_rss_mb"],
            "peak_rss_mb": r["peak_rss_mb"], "requests": requests(c, ex),
            "bytes": moved(c, ex), "list_entries": total(c, "list_entries")}


def slope(xs: list[float], ys: list[float]) -> dict[str, float | None]:
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(pts) < 2:
        return {"loglog": None, "local": None}
    lx, ly = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    k = float(np.polyfit(lx, ly, 1)[0])
    local = float((ly[-1] - ly[-2]) / (lx[-1] - lx[-2])) if lx[-1] != lx[-2] else None
    return {"loglog": round(k, 3), "local": None if local is None else round(local, 3)}


def cls(k: float | None) -> str:
    if k is None or math.isnan(k):
        return "n/a"
    return "flat" if k < 0.15 else "sublinear" if k < 0.7 else "linear" if k < 1.3 \
        else "superlinear"


SWEEPS = {"history": "history", "rows": "rows", "classes": "classes"}


def curves(result: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """{sweep: {stage: {"x": sizes, metric: values..., "slopes": {metric: slope}}}}"""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for sweep, xkey in SWEEPS.items():
        runs = result.get(sweep) or []
        if not runs:
            continue
        out[sweep] = {}
        for stage in runs[0]["stages"]:
            xs = [float(r[xkey]) for r in runs]
            ms = [metrics(stage, r["stages"][stage]) for r in runs]
            cur: dict[str, Any] = {"x": xs}
            for m in ms[0]:
                cur[m] = [v[m] for v in ms]
            cur["slopes"] = {m: slope(xs, cur[m]) for m in ms[0]}
            out[sweep][stage] = cur
    return out


def per_version(cur: dict[str, Any], m: str) -> float:
    """What one more version of history adds to ``m`` (first to last point)."""
    xs, ys = cur["x"], cur[m]
    return (ys[-1] - ys[0]) / (xs[-1] - xs[0]) if xs[-1] != xs[0] else 0.0


def verdict(req: float, nbytes: float, entries: float) -> str:
    """O(history): a request per two versions or a KiB per version or more (the stage
    reads each old batch's data); references only (a checkpoint entry, a listing entry per
    version): O(new) with an O(batches) part of a few hundred bytes per version."""
    if req >= 0.5 or nbytes >= 1024:
        return "O(history)"
    if nbytes > 64 or entries > 0 or req > 0.05:     # below: file-size jitter of the upload
        return "O(new) + O(batches) references"
    return "O(new)"


def classify(cv: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    out = {}
    for stage, cur in cv.get("history", {}).items():
        s = cur["slopes"]
        io = max((s[m]["local"] or 0.0) for m in ("requests", "bytes"))
        new = cv.get("rows", {}).get(stage, {}).get("slopes", {})
        new_io = max(((new.get(m) or {}).get("local") or 0.0) for m in ("requests", "bytes",
                                                                        "wall_s"))
        req, nb, ent = (per_version(cur, m) for m in ("requests", "bytes", "list_entries"))
        out[stage] = {"history_io_local_slope": round(io, 3), "history_io": cls(io),
                      "history_wall": cls(s["wall_s"]["local"]),
                      "per_version": {"requests": round(req, 3), "bytes": round(nb, 1),
                                      "list_entries": round(ent, 3)},
                      "new_local_slope": round(new_io, 3), "new": cls(new_io),
                      "verdict": verdict(req, nb, ent), "why": WHY.get(stage, "")}
    return out


def bars(result: dict[str, Any]) -> list[dict[str, Any]]:
    syn = result.get("synthetic") or {}
    out = []
    plan = syn.get("plan")
    if plan:
        note = f"{plan['shards']:,} shards / {plan['batches']} batches"
        out.append(bar("scale.plan_100k_shards_wall_s", plan["wall_s"], 1.0, op="<=", note=note))
        out.append(bar("scale.plan_100k_shards_cpu_s", plan["cpu_s"], 1.0, op="<=", note=note))
    if syn.get("ids"):
        big = max(syn["ids"], key=lambda r: r["published_ids"])
        out.append(bar("scale.dedupe_peak_rss_mb", big["peak_rss_mb"], 1024.0, op="<=",
                       note=f"{big['published_ids']:,} published ids, "
                            f"{big['wall_s']:.1f} s wall"))
    docs = syn.get("doc_bytes") or {}
    if "2" in docs and "12" in docs:
        out.append(bar("scale.doc_bytes_v12_vs_v2", docs["12"] / docs["2"], 2.0, op="<=",
                       note=f"v2 {docs['2']} B, v12 {docs['12']} B"))
    return out


def analyse(result: dict[str, Any]) -> dict[str, Any]:
    cv = curves(result)
    return {"curves": cv, "classification": classify(cv), "bars": bars(result)}
