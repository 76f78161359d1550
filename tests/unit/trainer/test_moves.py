"""A person's moves of the live pointer (``trainer.moves``) on the folder store: each keeps
the pointer's ``"best"``, the model later candidates are held to besides the live one."""

from __future__ import annotations

from pathlib import Path

from shardline.core.folder_store import FolderStore
from shardline.trainer.moves import move
from shardline.trainer.promote import best_number
from shardline.trainer.registry import ModelRegistry


def _model(reg: ModelRegistry, accuracy: float) -> int:
    n = reg.claim(f"run-{accuracy}")
    reg.save(n, b"", b"", {"model_version": n, "dataset_version": 1,
                           "metrics": {"after": {"accuracy": accuracy}},
                           "gate": {"passed": True, "reason": "test"}})
    return n


def test_every_move_keeps_the_best_promoted_model(tmp_path: Path) -> None:
    reg = ModelRegistry(FolderStore(tmp_path), "toy", "cnn")
    first, second, third = (_model(reg, a) for a in (0.90, 0.80, 0.85))
    reg.promote(first, None, {"history": [first], "best": first})
    reg.promote(second, reg.promoted(), {"history": [first, second], "best": first})
    # the recorded accuracies would pick the first too: make the pointer's choice visible
    reg.promote(third, reg.promoted(), {"history": [first, second, third], "best": second})
    for action, number in (("rollback", None), ("pin", third), ("promote", first),
                           ("promote", second)):
        move(reg, action, "alice", "test", number)
        pointer = reg.promoted()
        assert pointer is not None and pointer.pointer.get("best") == second, (action, pointer)
        assert best_number(reg, pointer) == second
