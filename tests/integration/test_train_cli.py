"""``shardline train --json`` prints one JSON object with the contract's fields."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from shardline.cli.train_cmd import register
from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from tests.integration.trainer_data import config_toml, digits_config, publish_version


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.command()
    def noop() -> None:  # a second command keeps typer from collapsing the app to `train`
        pass
    return app


def test_train_json_contract(app: typer.Typer, store: ObjectStore, stack_env: StoreSettings,
                             tmp_path: Path) -> None:
    cfg = digits_config(epochs=1, cache_dir=str(tmp_path / "cache"))
    publish_version(store, cfg.dataset, np.arange(500))
    config = tmp_path / "digits.toml"
    config.write_text(config_toml(cfg))
    runner = CliRunner()

    r = runner.invoke(app, ["train", "--config", str(config), "--json", "--no-flow"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["model_version"] == 1 and data["dataset_version"] == 1
    assert data["parent_model_version"] is None and data["promoted"] is True
    assert data["samples_seen"] > 0 and 0 < data["eval_accuracy"] <= 1
    assert data["checkpoint"] == f"s3://{stack_env.bucket}/models/digits/cnn/000001/"

    r = runner.invoke(app, ["train", "--config", str(config), "--version", "7", "--json",
                            "--no-flow"])
    assert r.exit_code == 1
    err = json.loads(r.stdout.splitlines()[0])
    # the error names the version asked for and the versions there are (core's wording)
    assert re.search(r"version 7\b", err["error"]) and re.search(r"\b1\b", err["error"])
