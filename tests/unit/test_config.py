import dataclasses
import json

import pytest

from shardline.core.config import (
    MODEL_NAMES,
    SparkSettings,
    StoreSettings,
    config_schema,
    config_to_dict,
    load_config,
    parse_config,
)
from shardline.core.errors import ConfigError

BASE = {"dataset": {"name": "digits", "incoming": "incoming/digits", "classes": ["a", "b"],
                    "image": {"column": "image", "shape": [8, 8, 1]}}}


def test_example_config_loads_with_defaults():
    cfg = load_config("examples/digits.toml")
    assert cfg.dataset.name == "digits"
    assert cfg.dataset.image.shape == (8, 8, 1)
    assert cfg.dataset.shards.partition_by == ("batch",)
    assert cfg.dataset.prefix == "lake/digits"
    assert cfg.train.epochs > 0


def test_incoming_gets_trailing_slash():
    assert parse_config(BASE).dataset.incoming == "incoming/digits/"


@pytest.mark.parametrize("where,patch", [
    ("config", {"datset": {}}),
    ("dataset", {"dataset": {**BASE["dataset"], "colour": 1}}),
    ("dataset.image", {"dataset": {**BASE["dataset"], "image": {"shape": [8, 8, 1], "col": "x"}}}),
])
def test_unknown_keys_are_rejected_with_the_known_ones(where, patch):
    with pytest.raises(ConfigError) as e:
        parse_config({**BASE, **patch})
    assert "unknown key" in str(e.value)
    assert "known keys" in str(e.value)
    assert where.split(".")[-1] in str(e.value)


def test_missing_required_key_is_named():
    with pytest.raises(ConfigError, match="classes"):
        parse_config({"dataset": {"name": "x", "incoming": "in/"}})


@pytest.mark.parametrize("patch,match", [
    ({"image": {"shape": [8, 8]}}, "H, W, C"),
    ({"image": {"shape": [8, 8, 2]}}, "channels"),
    ({"shards": {"compression": "zstd"}}, "lz4"),
    ({"shards": {"partition_by": ["label"]}}, "start with 'batch'"),
    ({"validation": {"max_quarantine_fraction": 2}}, "must be <= 1.0"),
    ({"classes": ["a", "a"]}, "duplicates"),
    ({"name": "a/b"}, "without '/'"),
    ({"classes": "ab"}, "expected a list"),
])
def test_invalid_values_say_what_was_found(patch, match):
    with pytest.raises(ConfigError, match=match):
        parse_config({"dataset": {**BASE["dataset"], **patch}})


def test_missing_file_says_how_to_fix(tmp_path):
    with pytest.raises(ConfigError, match="--config"):
        load_config(tmp_path / "nope.toml")


def test_store_settings_from_env():
    s = StoreSettings.from_env({"SHARDLINE_BUCKET": "b1",
                                "SHARDLINE_S3_ENDPOINT_URL": "http://h:1",
                                "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "topsecret"})
    assert (s.bucket, s.endpoint_url, s.access_key) == ("b1", "http://h:1", "k")
    assert (s.secret_key, s.region) == ("topsecret", "us-east-1")
    assert "topsecret" not in repr(s)   # secrets stay out of logs
    with pytest.raises(ConfigError, match="SHARDLINE_BUCKET"):
        StoreSettings.from_env({})


def test_spark_remote_must_be_spark_connect_url():
    assert SparkSettings.from_env({"SHARDLINE_SPARK_REMOTE": "sc://h:1"}).remote == "sc://h:1"
    with pytest.raises(ConfigError, match="sc://"):
        SparkSettings.from_env({"SHARDLINE_SPARK_REMOTE": "spark://h:7077"})


def _error(doc: dict) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(doc, "f.toml")
    return str(e.value)


def test_errors_name_the_section_and_key():
    assert _error({**BASE, "train": {"epoch": 3}}).startswith(
        "f.toml: [train] epoch: unknown key; known keys: model, width, depth, epochs,")
    assert _error({**BASE, "train": {"lr": "x"}}) == (
        "f.toml: [train] lr: expected a number, got 'x'")
    assert _error({"dataset": {**BASE["dataset"], "image": {"shape": [8, 8, 1], "col": "x"}}}
                  ) == "f.toml: [dataset.image] col: unknown key; known keys: column, shape"


def test_every_problem_is_reported_on_one_line():
    msg = _error({**BASE, "train": {"epochs": 0, "compile": "yes"}})
    assert "\n" not in msg
    assert "[train] epochs: must be > 0, got 0" in msg
    assert "[train] compile: expected true or false, got 'yes'" in msg


@pytest.mark.parametrize("train,match", [
    ({"epochs": "3"}, r"\[train\] epochs: expected an integer, got '3'"),   # no silent coercion
    ({"epochs": 2.5}, r"\[train\] epochs: expected an integer"),
    ({"replay_ratio": 1.0}, r"\[train\] replay_ratio: must be < 1.0"),
    ({"holdout_fraction": 0}, r"\[train\] holdout_fraction: must be > 0.0"),
    ({"lr_schedule": "linear"}, r"\[train\] lr_schedule: .*'cosine'.*'constant'"),
    ({"lr_hold": 1.0}, r"\[train\] lr_hold: must be < 1.0"),
    ({"lr_final": 1.5}, r"\[train\] lr_final: must be <= 1.0"),
    ({"model": "resnet999"}, r"\[train\] model: unknown model 'resnet999': use a built-in "
                             r"\(cnn, resnet, mlp\) or your factory's import path"),
])
def test_train_values_are_typed_and_ranged(train, match):
    with pytest.raises(ConfigError, match=match):
        parse_config({**BASE, "train": train})


def test_integers_are_accepted_for_floats():
    cfg = parse_config({**BASE, "train": {"lr": 1, "weight_decay": 0}})
    assert cfg.train.lr == 1.0 and isinstance(cfg.train.lr, float)


def test_model_names_match_the_trainer():
    from shardline.trainer.model import MODELS

    assert tuple(MODELS) == MODEL_NAMES


def test_config_is_frozen_and_replace_revalidates():
    cfg = parse_config(BASE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.lr = 1.0  # type: ignore[misc]
    assert dataclasses.replace(cfg.train, epochs=1).epochs == 1
    with pytest.raises(ValueError):
        dataclasses.replace(cfg.train, epochs=-1)


def test_config_to_dict_is_json_and_drops_the_path():
    d = config_to_dict(load_config("examples/digits.toml"))
    assert "path" not in d
    assert json.loads(json.dumps(d)) == d
    assert d["dataset"]["image"]["shape"] == [8, 8, 1]


def test_environment_overrides_the_cache_location():
    cfg = parse_config(BASE, env={"SHARDLINE_CACHE_DIR": "/cache", "SHARDLINE_CACHE_MAX_GB": "5"})
    assert (cfg.train.cache_dir, cfg.train.cache_max_gb) == ("/cache", 5.0)
    assert parse_config(BASE, env={}).train.cache_dir == ".shardline/cache"
    with pytest.raises(ConfigError, match="SHARDLINE_CACHE_MAX_GB"):
        parse_config(BASE, env={"SHARDLINE_CACHE_MAX_GB": "lots"})


def test_env_is_read_from_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("SHARDLINE_BUCKET", "from-env")
    monkeypatch.setenv("SHARDLINE_S3_ENDPOINT_URL", "")
    s = StoreSettings.from_env()
    assert (s.bucket, s.endpoint_url) == ("from-env", None)
    with pytest.raises(ConfigError, match="SHARDLINE_BUCKET"):
        StoreSettings.from_env({})            # an explicit mapping hides os.environ


def test_json_schema_describes_the_file():
    schema = config_schema()
    assert schema["required"] == ["dataset"]
    assert schema["additionalProperties"] is False
    train = schema["$defs"]["TrainConfig"]["properties"]
    assert all(n in train["model"]["description"] for n in MODEL_NAMES)
    assert "package.module:function" in train["model"]["description"]
    assert train["replay_ratio"]["exclusiveMaximum"] == 1.0
    assert "path" not in schema["properties"]


def test_not_toml_and_folder_paths_are_named(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[dataset\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="is a folder"):
        load_config(tmp_path)
