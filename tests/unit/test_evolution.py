"""Schema evolution: additive changes pass, every other change is refused before any work
with one line naming it, as a SchemaChange (a ConfigError: never retried)."""

from __future__ import annotations

import copy

import pytest

from shardline.core.config import parse_config
from shardline.core.errors import ConfigError, SchemaChange, is_transient
from shardline.core.schema import schema_conflict, schema_info

BASE = {"dataset": {"name": "s2", "incoming": "i/", "classes": ["a", "b"], "fields": {
    "bands": {"kind": "tensor", "dtype": "float32", "shape": [13, 8, 8], "max": 1.0},
    "biome": {"kind": "scalar", "dtype": "string", "vocabulary": ["x", "y"]}},
    "target": {"kind": "class"}}}
LEGACY = {"dataset": {"name": "d", "incoming": "i/", "classes": ["0", "1"],
                      "image": {"shape": [8, 8, 1]}}}


class _Latest:
    def __init__(self, doc):
        self.schema = schema_info(parse_config(doc).dataset)
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
    (BASE, ["fields", "elev"], {"kind": "scalar", "dtype": "float32", "optional": True}),
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
    (BASE, ["fields", "elev"], {"kind": "scalar", "dtype": "float32"}, "optional = true"),
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
