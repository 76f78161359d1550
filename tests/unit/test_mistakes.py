"""The one-line summary of a refused batch (tasks.mistakes) and the shorthand's missing
column refused once per source (tasks.convert.readers)."""

from __future__ import annotations

import pytest

from shardline.core.config import DatasetConfig
from shardline.tasks.convert.readers import Unreadable, read_csv, read_jsonl
from shardline.tasks.mistakes import mistakes_line


def uri(key: str) -> str:
    return f"s3://b/{key}"


def row(key: str, i: int, rule: str, label: str | None = None, msg: str = "m") -> dict:
    return {"source_key": key, "source_row": i, "id": f"r{i}", "label": label, "rule": rule,
            "message": msg}


def test_unknown_labels_are_named_with_counts_object_rows_and_fix() -> None:
    rows = [row("in/a.jsonl", i, "unknown_label", "cat") for i in range(10)] + \
        [row("in/a.jsonl", 20 + i, "unknown_label", "dog") for i in range(2)] + \
        [row("in/b.jsonl", 3, "missing_id")]
    line = mistakes_line(rows, uri)
    assert line.startswith('unknown_label: label "cat" in 10 rows, "dog" in 2 rows of '
                           "s3://b/in/a.jsonl (rows 0, 1, 2, 3, 4, ...)"), line
    assert 'add "cat" "dog" to classes, or fix the labels' in line
    assert "missing_id: 1 rows of s3://b/in/b.jsonl (row 3)" in line and "give every row an id" \
        in line


def test_a_whole_object_is_its_own_message_and_more_rules_are_counted() -> None:
    rows = [row("in/a.csv", -1, "missing_column", msg="s3://b/in/a.csv: no column \"label\"")] + \
        [row("in/c.jsonl", i, "duplicate_id") for i in range(3)] + \
        [row("in/c.jsonl", 9, "wrong_shape"), row("in/c.jsonl", 8, "undecodable_image")]
    line = mistakes_line(rows, uri)
    assert line.startswith("duplicate_id: 3 rows of s3://b/in/c.jsonl (rows 0..2)"), line
    assert 'missing_column: s3://b/in/a.csv: no column "label"' in line
    assert "1 more rule(s)" in line or "2 more rule(s)" in line


CFG = DatasetConfig(name="d", incoming="incoming/d/", classes=("0", "1"))


def test_the_shorthand_refuses_a_source_without_the_label_column_once() -> None:
    data = b"id,image,tag\n1,xx,a\n2,yy,b\n"
    with pytest.raises(Unreadable) as e:
        list(read_csv(data, None, CFG))  # type: ignore[arg-type]
    assert e.value.rule == "missing_column"
    assert e.value.message == ('no column "label"; columns found: id, image, tag; set '
                               "label_column (or add the column)")
    with pytest.raises(Unreadable, match='no column "label"; columns found: id, image'):
        list(read_jsonl(b'{"id": 1, "image": "x"}\n{"id": 2, "image": "y"}\n', None, CFG))  # type: ignore[arg-type]
    # one row without a label is that row's problem, not the object's
    kept = list(read_jsonl(b'{"id": 1, "image": "x"}\n{"id": 2, "label": 1, "image": "y"}\n',
                           None, CFG))  # type: ignore[arg-type]
    assert len(kept) == 2


def test_the_newest_failed_report_is_shown_until_a_version_follows_it(tmp_path) -> None:
    import os
    import time

    from shardline.core.folder_store import FolderStore
    from shardline.core.layout import report_key, version_key
    from shardline.tasks.mistakes import latest_failed_report

    store = FolderStore(tmp_path)
    assert latest_failed_report(store, "lake/d") is None
    store.put_json(report_key("lake/d", "r1"), {"batch": "b1", "success": False,
                                                "refused_rows": [{"rule": "x"}]})
    doc = latest_failed_report(store, "lake/d")
    assert doc is not None and doc["batch"] == "b1" and doc["uri"].endswith("validation.json")
    # a version committed after it: the failure is history, the version's quarantine shows
    store.put_json(version_key("lake/d", 1), {"format": 3})
    later = time.time() + 5
    os.utime(store.uri(version_key("lake/d", 1)), (later, later))
    assert latest_failed_report(store, "lake/d") is None


def _failed_report(rows: list[dict]) -> object:
    import dataclasses

    from shardline.tasks.mistakes import mistake_clauses
    from shardline.tasks.validate import ValidationReport

    by_rule: dict[str, int] = {}
    for r in rows:
        by_rule[r["rule"]] = by_rule.get(r["rule"], 0) + 1
    counts = {"rows": 50, "ok": 50 - len(rows), "quarantined": len(rows),
              "quarantine_fraction": len(rows) / 50, "max_quarantine_fraction": 0.05,
              "by_rule": by_rule}
    results = [{"suite": "rows", "expectation": "quarantine_fraction_at_most", "column": None,
                "success": False, "detail": f"{len(rows) / 50:.1%} > 5.0%"}]
    firsts = {r["rule"]: r for r in reversed(rows)}
    return dataclasses.replace(
        ValidationReport(False, ["rows"], results, counts, "s3://b/lake/d/reports/r/v.json"),
        mistakes=mistakes_line(rows, uri), clauses=tuple(mistake_clauses(rows, uri)),
        refused=tuple(firsts.values()))


def test_a_failed_batch_raises_a_short_headline_with_the_detail_on_following_lines() -> None:
    import pickle

    from shardline.core.errors import ValidationFailed
    from shardline.tasks.validate import require_success

    rows = [row("incoming/d/a.jsonl", i, "unknown_label", "cat") for i in range(10)] + \
        [row("incoming/d/a.jsonl", 30, "missing_id")]
    with pytest.raises(ValidationFailed) as e:
        require_success(_failed_report(rows), "b123")   # type: ignore[arg-type]
    exc = e.value
    assert exc.headline == ('unknown_label: label "cat" in 10 rows of s3://b/incoming/d/a.jsonl '
                            '(rows 0..9): add "cat" to classes, or fix the labels')
    assert len(exc.headline) <= 160
    assert exc.details[0].startswith("missing_id: 1 rows of s3://b/incoming/d/a.jsonl (row 30)")
    assert "batch b123 failed validation, nothing was published" in exc.details[1]
    assert "by rule {'unknown_label': 10, 'missing_id': 1}" in exc.details[2]
    assert str(exc).splitlines()[0] == exc.headline and "\n  rows: 50 in" in str(exc)
    again = pickle.loads(pickle.dumps(exc))   # a flow run hands it back as is
    assert (again.headline, again.details) == (exc.headline, exc.details)


def test_the_validation_report_says_per_rule_the_count_an_example_value_and_the_fix() -> None:
    from shardline.flows.artifacts import validation_markdown

    rows = [row("incoming/d/a.jsonl", 4 + i, "unknown_label", "cat") for i in range(10)] + \
        [row("incoming/d/b.jsonl", 7, "missing_id")]
    text = validation_markdown("d", "b123", _failed_report(rows), None)  # type: ignore[arg-type]
    table = text.split("## What to fix, per rule")[1].split("##")[0]
    lines = [x for x in table.splitlines() if x.startswith("| ")]
    assert lines[0] == "| rule | rows | example | value | fix |"
    assert lines[1] == ('| unknown\\_label | 10 | incoming/d/a.jsonl row 4 | label "cat" | '
                        'add "cat" to classes, or fix the labels |'), lines[1]
    assert lines[2].startswith("| missing\\_id | 1 | incoming/d/b.jsonl row 7 | ")
    assert lines[2].endswith("| give every row an id \\(or set id\\_column to the column "
                             "holding it\\) |"), lines[2]
    assert "FAILED: nothing was published" in text
