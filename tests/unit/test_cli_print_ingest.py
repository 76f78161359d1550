"""The ingest summary line: rules in parentheses only when the run knows them (a batch
another run published first comes back without its rule counts)."""

from __future__ import annotations

import pytest

from shardline.cli.common import print_ingest


def result(created: bool, by_rule: dict[str, int]) -> dict[str, object]:
    return {"dataset": "digits", "created": created, "version": 1, "rows_published": 1000,
            "shards": 2, "rows_quarantined": 4, "quarantine_by_rule": by_rule,
            "manifest": "s3://b/lake/digits/versions/v000001.json"}


def test_rules_are_listed_when_known(capsys: pytest.CaptureFixture[str]) -> None:
    print_ingest(result(True, {"missing_id": 1, "unknown_label": 3}))
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("digits published version 1: 1000 rows in 2 new shards, 4 quarantined "
                     "(missing_id: 1, unknown_label: 3)")


def test_an_already_published_batch_does_not_claim_no_rules(
        capsys: pytest.CaptureFixture[str]) -> None:
    print_ingest(result(False, {}))
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("digits already published as version 1: 1000 rows in 2 new shards, "
                     "4 quarantined")
