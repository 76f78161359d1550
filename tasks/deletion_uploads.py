"""Deletions as an upload kind: a file under ``incoming/<dataset>/deletions/`` lists ids to
erase, and the next ingest run (its detect, scheduled listing or event path alike) applies
it through the same code path as ``shardline delete`` (``tasks.erase.erase_ids``).

A deletion file is one id per line (``.txt`` or any other name), a CSV with the dataset's
id column, JSON Lines / a JSON array (of ids or of objects with the id column), or Parquet
with the id column. Detect applies the deletion uploads once no data upload is new, so a
deletion uploaded with the rows it deletes finds them published.

Every line ends exactly once: its id erased, or a quarantine record with the reason (an id
not in the dataset, or a repeat of an earlier line). The record is the upload's claim in
the ledger (``batches/<id>.json``, with ``kind: deletions``, the counts and the quarantine
records), written after the version commits, so the upload is claimed like any other and a
re-run publishes nothing twice. The erased ids themselves are written nowhere (only counted),
and the applied file is removed once claimed (it names them).
An empty or unreadable file is claimed with its one-line error, so it never blocks the next
upload; upload a fixed file (a new ETag) to apply it.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.errors import ObjectExists, PublishConflict, ShardlineError
from shardline.core.manifest import Manifest, latest_manifest, read_manifest
from shardline.core.store import Store
from shardline.tasks.batch import Batch, Source, batch_id
from shardline.tasks.delete import DeleteRefused
from shardline.tasks.erase import erase_ids
from shardline.tasks.erase_find import find

log = logging.getLogger(__name__)


class DeletionFileError(ShardlineError):
    """A deletion upload that cannot be read or holds no id."""


@dataclass(frozen=True)
class Quarantined:
    line: int
    id: str                         # "" for a repeat: an erased id is written nowhere
    rule: str                       # "unknown_id" | "repeated_id"
    reason: str


@dataclass(frozen=True)
class Applied:
    """What one deletion upload did: ``version`` the erasure (None: nothing erased)."""

    key: str
    etag: str
    parent: int
    version: int | None
    deleted: int
    quarantined: list[Quarantined] = field(default_factory=list)
    error: str | None = None


def _text_ids(text: str) -> list[tuple[int, str]]:
    return [(n, x.strip()) for n, x in enumerate(text.splitlines(), 1) if x.strip()]


def _csv_ids(text: str, column: str, key: str) -> list[tuple[int, str]]:
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or column not in reader.fieldnames:
        raise DeletionFileError(
            f"deletion upload {key}: no {column!r} column in its CSV header "
            f"({reader.fieldnames}); upload a CSV with the dataset's id column")
    return [(reader.line_num, str(r[column]).strip()) for r in reader
            if str(r[column] or "").strip()]


def _json_ids(text: str, column: str) -> list[tuple[int, str]]:
    stripped = text.lstrip()
    if stripped.startswith("["):
        items: list[tuple[int, Any]] = list(enumerate(json.loads(text), 1))
    else:
        items = [(n, json.loads(x)) for n, x in enumerate(text.splitlines(), 1) if x.strip()]
    return [(n, str(v[column] if isinstance(v, dict) else v).strip()) for n, v in items]


def read_ids(data: bytes, key: str, column: str) -> list[tuple[int, str]]:
    """(line, id) of each id in the deletion upload ``key``: rows count from 1 (a CSV's
    header is line 1, its first row line 2).

    Raises:
        DeletionFileError: the file cannot be parsed, lacks the id column, or holds no id.
    """
    name = key.lower()
    try:
        if name.endswith(".parquet"):
            t = pq.read_table(pa.BufferReader(data), columns=[column])
            found = [(n, str(v).strip()) for n, v in enumerate(t.column(column).to_pylist(), 1)
                     if v is not None]
        elif name.endswith(".csv"):
            found = _csv_ids(data.decode("utf-8"), column, key)
        elif name.endswith((".json", ".jsonl")):
            found = _json_ids(data.decode("utf-8"), column)
        else:
            found = _text_ids(data.decode("utf-8"))
    except DeletionFileError:
        raise
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise DeletionFileError(
            f"deletion upload {key}: cannot read it ({why}); upload one id per line, or a "
            f"CSV/JSON/Parquet file with the {column!r} column") from exc
    found = [(n, i) for n, i in found if i]
    if not found:
        raise DeletionFileError(f"deletion upload {key}: no id in it; upload one id per "
                                f"line, or a CSV/JSON/Parquet file with the {column!r} column")
    return found


def pending_deletions(sources: Iterable[Source], cfg: DatasetConfig,
                      done: set[tuple[str, str]]) -> list[Source]:
    """The deletion uploads among ``sources`` not claimed (or set aside) yet, by key."""
    return sorted((s for s in sources if layout.is_deletion(cfg.incoming, s.key)
                   and (s.key, s.etag) not in done), key=lambda s: s.key)


def apply_all(store: Store, cfg: DatasetConfig, sources: list[Source]) -> list[Applied]:
    """Apply each deletion upload in key order (each its own version)."""
    return [apply_one(store, cfg, s) for s in sources]


def apply_one(store: Store, cfg: DatasetConfig, src: Source) -> Applied:
    """Erase the known ids of ``src``, quarantine the others, claim the upload."""
    batch = Batch(batch_id([src]), (src,))
    try:
        lines = read_ids(store.get_bytes(src.key), src.key, cfg.id_column)
    except DeletionFileError as exc:
        log.error("%s", exc)
        latest = latest_manifest(store, cfg.prefix)
        parent = latest.version if latest is not None else 0
        return _claim(store, cfg, batch, Applied(src.key, src.etag, parent, None, 0,
                                                 error=str(exc)))
    first: dict[str, int] = {}
    out: list[Quarantined] = []
    for n, i in lines:
        if i in first:
            out.append(Quarantined(n, "", "repeated_id", f"{src.key} line {n} repeats the "
                                   f"id of line {first[i]}; it is handled once there"))
        else:
            first[i] = n
    parent, version, unknown = _erase_known(store, cfg, batch, list(first))
    for i in unknown:
        out.append(Quarantined(first[i], i, "unknown_id", f"id {i!r} in {src.key} line "
                               f"{first[i]} is not in the dataset (v{parent}); nothing "
                               "deleted for it"))
    known = [i for i in first if i not in unknown]
    for q in sorted(out, key=lambda q: q.line):
        log.warning("quarantined (%s): %s", q.rule, q.reason)
    return _claim(store, cfg, batch, Applied(src.key, src.etag, parent, version, len(known),
                                             sorted(out, key=lambda q: q.line)))


def _erase_known(store: Store, cfg: DatasetConfig, batch: Batch, ids: list[str],
                 attempts: int = 5) -> tuple[int, int | None, set[str]]:
    """Erase those of ``ids`` the latest version holds: (the version they were looked up
    in, the erasure's version or None, the ids it does not hold). An id erased by another
    deletion between the look-up and the erasure: looked up again."""
    run = f"del{batch.id[:10]}"
    for _ in range(attempts):
        latest = latest_manifest(store, cfg.prefix)
        if latest is None:
            return 0, None, set(ids)
        if latest.doc.parent is not None and _written_by(latest, run):
            # an earlier run committed this erasure and died before its claim: the ids
            # it did not know are looked up in the version it started from
            before = read_manifest(store, cfg.prefix, latest.doc.parent)
            log.info("%s was applied as v%d already; claiming it", batch.sources[0].key,
                     latest.version)
            return before.version, latest.version, set(
                find(store, before, pa.array(ids, pa.string())).unknown)
        unknown = set(find(store, latest, pa.array(ids, pa.string())).unknown)
        known = [i for i in ids if i not in unknown]
        if not known:
            return latest.version, None, unknown
        try:
            r = erase_ids(store, cfg, known, run_id=run)
        except DeleteRefused:
            log.info("an id of %s was erased meanwhile; looking the ids up again",
                     batch.sources[0].key)
            continue
        return latest.version, r.version, unknown
    raise PublishConflict(f"deletion upload {batch.sources[0].key}: its ids kept changing "
                          f"under it ({attempts} look-ups); the next ingest run applies it")


def _written_by(m: Manifest, run: str) -> bool:
    """Whether version ``m`` is the erasure of run ``run`` (its checkpoint's key names it)."""
    ck = m.doc.checkpoint
    return ck is not None and ck.key.endswith(f"-{run}.json") and m.doc.batch is None


def _claim(store: Store, cfg: DatasetConfig, batch: Batch, done: Applied) -> Applied:
    """The ledger's claim of the upload, with what it did (the ids erased: counted only)."""
    doc = {"batch": batch.id, "version": done.version or done.parent, "kind": "deletions",
           "sources": [{"key": s.key, "etag": s.etag, "size": s.size, "format": "deletions"}
                       for s in batch.sources],
           "deleted": done.deleted, "error": done.error,
           "quarantined": [asdict(q) for q in done.quarantined]}
    with contextlib.suppress(ObjectExists):
        store.put_bytes(layout.batch_claim_key(cfg.prefix, batch.id),
                        json.dumps(doc, indent=1).encode(), if_none_match=True,
                        content_type="application/json")
    log.info("deletion upload %s: %d id(s) erased%s, %d line(s) quarantined", done.key,
             done.deleted, f" (v{done.version})" if done.version else "",
             len(done.quarantined))
    if done.error is None:
        _remove_applied(store, batch.sources[0])
    return done


def _remove_applied(store: Store, src: Source) -> None:
    """Remove the applied deletion file: it names the erased ids, and after expire + vacuum
    no object may hold them. Its claim keeps what it did; a file replaced since (another
    ETag: not applied yet) is left for the next run. An unreadable file is kept (its claim
    names the error) so nothing the user sent is lost."""
    info = store.head(src.key)
    if info is not None and info.etag == src.etag:
        store.delete([src.key])


def record(store: Store, cfg: DatasetConfig, src: Source) -> dict[str, Any] | None:
    """The ledger's record of the deletion upload ``src`` (None: not applied yet)."""
    key = layout.batch_claim_key(cfg.prefix, batch_id([src]))
    if store.head(key) is None:
        return None
    doc: dict[str, Any] = store.get_json(key)
    return doc
