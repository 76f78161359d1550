"""The scale bench's arithmetic and its report section, on made-up results (no servers):
slopes are the log-log exponents, verdicts follow what one more version of history adds,
and the docs section is replaced in place between its markers."""

from __future__ import annotations

import math
from pathlib import Path

from shardline.bench.scale_fit import analyse, slope, verdict
from shardline.bench.scale_report import BEGIN, END, write_section

STAGES = ("detect", "convert", "dedupe", "validate", "publish", "read", "plan", "evaluate")


def test_slope_is_the_log_log_exponent() -> None:
    xs = [1.0, 10.0, 50.0, 200.0]
    assert slope(xs, [3 * x for x in xs]) == {"loglog": 1.0, "local": 1.0}
    assert slope(xs, [5.0] * 4) == {"loglog": 0.0, "local": 0.0}
    s = slope(xs, [2 + x for x in xs])          # a fixed cost flattens the fit at small sizes
    assert s["loglog"] is not None and s["local"] is not None
    assert 0 < s["loglog"] < s["local"] < 1
    assert slope([1.0], [1.0]) == {"loglog": None, "local": None}


def test_verdict_follows_what_a_version_adds() -> None:
    assert verdict(0.0, 0.0, 0.0) == "O(new)"
    assert verdict(0.0, 30.0, 0.0) == "O(new)"                 # file-size jitter
    assert verdict(0.01, 300.0, 1.0) == "O(new) + O(batches) references"
    assert verdict(1.0, 200.0, 1.0) == "O(history)"            # a GET per version
    assert verdict(0.0, 5000.0, 0.0) == "O(history)"           # a batch's data per version


def _run(h: int, rows: int, per_version: dict[str, int]) -> dict:
    """A made-up chain: stage s costs base + per_version[s] * h requests/bytes."""
    stages = {}
    for s in STAGES:
        k = per_version.get(s, 0)
        stages[s] = {"wall_s": 0.1 + 0.01 * k * h, "cpu_s": 0.05, "stage_rss_mb": 1.0,
                     "peak_rss_mb": 100.0, "setup_s": 1.0,
                     "counts": {"get": {"shard": {"n": 2 + k * h, "bytes": 1000 + 4096 * k * h}}}}
    return {"history": h, "rows": rows, "classes": 10, "stages": stages}


def _result() -> dict:
    grows = {"dedupe": 1, "plan": 1}
    res = {"part": "scale", "quick": True, "seconds": 60.0, "load_avg_at_end": [1, 1, 1],
           "machine": {"cores": 2, "memory_gb": 1, "load_avg_at_start": [1, 1, 1],
                       "commit": "abc", "when": "now"},
           "sizes": {"history": [1, 10, 100], "history_rows": 10, "rows": [10, 100],
                     "classes": [10], "class_rows": 10},
           "history": [_run(h, 10, grows) for h in (1, 10, 100)],
           "rows": [_run(1, n, {}) for n in (10, 100)], "classes": [_run(1, 10, {})],
           "synthetic": {}}
    res.update(analyse(res))
    return res


def test_analysis_and_section(tmp_path: Path) -> None:
    res = _result()
    cl = res["classification"]
    assert {s for s, c in cl.items() if c["verdict"] == "O(history)"} == {"dedupe", "plan"}
    assert all(cl[s]["verdict"] == "O(new)" for s in STAGES if s not in ("dedupe", "plan"))
    k = res["curves"]["history"]["dedupe"]["slopes"]["requests"]
    assert k["local"] is not None and 0.9 < k["local"] <= 1.0 and math.isfinite(k["loglog"])

    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nbefore\n")
    write_section(res, doc, tmp_path / "img")
    once = doc.read_text()
    assert once.startswith("# Benchmarks\n\nbefore\n") and once.count(BEGIN) == 1
    assert (tmp_path / "img" / "scale_history.png").stat().st_size > 0
    doc.write_text(once + "\nafter\n")
    write_section(res, doc, tmp_path / "img")          # replaced in place, the rest kept
    twice = doc.read_text()
    assert twice.count(BEGIN) == twice.count(END) == 1 and twice.endswith("\nafter\n")
    assert "**O(history)**" in twice and "img/scale_history.png" in twice
