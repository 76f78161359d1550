"""Pure parts of the flows' UI and parameters: the fitted accuracy axis, the model view's
rows, the training progress callable, run names/tags/triggers, and the config source kinds
(by value, by URI, by path). No server: the Prefect and S3 paths are covered by
tests/integration/test_train_flow.py and test_ingest_flow.py."""

from __future__ import annotations

import types
import uuid
from pathlib import Path

import pytest

from shardline.core.errors import ConfigError
from shardline.flows.artifacts import fitted_limits, model_view_rows, trend_png
from shardline.flows.config_source import config_document, dataset_name, describe, load_flow_config
from shardline.flows.runs import run_name, run_tags, trigger_of
from shardline.flows.train_tasks import EpochProgress

TOML = """[dataset]
name = "digits"
incoming = "incoming/digits/"
classes = ["0", "1"]

[train]
epochs = 2
"""


def test_axis_is_fitted_to_the_data_not_zero_to_one() -> None:
    lo, hi = fitted_limits([0.9843, 0.9764, 0.99])
    assert 0.96 < lo < 0.9764 and 0.99 < hi <= 1.0
    assert hi - lo < 0.05                              # a 1-point move fills the plot
    lo, hi = fitted_limits([0.97, 0.97])
    assert lo < 0.97 < hi and hi - lo >= 0.01          # a flat line still has an axis
    assert fitted_limits([]) == (0.0, 1.0) and fitted_limits([None]) == (0.0, 1.0)
    assert fitted_limits([0.999, 1.0])[1] == 1.0       # clipped to 0..1


MODELS = [
    {"model": 1, "status": "complete", "dataset_version": 1, "accuracy": 0.95,
     "accuracy_earlier": None, "gate": "passed", "promoted": False, "created": "t1"},
    {"model": 2, "status": "complete", "dataset_version": 2, "accuracy": 0.97,
     "accuracy_earlier": 0.96, "gate": "passed", "promoted": True, "created": "t2"},
    {"model": 3, "status": "complete", "dataset_version": 2, "accuracy": 0.90,
     "accuracy_earlier": 0.91, "gate": "refused", "promoted": False, "created": "t3"},
    {"model": 4, "status": "incomplete", "promoted": False},
]


def test_model_view_rows_mark_live_earlier_and_refused() -> None:
    rows = model_view_rows(MODELS, ever_promoted=[1, 2])
    assert [r["model"] for r in rows] == [4, 3, 2, 1]
    by = {r["model"]: r for r in rows}
    assert by[2]["promoted"] == "live" and by[1]["promoted"] == "earlier"
    assert by[3]["promoted"] == "no" and by[3]["gate"] == "refused"
    assert by[2]["held-out accuracy"] == "97.00 %" and by[2]["earlier data accuracy"] == "96.00 %"
    assert by[2]["dataset version"] == "v2" and by[4]["gate"] == "incomplete"


def test_trend_plot_is_a_png() -> None:
    png = trend_png(MODELS, [1, 2])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert trend_png([], [])[:8] == b"\x89PNG\r\n\x1a\n"


def test_progress_moves_at_epoch_ends_then_within_epochs() -> None:
    sent: list[float] = []
    p = EpochProgress(sent.append, epochs=3, every_s=0.0)
    for step in range(30):
        p(step, {"epoch": step // 10, "epoch_end": step % 10 == 9})
    assert sent[0] == pytest.approx(100 / 3)            # nothing known before epoch 0 ends
    assert sent == sorted(sent) and len(sent) > 3       # within-epoch updates afterwards
    assert max(sent) <= 99.0                            # 100 % only after saving and gating
    p.send(100.0)
    assert sent[-1] == 100.0


def test_progress_errors_never_stop_training() -> None:
    def boom(pct: float) -> None:
        raise RuntimeError("API down")

    p = EpochProgress(boom, epochs=1)
    p(0, {"epoch": 0, "epoch_end": True})               # no exception
    assert p.broken


def test_run_names_carry_version_trigger_and_a_unique_suffix() -> None:
    a, b = run_name("train", "digits", 3, "event"), run_name("train", "digits", 3, "event")
    assert a.startswith("train-digits-v3-event-") and len(a.rsplit("-", 1)[1]) == 6
    assert a != b                                        # outside a flow run: random ids
    assert run_tags("ingest", "digits", "schedule") == ["shardline", "ingest", "digits",
                                                        "trigger:schedule"]


def test_trigger_is_read_from_the_flow_run() -> None:
    dep = uuid.uuid4()
    assert trigger_of(types.SimpleNamespace(deployment_id=None)) == "cli"
    auto = types.SimpleNamespace(deployment_id=dep, auto_scheduled=False,
                                 created_by=types.SimpleNamespace(type="AUTOMATION"))
    assert trigger_of(auto) == "event"
    sched = types.SimpleNamespace(deployment_id=dep, auto_scheduled=True, created_by=None)
    assert trigger_of(sched) == "schedule"
    manual = types.SimpleNamespace(deployment_id=dep, auto_scheduled=False, created_by=None)
    assert trigger_of(manual) == "manual"


def test_config_by_value_by_text_and_by_path_agree(tmp_path: Path) -> None:
    path = tmp_path / "digits.toml"
    path.write_text(TOML)
    doc = config_document(str(path))
    assert doc["dataset"]["name"] == "digits"
    assert config_document(TOML) == doc == config_document(doc)
    import json

    assert config_document(json.dumps(doc)) == doc
    a, b = load_flow_config(str(path)), load_flow_config(doc)
    assert a.dataset == b.dataset and a.train == b.train and a.train.epochs == 2
    assert dataset_name(doc) == dataset_name(TOML) == "digits"
    assert dataset_name(str(path)) == "digits" and dataset_name("s3://b/cfg/x.toml") == "x"
    assert dataset_name(None) == "dataset"
    assert describe(doc) == "config passed by value (dict)" and describe(str(path)) == str(path)


def test_config_source_errors_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist on this machine.*s3://"):
        config_document(str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="not valid JSON"):
        config_document("{not json")
    with pytest.raises(ConfigError, match="names no object"):
        config_document("s3://bucket-only")
    with pytest.raises(ConfigError, match="int"):
        config_document(5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"\[dataset\]"):
        load_flow_config({"train": {"epochs": 1}})


def test_a_failed_run_keeps_the_naming_pattern() -> None:
    from shardline.flows.runs import failed_name

    assert failed_name("ingest-digits-running-event-1a2b3c", "ingest", "digits", "event",
                       "1a2b3c") == "ingest-digits-failed-event-1a2b3c"
    assert failed_name("train-digits-v3-cli-1a2b3c", "train", "digits", "cli",
                       "1a2b3c") == "train-digits-v3-failed-cli-1a2b3c"
    # the placeholder a run has before it read its config (no trigger in it)
    assert failed_name("ingest-digits-running-1a2b3c", "ingest", "digits", "schedule",
                       "1a2b3c") == "ingest-digits-failed-schedule-1a2b3c"
    assert failed_name("train-x-resolving-1a2b3c", "train", "x", "event",
                       "1a2b3c") == "train-x-failed-event-1a2b3c"
    again = "ingest-digits-failed-event-1a2b3c"      # a second hook call changes nothing
    assert failed_name(again, "ingest", "digits", "event", "1a2b3c") == again


def test_the_trend_axis_is_fitted_to_the_promoted_models() -> None:
    """One refused model at 0.10 must not stretch the axis to 0..1 and hide 98.43 -> 98.72 %:
    the axis fits the promoted models; the refused one is a mark pinned to the edge."""
    from shardline.flows.artifacts import _clamped, trend_limits

    models = [
        {"model": 1, "accuracy": 0.9843, "accuracy_earlier": None, "promoted": False},
        {"model": 2, "accuracy": 0.10, "accuracy_earlier": 0.11, "promoted": False},
        {"model": 3, "accuracy": 0.9872, "accuracy_earlier": 0.9764, "promoted": True},
    ]
    lo, hi = trend_limits(models, ever_promoted=[1, 3])
    assert 0.95 < lo < 0.9764 and 0.9872 < hi <= 1.0
    ys, marks = _clamped([0.10, 0.985, 1.5], (lo, hi))
    assert marks == ["v", "o", "^"] and lo < ys[0] < ys[1] < ys[2] < hi
    assert trend_limits(models[1:2], ever_promoted=[]) == fitted_limits([0.10, 0.11])
    assert trend_png(models, [1, 3])[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_models_table_has_a_reason_column() -> None:
    models = [dict(MODELS[2], reason="accuracy 0.9000 below the promoted 0.9700")]
    row = model_view_rows(models, ever_promoted=[])[0]
    assert row["reason"] == "accuracy 0.9000 below the promoted 0.9700"
    assert model_view_rows(MODELS[3:], [])[0]["reason"] == ""
