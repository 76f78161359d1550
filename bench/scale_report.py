"""The scale section of ``docs/benchmarks.md`` and its plots (``docs/img/scale_*.png``),
from a ``shardline bench scale`` result.

The section sits between two markers in ``docs/benchmarks.md`` (``bench.report`` defines
them) and is replaced in place (appended the first time), so the rest of the file, which
``bench/report.py`` generates, is left alone; that rewrite keeps the section in turn.

    .venv/bin/python -m shardline.bench.scale_report [bench/results/scale.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from shardline.bench.common import RESULTS, ROOT, fmt, print_table
from shardline.bench.report import SCALE_BEGIN as BEGIN
from shardline.bench.report import SCALE_END as END
from shardline.bench.report import md_table

DOC = ROOT / "docs" / "benchmarks.md"
IMG = ROOT / "docs" / "img"
SWEEP_TITLE = {"history": "versions before the ingest", "rows": "new rows",
               "classes": "classes"}


def _size(x: float) -> str:
    x = int(x)
    return f"{x // 1_000_000}M" if x >= 10**6 and x % 10**6 == 0 else \
        f"{x // 1000}k" if x >= 10**4 and x % 1000 == 0 else str(x)


def _wide(cur: dict[str, dict[str, Any]], cell: Any) -> str:
    stages = list(cur)
    xs = cur[stages[0]]["x"]
    rows = [[f"`{s}`", *[cell(cur[s], i) for i in range(len(xs))]] for s in stages]
    return md_table(["stage", *[_size(x) for x in xs]], rows)


def sweep_tables(result: dict[str, Any], sweep: str) -> str:
    cur = result["curves"][sweep]
    return (f"Wall s (CPU s of the stage's process), by {SWEEP_TITLE[sweep]}:\n\n"
            + _wide(cur, lambda c, i: f"{c['wall_s'][i]:.3g} ({c['cpu_s'][i]:.3g})")
            + f"\nPeak RSS MB above the stage's set-up (process peak), by "
              f"{SWEEP_TITLE[sweep]}:\n\n"
            + _wide(cur, lambda c, i: f"{c['stage_rss_mb'][i]:.0f} ({c['peak_rss_mb'][i]:.0f})")
            + f"\nObject-store requests / MB moved (GET + PUT bodies), by "
              f"{SWEEP_TITLE[sweep]}:\n\n"
            + _wide(cur, lambda c, i: f"{c['requests'][i]:,} / {c['bytes'][i] / 1e6:.3g}"))


def slopes_table(result: dict[str, Any]) -> str:
    cv, cl = result["curves"], result["classification"]
    rows = []

    def k(sweep: str, stage: str, m: str) -> str:
        s = cv.get(sweep, {}).get(stage, {}).get("slopes", {}).get(m)
        if not s or s["loglog"] is None:
            return ""
        return f"{s['loglog']:.2f} ({s['local']:.2f})"
    for stage, c in cl.items():
        rows.append([f"`{stage}`", k("history", stage, "wall_s"), k("history", stage, "requests"),
                     k("history", stage, "bytes"), k("rows", stage, "wall_s"),
                     k("rows", stage, "stage_rss_mb"), k("classes", stage, "wall_s"),
                     f"**{c['verdict']}**"])
    return md_table(["stage", "history: wall", "history: requests", "history: bytes",
                     "rows: wall", "rows: memory", "classes: wall", "class"], rows)


def synthetic_tables(result: dict[str, Any]) -> str:
    syn = result.get("synthetic") or {}
    parts = []
    if syn.get("ids"):
        parts.append(md_table(
            ["published ids", "new ids", "wall s", "CPU s", "peak RSS MB", "above set-up MB",
             "id files read", "MB read"],
            [[f"{r['published_ids']:,}", f"{r['new_ids']:,}", r["wall_s"], r["cpu_s"],
              r["peak_rss_mb"], r["stage_rss_mb"], r["published_files"] if "published_files"
              in r else sum(v["n"] for v in r["counts"].get("get", {}).values()),
              sum(v["bytes"] for v in r["counts"].get("get", {}).values()) / 1e6]
             for r in syn["ids"]]))
    if syn.get("plan"):
        p = syn["plan"]
        parts.append(md_table(["plan over", "wall s", "CPU s", "peak RSS MB", "batch lists read",
                               "MB read"],
                              [[f"{p['shards']:,} shards / {p['batches']} batches", p["wall_s"],
                                p["cpu_s"], p["peak_rss_mb"],
                                p["counts"]["get"].get("batch_list", {}).get("n"),
                                sum(v["bytes"] for v in p["counts"]["get"].values()) / 1e6]]))
    docs = syn.get("doc_bytes") or {}
    if docs:
        pick = [v for v in ("1", "2", "10", "11", "12", "50", "100", "199", "200") if v in docs]
        parts.append(md_table(["version", *pick], [["document bytes",
                                                    *[docs[v] for v in pick]]]))
    return "\n".join(parts)


def plots(result: dict[str, Any], out: Path = IMG) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    made = {}
    for sweep, cur in result["curves"].items():
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
        for ax, (m, label) in zip(axes, (("wall_s", "wall s"), ("bytes", "bytes moved"),
                                         ("stage_rss_mb", "peak RSS above set-up, MB")),
                                  strict=True):
            for stage, c in cur.items():
                ys = [max(v, 1e-3) for v in c[m]]
                ax.plot(c["x"], ys, marker="o", label=stage)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(SWEEP_TITLE[sweep])
            ax.set_title(label)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        name = f"scale_{sweep}.png"
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        made[sweep] = f"img/{name}"
    return made


def findings(result: dict[str, Any]) -> list[str]:
    """What the run shows beyond the verdicts, with its own numbers."""
    cv, cl = result["curves"], result["classification"]
    syn = result.get("synthetic") or {}
    out = []
    rows = cv.get("rows", {})
    if "convert" in rows:
        c = rows["convert"]
        n, mb = c["x"][-1], c["stage_rss_mb"][-1]
        out.append(f"- **Convert's driver memory**: +{mb:,.0f} MB at {n:,.0f} rows "
                   f"(~{mb * 2**20 / n:.0f} B a row; dedupe +"
                   f"{rows['dedupe']['stage_rss_mb'][-1]:,.0f} MB, validate +"
                   f"{rows['validate']['stage_rss_mb'][-1]:,.0f} MB). The Spark tasks write the "
                   "per-row metadata to row files bucketed by id hash and return one row per "
                   "file; the duplicate check, the id file and validation read the row files "
                   "one bucket range (at most ~1M rows, `tasks/convert/rowfiles.CHUNK_ROWS`) at "
                   "a time, so past one range the driver's peak follows the range, not the "
                   "batch.")
    ids = syn.get("ids") or []
    if ids:
        big = max(ids, key=lambda r: r["published_ids"])
        mb = sum(v["bytes"] for v in big["counts"].get("get", {}).values()) / 1e6
        out.append(f"- **The duplicate check is O(history) in time, flat in memory**: against "
                   f"{big['published_ids']:,} ids it read {mb:,.0f} MB "
                   f"({mb * 1e6 / big['published_ids']:.0f} B an id) in {big['wall_s']:.1f} s "
                   f"wall / {big['cpu_s']:.1f} s CPU at {big['peak_rss_mb']:.0f} MB peak RSS "
                   "(local disk; S3 adds its transfer time). Memory meets item 3; time grows "
                   "with every published id (a per-file filter or a Spark anti-join would cut "
                   "the bytes read).")
    if "read" in cl:
        pv = cl["read"]["per_version"]
        out.append(f"- **Publish and reader find the latest without listing**: a hint and a "
                   f"probe ({pv['list_entries']:.0f} listing entries a version); the "
                   f"checkpoint still holds every batch reference (~{pv['bytes']:.0f} B a "
                   "version, read by every publish, reader and plan): a two-level checkpoint "
                   "would make it O(1).")
    if "detect" in cl:
        out.append("- **A reconciling detect with a full listing lists what was ever uploaded "
                   "and claimed**: every key under the incoming prefix and every claim key "
                   "(listing entries grow by "
                   f"{cl['detect']['per_version']['list_entries']:.0f} a version); the claims "
                   "checkpoint bounds the claim GETs to 9. The upload-triggered run reads only "
                   "its pending keys and an incremental listing starts at its mark: "
                   "`python -m shardline.bench.scale_detect` (docs/benchmarks.md).")
    docs = syn.get("doc_bytes") or {}
    if {"2", "10", "12", "200"} <= set(docs):
        out.append(f"- **Version documents**: v2 {docs['2']} B, v12 {docs['12']} B "
                   f"({docs['12'] / docs['2']:.2f}x), v200 {docs['200']} B "
                   f"({docs['200'] / docs['2']:.2f}x: v200 carries 10 references, the most "
                   f"before the next checkpoint, like v10 at {docs['10']} B); bounded, not "
                   "growing with the history.")
    return out


def section(result: dict[str, Any], images: dict[str, str]) -> str:
    m = result["machine"]
    sz = result["sizes"]
    cl = result["classification"]
    lines = [
        BEGIN, "## 6. Scale: stage costs vs history and new data (issue 10, item 7)", "",
        "Generated by `shardline bench scale` (`bench/scale*.py`) from "
        "`bench/results/scale.json`; `--quick` runs CI-sized sweeps (tested in "
        "`tests/integration/test_bench_scale.py`). The section sits between markers: "
        "`bench/report.py` keeps it as it is when it rewrites the rest of this file, and "
        "`python -m shardline.bench.scale_report` replaces it from the last result.", "",
        "**Method.** Every stage runs once per point, in its own process (set-up untimed; "
        "peak RSS sampled every 5 ms while the stage runs, so no stage's memory shows in "
        "another's), through the real code on a private moto S3 server and a Spark Connect "
        "server at `local[2]`. Histories are synthetic: versions built and committed by "
        "`core.builder`, each with its claimed upload, id file (`tasks.id_index`) and claim. "
        "The slope k is the exponent of cost ~ size^k on log-log axes, over all points "
        "(and between the two largest sizes, in brackets). Requests and bytes are counted "
        "per kind of object and do not depend on the machine's load; times do.",
        "", f"Sweeps: history {', '.join(map(str, sz['history']))} versions of "
        f"{sz['history_rows']:,} rows each, with a new batch of {sz['history_rows']:,} rows; "
        f"new rows {', '.join(_size(x) for x in sz['rows'])} (10 classes) and classes "
        f"{', '.join(map(str, sz['classes']))} at {sz['class_rows']:,} rows, on a one-version "
        "history. Convert's requests and bytes are its Spark tasks' (the batch's sources read, "
        "its staged shards written) plus its driver's, without the duplicate check inside it "
        "(the dedupe row); its wall time leaves that check out too. Evaluation reads a warm "
        "local cache (bytes = shard files opened), without the model's forward pass. "
        "Set-up (imports: GX alone takes seconds; the inputs) is timed apart as `setup_s` in "
        "the JSON.", "",
        f"**Machine.** {m['cores']} cores, {m['memory_gb']} GiB, shared with other work: load "
        f"average {m['load_avg_at_start']} at the start, {result.get('load_avg_at_end')} at "
        f"the end; the run took {result['seconds'] / 60:.1f} min; commit {m['commit']}, "
        f"{m['when']}.", "",
    ]
    first = (result.get("history") or [{}])[0].get("stages", {})
    if first:
        lines += ["Set-up paid once per process and not in the stage's time (first history "
                  "point): " + ", ".join(f"`{s}` {r.get('setup_s', float('nan')):.1f} s"
                                          for s, r in first.items())
                  + " (imports: GX for validate, the Spark Connect client for convert, "
                    "torch for the trainer's stages; the inputs).", ""]
    lines += ["### Slopes and classes", "", slopes_table(result), ""]
    for s, c in cl.items():
        pv = c.get("per_version", {})
        lines.append(f"- `{s}` **{c['verdict']}**: {c['why']}. Each version of history adds "
                     f"{pv.get('requests', 0):.2g} requests, "
                     f"{pv.get('bytes', 0) if abs(pv.get('bytes', 0)) >= 64 else 0:,.0f} bytes "
                     f"and {pv.get('list_entries', 0):.2g} listing entries to it.")
    lines += ["", "### What the run shows", "", *findings(result), ""]
    for sweep in ("history", "rows", "classes"):
        if sweep in result["curves"]:
            lines += [f"### By {SWEEP_TITLE[sweep]}", "", sweep_tables(result, sweep), ""]
            if sweep in images:
                lines += [f"![scale by {SWEEP_TITLE[sweep]}]({images[sweep]})", ""]
    lines += ["### Synthetic sizes: duplicate check, plan, version documents", "",
              synthetic_tables(result), ""]
    lines += ["Bars:", "", md_table(["bar", "value", "target", "met", "note"], [
        [f"`{b['name']}`", b["value"], f"{b['op']} {b['target']}", b["met"], b["note"]]
        for b in result.get("bars", [])]), END]
    return "\n".join(lines) + "\n"


def write_section(result: dict[str, Any], doc: Path = DOC, img: Path = IMG) -> Path:
    images = plots(result, img)
    text = section(result, images)
    old = doc.read_text() if doc.is_file() else ""
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        new = head + text.rstrip("\n") + rest.split(END, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n" + text
    doc.write_text(new)
    return doc


def print_tables(result: dict[str, Any], stderr: bool = False) -> None:
    print_table("scale: classes", ["stage", "history I/O k", "history", "new", "class"],
                [(s, c["history_io_local_slope"], c["history_io"], c["new"], c["verdict"])
                 for s, c in result["classification"].items()], stderr)
    print_table("scale: bars", ["bar", "value", "target", "met"],
                [(b["name"], b["value"], f"{b['op']} {b['target']}", fmt(b["met"]))
                 for b in result.get("bars", [])], stderr)


if __name__ == "__main__":
    from shardline.bench.scale_fit import analyse

    path = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS / "scale.json"
    res = json.loads(path.read_text())
    res.update(analyse(res))          # the verdicts and notes of this checkout
    print(write_section(res))
