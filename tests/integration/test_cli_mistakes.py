"""Common data mistakes through ``shardline ingest`` as a user runs it (a subprocess, stdout
a pipe): one line on stderr naming the rule, the value, the object and the fix (about 160
characters besides the config's path), exit 1, no traceback, the counts and the other rules
on the following lines (stdout); ``shardline quarantine`` then shows the refused rows of the
failed batch.

Real parts: moto S3 over HTTP, a Spark Connect server, a Prefect server (test harness).
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

import pytest

from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from shardline.infra.demo_data import digits, jsonl_bytes
from tests.integration.cli_helpers import cli_env, write_config
from tests.integration.cli_helpers import run_cli as run


@pytest.fixture
def env(prefect_harness: None, store_settings: StoreSettings, spark_remote: str,
        tmp_path: Path) -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    return {**cli_env(store_settings, tmp_path), "SHARDLINE_SPARK_REMOTE": spark_remote,
            "PREFECT_API_URL": str(PREFECT_API_URL.value())}


def error_line(r: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a failed command: exit 1, no traceback, one line."""
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and len(lines) == 1, r.stderr[-3000:]
    assert lines[0].startswith("error: ")
    return lines[0]


def test_unknown_label_names_the_value_the_count_and_the_fix(
        env: dict[str, str], store: ObjectStore, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, "mistlabel")
    rows = [json.loads(x) for x in jsonl_bytes(digits(0, 50)).decode().splitlines()]
    for r in rows[:10]:
        r["label"] = "cat"
    key = "incoming/mistlabel/a.jsonl"
    store.put_bytes(key, ("\n".join(json.dumps(r) for r in rows) + "\n").encode())
    r = run(env, "ingest", "-c", str(cfg))
    line = error_line(r)
    assert len(line) - len(f"s3://{store.bucket}/{key}") - len(str(cfg)) <= 160, line
    assert "unknown_label" in line and '"cat"' in line and "10 rows" in line, line
    assert key in line and 'add "cat" to classes, or fix the labels' in line, line
    assert f"shardline quarantine -c {cfg}" in line, line
    # the detail lines follow on stdout, indented (after the stages' lines of a pipe)
    details = [d for d in r.stdout.splitlines() if d.startswith("  ")]
    assert any("failed validation, nothing was published" in d for d in details), r.stdout
    assert any("{'unknown_label': 10}" in d for d in details), r.stdout

    shown = run(env, "quarantine", "-c", str(cfg), "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    doc = json.loads(shown.stdout)
    assert doc["version"] is None and doc["failed_batch"], doc
    refused = [r for r in doc["rows"] if r["rule"] == "unknown_label"]
    assert sorted(r["row"] for r in refused) == list(range(10)), doc["rows"]
    assert all(r["key"] == key and "cat" in r["message"] for r in refused)


def test_a_missing_label_column_is_one_record_naming_the_columns_found(
        env: dict[str, str], store: ObjectStore, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, "mistcol")
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["id", "image", "tag"])
    for d in digits(0, 50):
        w.writerow([d.id, d.b64(), "x"])
    key = "incoming/mistcol/a.csv"
    store.put_bytes(key, out.getvalue().encode())
    r = run(env, "ingest", "-c", str(cfg))
    line = error_line(r)
    assert f'missing_column: s3://{store.bucket}/{key}: no column "label"' in line, line
    assert "columns found: id, image, tag; set label_column" in line, line
    assert "missing_label:" not in line + r.stdout, line
    assert len(line) - len(f"s3://{store.bucket}/{key}") - len(str(cfg)) <= 160, line
    assert any("{'missing_column': 1}" in d for d in r.stdout.splitlines()), r.stdout
    assert "  1 source(s) set aside: upload again (fixed) to retry" in r.stdout.splitlines()

    doc = json.loads(run(env, "quarantine", "-c", str(cfg), "--json").stdout)
    assert [(r["key"], r["row"], r["rule"]) for r in doc["rows"]] == \
        [(key, -1, "missing_column")], doc
