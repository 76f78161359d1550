"""Runs are the dataset's in the Prefect UI whatever becomes of them, on a real Prefect
server (``prefect_harness``): a failed ingest is named ``ingest-<dataset>-failed-...`` and
tagged with its dataset (before, it kept ``ingest-<dataset>-running-<id>`` and no tags, so
filtering by the dataset's tag hid exactly the failures), whether it failed before or after
reading its config; a refused model ends in a Completed state named ``Refused`` with the
gate's reason and the tag ``gate:refused``, while the flow's caller still gets the result.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _runs(flow: str) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    with get_client(sync_client=True) as client:
        return list(client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[flow]))))


def test_a_failed_ingest_is_named_and_tagged_for_its_dataset(
        prefect_harness: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from shardline.flows.ingest import ingest

    monkeypatch.delenv("SHARDLINE_BUCKET", raising=False)    # fails after reading the config
    monkeypatch.chdir(tmp_path)                              # and no .env to fill it in
    doc = (ROOT / "examples" / "digits.toml").read_text().replace(
        'name = "digits"', 'name = "labelled"')
    with pytest.raises(Exception, match="SHARDLINE_BUCKET"):
        ingest(config=doc)
    with pytest.raises(Exception, match="classes"):          # fails reading the config
        ingest(config={"dataset": {"name": "broken", "incoming": "in/"}})
    runs = {r.name.split("-")[1]: r for r in _runs("ingest")}
    for ds in ("labelled", "broken"):
        r = runs[ds]
        assert r.state_type.value == "FAILED"
        assert re.fullmatch(rf"ingest-{ds}-failed-cli-[0-9a-f]{{6}}", r.name), r.name
        assert {"shardline", "ingest", ds, "trigger:cli"} <= set(r.tags), r.tags


def test_a_refused_model_is_visibly_refused(prefect_harness: None) -> None:
    from prefect import flow

    from shardline.flows.runs import gate_outcome

    @flow(name="gate-outcome-check")
    def fake_train(promoted: bool) -> dict[str, Any]:
        return gate_outcome({"model_version": 7, "promoted": promoted}, promoted,
                            "accuracy 0.91 below the live model's 0.97")

    assert fake_train(False) == {"model_version": 7, "promoted": False}   # the caller's dict
    assert fake_train(True) == {"model_version": 7, "promoted": True}
    runs = {r.parameters["promoted"]: r for r in _runs("gate-outcome-check")}
    refused, promoted = runs[False], runs[True]
    assert refused.state_type.value == "COMPLETED" and refused.state_name == "Refused"
    assert "model 7 refused: accuracy 0.91" in (refused.state.message or "")
    assert "gate:refused" in refused.tags
    assert promoted.state_name == "Completed" and "gate:promoted" in promoted.tags
