"""A person moves the live pointer: promote a model, roll back to the one live before it,
or pin one (training runs then save candidates but leave the pointer where it is until a
person promotes or rolls back). Each move is the gate's conditional write of
``promoted.json`` (``ModelRegistry.promote``: If-Match on the ETag it was read with), so a
move based on a stale view fails instead of overwriting a newer decision, and each lands in
the pointer's log of moves with who asked for it and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardline.core.errors import ShardlineError, StoreError
from shardline.trainer.promote import history
from shardline.trainer.registry import ModelRegistry, Promoted

ACTIONS = ("promote", "rollback", "pin")


class MoveRefused(ShardlineError):
    """The move names no model that can be made live, or the pointer changed meanwhile."""


@dataclass(frozen=True)
class Moved:
    action: str
    before: int | None
    live: int
    by: str
    reason: str


def rollback_target(promoted: Promoted | None) -> int | None:
    """The model live before the live one (walking back the promotion history), or None."""
    if promoted is None:
        return None
    hist = history(promoted)
    at = max(i for i, n in enumerate(hist) if n == promoted.number)
    return hist[at - 1] if at > 0 else None


def pinned(promoted: Promoted | None) -> dict[str, Any] | None:
    """Who pinned the live model and why (None: not pinned)."""
    pin = promoted.pointer.get("pinned") if promoted is not None else None
    return pin if isinstance(pin, dict) else None


def move(registry: ModelRegistry, action: str, by: str, reason: str = "",
         number: int | None = None) -> Moved:
    """Move the live pointer (``number`` for promote and pin; rollback finds its target).

    Raises:
        MoveRefused: an unknown action, no such complete model, nothing to roll back to, or
            another writer moved the pointer between the read and the write.
    """
    if action not in ACTIONS:
        raise MoveRefused(f"unknown move {action!r}; one of {', '.join(ACTIONS)}")
    where = registry.store.uri(registry.pointer_key)
    promoted = registry.promoted()
    if action == "rollback":
        number = rollback_target(promoted)
        if number is None:
            raise MoveRefused(f"{where}: nothing to roll back to (live model "
                              f"{promoted.number if promoted else 'none'} is the first "
                              "promoted); promote a model number instead")
    if number is None:
        raise MoveRefused(f"{action} needs a model number (see `shardline models`)")
    try:
        meta = registry.meta(number)
    except StoreError as exc:
        raise MoveRefused(f"model {number} of {registry.prefix}: no complete model there "
                          f"({registry.uri(number)}meta.json missing); pick one that "
                          "`shardline models` lists as complete") from exc
    hist = history(promoted)
    why: dict[str, Any] = {
        "accuracy": ((meta.get("metrics") or {}).get("after") or {}).get("accuracy"),
        "dataset_version": meta.get("dataset_version"),
        "history": hist if number in hist else [*hist, number]}
    best = promoted.pointer.get("best") if promoted is not None else None
    if isinstance(best, int) and not isinstance(best, bool) and best in why["history"]:
        why["best"] = best      # the model candidates are held to stays, whoever moves live
    if action == "pin":
        why["pinned"] = {"by": by, "reason": reason}
    try:
        registry.promote(number, promoted, why,
                         move={"action": action, "by": by, "reason": reason})
    except ShardlineError as exc:
        raise MoveRefused(f"{where} changed while moving it ({exc}); look at `shardline "
                          "models` and run the move again") from exc
    return Moved(action, promoted.number if promoted else None, number, by, reason)
