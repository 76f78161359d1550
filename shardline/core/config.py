"""Configuration: a dataset declared in TOML, validated by pydantic into frozen dataclasses.

The TOML file describes *what* the data is (classes, image shape, shard sizing, training
settings); the environment says *where* it lives (:mod:`shardline.core.settings`), so the
same file works against the embedded stack, MinIO or AWS. Everything is validated on load
and frozen. Unknown keys are rejected with the list of known ones, scalars are strict (a
string is never read as a number), and every error names its place::

    [train] epoch: unknown key; known keys: model, width, depth, epochs, ...
    [train] lr: expected a number, got 'x'

The classes are pydantic dataclasses: ``dataclasses.replace`` and ``dataclasses.asdict``
work on them (and re-validate), and :func:`config_schema` gives the JSON Schema editors use
for completion (``shardline config schema``).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, Strict, TypeAdapter, ValidationError, field_validator
from pydantic.dataclasses import dataclass
from pydantic.json_schema import SkipJsonSchema

from shardline.core.config_errors import describe_validation_error
from shardline.core.errors import ConfigError
from shardline.core.settings import RuntimeEnv, SparkSettings, StoreSettings, read_env

PARTITION_KEYS = ("batch", "label")
# The trainer's model names (shardline.trainer.model.MODELS; a test keeps the two equal).
# Checked here so a typo fails when the file is loaded, not after a dataset is ingested.
MODEL_NAMES = ("cnn", "resnet")
# Share of rows (by id hash, ``core.idhash``) held out for evaluation: [dataset]
# holdout_fraction, fixed at ingest; [train] holdout_fraction defaults to the same value.
HOLDOUT_FRACTION = 0.15

Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]     # strict float still takes a TOML integer
Str = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]
Positive = Annotated[int, Strict(), Field(gt=0)]
_TABLE = ConfigDict(extra="forbid")


@dataclass(frozen=True, config=_TABLE)
class ImageSpec:
    """Image column and the shape every decoded image must have (H, W, C)."""

    column: Str = "image"
    shape: tuple[Positive, ...] = Field(
        default=(8, 8, 1), description="[H, W, C] after decoding; C is 1, 3 or 4")

    @field_validator("shape")
    @classmethod
    def _hwc(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if len(v) != 3:
            raise ValueError(f"must be [H, W, C] with positive sizes, got {list(v)}")
        if v[2] not in (1, 3, 4):
            raise ValueError(f"channels (the C of [H, W, C]) must be 1, 3 or 4, got {v[2]}")
        return v

    @property
    def nbytes(self) -> int:
        h, w, c = self.shape
        return h * w * c


@dataclass(frozen=True, config=_TABLE)
class ShardSpec:
    """How converted rows are cut into Arrow IPC shards."""

    target_mb: Float = Field(default=64.0, gt=0, description="shard size aim in MiB")
    max_rows: Positive = 100_000
    record_batch_rows: Positive = 8192
    compression: Literal["lz4", "none"] = "none"
    partition_by: tuple[Literal["batch", "label"], ...] = ("batch",)

    @field_validator("partition_by")
    @classmethod
    def _batch_first(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v or v[0] != "batch" or len(set(v)) != len(v):
            raise ValueError(f"must start with 'batch' and use only {list(PARTITION_KEYS)} "
                             f"once each, got {list(v)}")
        return v

    def rows_per_shard(self, row_bytes: int) -> int:
        """Rows per shard so a shard is about ``target_mb`` (and at most ``max_rows``)."""
        by_size = int(self.target_mb * 1024 * 1024) // max(row_bytes, 1)
        return max(1, min(self.max_rows, by_size))


@dataclass(frozen=True, config=_TABLE)
class ValidationSpec:
    """Gate settings for the great-expectations suite run on every batch."""

    max_quarantine_fraction: Float = Field(default=0.1, ge=0.0, le=1.0)
    min_rows: Annotated[int, Strict(), Field(ge=0)] = 1


@dataclass(frozen=True, config=_TABLE)
class LimitsSpec:
    """Input limits, checked before parsing/decoding (``tasks/convert/limits.py``;
    docs/reliability.md). A value over one is a quarantine row naming the limit."""

    max_object_bytes: Positive = 4 << 30
    max_row_bytes: Positive = 32 << 20
    max_json_depth: Positive = 64
    max_pixels: Positive = 50_000_000
    max_label_chars: Positive = 256
    max_id_chars: Positive = 512


@dataclass(frozen=True, config=_TABLE)
class DatasetConfig:
    """One dataset: where uploads land, how rows are identified and labelled."""

    name: Str
    incoming: Str
    classes: tuple[Str, ...] = Field(min_length=1)
    id_column: Str = "id"
    label_column: Str = "label"
    root: Str = "lake"
    image: ImageSpec = dataclasses.field(default_factory=ImageSpec)
    shards: ShardSpec = dataclasses.field(default_factory=ShardSpec)
    validation: ValidationSpec = dataclasses.field(default_factory=ValidationSpec)
    limits: LimitsSpec = dataclasses.field(default_factory=LimitsSpec)
    # Staging folders and unreferenced shards older than this are swept by later runs.
    sweep_after_minutes: Float = Field(default=60.0, gt=0)
    # Shards a compaction replaced stay this long after it, for readers (a training run, a
    # loader) of the versions before it.
    retain_replaced_minutes: Float = Field(default=1440.0, gt=0)
    holdout_fraction: Float = Field(
        default=HOLDOUT_FRACTION, gt=0.0, lt=1.0,
        description="share of rows (by id hash) ingest writes into held-out shards; fixed "
                    "by the first version that does, never changed after")

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not v or "/" in v:
            raise ValueError(f"must be a non-empty name without '/', got {v!r}")
        return v

    @field_validator("classes")
    @classmethod
    def _unique(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        dupes = sorted({c for c in v if v.count(c) > 1})
        if dupes:
            raise ValueError(f"has duplicates {dupes}: each class name once")
        return v

    @field_validator("incoming")
    @classmethod
    def _trailing_slash(cls, v: str) -> str:
        return v if v.endswith("/") else v + "/"

    @property
    def prefix(self) -> str:
        """Key prefix of everything shardline writes for this dataset (no trailing slash)."""
        return f"{self.root.strip('/')}/{self.name}"


@dataclass(frozen=True, config=_TABLE)
class TrainConfig:
    """Training settings ([train] in the TOML). Read by the trainer only."""

    model: Str = Field(default="cnn", description=f"one of {list(MODEL_NAMES)}",
                       json_schema_extra={"enum": list(MODEL_NAMES)})
    width: Positive = 32
    depth: Positive = 2
    epochs: Positive = 3
    batch_size: Positive = 32
    lr: Float = Field(default=2e-3, ge=0, description="0 freezes the weights")
    weight_decay: Float = Field(default=1e-4, ge=0)
    replay_ratio: Float = Field(default=0.4, ge=0.0, lt=1.0)
    holdout_fraction: Float = Field(
        default=HOLDOUT_FRACTION, gt=0.0, lt=1.0,
        description="defaults to [dataset] holdout_fraction; a dataset that recorded another "
                    "value refuses to train")
    promote_tolerance: Float = Field(
        default=0.01, ge=0.0, le=1.0,
        description="held-out accuracy a candidate may lose vs the live and the best "
                    "promoted model")
    forget_tolerance: Float = Field(
        default=0.01, ge=0.0, le=1.0,
        description="accuracy on earlier data a candidate may lose vs the promoted model")
    seed: Int = 0
    shuffle_window: Positive = 8192
    cache_dir: Str = Field(default=".shardline/cache",
                           description="env SHARDLINE_CACHE_DIR overrides")
    cache_max_gb: Float = Field(default=20.0, gt=0,
                                description="env SHARDLINE_CACHE_MAX_GB overrides")
    fetch_threads: Positive = 4
    compile: Bool = False

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        if v not in MODEL_NAMES:
            raise ValueError(f"unknown model {v!r}; known models: {', '.join(MODEL_NAMES)}")
        return v


@dataclass(frozen=True, config=_TABLE)
class Config:
    """A whole configuration file."""

    dataset: DatasetConfig
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    path: SkipJsonSchema[str | None] = None


def parse_config(data: Mapping[str, Any], path: str | None = None,
                 env: Mapping[str, str] | None = None) -> Config:
    """Validate a parsed TOML document into a frozen :class:`Config`.

    ``env`` (default ``os.environ``) may override operational ``[train]`` settings
    (``SHARDLINE_CACHE_DIR``, ``SHARDLINE_CACHE_MAX_GB``).

    Raises:
        ConfigError: one line naming every ``[section] key`` at fault and why.
    """
    where = f"{path}: " if path else ""
    if "path" in data:
        raise ConfigError(f"{where}[config] path: unknown key; known keys: dataset, train")
    if "dataset" not in data:
        raise ConfigError(f"{where}missing the [dataset] table (name, incoming, classes)")
    doc = {k: v for k, v in data.items()}
    runtime = read_env(RuntimeEnv, env)
    overrides = {k: v for k, v in (("cache_dir", runtime.cache_dir),
                                   ("cache_max_gb", runtime.cache_max_gb)) if v is not None}
    if overrides and isinstance(doc.get("train", {}), Mapping):
        doc["train"] = {**doc.get("train", {}), **overrides}
    _one_holdout_fraction(doc, where)
    try:
        return TypeAdapter(Config).validate_python({**doc, "path": path})
    except ValidationError as exc:
        raise ConfigError(where + describe_validation_error(exc, Config)) from None


def _one_holdout_fraction(doc: dict[str, Any], where: str) -> None:
    """[dataset] and [train] holdout_fraction are one setting: either one fills in the other;
    both set to different numbers is an error (evaluation would read other rows than the
    held-out shards ingest writes)."""
    ds, tr = doc.get("dataset"), doc.get("train", {})
    if not isinstance(ds, Mapping) or not isinstance(tr, Mapping):
        return
    a, b = ds.get("holdout_fraction"), tr.get("holdout_fraction")

    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    if number(a) and number(b) and a != b:
        raise ConfigError(f"{where}[dataset] holdout_fraction = {a} and [train] "
                          f"holdout_fraction = {b} differ; set it once, under [dataset] (the "
                          "trainer uses the dataset's)")
    if a is not None and b is None:
        doc["train"] = {**tr, "holdout_fraction": a}
    elif b is not None and a is None:
        doc["dataset"] = {**ds, "holdout_fraction": b}


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read and validate a dataset TOML file.

    Raises:
        ConfigError: the file is missing, not TOML, or holds unknown/invalid keys.
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist; pass --config PATH to a dataset "
                          "TOML (e.g. examples/digits.toml)") from None
    except IsADirectoryError:
        raise ConfigError(f"config path {p} is a folder; pass --config PATH to a TOML file"
                          ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc}") from None
    return parse_config(data, str(p), env)


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The resolved configuration as plain JSON-able data (stored in manifests and checkpoints)."""
    out = dataclasses.asdict(cfg)
    out.pop("path", None)
    return _lists(out)


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_lists(v) for v in value]
    return value


def config_schema() -> dict[str, Any]:
    """JSON Schema of the dataset TOML (for editor completion and validation)."""
    schema = TypeAdapter(Config).json_schema()
    schema["title"] = "shardline dataset configuration"
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


__all__ = [
    "HOLDOUT_FRACTION", "MODEL_NAMES", "PARTITION_KEYS", "Config", "ConfigError",
    "DatasetConfig", "ImageSpec", "LimitsSpec", "ShardSpec", "SparkSettings", "StoreSettings",
    "TrainConfig", "ValidationSpec",
    "config_schema", "config_to_dict", "load_config", "parse_config",
]
