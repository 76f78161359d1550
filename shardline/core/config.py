"""Configuration: a dataset declared in TOML, object storage and Spark from the environment.

The TOML file describes *what* the data is (classes, image shape, shard sizing, training
settings); the environment says *where* it lives (endpoint, bucket, credentials), so the
same file works against the embedded stack, MinIO or AWS. Everything is validated on load
and frozen; unknown keys are rejected with the list of known ones, so a typo never turns
into a silently ignored setting.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from shardline.core.errors import ConfigError

PARTITION_KEYS = ("batch", "label")


@dataclass(frozen=True)
class ImageSpec:
    """Image column and the shape every decoded image must have (H, W, C)."""

    column: str = "image"
    shape: tuple[int, int, int] = (8, 8, 1)

    def __post_init__(self) -> None:
        if len(self.shape) != 3 or any(int(d) <= 0 for d in self.shape):
            raise ConfigError(
                f"dataset.image.shape must be [H, W, C] with positive sizes, got {list(self.shape)}"
            )
        if self.shape[2] not in (1, 3, 4):
            raise ConfigError(
                f"dataset.image.shape channels must be 1, 3 or 4, got {self.shape[2]}"
            )

    @property
    def nbytes(self) -> int:
        h, w, c = self.shape
        return h * w * c


@dataclass(frozen=True)
class ShardSpec:
    """How converted rows are cut into Arrow IPC shards."""

    target_mb: float = 64.0
    max_rows: int = 100_000
    record_batch_rows: int = 8192
    compression: Literal["lz4", "none"] = "none"
    partition_by: tuple[str, ...] = ("batch", "label")

    def __post_init__(self) -> None:
        if self.compression not in ("lz4", "none"):
            raise ConfigError(
                f"dataset.shards.compression must be 'lz4' or 'none', got {self.compression!r}"
            )
        if self.target_mb <= 0 or self.max_rows <= 0 or self.record_batch_rows <= 0:
            raise ConfigError(
                "dataset.shards target_mb, max_rows and record_batch_rows must be positive, got "
                f"{self.target_mb=}, {self.max_rows=}, {self.record_batch_rows=}"
            )
        unknown = [p for p in self.partition_by if p not in PARTITION_KEYS]
        if unknown or not self.partition_by or self.partition_by[0] != "batch":
            raise ConfigError(
                f"dataset.shards.partition_by must start with 'batch' and use only "
                f"{list(PARTITION_KEYS)}, got {list(self.partition_by)}"
            )

    def rows_per_shard(self, row_bytes: int) -> int:
        """Rows per shard so a shard is about ``target_mb`` (and at most ``max_rows``)."""
        by_size = int(self.target_mb * 1024 * 1024) // max(row_bytes, 1)
        return max(1, min(self.max_rows, by_size))


@dataclass(frozen=True)
class ValidationSpec:
    """Gate settings for the great-expectations suite run on every batch."""

    max_quarantine_fraction: float = 0.1
    min_rows: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_quarantine_fraction <= 1.0:
            raise ConfigError(
                "dataset.validation.max_quarantine_fraction must be within [0, 1], got "
                f"{self.max_quarantine_fraction}"
            )


@dataclass(frozen=True)
class DatasetConfig:
    """One dataset: where uploads land, how rows are identified and labelled."""

    name: str
    incoming: str
    classes: tuple[str, ...]
    id_column: str = "id"
    label_column: str = "label"
    root: str = "lake"
    image: ImageSpec = field(default_factory=ImageSpec)
    shards: ShardSpec = field(default_factory=ShardSpec)
    validation: ValidationSpec = field(default_factory=ValidationSpec)
    # Staging folders and unreferenced shards older than this are swept by later runs.
    sweep_after_minutes: float = 60.0

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ConfigError(
                f"dataset.name must be a non-empty name without '/', got {self.name!r}")
        if not self.classes:
            raise ConfigError("dataset.classes must list at least one class name")
        if len(set(self.classes)) != len(self.classes):
            raise ConfigError(f"dataset.classes has duplicates: {list(self.classes)}")
        if not self.incoming.endswith("/"):
            object.__setattr__(self, "incoming", self.incoming + "/")

    @property
    def prefix(self) -> str:
        """Key prefix of everything shardline writes for this dataset (no trailing slash)."""
        return f"{self.root.strip('/')}/{self.name}"


@dataclass(frozen=True)
class TrainConfig:
    """Training settings ([train] in the TOML). Read by the trainer only."""

    model: str = "cnn"
    width: int = 32
    depth: int = 2
    epochs: int = 3
    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 1e-4
    replay_ratio: float = 0.4
    holdout_fraction: float = 0.15
    promote_tolerance: float = 0.01
    seed: int = 0
    shuffle_window: int = 8192
    cache_dir: str = ".shardline/cache"
    cache_max_gb: float = 20.0
    fetch_threads: int = 4
    compile: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.replay_ratio < 1.0:
            raise ConfigError(f"train.replay_ratio must be within [0, 1), got {self.replay_ratio}")
        if not 0.0 < self.holdout_fraction < 1.0:
            raise ConfigError(
                f"train.holdout_fraction must be within (0, 1), got {self.holdout_fraction}"
            )
        if self.epochs <= 0 or self.batch_size <= 0:
            raise ConfigError(f"train epochs and batch_size must be positive, got "
                              f"{self.epochs=}, {self.batch_size=}")


@dataclass(frozen=True)
class Config:
    """A whole configuration file."""

    dataset: DatasetConfig
    train: TrainConfig = field(default_factory=TrainConfig)
    path: str | None = None


def _coerce(tp: Any, value: Any, where: str) -> Any:
    """Turn a TOML value into the annotated field type, or raise naming the key."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"[{where}] must be a table, got {type(value).__name__}")
        return _build(typing.cast(type, tp), value, where)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        args = typing.get_args(tp)
        item = args[0] if args else Any
        return tuple(_coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is Literal:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _coerce(inner[0], value, where)
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp in (int, str, bool) and not (isinstance(value, tp) and not
                                       (tp is int and isinstance(value, bool))):
        raise ConfigError(f"{where} must be {tp.__name__}, got {value!r}")
    return value


def _build(cls: type, data: Mapping[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls) if f.name != "path"]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {unknown} in [{where}]; known keys: {known}"
        )
    kwargs = {k: _coerce(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required key is missing
        missing = [
            f.name for f in dataclasses.fields(cls)
            if f.name not in data and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING and f.name != "path"
        ]
        raise ConfigError(f"[{where}] is missing required key(s) {missing}") from exc


def parse_config(data: Mapping[str, Any], path: str | None = None) -> Config:
    """Validate a parsed TOML document into a frozen :class:`Config`."""
    if "dataset" not in data:
        raise ConfigError(f"{path or 'config'}: missing the [dataset] table")
    cfg = _build(Config, data, "config" if path is None else Path(path).name)
    return dataclasses.replace(cfg, path=path)


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a dataset TOML file.

    Raises:
        ConfigError: the file is missing, not TOML, or holds unknown/invalid keys.
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {p} does not exist; pass --config PATH") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc}") from exc
    return parse_config(data, str(p))


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The resolved configuration as plain JSON-able data (stored in manifests and checkpoints)."""
    out = dataclasses.asdict(cfg)
    out.pop("path", None)
    return out


@dataclass(frozen=True)
class StoreSettings:
    """Where objects live. Read from the environment, never from the dataset file.

    ``SHARDLINE_S3_ENDPOINT_URL`` (unset = AWS), ``SHARDLINE_BUCKET`` and the standard
    ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_DEFAULT_REGION``.
    """

    bucket: str
    endpoint_url: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    region: str = "us-east-1"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StoreSettings:
        env = os.environ if env is None else env
        bucket = env.get("SHARDLINE_BUCKET", "").strip()
        if not bucket:
            raise ConfigError(
                "SHARDLINE_BUCKET is not set; export SHARDLINE_BUCKET=<bucket> "
                "(and SHARDLINE_S3_ENDPOINT_URL for a non-AWS endpoint)"
            )
        return cls(
            bucket=bucket,
            endpoint_url=env.get("SHARDLINE_S3_ENDPOINT_URL") or None,
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            region=env.get("AWS_DEFAULT_REGION") or "us-east-1",
        )


@dataclass(frozen=True)
class SparkSettings:
    """``SHARDLINE_SPARK_REMOTE`` (an ``sc://`` Spark Connect URL) or a local master."""

    remote: str | None = None
    master: str = "local[*]"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SparkSettings:
        env = os.environ if env is None else env
        remote = env.get("SHARDLINE_SPARK_REMOTE") or None
        if remote and not remote.startswith("sc://"):
            raise ConfigError(
                f"SHARDLINE_SPARK_REMOTE must be a Spark Connect URL like sc://host:15002, "
                f"got {remote!r}"
            )
        return cls(remote=remote, master=env.get("SHARDLINE_SPARK_MASTER") or "local[*]")
