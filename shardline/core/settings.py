"""Settings that come from the environment: where objects live, which Spark, where to cache.

The dataset TOML says *what* the data is; these say *where* things run, so one file works
against the embedded stack, MinIO or AWS. Each group is read by pydantic-settings from the
variables named below (case-sensitive, an empty value counts as unset) into a frozen
dataclass the rest of the code passes around (and pickles into Spark tasks).

A ``.env`` file in the current folder (``KEY=value`` lines, pydantic-settings' dotenv
source; ``SHARDLINE_ENV_FILE`` names another file) fills in what the environment leaves
unset: a variable set in the environment always wins. Settings read from an explicit
mapping (``read_env(group, env)``: the embedded stack's own environment) ignore it.

- ``SHARDLINE_BUCKET``: bucket (required for anything that touches S3)
- ``SHARDLINE_S3_ENDPOINT_URL``: S3 endpoint (unset = AWS); ``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``
- ``SHARDLINE_S3_CONNECT_TIMEOUT`` (10 s), ``SHARDLINE_S3_READ_TIMEOUT`` (120 s),
  ``SHARDLINE_S3_MAX_ATTEMPTS`` (6, botocore standard retries) per S3 call
- ``SHARDLINE_SPARK_REMOTE``: Spark Connect URL (``sc://host:15002``); else
  ``SHARDLINE_SPARK_MASTER`` (default ``local[*]``); ``SHARDLINE_SPARK_TOKEN``: the
  Connect endpoint's token (flow runs: the Secret block ``SHARDLINE_SPARK_TOKEN_BLOCK``)
- ``SHARDLINE_CACHE_DIR`` / ``SHARDLINE_CACHE_MAX_GB``: override ``[train] cache_dir`` /
  ``cache_max_gb`` (e.g. a mounted volume in Kubernetes)
- ``SHARDLINE_ROWS_CHUNK``: rows the ingest driver holds at once (default 1,000,000)
- ``SHARDLINE_WORK_POOL`` / ``SHARDLINE_TRAIN_POOL``: Prefect work pools for ingest /
  training runs (``shardline deploy``; default ``shardline-process`` / ``shardline-train``)
- ``SHARDLINE_CHECK_TIMEOUT``: seconds each pre-flight check of the CLI may take (default 5)
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from pydantic import ConfigDict, Field, ValidationError, field_validator
from pydantic.dataclasses import dataclass
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    SettingsConfigDict,
)

from shardline.core.errors import ConfigError

_KEYS_CHECKED = ConfigDict(extra="forbid")
# the dotenv file read under the environment (default .env in the current folder)
ENV_FILE_VAR = "SHARDLINE_ENV_FILE"
_MAPPING: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "shardline_env", default=None)


class _MappingSource(EnvSettingsSource):
    """Environment variables from a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._given = env
        super().__init__(settings_cls, case_sensitive=True, env_ignore_empty=True)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k: v for k, v in self._given.items() if v != ""}


class EnvGroup(BaseSettings):
    """Base of every group of environment variables (read from ``os.environ`` or a mapping)."""

    model_config = SettingsConfigDict(case_sensitive=True, env_ignore_empty=True,
                                      extra="ignore", frozen=True, env_file=".env",
                                      env_file_encoding="utf-8")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: Any,
                                   env_settings: Any, dotenv_settings: Any,
                                   file_secret_settings: Any) -> tuple[Any, ...]:
        given = _MAPPING.get()
        if given is not None:
            return (init_settings, _MappingSource(settings_cls, given))
        return (init_settings, env_settings,
                DotEnvSettingsSource(settings_cls, env_file=env_file(), case_sensitive=True,
                                     env_ignore_empty=True))


G = TypeVar("G", bound=EnvGroup)


def env_file() -> str:
    """The dotenv file read under the environment: ``SHARDLINE_ENV_FILE`` or ``.env``."""
    return os.environ.get(ENV_FILE_VAR) or ".env"


def load_env_file() -> dict[str, str]:
    """Put the dotenv file's variables into ``os.environ`` where they are unset (what
    python-dotenv's ``load_dotenv`` does): the command line calls this before it lets the
    embedded stack fill in its endpoints, so environment > .env > stack, and processes it
    starts see the same values. Returns what it set."""
    from dotenv import dotenv_values

    added = {k: v for k, v in dotenv_values(env_file()).items()
             if v and not os.environ.get(k)}
    os.environ.update(added)
    return added


@contextmanager
def _reading(env: Mapping[str, str] | None) -> Iterator[None]:
    token = _MAPPING.set(env)
    try:
        yield
    finally:
        _MAPPING.reset(token)


def read_env(group: type[G], env: Mapping[str, str] | None = None) -> G:
    """Read one group from ``env`` (default ``os.environ``).

    Raises:
        ConfigError: a variable holds a value of the wrong type, naming the variable.
    """
    try:
        with _reading(env):
            return group()
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}, got "
                             f"{e.get('input')!r}" for e in exc.errors())
        raise ConfigError(f"environment: {problems}") from exc


class StoreEnv(EnvGroup):
    bucket: str = Field("", validation_alias="SHARDLINE_BUCKET")
    endpoint_url: str | None = Field(None, validation_alias="SHARDLINE_S3_ENDPOINT_URL")
    access_key: str | None = Field(None, validation_alias="AWS_ACCESS_KEY_ID", repr=False)
    secret_key: str | None = Field(None, validation_alias="AWS_SECRET_ACCESS_KEY", repr=False)
    region: str = Field("us-east-1", validation_alias="AWS_DEFAULT_REGION")
    connect_timeout_s: float = Field(10.0, gt=0,
                                     validation_alias="SHARDLINE_S3_CONNECT_TIMEOUT")
    read_timeout_s: float = Field(120.0, gt=0, validation_alias="SHARDLINE_S3_READ_TIMEOUT")
    max_attempts: int = Field(6, ge=1, le=20, validation_alias="SHARDLINE_S3_MAX_ATTEMPTS")


class SparkEnv(EnvGroup):
    remote: str | None = Field(None, validation_alias="SHARDLINE_SPARK_REMOTE")
    token: str | None = Field(None, validation_alias="SHARDLINE_SPARK_TOKEN", repr=False)
    master: str = Field("local[*]", validation_alias="SHARDLINE_SPARK_MASTER")


class RuntimeEnv(EnvGroup):
    """Operational overrides of ``[train]`` (they never change what a model learns)."""

    cache_dir: str | None = Field(None, validation_alias="SHARDLINE_CACHE_DIR")
    cache_max_gb: float | None = Field(None, gt=0, validation_alias="SHARDLINE_CACHE_MAX_GB")
    # rows of one chunk the ingest driver holds at once (duplicate check, validation):
    # smaller = less driver memory, more ranged GETs of the row and id files
    rows_chunk: int = Field(1_000_000, ge=1_000, le=100_000_000,
                            validation_alias="SHARDLINE_ROWS_CHUNK")


class DeployEnv(EnvGroup):
    """The pools of ``shardline deploy``: the names compose's workers, the Kubernetes
    example and the embedded stack's two process workers use."""

    work_pool: str = Field("shardline-process", validation_alias="SHARDLINE_WORK_POOL")
    train_pool: str = Field("shardline-train", validation_alias="SHARDLINE_TRAIN_POOL")
    # a flow run still PENDING this long after a worker took it is rescheduled
    # (infra/automations.py); above the slowest legitimate start (a GPU node coming up)
    pending_timeout_s: int = Field(600, ge=10, le=86_400,
                                   validation_alias="SHARDLINE_PENDING_TIMEOUT")


class CheckEnv(EnvGroup):
    """How long the CLI's pre-flight checks (S3, Prefect, Spark Connect) may each take."""

    timeout_s: float = Field(5.0, gt=0, le=60, validation_alias="SHARDLINE_CHECK_TIMEOUT")


@dataclass(frozen=True, config=_KEYS_CHECKED)
class StoreSettings:
    """Where objects live. Read from the environment, never from the dataset file."""

    bucket: str
    endpoint_url: str | None = None
    access_key: str | None = Field(default=None, repr=False)
    secret_key: str | None = Field(default=None, repr=False)
    region: str = "us-east-1"
    # botocore: seconds to connect / per read, and attempts per call (standard retry mode).
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=120.0, gt=0)
    max_attempts: int = Field(default=6, ge=1)

    @field_validator("endpoint_url", "access_key", "secret_key", mode="before")
    @classmethod
    def _blank_is_unset(cls, v: Any) -> Any:
        return None if v == "" else v

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StoreSettings:
        """``SHARDLINE_BUCKET``, ``SHARDLINE_S3_ENDPOINT_URL`` and ``AWS_*`` (default os.environ).

        Raises:
            ConfigError: ``SHARDLINE_BUCKET`` is not set.
        """
        e = read_env(StoreEnv, env)
        if not e.bucket.strip():
            raise ConfigError(
                "SHARDLINE_BUCKET is not set; export SHARDLINE_BUCKET=<bucket> "
                "(and SHARDLINE_S3_ENDPOINT_URL for a non-AWS endpoint), or start the "
                "embedded stack with `shardline up`"
            )
        return cls(bucket=e.bucket.strip(), endpoint_url=e.endpoint_url,
                   access_key=e.access_key, secret_key=e.secret_key, region=e.region,
                   connect_timeout_s=e.connect_timeout_s, read_timeout_s=e.read_timeout_s,
                   max_attempts=e.max_attempts)


@dataclass(frozen=True, config=_KEYS_CHECKED)
class SparkSettings:
    """``SHARDLINE_SPARK_REMOTE`` (an ``sc://`` Spark Connect URL) or a local master;
    ``token``: the Connect endpoint's bearer token (``SHARDLINE_SPARK_TOKEN``, or the
    Prefect Secret block flow runs read: ``flows/settings.py``), kept out of the URL that
    is logged and shown, added only where the session is built (:meth:`connect_url`)."""

    remote: str | None = None
    master: str = "local[*]"
    token: str | None = Field(default=None, repr=False)

    def connect_url(self) -> str | None:
        """``remote`` with ``;token=...`` added (Spark Connect's URL parameter) when a token
        is set and the URL carries none."""
        if not self.remote or not self.token or ";token=" in self.remote:
            return self.remote
        base = self.remote if "/" in self.remote.removeprefix("sc://") else self.remote + "/"
        return f"{base.rstrip(';')};token={self.token}"

    @field_validator("remote")
    @classmethod
    def _spark_connect_url(cls, v: str | None) -> str | None:
        if v and not v.startswith("sc://"):
            raise ValueError(f"SHARDLINE_SPARK_REMOTE must be a Spark Connect URL like "
                             f"sc://host:15002, got {v!r}")
        return v or None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SparkSettings:
        """Raises: ConfigError: ``SHARDLINE_SPARK_REMOTE`` is not an ``sc://`` URL."""
        e = read_env(SparkEnv, env)
        try:
            return cls(remote=e.remote, master=e.master, token=e.token or None)
        except ValidationError as exc:
            raise ConfigError(str(exc.errors()[0]["ctx"]["error"])) from exc
