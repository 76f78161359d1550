"""The multi-process training launch (tasks/launch.py): the ranks get the flow's store
settings, a rank that fails is reported with what it logged, rank 0's JSON becomes the
result. The torchrun path itself runs in tests/integration/test_train_flow.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from shardline.bench.digits_data import digits_config
from shardline.core.config import StoreSettings
from shardline.tasks import launch
from shardline.tasks.launch import LaunchFailed, processes_for, rank_env, train_ranks

STORE = StoreSettings(bucket="b1", endpoint_url="http://127.0.0.1:9", access_key="k",
                      secret_key="s", region="eu-west-1")


def test_ranks_read_the_flows_store_settings() -> None:
    env = rank_env(STORE, {"PATH": "/bin", "SHARDLINE_BUCKET": "other"})
    assert env["SHARDLINE_BUCKET"] == "b1" and env["AWS_SECRET_ACCESS_KEY"] == "s"
    assert env["SHARDLINE_S3_ENDPOINT_URL"] == "http://127.0.0.1:9" and env["PATH"] == "/bin"
    assert processes_for(3) == 3 and processes_for(0) >= 1


def _fake(monkeypatch: pytest.MonkeyPatch, code: str) -> list[str]:
    seen: list[str] = []

    def command(config: Path, version: int, processes: int) -> list[str]:
        seen.append(json.loads(config.read_text())["dataset"]["name"])
        return [sys.executable, "-c", code]

    monkeypatch.setattr(launch, "torchrun_command", command)
    return seen


def test_a_failed_rank_is_reported_with_its_last_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fake(monkeypatch, "import sys; sys.stderr.write('rank 1: boom\\n'); sys.exit(3)")
    logged: list[str] = []
    with pytest.raises(LaunchFailed, match="exited 3: rank 1: boom"):
        train_ranks(digits_config(name="d1"), STORE, 1, 2, log=logged.append)
    assert seen == ["d1"] and logged == ["rank 1: boom"]


def test_rank_zeros_json_is_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"dataset": "d1", "model": "cnn", "model_version": 4, "dataset_version": 1,
           "parent_model_version": None, "samples_seen": 10, "new_samples": 5,
           "replay_samples": 0, "epochs": 2, "eval_accuracy": 0.9, "accuracy_before": None,
           "promoted": True, "decision": "first", "checkpoint": "s3://b1/x/", "start": "s",
           "loader_samples_per_s": 1.0, "train_samples_per_s": 1.0, "data_wait_share": 0.0}
    _fake(monkeypatch, f"print('log line'); print({json.dumps(json.dumps(doc))})")
    result = train_ranks(digits_config(name="d1"), STORE, 1, 2, log=lambda s: None)
    assert result.model_version == 4 and result.promoted
