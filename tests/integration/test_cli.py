"""The ``shardline`` executable as a user runs it (a subprocess, stdout a pipe): user errors
found before any flow run, as one line and exit 1; complete rows in a pipe; the registry,
quarantine and diff views. Real moto S3, a real Prefect server where one is needed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from shardline.infra import procs
from tests.integration.api_data import REJECTS, SPLITS, Published, publish_three
from tests.integration.cli_helpers import cli_env
from tests.integration.cli_helpers import run_cli as run
from tests.integration.trainer_data import config_toml


@pytest.fixture
def published(store: ObjectStore, tmp_path: Path) -> Published:
    return publish_three(store, str(tmp_path / "cache"))


@pytest.fixture
def config(published: Published, tmp_path: Path) -> Path:
    path = tmp_path / "dataset.toml"
    path.write_text(config_toml(published.cfg))
    return path


@pytest.fixture
def env(store_settings: StoreSettings, tmp_path: Path) -> dict[str, str]:
    return cli_env(store_settings, tmp_path)


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_version_flag(env: dict[str, str]) -> None:
    r = run(env, "--version")
    assert r.returncode == 0 and r.stdout.strip() == "shardline 0.1.0"


def test_config_mistakes_name_file_section_and_fix(env: dict[str, str], tmp_path: Path) -> None:
    line = one_line_error(run(env, "ingest", "-c", str(tmp_path / "typo.toml")))
    assert "typo.toml does not exist; pass --config PATH" in line
    bad = tmp_path / "bad.toml"
    bad.write_text('[dataset]\nname = "d"\nincoming = "in/"\nclasses = ["a"]\n'
                   '[train]\nepoch = 3\nlr = "x"\nmodel = "resnet999"\n')
    line = one_line_error(run(env, "train", "-c", str(bad)))
    assert "[train] epoch: unknown key; known keys: model, width" in line
    assert "[train] lr: expected a number, got 'x'" in line
    assert "[train] model: unknown model 'resnet999': use a built-in (cnn, resnet, mlp)" in line
    r = run(env, "--debug", "config", "check", "-c", str(bad))
    assert r.returncode == 1 and "Traceback" in r.stderr


def test_store_and_version_mistakes(env: dict[str, str], config: Path) -> None:
    no_bucket = {k: v for k, v in env.items() if k != "SHARDLINE_BUCKET"}
    assert "SHARDLINE_BUCKET is not set" in one_line_error(run(no_bucket, "versions", "-c",
                                                               str(config)))
    wrong = {**env, "SHARDLINE_BUCKET": "no-such-bucket"}
    assert "the bucket does not exist: check SHARDLINE_BUCKET" in one_line_error(
        run(wrong, "train", "-c", str(config)))
    line = one_line_error(run(env, "train", "-c", str(config), "--version", "9"))
    assert "has no version 9" in line and "known versions: 1-3" in line


def test_services_down_are_named_with_the_fix(env: dict[str, str], config: Path) -> None:
    port = procs.free_port()
    s3_down = {**env, "SHARDLINE_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    line = one_line_error(run(s3_down, "ingest", "-c", str(config)))
    assert f"S3 at http://127.0.0.1:{port} does not answer" in line and "shardline up" in line
    prefect_down = {**env, "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
    line = one_line_error(run(prefect_down, "ingest", "-c", str(config)))
    assert f"the Prefect API at http://127.0.0.1:{port}/api does not answer" in line
    spark_down = {**env, "SHARDLINE_SPARK_REMOTE": f"sc://127.0.0.1:{port}"}
    line = one_line_error(run(spark_down, "ingest", "-c", str(config)))
    assert f"Spark Connect at sc://127.0.0.1:{port} does not accept connections" in line


def test_user_errors_create_no_flow_run(env: dict[str, str], config: Path, tmp_path: Path,
                                        prefect_harness: None) -> None:
    from prefect.settings import PREFECT_API_URL

    api = str(PREFECT_API_URL.value())
    with_prefect = {**env, "PREFECT_API_URL": api}

    def count() -> int:
        return int(httpx.post(f"{api}/flow_runs/count", json={}, timeout=10).json())

    before = count()
    one_line_error(run(with_prefect, "ingest", "-c", str(tmp_path / "typo.toml")))
    one_line_error(run(with_prefect, "train", "-c", str(config), "--version", "9"))
    one_line_error(run({**with_prefect, "SHARDLINE_BUCKET": "no-such-bucket"}, "ingest", "-c",
                       str(config)))
    assert count() == before


def test_versions_and_quarantine_print_complete_rows_in_a_pipe(
        env: dict[str, str], config: Path, published: Published) -> None:
    r = run(env, "versions", "-c", str(config))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = lines[0].split("\t")
    assert header[:2] == ["version", "created"] and len(lines) == 4
    rows = [dict(zip(header, x.split("\t"), strict=True)) for x in lines[1:]]
    assert [x["version"] for x in rows] == ["3", "2", "1"]
    assert [int(x["new_rows"]) for x in rows] == [len(s) for s in reversed(SPLITS)]
    assert rows[0]["batch"] == published.manifests[2].new_batch.id   # full id, not cut
    data = json.loads(run(env, "versions", "-c", str(config), "--json").stdout)
    assert [v["version"] for v in data["versions"]] == [3, 2, 1]

    r = run(env, "quarantine", "-c", str(config), "--version", "3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split("\t") == ["key", "row", "id", "rule", "message", "excerpt"]
    got = sorted((x.split("\t")[0], int(x.split("\t")[1]), x.split("\t")[3]) for x in lines[1:])
    assert got == sorted((k, row, rule) for k, row, _, rule, _ in REJECTS)
    data = json.loads(run(env, "quarantine", "-c", str(config), "--json").stdout)
    assert data["version"] == 3 and len(data["rows"]) == len(REJECTS)

    d = json.loads(run(env, "diff", "-c", str(config), "1", "3", "--json").stdout)
    assert d["rows_added"] == len(SPLITS[1]) + len(SPLITS[2]) and d["rows_removed"] == 0


def test_models_lists_the_registry_and_the_promoted_model(
        env: dict[str, str], config: Path, published: Published, store: ObjectStore) -> None:
    r = run(env, "models", "-c", str(config))
    assert r.returncode == 0 and "no cnn models" in r.stderr
    from shardline.trainer.options import RunOptions
    from shardline.trainer.run import train

    cfg = published.cfg
    train(cfg, store, options=RunOptions(log_every=100, checkpoint_every=1000))
    data = json.loads(run(env, "models", "-c", str(config), "--json").stdout)
    [m] = data["models"]
    assert (m["model"], m["dataset_version"], m["promoted"], m["gate"]) == (1, 3, True, "passed")
    assert 0 < m["accuracy"] <= 1
    r = run(env, "models", "-c", str(config))
    header, row = r.stdout.splitlines()
    fields = dict(zip(header.split("\t"), row.split("\t"), strict=True))
    assert fields["promoted"] == "live" and fields["dataset_version"] == "3"
