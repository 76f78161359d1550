"""Models for notebooks, batch jobs and serving: the registry as rows
(``shardline.list_models``, the CLI; the trainer's own reading,
``shardline.trainer.registry_view``) and a trained model back in two lines::

    model = shardline.load_model("digits")            # the live model
    pred = model.predict(shardline.open_dataset("digits", split="holdout").to_table())
"""

from __future__ import annotations

from typing import Any

from shardline.core.errors import ConfigError
from shardline.trainer.registry_view import model_history, model_rows

__all__ = ["load_model", "model_history", "model_rows"]


def _registry_name(store: Any, dataset: str, model: str | None, cfg: Any) -> str:
    if model:
        return model
    if cfg is not None:
        return str(cfg.train.registry_name)
    names = sorted(p.rstrip("/").rsplit("/", 1)[-1]
                   for p in store.list_prefixes(f"models/{dataset}/"))
    if len(names) == 1:
        return names[0]
    raise ConfigError(f"models/{dataset}/ holds {names or 'no models'}; "
                      + ("train one first" if not names else "pass model=NAME"))


def load_model(dataset: str, *, version: int | None = None, alias: str = "live",
               model: str | None = None, config: Any = None, factory: str | None = None,
               device: str | None = None, **where: Any) -> Any:
    """A trained model of ``dataset``, ready to use: the live one (default), model number
    ``version``, or ``alias`` ``"live"`` (also ``"champion"``) / ``"previous"`` (the one
    live before it).

    The module takes the dataset's raw fields (a dict of tensors or arrays, the one field's
    tensor, or a ``pyarrow.Table`` from ``open_dataset(...).to_table()``) and normalises
    them itself; ``model.predict(batch)`` gives class indices (names: ``model.classes``),
    0/1 label vectors or regression values. ``model.number`` is its model number.

    ``model``: the registry's model name (default: the config's, or the only one there).
    ``config`` (a dataset TOML path or Config) and ``factory`` name the code a model of
    your own is built with: shardline never imports a factory named in the registry.
    ``where``: ``store`` / ``bucket`` / ``endpoint_url`` as for ``open_dataset``.

    Raises:
        ConfigError: no model of that name, or an unknown alias.
        UntrustedInput: the registry names a factory you did not pass, or is malformed.
    """
    from shardline.api.access import store_for
    from shardline.core.config import Config, load_config
    from shardline.resources import needs_extra

    with needs_extra("shardline.load_model", "train"):   # a model is torch
        from shardline.trainer.factory import factory_path
        from shardline.trainer.moves import rollback_target
        from shardline.trainer.registry import ModelRegistry
        from shardline.trainer.reload import rebuild

    cfg = config if isinstance(config, Config) or config is None else load_config(config)
    store = store_for(**where)
    registry = ModelRegistry(store, dataset, _registry_name(store, dataset, model, cfg))
    number = version
    if number is None:
        if alias not in ("live", "champion", "previous"):
            raise ConfigError(f"alias {alias!r}: one of live, champion, previous (or pass "
                              "version=N, a model number)")
        promoted = registry.promoted()
        number = promoted.number if promoted and alias != "previous" else \
            rollback_target(promoted)
        if number is None:
            raise ConfigError(f"{registry.store.uri(registry.pointer_key)}: no {alias} model "
                              "yet; train and promote one first (shardline models)")
    trusted = [p for p in (factory, cfg and factory_path(cfg.train.model)) if p]
    net = rebuild(registry, number, trusted)
    net.number = number  # type: ignore[assignment]
    return net.to(device) if device else net
