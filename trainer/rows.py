"""Per-row held-out outcomes: what lets the gate compare two models on the same rows.

Every evaluation keeps, per held-out row, the row's id hash (the split is a fixed function
of it, so a row keeps its identity across versions, ranks and compactions), its score
(higher is better: 1/0 correct for a class target, negative squared error for regression),
the dataset version that added it and its label (-1 when the target is not a class).

Every saved model stores its rows next to its weights (``rows.safetensors``: 20 bytes a
held-out row, written before meta.json), so a later candidate is compared with an earlier
promoted model on the rows that model was scored on, without rebuilding or re-running it.
The file is read as untrusted input: four 1-D tensors of one length and the right dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from shardline.trainer.checkpoint import CheckpointError, bytes_to_tensors, tensors_to_bytes
from shardline.trainer.registry import ModelRegistry
from shardline.trainer.trust import UntrustedInput

ROWS_FILE = "rows.safetensors"
_DTYPES = {"ids": torch.int64, "scores": torch.float32, "versions": torch.int32,
           "labels": torch.int64}


@dataclass(frozen=True)
class RowScores:
    ids: np.ndarray        # uint64 id hashes
    scores: np.ndarray     # float32, higher is better
    versions: np.ndarray   # int32 dataset version that added the row
    labels: np.ndarray     # int64 class index, -1 without a class target

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def empty(cls) -> RowScores:
        return cls(np.zeros(0, np.uint64), np.zeros(0, np.float32), np.zeros(0, np.int32),
                   np.zeros(0, np.int64))

    @classmethod
    def concat(cls, parts: list[RowScores]) -> RowScores:
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("ids", "scores", "versions", "labels")))

    def where(self, mask: np.ndarray) -> RowScores:
        return RowScores(self.ids[mask], self.scores[mask], self.versions[mask],
                         self.labels[mask])

    def up_to(self, version: int) -> RowScores:
        """Rows added by dataset versions <= ``version`` (the earlier data of a parent
        trained on ``version``)."""
        return self.where(self.versions <= version)

    def mean(self) -> float | None:
        return float(self.scores.mean()) if len(self) else None

    def paired(self, other: RowScores) -> tuple[np.ndarray, np.ndarray]:
        """(my scores, other's scores) on the rows both hold, in one order."""
        _, mine, theirs = np.intersect1d(self.ids, other.ids, return_indices=True)
        return self.scores[mine], other.scores[theirs]

    def to_bytes(self) -> bytes:
        return tensors_to_bytes(rows_tensors(self))

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> RowScores:
        """Raises: UntrustedInput: not four 1-D tensors of one length and dtype each."""
        try:
            t = bytes_to_tensors(data)
        except CheckpointError as exc:
            raise UntrustedInput(f"{where}: {exc}; delete it (the model is then not compared "
                                 "row by row)") from exc
        rows = rows_from_tensors(t, "", where)
        if rows is None or len(t) != len(_DTYPES):
            raise UntrustedInput(f"{where}: holds {sorted(t)[:8]}, not the per-row results "
                                 f"{sorted(_DTYPES)}; delete the file")
        return rows


def rows_tensors(rows: RowScores, prefix: str = "") -> dict[str, torch.Tensor]:
    """``rows`` as named tensors (``prefix`` + ids / scores / versions / labels)."""
    return {f"{prefix}ids": torch.from_numpy(rows.ids.view(np.int64).copy()),
            f"{prefix}scores": torch.from_numpy(rows.scores.astype(np.float32)),
            f"{prefix}versions": torch.from_numpy(rows.versions.astype(np.int32)),
            f"{prefix}labels": torch.from_numpy(rows.labels.astype(np.int64))}


def rows_from_tensors(t: dict[str, torch.Tensor], prefix: str, where: str) -> RowScores | None:
    """The rows :func:`rows_tensors` wrote under ``prefix`` (None when there are none).

    Raises:
        UntrustedInput: they are there but not 1-D tensors of one length and dtype each."""
    if not any(k.startswith(prefix) and k[len(prefix):] in _DTYPES for k in t):
        return None
    got = {k: t.get(prefix + k) for k in _DTYPES}
    bad = [k for k, v in got.items() if v is None or v.dtype != _DTYPES[k] or v.dim() != 1]
    if bad or len({int(v.shape[0]) for v in got.values() if v is not None}) != 1:
        raise UntrustedInput(f"{where}: per-row results {prefix}{sorted(_DTYPES)} must be "
                             f"1-D tensors of one length (wrong: {bad}); delete it")
    g = {k: v.numpy() for k, v in got.items() if v is not None}
    return RowScores(g["ids"].view(np.uint64), g["scores"], g["versions"], g["labels"])


def save_rows(registry: ModelRegistry, number: int, rows: RowScores) -> None:
    registry.store.put_bytes(registry.key(number, ROWS_FILE), rows.to_bytes())


def load_rows(registry: ModelRegistry, number: int) -> RowScores | None:
    """Model ``number``'s stored per-row results; None when it has none (a model saved
    before they were kept).

    Raises:
        UntrustedInput: the file is there but malformed."""
    key = registry.key(number, ROWS_FILE)
    if registry.store.head(key) is None:
        return None
    return RowScores.from_bytes(registry.store.get_bytes(key), registry.store.uri(key))
