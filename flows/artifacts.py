"""What a person reads in the Prefect UI: tables and markdown built from stage results.

Builders are pure (data in, table rows or markdown out) so they are tested without a
server; :func:`publish_ingest_artifacts` hands them to Prefect under stable keys per dataset
(``<dataset>-versions``, ``<dataset>-validation``, ``<dataset>-quarantine``), so the UI's
artifact page shows the latest of each and its history.
"""

from __future__ import annotations

import re
from typing import Any

from shardline.core.manifest import Manifest
from shardline.tasks.validate import ValidationReport


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
            "quarantined": m.quarantine.get("rows", 0),
            "validation": "passed" if m.validation.get("success") else "failed",
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
                        version: int | None) -> str:
    c = report.counts
    verdict = "PASSED" if report.success else "FAILED: nothing was published"
    lines = [
        f"# Validation of `{dataset}` batch `{batch_id}`: {verdict}",
        "",
        f"- version: {version if version is not None else '(none)'}",
        f"- rows in: {c['rows']}, published: {c['ok']}, quarantined: {c['quarantined']} "
        f"({c['quarantine_fraction']:.1%}; limit {c['max_quarantine_fraction']:.1%})",
        f"- report: `{report.report}`",
        "",
        "| suite | expectation | column | result | detail |",
        "|---|---|---|---|---|",
    ]
    for r in report.results:
        mark = "pass" if r["success"] else "**FAIL**"
        detail = str(r["detail"]).replace("|", "/")
        lines.append(f"| {r['suite']} | {r['expectation']} | {r['column'] or ''} | {mark} | "
                     f"{detail} |")
    if c["by_rule"]:
        lines += ["", "## Quarantined rows by rule", "", "| rule | rows |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in c["by_rule"].items()]
    return "\n".join(lines) + "\n"


def publish_ingest_artifacts(dataset: str, manifests: list[Manifest],
                             report: ValidationReport | None, batch_id: str | None,
                             version: int | None, examples: list[dict[str, Any]]) -> None:
    """Create the run's artifacts (call from inside a flow or task run)."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    if manifests:
        create_table_artifact(versions_rows(manifests), key=artifact_key(dataset, "versions"),
                              description=f"Versions of dataset {dataset}, latest first")
    if report is not None and batch_id is not None:
        create_markdown_artifact(validation_markdown(dataset, batch_id, report, version),
                                 key=artifact_key(dataset, "validation"),
                                 description=f"great-expectations results for batch {batch_id}")
        rows = quarantine_rows(report.counts["by_rule"], examples)
        if rows:
            create_table_artifact(rows, key=artifact_key(dataset, "quarantine"),
                                  description=f"Quarantined rows of batch {batch_id} by rule")
