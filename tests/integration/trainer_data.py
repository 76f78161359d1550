"""Published dataset versions for trainer tests, without the Spark pipeline.

The digits versions themselves are ``shardline.bench.digits_data``'s (the learning
benchmark publishes the same ones); here: a version kept in memory over a local folder
(``write_local_version``, read back through ``trainer.fetch.LocalShards``) and the TOML of
a config.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from shardline.bench.digits_data import (
    digits,
    digits_config,
    draft_version,
    ids_bytes,
    publish_version,
    shard_bytes,
)
from shardline.core.config import Config, DatasetConfig
from shardline.core.manifest import Manifest

__all__ = ["build_version", "config_toml", "digits", "digits_config", "draft_version",
           "ids_bytes", "publish_version", "shard_bytes", "write_local_version"]


def build_version(put: Callable[[str, bytes], None], cfg: DatasetConfig, rows: np.ndarray,
                  previous: Manifest | None, compression: str | None = None) -> Manifest:
    """The next version, kept in memory (its manifest objects are not written)."""
    return draft_version(put, cfg, rows, previous, compression).manifest()


def write_local_version(root: Path, cfg: DatasetConfig, rows: np.ndarray,
                        previous: Manifest | None = None,
                        compression: str | None = None) -> Manifest:
    """The same shards as files under ``root`` (manifest kept in memory)."""
    def put(key: str, data: bytes) -> None:
        p = root / key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    return build_version(put, cfg, rows, previous, compression)


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def config_toml(cfg: Config) -> str:
    """The TOML file that ``shardline.core.config.load_config`` reads back as ``cfg``."""
    from shardline.core.config import config_to_dict

    lines: list[str] = []

    def table(name: str, data: dict[str, object]) -> None:
        nested = {k: v for k, v in data.items() if isinstance(v, dict)}
        lines.append(f"[{name}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in data.items()
                     if v is not None and k not in nested)
        for k, v in nested.items():
            table(f"{name}.{k}", v)

    for name, data in config_to_dict(cfg).items():
        table(name, data)
    return "\n".join(lines) + "\n"
