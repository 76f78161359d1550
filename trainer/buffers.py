"""Reusable batch buffers that every consumer (training stream, evaluation) fills, and the
``[B, C, H, W]`` view the model takes."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import numpy as np
import torch


class BufferPool:
    """Reusable batch image buffers ``[batch_size, nbytes]`` uint8 (pinned if asked).

    A fresh 38 MB buffer per 224x224x3 batch costs more than the gather itself (page faults;
    torch.empty is slower still), so consumers hand a batch back with :meth:`release` once
    its images are no longer read (on CUDA: after the host-to-device copy, via an event).
    Buffers that are never released are simply garbage-collected; the pool holds at most
    ``max_free`` idle buffers.
    """

    def __init__(self, batch_size: int, nbytes: int, pin: bool = False, max_free: int = 8) -> None:
        self.shape = (batch_size, nbytes)
        self.pin, self.max_free = pin, max_free
        self._free: deque[tuple[torch.Tensor, Any]] = deque()
        self._owned: dict[int, torch.Tensor] = {}
        self._views: dict[int, tuple[np.ndarray, torch.Tensor]] = {}
        self._lock = threading.Lock()
        self.allocated = 0

    def acquire(self) -> torch.Tensor:
        with self._lock:
            item = self._free.popleft() if self._free else None
        if item is not None:
            buf, event = item
            if event is not None:
                event.synchronize()
            return buf
        if self.pin:
            buf = torch.empty(self.shape, dtype=torch.uint8, pin_memory=True)
        else:  # numpy's allocation is several times faster than torch.empty for big buffers
            buf = torch.from_numpy(np.empty(self.shape, np.uint8))
        with self._lock:
            self._owned[buf.data_ptr()] = buf
            self.allocated += 1
        return buf

    def views(self, buf: torch.Tensor, shape: tuple[int, ...]
              ) -> tuple[np.ndarray, torch.Tensor]:
        """(numpy view, full-batch [B, C, H, W] view) of a buffer of this pool, made once per
        buffer: creating torch views costs microseconds, a sizeable part of a small batch."""
        ptr = buf.data_ptr()
        got = self._views.get(ptr)
        if got is None:
            got = self._views[ptr] = (buf.numpy(), as_nchw(buf, shape))
        return got

    def release(self, images: torch.Tensor, event: Any = None) -> None:
        """Return the buffer behind ``images`` (a batch's image tensor) for reuse.

        ``event``: a CUDA event recorded after the last read (e.g. the non_blocking copy)."""
        ptr = images.data_ptr()
        with self._lock:
            buf = self._owned.get(ptr)
            if buf is None:
                ptr = images.untyped_storage().data_ptr()
                buf = self._owned.get(ptr)
                if buf is None:
                    return
            if len(self._free) < self.max_free:
                self._free.append((buf, event))
            else:
                del self._owned[ptr]
                self._views.pop(ptr, None)


def as_nchw(images: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """[B, H*W*C] HWC bytes -> [B, C, H, W] view in channels-last memory format (no copy)."""
    h, w, c = shape
    return images.view(-1, h, w, c).permute(0, 3, 1, 2)
