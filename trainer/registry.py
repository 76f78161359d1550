"""The model registry in the object store, and the in-progress checkpoints of running jobs.

    models/<dataset>/<model>/<NNNNNN>/claim.json            the number is taken (If-None-Match)
    models/<dataset>/<model>/<NNNNNN>/weights.safetensors
    models/<dataset>/<model>/<NNNNNN>/optimizer.safetensors
    models/<dataset>/<model>/<NNNNNN>/meta.json             written last: the model exists
    models/<dataset>/<model>/promoted.json                  {"version": N, ...}; CAS-updated
    models/<dataset>/<model>/progress/<run key>/state.{safetensors,json}

``NNNNNN`` is the *model number* (1, 2, ...; never a dataset version). The stored field
names keep their first spelling: ``"version"`` in promoted.json and ``"model_version"`` in
meta.json hold the model number. A model number is claimed before anything is written
under it, so two concurrent runs never write into the same folder. The promoted pointer is
created with ``If-None-Match: *`` and then only replaced with ``If-Match: <ETag it was
read with>``: a promotion based on a stale view of the pointer fails instead of
overwriting a newer decision.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from shardline.core.errors import ObjectExists, StoreError
from shardline.core.manifest import now_iso
from shardline.core.store import ObjectStore
from shardline.trainer.checkpoint import (
    bytes_to_tensors,
    header_metadata,
    json_bytes,
    tensors_to_bytes,
)

_NUM_RE = re.compile(r"/(\d{6})/$")


@dataclass(frozen=True)
class Promoted:
    number: int                        # model number the pointer names
    etag: str
    pointer: dict[str, Any]


class ModelRegistry:
    def __init__(self, store: ObjectStore, dataset: str, model: str) -> None:
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
        info = self.store.head(self.pointer_key)
        if info is None:
            return None
        pointer = self.store.get_json(self.pointer_key)
        return Promoted(int(pointer["version"]), info.etag, pointer)

    def meta(self, number: int) -> dict[str, Any]:
        return dict(self.store.get_json(self.key(number, "meta.json")))

    def weights(self, number: int) -> dict[str, Any]:
        return bytes_to_tensors(self.store.get_bytes(self.key(number, "weights.safetensors")))

    def optimizer(self, number: int) -> dict[str, Any]:
        return bytes_to_tensors(self.store.get_bytes(self.key(number, "optimizer.safetensors")))

    # -- writing ----------------------------------------------------------------------------
    def claim(self, run_id: str) -> int:
        """Take the next free model number (retries past numbers taken concurrently)."""
        n = (self.numbers() or [0])[-1] + 1
        for _ in range(100):
            try:
                self.store.put_json(self.key(n, "claim.json"), {"run": run_id, "at": now_iso()},
                                    if_none_match=True)
                return n
            except ObjectExists:
                n += 1
        raise StoreError(f"could not claim a model number under s3://{self.store.bucket}/"
                         f"{self.prefix}/ after 100 tries; is another job looping?")

    def save(self, number: int, weights: bytes, optimizer: bytes, meta: dict[str, Any]) -> str:
        """Write a claimed model; meta.json last. Returns the folder's s3:// URI."""
        self.store.put_bytes(self.key(number, "weights.safetensors"), weights)
        self.store.put_bytes(self.key(number, "optimizer.safetensors"), optimizer)
        self.store.put_bytes(self.key(number, "meta.json"), json_bytes(meta),
                             if_none_match=True, content_type="application/json")
        return self.uri(number)

    def promote(self, number: int, expected: Promoted | None, why: dict[str, Any]) -> None:
        """Point ``promoted.json`` at model ``number`` if it still is what ``expected`` saw.

        Raises:
            ObjectExists / ObjectChanged: another run moved the pointer first.
        """
        body = json_bytes({"version": number, "at": now_iso(), **why})
        if expected is None:
            self.store.put_bytes(self.pointer_key, body, if_none_match=True,
                                 content_type="application/json")
        else:
            self.store.put_bytes(self.pointer_key, body, if_match=expected.etag,
                                 content_type="application/json")

    # -- in-progress checkpoints ------------------------------------------------------------
    # One object per save (tensors, with the JSON state in the safetensors header): a save
    # is atomic, so a run killed while saving resumes from the previous save.
    def progress_key(self, run_key: str) -> str:
        return f"{self.prefix}/progress/{run_key}/state.safetensors"

    def save_progress(self, run_key: str, tensors: dict[str, Any], state: dict[str, Any]) -> None:
        data = tensors_to_bytes(tensors, {"state": json_bytes(state).decode()})
        self.store.put_bytes(self.progress_key(run_key), data)

    def load_progress(self, run_key: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """(tensors, state) saved by an interrupted run with this key, or None."""
        if self.store.head(self.progress_key(run_key)) is None:
            return None
        data = self.store.get_bytes(self.progress_key(run_key))
        return bytes_to_tensors(data), json.loads(header_metadata(data)["state"])

    def clear_progress(self, run_key: str) -> None:
        self.store.delete([self.progress_key(run_key)])
