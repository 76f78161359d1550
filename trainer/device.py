"""Device placement: CUDA when present (bf16 autocast, channels-last, pinned non_blocking
copies), else CPU in float32. Everything device-specific in the trainer goes through here."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from shardline.trainer.dist import DistInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    device: torch.device
    amp: bool               # bf16 autocast
    channels_last: bool

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        if self.amp:
            with torch.autocast(self.device.type, dtype=torch.bfloat16):
                yield
        else:
            yield

    def to_device(self, x: torch.Tensor) -> torch.Tensor:
        """Host batch tensor -> device (asynchronous from pinned memory on CUDA)."""
        return x.to(self.device, non_blocking=self.cuda)

    def prepare(self, model: nn.Module) -> nn.Module:
        model = model.to(self.device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        return model


def choose(requested: str | None, info: DistInfo, amp: bool = True) -> Placement:
    """``requested`` ("cuda", "cpu", "cuda:1") or the best available device for this rank."""
    if requested:
        device = torch.device(requested)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device {requested!r} was asked for but CUDA is not available")
    elif torch.cuda.is_available():
        device = torch.device("cuda", info.local_rank % torch.cuda.device_count())
    else:
        device = torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)     # backend flags: trainer.accel.apply_backends
        return Placement(device, amp=amp and torch.cuda.is_bf16_supported(), channels_last=True)
    return Placement(device, amp=False, channels_last=False)
