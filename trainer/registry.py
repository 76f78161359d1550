"""The model registry in the object store, and the in-progress checkpoints of running jobs.

    models/<dataset>/<model>/<NNNNNN>/claim.json            the number is taken (If-None-Match)
    models/<dataset>/<model>/<NNNNNN>/weights.safetensors
    models/<dataset>/<model>/<NNNNNN>/optimizer.safetensors
    models/<dataset>/<model>/<NNNNNN>/meta.json             written last: the model exists
    models/<dataset>/<model>/promoted.json                  {"version": N, ...}; CAS-updated
    models/<dataset>/<model>/progress/<run key>/step-<NNNNNNNNN>.safetensors
                                                            in-progress state, one per save

``NNNNNN`` is the *model number* (1, 2, ...; never a dataset version). The stored field
names keep their first spelling: ``"version"`` in promoted.json and ``"model_version"`` in
meta.json hold the model number. A model number is claimed before anything is written
under it, so two concurrent runs never write into the same folder. The promoted pointer is
created with ``If-None-Match: *`` and then only replaced with ``If-Match: <ETag it was
read with>``: a promotion based on a stale view of the pointer fails instead of
overwriting a newer decision.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any

from shardline.core.errors import ObjectChanged, ObjectExists, StoreError
from shardline.core.manifest import now_iso
from shardline.core.store import Store

# torch-free: listing models needs no torch (the tensor codecs load when a checkpoint does)
from shardline.trainer.blobs import CheckpointError, header_metadata, json_bytes
from shardline.trainer.trust import UntrustedInput, model_number

_NUM_RE = re.compile(r"/(\d{6})/$")
_STEP_RE = re.compile(r"/step-(\d{9})\.safetensors$")


MOVES_KEPT = 1000


@dataclass(frozen=True)
class Promoted:
    number: int                        # model number the pointer names
    etag: str
    pointer: dict[str, Any]


def history(promoted: Promoted | None) -> list[int]:
    """Model numbers ever promoted, oldest first (a pointer written before the history was
    kept counts its own model only)."""
    if promoted is None:
        return []
    raw = promoted.pointer.get("history")
    past = [n for n in raw if isinstance(n, int) and not isinstance(n, bool) and n > 0] \
        if isinstance(raw, list) else []
    return past if promoted.number in past else [*past, promoted.number]


def moves(promoted: Promoted | None) -> list[dict[str, Any]]:
    """The pointer's log of moves, oldest first (entries that are not objects dropped: the
    log is shown, never acted on)."""
    raw = promoted.pointer.get("moves") if promoted is not None else None
    return [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []


class ModelRegistry:
    def __init__(self, store: Store, dataset: str, model: str) -> None:
        self.store = store
        self.prefix = f"models/{dataset}/{model}"

    # -- names ------------------------------------------------------------------------------
    def key(self, number: int, name: str) -> str:
        return f"{self.prefix}/{number:06d}/{name}"

    def uri(self, number: int) -> str:
        return self.store.uri(f"{self.prefix}/{number:06d}/")

    @property
    def pointer_key(self) -> str:
        return f"{self.prefix}/promoted.json"

    # -- reading ----------------------------------------------------------------------------
    def numbers(self) -> list[int]:
        """Every claimed model number (complete or not), ascending."""
        out = []
        for p in self.store.list_prefixes(f"{self.prefix}/"):
            m = _NUM_RE.search(p)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def promoted(self) -> Promoted | None:
        """The pointer, checked: an object whose ``version`` is a positive integer.

        Raises:
            UntrustedInput: promoted.json is not such an object."""
        info = self.store.head(self.pointer_key)
        if info is None:
            return None
        pointer = self.store.get_json(self.pointer_key)
        where = self.store.uri(self.pointer_key)
        if not isinstance(pointer, dict):
            raise UntrustedInput(f"{where} holds {type(pointer).__name__}, not an object; "
                                 "rewrite it or delete it to train from scratch")
        return Promoted(model_number(pointer.get("version"), where), info.etag, pointer)

    def meta(self, number: int) -> dict[str, Any]:
        meta = self.store.get_json(self.key(number, "meta.json"))
        if not isinstance(meta, dict):
            raise UntrustedInput(f"{self.store.uri(self.key(number, 'meta.json'))} holds "
                                 f"{type(meta).__name__}, not an object (model {number})")
        return meta

    def weights(self, number: int) -> dict[str, Any]:
        return self._tensors(number, "weights.safetensors")

    def optimizer(self, number: int) -> dict[str, Any]:
        return self._tensors(number, "optimizer.safetensors")

    def _tensors(self, number: int, name: str) -> dict[str, Any]:
        key = self.key(number, name)
        try:
            from shardline.trainer.checkpoint import bytes_to_tensors

            return bytes_to_tensors(self.store.get_bytes(key))
        except CheckpointError as exc:
            raise UntrustedInput(f"model {number} of {self.prefix.removeprefix('models/')}: "
                                 f"{self.store.uri(key)} is not a safetensors file ({exc}); "
                                 "restore it, or point promoted.json at another model "
                                 "number") from exc

    # -- writing ----------------------------------------------------------------------------
    def claim(self, run_id: str) -> int:
        """Take the next free model number (retries past numbers taken concurrently)."""
        n = (self.numbers() or [0])[-1] + 1
        for _ in range(100):
            body = json_bytes({"run": run_id, "at": now_iso()})
            try:
                self.store.put_bytes(self.key(n, "claim.json"), body, if_none_match=True,
                                     content_type="application/json")
                return n
            except ObjectExists:
                if self._is_own_write(self.key(n, "claim.json"), body):
                    return n
                n += 1
        raise StoreError(f"could not claim a model number under s3://{self.store.bucket}/"
                         f"{self.prefix}/ after 100 tries; is another job looping?")

    def save(self, number: int, weights: bytes, optimizer: bytes, meta: dict[str, Any]) -> str:
        """Write a claimed model; meta.json last. Returns the folder's s3:// URI."""
        self.store.put_bytes(self.key(number, "weights.safetensors"), weights)
        self.store.put_bytes(self.key(number, "optimizer.safetensors"), optimizer)
        key, body = self.key(number, "meta.json"), json_bytes(meta)
        try:
            self.store.put_bytes(key, body, if_none_match=True, content_type="application/json")
        except ObjectExists:
            if not self._is_own_write(key, body):
                raise
        return self.uri(number)

    def _is_own_write(self, key: str, body: bytes) -> bool:
        """A conditional PUT met an object (412): is it this call's own write, landed on an
        attempt whose reply was lost (botocore retried it)? Bodies carry a run id or a
        timestamp, so equal bytes mean the same writer."""
        try:
            return self.store.get_bytes(key) == body
        except StoreError:
            return False

    def promote(self, number: int, expected: Promoted | None, why: dict[str, Any],
                move: dict[str, Any] | None = None) -> None:
        """Point ``promoted.json`` at model ``number`` if it still is what ``expected`` saw.

        The pointer keeps the log of every move (``"moves"``, the last :data:`MOVES_KEPT`):
        when, ``from`` -> ``to``, the ``action`` (promote, rollback, pin) and ``by`` whom
        (``move`` names them; default: a promotion by the gate of a training run).

        Raises:
            ObjectExists / ObjectChanged: another run moved the pointer first.
        """
        at = now_iso()
        entry = {"at": at, "action": "promote", "by": "gate (training run)", **(move or {}),
                 "from": expected.number if expected else None, "to": number}
        body = json_bytes({"version": number, "at": at, **why,
                           "moves": [*moves(expected), entry][-MOVES_KEPT:]})
        try:
            if expected is None:
                self.store.put_bytes(self.pointer_key, body, if_none_match=True,
                                     content_type="application/json")
            else:
                self.store.put_bytes(self.pointer_key, body, if_match=expected.etag,
                                     content_type="application/json")
        except (ObjectExists, ObjectChanged):
            if not self._is_own_write(self.pointer_key, body):   # a lost reply, not a race
                raise

    # -- in-progress checkpoints ------------------------------------------------------------
    # One object per save (tensors, with the JSON state in the safetensors header), named by
    # its step: a save never overwrites another, so a resume takes the highest step there
    # is, whatever order writes landed in (a second process with the same run key, e.g. one
    # orphaned by a killed worker, cannot move it back by saving an older step later).
    # Older saves are deleted only after a newer one is written.
    def progress_prefix(self, run_key: str) -> str:
        return f"{self.prefix}/progress/{run_key}/"

    def progress_key(self, run_key: str, step: int) -> str:
        return f"{self.progress_prefix(run_key)}step-{step:09d}.safetensors"

    def progress_steps(self, run_key: str) -> list[int]:
        """Steps with a saved state for ``run_key``, ascending."""
        found = (_STEP_RE.search(o.key) for o in self.store.list(self.progress_prefix(run_key)))
        return sorted(int(m.group(1)) for m in found if m)

    def save_progress(self, run_key: str, step: int, tensors: dict[str, Any],
                      state: dict[str, Any]) -> str:
        """Write the state at ``step``, then drop older saves; returns the key."""
        key = self.progress_key(run_key, step)
        from shardline.trainer.checkpoint import tensors_to_bytes

        data = tensors_to_bytes(tensors, {"state": json_bytes(state).decode()})
        # ObjectExists: this step is saved already (same inputs, same step: same state)
        with contextlib.suppress(ObjectExists):
            self.store.put_bytes(key, data, if_none_match=True)
        self.store.delete([self.progress_key(run_key, s) for s in self.progress_steps(run_key)
                           if s < step])
        return key

    def load_progress(self, run_key: str
                      ) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
        """(key, tensors, state) of the highest-step save for ``run_key``, or None."""
        steps = self.progress_steps(run_key)
        if not steps:
            return None
        key = self.progress_key(run_key, steps[-1])
        data = self.store.get_bytes(key)
        from shardline.trainer.checkpoint import bytes_to_tensors

        try:
            return key, bytes_to_tensors(data), json.loads(header_metadata(data)["state"])
        except (CheckpointError, KeyError, ValueError) as exc:
            raise UntrustedInput(f"in-progress state {self.store.uri(key)} cannot be read "
                                 f"({exc}); delete it to restart the run from its "
                                 "beginning") from exc

    def clear_progress(self, run_key: str) -> None:
        self.store.delete([o.key for o in self.store.list(self.progress_prefix(run_key))])
