"""The Prefect ``train`` flow on a real Prefect server (prefect_test_harness): the run's
table and training-curve artifacts exist under stable per-dataset keys, and the curve is a
real PNG embedded in the markdown."""

from __future__ import annotations

import base64
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
    return {a.key: a for a in found}


def test_train_flow_leaves_run_table_and_curve(prefect_server: None, store: ObjectStore,
                                               stack_env: StoreSettings, tmp_path: Path) -> None:
    from shardline.flows.train import train

    cfg = digits_config(name="digits_flow", epochs=2, cache_dir=str(tmp_path / "cache"))
    publish_version(store, cfg.dataset, np.arange(700))
    config = tmp_path / "digits.toml"
    config.write_text(config_toml(cfg))

    result = train(config=str(config), version=None)
    assert result["model_version"] == 1 and result["promoted"]

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
    assert rows["dataset version"] == "v1" and rows["promoted"] == "yes"
    png = base64.b64decode(re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)\)",
                                     curve.data).group(1))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert "| 1 |" in curve.data                               # per-epoch numbers as text too


def _table_rows(data: object) -> list[dict[str, str]]:
    import json

    return json.loads(data) if isinstance(data, str) else data  # type: ignore[return-value]
