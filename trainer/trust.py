"""Trust boundaries: what the trainer reads from the lake and the registry is checked
before it is used.

Anyone with write access to the bucket can change a manifest, ``promoted.json`` or a
model's ``meta.json``. The trainer therefore never lets such a field steer a local path, a
numeric conversion, an optimizer or an allocation unchecked:

* manifest shard entries (:func:`check_entries`): ``sha256`` is 64 and ``xxh3_128`` 32
  lowercase hex digits (the cache names files after the sha256), ``path`` is a plain key
  under the dataset's prefix (no ``..``, no empty segment, no backslash, no control
  character), ``rows`` and ``bytes`` are non-negative integers;
* model numbers (:func:`model_number`): positive integers (not floats, strings, booleans);
* optimizer state (:func:`check_param_groups`): only AdamW's known fields, and the ones
  that change what a step does (``maximize``, ``amsgrad``, ``differentiable``,
  ``decoupled_weight_decay``) must equal this run's; every hyper-parameter is then taken
  from this run's optimizer;
* architecture (``trainer.model.arch_problem``): bounded width, depth, classes and image
  size.

Every rejection is an :class:`UntrustedInput` naming the object, the field, the value and
what to do.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow.compute as pc

from shardline.core.errors import ShardlineError
from shardline.core.shard_table import ShardColumns

_HEX = {"sha256": re.compile(r"[0-9a-f]{64}"), "xxh3_128": re.compile(r"[0-9a-f]{32}")}
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")

# AdamW's param-group fields (torch 2.x). Those in _SAME change what a step does: a stored
# value different from this run's is refused (maximize=True turns descent into ascent).
OPTIMIZER_FIELDS = frozenset({"params", "lr", "betas", "eps", "weight_decay", "amsgrad",
                              "maximize", "foreach", "capturable", "differentiable", "fused",
                              "decoupled_weight_decay"})
_SAME = ("maximize", "amsgrad", "differentiable", "decoupled_weight_decay")
OPTIMIZER_STATE_NAMES = frozenset({"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"})


class UntrustedInput(ShardlineError):
    """A stored object (manifest, registry file) breaks the rules the trainer relies on."""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_digest(value: Any, field: str, where: str) -> str:
    """``value`` if it is a lowercase hex digest of ``field``'s length, else raise."""
    if not isinstance(value, str) or not _HEX[field].fullmatch(value):
        raise UntrustedInput(
            f"{where}: field {field} = {_short(value)} is not {_HEX[field].pattern} (lowercase "
            f"hex of the right length); the file was changed outside shardline: re-publish "
            "the dataset version (or restore the manifest from a copy)")
    return value


def check_key(key: Any, prefix: str, where: str) -> str:
    """``key`` if it is a plain object key under ``prefix/``, else raise."""
    ok = (isinstance(key, str) and key.startswith(prefix.rstrip("/") + "/")
          and not _CONTROL.search(key)
          and all(part not in ("", ".", "..") for part in key.split("/")))
    if not ok:
        raise UntrustedInput(
            f"{where}: field path = {_short(key)} is not a key under the dataset's prefix "
            f"{prefix}/ (no '..', empty segment, backslash or control character allowed); the "
            "manifest was changed outside shardline: re-publish the dataset version")
    return str(key)


def _count(value: Any, field: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UntrustedInput(f"{where}: field {field} = {_short(value)} is not a non-negative "
                             "integer; re-publish the dataset version")
    return value


def check_entries(entries: list[Any], prefix: str, manifest: str) -> None:
    """Every shard entry of a manifest (see the module docstring for the rules).

    Raises:
        UntrustedInput: naming the manifest, the shard, the field and its value.
    """
    for i, e in enumerate(entries):
        _check_entry(i, e, prefix, manifest)


def _check_entry(i: int, e: Any, prefix: str, manifest: str) -> None:
    where = f"manifest {manifest}, shard entry {i}"
    check_key(e.path, prefix, where)
    where = f"manifest {manifest}, shard {e.path}"
    check_digest(e.sha256, "sha256", where)
    if e.xxh3_128 is not None:
        check_digest(e.xxh3_128, "xxh3_128", where)
    _count(e.rows, "rows", where)
    _count(e.bytes, "bytes", where)


def check_shard_columns(cols: ShardColumns, prefix: str, manifest: str) -> None:
    """:func:`check_entries` over a version's shard columns, vectorised (100k shards in
    tens of milliseconds, no entry built); the first breaking shard is then checked one by
    one, so the error is the same as :func:`check_entries`'s."""
    t = cols.arrow()
    if not t.num_rows:
        return
    path, sha, xxh = t.column("path"), t.column("sha256"), t.column("xxh3_128")
    bad = pc.or_kleene(pc.invert(pc.starts_with(path, prefix.rstrip("/") + "/")),
                       pc.match_substring_regex(path, r"[\x00-\x1f\x7f\\]|(^|/)\.{0,2}(/|$)"))
    bad = pc.or_kleene(bad, pc.invert(pc.match_substring_regex(sha, "^[0-9a-f]{64}$")))
    bad = pc.or_kleene(bad, pc.invert(pc.fill_null(
        pc.match_substring_regex(xxh, "^[0-9a-f]{32}$"), True)))
    for col in ("rows", "bytes"):
        bad = pc.or_kleene(bad, pc.less(t.column(col), 0))
    flags = pc.fill_null(bad, True).to_numpy(zero_copy_only=False)
    if flags.any():
        i = int(np.flatnonzero(flags)[0])
        _check_entry(i, cols.entry(i), prefix, manifest)
        raise UntrustedInput(f"manifest {manifest}, shard entry {i}: breaks the shard rules "
                             "(see shardline.trainer.trust); re-publish the dataset version")


def model_number(value: Any, where: str) -> int:
    """A model number read from a registry file: a positive integer, nothing else."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UntrustedInput(
            f"{where}: model number {_short(value)} is not a positive integer; fix the file "
            "(or delete promoted.json to train from scratch)")
    return value


def check_param_groups(groups: Any, current: list[dict[str, Any]], where: str
                       ) -> list[dict[str, Any]]:
    """Stored param groups checked against this run's optimizer; returns new groups that
    keep only the stored ``params`` layout and take every hyper-parameter from ``current``.

    Raises:
        UntrustedInput: not a list of dicts, an unknown field, or a field of :data:`_SAME`
            that differs from this run's value.
    """
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise UntrustedInput(f"optimizer state at {where}: param_groups is {_short(groups)}, "
                             "not a list of objects; delete the state to start AdamW fresh")
    out = []
    for old, new in zip(groups, current, strict=False):
        unknown = sorted(set(old) - OPTIMIZER_FIELDS)
        if unknown:
            raise UntrustedInput(
                f"optimizer state at {where}: unknown param-group field(s) {unknown[:5]}; "
                f"known: {sorted(OPTIMIZER_FIELDS)}; the state was not written by shardline")
        for name in _SAME:
            if name in old and old[name] != new.get(name):
                raise UntrustedInput(
                    f"optimizer state at {where}: {name} = {_short(old[name])}, this run's "
                    f"AdamW uses {name} = {new.get(name)!r}; the state was not written by "
                    "shardline: restore meta.json or train from scratch")
        params = old.get("params")
        if not isinstance(params, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) for p in params):
            raise UntrustedInput(f"optimizer state at {where}: params = {_short(params)} is "
                                 "not a list of integers")
        out.append({**new, "params": params})
    return out
