"""Building and committing a version: the one place a version document is assembled.

``build_version`` turns the parent version and one new batch into a ``VersionDraft``: the
document plus the objects it references that must exist before the commit (the
batch list, the schema and config objects, and a checkpoint when one is due).
``commit_version`` writes those objects, then the document with ``If-None-Match: *``: the
version exists from that moment, and only then. Ingest, tests and benchmarks all build
versions here, so they all produce the shape readers are tested on.

What a commit costs: the batch list is the new batch's size; the document holds at most
``checkpoint_every`` batch-list references. When the parent's reference list is that long,
the publisher also writes a checkpoint of every live reference (O(batches) bytes, once per
``checkpoint_every`` versions) and the document starts over with one reference.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from shardline.core import layout
from shardline.core.errors import (
    ConfigError,
    ObjectExists,
    SchemaChange,
    StoreError,
)
from shardline.core.evolution import refusal, rules_change, schema_change
from shardline.core.field_stats import merge_stats
from shardline.core.latest import advance_hint
from shardline.core.manifest import Manifest, code_version, now_iso
from shardline.core.parts import (
    BatchListRef,
    CheckpointRef,
    ObjectRef,
    QuarantineSummary,
    SchemaInfo,
    ShardEntry,
    SourceEntry,
    Totals,
    ValidationSummary,
    to_dict,
)
from shardline.core.store import Store
from shardline.core.version_doc import (
    CHECKPOINT_EVERY,
    BatchList,
    Checkpoint,
    VersionDoc,
    digest,
    encode,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NewBatch:
    """What one ingest run adds: the batch's published and quarantined shards (at their
    final keys), its id index and its sources."""

    id: str
    run: str
    shards: list[ShardEntry]
    ids_path: str
    quarantine_shards: list[ShardEntry] = field(default_factory=list)
    sources: list[SourceEntry] = field(default_factory=list)
    by_rule: dict[str, int] = field(default_factory=dict)   # quarantined rows per rule
    stats: dict[str, Any] | None = None     # per-field statistics (core.field_stats)
    id_range: tuple[str, str] | None = None  # smallest and largest id (a zone map)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def quarantined(self) -> int:
        return sum(s.rows for s in self.quarantine_shards)


@dataclass(frozen=True)
class VersionDraft:
    """A version ready to commit: its document and the objects to write before it."""

    prefix: str
    doc: VersionDoc
    objects: dict[str, bytes]        # key -> bytes, each immutable
    parent: Manifest | None = None

    @property
    def key(self) -> str:
        return layout.version_key(self.prefix, self.doc.version)

    @property
    def run_objects(self) -> list[str]:
        """Keys only this draft writes (batch list, checkpoint): not the shared,
        content-addressed schema and config objects."""
        shared = {self.doc.schema.key} | ({self.doc.config.key} if self.doc.config else set())
        return [k for k in self.objects if k not in shared]

    @property
    def new_checkpoint(self) -> str | None:
        """The key of the checkpoint this draft writes, if it writes one."""
        ck = self.doc.checkpoint
        return ck.key if ck is not None and ck.key in self.objects else None

    @property
    def body(self) -> bytes:
        return encode(self.doc.to_dict())

    def manifest(self, get: Callable[[str], bytes] | None = None) -> Manifest:
        """The version as a reader will see it: the draft's objects, then ``get`` (or the
        parent's reader) for older ones."""
        def read(key: str) -> bytes:
            if key in self.objects:
                return self.objects[key]
            if get is not None:
                return get(key)
            if self.parent is not None:
                return self.parent.read_object(key)
            raise StoreError(f"{key}: not among the objects of draft {self.key}")
        return Manifest(self.doc.to_dict(), read, self.key)


def add_object(objects: dict[str, bytes], key_for: Callable[[str], str], data: dict[str, Any]
               ) -> ObjectRef:
    """Add a content-addressed object (schema, config) to ``objects``."""
    body = encode(data)
    sha = digest(body)
    key = key_for(sha[:32])
    objects[key] = body
    return ObjectRef(key=key, sha256=sha)


def batch_list_ref(prefix: str, objects: dict[str, bytes], version: int,
                   bl: BatchList) -> BatchListRef:
    """Add ``bl`` (a batch first published in ``version``) to ``objects``; its reference."""
    body = bl.to_arrow()
    key = layout.batch_list_key(prefix, bl.batch, bl.run)
    objects[key] = body
    return BatchListRef(batch=bl.batch, version=version, key=key, sha256=digest(body),
                        rows=bl.rows, shards=len(bl.shards), bytes=bl.bytes,
                        quarantined=bl.quarantined, ids_path=bl.ids_path,
                        sources=len(bl.sources))


def write_checkpoint(prefix: str, objects: dict[str, bytes], ck: Checkpoint, run: str
                     ) -> CheckpointRef:
    """Add checkpoint ``ck`` (written by ``run``) to ``objects``; its reference."""
    body = encode(ck.to_dict())
    key = layout.checkpoint_key(prefix, ck.version, run)
    objects[key] = body
    return CheckpointRef(key=key, sha256=digest(body), version=ck.version,
                         batches=len(ck.batch_lists))


def holdout_conflict(dataset: str, parent: Manifest | None, fraction: float | None
                     ) -> str | None:
    """Why ``fraction`` may not be used for the next version after ``parent`` (None: it may).

    The fraction is fixed by the first version that materialises the split: changing it
    would move rows between the split's shards of earlier and later batches (a row held
    out before would be trained on after, which is leakage)."""
    recorded = parent.holdout_fraction if parent is not None else None
    if fraction is None or recorded is None or fraction == recorded:
        return None
    return (f"dataset {dataset}: [dataset] holdout_fraction is {fraction}, but version "
            f"{parent.version if parent else '?'} recorded {recorded} when the held-out split "
            "was materialised; the fraction cannot change on an existing dataset (rows would "
            f"move between the train and held-out splits). Set holdout_fraction = {recorded}, "
            "or ingest into a new dataset name")


def build_version(prefix: str, *, dataset: str, schema: SchemaInfo, config: dict[str, Any],
                  parent: Manifest | None, batch: NewBatch, validation: ValidationSummary,
                  created_at: str | None = None, code: str | None = None,
                  checkpoint_every: int = CHECKPOINT_EVERY,
                  holdout_fraction: float | None = None) -> VersionDraft:
    """The next version after ``parent`` (None: the first) adding ``batch``.

    ``holdout_fraction``: the fraction ``batch``'s split shards were written with (None: the
    batch has mixed shards only, the older layout); the document records it, or the
    parent's when None.

    Raises:
        SchemaChange: the schema is not the parent's or an additive change of it (a new
            schema needs a new dataset name; never retried).
        ConfigError: ``holdout_fraction`` differs from the one the dataset recorded (a
            setting to fix, not a race to retry).
        ValueError: the batch has split shards but no ``holdout_fraction`` was given.
    """
    why = holdout_conflict(dataset, parent, holdout_fraction)
    if why is not None:
        raise ConfigError(why)
    if holdout_fraction is None and any(s.split is not None for s in batch.shards):
        raise ValueError(f"batch {batch.id} has train/holdout shards: pass the "
                         "holdout_fraction they were split with")
    if holdout_fraction is None and parent is not None:
        holdout_fraction = parent.holdout_fraction
    if parent is not None:
        change = schema_change(parent.schema, schema) \
            if parent.fingerprint != schema.fingerprint else None   # None: additive
        change = change or rules_change(parent, config)             # (core.evolution)
        if change is not None:
            raise SchemaChange(refusal(dataset, parent.version, change))
    version = 1 if parent is None else parent.version + 1
    objects: dict[str, bytes] = {}
    schema_ref = add_object(objects, lambda d: layout.schema_key(prefix, d), to_dict(schema))
    config_ref = add_object(objects, lambda d: layout.config_key(prefix, d), config)
    new = BatchList(dataset=dataset, batch=batch.id, run=batch.run, rows=batch.rows,
                    quarantined=batch.quarantined, ids_path=batch.ids_path,
                    shards=batch.shards, quarantine_shards=batch.quarantine_shards,
                    sources=batch.sources)
    new_ref = batch_list_ref(prefix, objects, version, new)
    if batch.stats:
        new_ref = dataclasses.replace(new_ref, stats=batch.stats)
    if batch.id_range is not None:
        new_ref = dataclasses.replace(new_ref, id_min=batch.id_range[0],
                                      id_max=batch.id_range[1])
    stats = merge_stats(parent.stats if parent is not None else None, batch.stats) \
        if batch.stats or (parent is not None and parent.stats) else None

    checkpoint: CheckpointRef | None = None
    before: list[BatchListRef] = []          # refs the document itself carries, before ours
    if parent is not None and len(parent.doc.batch_lists) >= checkpoint_every:
        checkpoint = write_checkpoint(prefix, objects, Checkpoint(
            dataset=dataset, version=parent.version, batch_lists=parent.batch_lists,
            totals=parent.totals), batch.run)
    elif parent is not None:
        checkpoint, before = parent.doc.checkpoint, parent.doc.batch_lists
    totals = (parent.totals if parent else Totals()).plus(new_ref)
    doc = VersionDoc(
        dataset=dataset, version=version, parent=None if parent is None else parent.version,
        created_at=created_at or now_iso(), code_version=code or code_version(),
        batch=batch.id, fingerprint=schema.fingerprint, schema=schema_ref, config=config_ref,
        checkpoint=checkpoint, batch_lists=[*before, new_ref], validation=validation,
        quarantine=QuarantineSummary(rows=batch.quarantined, by_rule=dict(batch.by_rule),
                                     total_rows=totals.quarantined),
        totals=totals, holdout_fraction=holdout_fraction, stats=stats,
        deletions=None if parent is None else parent.doc.deletions)
    return VersionDraft(prefix=prefix, doc=doc, objects=objects, parent=parent)


def write_objects(store: Store, draft: VersionDraft) -> None:
    """Write the draft's referenced objects. Content-addressed ones (schema, config) may
    already exist with the same bytes; every other key carries this run's id."""
    def put(item: tuple[str, bytes]) -> None:
        key, body = item
        # an existing key holds the same bytes: content-addressed, or this run's earlier try
        with contextlib.suppress(ObjectExists):
            store.put_bytes(key, body, if_none_match=True, content_type=(
                "application/vnd.apache.arrow.file" if key.endswith(".arrow")
                else "application/json"))
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(put, draft.objects.items()))


def commit_or_lost(store: Store, draft: VersionDraft, own: Iterable[str]) -> Manifest | None:
    """``commit_version``, telling a lost race from a lost reply: the committed version (also
    when the reply to our own write was lost: the document holds our bytes), or None when
    another publisher took the number; ``own`` (this attempt's objects, which nothing
    references then) is deleted, and the caller builds again on the new latest."""
    try:
        return commit_version(store, draft)
    except ObjectExists:
        if store.get_bytes(draft.key) == draft.body:
            return draft.manifest(store.get_bytes)
        store.delete(list(own))
        return None


def commit_version(store: Store, draft: VersionDraft,
                   check: Callable[[], None] | None = None) -> Manifest:
    """Write the objects, then ``versions/v<N>.json`` with If-None-Match: *, then move the
    latest-version hint forward (``core.latest``; best effort, after the commit).

    Raises:
        ObjectExists: another publisher already committed version N (re-read, rebuild on the
            new latest, try N+1).
    """
    write_objects(store, draft)
    if check is not None:        # the caller's last look at what the version names
        check()
    store.put_bytes(draft.key, draft.body, if_none_match=True, content_type="application/json")
    advance_hint(store, draft.prefix, draft.doc.version)
    log.info("committed %s (%d bytes, %d batch-list reference(s)%s)", draft.key,
             len(draft.body), len(draft.doc.batch_lists),
             ", new checkpoint" if any("/checkpoint-" in k for k in draft.objects) else "")
    return draft.manifest(store.get_bytes)
