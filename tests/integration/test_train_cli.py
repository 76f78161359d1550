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


def _on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``args`` with stdout and stderr on a pseudo-terminal; (exit code, what it drew)."""
    import os
    import pty
    import subprocess

    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
                            env={**env, "COLUMNS": "160", "TERM": "xterm"})
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(timeout=300), b"".join(chunks).decode(errors="replace")


@pytest.mark.timeout(300)
def test_training_on_a_terminal_draws_an_epoch_bar(
        store: ObjectStore, stack_env: StoreSettings, tmp_path: Path) -> None:
    import sys

    from tests.integration.cli_helpers import cli_env

    cfg = digits_config(epochs=2, cache_dir=str(tmp_path / "cache"))
    publish_version(store, cfg.dataset, np.arange(200))
    config = tmp_path / "digits.toml"
    config.write_text(config_toml(cfg))
    env = {k: v for k, v in cli_env(stack_env, tmp_path).items() if k != "SHARDLINE_DEBUG"}
    exe = str(Path(sys.executable).parent / "shardline")
    code, drawn = _on_a_terminal([exe, "train", "-c", str(config), "--no-flow"], env)
    assert code == 0, drawn[-3000:]
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn)
    assert "training digits epoch 2/2" in plain and "━" in plain, plain[-2000:]
    assert "samples/s" in plain and "-> model 1" in plain
    # the trainer's interval lines (`... step N epoch E loss ...`) are not printed above it
    assert not re.search(r"shardline\.trainer\.loop step \d+ epoch", plain), plain[-2000:]


def test_processes_option_reaches_the_rank_launcher(app: typer.Typer, store: ObjectStore,
                                                    stack_env: StoreSettings, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``-p 2 --no-flow`` hands the resolved version and 2 ranks to ``train_ranks``; the ranks
    themselves run for real in test_train_flow (2 gloo processes) and
    test_train_distributed, so here the launcher is replaced to keep this test cheap."""
    from shardline.tasks import launch

    cfg = digits_config(epochs=1, cache_dir=str(tmp_path / "cache"))
    publish_version(store, cfg.dataset, np.arange(200))
    config = tmp_path / "digits.toml"
    config.write_text(config_toml(cfg))
    seen: list[tuple[int, int]] = []

    class Done:
        def to_dict(self) -> dict:
            return {"model_version": 1, "dataset_version": 1}

    def ranks(cfg_: object, store_: StoreSettings, version: int, processes: int,
              **_: object) -> Done:
        seen.append((version, processes))
        return Done()

    monkeypatch.setattr(launch, "train_ranks", ranks)
    r = CliRunner().invoke(app, ["train", "-c", str(config), "--json", "--no-flow", "-p", "2"])
    assert r.exit_code == 0, r.output
    assert seen == [(1, 2)] and json.loads(r.stdout)["model_version"] == 1
    r = CliRunner().invoke(app, ["train", "-c", str(config), "--no-flow", "-p", "-1"])
    assert r.exit_code == 2 and seen == [(1, 2)]               # refused before any launch
