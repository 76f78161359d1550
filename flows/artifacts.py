"""What a person reads in the Prefect UI: tables and markdown built from stage results.

Builders are pure (data in, table rows or markdown out) so they are tested without a
server; :func:`publish_ingest_artifacts` hands them to Prefect under stable keys per dataset
(``<dataset>-versions``, ``<dataset>-validation``, ``<dataset>-quarantine``), so the UI's
artifact page shows the latest of each and its history. The quarantine artifact is markdown:
the count per rule, then the first refused rows with a thumbnail of their image or a mark
saying why there is none (:mod:`shardline.flows.quarantine_view`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from shardline.core.manifest import Manifest
from shardline.tasks.validate import ValidationReport

if TYPE_CHECKING:
    from shardline.flows.quarantine_view import QuarantineSource


def artifact_key(dataset: str, what: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", f"{dataset}-{what}".lower()).strip("-")


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def versions_rows(manifests: list[Manifest]) -> list[dict[str, Any]]:
    """One row per version, latest first."""
    rows = []
    for m in sorted(manifests, key=lambda m: -m.version):
        rows.append({
            # counts from the version document alone (no batch-list reads)
            "version": m.version, "created": m.created_at,
            "batch": m.new_batch.id if m.new_batch else "",
            "new rows": m.new_rows, "new shards": m.new_shard_count, "total rows": m.rows,
            "total shards": m.totals.shards, "size": human_bytes(m.bytes),
            "quarantined": m.quarantine.rows,
            "validation": "passed" if m.validation.success else "failed",
        })
    return rows


def quarantine_rows(by_rule: dict[str, int], examples: list[dict[str, Any]]
                    ) -> list[dict[str, Any]]:
    """Per rule: count and the first example (key, row, id)."""
    rows = []
    for rule, n in sorted(by_rule.items(), key=lambda kv: -kv[1]):
        ex = next((e for e in examples if e.get("rule") == rule), {})
        rows.append({"rule": rule, "rows": n, "example key": ex.get("source_key", ""),
                     "example row": ex.get("source_row", ""), "example id": ex.get("id") or ""})
    return rows


def validation_markdown(dataset: str, batch_id: str, report: ValidationReport,
                        version: int | None, examples: list[dict[str, Any]] | None = None
                        ) -> str:
    """The validation report for a person: the verdict and counts, what to fix per rule
    (count, an example row and its value, the fix), then every expectation's result."""
    from shardline.flows.quarantine_view import md
    from shardline.tasks.mistakes import fix_rows

    c = report.counts
    verdict = "PASSED" if report.success else "FAILED: nothing was published"
    lines = [
        f"# Validation of `{dataset}` batch `{batch_id}`: {verdict}",
        "",
        f"- version: {version if version is not None else '(none)'}",
        f"- rows in: {c['rows']}, published: {c['ok']}, quarantined: {c['quarantined']} "
        f"({c['quarantine_fraction']:.1%}; limit {c['max_quarantine_fraction']:.1%})",
        "",
    ]
    if c["by_rule"]:
        lines += ["## What to fix, per rule", "", "| rule | rows | example | value | fix |",
                  "|---|---|---|---|---|"]
        fixes = fix_rows(c["by_rule"], report.refused, examples or [])
        lines += [f"| {md(r['rule'])} | {r['rows']} | {md(r['example'])} | {md(r['value'])} | "
                  f"{md(r['fix'])} |" for r in fixes]
        lines.append("")
    lines += [
        "## great-expectations results, per expectation",
        "",
        "| suite | expectation | column | result | detail |",
        "|---|---|---|---|---|",
    ]
    for r in report.results:
        mark = "pass" if r["success"] else "**FAIL**"
        detail = str(r["detail"]).replace("|", "/")
        lines.append(f"| {r['suite']} | {r['expectation']} | {r['column'] or ''} | {mark} | "
                     f"{detail} |")
    lines += ["", f"*The same results as JSON, for tools: `{report.report}`*"]
    return "\n".join(lines) + "\n"


def quarantine_markdown(dataset: str, batch_id: str, by_rule: dict[str, int],
                        examples: list[dict[str, Any]], rows_md: str = "") -> str:
    """Counts per rule (with the first example of each), then the per-row table."""
    from shardline.flows.quarantine_view import md

    total = sum(by_rule.values())
    lines = [f"# Quarantine of `{dataset}` batch `{batch_id}`: {total} row(s) refused", "",
             "| rule | rows | example key | example row | example id |",
             "|---|---|---|---|---|"]
    for r in quarantine_rows(by_rule, examples):
        lines.append(f"| {md(r['rule'])} | {r['rows']} | {md(r['example key'])} | "
                     f"{r['example row']} | {md(r['example id'])} |")
    return "\n".join(lines) + "\n" + (f"\n{rows_md}" if rows_md else "")


def _rows_md(quarantine: QuarantineSource | None, total: int) -> str:
    """The per-row table with thumbnails; a failure to read the shards costs the table,
    never the run (the counts above it still show)."""
    if quarantine is None or not quarantine.shards:
        return ""
    from shardline.flows import quarantine_view as qv

    try:
        return qv.rows_markdown(qv.previews(quarantine, qv.read_rows(quarantine)), total)
    except Exception as exc:  # noqa: BLE001 - the artifact is a view; the run goes on
        return f"*refused rows not shown: {qv.md(f'{type(exc).__name__}: {exc}')[:300]}*\n"


def publish_ingest_artifacts(dataset: str, manifests: list[Manifest],
                             report: ValidationReport | None, batch_id: str | None,
                             version: int | None, examples: list[dict[str, Any]],
                             quarantine: QuarantineSource | None = None) -> None:
    """Create the run's artifacts (call from inside a flow or task run). ``quarantine``
    names the batch's quarantine shards for the per-row table with thumbnails."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    if manifests:
        create_table_artifact(versions_rows(manifests), key=artifact_key(dataset, "versions"),
                              description=f"Versions of dataset {dataset}, latest first")
    if report is not None and batch_id is not None:
        create_markdown_artifact(validation_markdown(dataset, batch_id, report, version,
                                                     examples),
                                 key=artifact_key(dataset, "validation"),
                                 description=f"great-expectations results for batch {batch_id}")
        by_rule = report.counts["by_rule"]
        if by_rule:
            rows_md = _rows_md(quarantine, sum(by_rule.values()))
            create_markdown_artifact(
                quarantine_markdown(dataset, batch_id, by_rule, examples, rows_md),
                key=artifact_key(dataset, "quarantine"),
                description=f"Rows of batch {batch_id} refused, by rule, with thumbnails")


# -- the model view (after each training run) -------------------------------------------------
# how a primary metric (``trainer.objectives``) is named on the axis, and its bounds: a
# fraction lies in 0..1, an error in 0..inf; the trend plots the kind's primary metric
METRIC_LABELS = {"accuracy": "accuracy", "map": "mAP", "micro_f1": "micro-F1",
                 "macro_f1": "macro-F1", "mean_iou": "mean IoU",
                 "pixel_accuracy": "pixel accuracy", "rmse": "RMSE", "mae": "MAE", "r2": "R²"}
_BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "accuracy": (0.0, 1.0), "map": (0.0, 1.0), "micro_f1": (0.0, 1.0), "macro_f1": (0.0, 1.0),
    "mean_iou": (0.0, 1.0), "pixel_accuracy": (0.0, 1.0), "rmse": (0.0, None),
    "mae": (0.0, None), "r2": (None, 1.0)}
_LOWER_IS_BETTER = ("rmse", "mae")


def fitted_limits(values: list[float | None], pad: float = 0.15, min_span: float = 0.01,
                  bounds: tuple[float | None, float | None] = (0.0, 1.0)
                  ) -> tuple[float, float]:
    """An axis fitted to the data (not 0..1, which hides 97 -> 99 % moves): the values'
    range widened by ``pad`` of it (at least ``min_span`` in all, relative to the values'
    size when they exceed 1), clipped to ``bounds`` (None: unbounded; 0..1 for a
    fraction)."""
    xs = [v for v in values if v is not None]
    lo_bound, hi_bound = bounds
    if not xs:
        return (lo_bound if lo_bound is not None else 0.0,
                hi_bound if hi_bound is not None else 1.0)
    lo, hi = min(xs), max(xs)
    min_span *= max(1.0, max(abs(lo), abs(hi)))
    span = max(hi - lo, min_span)
    lo, hi = lo - pad * span, hi + pad * span
    if hi - lo < min_span:
        mid = (lo + hi) / 2
        lo, hi = mid - min_span / 2, mid + min_span / 2
    return (lo if lo_bound is None else max(lo_bound, lo),
            hi if hi_bound is None else min(hi_bound, hi))


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100.0 * x:.2f} %"


def _is_accuracy(m: dict[str, Any]) -> bool:
    """The model's mean row score is an accuracy (a class target, or a model recorded
    before metrics per kind); for other kinds it is row F1 or minus the MSE."""
    return m.get("primary", "accuracy") == "accuracy"


def model_view_rows(models: list[dict[str, Any]], ever_promoted: list[int]
                    ) -> list[dict[str, Any]]:
    """One row per model (``shardline.trainer.registry_view.model_rows``), latest first;
    ``promoted`` is ``live`` for the one ``promoted.json`` names, ``earlier`` for one
    promoted before. The accuracy cells are empty unless the target is a class; the
    ``primary metric`` cell names the kind's (``rmse 12.3400``)."""
    rows = []
    for m in sorted(models, key=lambda m: -m["model"]):
        state = ("live" if m.get("promoted") else
                 "earlier" if m["model"] in ever_promoted else "no")
        acc = _is_accuracy(m)
        rows.append({
            "model": m["model"],
            "dataset version": "" if m.get("dataset_version") is None
            else f"v{m['dataset_version']}",
            "held-out accuracy": _pct(m.get("accuracy")) if acc else "",
            "earlier data accuracy": _pct(m.get("accuracy_earlier")) if acc else "",
            "primary metric": m.get("metric") or "",
            "promoted": state,
            "gate": m.get("gate", m.get("status", "")),
            "reason": m.get("reason") or "",
            "created": m.get("created") or "",
            "moves of the live pointer (when, what, who)": m.get("moves") or "",
        })
    return rows


def trend_metric(models: list[dict[str, Any]]) -> str:
    """The metric the trend plots: the live model's primary metric, else the latest
    complete model's (``accuracy`` for a class target and for older models)."""
    done = [m for m in models if m.get("status", "complete") == "complete"]
    live = [m for m in done if m.get("promoted")]
    pick = live[0] if live else max(done, key=lambda m: m["model"], default={})
    return str(pick.get("primary", "accuracy"))


def trend_value(m: dict[str, Any], metric: str, earlier: bool = False) -> float | None:
    """``m``'s held-out value of ``metric`` (``earlier``: on earlier data, known for the
    accuracy only); None when the model leads with another metric or did not record it."""
    if m.get("primary", "accuracy") != metric:
        return None
    if metric == "accuracy":
        v = m.get("accuracy_earlier" if earlier else "accuracy")
    else:
        v = None if earlier else (m.get("metrics") or {}).get(metric)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def metric_text(x: float, metric: str) -> str:
    """A value as the axis shows it: a percent for a fraction, else 4 significant digits."""
    return f"{100 * x:.1f} %" if _BOUNDS.get(metric) == (0.0, 1.0) else f"{x:.4g}"


def _clamped(ys: list[float], lim: tuple[float, float]) -> tuple[list[float], list[str]]:
    """Values pinned inside the axis, and a marker per value: ``o`` in range, ``v`` / ``^``
    pinned to the bottom / top edge (a refused model far below the live line)."""
    lo, hi = lim
    pad = (hi - lo) * 0.02
    out, marks = [], []
    for y in ys:
        if y < lo:
            out.append(lo + pad)
            marks.append("v")
        elif y > hi:
            out.append(hi - pad)
            marks.append("^")
        else:
            out.append(y)
            marks.append("o")
    return out, marks


def trend_limits(models: list[dict[str, Any]], ever_promoted: list[int],
                 metric: str = "accuracy") -> tuple[float, float]:
    """The metric's axis: fitted to the promoted models (held-out and earlier data), so one
    refused model far off does not squash their line; all models when none was promoted.
    Clipped to 0..1 for a fraction, at 0 for an error, not at all otherwise."""
    done = [m for m in models if trend_value(m, metric) is not None]
    promo = [m for m in done if m["model"] in ever_promoted or m.get("promoted")] or done
    return fitted_limits([trend_value(m, metric) for m in promo] +
                         [trend_value(m, metric, earlier=True) for m in promo],
                         bounds=_BOUNDS.get(metric, (None, None)))


def trend_png(models: list[dict[str, Any]], ever_promoted: list[int]) -> bytes:
    """The held-out primary metric (:func:`trend_metric`; for accuracy also on earlier
    data) of the promoted models, as lines on an axis fitted to them; refused models as red
    marks off the line (pinned to the edge, with their value, when outside the axis); the
    live model ringed."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = trend_metric(models)
    label = METRIC_LABELS.get(metric, metric)
    value = {m["model"]: v for m in models if (v := trend_value(m, metric)) is not None}
    done = [m for m in models if m["model"] in value]
    promo = [m for m in done if m["model"] in ever_promoted or m.get("promoted")]
    refused = [m for m in done if m not in promo]
    lim = trend_limits(models, ever_promoted, metric)
    fig, ax = plt.subplots(figsize=(8, 3.4), dpi=90)
    ax.plot([m["model"] for m in promo], [value[m["model"]] for m in promo],
            color="tab:blue", marker="o", label=f"held-out {label} (promoted)")
    earlier = [(m["model"], trend_value(m, metric, earlier=True)) for m in promo
               if trend_value(m, metric, earlier=True) is not None]
    if earlier:
        ax.plot(*zip(*earlier, strict=True), color="tab:green", marker=".", linestyle=":",
                label="earlier data (promoted)")
    ys, marks = _clamped([value[m["model"]] for m in refused], lim)
    for m, y, mark in zip(refused, ys, marks, strict=True):
        ax.scatter([m["model"]], [y], marker=mark, color="tab:red", zorder=3,
                   label="refused" if m is refused[0] else None)
        if mark != "o":
            ax.annotate(metric_text(value[m["model"]], metric),
                        (m["model"], y), fontsize=7, color="tab:red",
                        xytext=(4, 4 if mark == "v" else -10), textcoords="offset points")
    live = [m for m in done if m.get("promoted")]
    if live:
        ax.scatter([live[0]["model"]], [value[live[0]["model"]]], s=180, facecolors="none",
                   edgecolors="black", zorder=4, label=f"live: model {live[0]['model']}")
    xs = sorted(m["model"] for m in done)
    ylabel = f"{label} (lower is better)" if metric in _LOWER_IS_BETTER else label
    ax.set(xlabel="model number", ylabel=ylabel, ylim=lim,
           title=f"held-out {label} by model (axis fitted to the promoted models)")
    if xs:
        ax.set_xticks(xs if len(xs) <= 25 else xs[:: max(1, len(xs) // 25)])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def trend_markdown(dataset: str, models: list[dict[str, Any]], ever_promoted: list[int]
                   ) -> str:
    import base64

    png = base64.b64encode(trend_png(models, ever_promoted)).decode()
    metric = trend_metric(models)
    live = next((m["model"] for m in models if m.get("promoted")), None)
    return (f"## Models of `{dataset}`: live model {live if live is not None else '(none)'}\n\n"
            f"![{METRIC_LABELS.get(metric, metric)} by model](data:image/png;base64,{png})\n")


def publish_model_view(store: Any, dataset: str, model: str) -> None:
    """The ``<dataset>-models`` table and ``<dataset>-models-trend`` plot (call from inside
    a flow or task run)."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from shardline.trainer.registry_view import model_history

    hist = model_history(store, dataset, model)
    models, ever = hist["models"], hist["promoted_history"]
    create_table_artifact(model_view_rows(models, ever), key=artifact_key(dataset, "models"),
                          description=f"Every {model} model of {dataset}, latest first; "
                                      "promoted: live / earlier / no")
    metric = trend_metric(models)
    create_markdown_artifact(trend_markdown(dataset, models, ever),
                             key=artifact_key(dataset, "models-trend"),
                             description=f"held-out {METRIC_LABELS.get(metric, metric)} "
                                         f"across {dataset} models")
