"""Configuration: a dataset declared in TOML, validated by pydantic into frozen dataclasses.

The TOML file describes *what* the data is (classes, image shape, shard sizing, training
settings); the environment says *where* it lives (:mod:`shardline.core.settings`), so the
same file works against the embedded stack, MinIO or AWS. Everything is validated on load
and frozen. Unknown keys are rejected with the list of known ones, scalars are strict (a
string is never read as a number), and every error names its place::

    [train] epoch: unknown key; known keys: model, width, depth, epochs, ...
    [train] lr: expected a number, got 'x'

The classes are pydantic dataclasses (:mod:`shardline.core.config_model`, re-exported here):
``dataclasses.replace`` and ``dataclasses.asdict`` work on them (and re-validate), and
:func:`config_schema` gives the JSON Schema editors use for completion (``shardline config
schema``).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from shardline.core.config_errors import describe_validation_error
from shardline.core.config_model import (
    HOLDOUT_FRACTION,
    MODEL_NAMES,
    PARTITION_KEYS,
    Config,
    DatasetConfig,
    ImageSpec,
    LimitsSpec,
    ShardSpec,
    TrainConfig,
    ValidationSpec,
)
from shardline.core.errors import ConfigError
from shardline.core.settings import RuntimeEnv, SparkSettings, StoreSettings, read_env


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
    ds = doc.get("dataset")
    if isinstance(ds, Mapping) and "fields" in ds and "image" in ds:
        raise ConfigError(f"{where}[dataset.image] is the shorthand for one image field; with "
                          "[dataset.fields] declare the image there instead (kind = \"image\", "
                          "shape = [H, W, C])")
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
    ds = out.get("dataset", out)
    if isinstance(ds, dict) and "fields" in ds:
        # The shorthand's documents stay as they were before typed fields existed.
        if not ds["fields"]:
            del ds["fields"]
        if ds.get("target", 0) is None:
            del ds["target"]
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
