"""The Arrow schemas of published and quarantined rows, and the object layout's key names.

Published rows (one schema per dataset, fixed by its config):
  id: string            row identity, unique across all versions of the dataset
  label: int16          index into ``dataset.classes``
  image: fixed_size_binary(H*W*C)   decoded uint8 pixels, HWC order; the trainer never decodes
  source_key: string    the object the row came from
  source_row: int64     the row's index within that object

Fixed-size binary keeps pixels in one contiguous buffer per record batch, so a memory-mapped
shard is handed to numpy/torch without a copy. The shape and classes ride in the schema
metadata, so a shard is self-describing.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa

from shardline.core.config import DatasetConfig

META_SHAPE = b"shardline.shape"
META_CLASSES = b"shardline.classes"
META_DATASET = b"shardline.dataset"

# Rules a row (or a whole object, source_row = -1) can break. Stable names: they appear in
# quarantine shards, manifests and dashboards.
RULES = {
    "unreadable_object": "the object could not be read or parsed as its format",
    "truncated_file": "the object ends early (cut-off upload)",
    "unparseable_record": "the record could not be parsed",
    "missing_id": "the id column is missing or empty",
    "duplicate_id": "the id was already seen (earlier in this batch or in a published version)",
    "missing_label": "the label is missing",
    "unknown_label": "the label is neither a class name nor a class index",
    "missing_image": "the image is missing",
    "undecodable_image": "the image bytes are not a decodable PNG/JPEG (or bad base64)",
    "wrong_shape": "the decoded image does not have the configured [H, W, C]",
}

QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("source_key", pa.string(), nullable=False),
        pa.field("source_row", pa.int64(), nullable=False),
        pa.field("id", pa.string()),
        pa.field("label", pa.string()),
        pa.field("rule", pa.string(), nullable=False),
        pa.field("message", pa.string(), nullable=False),
        pa.field("raw", pa.large_binary()),
    ]
)


def data_schema(cfg: DatasetConfig) -> pa.Schema:
    """The published-row schema for ``cfg``."""
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("label", pa.int16(), nullable=False),
            pa.field("image", pa.binary(cfg.image.nbytes), nullable=False),
            pa.field("source_key", pa.string(), nullable=False),
            pa.field("source_row", pa.int64(), nullable=False),
        ],
        metadata={
            META_SHAPE: json.dumps(list(cfg.image.shape)).encode(),
            META_CLASSES: json.dumps(list(cfg.classes)).encode(),
            META_DATASET: cfg.name.encode(),
        },
    )


def fingerprint(schema: pa.Schema) -> str:
    """A stable hash of the schema (fields, types and metadata)."""
    return hashlib.sha256(schema.serialize().to_pybytes()).hexdigest()[:16]


def describe(schema: pa.Schema) -> list[dict[str, str]]:
    """A human-readable field list for manifests and dashboards."""
    return [{"name": f.name, "type": str(f.type), "nullable": str(f.nullable)} for f in schema]


# -- object layout ---------------------------------------------------------------------
def versions_prefix(prefix: str) -> str:
    return f"{prefix}/versions/"


def version_key(prefix: str, version: int) -> str:
    return f"{prefix}/versions/v{version:06d}.json"


def batch_claim_key(prefix: str, batch_id: str) -> str:
    return f"{prefix}/batches/{batch_id}.json"


def staging_prefix(prefix: str, run_id: str | None = None) -> str:
    return f"{prefix}/staging/" if run_id is None else f"{prefix}/staging/{run_id}/"


def shard_key(prefix: str, batch_id: str, label: int | None, part: int, run_id: str) -> str:
    """Final key of a published shard. The run id keeps racing publishers of the same batch
    from ever writing the same key: the manifest commit alone decides which files are live."""
    label_part = "" if label is None else f"label={label}/"
    return f"{prefix}/shards/batch={batch_id}/{label_part}part-{part:05d}-{run_id}.arrow"


def quarantine_key(prefix: str, batch_id: str, part: int, run_id: str) -> str:
    return f"{prefix}/quarantine/batch={batch_id}/part-{part:05d}-{run_id}.arrow"


def ids_key(prefix: str, batch_id: str, run_id: str) -> str:
    return f"{prefix}/ids/batch={batch_id}-{run_id}.arrow"


def report_key(prefix: str, run_id: str) -> str:
    return f"{prefix}/reports/{run_id}/validation.json"
