"""Pre-flight checks: find user errors before a flow run exists, each within a short timeout.

Every check raises a :class:`~shardline.core.errors.ShardlineError` whose one-line message
names the problem and the fix: a missing or invalid ``--config``, an unset or missing
bucket, wrong keys, no such dataset version, and S3 / the Prefect API / Spark Connect not
answering. Each network check takes at most ``SHARDLINE_CHECK_TIMEOUT`` seconds (default 5)
and is tried once, so the whole pre-flight of a command stays well under 30 s.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from urllib.parse import urlparse

from shardline.core.config import Config, StoreSettings, load_config
from shardline.core.errors import PermanentStoreError, ServiceUnavailable, StoreError
from shardline.core.manifest import list_versions
from shardline.core.retention import expired_error, read_expired
from shardline.core.settings import CheckEnv, SparkSettings, read_env
from shardline.core.store import ObjectStore

STACK_FIX = "start the embedded stack with `shardline up`"


def timeout_s() -> float:
    return read_env(CheckEnv).timeout_s


def config(path: str) -> Config:
    """The validated config at ``path`` (raises ConfigError naming the file and key)."""
    return load_config(path)


def config_and_store(path: str, versions: bool = False,
                     version: int | None = None) -> tuple[Config, ObjectStore]:
    """The validated config at ``path`` and a store on the environment's settings whose bucket
    answers; with ``versions``, the dataset has ``version`` too (None: any version)."""
    cfg = config(path)
    store = ObjectStore(StoreSettings.from_env())
    s3(store.settings)
    if versions:
        dataset_versions(store.settings, cfg, version)
    return cfg, store


def quick_store(settings: StoreSettings) -> ObjectStore:
    """A store on ``settings`` with short timeouts and one attempt (for checks only)."""
    t = timeout_s()
    return ObjectStore(dataclasses.replace(settings, connect_timeout_s=t, read_timeout_s=t,
                                           max_attempts=1))


def s3(settings: StoreSettings) -> None:
    """The endpoint answers and the bucket exists and is readable with these keys."""
    where = settings.endpoint_url or "AWS S3"
    try:
        quick_store(settings).check_bucket()
    except PermanentStoreError:
        raise
    except StoreError as exc:
        why = _short(exc.__cause__ or exc)
        raise ServiceUnavailable(
            "S3", where, f"does not answer within {timeout_s():g}s ({why})",
            f"{STACK_FIX}, or point SHARDLINE_S3_ENDPOINT_URL at a running S3 endpoint"
        ) from exc


def dataset_versions(settings: StoreSettings, cfg: Config, version: int | None) -> list[int]:
    """The dataset's versions; raises when ``version`` (or, for None, any) is missing."""
    store = quick_store(settings)
    versions = list_versions(store, cfg.dataset.prefix)
    where = f"s3://{store.bucket}/{cfg.dataset.prefix}/versions/"
    if not versions:
        raise PermanentStoreError(f"dataset {cfg.dataset.name} has no versions under {where}; "
                                  f"run `shardline ingest -c {cfg.path}` first")
    if version is not None and version not in versions:
        record = read_expired(store, cfg.dataset.prefix)
        if version in record:
            raise expired_error(store, cfg.dataset.prefix, version, record, versions[-1])
        raise PermanentStoreError(f"dataset {cfg.dataset.name} has no version {version} under "
                                  f"{where}; known versions: {_ranges(versions)}")
    return versions


def prefect() -> None:
    """``PREFECT_API_URL`` (when set) answers ``/health``; unset means ephemeral mode."""
    api = os.environ.get("PREFECT_API_URL", "").strip()
    if not api:
        return
    import httpx

    try:
        r = httpx.get(api.rstrip("/") + "/health", timeout=timeout_s())
    except httpx.HTTPError as exc:
        raise ServiceUnavailable(
            "the Prefect API", api, f"does not answer within {timeout_s():g}s "
            f"({type(exc).__name__})", f"{STACK_FIX}, start your Prefect server, or unset "
            "PREFECT_API_URL to run in Prefect's ephemeral mode") from exc
    if r.status_code >= 400:
        raise ServiceUnavailable("the Prefect API", api, f"answered HTTP {r.status_code} on "
                                 "/health", "check PREFECT_API_URL (it ends with /api)")


def spark(settings: SparkSettings | None = None) -> None:
    """The Spark Connect endpoint (when ``SHARDLINE_SPARK_REMOTE`` is set) accepts a TCP
    connection. A local master needs no check."""
    settings = settings or SparkSettings.from_env()
    if not settings.remote:
        return
    url = urlparse("http://" + settings.remote.removeprefix("sc://").split(";")[0])
    host, port = url.hostname or "127.0.0.1", url.port or 15002
    try:
        with socket.create_connection((host, port), timeout=timeout_s()):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ServiceUnavailable(
            "Spark Connect", settings.remote, f"does not accept connections ({why})",
            f"{STACK_FIX}, start the Connect server, or unset SHARDLINE_SPARK_REMOTE to "
            "convert with a local Spark") from exc


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) < 160 else text[:157] + "..."


def _ranges(values: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    out: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(out)
