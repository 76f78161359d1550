"""Validate: a great-expectations suite, derived from the dataset config, on a converted batch.

Two suites run on the batch's row table (ids, labels, status; no pixels, which the row
checks already decoded and measured):

- ``<dataset>.batch`` over every input row: the batch is not empty (``min_rows``) and the
  share of quarantined rows stays within ``max_quarantine_fraction`` (a ``mostly`` on
  status == "ok"). This is the gate that stops a bad drop from being published.
- ``<dataset>.published`` over the rows about to be published: ids present and unique,
  labels present and within the class range. The row checks already enforce these; the
  suite re-checks the data actually handed to publish, so a conversion bug cannot slip by.

A dataset with typed fields adds ``<dataset>.fields`` (``validate_fields``): per field its
type, nulls, finiteness, min/max, vocabulary and class range, over the data shards.

The first two run over the tasks' row files one id-bucket range at a time (``rowfiles``), each
chunk a pandas frame of at most ~``CHUNK_ROWS`` rows, and the chunks' results are merged
(``merge``): the driver never holds the batch's rows. A 1M-row batch is one chunk.

The report (JSON) is written to ``reports/<run>/validation.json`` whatever the outcome.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from shardline.core.config import DatasetConfig
from shardline.core.errors import ValidationFailed
from shardline.core.schema import report_key
from shardline.core.store import Store
from shardline.tasks.convert.rowfiles import PLAIN_SCHEMA
from shardline.tasks.convert.stage import Converted
from shardline.tasks.mistakes import (
    REFUSED_ROWS,
    mistake_clauses,
    mistakes_line,
    refused_rows,
)
from shardline.tasks.validate_fields import field_expectations, field_frames

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ValidationReport:
    success: bool
    suites: list[str]
    results: list[dict[str, Any]]
    counts: dict[str, Any]
    report: str          # s3:// URI of the JSON report
    mistakes: str = ""   # a failed batch's refused rows in one line (tasks.mistakes)
    clauses: tuple[str, ...] = ()    # ... one clause per rule, most rows first
    refused: tuple[dict[str, Any], ...] = ()   # ... its first refused row of each rule

    def summary(self) -> dict[str, Any]:
        failed = [r["expectation"] for r in self.results if not r["success"]]
        return {"suites": self.suites, "success": self.success, "counts": self.counts,
                "evaluated": len(self.results), "failed": failed, "report": self.report}

    def failure_message(self) -> str:
        parts = []
        for r in self.results:
            if not r["success"]:
                parts.append(f"{r['suite']}: {r['expectation']}({r['column'] or ''}) "
                             f"{r['detail']}")
        return "; ".join(parts)


def _suites(cfg: DatasetConfig) -> dict[str, list[Any]]:
    import great_expectations.expectations as gxe

    v = cfg.validation
    return {
        f"{cfg.name}.batch": [
            gxe.ExpectTableRowCountToBeBetween(min_value=v.min_rows),
            gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["ok"],
                                            mostly=1.0 - v.max_quarantine_fraction),
        ],
        f"{cfg.name}.published": [
            gxe.ExpectColumnValuesToNotBeNull(column="id"),
            gxe.ExpectColumnValuesToBeUnique(column="id"),
            # the row files record a class index for class targets only
            *([gxe.ExpectColumnValuesToNotBeNull(column="label"),
               gxe.ExpectColumnValuesToBeBetween(column="label", min_value=0,
                                                 max_value=len(cfg.classes) - 1)]
              if cfg.target_spec.kind == "class" else []),
        ],
        # typed fields: one group of expectations per field, over the data shards
        **({f"{cfg.name}.fields": field_expectations(cfg)} if cfg.typed else {}),
    }


def _detail_of(r: dict[str, Any]) -> str:
    if "unexpected_count" in r:
        sample = r.get("partial_unexpected_list") or []
        return (f"unexpected {r['unexpected_count']} of {r.get('element_count')} rows "
                f"({r.get('unexpected_percent') or 0:.1f}%), e.g. {sample[:5]}")
    if "observed_value" in r:
        return f"observed {r['observed_value']}"
    return ""


def run_suites(cfg: DatasetConfig, conv: Converted, store: Store | None = None,
               max_rows: int | None = None) -> tuple[bool, list[dict[str, Any]]]:
    """Run both suites in an ephemeral GX context, one id-bucket range of the row files
    (~``max_rows`` rows) at a time, and merge the chunks' results (``merge``): the driver
    holds one chunk, never the batch. Equal ids share a bucket, so a uniqueness check per
    chunk is one over the batch. Returns (success, per-expectation rows)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = ctx.data_sources.add_pandas("shardline")
    runs: list[tuple[str, Any, list[str]]] = []
    for name, expectations in _suites(cfg).items():
        suite = ctx.suites.add(gx.ExpectationSuite(name=name))
        for e in expectations:
            suite.add_expectation(e)
        bd = source.add_dataframe_asset(name=name).add_batch_definition_whole_dataframe("all")
        vd = ctx.validation_definitions.add(
            gx.ValidationDefinition(name=f"{name}.check", data=bd, suite=suite))
        runs.append((name, vd, ["id", "label"] if name.endswith(".published") else ["status"]))
    chunks: dict[str, list[list[dict[str, Any]]]] = {name: [] for name, _, _ in runs}
    for name, vd, columns in runs:
        frames: Iterator[Any] = (
            field_frames(cfg, conv, store) if name.endswith(".fields") else
            (t.to_pandas() for t in _chunks(conv, store, max_rows, columns)))
        for frame in frames:
            out = vd.run(batch_parameters={"dataframe": frame},
                         result_format={"result_format": "SUMMARY"})
            chunks[name].append([_row(name, res) for res in out.results])
            del frame, out
    results = [r for name, _, _ in runs for r in merge(chunks[name])]
    return all(r["success"] for r in results), results


def _chunks(conv: Converted, store: Store | None, max_rows: int | None, columns: list[str]
            ) -> Iterator[pa.Table]:
    """The columns a suite needs: every row's status (the batch suite), or the id and label
    of each row to publish; in chunks, or one empty table if none (the row-count
    expectation still runs)."""
    empty = True
    for table in conv.iter_rows(store, max_rows, passed_only=columns != ["status"],
                                columns=columns):
        empty = False
        yield table
    if empty:
        yield pa.schema([PLAIN_SCHEMA.field(c) for c in columns]).empty_table()


def _row(name: str, res: Any) -> dict[str, Any]:
    cfg_e = res.expectation_config
    assert cfg_e is not None, f"{name}: GX returned a result without its expectation"
    column = cfg_e.kwargs.get("column")
    return {"suite": name, "expectation": cfg_e.type, "column": column,
            "field": column.split(".")[0] if column and name.endswith(".fields") else None,
            "kwargs": {k: v for k, v in cfg_e.kwargs.items() if k not in ("batch_id",)},
            "success": bool(res.success), "result": dict(res.result or {})}


def merge(chunks: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One result per expectation from its results over the chunks: the row count is the
    sum of the chunks' (checked against its bounds); a column expectation with ``mostly``
    passes when the share of expected rows over all chunks is at least ``mostly``; any other
    passes when it passed on every chunk. Counts are summed for the detail."""
    out = []
    for per in zip(*chunks, strict=True):
        first = per[0]
        kw = first["kwargs"]
        rs = [p["result"] for p in per]
        merged: dict[str, Any] = {}
        if first["expectation"] == "expect_table_row_count_to_be_between":
            n = sum(int(r.get("observed_value") or 0) for r in rs)
            merged["observed_value"] = n
            ok = (kw.get("min_value") is None or n >= kw["min_value"]) and \
                (kw.get("max_value") is None or n <= kw["max_value"])
        else:
            ok = all(p["success"] for p in per)
            if any("unexpected_count" in r for r in rs):
                bad = sum(int(r.get("unexpected_count") or 0) for r in rs)
                seen = sum(int(r.get("element_count") or 0) for r in rs)
                sample = [v for r in rs for v in (r.get("partial_unexpected_list") or [])][:20]
                merged = {"unexpected_count": bad, "element_count": seen,
                          "unexpected_percent": 100.0 * bad / seen if seen else 0.0,
                          "partial_unexpected_list": sample}
                if kw.get("mostly") is not None:
                    ok = seen == 0 or (seen - bad) / seen >= float(kw["mostly"])
        out.append({k: v for k, v in first.items() if k != "result"} |
                   {"success": bool(ok), "detail": _detail_of(merged)})
    return out


def validate(store: Store, cfg: DatasetConfig, conv: Converted) -> ValidationReport:
    """Run the suites, store the JSON report, return it. Does not raise on failure:
    :func:`require_success` is the gate."""
    success, results = run_suites(cfg, conv, store)
    counts = {"rows": conv.rows_in, "ok": conv.rows_ok, "quarantined": conv.rows_quarantined,
              "quarantine_fraction": round(conv.rows_quarantined / max(conv.rows_in, 1), 4),
              "max_quarantine_fraction": cfg.validation.max_quarantine_fraction,
              "by_rule": conv.by_rule}
    key = report_key(cfg.prefix, conv.run_id)
    report = ValidationReport(success, sorted({r["suite"] for r in results}), results, counts,
                              store.uri(key))
    refused = [] if success else refused_rows(
        store, [s.path for s in conv.quarantine_shards])
    mistakes = mistakes_line(refused, store.uri) if refused else ""
    firsts = {r["rule"]: r for r in reversed(refused)}
    report = dataclasses.replace(report, mistakes=mistakes,
                                 clauses=tuple(mistake_clauses(refused, store.uri)),
                                 refused=tuple(firsts.values()))
    store.put_json(key, {"batch": conv.batch.id, "run": conv.run_id, "success": success,
                         "counts": counts, "results": results,
                         "quarantined_examples": conv.quarantine_examples(store=store),
                         # a failed batch publishes no quarantine: its rows are kept here
                         # for `shardline quarantine` (the first REFUSED_ROWS)
                         "mistakes": mistakes, "refused_rows": refused[:REFUSED_ROWS]})
    log.info("validation %s for batch %s: %d expectations, report %s",
             "passed" if success else "FAILED", conv.batch.id, len(results), report.report)
    return report


def require_success(report: ValidationReport, batch_id: str) -> None:
    """Raise :class:`ValidationFailed` naming the failing expectations and counts."""
    if report.success:
        return
    c = report.counts
    failed = f"batch {batch_id} failed validation, nothing was published: " \
             f"{report.failure_message()}"
    clauses = list(report.clauses) or ([report.mistakes] if report.mistakes else [])
    raise ValidationFailed(
        clauses[0] if clauses else failed,
        *clauses[1:4],
        *([f"and {len(clauses) - 4} more rule(s)"] if len(clauses) > 4 else []),
        *([failed] if clauses else []),
        f"rows: {c['rows']} in, {c['quarantined']} quarantined ({c['quarantine_fraction']:.1%},"
        f" limit {c['max_quarantine_fraction']:.1%}) by rule {c['by_rule']}",
        f"fix the uploads (see the quarantine reasons and {report.report}), or raise "
        "dataset.validation.max_quarantine_fraction if this is expected",
    )
