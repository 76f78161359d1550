"""A saved model back as a module: the network its factory builds, behind the dataset's
preprocessing (``trainer.preprocess.Preprocessed``), with the registry's weights.

The registry is untrusted input (``trainer.trust``): the factory a ``meta.json`` names is
imported only if the caller trusts it: a built-in, or a path the caller passes (from the
configuration a person deployed). The recorded fields and target are checked field by field
before anything is built; a factory whose source changed since training is still used (the
weights must fit) and said so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from shardline.core.errors import ConfigError
from shardline.core.fields import DatasetInfo, FieldInfo, FieldStats, TargetInfo
from shardline.trainer.checkpoint import load_model_tensors
from shardline.trainer.factory import BUILTIN, build_with, resolve, source_hash
from shardline.trainer.model import MODELS
from shardline.trainer.preprocess import Preprocessed
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.trust import UntrustedInput

log = logging.getLogger(__name__)
BUILTINS = frozenset(f"{BUILTIN}:{m}" for m in MODELS)
_KINDS = {"image", "tensor", "scalar"}
_TARGETS = {"class", "multilabel", "regression", "mask"}


def _ints(v: Any) -> tuple[int, ...] | None:
    ok = isinstance(v, list) and len(v) <= 8 and all(
        isinstance(x, int) and not isinstance(x, bool) and 0 < x <= 1_000_000 for x in v)
    return tuple(v) if ok else None


def _strs(v: Any) -> tuple[str, ...] | None:
    ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
    return tuple(v) if ok else None


def _floats(v: Any) -> tuple[float, ...] | None:
    ok = isinstance(v, list) and all(isinstance(x, int | float) and not isinstance(x, bool)
                                     for x in v)
    return tuple(float(x) for x in v) if ok else None


def info_from_record(rec: Any, where: str) -> DatasetInfo:
    """The ``inputs`` record of a meta.json (``factory.info_record``) as a DatasetInfo.

    Raises:
        UntrustedInput: a field of the record is missing or of the wrong type."""
    def bad(what: str) -> UntrustedInput:
        return UntrustedInput(f"{where}: inputs {what} is not as shardline writes it; "
                              "restore meta.json or load another model number")

    if not isinstance(rec, dict) or not isinstance(rec.get("fields"), list):
        raise bad("record")
    fields = []
    for f in rec["fields"]:
        if not isinstance(f, dict) or f.get("kind") not in _KINDS or not isinstance(
                f.get("name"), str) or not isinstance(f.get("dtype"), str):
            raise bad(f"field {str(f)[:60]}")
        shape, vocab = _ints(f.get("shape")), _strs(f.get("vocabulary", []))
        if shape is None or vocab is None:
            raise bad(f"field {f['name']!r} shape/vocabulary")
        stats = None
        if isinstance(f.get("stats"), dict):
            s = {k: _floats(f["stats"].get(k, [])) for k in ("mean", "std", "min", "max")}
            if any(v is None for v in s.values()):
                raise bad(f"field {f['name']!r} stats")
            stats = FieldStats(**s)  # type: ignore[arg-type]
        fields.append(FieldInfo(f["name"], f["kind"], f["dtype"], shape, stats, vocab))
    t = rec.get("target")
    if not isinstance(t, dict) or t.get("kind") not in _TARGETS or not isinstance(
            t.get("name"), str):
        raise bad("target")
    classes, shape = _strs(t.get("classes", [])), _ints(t.get("shape", []))
    if classes is None or shape is None:
        raise bad("target classes/shape")
    target = TargetInfo(t["name"], t["kind"], classes, shape, str(t.get("dtype", "int16")))
    return DatasetInfo(tuple(fields), target)


def rebuild(registry: ModelRegistry, number: int, trusted: Iterable[str] = ()
            ) -> Preprocessed:
    """Model ``number`` of ``registry`` as a :class:`Preprocessed` module in eval mode.

    ``trusted``: factory paths the caller vouches for (besides the built-ins).

    Raises:
        UntrustedInput: meta.json's build or inputs record is malformed, or names a factory
            the caller does not trust (the message says how to trust it).
        ConfigError: the factory cannot be imported or refuses the args.
    """
    meta = registry.meta(number)
    where = f"{registry.uri(number)}meta.json"
    build = meta.get("build")
    path = build.get("factory") if isinstance(build, dict) else None
    args = build.get("args") if isinstance(build, dict) else None
    if not isinstance(path, str) or not isinstance(args, dict):
        raise UntrustedInput(f"{where}: no build record (factory, args): model {number} was "
                             "saved before models recorded what built them; load a newer one")
    if path not in BUILTINS and path not in set(trusted):
        raise UntrustedInput(
            f"{where}: model {number} was built by {path!r}; shardline never imports code "
            f"named in the registry: pass factory={path!r} (or the dataset's config) to "
            "load it with that code")
    info = info_from_record(meta.get("inputs"), where)
    fn = resolve(path)
    try:
        net = build_with(fn, path, args, info)
    except ConfigError as exc:
        raise UntrustedInput(f"{where}: model {number}'s args are refused: {exc}") from exc
    recorded, now = build.get("source_sha256"), source_hash(fn)  # type: ignore[union-attr]
    if recorded and now and recorded != now:
        log.warning("model %d: the source of %s changed since it was trained (sha256 %s.. "
                    "then, %s.. now); loading its weights into today's code", number, path,
                    str(recorded)[:12], now[:12])
    model = Preprocessed(net, info)
    load_model_tensors(model, registry.weights(number), registry.uri(number))
    model.eval()
    return model
