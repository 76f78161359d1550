"""The Prefect ``train`` flow on a real Prefect server (prefect_test_harness): the run's
table and training-curve artifacts exist under stable per-dataset keys, and the curve is a
real PNG embedded in the markdown; the model view (every model, which is live, a trend plot)
and the progress artifact; run names carry the resolved version and are unique, with tags;
the config travels by value (dict, TOML text) or as an s3:// URI as well as a path."""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from tests.integration.trainer_data import config_toml, digits_config, publish_version


@pytest.fixture(scope="module")
def prefect_server() -> Iterator[None]:
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=60):
        yield


def latest_artifacts(keys: list[str]) -> dict[str, object]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
    return {a.key: a for a in sorted(found, key=lambda a: a.created)}   # newest wins


def test_train_flow_leaves_run_table_and_curve(prefect_server: None, store: ObjectStore,
                                               stack_env: StoreSettings, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from shardline.flows import config_source
    from shardline.flows.train import train

    parsed: list[object] = []
    real_parse = config_source.parse_config

    def counting_parse(*args: object, **kwargs: object) -> object:
        parsed.append(args[0])
        return real_parse(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(config_source, "parse_config", counting_parse)

    cfg = digits_config(name="digits_flow", epochs=2, cache_dir=str(tmp_path / "cache"))
    publish_version(store, cfg.dataset, np.arange(700))
    config = tmp_path / "digits.toml"
    config.write_text(config_toml(cfg))

    result = train(config=str(config), version=None)
    assert result["model_version"] == 1 and result["promoted"]
    assert len(parsed) == 1            # the flow parses the config once; tasks get the Config
    run = _flow_run(result)
    assert run.name.startswith("train-digits_flow-v1-cli-") and "latest" not in run.name
    assert {"shardline", "train", "digits_flow", "trigger:cli"} <= set(run.tags)

    arts = latest_artifacts(["digits-flow-training", "digits-flow-training-curve"])
    table, curve = arts["digits-flow-training"], arts["digits-flow-training-curve"]
    assert table.type == "table" and curve.type == "markdown"
    assert table.flow_run_id == curve.flow_run_id is not None
    rows = {r["metric"]: r["value"] for r in _table_rows(table.data)}
    for metric in ("dataset version", "new samples / epoch", "replay samples / epoch", "epochs",
                   "loader samples/s", "data-wait share of step time",
                   "held-out accuracy before (promoted model)",
                   "held-out accuracy after (candidate)", "promoted", "decision"):
        assert metric in rows, metric
    assert rows["held-out metrics (candidate)"].startswith("accuracy 0.")
    assert "(primary), macro_f1 0." in rows["held-out metrics (candidate)"]
    assert rows["dataset version"] == "v1" and rows["promoted"] == "yes"
    png = base64.b64decode(re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)\)",
                                     curve.data).group(1))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert "| 1 |" in curve.data                               # per-epoch numbers as text too


def _table_rows(data: object) -> list[dict[str, str]]:
    import json

    return json.loads(data) if isinstance(data, str) else data  # type: ignore[return-value]


def _flow_run(result: dict[str, object]):  # type: ignore[no-untyped-def]
    """The flow run that wrote ``result``'s model (the training table's run)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    key = f"{str(result['dataset']).replace('_', '-')}-training"
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[key])))
        mine = [a for a in arts if f"model {result['model_version']}," in (a.description or "")]
        assert mine, (key, [a.description for a in arts])
        return client.read_flow_run(mine[0].flow_run_id)


def _history(key: str) -> list[object]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        return list(client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[key]))))


def test_model_view_progress_names_and_config_by_value(
        prefect_server: None, store: ObjectStore, stack_env: StoreSettings,
        tmp_path: Path) -> None:
    from shardline.core.config import config_to_dict
    from shardline.flows.train import train

    cfg = digits_config(name="digits_view", epochs=2, cache_dir=str(tmp_path / "cache"))
    publish_version(store, cfg.dataset, np.arange(600))
    doc = config_to_dict(cfg)
    first = train(config=doc, version=None)                          # by value: a dict
    publish_version(store, cfg.dataset, np.arange(600, 1200))
    store.put_bytes("configs/digits_view.toml", config_toml(cfg).encode())
    second = train(config=f"s3://{store.bucket}/configs/digits_view.toml")  # by URI
    # by value: TOML text; one [train] setting changed, so v2 is trained again (the same
    # settings would find v2 learned already if the second model was promoted)
    third = train(config=config_toml(dataclasses.replace(
        cfg, train=dataclasses.replace(cfg.train, epochs=1))), version=2)
    results = [first, second, third]
    assert [r["dataset_version"] for r in results] == [1, 2, 2]
    runs = [_flow_run(r) for r in results]
    names = [r.name for r in runs]
    assert len(set(names)) == 3, names
    assert names[0].startswith("train-digits_view-v1-cli-")
    assert names[1].startswith("train-digits_view-v2-cli-")
    assert names[2].startswith("train-digits_view-v2-cli-")

    view = latest_artifacts(["digits-view-models", "digits-view-models-trend",
                             "digits-view-training-progress"])
    rows = _table_rows(view["digits-view-models"].data)
    assert [r["model"] for r in rows] == [3, 2, 1]                  # every model, latest first
    live = [r for r in rows if r["promoted"] == "live"]
    assert len(live) == 1
    from shardline.trainer.registry import ModelRegistry

    pointer = ModelRegistry(store, "digits_view", "cnn").promoted()
    assert pointer is not None and live[0]["model"] == pointer.number
    for r in rows:
        assert r["dataset version"] in ("v1", "v2") and r["held-out accuracy"].endswith("%")
        assert r["promoted"] in ("live", "earlier", "no") and r["created"]
    assert rows[-1]["promoted"] in ("live", "earlier")              # model 1 was promoted
    trend = view["digits-view-models-trend"].data
    png = base64.b64decode(re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)\)",
                                     trend).group(1))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # the view is one key per dataset, re-posted by each run
    assert len(_history("digits-view-models")) == 3
    progress = view["digits-view-training-progress"]
    assert progress.type == "progress" and float(progress.data) == 100.0


def test_config_errors_name_the_source(prefect_server: None, stack_env: StoreSettings,
                                       store: ObjectStore, tmp_path: Path) -> None:
    from shardline.core.errors import ConfigError
    from shardline.flows.config_source import load_flow_config

    with pytest.raises(ConfigError, match="does not exist on this machine"):
        load_flow_config(str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_flow_config("[dataset\nname = 1\n")
    with pytest.raises(ConfigError, match=r"\[dataset\]"):
        load_flow_config({"train": {}})
    store.put_bytes("configs/bad.toml", b"[dataset]\nname = 'x'\nnonsense = 1\n")
    with pytest.raises(ConfigError, match="s3://.*bad.toml"):
        load_flow_config(f"s3://{store.bucket}/configs/bad.toml")


def test_a_flow_run_trains_on_several_processes(
        prefect_server: None, store: ObjectStore, stack_env: StoreSettings,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Multi-GPU as a flow run, on the CPU: the run launches torchrun with two gloo ranks
    (``tasks/launch.py``); rank 0 saves and promotes once; the flow posts the same
    artifacts as for one process."""
    from shardline.flows.train import train
    from shardline.trainer.registry import ModelRegistry

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PYTHONPATH", str(root))          # the ranks import this tree
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cfg = digits_config(name="digits_ranks", epochs=2, cache_dir=str(tmp_path / "cache"))
    publish_version(store, cfg.dataset, np.arange(600))
    result = train(config=config_toml(cfg), processes=2)
    assert result["model_version"] == 1 and result["promoted"]
    reg = ModelRegistry(store, "digits_ranks", "cnn")
    assert reg.numbers() == [1] and reg.promoted().number == 1      # rank 0 wrote once
    assert reg.meta(1)["world_size"] == 2
    table = latest_artifacts(["digits-ranks-training"])["digits-ranks-training"]
    rows = {r["metric"]: r["value"] for r in _table_rows(table.data)}
    assert rows["model version"].startswith("1 ") and rows["promoted"] == "yes"
