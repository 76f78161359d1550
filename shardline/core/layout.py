"""Every object key of a dataset, built here and nowhere else.

``prefix`` is the dataset root (``dataset.root``, e.g. ``lake/digits``). The layout:

    <prefix>/versions/v<NNNNNN>.json                 version documents: a version exists iff
                                                     its document does (If-None-Match commit);
                                                     six digits at least, more from 1,000,000
    <prefix>/versions/latest.json                    a hint: the latest version some publisher
                                                     saw committed (compare-and-swap; readers
                                                     probe forward from it, never trust it)
    <prefix>/manifests/batch=<id>-<run>.json         a batch's shard list, written once before
                                                     the commit that references it
    <prefix>/manifests/checkpoint-v<NNNNNN>-<run>.json  every live batch-list reference up to
                                                     a version (compacts the reference chain)
    <prefix>/manifests/schema-<fingerprint>.json     the dataset schema, written once
    <prefix>/manifests/config-<digest>.json          a resolved dataset config, written once
    <prefix>/shards/batch=<id>/[label=<k>/]part-<nnnnn>-<run>.arrow   published data shards
    <prefix>/shards/batch=<id>/split=holdout/[label=<k>/]part-...     its held-out rows
    <prefix>/quarantine/batch=<id>/part-<nnnnn>-<run>.arrow           rejected rows + reasons
    <prefix>/ids/batch=<id>-<run>.arrow              published ids of a batch (duplicate check)
    <prefix>/deletes/batch=<id>/dv-<shard>-<run>-v<N>.arrow   a deletion vector (rows masked)
    <prefix>/deletes/index-v<N>-<run>.json           every live deletion vector of version N
    <prefix>/batches/<id>.json                       ledger: a batch's sources and version
    <prefix>/ledger/claims-<NNNNNNNNN>.arrow         ledger checkpoint: the claims of that
                                                     many batches in one Arrow file
    <prefix>/ledger/listing.json                     where reconciling detects resume listing
    events/pending/<upload key>/<ETag>               (bucket-wide) an upload event's key, until
                                                     an ingest claimed it
    <prefix>/staging/<run>/...                       work in progress of one ingest run
    <prefix>/leases/<run>                            heartbeat of a running ingest (sweep keeps)
    <prefix>/leases/train-<run>                      a running training's lease on the version
                                                     it reads (expire keeps that version)
    <prefix>/reports/<run>/validation.json           validation results, also for failed runs
    <prefix>/retention/expired.json                  which versions were expired, and when
                                                     (store clock; compare-and-swap)
    <prefix>/retention/v<NNNNNN>.json                an expired version's document, kept a
                                                     window for its readers (``tasks.vacuum``)

Keys that a racing publisher of the same batch could also write carry the run id, so no key
is ever written twice with different bytes; content-addressed keys (schema, config) hold the
same bytes whoever writes them.
"""

from __future__ import annotations

import re

_VERSION_RE = re.compile(r"/versions/v(\d{6,})\.json$")

# Folders of objects that version documents reference; the sweep removes old objects there
# that the latest version does not reference. (``manifests/`` is not swept yet: older
# versions' checkpoints stay referenced by their documents.)
SWEPT_FOLDERS = ("shards/", "quarantine/", "ids/", "deletes/")


# -- versions ---------------------------------------------------------------------------
def versions_prefix(prefix: str) -> str:
    return f"{prefix}/versions/"


def version_key(prefix: str, version: int) -> str:
    """Zero-padded to six digits, so older keys keep their names; from 1,000,000 on the key
    simply has more digits (no ceiling). Keys do not sort numerically past that point:
    readers find versions by number (``core.latest``), never by listing order."""
    if version < 1:
        raise ValueError(f"version numbers start at 1, got {version}")
    return f"{prefix}/versions/v{version:06d}.json"


def version_of_key(key: str) -> int | None:
    """The version number a ``versions/`` key names, or None for any other key (including
    a non-canonical spelling such as ``v0000001.json``, which no writer produces)."""
    m = _VERSION_RE.search(key)
    if m is None or (len(m.group(1)) > 6 and m.group(1).startswith("0")):
        return None
    return int(m.group(1))


def latest_pointer_key(prefix: str) -> str:
    """The latest-version hint (``core.latest``); not a version document."""
    return f"{prefix}/versions/latest.json"


# -- manifest objects ------------------------------------------------------------------
def manifests_prefix(prefix: str) -> str:
    return f"{prefix}/manifests/"


def batch_lists_prefix(prefix: str) -> str:
    return f"{prefix}/manifests/batch="


def batch_list_key(prefix: str, batch_id: str, run_id: str) -> str:
    """A batch list (Arrow IPC; format 2 wrote ``.json``, read by ``shardline migrate``)."""
    return f"{prefix}/manifests/batch={batch_id}-{run_id}.arrow"


def checkpoint_key(prefix: str, version: int, run_id: str) -> str:
    """A checkpoint of the references live at ``version``, written by ``run_id``'s publish
    of the version after it (racers for that version never share the key)."""
    return f"{prefix}/manifests/checkpoint-v{version:06d}-{run_id}.json"


def schema_key(prefix: str, fingerprint: str) -> str:
    return f"{prefix}/manifests/schema-{fingerprint}.json"


def config_key(prefix: str, digest: str) -> str:
    return f"{prefix}/manifests/config-{digest}.json"


def deployed_config_key(prefix: str) -> str:
    """The dataset TOML that ``shardline deploy`` uploads: deployments name it by s3:// URI,
    so a flow run on any machine reads the same document (no host paths)."""
    return f"{prefix}/deploy/config.toml"


# -- published data ----------------------------------------------------------------------
def _split_part(split: str | None) -> str:
    """Held-out shards live under ``split=holdout/``; train and older mixed shards do not."""
    return "split=holdout/" if split == "holdout" else ""


def shard_key(prefix: str, batch_id: str, label: int | None, part: int, run_id: str,
              split: str | None = None) -> str:
    """Final key of a published shard. The run id keeps racing publishers of the same batch
    from ever writing the same key: the version commit alone decides which files are live.
    ``split="holdout"``: a shard of the batch's held-out rows (its own folder)."""
    label_part = "" if label is None else f"label={label}/"
    return (f"{prefix}/shards/batch={batch_id}/{_split_part(split)}{label_part}"
            f"part-{part:05d}-{run_id}.arrow")


def quarantine_key(prefix: str, batch_id: str, part: int, run_id: str) -> str:
    return f"{prefix}/quarantine/batch={batch_id}/part-{part:05d}-{run_id}.arrow"


def ids_key(prefix: str, batch_id: str, run_id: str) -> str:
    return f"{prefix}/ids/batch={batch_id}-{run_id}.arrow"


def deletion_vector_key(prefix: str, batch_id: str, shard_sha256: str, run_id: str,
                        version: int) -> str:
    """A deletion vector of one shard (``core.deletions``), written by ``run_id`` for
    version ``version``: racers and later changes of the same shard never share the key."""
    return (f"{prefix}/deletes/batch={batch_id}/dv-{shard_sha256[:16]}-{run_id}-"
            f"v{version:06d}.arrow")


def deletions_index_key(prefix: str, version: int, run_id: str) -> str:
    """Every live deletion vector reference of ``version`` (``core.deletions``)."""
    return f"{prefix}/deletes/index-v{version:06d}-{run_id}.json"


# -- corrections ------------------------------------------------------------------------
CORRECTIONS = "corrections/"


def corrections_prefix(incoming: str) -> str:
    """Uploads under this prefix of the dataset's incoming prefix are corrections: each row
    replaces the published row with the same id (``tasks.publish``)."""
    return incoming.rstrip("/") + "/" + CORRECTIONS


def is_correction(incoming: str, key: str) -> bool:
    return key.startswith(corrections_prefix(incoming))


# -- deletions ---------------------------------------------------------------------------
DELETIONS = "deletions/"


def deletions_prefix(incoming: str) -> str:
    """Uploads under this prefix of the dataset's incoming prefix are deletions: lists of
    ids to erase (``tasks.deletion_uploads``)."""
    return incoming.rstrip("/") + "/" + DELETIONS


def is_deletion(incoming: str, key: str) -> bool:
    return key.startswith(deletions_prefix(incoming))


# -- ledger, staging, reports --------------------------------------------------------------
def batches_prefix(prefix: str) -> str:
    return f"{prefix}/batches/"


def batch_claim_key(prefix: str, batch_id: str) -> str:
    return f"{prefix}/batches/{batch_id}.json"


def claims_checkpoint_prefix(prefix: str) -> str:
    return f"{prefix}/ledger/claims-"


def claims_checkpoint_key(prefix: str, batches: int) -> str:
    return f"{claims_checkpoint_prefix(prefix)}{batches:09d}.arrow"


def listing_state_key(prefix: str) -> str:
    """Where reconciling detects resume their listing of the incoming prefix (``tasks.listing``)."""
    return f"{prefix}/ledger/listing.json"


# -- pending upload keys (bucket-wide, outside every incoming prefix) ----------------------
# The event bridges record each upload here before posting its event; the upload-triggered
# ingest reads and consumes them, so it never lists incoming/ (``tasks.pending``).
PENDING_ROOT = "events/pending/"


def pending_prefix(incoming: str) -> str:
    """The pending-key markers of uploads under ``incoming``."""
    return PENDING_ROOT + incoming


def pending_key(upload_key: str, etag: str) -> str:
    """The marker of one uploaded object version: ``events/pending/<key>/<etag>``."""
    return f"{PENDING_ROOT}{upload_key}/{etag.strip().strip(chr(34)).lower()}"


def pending_upload(marker: str) -> tuple[str, str] | None:
    """(upload key, ETag) a marker names, or None for any other key."""
    if not marker.startswith(PENDING_ROOT):
        return None
    key, _, etag = marker[len(PENDING_ROOT):].rpartition("/")
    return (key, etag) if key and etag else None


def sweep_marker(prefix: str) -> str:
    """When the sweep last scanned for orphans (``tasks.sweep``)."""
    return f"{prefix}/sweep/last-scan.json"


def sweep_clock_key(prefix: str) -> str:
    """A marker the sweep writes to read the store's clock (its LastModified)."""
    return f"{prefix}/sweep/clock"


def training_lease_key(prefix: str, run: str) -> str:
    """A running training's lease: names the dataset version it reads (``tasks.expire``
    keeps that version while the lease is refreshed)."""
    return f"{prefix}/leases/train-{run}"


def expired_record_key(prefix: str) -> str:
    """Which versions ``shardline expire`` removed, and when (``core.retention``)."""
    return f"{prefix}/retention/expired.json"


def retention_prefix(prefix: str) -> str:
    return f"{prefix}/retention/"


def expired_doc_key(prefix: str, version: int) -> str:
    """Where an expired version's document waits a window before ``shardline vacuum``."""
    return f"{prefix}/retention/v{version:06d}.json"


def leases_prefix(prefix: str) -> str:
    """Heartbeats of running ingests (``tasks.lease``): ``leases/<run>``."""
    return f"{prefix}/leases/"


def staging_prefix(prefix: str, run_id: str | None = None) -> str:
    return f"{prefix}/staging/" if run_id is None else f"{prefix}/staging/{run_id}/"


def staged_data_key(prefix: str, run_id: str, label: int | None, task: int, seq: int,
                    attempt: int, split: str | None = None) -> str:
    """A data shard staged by Spark task ``task`` (attempt ``attempt``): the attempt keeps a
    retried or speculative attempt from overwriting another's file."""
    part = _split_part(split) + ("" if label is None else f"label={label}/")
    return f"{prefix}/staging/{run_id}/data/{part}t{task:05d}-{seq:04d}-a{attempt}.arrow"


def staged_quarantine_key(prefix: str, run_id: str, task: int, attempt: int) -> str:
    return f"{prefix}/staging/{run_id}/quarantine/t{task:05d}-a{attempt}.arrow"


def staged_rewrite_key(staged_key: str) -> str:
    """Where a staged data shard goes when rewritten without its duplicate rows."""
    return staged_key.removesuffix(".arrow") + "-dedup.arrow"


def staged_duplicates_key(prefix: str, run_id: str) -> str:
    """The quarantine shard of the rows the driver's duplicate check removed."""
    return f"{prefix}/staging/{run_id}/quarantine/duplicates.arrow"


def report_key(prefix: str, run_id: str) -> str:
    return f"{prefix}/reports/{run_id}/validation.json"
