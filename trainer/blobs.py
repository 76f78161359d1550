"""What the registry reads and writes around checkpoints without torch: the error, a
safetensors blob's header metadata (its JSON header, read by hand), canonical JSON bytes.
Kept apart from :mod:`shardline.trainer.checkpoint` (which builds and loads tensors) so
that listing the registry (``shardline models``, ``shardline.list_models``) needs no torch.
"""

from __future__ import annotations

import json
from typing import Any

from shardline.core.errors import ShardlineError


class CheckpointError(ShardlineError):
    """A stored checkpoint cannot be loaded into the current model/optimizer."""


def header_metadata(data: bytes) -> dict[str, str]:
    """The string metadata of a safetensors blob (its JSON header's ``__metadata__``)."""
    n = int.from_bytes(data[:8], "little")
    if n <= 0 or n > len(data) - 8:
        raise CheckpointError(f"not a safetensors blob (header length {n}, {len(data)} bytes)")
    return dict(json.loads(data[8:8 + n]).get("__metadata__") or {})


def json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, default=str).encode()
