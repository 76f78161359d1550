"""Trust boundaries of the trainer (issue 11, #4 and #5) on a real S3 API (moto server) and
real torch: a tampered manifest cannot steer the shard cache outside its folder, and
tampered registry files (weights, promoted.json, meta.json's optimizer state and arch) end
in an ``UntrustedInput`` naming the object and the fix, never in a bare traceback, a
gradient ascent or an unbounded allocation. CPU only."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardline.core import layout
from shardline.core.builder import batch_list_ref, commit_version
from shardline.core.config import Config
from shardline.core.manifest import Manifest
from shardline.core.replace import replacement
from shardline.core.store import ObjectStore
from shardline.trainer.cache import ShardCache
from shardline.trainer.options import RunOptions
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.run import train
from shardline.trainer.trust import UntrustedInput
from tests.integration.trainer_data import digits_config, publish_version

ORDER = np.random.default_rng(5).permutation(1797)
FAST = RunOptions(log_every=50, checkpoint_every=1000, eval_each_epoch=False)


def config(tmp_path: Path) -> Config:
    return digits_config(cache_dir=str(tmp_path / "cache"), width=8, epochs=1, batch_size=64)


def tampered_version(store: ObjectStore, prefix: str, m: Manifest, **change: Any) -> int:
    """Commit the next version number as a copy of ``m`` whose first shard entry has
    ``change`` applied (what someone with write access to the lake could do)."""
    objects: dict[str, bytes] = {}
    refs = []
    for i, (ref, bl) in enumerate(zip(m.batch_lists, m.read_lists(m.batch_lists), strict=True)):
        if i == 0:
            bl = dataclasses.replace(bl, run="tamper", shards=[
                dataclasses.replace(bl.shards[0], **change), *bl.shards[1:]])
        refs.append(dataclasses.replace(batch_list_ref(prefix, objects, ref.version, bl),
                                        sources=ref.sources))
    draft = replacement(prefix, m.doc, refs, objects, "tamper", m.validation)
    return commit_version(store, draft).version


@pytest.mark.parametrize(("field", "value"), [
    ("sha256", "../../outside"), ("sha256", "A" * 64), ("xxh3_128", "/etc/passwd"),
    ("path", "lake/digits/../../elsewhere/x.arrow"), ("path", "lake/other/x.arrow"),
])
def test_a_tampered_manifest_entry_is_refused_before_any_file_is_touched(
        store: ObjectStore, tmp_path: Path, field: str, value: str) -> None:
    cfg = config(tmp_path)
    assert cfg.dataset.prefix == "lake/digits"
    m = publish_version(store, cfg.dataset, ORDER[:300])
    version = tampered_version(store, cfg.dataset.prefix, m, **{field: value})
    outside = tmp_path / "outside.arrow"
    outside.write_bytes(b"not yours")
    with pytest.raises(UntrustedInput) as err:
        train(cfg, store, version, options=FAST)
    text = str(err.value)
    assert store.uri(layout.version_key(cfg.dataset.prefix, version)) in text   # the manifest
    assert field in text and value[:40] in text and "re-publish" in text       # field, value, fix
    assert outside.read_bytes() == b"not yours"
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []


def test_the_cache_never_builds_a_path_from_an_unchecked_digest(
        store: ObjectStore, tmp_path: Path) -> None:
    m = publish_version(store, config(tmp_path).dataset, ORDER[:300])
    cache = ShardCache(tmp_path / "cache", 1 << 30, store)
    for bad in ("../x", "0" * 63, "g" * 64, "0" * 64 + "/.."):
        with pytest.raises(UntrustedInput, match="sha256"):
            cache.ensure(dataclasses.replace(m.shards[0], sha256=bad))


def test_a_mismatching_cached_link_is_removed_inside_the_cache_only(
        store: ObjectStore, tmp_path: Path) -> None:
    m = publish_version(store, config(tmp_path).dataset, ORDER[:300])
    entry = m.shards[0]
    root = tmp_path / "cache"
    root.mkdir()
    target = tmp_path / "precious.bin"
    target.write_bytes(b"x" * entry.bytes)            # right size, wrong bytes
    os.symlink(target, root / f"{entry.sha256}.arrow")
    path = ShardCache(root, 1 << 30, store).ensure(entry)
    assert path.parent == root and not path.is_symlink()
    assert target.read_bytes() == b"x" * entry.bytes     # what the link pointed to survives


@pytest.fixture()
def first_model(store: ObjectStore, tmp_path: Path) -> tuple[Config, ModelRegistry]:
    """A promoted model 1 on v1, and a v2 to continue on."""
    cfg = config(tmp_path)
    publish_version(store, cfg.dataset, ORDER[:600])
    assert train(cfg, store, options=FAST).promoted
    publish_version(store, cfg.dataset, ORDER[600:900])
    return cfg, ModelRegistry(store, "digits", "cnn")


def _edit_meta(reg: ModelRegistry, edit: Any) -> None:
    meta = reg.meta(1)
    edit(meta)
    reg.store.put_bytes(reg.key(1, "meta.json"), json.dumps(meta).encode())


def test_a_weights_file_that_is_not_safetensors_names_the_model(
        store: ObjectStore, first_model: tuple[Config, ModelRegistry]) -> None:
    cfg, reg = first_model
    store.put_bytes(reg.key(1, "weights.safetensors"), b'{"pickle": "or anything else"}')
    with pytest.raises(UntrustedInput) as err:
        train(cfg, store, options=FAST)
    text = str(err.value)
    assert "model 1 of digits/cnn" in text and "weights.safetensors" in text
    assert "not a safetensors file" in text and "promoted.json" in text


@pytest.mark.parametrize("value", ["1", 1.5, True, -3, "../000001", None])
def test_a_promoted_pointer_without_an_integer_model_number_is_refused(
        store: ObjectStore, first_model: tuple[Config, ModelRegistry], value: Any) -> None:
    cfg, reg = first_model
    store.put_bytes(reg.pointer_key, json.dumps({"version": value}).encode())
    with pytest.raises(UntrustedInput, match="is not a positive integer") as err:
        train(cfg, store, options=FAST)
    assert "promoted.json" in str(err.value) and repr(value) in str(err.value)


@pytest.mark.parametrize(("field", "value", "says"), [
    ("maximize", True, "maximize = True"), ("amsgrad", True, "amsgrad = True"),
    ("sneaky", 1, "unknown param-group field"),
])
def test_optimizer_state_with_unknown_or_step_changing_fields_is_refused(
        store: ObjectStore, first_model: tuple[Config, ModelRegistry], field: str, value: Any,
        says: str) -> None:
    cfg, reg = first_model
    _edit_meta(reg, lambda meta: meta["optimizer_state"]["param_groups"][0].update(
        {field: value}))
    with pytest.raises(UntrustedInput, match=says) as err:
        train(cfg, store, options=FAST)
    assert reg.uri(1) in str(err.value)
    assert reg.numbers() == [1]                       # no candidate trained on it


def test_an_arch_beyond_the_limits_is_refused_before_it_is_built(
        store: ObjectStore, first_model: tuple[Config, ModelRegistry]) -> None:
    cfg, reg = first_model
    _edit_meta(reg, lambda meta: meta["build"]["args"].update({"width": 4_000_000}))
    with pytest.raises(UntrustedInput, match="width 4000000") as err:
        train(cfg, store, options=FAST)
    assert "model 1" in str(err.value) and "meta.json" in str(err.value)
