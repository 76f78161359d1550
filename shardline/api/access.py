"""Where the public API finds the object store: arguments, else the environment, else the
embedded stack started by ``shardline up`` (so a notebook next to a running stack needs no
setup at all)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from shardline.core.config import Config, DatasetConfig, StoreSettings, load_config
from shardline.core.errors import ConfigError
from shardline.core.store import ObjectStore

DatasetRef = str | os.PathLike[str] | Config | DatasetConfig


def _stack_env() -> dict[str, str]:
    """The running embedded stack's client environment, or {} when none is up."""
    try:
        from shardline.infra.stack_state import resolve_home, running_stack, stack_env
    except ImportError:  # pragma: no cover - a slim install without infra
        return {}
    state = running_stack(resolve_home())
    return stack_env(state) if state is not None else {}


def store_settings(bucket: str | None = None, endpoint_url: str | None = None,
                   **overrides: Any) -> StoreSettings:
    """Settings from the arguments, then ``SHARDLINE_*`` / ``AWS_*`` variables, then a
    running embedded stack.

    Raises:
        ConfigError: no bucket anywhere (names the variable to set).
    """
    env: dict[str, str] = dict(os.environ)
    if not env.get("SHARDLINE_BUCKET"):
        env = {**_stack_env(), **{k: v for k, v in env.items() if v}}
    if bucket:
        env["SHARDLINE_BUCKET"] = bucket
    try:
        settings = StoreSettings.from_env(env)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; or pass bucket=... (and endpoint_url=...)") from None
    if endpoint_url:
        settings = dataclasses.replace(settings, endpoint_url=endpoint_url)
    return dataclasses.replace(settings, **overrides) if overrides else settings


def store_for(store: ObjectStore | StoreSettings | None = None, **kwargs: Any) -> ObjectStore:
    """An :class:`ObjectStore` from a store, settings, or :func:`store_settings` arguments."""
    if isinstance(store, ObjectStore):
        return store
    if isinstance(store, StoreSettings):
        return ObjectStore(store)
    return ObjectStore(store_settings(**kwargs))


def arrow_filesystem(settings: StoreSettings) -> Any:
    """A ``pyarrow.fs.S3FileSystem`` on the same endpoint and credentials."""
    from urllib.parse import urlparse

    from pyarrow import fs

    kwargs: dict[str, Any] = {"region": settings.region,
                              "connect_timeout": settings.connect_timeout_s,
                              "request_timeout": settings.read_timeout_s}
    if settings.access_key:
        kwargs.update(access_key=settings.access_key, secret_key=settings.secret_key)
    if settings.endpoint_url:
        url = urlparse(settings.endpoint_url)
        kwargs.update(endpoint_override=url.netloc + url.path.rstrip("/"),
                      scheme=url.scheme or "https")
    return fs.S3FileSystem(**kwargs)


def dataset_ref(ref: DatasetRef) -> tuple[Config | DatasetConfig | None, str]:
    """(config if known, key prefix) for a dataset name, TOML path or config object."""
    if isinstance(ref, Config):
        return ref, ref.dataset.prefix
    if isinstance(ref, DatasetConfig):
        return ref, ref.prefix
    text = os.fspath(ref)
    if text.endswith(".toml") or Path(text).is_file():
        cfg = load_config(text)
        return cfg, cfg.dataset.prefix
    if not text or "/" in text.strip("/"):
        raise ConfigError(f"dataset {text!r}: pass a dataset name (e.g. 'digits'), a TOML "
                          "path or a Config; use root=... for another key prefix than 'lake'")
    return None, text
