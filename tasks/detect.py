"""Detect: which uploads under the dataset's incoming prefix are new, as one batch.

Each object (or Zarr group) becomes a :class:`~shardline.tasks.batch.Source` of the format
the registry (``tasks.convert.formats``) places it in; the batch id is a hash of the sorted
(key, ETag) list of its sources (``tasks.batch``).

What was already ingested is read from the claim ledger (``tasks.ledger``). Sources that
failed a batch are narrowed down by bisection and set aside (``tasks.setaside``): sources
with no strike go first in a batch of their own, so a failed upload never blocks later ones.
The core of it, :func:`new_sources`, is a pure function of (listing, claimed, strikes).

What is looked at depends on the run's :class:`Scope` (docs/design.md, "Detect in O(new)"):
an upload-triggered run HEADs exactly the keys its events recorded (``tasks.pending``) and
lists nothing under ``incoming/``; a reconciling run lists ``incoming/``, from a high-water
mark where the layout allows it and in full on a slower schedule (``tasks.listing``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.errors import ConfigError
from shardline.core.store import ObjectInfo, Store
from shardline.tasks import deletion_uploads, listing, pending
from shardline.tasks.batch import Batch, Source, batch_id
from shardline.tasks.convert.formats import format_of, group_root
from shardline.tasks.lease import store_now
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


@dataclass(frozen=True)
class Scope:
    """What one run's detects look at. ``events``: the pending upload keys the event
    bridges recorded (``tasks.pending``); ``keys``: exactly these keys; neither: reconcile
    by listing ``incoming/`` (``full``: all of it, whatever the schedule)."""

    events: bool = False
    keys: tuple[str, ...] = ()
    full: bool = False

    @property
    def reconciling(self) -> bool:
        return not (self.events or self.keys)


def resolve_scope(store: Store, cfg: DatasetConfig, scope: Scope) -> Scope:
    """The scope a run starts with: an event run that finds no pending keys (events posted
    by a bridge that records none, or all ingested already) reconciles instead."""
    if scope.events and not scope.keys and not pending.markers(store, cfg.incoming):
        log.info("no pending upload keys under s3://%s/%s; reconciling by listing",
                 store.bucket, layout.pending_prefix(cfg.incoming))
        return Scope(full=scope.full)
    return scope


def settle_scope(store: Store, cfg: DatasetConfig, scope: Scope
                 ) -> tuple[str, str | None] | None:
    """(prefix, start after) that settle watches for ``scope``: the pending keys of an
    event run, the newest part of ``incoming/`` of a reconciling one (after the main
    stream's mark); None for given keys (nothing to wait for)."""
    if scope.keys:
        return None
    if scope.events:
        return layout.pending_prefix(cfg.incoming), None
    if not cfg.incremental_listing or scope.full:
        return cfg.incoming, None
    state = listing.read_state(store, cfg.prefix)
    return cfg.incoming, state.marks.get("") if state is not None else None


def keyed_sources(store: Store, cfg: DatasetConfig, keys: Iterable[str]) -> list[Source]:
    """The sources of exactly ``keys``: a HEAD each, a listing of each Zarr group named.

    Raises:
        ConfigError: a key is not under the dataset's incoming prefix.
    """
    wanted = set(keys)
    outside = sorted(k for k in wanted if not k.startswith(cfg.incoming))
    if outside:
        raise ConfigError(f"key {outside[0]!r} is not under dataset {cfg.name}'s incoming "
                          f"prefix {cfg.incoming!r}; pass keys under it")
    roots = {r[0] for k in wanted if (r := group_root(k)) is not None}
    infos = pending.head_all(store, (k for k in wanted if group_root(k) is None))
    for root in sorted(roots):
        infos.extend(store.list(root))
    return group_sources(infos)


Recorded = tuple[listing.ListingState | None, listing.ListingState]   # (as read, as listed)


def listed_sources(store: Store, cfg: DatasetConfig, full: bool
                   ) -> tuple[list[Source], Recorded | None]:
    """A reconciling listing (``tasks.listing``); returns the sources and, for an
    incremental layout, the state read and the one to record once the sources are judged."""
    if not cfg.incremental_listing:
        return group_sources(store.list(cfg.incoming)), None
    every = timedelta(hours=cfg.full_listing_every_hours)
    state = listing.read_state(store, cfg.prefix)
    now = store_now(store, cfg.prefix) if state is not None and state.full_at else None
    plan = listing.plan_listing(state, cfg.incremental_listing, every, now, full)
    log.info("listing s3://%s/%s: %s", store.bucket, cfg.incoming, plan.why)
    sources = group_sources(listing.list_incoming(store, cfg.incoming,
                                                  None if plan.full else plan.marks))
    full_at = (now or store_now(store, cfg.prefix)) if plan.full else \
        (state.full_at if state else None)
    return sources, (state, listing.ListingState(plan.marks, full_at))


def detect(store: Store, cfg: DatasetConfig, scope: Scope = Scope()) -> Batch | None:
    """The batch of new sources in ``scope`` (by default: list ``cfg.incoming``), or
    ``None``. It deletes the pending keys it finds resolved (a reconciling run: only those
    of uploads it listed and found claimed, so keys stay no longer than a night when no
    event run comes, e.g. the upload deployment is paused)."""
    marks = {} if scope.keys and not scope.events else pending.markers(store, cfg.incoming)
    state: Recorded | None = None
    if scope.reconciling:
        sources, state = listed_sources(store, cfg, scope.full)
    else:
        sources = keyed_sources(store, cfg, {*scope.keys, *marks})
    strikes = Strikes.read(store, cfg)
    aside = strikes.aside()
    listed = {(s.key, s.etag) for s in sources}
    for (key, etag), why in sorted(aside.items()):
        if (key, etag) in listed:
            log.warning("s3://%s/%s (ETag %s) is set aside: %s; upload it again (fixed) to "
                        "retry it", store.bucket, key, etag, why[:300])
    claimed, seen = claimed_as_of(store, cfg)
    done = claimed | set(aside)
    batch = new_sources([s for s in sources if not layout.is_deletion(cfg.incoming, s.key)],
                        done, strikes)
    if batch is not None:
        batch = dataclasses.replace(batch, seen_version=seen)
    else:        # no data upload is new: apply the deletion uploads (tasks.deletion_uploads)
        applied = deletion_uploads.apply_all(store, cfg, deletion_uploads.pending_deletions(
            sources, cfg, done))
        done |= {(a.key, a.etag) for a in applied}
    if marks:
        by_key = {s.key: (s.key, s.etag) for s in sources}
        source_of = {k: src for k in marks
                     if (src := by_key.get((group_root(k) or (k, ""))[0])) is not None}
        pending.consume(store, pending.resolved(marks, source_of, done,
                                                missing_is_gone=not scope.reconciling))
    if state is not None:
        _record_listing(store, cfg, sources, done, state)
    _log_outcome(store, cfg, batch, len(sources), scope)
    return batch


def _record_listing(store: Store, cfg: DatasetConfig, sources: list[Source],
                    done: set[tuple[str, str]], state: Recorded) -> None:
    """Move the high-water marks (``tasks.listing.next_marks``) if they changed."""
    before, listed = state
    marks = listing.next_marks(cfg.incoming, [s.key for s in sources],
                               [s.key for s in sources if (s.key, s.etag) not in done],
                               listed.marks)
    new = listing.ListingState(marks, listed.full_at)
    if new != before:
        listing.write_state(store, cfg.prefix, new)


def _log_outcome(store: Store, cfg: DatasetConfig, batch: Batch | None, n: int,
                 scope: Scope) -> None:
    where = (f"s3://{store.bucket}/{cfg.incoming}" if scope.reconciling else
             f"the {n} pending/given key(s) under s3://{store.bucket}/{cfg.incoming}")
    if batch is None:
        log.info("nothing new in %s (%d sources, all ingested)", where, n)
    else:
        log.info("batch %s: %d new source(s), %d bytes, of %d in %s", batch.id,
                 len(batch.sources), batch.bytes, n, where)
