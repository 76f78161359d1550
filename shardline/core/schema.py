"""The Arrow schemas of published and quarantined rows (object keys: ``shardline.core.layout``).

Published rows (one schema per dataset, fixed by its config):
  id: string            row identity, unique across all versions of the dataset
  label: int16          index into ``dataset.classes``
  image: fixed_size_binary(H*W*C)   decoded uint8 pixels, HWC order; the trainer never decodes
  source_key: string    the object the row came from
  source_row: int64     the row's index within that object

With typed fields (``[dataset.fields]``, ``[dataset.target]``) the columns are ``id``, the
target, one per field in declared order, ``source_key``, ``source_row`` (types:
``shardline.core.field_arrow``).

Fixed-size binary keeps pixels in one contiguous buffer per record batch, so a memory-mapped
shard is handed to numpy/torch without a copy. The shape and classes ride in the schema
metadata, so a shard is self-describing.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pyarrow as pa

from shardline.core.config import DatasetConfig, config_to_dict
from shardline.core.errors import SchemaChange
from shardline.core.evolution import refusal, rules_change, schema_change
from shardline.core.field_arrow import (
    META_FIELDS,
    declaration_json,
    field_meta,
    field_type,
    target_type,
)
from shardline.core.field_spec import target_dtype
from shardline.core.layout import (
    batch_claim_key,
    ids_key,
    quarantine_key,
    report_key,
    shard_key,
    staging_prefix,
    version_key,
    versions_prefix,
)
from shardline.core.parts import SchemaInfo

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
    "unknown_id": "a correction (an upload under incoming/<dataset>/corrections/) names an id "
                  "no published version holds",
    "missing_label": "the label (the target's value) is missing",
    "unknown_label": "the label is neither a class name nor a class index (a multilabel "
                     "entry or a mask pixel likewise)",
    "missing_image": "the image is missing",
    "undecodable_image": "the image bytes are not a decodable PNG/JPEG (or bad base64)",
    "wrong_shape": "the value (a decoded image, a tensor) does not have the declared shape",
    # Containment (tasks/convert/limits.py): checked before the expensive work.
    "empty_object": "the object holds no rows (0 bytes, blank, a CSV header alone)",
    "duplicate_column": "the header names a column twice (CSV or Parquet)",
    "object_too_large": "the object is over limits.max_object_bytes for a whole read",
    "row_too_large": "a line, record or image value is over limits.max_row_bytes",
    "too_deeply_nested": "a JSON line nests deeper than limits.max_json_depth",
    "image_too_large": "the image header declares more than limits.max_pixels",
    "label_too_long": "the label is over limits.max_label_chars",
    "id_too_long": "the id is over limits.max_id_chars",
    "bad_id": "the id is not a string or an integer, or holds a control or bidi character",
    "unexpected_value": "checking the row raised an error no rule expects",
    "unreadable_rest": "the object failed part-way: the rows from source_row on",
    # Typed fields ([dataset.fields], [dataset.target]; tasks/convert/values.py): each
    # message names the field, the value (an excerpt) and the fix.
    "missing_field": "a declared field's column is not in the source (the whole object)",
    "missing_value": "a required field's value is missing or null",
    "wrong_dtype": "the value is not (exactly representable as) the field's dtype",
    "undecodable_value": "the tensor bytes are not valid base64, NPY or a JSON list",
    "not_finite": "the value holds NaN or Inf and the field does not allow them",
    "out_of_range": "the value is below the field's min or above its max",
    "unknown_value": "the string is not in the field's vocabulary",
    "missing_chunk": "a Zarr chunk holding the row does not exist in the store",
    "length_mismatch": "the Zarr group's arrays disagree in length (the whole group)",
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
    """The published-row schema for ``cfg``: the shorthand's exact legacy schema (its
    fingerprint unchanged), or one column per declared field (``core.field_arrow``)."""
    if not cfg.typed:
        return _legacy_schema(cfg)
    t = cfg.target_spec
    k = len(cfg.classes)
    cols = [pa.field("id", pa.string(), nullable=False),
            pa.field(t.name, target_type(t, k), nullable=False,
                     metadata=field_meta(t.kind, target_dtype(t, k)))]
    for name, spec in cfg.field_specs:
        cols.append(pa.field(name, field_type(spec), nullable=spec.optional,
                             metadata=field_meta(spec.kind, spec.resolved_dtype)))
    cols += [pa.field("source_key", pa.string(), nullable=False),
             pa.field("source_row", pa.int64(), nullable=False)]
    return pa.schema(cols, metadata={
        META_FIELDS: declaration_json(cfg.field_specs, t, k),
        META_CLASSES: json.dumps(list(cfg.classes)).encode(),
        META_DATASET: cfg.name.encode(),
    })


def _legacy_schema(cfg: DatasetConfig) -> pa.Schema:
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


def schema_info(cfg: DatasetConfig) -> SchemaInfo:
    """The typed schema part of a version for ``cfg`` (what the builder records)."""
    schema = data_schema(cfg)
    shape = list(cfg.image.shape) if not cfg.typed else []
    return SchemaInfo(fingerprint=fingerprint(schema), fields=describe(schema),
                      shape=shape, classes=list(cfg.classes),
                      ipc_b64=base64.b64encode(schema.serialize().to_pybytes()).decode())


def schema_conflict(cfg: DatasetConfig, latest: Any) -> None:
    """Refuse a configuration whose schema is not the latest version's or an additive
    change of it (``core.evolution``); called before any conversion work.

    Raises:
        SchemaChange: one line naming the change and the fix (a new dataset name).
    """
    if latest is None:
        return
    change = schema_change(latest.schema, schema_info(cfg)) or \
        rules_change(latest, config_to_dict(cfg))
    if change is not None:
        raise SchemaChange(refusal(cfg.name, latest.version, change))


# Key builders live in shardline.core.layout; re-exported for callers not yet moved there.
__all__ = [
    "META_CLASSES", "META_DATASET", "META_SHAPE", "QUARANTINE_SCHEMA", "RULES",
    "batch_claim_key", "data_schema", "describe", "fingerprint", "ids_key", "quarantine_key",
    "report_key", "schema_conflict", "schema_info", "shard_key", "staging_prefix", "version_key",
    "versions_prefix",
]
