"""``docs/benchmarks.md`` and its plots from ``bench/results/{loader,convert,pipeline,gpu}.json``.

The prose lives in ``bench/report_template.md``; ``{name}`` placeholders there are filled
with tables and figures built here. Plots are PNGs under ``docs/bench/``. The scale section
(``bench/scale_report.py`` writes it, between its markers) is kept as it is.

    .venv/bin/python -m shardline.bench.report
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shardline.bench.common import RESULTS, ROOT, fmt, print_table

DOC = ROOT / "docs" / "benchmarks.md"
PLOTS = ROOT / "docs" / "bench"
TEMPLATE = Path(__file__).with_name("report_template.md")
# the scale section's markers: bench/scale_report.py writes what lies between them from its own
# result, and a rewrite here keeps it
SCALE_BEGIN, SCALE_END = "<!-- scale:begin -->", "<!-- scale:end -->"


def _load(part: str) -> dict[str, Any] | None:
    path = RESULTS / f"{part}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def md_table(columns: list[str], rows: list[list[Any]]) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "|".join(
        ":--" if i == 0 else "--:" for i in range(len(columns))) + "|\n"
    return head + "".join("| " + " | ".join(fmt(v) for v in r) + " |\n" for r in rows)


def _loader_table(s: dict[str, Any]) -> str:
    rows = []
    for name, c in sorted(s["contenders"].items(), key=lambda kv: -kv[1]["samples_per_s"]):
        mem = c.get("peak_memory") or {}
        rows.append([f"`{name}`", c["samples_per_s"], c["samples_per_s"] * s["sample_bytes"] / 1e9,
                     c["vs_raw_arrow"], mem.get("anon_mb"), mem.get("mapped_file_mb"),
                     mem.get("workers_mb")])
    return md_table(["contender", "samples/s", "GB/s", "x raw_arrow", "peak anon MB",
                     "peak mapped MB", "workers MB"], rows)


def _cold_table(cold: dict[str, Any]) -> str:
    return md_table(["set", "bytes", "raw GET MB/s", "shardline 1st epoch MB/s",
                     "shardline samples/s", "ratio"],
                    [[n, f"{c['bytes'] / 1e6:.0f} MB", c["raw_get_mb_per_s"],
                      c["shardline_cold_mb_per_s"], c["shardline_cold_samples_per_s"],
                      c["shardline_vs_raw_get"]] for n, c in cold.items()])


def _convert_table(r: dict[str, Any]) -> str:
    rows = []
    for key, cell in r["cells"].items():
        for c in ("pyarrow", "local[1]", "local[2]"):
            if c in cell:
                v = cell[c]
                rows.append([f"{key} `{c}`", v["rows_per_s"], v["input_mb_per_s"], v["seconds"],
                             v["vs_pyarrow"], v["split"].get("plan_s"),
                             v["split"].get("spark_job_s"), v["split"].get("dedupe_s")])
    return md_table(["cell", "rows/s", "input MB/s", "seconds", "x pyarrow", "driver plan s",
                     "Spark job s", "driver dedupe s"], rows)


def _peers(loader: dict[str, Any]) -> dict[str, str]:
    """shardline against the best peer per set, and why a peer did not run."""
    from shardline.bench.peers import PEERS

    rows = []
    for name in ("S", "L"):
        c = loader[name]["contenders"]
        ran = {p: c[p]["samples_per_s"] for p in PEERS if p in c}
        best = max(ran, key=lambda p: ran[p]) if ran else None
        rows.append([name, c["shardline"]["samples_per_s"],
                     ran.get("mds", "did not run"), ran.get("litdata", "did not run"),
                     best or "none", loader[name].get("shardline_vs_best_peer", float("nan"))])
    missing = loader.get("missing", {})
    why = "".join(f"- `{p}` **could not run on this machine**: `{missing[p]}`\n"
                  for p in PEERS if p in missing)
    return {"peers": md_table(["set", "shardline samples/s", "mds samples/s",
                               "litdata samples/s", "best peer", "shardline / best peer"],
                              rows),
            "peers_missing": why or "Both peers ran in this run."}


def _bars_table(bars: list[dict[str, Any]]) -> str:
    mark = {True: "met", False: "**missed**", None: "not measured"}
    return md_table(["bar", "value", "target", "result", "note"],
                    [[f"`{b['name']}`", b["value"], f"{b['op']} {b['target']}", mark[b["met"]],
                      b.get("note", "")] for b in bars])


def _machine(m: dict[str, Any]) -> str:
    pk = ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v)
    gpu = m["gpu"]["name"] if m.get("gpu") else "none"
    return (f"{m['cores']} cores ({m['cpu']}), {m['memory_gb']} GiB, GPU: {gpu}; Python "
            f"{m['python']}, kernel {m['kernel']}; load average at start "
            f"{m['load_avg_at_start']}; commit {m['commit']}; {m['when']}.\n\nVersions: {pk}.")


def plots(loader: dict[str, Any] | None, convert: dict[str, Any] | None) -> dict[str, str]:
    """Write the PNGs; returns placeholder -> markdown image line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    PLOTS.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in ("S", "L"):
        if not loader:
            break
        s = loader[name]
        items = sorted(s["contenders"].items(), key=lambda kv: kv[1]["samples_per_s"])
        fig, ax = plt.subplots(figsize=(7, 4))
        colors = ["tab:orange" if n.startswith("shardline") else "tab:gray" for n, _ in items]
        ax.barh([n for n, _ in items], [v["samples_per_s"] for _, v in items], color=colors)
        ax.set_xscale("log")
        ax.set_xlabel("samples/s (log scale), median of rounds")
        ax.set_title(f"loader {name}: {s['rows']} x {s['shape']}, batch 256, shuffled, warm")
        fig.tight_layout()
        fig.savefig(PLOTS / f"loader_{name}.png", dpi=110)
        plt.close(fig)
        out[f"plot_loader_{name}"] = f"![loader {name}](bench/loader_{name}.png)"
    if convert:
        cells = convert["cells"]
        kinds = ("pyarrow", "local[1]", "local[2]")
        labels = [f"{k} {c}" for k, cell in cells.items() for c in kinds if c in cell]
        values = [cell[c]["rows_per_s"] for cell in cells.values()
                  for c in ("pyarrow", "local[1]", "local[2]") if c in cell]
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.barh(labels, values, color=["tab:gray" if "pyarrow" in lab else "tab:orange"
                                       for lab in labels])
        ax.set_xlabel("rows/s, median of rounds")
        ax.set_title(f"conversion of {convert['records']} records")
        fig.tight_layout()
        fig.savefig(PLOTS / "convert.png", dpi=110)
        plt.close(fig)
        out["plot_convert"] = "![conversion](bench/convert.png)"
    return out


def _pipeline_tables(r: dict[str, Any]) -> dict[str, str]:
    from shardline.bench.pipeline import HOPS

    rounds = r["rounds"]
    cols = ["hop"] + [f"round {x['round']}" for x in rounds]
    rows = [[name] + [x["hops_s"][name] for x in rounds] for name, _, _ in HOPS]
    rows += [["**upload done -> version published**"]
             + [x["upload_to_version_s"] for x in rounds],
             ["**upload done -> training started**"]
             + [x["upload_to_train_started_s"] for x in rounds]]
    stages = sorted({s for x in rounds for s in x["ingest_tasks_s"]})
    x0 = rounds[0]

    def per_hop(key: str) -> str:   # stack CPU s / machine busy share (bench/pipeline_hops.py)
        return md_table(cols, [[lb] + [x.get("hops", {}).get(lb, {}).get(key) for x in rounds]
                               for lb in (x0.get("hops") or {})])

    cpu = ("Stack CPU seconds per hop (every stack process, flow-run processes included), "
           "then the machine's busy share (1.0 = both cores busy, other work included); "
           "load average at each upload: " + ", ".join(
               f"{x.get('load_1m', 0):.1f}" for x in rounds) + ":\n\n" + per_hop(
               "stack_cpu_s") + "\n\n" + per_hop("busy")) if x0.get("hops") else ""
    return {
        "pipeline_cpu": cpu,
        "pipeline": md_table(cols, rows),
        "pipeline_tasks": md_table(["ingest task"] + cols[1:], [
            [f"`{s}`"] + [x["ingest_tasks_s"].get(s) for x in rounds] for s in stages]),
        "pipeline_drop": f"{x0['bytes'] / 1e6:.1f} MB, {x0['rows']:,} rows",
        "pipeline_debounce": str(r["debounce_s"]),
        "pipeline_elapsed": fmt(r["elapsed_s"]),
        "pipeline_stack": f"stack up {fmt(r['stack_up_s'])} s, deploy {fmt(r['deploy_s'])} s",
    }


def fields() -> dict[str, str]:
    loader, convert, gpu = _load("loader"), _load("convert"), _load("gpu")
    pipeline = _load("pipeline")
    f: dict[str, str] = {"plot_loader_S": "", "plot_loader_L": "", "plot_convert": ""}
    bars = [b for r in (loader, convert, pipeline, gpu) if r for b in r.get("bars", [])]
    f["bars"] = _bars_table(bars)
    first = loader or convert or gpu
    f["machine"] = _machine(first["machine"]) if first else "(no results yet)"
    if loader:
        f |= {"loader_S": _loader_table(loader["S"]), "loader_L": _loader_table(loader["L"]),
              "cold": _cold_table(loader["cold"]), "loader_rounds": str(loader["plan"]["rounds"]),
              "loader_elapsed": fmt(loader["elapsed_s"]),
              "memcpy_S": fmt(loader["S"]["memcpy_gbps"]),
              "memcpy_L": fmt(loader["L"]["memcpy_gbps"])}
        f |= _peers(loader)
    if convert:
        f |= {"convert": _convert_table(convert), "convert_elapsed": fmt(convert["elapsed_s"]),
              "spark_start": md_table(["master", "JVM start s", "first job s"], [
                  [m, v["jvm_start_s"], v["first_job_s"]] for m, v in convert["spark"].items()]),
              "validation": md_table(["cell", "first call s", "warm s"], [
                  [k, v["first_s"], v["warm_s"]] for k, v in convert["validation"].items()]),
              "convert_records": f"{convert['records']:,}",
              "convert_objects": str(convert["objects"]),
              "convert_rounds": f"{convert['rounds']['local']} (local disk), "
                                f"{convert['rounds']['s3']} (S3)"}
    if pipeline:
        f |= _pipeline_tables(pipeline)
    ab = [(m, r) for m, r in (("wall", _load("loader-ab")), ("cpu", _load("loader-ab-cpu"))) if r]
    if ab:
        f["loader_ab"] = md_table(
            ["S loader", "measure", "samples/s", "x raw_arrow", "load average at start"],
            [[f"`{n}`", "consumer-thread CPU s" if m == "cpu" else "wall s",
              float(c["samples_per_s"]), c["vs_raw_arrow"],
              str(r["machine"]["load_avg_at_start"])]
             for m, r in ab for n, c in r["contenders"].items()])
    if gpu:
        f["gpu"] = md_table(["feed", "samples/s", "data-wait share"], [
            [n, gpu["samples_per_s"][n], gpu["data_wait_share"][n]] for n in gpu["samples_per_s"]])
        f["gpu_note"] = gpu.get("note", f"device {gpu['device']}, ratio "
                                        f"{fmt(gpu['shardline_vs_synthetic'])}")
    f |= plots(loader, convert)
    return f


class _Missing(dict):  # type: ignore[type-arg,unused-ignore]
    def __missing__(self, key: str) -> str:
        return f"(not measured yet: {key})"


def keep_scale_section(old: str, new: str) -> str:
    """``new`` with the scale section of ``old`` (markers included) as it was: in place of
    ``new``'s own section if it has one, else at the end, where ``bench/scale_report.py``
    first puts it. ``new`` unchanged when ``old`` has no complete section."""
    start = old.find(SCALE_BEGIN)
    end = old.find(SCALE_END, start + 1)
    if start < 0 or end < 0:
        return new
    kept = old[start:end + len(SCALE_END)]
    a = new.find(SCALE_BEGIN)
    b = new.find(SCALE_END, a + 1)
    if a >= 0 and b >= 0:
        return new[:a] + kept + new[b + len(SCALE_END):]
    return new.rstrip("\n") + "\n\n" + kept + "\n"


def write_report(path: Path = DOC, body: str | None = None) -> Path:
    """Rewrite ``path`` from the template and the results (``body``: that text, already
    rendered), keeping the scale section already in ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if body is None:
        body = TEMPLATE.read_text().format_map(_Missing(fields()))
    old = path.read_text() if path.is_file() else ""
    path.write_text(keep_scale_section(old, body))
    return path


def print_bars(bars: list[dict[str, Any]], stderr: bool = False) -> None:
    print_table("bars", ["bar", "value", "target", "met"],
                [(b["name"], b["value"], f"{b['op']} {b['target']}", b["met"]) for b in bars],
                stderr)


if __name__ == "__main__":
    print(write_report())
