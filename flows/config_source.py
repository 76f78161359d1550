"""The dataset config as a flow parameter: by value, by object-store URI, or by local path.

A flow may run on another machine than the one that started it (a Kubernetes GPU pool, a
compose service), so the config must not travel as a host file path. ``config`` may be:

- a mapping: the TOML document as a dict (what ``shardline.dataset.published`` carries);
- ``s3://bucket/key.toml``: a TOML object in the store (read with the flow's S3 settings);
- TOML text (anything with a line break or starting with ``[``), or JSON text (``{...}``);
- a local path (the CLI, and every deployment written before; kept working); a relative
  one not found in the current folder is looked up in the project folder, so prefect.yaml's
  ``examples/digits.toml`` works wherever shardline is installed.

``config_document`` returns the *unresolved* document (no environment overrides applied),
which is what is handed on to another machine: that machine applies its own overrides
(``SHARDLINE_CACHE_DIR`` etc.) when it parses it.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from shardline.core.config import Config, parse_config
from shardline.core.errors import ConfigError


def _kind(source: object) -> str:
    if isinstance(source, Mapping):
        return "dict"
    if not isinstance(source, str):
        raise ConfigError(f"config parameter is a {type(source).__name__}; pass a dict, "
                          "TOML text, an s3:// URI or a path")
    text = source.strip()
    if text.startswith("s3://"):
        return "s3"
    if text.startswith("{"):
        return "json"
    if "\n" in text or text.startswith("["):
        return "toml"
    return "path"


def describe(source: object) -> str:
    """Where the config came from, for messages (never the whole text)."""
    kind = _kind(source)
    if kind in ("s3", "path"):
        return str(source).strip()
    return f"config passed by value ({kind})"


def dataset_name(source: object, default: str = "dataset") -> str:
    """The dataset's name without reading anything remote (for run names, before the run).

    A path or URI gives its file stem (the dataset root's name for the
    ``<root>/deploy/config.toml`` that ``shardline deploy`` uploads); a dict or text gives
    ``[dataset] name``."""
    try:
        kind = _kind(source)
        if kind in ("s3", "path"):
            p = PurePosixPath(str(source).strip())
            if p.name == "config.toml" and p.parent.name == "deploy":
                return p.parent.parent.name or default   # <dataset root>/deploy/config.toml
            return p.stem or default
        doc: Any = _parse_text(str(source), kind) if kind != "dict" else source
        name = doc.get("dataset", {}).get("name")
        return name if isinstance(name, str) and name else default
    except (ConfigError, AttributeError):
        return default


def _parse_text(text: str, kind: str) -> dict[str, Any]:
    try:
        doc = json.loads(text) if kind == "json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config passed by value is not valid {kind.upper()}: {exc}; pass "
                          "the dataset TOML text, its dict, an s3:// URI or a path") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"config passed by value holds a {type(doc).__name__}, not a table")
    return doc


def _read_s3(uri: str) -> dict[str, Any]:
    from shardline.core.store import ObjectStore
    from shardline.flows.settings import store_settings

    bucket, _, key = uri.strip().removeprefix("s3://").partition("/")
    if not bucket or not key:
        raise ConfigError(f"config URI {uri!r} names no object; use s3://BUCKET/KEY.toml")
    store = ObjectStore(dataclasses.replace(store_settings(), bucket=bucket))
    data = store.get_bytes(key)
    try:
        return _parse_text(data.decode(), "toml")
    except UnicodeDecodeError:
        raise ConfigError(f"config object {uri} is not UTF-8 text; upload the dataset TOML "
                          "file") from None
    except ConfigError as exc:
        raise ConfigError(f"config object {uri}: {exc}") from None


def _local(path: str) -> Path:
    """``path``, or, when it is relative and not found here, the same path in the project
    folder (the one holding prefect.yaml: the checkout, or the installed package's data),
    as Prefect users expect of paths in prefect.yaml (``examples/digits.toml``)."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    from shardline.resources import MissingResource, project_dir

    try:
        shipped = project_dir() / p
    except MissingResource:
        return p
    return shipped if shipped.is_file() else p


def _read_path(path: str) -> dict[str, Any]:
    p = _local(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist on this machine; pass the config "
                          "by value (TOML text or dict) or as an s3:// URI when the flow runs "
                          "elsewhere") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config path {p} cannot be read as TOML text ({exc})") from None
    try:
        return _parse_text(text, "toml")
    except ConfigError as exc:
        raise ConfigError(f"config file {p}: {exc}") from None


def config_document(source: object) -> dict[str, Any]:
    """The TOML document of ``source`` as a plain dict (not validated, no overrides).

    Raises:
        ConfigError: unreadable, not TOML/JSON, or not a table.
        StoreError: the s3:// object cannot be read.
    """
    kind = _kind(source)
    if kind == "dict":
        return json.loads(json.dumps(source))       # a plain, JSON-able copy
    if kind == "s3":
        return _read_s3(str(source))
    if kind == "path":
        return _read_path(str(source))
    return _parse_text(str(source), kind)


def load_with_document(source: object) -> tuple[Config, dict[str, Any]]:
    """(``source`` validated into a :class:`Config` with this machine's overrides, the
    unresolved document to hand on); errors name the path or URI."""
    doc = config_document(source)
    label = str(source).strip() if _kind(source) in ("s3", "path") else None
    return parse_config(doc, label), doc


def load_flow_config(source: object) -> Config:
    """``source`` read and validated into a :class:`Config` (this machine's overrides)."""
    return load_with_document(source)[0]
