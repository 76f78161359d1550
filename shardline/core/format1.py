"""Format 1, written before format 2: one cumulative document per version (every shard, every
batch, the schema and config inline). Readers load it through ``Manifest``; this module keeps
what tests of old manifests need to *write* one: ``Manifest(**fields)`` builds a format-1
document from the keyword fields the format-1 dataclass took, and ``commit_manifest``
commits it. Ingest never writes format 1.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from shardline.core import layout
from shardline.core.store import Store


class _Document(Protocol):
    """What ``commit_manifest`` needs of a ``Manifest`` (no import: manifest imports us)."""

    version: int

    def to_dict(self) -> dict[str, Any]: ...


def legacy_doc(fields: dict[str, Any]) -> dict[str, Any]:
    """A format-1 document from the keyword fields the format-1 ``Manifest`` dataclass took
    (tests that need an old-format document; ingest builds through ``core.builder``)."""
    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return dataclasses.asdict(v)
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v
    return {"config": {}, "format": 1, **{k: plain(v) for k, v in fields.items()}}


def commit_manifest(store: Store, prefix: str, manifest: _Document) -> str:
    """Commit a format-1 document with If-None-Match: * (for tests of old manifests;
    ingest commits format 2 through ``shardline.core.builder.commit_version``).

    Raises:
        ObjectExists: another publisher already committed this version number.
    """
    key = layout.version_key(prefix, manifest.version)
    store.put_json(key, manifest.to_dict(), if_none_match=True)
    return key
