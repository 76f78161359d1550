"""Which code builds the model, and the record of it that goes into the registry.

``[train] model`` is a built-in name (``cnn``, ``resnet``, ``mlp``: factories in
``trainer.model``) or the import path of a user's factory, ``package.module:function``,
called as ``factory(info: DatasetInfo, **model_args) -> nn.Module``. ``[train] step`` and
``score`` name optional hooks the same way (see :class:`Hooks`).

Code is imported only from the configuration a person deployed (the run's ``Config``, or
the arguments of ``shardline.load_model``), never from a name read in the registry or the
lake: a model's ``meta.json`` records what built it (:func:`build_record`: factory, args,
the providing package and its version, a SHA-256 of the factory's module source), and that
record is only *compared* (:func:`differences`), never imported.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.metadata
import inspect
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from torch import nn

from shardline.core.config import TrainConfig
from shardline.core.config_model import IMPORT_PATH, MODEL_NAMES
from shardline.core.errors import ConfigError
from shardline.core.fields import DatasetInfo

BUILTIN = "shardline.trainer.model"
# What decides the parameters: compared before a warm start (one line names the differences)
BUILD_KEYS = ("factory", "args", "fields", "target")


def factory_path(model: str) -> str:
    """The import path of ``[train] model`` (a built-in's short name is an alias)."""
    return f"{BUILTIN}:{model}" if model in MODEL_NAMES else model


def resolve(path: str, what: str = "model factory") -> Callable[..., Any]:
    """The callable at ``package.module:function`` (imported now).

    Raises:
        ConfigError: not such a path, the module cannot be imported, or no such callable."""
    if not IMPORT_PATH.fullmatch(path):
        raise ConfigError(f"[train] {what} {path!r} is not an import path; write "
                          "package.module:function")
    module, _, name = path.partition(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"[train] {what} {path!r}: module {module!r} cannot be imported "
                          f"({exc}); install the package that provides it beside shardline "
                          "(or put it on PYTHONPATH)") from exc
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise ConfigError(f"[train] {what} {path!r}: {module} has no callable {name!r}")
    return fn


def _package(module: str) -> tuple[str, str | None]:
    """(distribution or top-level package, its version or None)."""
    top = module.split(".")[0]
    dists = importlib.metadata.packages_distributions().get(top) or [top]
    try:
        return dists[0], importlib.metadata.version(dists[0])
    except importlib.metadata.PackageNotFoundError:
        mod = importlib.import_module(top)
        version = getattr(mod, "__version__", None)
        return top, str(version) if version is not None else None


def source_hash(fn: Callable[..., Any]) -> str | None:
    """SHA-256 of the source of the module that defines ``fn`` (None if unreadable)."""
    try:
        src = inspect.getsource(inspect.getmodule(fn))  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None
    return hashlib.sha256(src.encode()).hexdigest()


def _args(train: TrainConfig) -> dict[str, Any]:
    """The factory's keyword arguments: the built-ins read ``width``/``depth`` from
    ``[train]`` as before (``cnn``, ``resnet``); ``model_args`` adds to or overrides them."""
    base = {"width": train.width, "depth": train.depth} \
        if train.model in ("cnn", "resnet") else {}
    return json.loads(json.dumps({**base, **train.model_args}, sort_keys=True))


def model_inputs(info: DatasetInfo) -> DatasetInfo:
    """The fields a model is given: every field the loader serves (a free-text string
    scalar, one without a vocabulary, is stored but not served)."""
    keep = tuple(f for f in info.fields if f.dtype != "string" or f.vocabulary)
    return dataclasses.replace(info, fields=keep)


def info_record(info: DatasetInfo) -> dict[str, Any]:
    """DatasetInfo as JSON (statistics included): what ``load_model`` rebuilds it from."""
    return json.loads(json.dumps(asdict(info)))


def build_record(train: TrainConfig, info: DatasetInfo) -> dict[str, Any]:
    """What builds this run's model: factory path, args, package, version, source hash, and
    the fields (without statistics: they move with every version) and target it is for."""
    path = factory_path(train.model)
    fn = resolve(path)
    module = path.partition(":")[0]
    package, version = _package(module)
    rec = info_record(info)
    fields = [{k: f[k] for k in ("name", "kind", "dtype", "shape", "vocabulary")}
              for f in rec["fields"]]
    return {"factory": path, "args": _args(train), "package": package, "version": version,
            "source_sha256": source_hash(fn), "fields": fields, "target": rec["target"]}


def build(train: TrainConfig, info: DatasetInfo) -> nn.Module:
    """A fresh network from the configured factory (not yet wrapped for preprocessing).

    Raises:
        ConfigError: the factory cannot be imported, refuses the args, or returns no Module."""
    return build_with(resolve(factory_path(train.model)), factory_path(train.model),
                      _args(train), info)


def build_with(fn: Callable[..., Any], path: str, args: dict[str, Any],
               info: DatasetInfo) -> nn.Module:
    try:
        net = fn(info, **args)
    except TypeError as exc:
        raise ConfigError(f"[train] model {path!r} refused its arguments {args} ({exc}); fix "
                          "[train.model_args]") from exc
    if not isinstance(net, nn.Module):
        raise ConfigError(f"[train] model {path!r} returned {type(net).__name__}, not a "
                          "torch.nn.Module")
    return net


def differences(parent: Any, ours: dict[str, Any]) -> list[str]:
    """What differs between a parent's recorded build and this run's, as ``name: old ->
    new`` items (args item by item); empty when the parent may be warm-started from. A
    record that is not an object (a model saved before records existed) differs in
    ``factory``."""
    if not isinstance(parent, dict):
        return [f"factory: (not recorded) -> {ours['factory']}"]
    out = []
    for key in BUILD_KEYS:
        old, new = parent.get(key), ours.get(key)
        if key == "target":     # appended classes are class growth, not another build
            old, new = _target_kind(old), _target_kind(new)
        if key == "args" and isinstance(old, dict) and isinstance(new, dict):
            out += [f"args.{k}: {old.get(k)!r} -> {new.get(k)!r}"
                    for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        elif old != new:
            out.append(f"{key}: {_short(old)} -> {_short(new)}")
    return out


def _target_kind(t: Any) -> Any:
    """What of a target record decides the build: name and kind, and the shape of a
    regression target (a class list may grow: the head is widened, ``trainer.parent``)."""
    if not isinstance(t, dict):
        return t
    keep = ("name", "kind", "shape") if t.get("kind") == "regression" else ("name", "kind")
    return {k: t.get(k) for k in keep}


def _short(v: Any) -> str:
    text = json.dumps(v, sort_keys=True, default=str) if not isinstance(v, str) else v
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class Hooks:
    """Optional user code for what the built-in objectives do not cover.

    ``step(model, batch) -> loss`` or ``(loss, metrics)``: the training loss of a batch (a
    dict on the device: the fields, the target, ``key``); ``model`` takes raw fields.
    ``metrics`` may hold ``"score"``, a batch mean shown on the training curve.
    ``score(model, batch) -> Tensor[B]``: one score per held-out row, higher is better; it
    replaces the target kind's row score in evaluation and in the gate."""

    step: Callable[..., Any] | None = None
    score: Callable[..., Any] | None = None


def hooks(train: TrainConfig) -> Hooks:
    return Hooks(resolve(train.step, "step hook") if train.step else None,
                 resolve(train.score, "score hook") if train.score else None)
