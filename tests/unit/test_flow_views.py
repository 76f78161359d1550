"""Pure parts of the flows' UI and parameters: the fitted accuracy axis, the model view's
rows, the training progress callable, run names/tags/triggers, and the config source kinds
(by value, by URI, by path). No server: the Prefect and S3 paths are covered by
tests/integration/test_train_flow.py and test_ingest_flow.py."""

from __future__ import annotations

import types
import uuid
from pathlib import Path
from typing import Any

import pytest

from shardline.core.errors import ConfigError
from shardline.flows.artifacts import fitted_limits, model_view_rows, trend_png
from shardline.flows.config_source import config_document, dataset_name, describe, load_flow_config
from shardline.flows.runs import run_name, run_tags, trigger_of
from shardline.flows.train_tasks import EpochProgress
from shardline.trainer.result import TrainResult

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
        config_document(5)
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


# a regression model's rows as ``registry_view.model_rows`` gives them: the mean row score
# (minus the MSE, -2950 here) is no accuracy, the primary metric is the RMSE
REGRESSION = [
    {"model": 1, "status": "complete", "dataset_version": 1, "accuracy": None,
     "accuracy_earlier": None, "primary": "rmse", "metric": "rmse 54.3000",
     "metrics": {"rmse": 54.3, "mae": 40.0, "r2": 0.80}, "gate": "passed", "promoted": False},
    {"model": 2, "status": "complete", "dataset_version": 2, "accuracy": None,
     "accuracy_earlier": None, "primary": "rmse", "metric": "rmse 52.1000",
     "metrics": {"rmse": 52.1, "mae": 39.0, "r2": 0.82}, "gate": "passed", "promoted": True},
    {"model": 3, "status": "complete", "dataset_version": 2, "accuracy": None,
     "accuracy_earlier": None, "primary": "rmse", "metric": "rmse 180.0000",
     "metrics": {"rmse": 180.0, "mae": 150.0, "r2": -1.2}, "gate": "refused",
     "promoted": False},
]


def test_the_axis_of_an_unbounded_metric_is_not_clipped_to_zero_one() -> None:
    lo, hi = fitted_limits([-3000, -2900], bounds=(None, None))      # was (0.0, -2885.0)
    assert lo < -3000 and -2900 < hi < -2800
    lo, hi = fitted_limits([1234.5, 1234.5], bounds=(0.0, None))      # flat: a span to see
    assert lo < 1234.5 < hi and 1.0 < hi - lo < 100
    assert fitted_limits([], bounds=(None, None)) == (0.0, 1.0)
    assert fitted_limits([0.001, 0.05], bounds=(0.0, None))[0] == 0.0  # an error is >= 0


def test_a_regression_trend_plots_the_rmse_on_its_own_axis() -> None:
    from shardline.flows.artifacts import metric_text, trend_limits, trend_metric, trend_value

    assert trend_metric(REGRESSION) == "rmse"
    assert [trend_value(m, "rmse") for m in REGRESSION] == [54.3, 52.1, 180.0]
    lo, hi = trend_limits(REGRESSION, ever_promoted=[1, 2], metric="rmse")
    assert 0 < lo < 52.1 and 54.3 < hi < 60                 # the refused 180 is pinned
    assert metric_text(180.0, "rmse") == "180" and metric_text(0.9, "accuracy") == "90.0 %"
    assert trend_png(REGRESSION, [1, 2])[:8] == b"\x89PNG\r\n\x1a\n"
    # a class model's trend is the accuracy, as before
    assert trend_metric(MODELS) == "accuracy" and trend_value(MODELS[1], "accuracy") == 0.97
    assert trend_value(MODELS[1], "accuracy", earlier=True) == 0.96
    assert trend_limits(MODELS, [1, 2]) == fitted_limits([0.95, 0.97, None, 0.96])


def test_a_multilabel_trend_plots_the_map() -> None:
    from shardline.flows.artifacts import trend_limits, trend_metric, trend_value

    tiles = [dict(m, primary="map", accuracy=None, metric=f"map {v:.4f}", metrics={"map": v})
             for m, v in zip(REGRESSION, (0.81, 0.84, 0.40), strict=True)]
    assert trend_metric(tiles) == "map" and trend_value(tiles[1], "map") == 0.84
    lo, hi = trend_limits(tiles, [1, 2], "map")
    assert 0.75 < lo < 0.81 and 0.84 < hi <= 1.0


def test_regression_rows_show_no_percent_of_a_negative_mse() -> None:
    raw = dict(REGRESSION[1], accuracy=-2950.0, accuracy_earlier=-3000.0)  # even if given
    for row in model_view_rows([*REGRESSION[:1], raw], ever_promoted=[1, 2]):
        assert row["held-out accuracy"] == "" and row["earlier data accuracy"] == ""
        assert row["primary metric"].startswith("rmse ")
    assert model_view_rows([raw], [2])[0]["primary metric"] == "rmse 52.1000"


def _result(kind_eval: dict[str, Any], before: dict[str, Any] | None,
            accuracy: float, accuracy_before: float | None) -> TrainResult:
    return TrainResult(
        dataset="d", model="mlp", model_version=2, dataset_version=2, parent_model_version=1,
        samples_seen=100, new_samples=50, replay_samples=10, epochs=1,
        eval_accuracy=accuracy, accuracy_before=accuracy_before, promoted=True,
        decision="ok", checkpoint="s3://b/m/2/", start="warm", loader_samples_per_s=1.0,
        train_samples_per_s=1.0, data_wait_share=0.1, eval=kind_eval, eval_before=before,
        curve_steps=[{"step": 1, "loss": 3000.0, "train_accuracy": accuracy}],
        curve_epochs=[{"epoch": 0, "step": 1, "loss": 3000.0, "train_accuracy": accuracy,
                       "holdout_accuracy": accuracy, "earlier_accuracy": None}])


def test_a_regression_run_shows_its_rmse_not_a_percent_of_a_negative_mse() -> None:
    from shardline.cli.train_cmd import held_out
    from shardline.flows.train_tasks import curve_markdown, row_score, run_table

    after = {"primary": "rmse", "metrics": {"rmse": 54.31, "r2": 0.8},
             "earlier_accuracy": -2900.0}
    before = {"primary": "rmse", "metrics": {"rmse": 55.0, "r2": 0.79},
              "earlier_accuracy": -3000.0}
    r = _result(after, before, -2950.0, -3025.0)
    assert row_score(r) == "negative MSE"
    table = {x["metric"]: x["value"] for x in run_table(r)}
    assert table["held-out rmse before (promoted model)"] == "55.0000"
    assert table["held-out rmse after (candidate)"] == "54.3100"
    assert table["earlier versions' data (negative MSE): before -> after"] == "-3000 -> -2900"
    assert not any("%" in v for k, v in table.items() if k != "data-wait share of step time")
    md = curve_markdown(r)
    [epoch] = [x for x in md.splitlines() if x.startswith("| 0 |")]
    assert "held-out negative MSE" in md and "-2950" in epoch and "%" not in epoch
    assert held_out(r.to_dict()) == ("rmse", "55.0000", "54.3100")
    # a class run reads as before
    c = _result({"primary": "accuracy", "metrics": {"accuracy": 0.9}}, None, 0.9, None)
    table = {x["metric"]: x["value"] for x in run_table(c)}
    assert table["held-out accuracy after (candidate)"] == "90.00 %"
    assert table["earlier versions' data: before -> after"] == "n/a -> n/a"
    assert held_out(c.to_dict()) == ("accuracy", "n/a", "0.9000")
    assert "| train acc | held-out acc |" in curve_markdown(c)
    assert not any("the new ones" in k for k in table)
    grown = _result({"primary": "accuracy", "metrics": {"accuracy": 0.8},
                     "old_classes_accuracy": 0.85, "new_classes_accuracy": 0.625},
                    None, 0.8, None)
    table = {x["metric"]: x["value"] for x in run_table(grown)}
    assert table["held-out accuracy: the parent's classes / the new ones"] == "85.00 % / 62.50 %"
    assert "classes that fell most vs the live model (held-out)" not in table   # no live model
    fell = _result({"primary": "accuracy", "metrics": {"accuracy": 0.8}, "fallen_classes": [
        {"class": 3, "name": "fox", "before": 1.0, "after": 0.5, "rows": 20},
        {"class": 1, "name": "dog", "before": 0.9, "after": 0.75, "rows": 40}]},
        {"primary": "accuracy"}, 0.8, 0.82)
    table = {x["metric"]: x["value"] for x in run_table(fell)}
    assert table["classes that fell most vs the live model (held-out)"] == (
        "fox: 100.0 -> 50.0 % (20 rows); dog: 90.0 -> 75.0 % (40 rows)")
    steady = _result({"primary": "accuracy", "metrics": {"accuracy": 0.8},
                      "fallen_classes": []}, {"primary": "accuracy"}, 0.8, 0.78)
    table = {x["metric"]: x["value"] for x in run_table(steady)}
    assert table["classes that fell most vs the live model (held-out)"] == "none"
    unknown = _result({"primary": "accuracy", "metrics": {"accuracy": 0.8},
                       "fallen_classes": None}, {"primary": "accuracy"}, 0.8, 0.78)
    assert not any("fell most" in x["metric"] for x in run_table(unknown))
