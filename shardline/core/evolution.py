"""Schema evolution: which configuration changes a dataset's next version may carry.

Additive changes make a new version: an added optional field (older rows read it as null),
classes appended at the end (older indices keep their meaning), vocabulary values appended,
a widened ``min``/``max`` or ``allow_nan`` turned on. Anything else would give one dataset
two meanings for the same column (a dtype, a shape, a kind, a removed or reordered class, a
removed field, a new required field) or publish older rows that break its rules (a narrowed
or newly set ``min``/``max``, ``allow_nan`` turned off) and is refused with one line naming
the change and the fix: revert it, or a new dataset name. Ingest asks before any Spark work
(``tasks/convert/stage.py``), publish again when it builds the version (``core.builder``).

The value rules are not part of the Arrow schema (so a widened bound keeps the fingerprint);
they are compared against the configuration document the latest version recorded
(``config_to_dict``), which every version carries.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pyarrow as pa

from shardline.core.field_arrow import META_FIELDS, META_KIND
from shardline.core.version_doc import digest, encode

_CLASSES = b"shardline.classes"
_SHAPE = b"shardline.shape"


def recorded_schema(schema_info: Any) -> pa.Schema | None:
    """The Arrow schema a version recorded (``SchemaInfo.ipc_b64``), or None if it did not."""
    b64 = getattr(schema_info, "ipc_b64", "") or ""
    if not b64:
        return None
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(b64)))


def _meta(schema: pa.Schema, key: bytes, default: Any) -> Any:
    raw = (schema.metadata or {}).get(key)
    return json.loads(raw) if raw is not None else default


def _vocab(schema: pa.Schema) -> dict[str, list[str]]:
    decl = _meta(schema, META_FIELDS, {"fields": []})
    return {f["name"]: f.get("vocabulary", []) for f in decl.get("fields", [])}


def breaking_change(old: pa.Schema, new: pa.Schema) -> str | None:
    """What in ``new`` is not an additive change of ``old`` (None: it is, or none at all)."""
    oc, nc = _meta(old, _CLASSES, []), _meta(new, _CLASSES, [])
    if nc[:len(oc)] != oc:
        gone = [c for c in oc if c not in nc]
        what = f"class(es) {gone} removed" if gone else "classes reordered"
        return f"{what} (recorded {_short(oc)}, configured {_short(nc)}); classes may only " \
               "be appended at the end"
    if _meta(old, _SHAPE, None) != _meta(new, _SHAPE, None):
        return f"image shape {_meta(old, _SHAPE, None)} -> {_meta(new, _SHAPE, None)}"
    ov, nv = _vocab(old), _vocab(new)
    for f in old:
        if f.name not in new.names:
            return f"field {f.name!r} removed"
        g = new.field(f.name)
        if g.type != f.type:
            return f"field {f.name!r} type {f.type} -> {g.type}"
        okind, nkind = (f.metadata or {}).get(META_KIND), (g.metadata or {}).get(META_KIND)
        if okind != nkind:
            return f"field {f.name!r} kind {okind!r} -> {nkind!r}"
        if f.nullable and not g.nullable:
            return f"field {f.name!r} made required (older rows may be null)"
        old_v, new_v = ov.get(f.name, []), nv.get(f.name, [])
        if new_v[:len(old_v)] != old_v:
            return f"field {f.name!r} vocabulary {_short(old_v)} -> {_short(new_v)}; values " \
                   "may only be appended"
    for g in new:
        if g.name not in old.names and not g.nullable:
            return f"new field {g.name!r} is required (older rows have no value): declare " \
                   "it optional = true"
    return None


def _short(values: list[Any]) -> str:
    return str(values if len(values) <= 8 else [*values[:8], "..."])


def schema_change(old_info: Any, new_info: Any) -> str | None:
    """The breaking change from one version's ``SchemaInfo`` to another's (None: the same
    or additive). A version that recorded no Arrow schema compares by fingerprint only."""
    if old_info.fingerprint == new_info.fingerprint:
        return None
    old, new = recorded_schema(old_info), recorded_schema(new_info)
    if old is None or new is None:
        return f"schema fingerprint {old_info.fingerprint} -> {new_info.fingerprint} " \
               f"(shape {old_info.shape} -> {new_info.shape}, {len(old_info.classes)} -> " \
               f"{len(new_info.classes)} classes; the older version recorded no Arrow schema)"
    return breaking_change(old, new)


def _value_rules(doc: Any) -> dict[str, dict[str, Any]]:
    """Each field's and the target's value rules in a recorded configuration document
    (``config_to_dict`` of the dataset, or of the whole config): what ("field 'x'",
    "target 'label'") -> its declaration. Empty for the shorthand, or a document without
    them (a version written before the document existed)."""
    ds = doc.get("dataset", doc) if isinstance(doc, dict) else {}
    out: dict[str, dict[str, Any]] = {}
    for name, spec in (ds.get("fields") or {}).items():
        if isinstance(spec, dict):
            out[f"field {name!r}"] = spec
    t = ds.get("target")
    if isinstance(t, dict):
        out[f"target {t.get('name') or 'label'!r}"] = t
    return out


def narrowed_rule(old_config: Any, new_config: Any) -> str | None:
    """The first value rule ``new_config`` tightens against ``old_config`` (configuration
    documents; None: every rule is the same or wider). Rows already published were checked
    against the old rules only, so a tighter one would hold rows that break it: a ``min``
    raised or newly set, a ``max`` lowered or newly set, ``allow_nan`` turned off."""
    new = _value_rules(new_config)
    for what, o in _value_rules(old_config).items():
        n = new.get(what)
        if n is None:
            continue                   # removed: breaking_change names it
        for bound, tighter, beyond in (("min", float.__gt__, "below"),
                                       ("max", float.__lt__, "above")):
            was, now = o.get(bound), n.get(bound)
            if now is None or (was is not None and not tighter(float(now), float(was))):
                continue
            back = f"remove {bound} again" if was is None else f"set {bound} = {was} back"
            return (f"{what} {bound} narrowed {'unset' if was is None else was} -> {now} "
                    f"(rows already published may be {beyond} {now}); bounds may only be "
                    f"widened: {back}")
        if o.get("allow_nan") and not n.get("allow_nan"):
            return (f"{what} allow_nan true -> false (rows already published may hold NaN); "
                    "set allow_nan = true back")
    return None


def rules_change(latest: Any, config: dict[str, Any]) -> str | None:
    """A value rule (``min``/``max``/``allow_nan``) that ``config`` (a configuration
    document) tightens against the one ``latest`` (a version) recorded
    (:func:`narrowed_rule`); the recorded document is read only when it differs."""
    ref = getattr(getattr(latest, "doc", None), "config", None)
    if ref is not None and ref.sha256 == digest(encode(config)):
        return None                 # the very document the version recorded
    return narrowed_rule(latest.config, config)


def refusal(dataset: str, version: int, change: str) -> str:
    """The one-line message for a refused change."""
    return (f"dataset {dataset}: the configuration changes the schema of version {version} "
            f"in a way older rows cannot follow: {change}. Revert that change, or ingest "
            "into a new dataset name ([dataset] name) for the new schema")
