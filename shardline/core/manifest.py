"""Dataset versions in a store: which exist, and reading one as a ``Manifest`` (the view
over format-1/2/3 documents, in ``shardline.core.manifest_view``; importable from here).

A version exists if and only if ``versions/vNNNNNN.json`` exists (committed last, with
``If-None-Match: *``; see ``shardline.core.builder``). ``read_manifest`` reads that document
only; the ``Manifest`` reads what it references when first used.
"""

from __future__ import annotations

from shardline.core import layout
from shardline.core.errors import ObjectExists, StoreError
from shardline.core.format1 import commit_manifest
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
from shardline.core.store import Store
from shardline.core.version_doc import decode


def list_versions(store: Store, prefix: str) -> list[int]:
    """Committed version numbers, ascending (S3 listing is strongly consistent)."""
    found = (layout.version_of_key(o.key) for o in store.list(layout.versions_prefix(prefix)))
    return sorted(v for v in found if v is not None)


def read_manifest(store: Store, prefix: str, version: int) -> Manifest:
    """Version ``version``: its document now, what it references when first used."""
    key = layout.version_key(prefix, version)
    return Manifest(decode(store.get_bytes(key), store.uri(key)), store.get_bytes, key)


def latest_manifest(store: Store, prefix: str) -> Manifest | None:
    versions = list_versions(store, prefix)
    return read_manifest(store, prefix, versions[-1]) if versions else None


def resolve_version(store: Store, prefix: str, version: int | None) -> Manifest:
    """``version`` or the latest; raises naming the dataset prefix when there is none."""
    versions = list_versions(store, prefix)
    if not versions:
        raise StoreError(
            f"no dataset versions under s3://{store.bucket}/{prefix}/versions/; run "
            "`shardline ingest` first"
        )
    if version is None:
        version = versions[-1]
    elif version not in versions:
        raise StoreError(
            f"dataset version {version} does not exist under s3://{store.bucket}/{prefix}/; "
            f"known versions: {versions}"
        )
    return read_manifest(store, prefix, version)


__all__ = [
    "BatchEntry", "Manifest", "ObjectExists", "QuarantineView", "SchemaInfo", "ShardEntry",
    "SourceEntry", "code_version", "commit_manifest", "content_digests", "latest_manifest",
    "list_versions", "now_iso", "read_manifest", "resolve_version",
]
