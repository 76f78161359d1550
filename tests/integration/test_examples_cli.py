"""The README's typed-example steps, as a user runs them (each a ``shardline`` subprocess,
stdout a pipe): ``shardline example NAME`` writes the upload, then the commands it prints
next (upload, ingest, train, models) run against examples/NAME.toml: every row is published,
a model of the example's kind is trained, promoted and listed with its primary metric.

diabetes (tabular features, an MLP, regression) runs in ``make test`` with its TOML's
epochs lowered to 5 (a copy; the rest unchanged): the loss has levelled off by then and the
run stays short. sentinel and tags run unchanged, as ``slow`` tests (``make test-slow``).

Real parts: a moto S3 server over HTTP, a Spark Connect server, a Prefect server (test
harness) for the ingest and train flow runs, great-expectations, torch.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from shardline.cli.main import app
from shardline.core.config import StoreSettings, load_config
from shardline.core.manifest import Manifest, latest_manifest
from shardline.core.store import ObjectStore
from tests.integration.cli_helpers import cli_env, run_cli
from tests.integration.ingest_helpers import published_rows

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(prefect_harness: None, store_settings: StoreSettings, spark_remote: str,
        tmp_path: Path) -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    return {**cli_env(store_settings, tmp_path), "SHARDLINE_SPARK_REMOTE": spark_remote,
            "PREFECT_API_URL": str(PREFECT_API_URL.value()),
            "SHARDLINE_CACHE_DIR": str(tmp_path / "cache")}


def step(env: dict[str, str], command: str) -> str:
    """Run one printed command line (``shardline ...``); its stdout, after exit 0."""
    args = shlex.split(command)
    assert args[0] == "shardline", command
    r = run_cli(env, *args[1:])
    assert r.returncode == 0, f"{command}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def run_example(env: dict[str, str], store: ObjectStore, tmp_path: Path, name: str,
                epochs: int | None = None) -> tuple[dict, Manifest, dict, dict[str, str]]:
    """``shardline example NAME`` (in this process: its output is what counts), then the
    upload, ingest, train and models commands it prints, each a subprocess. ``epochs``:
    train with a copy of the TOML whose ``epochs`` line says so. Returns the example's
    JSON, the published version, the train result and the model's row in ``models``."""
    data = tmp_path / "data"
    r = CliRunner().invoke(app, ["example", name, "--out", str(data), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    config = doc["config"]
    assert Path(config).resolve() == ROOT / "examples" / f"{name}.toml"
    commands = doc["next"]
    if epochs is not None:
        text = Path(config).read_text()
        line = next(x for x in text.splitlines() if x.startswith("epochs = "))
        copy = tmp_path / f"{name}.toml"
        copy.write_text(text.replace(line, f"epochs = {epochs}"))
        assert load_config(copy).train.epochs == epochs
        commands = [c.replace(f"-c {config}", f"-c {copy}") for c in commands]
        config = str(copy)
    upload, ingest, train, models = commands
    assert all(c.endswith(f"-c {config}") for c in commands), commands
    cfg = load_config(config)

    step(env, upload)
    keys = [o.key for o in store.list(cfg.dataset.incoming)]
    assert keys and all(k.startswith(f"{cfg.dataset.incoming}{Path(doc['path']).name}")
                        for k in keys), keys

    out = json.loads(step(env, f"{ingest} --json").splitlines()[-1])
    assert out["version"] == 1 and out["rows_published"] == doc["rows"], out
    assert out["rows_quarantined"] == 0, out
    m = latest_manifest(store, cfg.dataset.prefix)
    assert m is not None and m.version == 1

    result = json.loads(step(env, f"{train} --json").splitlines()[-1])
    assert result["dataset_version"] == 1 and result["model_version"] == 1, result
    assert result["promoted"] is True and result["epochs"] == cfg.train.epochs, result

    lines = step(env, models).splitlines()
    header = lines[0].split("\t")
    rows = [dict(zip(header, x.split("\t"), strict=True)) for x in lines[1:]]
    assert [(r["model"], r["dataset_version"], r["promoted"]) for r in rows] == \
        [("1", "1", "live")], lines
    return doc, m, result, rows[0]


@pytest.mark.timeout(600)
def test_diabetes_example_from_upload_to_a_listed_model(
        env: dict[str, str], store: ObjectStore, tmp_path: Path) -> None:
    doc, m, _, model = run_example(env, store, tmp_path, "diabetes", epochs=5)
    sent = pq.read_table(doc["path"])
    assert doc["rows"] == sent.num_rows == 442
    got = published_rows(store, m)
    assert sorted(got.column("id").to_pylist()) == sent.column("id").to_pylist()
    by_id = dict(zip(got.column("id").to_pylist(),
                     got.column("features").combine_chunks().to_numpy_ndarray(), strict=True))
    want = sent.column("features").combine_chunks().flatten().to_numpy().reshape(-1, 10)
    for rid, row in zip(sent.column("id").to_pylist(), want, strict=True):
        assert by_id[rid].tobytes() == row.tobytes(), rid
    name, value = model["metric"].split()
    # the MLP beats predicting the mean progression (the targets' standard deviation)
    spread = float(np.std(sent.column("progression").to_numpy()))
    assert name == "rmse" and 0 < float(value) < spread, (model["metric"], spread)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("name", "metric", "floor"), [("sentinel", "accuracy", 0.9),
                                                       ("tags", "map", 0.9)])
def test_image_examples_unchanged_from_upload_to_a_listed_model(
        env: dict[str, str], store: ObjectStore, tmp_path: Path, name: str, metric: str,
        floor: float) -> None:
    doc, m, _, model = run_example(env, store, tmp_path, name)
    got = published_rows(store, m).column("id").to_pylist()
    assert len(got) == len(set(got)) == doc["rows"]
    shown, value = model["metric"].split()
    # both are made to be learnable: per-class band means, a bright square per tag
    assert shown == metric and floor <= float(value) <= 1, model["metric"]
