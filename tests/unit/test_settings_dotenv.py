"""A ``.env`` file fills in the settings the environment leaves unset (pydantic-settings'
dotenv source, as its users expect); the environment wins; an explicit mapping (the
embedded stack's own environment) ignores the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardline.core.config import SparkSettings, StoreSettings
from shardline.core.errors import ConfigError
from shardline.core.settings import CheckEnv, DeployEnv, read_env

VARS = ("SHARDLINE_BUCKET", "SHARDLINE_S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
        "SHARDLINE_SPARK_REMOTE", "SHARDLINE_TRAIN_POOL", "SHARDLINE_CHECK_TIMEOUT",
        "SHARDLINE_ENV_FILE")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for v in VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(
        "# comments and unknown keys are fine\n"
        "SHARDLINE_BUCKET=from-dotenv\n"
        "SHARDLINE_S3_ENDPOINT_URL=http://127.0.0.1:9\n"
        "AWS_ACCESS_KEY_ID=dotenv-key\n"
        "SHARDLINE_SPARK_REMOTE=sc://spark.example:15002\n"
        "SHARDLINE_TRAIN_POOL=gpu\n"
        "SOMETHING_ELSE=1\n")
    return tmp_path


def test_dotenv_fills_what_the_environment_leaves_unset(here: Path) -> None:
    s = StoreSettings.from_env()
    assert (s.bucket, s.endpoint_url, s.access_key) == (
        "from-dotenv", "http://127.0.0.1:9", "dotenv-key")
    assert SparkSettings.from_env().remote == "sc://spark.example:15002"
    assert read_env(DeployEnv).train_pool == "gpu"


def test_the_environment_wins_over_dotenv(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDLINE_BUCKET", "from-env")
    assert StoreSettings.from_env().bucket == "from-env"
    assert StoreSettings.from_env().access_key == "dotenv-key"     # still from the file


def test_an_explicit_mapping_ignores_dotenv(here: Path) -> None:
    with pytest.raises(ConfigError, match="SHARDLINE_BUCKET is not set"):
        StoreSettings.from_env({})
    assert StoreSettings.from_env({"SHARDLINE_BUCKET": "b"}).access_key is None


def test_another_file_by_name_and_bad_values_named(here: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    other = here / "prod.env"
    other.write_text("SHARDLINE_BUCKET=prod\nSHARDLINE_CHECK_TIMEOUT=soon\n")
    monkeypatch.setenv("SHARDLINE_ENV_FILE", str(other))
    assert StoreSettings.from_env().bucket == "prod"
    with pytest.raises(ConfigError, match="SHARDLINE_CHECK_TIMEOUT.*'soon'"):
        read_env(CheckEnv)
    monkeypatch.setenv("SHARDLINE_ENV_FILE", str(here / "missing.env"))
    with pytest.raises(ConfigError, match="SHARDLINE_BUCKET is not set"):
        StoreSettings.from_env()                    # no file: nothing from it


def test_the_command_line_loads_dotenv_before_the_stack_fills_in(
        here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`prepare()` reads .env into the unset variables first, so a stack that is up fills
    in only what neither the environment nor .env set (environment > .env > stack)."""
    from shardline.core.settings import load_env_file

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    monkeypatch.delenv("SOMETHING_ELSE", raising=False)
    added = load_env_file()
    import os

    assert os.environ["SHARDLINE_BUCKET"] == "from-dotenv" and added["SOMETHING_ELSE"] == "1"
    assert os.environ["AWS_ACCESS_KEY_ID"] == "from-env" and "AWS_ACCESS_KEY_ID" not in added
    os.environ.setdefault("SHARDLINE_BUCKET", "stack-bucket")     # what use_stack_env does
    assert StoreSettings.from_env().bucket == "from-dotenv"


def test_the_spark_token_joins_the_url_only_where_the_session_is_built(
        here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = SparkSettings(remote="sc://h.example:443", token="s3cr3t")
    assert s.connect_url() == "sc://h.example:443/;token=s3cr3t"
    assert "s3cr3t" not in repr(s) and s.remote == "sc://h.example:443"
    dbx = SparkSettings(remote="sc://h:443/;x-databricks-cluster-id=c", token="t")
    assert dbx.connect_url() == "sc://h:443/;x-databricks-cluster-id=c;token=t"
    given = SparkSettings(remote="sc://h:443/;token=mine", token="t")
    assert given.connect_url() == "sc://h:443/;token=mine"       # the URL's own wins
    assert SparkSettings(remote="sc://h:15002").connect_url() == "sc://h:15002"
    monkeypatch.setenv("SHARDLINE_SPARK_TOKEN", "from-env")
    assert SparkSettings.from_env().token == "from-env"
