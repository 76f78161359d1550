"""Dataset versions in a store: which exist, and reading one as a ``Manifest`` (the view
of a format-3 document, in ``shardline.core.manifest_view``; importable from here).

A version exists if and only if ``versions/vNNNNNN.json`` exists (committed last, with
``If-None-Match: *``; see ``shardline.core.builder``); the latest is found from a hint and a
probe (``shardline.core.latest``), not a listing. ``read_manifest`` reads that document
only; the ``Manifest`` reads what it references when first used.
"""

from __future__ import annotations

import contextlib

from shardline.core import layout
from shardline.core.errors import ObjectExists, StoreError
from shardline.core.latest import VersionChainBroken, broken, latest_version, list_versions
from shardline.core.manifest_view import Manifest
from shardline.core.parts import (
    BatchEntry,
    QuarantineView,
    SchemaInfo,
    ShardEntry,
    SourceEntry,
    content_digests,
)
from shardline.core.provenance import code_version, now_iso
from shardline.core.retention import VersionExpired, expired_error, read_expired
from shardline.core.store import Store
from shardline.core.version_doc import UnsupportedFormat, decode


def read_manifest(store: Store, prefix: str, version: int) -> Manifest:
    """Version ``version``: its document now, what it references when first used.

    Raises:
        VersionExpired: ``shardline expire`` removed it (names the oldest kept version).
        VersionChainBroken: the document is missing although a later version exists.
        StoreError: the version does not exist (or cannot be read).
    """
    key = layout.version_key(prefix, version)
    try:
        data = store.get_bytes(key)
    except StoreError:
        if store.head(key) is not None:
            raise
        raise _missing(store, prefix, version) from None
    return Manifest(decode(data, store.uri(key)), store.get_bytes, key)


def _missing(store: Store, prefix: str, version: int) -> StoreError:
    """Why version ``version`` has no document: it was expired, never made, or the chain
    is broken. (The expiry record is read here only: a kept version costs no extra GET.)"""
    latest = latest_version(store, prefix)
    record = read_expired(store, prefix)
    if latest is not None and version in record:
        return expired_error(store, prefix, version, record, latest)
    if latest is not None and 1 <= version <= latest:   # == latest: the hint names it
        return broken(store, prefix, version, f"version {latest} exists" if version < latest
                      else "the latest-version hint names it")
    if latest is None:
        return StoreError(f"no dataset versions under s3://{store.bucket}/{prefix}/versions/; "
                          "run `shardline ingest` first")
    return StoreError(f"dataset version {version} does not exist under s3://{store.bucket}/"
                      f"{prefix}/; the latest is {latest}")


def latest_manifest(store: Store, prefix: str) -> Manifest | None:
    """The latest version (``core.latest``: a hint and a probe, no listing), or None."""
    latest = latest_version(store, prefix)
    return None if latest is None else read_manifest(store, prefix, latest)


def recent_manifests(store: Store, prefix: str, last: int) -> list[Manifest]:
    """Up to the ``last`` latest versions, oldest first, found from the latest (no listing);
    for views: a version whose document is gone or in an older format is left out."""
    latest = latest_version(store, prefix) or 0
    out = []
    for v in range(max(1, latest - last + 1), latest + 1):
        with contextlib.suppress(UnsupportedFormat, VersionChainBroken, VersionExpired):
            out.append(read_manifest(store, prefix, v))
    return out


def resolve_version(store: Store, prefix: str, version: int | None) -> Manifest:
    """``version`` or the latest; raises naming the dataset prefix when there is none."""
    m = latest_manifest(store, prefix) if version is None else \
        read_manifest(store, prefix, version)
    if m is None:
        raise _missing(store, prefix, 1)
    return m


__all__ = [
    "BatchEntry", "Manifest", "ObjectExists", "QuarantineView", "SchemaInfo", "ShardEntry",
    "SourceEntry", "VersionExpired", "code_version", "content_digests", "latest_manifest",
    "list_versions", "now_iso", "read_manifest", "recent_manifests", "resolve_version",
]
