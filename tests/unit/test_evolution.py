"""Schema evolution: additive changes pass, every other change is refused before any work
with one line naming it, as a SchemaChange (a ConfigError: never retried). Value rules
(min/max/allow_nan) are compared with the configuration document the version recorded."""

from __future__ import annotations

import copy

import pytest

from shardline.core.builder import NewBatch, build_version, commit_version
from shardline.core.config import config_to_dict, parse_config
from shardline.core.errors import ConfigError, SchemaChange, is_transient
from shardline.core.folder_store import FolderStore
from shardline.core.manifest import latest_manifest
from shardline.core.parts import ValidationSummary
from shardline.core.schema import data_schema, fingerprint, schema_conflict, schema_info

BASE = {"dataset": {"name": "s2", "incoming": "i/", "classes": ["a", "b"], "fields": {
    "bands": {"kind": "tensor", "dtype": "float32", "shape": [13, 8, 8], "max": 1.0},
    "biome": {"kind": "scalar", "dtype": "string", "vocabulary": ["x", "y"]},
    "elev": {"kind": "scalar", "dtype": "float32", "min": -10.0, "allow_nan": True}},
    "target": {"kind": "class"}}}
REGRESSION = {"dataset": {"name": "r", "incoming": "i/", "fields": {
    "x": {"kind": "tensor", "dtype": "float32", "shape": [3]}},
    "target": {"kind": "regression", "min": 0.0, "max": 100.0, "allow_nan": True}}}
LEGACY = {"dataset": {"name": "d", "incoming": "i/", "classes": ["0", "1"],
                      "image": {"shape": [8, 8, 1]}}}


class _Latest:
    def __init__(self, doc):
        cfg = parse_config(doc).dataset
        self.schema = schema_info(cfg)
        self.config = config_to_dict(cfg)      # the configuration document it recorded
        self.version = 3


def _patched(doc, path, value):
    out = copy.deepcopy(doc)
    d = out["dataset"]
    for k in path[:-1]:
        d = d[k]
    if value is ...:
        del d[path[-1]]
    else:
        d[path[-1]] = value
    return parse_config(out).dataset


@pytest.mark.parametrize("doc,path,value", [
    (BASE, ["classes"], ["a", "b", "c"]),
    (BASE, ["fields", "bands", "max"], 5.0),
    (BASE, ["fields", "elev", "min"], -20.0),
    (BASE, ["fields", "elev", "min"], ...),
    (BASE, ["fields", "bands", "allow_nan"], True),
    (REGRESSION, ["target", "max"], 200.0),
    (REGRESSION, ["target", "min"], ...),
    (BASE, ["fields", "alt"], {"kind": "scalar", "dtype": "float32", "optional": True,
                               "min": 0.0}),
    (BASE, ["fields", "biome", "vocabulary"], ["x", "y", "z"]),
    (LEGACY, ["classes"], ["0", "1", "2"]),
])
def test_additive_changes_pass(doc, path, value):
    schema_conflict(_patched(doc, path, value), _Latest(doc))


@pytest.mark.parametrize("doc,path,value,words", [
    (BASE, ["classes"], ["b", "a"], "reordered"),
    (BASE, ["classes"], ["a"], "['b'] removed"),
    (BASE, ["fields", "bands", "dtype"], "float64", "'bands' type"),
    (BASE, ["fields", "bands", "shape"], [13, 16, 16], "'bands' type"),
    (BASE, ["fields", "bands"], ..., "'bands' removed"),
    (BASE, ["fields", "alt"], {"kind": "scalar", "dtype": "float32"}, "optional = true"),
    (BASE, ["fields", "bands", "max"], 0.5, "field 'bands' max narrowed 1.0 -> 0.5"),
    (BASE, ["fields", "bands", "min"], 0.0, "field 'bands' min narrowed unset -> 0.0"),
    (BASE, ["fields", "elev", "min"], -5.0, "field 'elev' min narrowed -10.0 -> -5.0"),
    (BASE, ["fields", "elev", "allow_nan"], False, "field 'elev' allow_nan true -> false"),
    (REGRESSION, ["target", "max"], 99.5, "target 'label' max narrowed 100.0 -> 99.5"),
    (REGRESSION, ["target", "allow_nan"], False, "target 'label' allow_nan true -> false"),
    (BASE, ["fields", "biome", "vocabulary"], ["y", "x"], "vocabulary"),
    (BASE, ["target"], {"kind": "multilabel"}, "'label' type"),
    (LEGACY, ["image"], {"shape": [16, 16, 1]}, "image shape"),
])
def test_other_changes_are_refused_naming_change_and_fix(doc, path, value, words):
    with pytest.raises(SchemaChange) as e:
        schema_conflict(_patched(doc, path, value), _Latest(doc))
    msg = str(e.value)
    assert words in msg and "new dataset name" in msg and "version 3" in msg
    assert "\n" not in msg
    assert isinstance(e.value, ConfigError) and not is_transient(e.value)
    if "narrowed" in words:
        assert "bounds may only be widened" in msg
    if "allow_nan" in words:
        assert "set allow_nan = true back" in msg


def test_publish_refuses_a_narrowed_rule_against_the_recorded_config(tmp_path):
    """The builder checks again (a racing ingest with an older config, or a caller that
    skipped convert): against the configuration document version 1 recorded, though a
    narrowed bound leaves the schema fingerprint as it was."""
    store = FolderStore(tmp_path)
    base = parse_config(BASE).dataset

    def build(cfg, parent):
        return build_version(cfg.prefix, dataset=cfg.name, schema=schema_info(cfg),
                             config=config_to_dict(cfg), parent=parent,
                             batch=NewBatch(id=f"b{parent is not None:d}", run="r", shards=[],
                                            ids_path="ids"),
                             validation=ValidationSummary(success=True))

    commit_version(store, build(base, None))
    v1 = latest_manifest(store, base.prefix)
    assert v1 is not None and v1.version == 1
    narrowed = _patched(BASE, ["fields", "bands", "max"], 0.9)
    assert fingerprint(data_schema(narrowed)) == fingerprint(data_schema(base))
    with pytest.raises(SchemaChange, match="field 'bands' max narrowed 1.0 -> 0.9"):
        build(narrowed, v1)
    build(_patched(BASE, ["fields", "bands", "max"], 2.0), v1)     # widened: additive
    build(base, v1)                                                # unchanged
