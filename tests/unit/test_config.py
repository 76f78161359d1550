import pytest

from shardline.core.config import SparkSettings, StoreSettings, load_config, parse_config
from shardline.core.errors import ConfigError

BASE = {"dataset": {"name": "digits", "incoming": "incoming/digits", "classes": ["a", "b"],
                    "image": {"column": "image", "shape": [8, 8, 1]}}}


def test_example_config_loads_with_defaults():
    cfg = load_config("examples/digits.toml")
    assert cfg.dataset.name == "digits"
    assert cfg.dataset.image.shape == (8, 8, 1)
    assert cfg.dataset.shards.partition_by == ("batch", "label")
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
    ({"validation": {"max_quarantine_fraction": 2}}, r"\[0, 1\]"),
    ({"classes": ["a", "a"]}, "duplicates"),
    ({"name": "a/b"}, "without '/'"),
    ({"classes": "ab"}, "must be a list"),
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
