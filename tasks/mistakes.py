"""The data mistakes of a refused batch in one line: which rule, which values (a few, with
counts), which object, and what to do.

A batch that fails validation publishes nothing; the person who uploaded it reads one line.
:func:`refused_rows` reads the batch's quarantine shards (staged, not yet published) once,
at most ``limit`` rows; :func:`mistakes_line` turns them into that line, most common
mistake first, e.g.::

    unknown_label: label "cat" in 10 rows of s3://b/incoming/x/a.jsonl (rows 0..9): add "cat"
    to classes, or fix the labels

A whole object refused (``source_row`` -1: a missing column, an unreadable file) is shown
by its own message, which already names the object, the rule and the fix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from shardline.core.store import Store

REFUSED_ROWS = 200        # rows of a failed batch the report keeps for `shardline quarantine`
_FIX = {
    "missing_label": "give every row a label (or set label_column to the column holding it)",
    "missing_id": "give every row an id (or set id_column to the column holding it)",
    "duplicate_id": "give each row its own id, or drop the repeated rows (to change a "
                    "published row, upload it under the corrections/ prefix)",
    "unknown_id": "a correction replaces a published row: check the id, or upload the row "
                  "outside corrections/ to add it",
    "wrong_shape": "resize the images to [dataset.image] shape, or change shape",
    "undecodable_image": "upload PNG or JPEG bytes (base64 in JSONL/CSV)",
}


def refused_rows(store: Store, shard_paths: list[str], limit: int = 10_000
                 ) -> list[dict[str, Any]]:
    """Up to ``limit`` quarantined rows (source_key, source_row, id, label, rule, message,
    excerpt) from the batch's quarantine shards, in source order."""
    out: list[dict[str, Any]] = []
    for path in shard_paths:
        if len(out) >= limit:
            break
        table = pa.ipc.open_file(pa.BufferReader(store.get_bytes(path))).read_all()
        for r in table.slice(0, limit - len(out)).to_pylist():
            raw = r.get("raw") or b""
            out.append({"source_key": r["source_key"], "source_row": r["source_row"],
                        "id": r.get("id"), "label": r.get("label"), "rule": r["rule"],
                        "message": r["message"],
                        "excerpt": " ".join(raw[:240].decode("utf-8", "replace").split())[:60]})
    out.sort(key=lambda r: (r["source_key"], r["source_row"]))
    return out


def _rows_span(rows: list[int]) -> str:
    rows = sorted(rows)
    if len(rows) == 1:
        return f"row {rows[0]}"
    if rows == list(range(rows[0], rows[-1] + 1)):
        return f"rows {rows[0]}..{rows[-1]}"
    shown = ", ".join(map(str, rows[:5]))
    return f"rows {shown}{', ...' if len(rows) > 5 else ''}"


def _one_rule(rule: str, rows: list[dict[str, Any]], uri: Any) -> str:
    whole = [r for r in rows if r["source_row"] < 0]
    if whole:          # an object refused whole: its message names it and the fix
        more = f" (and {len(whole) - 1} more object(s))" if len(whole) > 1 else ""
        return f"{rule}: {whole[0]['message']}{more}"
    keys = Counter(r["source_key"] for r in rows)
    key, _ = keys.most_common(1)[0]
    where = f"{uri(key)} ({_rows_span([r['source_row'] for r in rows if r['source_key'] == key])})"
    if len(keys) > 1:
        where += f" and {len(keys) - 1} more object(s)"
    if rule == "unknown_label":
        values = Counter(str(r["label"]) for r in rows if r.get("label") is not None)
        shown = ", ".join(f'"{v}" in {n} row{"s" if n > 1 else ""}'
                          for v, n in values.most_common(3))
        more = f" and {len(values) - 3} other value(s)" if len(values) > 3 else ""
        names = " ".join(f'"{v}"' for v, _ in values.most_common(3))
        return (f"unknown_label: label {shown}{more} of {where}: add {names} to classes, "
                "or fix the labels")
    fix = _FIX.get(rule, "fix these rows and upload again")
    return f"{rule}: {len(rows)} rows of {where}, e.g. {rows[0]['message']}: {fix}"


def _ranked(rows: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_rule.setdefault(r["rule"], []).append(r)
    return sorted(by_rule.items(), key=lambda kv: -len(kv[1]))


def mistake_clauses(rows: list[dict[str, Any]], uri: Any) -> list[str]:
    """One clause per rule of ``rows`` (as :func:`refused_rows` returns), most rows first:
    the rule, the values (a few, with counts), the object and the fix. ``uri(key)`` spells
    an object's address."""
    return [_one_rule(rule, rs, uri) for rule, rs in _ranked(rows)]


def mistakes_line(rows: list[dict[str, Any]], uri: Any, max_rules: int = 2) -> str:
    """The most common mistakes of ``rows`` in one line: :func:`mistake_clauses` of the
    first ``max_rules`` rules, then the others' names and counts."""
    ranked = _ranked(rows)
    parts = mistake_clauses(rows, uri)[:max_rules]
    if len(ranked) > max_rules:
        parts.append(f"{len(ranked) - max_rules} more rule(s): "
                     + ", ".join(f"{k} ({len(v)})" for k, v in ranked[max_rules:]))
    return "; ".join(parts)


def fix_for(rule: str) -> str:
    """What to do about rows refused by ``rule`` (a person's words)."""
    if rule == "unknown_label":
        return "add the label to classes, or fix the labels"
    return _FIX.get(rule, "fix these rows and upload again")


def example_value(row: dict[str, Any]) -> str:
    """The offending value of a refused row, as short text: the label of an unknown label,
    else the start of the raw row."""
    if row.get("rule") == "unknown_label" and row.get("label") is not None:
        return f'label "{row["label"]}"'
    return str(row.get("excerpt") or "")


def fix_rows(by_rule: dict[str, int], refused_rows: Sequence[dict[str, Any]],
             examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rule, most rows first: the count, an example (object and row), its value where
    the batch's refused rows were read (``refused_rows``: a failed batch's first row of each
    rule), and what to do. The validation report's table (flows/artifacts.py)."""
    refused = {r["rule"]: r for r in refused_rows}
    rows = []
    for rule, n in sorted(by_rule.items(), key=lambda kv: -kv[1]):
        ex = refused.get(rule) or next((e for e in examples if e.get("rule") == rule), {})
        row = ex.get("source_row")
        where = ex.get("source_key", "")
        if where and row is not None:
            where += " (whole object)" if row < 0 else f" row {row}"
        value = example_value(ex) if rule in refused else ""
        if rule == "unknown_label" and rule in refused and ex.get("label") is not None:
            fix = f'add "{ex["label"]}" to classes, or fix the labels'
        else:
            fix = fix_for(rule)
        rows.append({"rule": rule, "rows": n, "example": where,
                     "value": value or (f"id {ex['id']}" if ex.get("id") else ""), "fix": fix})
    return rows


def latest_failed_report(store: Store, prefix: str) -> dict[str, Any] | None:
    """The newest validation report under ``<prefix>/reports/`` when its batch failed and no
    version was committed after it (else None): the rows a failed ingest refused, for
    ``shardline quarantine``. Lists the reports (one per ingest run that validated)."""
    from shardline.core.latest import latest_version
    from shardline.core.layout import version_key

    reports = [o for o in store.list(f"{prefix}/reports/")
               if o.key.endswith("/validation.json")]
    if not reports:
        return None
    newest = max(reports, key=lambda o: o.last_modified)
    latest = latest_version(store, prefix)
    if latest is not None:
        committed = store.head(version_key(prefix, latest))
        if committed is not None and committed.last_modified > newest.last_modified:
            return None
    doc = store.get_json(newest.key)
    if not isinstance(doc, dict) or doc.get("success", True):
        return None
    return {**doc, "uri": store.uri(newest.key)}
