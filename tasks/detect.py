"""Detect: which uploads under the dataset's incoming prefix are new, as one batch.

Each object (or Zarr group) becomes a :class:`~shardline.tasks.batch.Source` of the format
the registry (``tasks.convert.formats``) places it in; the batch id is a hash of the sorted
(key, ETag) list of its sources (``tasks.batch``).

What was already ingested is read from the claim ledger (``tasks.ledger``). Sources that
failed a batch are narrowed down by bisection and set aside (``tasks.setaside``): sources
with no strike go first in a batch of their own, so a failed upload never blocks later ones.
The core of it, :func:`new_sources`, is a pure function of (listing, claimed, strikes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Iterable

from shardline.core.config import DatasetConfig
from shardline.core.store import ObjectInfo, Store
from shardline.tasks.batch import Batch, Source, batch_id
from shardline.tasks.convert.formats import format_of, group_root
from shardline.tasks.ledger import claimed_as_of
from shardline.tasks.setaside import Strikes, next_sources

log = logging.getLogger(__name__)


def group_sources(listing: Iterable[ObjectInfo]) -> list[Source]:
    """Turn an object listing into sources, sorted by key. Folder markers (keys ending in
    '/') are skipped; files of an unknown type become ``unknown`` sources so that ingest
    quarantines them with a reason rather than ignoring them."""
    singles: list[Source] = []
    groups: dict[tuple[str, str], list[ObjectInfo]] = {}
    for o in listing:
        if o.key.endswith("/"):
            continue
        grouped = group_root(o.key)
        if grouped is not None:
            groups.setdefault(grouped, []).append(o)
            continue
        singles.append(Source(o.key, o.etag, o.size, format_of(o.key)))
    for (root, fmt), members in groups.items():
        h = hashlib.sha256()
        for m in sorted(members, key=lambda m: m.key):
            h.update(f"{m.key[len(root):]}\0{m.etag}\n".encode())
        singles.append(Source(root, h.hexdigest()[:32], sum(m.size for m in members), fmt))
    return sorted(singles, key=lambda s: s.key)


def new_sources(sources: Iterable[Source], claimed: set[tuple[str, str]],
                strikes: Strikes | None = None) -> Batch | None:
    """The batch of sources whose (key, ETag) is not claimed yet; ``None`` if there is none.
    An object re-uploaded with new content (new ETag) is new. With ``strikes``, sources that
    failed an earlier batch wait for the clean ones and are then tried by bisection."""
    fresh = tuple(s for s in sources if (s.key, s.etag) not in claimed)
    if strikes is not None:
        fresh = next_sources(fresh, strikes)
    return Batch(batch_id(fresh), fresh) if fresh else None


def detect(store: Store, cfg: DatasetConfig) -> Batch | None:
    """List ``cfg.incoming`` and return the batch of new sources, or ``None``."""
    sources = group_sources(store.list(cfg.incoming))
    strikes = Strikes.read(store, cfg)
    aside = strikes.aside()
    listed = {(s.key, s.etag) for s in sources}
    for (key, etag), why in sorted(aside.items()):
        if (key, etag) in listed:
            log.warning("s3://%s/%s (ETag %s) is set aside: %s; upload it again (fixed) to "
                        "retry it", store.bucket, key, etag, why[:300])
    claimed, seen = claimed_as_of(store, cfg)
    batch = new_sources(sources, claimed | set(aside), strikes)
    if batch is not None:
        batch = dataclasses.replace(batch, seen_version=seen)
    if batch is None:
        log.info("nothing new under s3://%s/%s (%d sources, all ingested)",
                 store.bucket, cfg.incoming, len(sources))
    else:
        log.info("batch %s: %d new source(s), %d bytes, of %d under s3://%s/%s", batch.id,
                 len(batch.sources), batch.bytes, len(sources), store.bucket, cfg.incoming)
    return batch
