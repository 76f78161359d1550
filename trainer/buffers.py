"""Reusable batch buffers that every consumer (training stream, evaluation, notebook loader)
fills, and the typed batch tensors (one per column, see ``trainer.columns``) viewing them."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from shardline.trainer.columns import Layout

_ALIGN = 64     # each column's region starts on a cache line (and any dtype's alignment)


class BufferPool:
    """Reusable batch buffers (pinned if asked): one allocation per batch holding a
    ``[batch_size, nbytes]`` region per column of ``layout``.

    A fresh 38 MB buffer per 224x224x3 batch costs more than the gather itself (page faults;
    torch.empty is slower still), so consumers hand a batch back with :meth:`release` once
    its tensors are no longer read (on CUDA: after the host-to-device copy, via an event).
    Buffers that are never released are simply garbage-collected; the pool holds at most
    ``max_free`` idle buffers.
    """

    def __init__(self, batch_size: int, layout: Layout, pin: bool = False,
                 max_free: int = 8) -> None:
        self.batch_size, self.layout = batch_size, layout
        self.pin, self.max_free = pin, max_free
        self.offsets: list[int] = []
        total = 0
        for width in layout.widths:
            total = -(-total // _ALIGN) * _ALIGN
            self.offsets.append(total)
            total += batch_size * width
        self.total = max(total, 1)
        self._first = layout.columns[0].name
        self._free: deque[tuple[torch.Tensor, Any]] = deque()
        self._owned: dict[int, torch.Tensor] = {}
        self._views: dict[int, tuple[list[np.ndarray], dict[str, torch.Tensor]]] = {}
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
            buf = torch.empty(self.total, dtype=torch.uint8, pin_memory=True)
        else:  # numpy's allocation is several times faster than torch.empty for big buffers
            buf = torch.from_numpy(np.empty(self.total, np.uint8))
        with self._lock:
            self._owned[buf.data_ptr()] = buf
            self.allocated += 1
        return buf

    def views(self, buf: torch.Tensor) -> tuple[list[np.ndarray], dict[str, torch.Tensor]]:
        """(per column: numpy ``[B, nbytes]`` region to gather into; the full batch's typed
        tensors by name) of a buffer of this pool, made once per buffer: creating torch
        views costs microseconds, a sizeable part of a small batch."""
        ptr = buf.data_ptr()
        got = self._views.get(ptr)
        if got is None:
            raw = self._regions(buf)
            got = self._views[ptr] = ([r.numpy() for r in raw],
                                      {c.name: c.view(r) for c, r in
                                       zip(self.layout.columns, raw, strict=True)})
        return got

    def batch(self, buf: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
        """The typed tensors of the first ``n`` samples of a buffer (a short batch)."""
        _, full = self.views(buf)
        if n == self.batch_size:
            return dict(full)
        return {name: t[:n] for name, t in full.items()}

    def _regions(self, buf: torch.Tensor) -> list[torch.Tensor]:
        b = self.batch_size
        return [buf[o:o + b * w].view(b, w)
                for o, w in zip(self.offsets, self.layout.widths, strict=True)]

    def release(self, item: torch.Tensor | Mapping[str, Any], event: Any = None) -> None:
        """Return the buffer behind ``item`` (a batch, or any of its column tensors).

        ``event``: a CUDA event recorded after the last read (e.g. the non_blocking copy)."""
        t = item[self._first] if isinstance(item, Mapping) else item
        ptr = t.data_ptr()
        with self._lock:
            buf = self._owned.get(ptr)
            if buf is None:
                ptr = t.untyped_storage().data_ptr()
                buf = self._owned.get(ptr)
                if buf is None:
                    return
            if len(self._free) < self.max_free:
                self._free.append((buf, event))
            else:
                del self._owned[ptr]
                self._views.pop(ptr, None)
